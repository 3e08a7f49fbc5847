# Over 400 lines: the lowering context and one function per ONNX op of the subset, with their one table.
"""ONNX nodes -> CVM instructions, with every scale decided from calibration.

Each ONNX tensor becomes one of: a quantized tensor (integers q meaning
q * scale, a CVM tensor of known precision, with a bound on its error against
the float model), a constant (an initializer or folded at import: in
``Lowering.constants``), a raw integer tensor (MaxPool indices), or a zero Pad
waiting for its Conv.  One function per ONNX op, in ``LOWER``; a Conv or Gemm
takes a following BatchNormalization and Relu/Clip with it, so the
requantization lands on the activation's range.

Error bounds: ``QTensor.error`` bounds |q * scale - float value| for inputs
within the calibrated range, propagated op by op (a weighted sum adds
sum |w| * input error + sum |w - w_q| * max |x| + the rescale's rounding;
max, relu, clip and reshapes pass it through).  The report prints it next to
the error it measures.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, cast

import numpy as np

from isa.errors import InvalidError, UsageError, shown
from isa.types import MAX_PRECISION, bitlen, precision_bound, round_half_away
from serializer.model import Model
from cvmvm.importer import floateval as fe
from cvmvm.importer.graph import STANDARD_DOMAINS, Graph, Node
from cvmvm.importer.program import Builder
from cvmvm.importer.quant import (Rescale, Term, activation_scale, min_precision, plan_rescale, quantize_values,
                                  quantize_weights)

MAX_OPERAND_PRECISION = 8  # conv2d and dense multiply int8 by int8 (isa.ops.nn)


@dataclass(frozen=True)
class Options:
    bits: int = 8            # activations (and the input): at most 8, since conv2d/dense take int8 operands
    weight_bits: int = 8
    output_bits: int = 16    # tensors that are only graph outputs (logits) keep more resolution

    def __post_init__(self) -> None:
        for name, lo, hi in (("bits", 2, MAX_OPERAND_PRECISION), ("weight_bits", 2, MAX_OPERAND_PRECISION),
                             ("output_bits", 2, MAX_PRECISION - 1)):
            value = getattr(self, name)
            if type(value) is not int or not lo <= value <= hi:
                # shown: repr of an integer of more than 4,300 digits raises ValueError.
                raise UsageError("argument", f"{name}={shown(value)} must be an integer in [{lo}, {hi}]")


@dataclass(frozen=True)
class QTensor:
    ref: int
    scale: float
    precision: int
    shape: tuple[int, ...]
    error: float       # bound on |q * scale - float|, float units
    peak: float        # the calibrated max |float| of the tensor it stands for


@dataclass(frozen=True)
class Raw:
    """An integer tensor without a scale (MaxPool's indices): it may only be a graph output."""

    ref: int
    shape: tuple[int, ...]


@dataclass(frozen=True)
class PendingPad:
    """A zero Pad on spatial axes, waiting to be folded into the Conv that reads it."""

    node: Node
    tensor: QTensor
    begins: tuple[int, ...]
    ends: tuple[int, ...]


Value = QTensor | Raw | PendingPad


@dataclass(frozen=True)
class Layer:
    """One quantization point, for the report."""

    tensor: str              # the ONNX tensor whose float values it approximates
    nodes: tuple[str, ...]   # the ONNX nodes it covers
    value: QTensor
    widest: int              # the widest intermediate precision on the way


# -- lowering -----------------------------------------------------------------------------


@dataclass
class Lowering:
    graph: Graph
    shapes: dict[str, tuple[int, ...]]     # every tensor's shape at the model's batch
    constants: dict[str, np.ndarray]       # initializers and folded tensors (float64 or int64)
    peaks: dict[str, float]                # calibrated max |x| of every activation
    options: Options
    builder: Builder = field(default_factory=Builder)
    env: dict[str, Value] = field(default_factory=dict)
    fused: set[int] = field(default_factory=set)
    layers: list[Layer] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.consumers = self.graph.consumers()
        self.outputs = set(self.graph.outputs)

    # -- lookups

    def activation(self, node: Node, name: str) -> QTensor:
        if name in self.constants:
            raise InvalidError("onnx_op", f"{node.label}: input {name!r} is a constant where an activation "
                                          f"is expected")
        v = self.env[name]
        if isinstance(v, PendingPad):
            raise InvalidError("onnx_op", f"{v.node.label}: a zero Pad folds only into the Conv that reads it, "
                                          f"not into {node.label}")
        if isinstance(v, Raw):
            raise InvalidError("onnx_op", f"{node.label}: input {name!r} is MaxPool indices; only a graph output "
                                          f"may take them")
        return v

    def constant(self, node: Node, k: int, what: str) -> np.ndarray:
        name = node.inputs[k] if k < len(node.inputs) else ""
        if name not in self.constants:
            raise InvalidError("onnx_op", f"{node.label}: the {what} ({name!r}) must be a constant")
        return self.constants[name].astype(np.float64)

    def optional_constant(self, node: Node, k: int, what: str) -> np.ndarray | None:
        if k >= len(node.inputs) or not node.inputs[k]:
            return None
        return self.constant(node, k, what)

    def sole_consumer(self, name: str, ops: tuple[str, ...]) -> Node | None:
        """The one node reading ``name``, when it is one of ``ops`` and ``name`` is not a graph output."""
        users = self.consumers.get(name, [])
        if len(users) == 1 and users[0].op in ops and name not in self.outputs:
            return users[0]
        return None

    def target(self, name: str) -> tuple[float, int]:
        """(scale, precision) of a quantization point that produces ``name``: graph outputs nothing
        else reads keep output_bits (logits), every other activation gets bits."""
        precision = self.options.output_bits if name in self.outputs and not self.consumers.get(name) \
            else self.options.bits
        return activation_scale(self.peaks[name], precision), precision

    def precision(self, ref: int) -> int:
        # The builder types every tensor it emits as CVM int32, with a precision.
        return cast(int, self.builder.types[ref].precision)

    def shape(self, ref: int) -> tuple[int, ...]:
        return self.builder.types[ref].shape

    # -- emission

    def emit(self, node: Node, op: str, attrs: dict[str, Any], inputs: list[int], step: str = "") -> int:
        return self.emit_all(node, op, attrs, inputs, step)[0]

    def emit_all(self, node: Node, op: str, attrs: dict[str, Any], inputs: list[int], step: str = "") -> list[int]:
        base = node.name or f"{node.op}_{node.index}"
        return self.builder.emit(node.label, op, attrs, inputs, f"{base}/{step}" if step else base)

    def param(self, node: Node, what: str, value: np.ndarray) -> int:
        return self.builder.param(f"{node.name or f'{node.op}_{node.index}'}.{what}", value)

    def rescale(self, node: Node, refs: list[int], plan: Rescale, shapes: list[tuple[int, ...]]) -> tuple[int, int]:
        """Emit ``plan`` over the operands ``refs`` (multiplier k of shape shapes[k]); (result, widest precision)."""
        x = refs
        if plan.pre_shift:
            x = [self.emit(node, "cvm_right_shift", {"precision": plan.pre_precision, "shift_bit": plan.pre_shift},
                           refs, "preshift")]
        elif len(refs) == 1 and plan.pre_precision < self.precision(refs[0]):
            x = [self.emit(node, "cvm_clip", {"precision": plan.pre_precision}, refs, "preclip")]
        terms = []
        for k, (r, m, shape) in enumerate(zip(x, plan.multipliers, shapes)):
            if np.all(m == 1):
                terms.append(r)
                continue
            m = np.broadcast_to(m, shape)
            if np.all(m == m.reshape(-1)[0]):
                m = m.reshape(-1)[:1]
            terms.append(self.emit(node, "broadcast_mul", {}, [r, self.param(node, f"multiplier{k}", m)],
                                   f"scale{k}" if len(refs) > 1 else "scale"))
        acc = terms[0]
        for k, t in enumerate(terms[1:], start=1):
            acc = self.emit(node, "broadcast_add", {}, [acc, t], f"sum{k}")
        if plan.offset is not None:
            acc = self.emit(node, "broadcast_add", {}, [acc, self.param(node, "offset", plan.offset)], "offset")
        widest = self.precision(acc)
        return self.emit(node, "cvm_right_shift", {"precision": plan.precision, "shift_bit": plan.shift},
                         [acc], "requant"), widest

    # -- activations that follow a quantization point

    def activation_chain(self, name: str) -> tuple[str, list[Node]]:
        """The Relu/Clip nodes that alone follow ``name``, one after another, and the tensor they end in."""
        chain: list[Node] = []
        nxt = self.sole_consumer(name, ("Relu", "Clip"))
        while nxt is not None and (nxt.op == "Relu" or self.constant_bounds(nxt)):
            chain.append(nxt)
            name = nxt.outputs[0]
            nxt = self.sole_consumer(name, ("Relu", "Clip"))
        self.fused.update(n.index for n in chain)
        return name, chain

    def constant_bounds(self, node: Node) -> bool:
        return all(not t or t in self.constants for t in node.inputs[1:])

    def bounds(self, node: Node) -> tuple[float, float]:
        if node.op == "Relu":
            return 0.0, np.inf
        if not self.constant_bounds(node):
            raise InvalidError("onnx_op", f"{node.label}: min and max must be constants")
        args = [None] + [self.constants.get(t) if t else None for t in node.inputs[1:]]
        return fe.clip_bounds(node, args, self.graph.opset)

    def clip(self, node: Node, q: QTensor, lo: float, hi: float, peak: float) -> QTensor:
        """clip(x, lo, hi) on q * scale, with the bounds rounded to steps (half a step of error at most)."""
        bound = precision_bound(q.precision)
        a = int(np.clip(round_half_away(lo / q.scale), -bound, bound)) if np.isfinite(lo) else -bound
        b = int(np.clip(round_half_away(hi / q.scale), -bound, bound)) if np.isfinite(hi) else bound
        exact = (lo in (0.0, -np.inf)) and hi == np.inf
        error = q.error + (0.0 if exact else q.scale / 2)
        if a == -bound and b == bound:
            return replace(q, error=error, peak=peak)
        if a == 0 and b == bound:
            return replace(q, ref=self.emit(node, "relu", {}, [q.ref]), error=error, peak=peak)
        if a >= b:
            raise InvalidError("onnx_attr", f"{node.label}: bounds [{lo}, {hi}] are empty at scale {q.scale:.6g}")
        ref = self.emit(node, "clip", {"a_min": a, "a_max": b}, [q.ref])
        if self.precision(ref) > q.precision:  # clip's rule gives 2^k - 1 one bit more than it needs
            ref = self.emit(node, "cvm_clip", {"precision": q.precision}, [ref], "precision")
        return replace(q, ref=ref, error=error, peak=peak)

    def finish_point(self, final: str, nodes: list[Node], chain: list[Node], q: QTensor, widest: int) -> QTensor:
        """Apply the fused activations, bind ``final`` and note the quantization point for the report."""
        for n in chain:
            q = self.clip(n, q, *self.bounds(n), peak=self.peaks[n.outputs[0]])
        self.env[final] = q
        self.layers.append(Layer(final, tuple(n.label for n in nodes + chain), q, widest))
        return q

    def rescaled(self, node: Node, terms: list[tuple[int, np.ndarray]], offset: np.ndarray | None,
                 input_error: float) -> QTensor:
        """round(sum_i x_i * ratio_i + offset) onto the range of the node's output (after its fused
        activations); ratios and offset are in float units per step of x_i and float units."""
        final, chain = self.activation_chain(node.outputs[0])
        scale, precision = self.target(final)
        plan = plan_rescale([Term(self.precision(r), np.asarray(ratio, dtype=np.float64) / scale)
                             for r, ratio in terms],
                            None if offset is None else offset / scale, precision, node.label)
        ref, widest = self.rescale(node, [r for r, _ in terms], plan, [np.shape(ratio) for _, ratio in terms])
        q = QTensor(ref, scale, precision, self.shape(ref), input_error + scale * plan.error,
                    self.peaks[node.outputs[0]])
        return self.finish_point(final, [node], chain, q, widest)

    # -- the whole graph

    def run(self, input_names: list[str]) -> tuple[Model, list[float | None], list[float | None]]:
        """Lower every node; the model, its input scales and its output scales (None: indices)."""
        input_scales: list[float | None] = []
        for name in input_names:
            bits = self.options.bits
            scale = activation_scale(self.peaks[name], bits)
            shape = self.shapes[name]
            self.env[name] = QTensor(self.builder.input(name, shape, bits), scale, bits, shape, scale / 2,
                                     self.peaks[name])
            input_scales.append(scale)
        for node in self.graph.nodes:
            if node.index in self.fused or all(not t or t in self.constants for t in node.outputs):
                continue
            lower = LOWER.get(node.op)
            if lower is None:
                raise InvalidError("onnx_op", f"{node.label}: op {node.op} on activations is not in the "
                                              f"importer's subset")
            lower(self, node)
        refs: list[int] = []
        output_scales: list[float | None] = []
        for name in self.graph.outputs:
            v = self.env.get(name)
            if isinstance(v, QTensor):
                output_scales.append(v.scale)
            elif isinstance(v, Raw):
                output_scales.append(None)
            else:
                raise InvalidError("onnx_op", f"graph output {name!r} is a constant or a Pad; nothing to compute")
            refs.append(v.ref)
        return self.builder.finish(refs), input_scales, output_scales


# -- one function per ONNX op ------------------------------------------------------------


def weighted(ctx: Lowering, node: Node, x: QTensor, w: np.ndarray, b: np.ndarray | None,
             core: Callable[[int, int, int | None], int], channels: tuple[int, ...], out: str,
             nodes: list[Node]) -> QTensor:
    """Quantize w per output channel (axis 0), emit the GEMM ``core`` (weight, data, bias refs ->
    accumulator), and rescale it per channel onto the output's range.

    The bias goes into the GEMM at the accumulator's scale when the accumulator still fits 32 bits;
    a bias that large next to its weights (the sum then hardly matters) goes into the rescale as an
    offset at the output's scale instead.  Error per channel: sum |w_q| * x.error
    + sum |w_q - w| * max |x| + the bias's rounding + the rescale's.
    """
    finite(node, "the weights and bias, with the constants folded into them,", w, b)
    final, chain = ctx.activation_chain(out)
    w_q, w_scale = quantize_weights(w, ctx.options.weight_bits)
    acc_scale = x.scale * w_scale
    terms = w.size // w.shape[0]
    product = x.precision + min_precision(w_q) + bitlen(terms)   # conv2d's and dense's precision rule
    b_q = None if b is None else quantize_values(b, acc_scale)
    in_gemm = b_q is not None and max(product, min_precision(b_q)) + 1 <= MAX_PRECISION
    acc = core(ctx.param(node, "weight", w_q), x.ref,
               ctx.param(node, "bias", b_q) if b_q is not None and in_gemm else None)
    scale, precision = ctx.target(final)
    offset = None if b is None or in_gemm else (b / scale).reshape(channels)
    plan = plan_rescale([Term(ctx.precision(acc), (acc_scale / scale).reshape(channels))], offset, precision,
                        node.label)
    ref, widest = ctx.rescale(node, [acc], plan, [channels])
    w_deq = w_q * w_scale.reshape((-1,) + (1,) * (w.ndim - 1))
    per_channel = (fe.tree_sum(np.abs(w_deq).reshape(w.shape[0], -1), 1) * x.error
                   + fe.tree_sum(np.abs(w_deq - w).reshape(w.shape[0], -1), 1) * x.peak)
    if b is not None and b_q is not None and in_gemm:
        per_channel = per_channel + np.abs(b_q * acc_scale - b)
    q = QTensor(ref, scale, precision, ctx.shape(ref), float(np.max(per_channel)) + scale * plan.error,
                ctx.peaks[out])
    return ctx.finish_point(final, nodes, chain, q, max(widest, ctx.precision(acc)))


def lower_conv(ctx: Lowering, node: Node) -> None:
    """Conv (1-D as 2-D with H = 1), with a preceding zero Pad and a following BatchNormalization folded in."""
    v = ctx.env.get(node.inputs[0])
    nodes = [node]
    in_shape = ctx.shapes[node.inputs[0]]
    w = ctx.constant(node, 1, "weight")
    b = ctx.optional_constant(node, 2, "bias")
    kernel, strides, dilations, (begins, ends) = fe.spatial_2d(node, np.empty(in_shape, dtype=np.int8), w.shape[2:])
    if isinstance(v, PendingPad):
        lead = (0,) if len(in_shape) == 3 else ()
        begins = tuple(p + q for p, q in zip(begins, lead + v.begins))
        ends = tuple(p + q for p, q in zip(ends, lead + v.ends))
        nodes.insert(0, v.node)
        x = v.tensor
    else:
        x = ctx.activation(node, node.inputs[0])
    if begins != ends:
        raise InvalidError("onnx_attr", f"{node.label}: asymmetric padding (begins {list(begins)}, ends "
                                        f"{list(ends)}); conv2d pads both sides equally")
    group = fe.attr(node, "group", 1)
    out = node.outputs[0]
    bn = ctx.sole_consumer(out, ("BatchNormalization",))
    if bn is not None and all(t in ctx.constants for t in bn.inputs[1:5]):
        w, b = fold_batch_norm(ctx, bn, w, b)
        ctx.fused.add(bn.index)
        nodes.append(bn)
        out = bn.outputs[0]
    oc = w.shape[0]
    one_d = len(in_shape) == 3

    def core(w_ref: int, x_ref: int, b_ref: int | None) -> int:
        if one_d:
            x_ref = ctx.emit(node, "expand_dims", {"axis": 2}, [x_ref], "as2d")
        attrs = {"channels": oc, "kernel_size": list(kernel), "strides": list(strides), "padding": list(begins),
                 "dilation": list(dilations), "groups": group, "use_bias": b_ref is not None}
        return ctx.emit(node, "conv2d", attrs, [x_ref, w_ref] + ([b_ref] if b_ref is not None else []))

    q = weighted(ctx, node, x, w.reshape(oc, w.shape[1], *kernel), b, core, (oc, 1, 1), out, nodes)
    if one_d:
        ref = ctx.emit(node, "squeeze", {"axis": [2]}, [q.ref], "as1d")
        ctx.env[ctx.layers[-1].tensor] = replace(q, ref=ref, shape=ctx.shape(ref))


def fold_batch_norm(ctx: Lowering, bn: Node, w: np.ndarray, b: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """W' = W * g, b' = (b - mean) * g + beta, with g = scale / sqrt(var + eps) per output channel."""
    g, shift = batch_norm_affine(ctx, bn)
    b = np.zeros(w.shape[0]) if b is None else b
    return w * g.reshape((-1,) + (1,) * (w.ndim - 1)), b * g + shift


def batch_norm_affine(ctx: Lowering, node: Node) -> tuple[np.ndarray, np.ndarray]:
    """BatchNormalization as y = g * x + shift per channel."""
    scale, beta, mean, var = (ctx.constant(node, k, what) for k, what in
                              ((1, "scale"), (2, "bias"), (3, "mean"), (4, "variance")))
    if fe.attr(node, "training_mode", 0) or not fe.attr(node, "spatial", 1):
        raise InvalidError("onnx_attr", f"{node.label}: training_mode=1 or spatial=0")
    g = scale / np.sqrt(var + np.float64(fe.attr(node, "epsilon", 1e-5)))
    shift = beta - mean * g
    finite(node, "scale / sqrt(variance + epsilon) and bias - mean * that", g, shift)
    return g, shift


def finite(node: Node, what: str, *values: np.ndarray | None) -> None:
    """Refuse NaN or infinity that finite constants combine into (a negative variance, alpha = inf)."""
    if not all(np.all(np.isfinite(v)) for v in values if v is not None):
        raise InvalidError("onnx_weight", f"{node.label}: {what} hold NaN or infinity")


def lower_batch_norm(ctx: Lowering, node: Node) -> None:
    """A BatchNormalization no Conv absorbed: one per-channel affine rescale."""
    x = ctx.activation(node, node.inputs[0])
    g, shift = batch_norm_affine(ctx, node)
    shape = (-1,) + (1,) * (len(x.shape) - 2)
    ctx.rescaled(node, [(x.ref, (x.scale * g).reshape(shape))], shift.reshape(shape),
                 float(np.max(np.abs(g))) * x.error)


def dense(ctx: Lowering, node: Node, x: QTensor, w: np.ndarray, b: np.ndarray | None, out: str,
          nodes: list[Node]) -> None:
    """x (N, K) times w (units, K) transposed, plus b (units,)."""
    if len(x.shape) != 2:
        raise InvalidError("onnx_attr", f"{node.label}: the activation has shape {list(x.shape)}; dense takes "
                                        f"2-D (N, K)")
    units = w.shape[0]

    def core(w_ref: int, x_ref: int, b_ref: int | None) -> int:
        return ctx.emit(node, "dense", {"units": units, "use_bias": b_ref is not None},
                        [x_ref, w_ref] + ([b_ref] if b_ref is not None else []))

    weighted(ctx, node, x, w, b, core, (units,), out, nodes)


def per_unit(node: Node, c: np.ndarray, units: int) -> np.ndarray:
    if c.size == 1:
        return np.full(units, float(c.reshape(-1)[0]))
    if c.shape in ((units,), (1, units)):
        return c.reshape(units)
    raise InvalidError("onnx_attr", f"{node.label}: a bias of shape {list(c.shape)}; only a per-unit bias "
                                    f"({units},) is supported")


def lower_gemm(ctx: Lowering, node: Node) -> None:
    if fe.attr(node, "transA", 0):
        raise InvalidError("onnx_attr", f"{node.label}: transA=1 on an activation")
    x = ctx.activation(node, node.inputs[0])
    b = ctx.constant(node, 1, "B matrix")
    w = (b if fe.attr(node, "transB", 0) else b.T) * np.float64(fe.attr(node, "alpha", 1.0))
    c = ctx.optional_constant(node, 2, "C bias")
    bias = None if c is None else per_unit(node, c, w.shape[0]) * np.float64(fe.attr(node, "beta", 1.0))
    dense(ctx, node, x, w, bias, node.outputs[0], [node])


def lower_matmul(ctx: Lowering, node: Node) -> None:
    """MatMul by a constant matrix, with a following Add of a constant per-unit bias folded in."""
    x = ctx.activation(node, node.inputs[0])
    b = ctx.constant(node, 1, "right-hand matrix")
    if b.ndim != 2:
        raise InvalidError("onnx_attr", f"{node.label}: a right-hand matrix of rank {b.ndim}; only 2-D")
    out, nodes, bias = node.outputs[0], [node], None
    add = ctx.sole_consumer(out, ("Add",))
    if add is not None:
        other = add.inputs[1] if add.inputs[0] == out else add.inputs[0]
        if other in ctx.constants and ctx.constants[other].size in (1, b.shape[1]) \
                and ctx.constants[other].ndim <= 2:
            bias = per_unit(add, ctx.constants[other].astype(np.float64), b.shape[1])
            ctx.fused.add(add.index)
            nodes.append(add)
            out = add.outputs[0]
    dense(ctx, node, x, b.T, bias, out, nodes)


def operands(ctx: Lowering, node: Node) -> tuple[QTensor, str]:
    """A binary op's activation operand, and the other's name (a constant, if one of them is)."""
    a_name, b_name = node.inputs[:2]
    if a_name in ctx.constants:
        a_name, b_name = b_name, a_name
    return ctx.activation(node, a_name), b_name


def lower_add(ctx: Lowering, node: Node) -> None:
    a, b_name = operands(ctx, node)
    if b_name in ctx.constants:
        ctx.rescaled(node, [(a.ref, np.array([a.scale]))], ctx.constants[b_name].astype(np.float64), a.error)
        return
    b = ctx.activation(node, b_name)
    ctx.rescaled(node, [(a.ref, np.array([a.scale])), (b.ref, np.array([b.scale]))], None, a.error + b.error)


def lower_mul(ctx: Lowering, node: Node) -> None:
    a, b_name = operands(ctx, node)
    if b_name in ctx.constants:
        c = ctx.constants[b_name].astype(np.float64)
        ctx.rescaled(node, [(a.ref, a.scale * c)], None, float(np.max(np.abs(c))) * a.error)
        return
    b = ctx.activation(node, b_name)
    product = ctx.emit(node, "broadcast_mul", {}, [a.ref, b.ref], "product")
    error = a.peak * b.error + b.peak * a.error + a.error * b.error
    ctx.rescaled(node, [(product, np.array([a.scale * b.scale]))], None, error)


def lower_activation(ctx: Lowering, node: Node) -> None:
    """A Relu or Clip no rescale absorbed: integer bounds on the same scale."""
    q = ctx.clip(node, ctx.activation(node, node.inputs[0]), *ctx.bounds(node), peak=ctx.peaks[node.outputs[0]])
    ctx.env[node.outputs[0]] = q


def lower_max_pool(ctx: Lowering, node: Node) -> None:
    """max_pool2d where it means the same (2-D, no dilation, symmetric padding, floor, no indices), else
    max_pool; a max commutes with a positive scale, so the scale and error pass through."""
    x = ctx.activation(node, node.inputs[0])
    a = fe.max_pool_attrs(node, x.shape)
    indices = node.outputs[1] if len(node.outputs) > 1 and node.outputs[1] else ""
    r = len(x.shape) - 2
    if r == 2 and not indices and not a.ceil_mode and a.dilations == (1, 1) and a.auto_pad in ("NOTSET", "VALID") \
            and a.pads[:2] == a.pads[2:] and all(p < k for p, k in zip(a.pads, a.kernel_shape)):
        ref = ctx.emit(node, "max_pool2d", {"pool_size": list(a.kernel_shape), "strides": list(a.strides),
                                            "padding": list(a.pads[:2])}, [x.ref])
        ctx.env[node.outputs[0]] = replace(x, ref=ref, shape=ctx.shape(ref))
        return
    attrs = {"kernel_shape": list(a.kernel_shape), "strides": list(a.strides), "dilations": list(a.dilations),
             "pads": list(a.pads), "auto_pad": a.auto_pad, "ceil_mode": a.ceil_mode, "storage_order": 0,
             "index_axis": 0, "index_dtype": "int64"}
    values, index_ref = ctx.emit_all(node, "max_pool", attrs, [x.ref])
    ctx.env[node.outputs[0]] = replace(x, ref=values, shape=ctx.shape(values))
    if indices:
        if ctx.consumers.get(indices):
            raise InvalidError("onnx_op", f"{node.label}: its Indices output feeds other nodes; only a graph "
                                          f"output may take it")
        ctx.env[indices] = Raw(index_ref, ctx.shape(index_ref))


def real_taps(size: int, k: int, s: int, begin: int, out: int) -> np.ndarray:
    """Per output position of one axis, how many of its k taps fall inside [0, size)."""
    start = np.arange(out, dtype=np.int64) * s - begin
    return np.minimum(start + k, size) - np.maximum(start, 0)


def lower_average_pool(ctx: Lowering, node: Node) -> None:
    """Window sums by a depthwise conv2d with a kernel of ones, then a rescale by 1 / count per position."""
    x = ctx.activation(node, node.inputs[0])
    kernel, strides, (begins, ends) = fe.average_pool_geometry(node, x.shape)
    if begins != ends:
        raise InvalidError("onnx_attr", f"{node.label}: asymmetric padding (begins {list(begins)}, ends "
                                        f"{list(ends)})")
    c = x.shape[1]
    ref = x.ref if len(x.shape) == 4 else ctx.emit(node, "expand_dims", {"axis": 2}, [x.ref], "as2d")
    sums = ctx.emit(node, "conv2d", {"channels": c, "kernel_size": list(kernel), "strides": list(strides),
                                     "padding": list(begins), "groups": c, "use_bias": False},
                    [ref, ctx.param(node, "ones", np.ones((c, 1, *kernel), dtype=np.int32))], "sum")
    oh, ow = ctx.shape(sums)[2:]
    spatial = ctx.shape(ref)[2:]
    if fe.attr(node, "count_include_pad", 0) or not any(begins):
        count = np.array([float(kernel[0] * kernel[1])])
    else:
        count = np.outer(real_taps(spatial[0], kernel[0], strides[0], begins[0], oh),
                         real_taps(spatial[1], kernel[1], strides[1], begins[1], ow)).astype(np.float64)
    q = ctx.rescaled(node, [(sums, x.scale / count)], None, x.error)
    if len(x.shape) == 3:
        squeezed = ctx.emit(node, "squeeze", {"axis": [2]}, [q.ref], "as1d")
        ctx.env[ctx.layers[-1].tensor] = replace(q, ref=squeezed, shape=ctx.shape(squeezed))


def lower_global_average_pool(ctx: Lowering, node: Node) -> None:
    x = ctx.activation(node, node.inputs[0])
    if len(x.shape) < 3:
        raise InvalidError("onnx_attr", f"{node.label}: an input of rank {len(x.shape)} has no spatial axes")
    sums = ctx.emit(node, "sum", {"axis": list(range(2, len(x.shape))), "keepdims": True}, [x.ref], "sum")
    ctx.rescaled(node, [(sums, np.array([x.scale / float(np.prod(x.shape[2:]))]))], None, x.error)


def lower_concat(ctx: Lowering, node: Node) -> None:
    """Every part rescaled onto the output's range (constants quantized onto it), then concatenated."""
    final = node.outputs[0]
    scale, precision = ctx.target(final)
    bound = precision_bound(precision)
    parts, error, widest = [], 0.0, precision
    for k, t in enumerate(node.inputs):
        if t in ctx.constants:
            # Clipped to the bound first, so never too wide for quantize_values (never None).
            values = quantize_values(np.clip(ctx.constants[t].astype(np.float64) / scale, -bound, bound), 1.0)
            parts.append(ctx.param(node, f"part{k}", cast(np.ndarray, values)))
            error = max(error, scale / 2)
            continue
        x = ctx.activation(node, t)
        if x.scale == scale and x.precision <= precision:
            parts.append(x.ref)
            error = max(error, x.error)
            continue
        plan = plan_rescale([Term(x.precision, np.array([x.scale / scale]))], None, precision, node.label)
        ref, wide = ctx.rescale(node, [x.ref], plan, [(1,)])
        parts.append(ref)
        widest = max(widest, wide)
        error = max(error, x.error + scale * plan.error)
    axis = fe.attr(node, "axis")
    ref = ctx.emit(node, "concatenate", {"axis": axis + len(ctx.shapes[final]) if axis < 0 else axis}, parts)
    q = QTensor(ref, scale, ctx.precision(ref), ctx.shape(ref), error, ctx.peaks[final])
    ctx.env[final] = q
    ctx.layers.append(Layer(final, (node.label,), q, widest))


def lower_reshape(ctx: Lowering, node: Node) -> None:
    """Flatten, Reshape, Squeeze, Unsqueeze: the output shape is known, so one flatten or reshape."""
    x = ctx.activation(node, node.inputs[0])
    target = ctx.shapes[node.outputs[0]]
    if target == x.shape:
        ctx.env[node.outputs[0]] = x
        return
    if node.op == "Flatten" and len(x.shape) >= 2 and target == (x.shape[0], int(np.prod(x.shape[1:]))):
        ref = ctx.emit(node, "flatten", {}, [x.ref])
    else:
        ref = ctx.emit(node, "reshape", {"shape": list(target)}, [x.ref])
    ctx.env[node.outputs[0]] = replace(x, ref=ref, shape=ctx.shape(ref))


def lower_transpose(ctx: Lowering, node: Node) -> None:
    x = ctx.activation(node, node.inputs[0])
    perm = list(fe.attr(node, "perm", list(range(len(x.shape)))[::-1]))
    ref = ctx.emit(node, "transpose", {"axes": perm}, [x.ref])
    ctx.env[node.outputs[0]] = replace(x, ref=ref, shape=ctx.shape(ref))


def lower_pad(ctx: Lowering, node: Node) -> None:
    """A zero Pad of the spatial axes whose readers are all Conv nodes waits to be folded into them."""
    x = ctx.activation(node, node.inputs[0])
    if any(t and t not in ctx.constants for t in node.inputs[1:]):
        raise InvalidError("onnx_op", f"{node.label}: pads and value must be constants")
    args = [None] + [ctx.constants.get(t) if t else None for t in node.inputs[1:]]
    mode, pads, value = fe.pad_spec(node, args, ctx.graph.opset, len(x.shape))
    r = len(x.shape)
    users = ctx.consumers.get(node.outputs[0], [])
    if mode != "constant" or value != 0.0 or any(pads[:2]) or any(pads[r:r + 2]) or not users \
            or any(u.op != "Conv" or u.inputs[0] != node.outputs[0] for u in users) or node.outputs[0] in ctx.outputs:
        raise InvalidError("onnx_op", f"{node.label}: only a zero Pad of the spatial axes that feeds Conv nodes "
                                      f"is supported (it is folded into their padding)")
    ctx.env[node.outputs[0]] = PendingPad(node, x, tuple(pads[2:r]), tuple(pads[r + 2:]))


FLOAT_ROUNDING = {1: 2.0 ** -24, 10: 2.0 ** -11, 11: 0.0}  # Cast to float32, float16, float64: relative error


def lower_identity(ctx: Lowering, node: Node) -> None:
    """Identity, Dropout (inference) and Cast between float types change nothing in integers; a Cast
    rounds the float model's values, which the error bound accounts for."""
    x = ctx.activation(node, node.inputs[0])
    if node.op == "Cast":
        to = fe.attr(node, "to")
        if to not in FLOAT_ROUNDING:
            raise InvalidError("onnx_attr", f"{node.label}: Cast to element type {to}; activations stay float")
        x = replace(x, error=x.error + FLOAT_ROUNDING[to] * x.peak)
    ctx.env[node.outputs[0]] = x


LOWER: dict[str, Callable[[Lowering, Node], None]] = {
    "Conv": lower_conv, "Gemm": lower_gemm, "MatMul": lower_matmul, "BatchNormalization": lower_batch_norm,
    "Relu": lower_activation, "Clip": lower_activation, "MaxPool": lower_max_pool,
    "AveragePool": lower_average_pool, "GlobalAveragePool": lower_global_average_pool, "Add": lower_add,
    "Mul": lower_mul, "Concat": lower_concat, "Flatten": lower_reshape, "Reshape": lower_reshape,
    "Squeeze": lower_reshape, "Unsqueeze": lower_reshape, "Transpose": lower_transpose, "Pad": lower_pad,
    "Identity": lower_identity, "Dropout": lower_identity, "Cast": lower_identity,
}

# The attributes each op may carry (any other is refused by name).  Ops outside LOWER are accepted
# only where they fold into constants (shape arithmetic); on activations the lowering refuses them.
ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "Conv": ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"),
    "Gemm": ("alpha", "beta", "transA", "transB", "broadcast"),
    "MatMul": (), "Add": ("broadcast",), "Mul": ("broadcast",), "Sub": ("broadcast",), "Div": ("broadcast",),
    "BatchNormalization": ("epsilon", "momentum", "spatial", "is_test", "training_mode"),
    "Relu": (), "Clip": ("min", "max"),
    "MaxPool": ("auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"),
    "AveragePool": ("auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"),
    "GlobalAveragePool": (), "Concat": ("axis",), "Flatten": ("axis",), "Reshape": ("allowzero",),
    "Squeeze": ("axes",), "Unsqueeze": ("axes",), "Transpose": ("perm",), "Pad": ("mode", "pads", "value"),
    "Identity": (), "Dropout": ("ratio", "is_test", "seed"), "Cast": ("to", "saturate"),
    "Shape": ("start", "end"), "Gather": ("axis",),
    "Constant": ("value", "value_float", "value_floats", "value_int", "value_ints"),
}


# How many outputs the float evaluator and the lowering give an op: 1 unless listed.  The others
# (Dropout's mask, BatchNormalization's running statistics) may be declared, not used.
COMPUTED_OUTPUTS = {"MaxPool": 2}


def check_supported(graph: Graph) -> None:
    """Every node's op and attributes are in the subset, its constant inputs are finite, and no output
    it is not given is read or is a graph output."""
    consumers = graph.consumers()
    for node in graph.nodes:
        if node.domain not in STANDARD_DOMAINS or node.op not in ATTRIBUTES:
            domain = f" of domain {node.domain!r}" if node.domain not in STANDARD_DOMAINS else ""
            raise InvalidError("onnx_op", f"{node.label}: op {node.op}{domain} is not in the importer's subset")
        extra = sorted(set(node.attrs) - set(ATTRIBUTES[node.op]))
        if extra:
            raise InvalidError("onnx_attr", f"{node.label}: attribute {extra[0]!r} is not supported")
        for t in node.inputs:
            value = graph.constants.get(t)
            if value is not None and value.dtype.kind == "f" and not np.all(np.isfinite(value)):
                raise InvalidError("onnx_weight", f"{node.label}: constant {t!r} holds NaN or infinity")
        for t in node.outputs[COMPUTED_OUTPUTS.get(node.op, 1):]:
            if t and (t in consumers or t in graph.outputs):
                raise InvalidError("onnx_op", f"{node.label}: output {t!r} is read or is a graph output; the "
                                              f"importer does not compute it")
