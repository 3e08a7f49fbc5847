# Over 400 lines: per ONNX op of the subset, a small function and what it allocates, with their two tables.
"""The float reference: the ONNX subset evaluated in float64, in a fixed order.

Calibration statistics decide every integer of an imported model, so the
values they come from must not depend on the machine: no BLAS, no numpy
reductions whose summation order is an implementation detail.  Every sum
here is a sequence of elementwise IEEE float64 additions in an order this file
fixes (dot products run over K in order; pooling sums over the taps in window
order, global sums as a fixed pairwise tree), and every other operation is a
single correctly rounded IEEE operation (+, -, *, /, sqrt, max), so the
results are the same bits on every platform and numpy version.

One function per op, ``(node, args, opset) -> outputs``; ``FLOAT_OPS`` is the
table.  The same functions fold constant subgraphs (shape arithmetic).
``HOLDS`` gives, per op, the shapes of the arrays it will allocate, so that the
evaluator refuses a run over its memory budget before numpy allocates anything.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np
from numpy.lib.stride_tricks import as_strided

from isa.attrs import parse_attrs
from isa.errors import InvalidError, LimitError, Rejected, require
from isa.ops.nn import MAX_ATTR
from isa.ops.pool import MaxPoolAttrs, max_pool_kernel, max_pool_shape
from isa.types import MAX_SIZE, TensorType, shape_size
from cvmvm.importer.graph import Graph, Node
from cvmvm.vm.verify import DEFAULT_MEMORY_LIMIT

# Bytes of float64 arrays one run of the float model may hold at once: what the VM lets one run of
# a model hold by default.
FLOAT_MEMORY = DEFAULT_MEMORY_LIMIT

Args = list[Any]


def attr(node: Node, name: str, default: Any = None) -> Any:
    return node.attrs.get(name, default)


def unsupported(node: Node, what: str) -> InvalidError:
    return InvalidError("onnx_attr", f"{node.label}: {what}")


def as_float(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) if x.dtype.kind == "f" else x


# -- fixed-order sums ----------------------------------------------------------------


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b for a (..., M, K) and b (..., K, N), each output a dot product over K in order."""
    # The loop runs over a's K: a longer b would lose rows, a shorter one (an empty one too) would
    # make the slices broadcast into a wrong or empty result rather than fail.
    require(a.shape[-1] == b.shape[-2], f"inner dimensions differ: {list(a.shape)} times {list(b.shape)}")
    acc = a[..., :, 0:1] * b[..., 0:1, :]
    for k in range(1, a.shape[-1]):
        acc = acc + a[..., :, k:k + 1] * b[..., k:k + 1, :]
    return acc


def tree_sum(x: np.ndarray, axis: int) -> np.ndarray:
    """The sum over one axis by a fixed pairwise tree: halves added elementwise, the odd one carried."""
    x = np.moveaxis(x, axis, 0)
    while x.shape[0] > 1:
        half = x.shape[0] // 2
        paired = x[:half] + x[half:2 * half]
        x = np.concatenate([paired, x[2 * half:]]) if x.shape[0] % 2 else paired
    return x[0]


# -- geometry shared with the lowering ---------------------------------------------------


def spatial_pads(node: Node, spatial: tuple[int, ...], kernel: tuple[int, ...], strides: tuple[int, ...],
                 dilations: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(begins, ends) of the padding, from ``pads`` or ``auto_pad``."""
    r = len(spatial)
    auto = attr(node, "auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = tuple(attr(node, "pads", [0] * (2 * r)))
        if len(pads) != 2 * r or min(pads, default=0) < 0:
            raise unsupported(node, f"pads={list(pads)} must be {2 * r} values >= 0")
        return pads[:r], pads[r:]
    if auto == "VALID":
        return (0,) * r, (0,) * r
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise unsupported(node, f"auto_pad={auto!r}")
    begins, ends = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + d * (k - 1) + 1 - size)
        small = total // 2
        begins.append(small if auto == "SAME_UPPER" else total - small)
        ends.append(total - begins[-1])
    return tuple(begins), tuple(ends)


def window_attrs(node: Node, x_shape: tuple[int, ...], kernel: tuple[int, ...] | None = None):
    """kernel, strides, dilations, (pad begins, pad ends) of a Conv or pool over x's spatial axes."""
    r = len(x_shape) - 2
    kernel = tuple(kernel if kernel is not None else attr(node, "kernel_shape", ()))
    if len(kernel) != r:
        raise unsupported(node, f"kernel_shape={list(kernel)} for {r} spatial axes")
    strides = tuple(attr(node, "strides", [1] * r))
    dilations = tuple(attr(node, "dilations", [1] * r))
    # conv2d's domain (Conv and AveragePool lower to it), checked before numpy meets a stride it
    # cannot hold in a C long.
    if len(strides) != r or len(dilations) != r or min(strides + dilations + kernel) < 1 \
            or max(strides + dilations) >= MAX_ATTR:
        raise unsupported(node, f"strides={list(strides)}, dilations={list(dilations)} for {r} spatial axes: "
                                f"each in [1, {MAX_ATTR - 1}]")
    begins, ends = spatial_pads(node, x_shape[2:], kernel, strides, dilations)
    if max(begins + ends, default=0) >= MAX_ATTR:
        raise unsupported(node, f"padding {list(begins + ends)}: each in [0, {MAX_ATTR - 1}]")
    return kernel, strides, dilations, (begins, ends)


def window_geometry(x_shape: tuple[int, ...], kernel, strides, dilations,
                    pads) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The padded input's shape and the output's spatial dims, for 2 spatial axes."""
    begins, ends = pads
    padded = (*x_shape[:2], *(size + b + e for size, b, e in zip(x_shape[2:], begins, ends)))
    out = tuple((size - d * (k - 1) - 1) // s + 1 for size, k, s, d in zip(padded[2:], kernel, strides, dilations))
    if min(out) < 1:
        raise Rejected(f"the window {list(kernel)} does not fit the padded input {list(padded[2:])}")
    return padded, out


def windows(x: np.ndarray, kernel, strides, dilations, pads, fill: float = 0.0) -> np.ndarray:
    """(N, C, k0, k1, o0, o1) views of the padded input, for 2 spatial axes."""
    _, out = window_geometry(x.shape, kernel, strides, dilations, pads)
    begins, ends = pads
    padded = np.pad(x, ((0, 0), (0, 0)) + tuple(zip(begins, ends)), constant_values=fill)
    sn, sc, sy, sx = padded.strides
    return as_strided(padded, (*padded.shape[:2], *kernel, *out),
                      (sn, sc, sy * dilations[0], sx * dilations[1], sy * strides[0], sx * strides[1]),
                      writeable=False)


def as_2d(x: np.ndarray) -> np.ndarray:
    """A 1-D spatial tensor (N, C, L) as (N, C, 1, L); 2-D unchanged."""
    return x[:, :, None, :] if x.ndim == 3 else x


def spatial_2d(node: Node, x: np.ndarray, kernel=None):
    """window_attrs of x, raised to two spatial axes for 1-D."""
    if x.ndim not in (3, 4):
        raise unsupported(node, f"input of rank {x.ndim}: only 1-D and 2-D spatial inputs are supported")
    kernel, strides, dilations, (begins, ends) = window_attrs(node, x.shape, kernel)
    if x.ndim == 3:
        return (1, *kernel), (1, *strides), (1, *dilations), ((0, *begins), (0, *ends))
    return kernel, strides, dilations, (begins, ends)


# -- ops -----------------------------------------------------------------------------------


def conv(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    x, w = args[0], args[1]
    b = args[2] if len(args) > 2 else None
    group = attr(node, "group", 1)
    kernel, strides, dilations, pads = spatial_2d(node, x, w.shape[2:])
    x2 = as_2d(x)
    n, c = x2.shape[:2]
    oc = w.shape[0]
    if group < 1 or c % group or oc % group or w.shape[1] * group != c:
        raise unsupported(node, f"group={group} with {c} input and {oc} output channels, weight {list(w.shape)}")
    win = windows(x2, kernel, strides, dilations, pads)               # (N, C, kh, kw, oh, ow)
    oh, ow = win.shape[4:]
    ic = c // group
    patches = np.ascontiguousarray(win).reshape(n, group, 1, ic * kernel[0] * kernel[1], oh * ow)
    weights = w.reshape(group, oc // group, -1)[None, :, :, :, None]   # (1, G, OC/G, K, 1)
    acc = patches[:, :, :, 0] * weights[:, :, :, 0]
    for k in range(1, patches.shape[3]):
        acc = acc + patches[:, :, :, k] * weights[:, :, :, k]
    y = acc.reshape(n, oc, oh, ow)
    if b is not None:
        y = y + b.reshape(oc, 1, 1)
    return (y[:, :, 0, :] if x.ndim == 3 else y,)


def gemm(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    a, b = args[0], args[1]
    a = a.T if attr(node, "transA", 0) else a
    b = b.T if attr(node, "transB", 0) else b
    y = np.float64(attr(node, "alpha", 1.0)) * matmul(a, b)
    if len(args) > 2 and args[2] is not None:
        y = y + np.float64(attr(node, "beta", 1.0)) * args[2]
    return (y,)


def matmul_op(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    a, b = args
    if a.ndim < 2 or b.ndim < 2:
        raise unsupported(node, f"MatMul of ranks {a.ndim} and {b.ndim}: both must be at least 2")
    return (matmul(a, b),)


def batch_norm(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    x, scale, bias, mean, var = args[:5]
    if attr(node, "training_mode", 0):
        raise unsupported(node, "training_mode=1")
    shape = (-1,) + (1,) * (x.ndim - 2)
    eps = np.float64(attr(node, "epsilon", 1e-5))
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * scale.reshape(shape) + bias.reshape(shape)
    return (y,)


def relu(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    return (np.maximum(args[0], 0.0),)


def clip_bounds(node: Node, args: Args, opset: int) -> tuple[float, float]:
    if opset < 11:
        return float(attr(node, "min", -np.inf)), float(attr(node, "max", np.inf))
    lo = args[1] if len(args) > 1 and args[1] is not None else None
    hi = args[2] if len(args) > 2 and args[2] is not None else None
    return (-np.inf if lo is None else float(lo)), (np.inf if hi is None else float(hi))


def clip(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    lo, hi = clip_bounds(node, args, opset)
    return (np.minimum(np.maximum(args[0], lo), hi),)


def max_pool_attrs(node: Node, x_shape: tuple[int, ...]) -> MaxPoolAttrs:
    """ONNX MaxPool's attributes as the ISA's max_pool record (MAXPOOL.md follows ONNX)."""
    r = len(x_shape) - 2
    if attr(node, "storage_order", 0) != 0:
        raise unsupported(node, "storage_order=1 (column-major indices)")
    raw = {"kernel_shape": list(attr(node, "kernel_shape", [])), "strides": list(attr(node, "strides", [1] * r)),
           "dilations": list(attr(node, "dilations", [1] * r)), "pads": list(attr(node, "pads", [0] * (2 * r))),
           "auto_pad": attr(node, "auto_pad", "NOTSET") or "NOTSET", "ceil_mode": attr(node, "ceil_mode", 0),
           "storage_order": 0, "index_axis": 0, "index_dtype": "int64"}
    try:
        a = parse_attrs(MaxPoolAttrs, raw, fill_defaults=False)
        max_pool_shape(a, TensorType(tuple(x_shape), None, "float64"))
    except InvalidError as e:
        raise unsupported(node, e.message) from None
    except Rejected as e:
        raise unsupported(node, str(e)) from None
    return a


def max_pool(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    x = args[0]
    return max_pool_kernel(max_pool_attrs(node, x.shape), x)


def average_pool_geometry(node: Node, x_shape: tuple[int, ...]):
    """kernel, strides, pads (2-D) of an AveragePool, refusing what the lowering cannot express."""
    if tuple(attr(node, "dilations", [1] * (len(x_shape) - 2))) != (1,) * (len(x_shape) - 2):
        raise unsupported(node, "dilations other than 1")
    kernel, strides, dilations, pads = spatial_2d(node, np.empty(x_shape, dtype=np.int8))
    if attr(node, "ceil_mode", 0):
        for size, k, s, b, e in zip(x_shape[-2:] if len(x_shape) == 4 else (1, x_shape[-1]),
                                    kernel, strides, *pads):
            span = size + b + e - k
            if span % s:
                raise unsupported(node, "ceil_mode=1 where it adds a partial window")
    return kernel, strides, pads


def average_pool(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    x = args[0]
    kernel, strides, pads = average_pool_geometry(node, x.shape)
    x2 = as_2d(x)
    win = windows(x2, kernel, strides, (1, 1), pads)
    real = windows(np.ones((1, 1, *x2.shape[2:])), kernel, strides, (1, 1), pads)
    total, count = win[:, :, 0, 0], real[:, :, 0, 0]
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            if i or j:
                total = total + win[:, :, i, j]
                count = count + real[:, :, i, j]
    if attr(node, "count_include_pad", 0):
        count = np.full_like(count, kernel[0] * kernel[1])
    y = total / count
    return (y[:, :, 0, :] if x.ndim == 3 else y,)


def global_average_pool(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    x = args[0]
    flat = x.reshape(*x.shape[:2], -1)
    y = tree_sum(flat, 2) / np.float64(flat.shape[2])
    return (y.reshape(*x.shape[:2], *([1] * (x.ndim - 2))),)


def add(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    return (args[0] + args[1],)


def sub(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    return (args[0] - args[1],)


def mul(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    return (args[0] * args[1],)


def div(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    a, b = args
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return (np.trunc(a / b).astype(np.int64),)
    return (a / b,)


def concat(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    return (np.concatenate(args, axis=attr(node, "axis")),)


def flatten_shape(node: Node, shape: tuple[int, ...]) -> tuple[int, int]:
    axis = attr(node, "axis", 1)
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis <= len(shape):
        raise unsupported(node, f"axis={attr(node, 'axis', 1)} for rank {len(shape)}")
    return int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64))


def flatten(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    return (args[0].reshape(flatten_shape(node, args[0].shape)),)


def reshape_target(node: Node, shape: tuple[int, ...], target: np.ndarray) -> tuple[int, ...]:
    """ONNX Reshape: 0 copies the input's dim (unless allowzero), -1 is inferred."""
    out = [int(d) for d in target.reshape(-1)]
    if not attr(node, "allowzero", 0):
        out = [shape[i] if d == 0 and i < len(shape) else d for i, d in enumerate(out)]
    size = int(np.prod(shape, dtype=np.int64))
    if out.count(-1) == 1:
        rest = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        out[out.index(-1)] = size // rest if rest else 0
    if min(out, default=1) < 0 or int(np.prod(out, dtype=np.int64)) != size:
        raise unsupported(node, f"shape {[int(d) for d in target.reshape(-1)]} does not fit an input of shape "
                                f"{list(shape)}")
    return tuple(out)


def reshape(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    return (args[0].reshape(reshape_target(node, args[0].shape, args[1])),)


def transpose(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    x = args[0]
    perm = attr(node, "perm", list(range(x.ndim))[::-1])
    return (np.transpose(x, perm),)


def _axes(node: Node, args: Args, opset: int) -> list[int] | None:
    if opset >= 13:
        return None if len(args) < 2 or args[1] is None else [int(a) for a in args[1]]
    axes = attr(node, "axes")
    return None if axes is None else list(axes)


def squeeze_shape(node: Node, shape: tuple[int, ...], axes: list[int] | None) -> tuple[int, ...]:
    if axes is None:
        return tuple(d for d in shape if d != 1)
    norm = {a + len(shape) if a < 0 else a for a in axes}
    if any(not 0 <= a < len(shape) or shape[a] != 1 for a in norm):
        raise unsupported(node, f"axes={axes} for shape {list(shape)}")
    return tuple(d for i, d in enumerate(shape) if i not in norm)


def squeeze(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    x = args[0]
    return (x.reshape(squeeze_shape(node, x.shape, _axes(node, args, opset))),)


def unsqueeze_shape(node: Node, shape: tuple[int, ...], axes: list[int] | None) -> tuple[int, ...]:
    if axes is None:
        raise unsupported(node, "no axes")
    rank = len(shape) + len(axes)
    norm = sorted({a + rank if a < 0 else a for a in axes})
    if len(norm) != len(axes) or any(not 0 <= a < rank for a in norm):
        raise unsupported(node, f"axes={axes} for shape {list(shape)}")
    out = list(shape)
    for a in norm:
        out.insert(a, 1)
    return tuple(out)


def unsqueeze(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    x = args[0]
    return (x.reshape(unsqueeze_shape(node, x.shape, _axes(node, args, opset))),)


def pad_spec(node: Node, args: Args, opset: int, rank: int) -> tuple[str, tuple[int, ...], float]:
    """(mode, pads, constant value) of a Pad, from attributes (opset < 11) or inputs."""
    mode = attr(node, "mode", "constant")
    if opset < 11:
        pads, value = tuple(attr(node, "pads", ())), float(attr(node, "value", 0.0))
    else:
        pads = tuple(int(p) for p in args[1])
        value = float(args[2]) if len(args) > 2 and args[2] is not None and args[2].size else 0.0
        if len(args) > 3 and args[3] is not None:
            raise unsupported(node, "the axes input")
    # A Pad lowers only into conv2d's padding, which stops below MAX_ATTR.
    if len(pads) != 2 * rank or min(pads) < 0 or max(pads) >= MAX_ATTR:
        raise unsupported(node, f"pads={list(pads)} for rank {rank}: each in [0, {MAX_ATTR - 1}] (negative pads crop)")
    return mode, pads, value


def pad(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    x = args[0]
    mode, pads, value = pad_spec(node, args, opset, x.ndim)
    widths = tuple(zip(pads[:x.ndim], pads[x.ndim:]))
    if mode == "constant":
        return (np.pad(x, widths, constant_values=value),)
    if mode == "reflect":
        return (np.pad(x, widths, mode="reflect"),)
    if mode == "edge":
        return (np.pad(x, widths, mode="edge"),)
    raise unsupported(node, f"mode={mode!r}")


def identity(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    return (args[0],)


CAST_TYPES = {1: np.float32, 10: np.float16, 11: np.float64, 6: np.int32, 7: np.int64}


def cast(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    to = CAST_TYPES.get(attr(node, "to"))
    if to is None:
        raise unsupported(node, f"to={attr(node, 'to')}")
    x = args[0]
    if np.dtype(to).kind == "f":
        return (x.astype(to).astype(np.float64) if x.dtype.kind == "f" else x.astype(np.float64),)
    return (np.trunc(x).astype(to) if x.dtype.kind == "f" else x.astype(to),)


def shape(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    dims = np.array(args[0].shape, dtype=np.int64)
    return (dims[attr(node, "start", 0):attr(node, "end", None)],)


def gather(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    data, idx = args
    axis = attr(node, "axis", 0)
    return (np.take(data, np.where(idx < 0, idx + data.shape[axis], idx), axis=axis),)


def constant(node: Node, args: Args, opset: int) -> tuple[np.ndarray, ...]:
    for key, conv_ in (("value", np.asarray), ("value_float", lambda v: np.array(v, dtype=np.float32)),
                       ("value_floats", lambda v: np.array(v, dtype=np.float32)),
                       ("value_int", lambda v: np.array(v, dtype=np.int64)),
                       ("value_ints", lambda v: np.array(v, dtype=np.int64))):
        if key in node.attrs:
            return (as_float(conv_(node.attrs[key])),)
    raise unsupported(node, "a Constant without a tensor, float or int value")


FloatOp = Callable[[Node, Args, int], tuple[np.ndarray, ...]]

FLOAT_OPS: dict[str, FloatOp] = {
    "Conv": conv, "Gemm": gemm, "MatMul": matmul_op, "BatchNormalization": batch_norm,
    "Relu": relu, "Clip": clip, "MaxPool": max_pool, "AveragePool": average_pool,
    "GlobalAveragePool": global_average_pool, "Add": add, "Mul": mul, "Sub": sub, "Div": div,
    "Concat": concat, "Flatten": flatten, "Reshape": reshape, "Transpose": transpose,
    "Squeeze": squeeze, "Unsqueeze": unsqueeze, "Pad": pad, "Identity": identity, "Dropout": identity,
    "Cast": cast, "Shape": shape, "Gather": gather, "Constant": constant,
}


# -- what each op allocates ------------------------------------------------------------------
# The arrays an op holds at once besides its inputs, as shapes of float64 arrays: a sum being formed
# and the term added into it count twice.

Shapes = list[tuple[int, ...]]


def _matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(a[:-2], b[:-2])) + (a[-2], b[-1])


def conv_holds(node: Node, args: Args, opset: int) -> Shapes:
    x, w = args[0], args[1]
    kernel, strides, dilations, pads = spatial_2d(node, x, w.shape[2:])
    padded, out = window_geometry(as_2d(x).shape, kernel, strides, dilations, pads)
    y = (padded[0], w.shape[0], *out)
    return [padded, (*padded[:2], *kernel, *out), y, y, y]


def gemm_holds(node: Node, args: Args, opset: int) -> Shapes:
    a, b = args[0].shape, args[1].shape
    y = _matmul_shape(a[::-1] if attr(node, "transA", 0) else a, b[::-1] if attr(node, "transB", 0) else b)
    if len(args) > 2 and args[2] is not None:
        y = tuple(np.broadcast_shapes(y, args[2].shape))
    return [y, y, y]


def matmul_holds(node: Node, args: Args, opset: int) -> Shapes:
    a, b = args[0].shape, args[1].shape
    # Ranks below 2 are matmul_op's to refuse, by name.
    return [_matmul_shape(a, b)] * 3 if len(a) >= 2 and len(b) >= 2 else []


def max_pool_holds(node: Node, args: Args, opset: int) -> Shapes:
    x = args[0]
    y = max_pool_shape(max_pool_attrs(node, x.shape), TensorType(tuple(x.shape), None, "float64"))[0]
    return [x.shape, y, y, y, y]


def average_pool_holds(node: Node, args: Args, opset: int) -> Shapes:
    x = args[0]
    kernel, strides, pads = average_pool_geometry(node, x.shape)
    padded, out = window_geometry(as_2d(x).shape, kernel, strides, (1, 1), pads)
    y = (*padded[:2], *out)
    return [padded, (1, 1, *padded[2:]), y, y, y, y]


def elementwise_holds(node: Node, args: Args, opset: int) -> Shapes:
    y = tuple(np.broadcast_shapes(*(a.shape for a in args if a is not None)))
    return [y, y]


def first_holds(node: Node, args: Args, opset: int) -> Shapes:
    """Ops whose result is the size of their first input (a reshape copies what is not contiguous)."""
    return [args[0].shape] * 3


def pad_holds(node: Node, args: Args, opset: int) -> Shapes:
    x = args[0]
    _, pads, _ = pad_spec(node, args, opset, x.ndim)
    return [tuple(d + b + e for d, b, e in zip(x.shape, pads[:x.ndim], pads[x.ndim:]))]


def gather_holds(node: Node, args: Args, opset: int) -> Shapes:
    data, idx = args
    axis = attr(node, "axis", 0)
    axis = axis + data.ndim if axis < 0 else axis
    return [data.shape[:axis] + idx.shape + data.shape[axis + 1:]]


HOLDS: dict[str, Callable[[Node, Args, int], Shapes]] = {
    "Conv": conv_holds, "Gemm": gemm_holds, "MatMul": matmul_holds, "BatchNormalization": first_holds,
    "Relu": elementwise_holds, "Clip": elementwise_holds, "MaxPool": max_pool_holds,
    "AveragePool": average_pool_holds, "GlobalAveragePool": first_holds, "Add": elementwise_holds,
    "Mul": elementwise_holds, "Sub": elementwise_holds, "Div": elementwise_holds,
    "Concat": lambda node, args, opset: [(sum(a.size for a in args if a is not None),)], "Flatten": first_holds,
    "Reshape": first_holds, "Transpose": first_holds, "Squeeze": first_holds, "Unsqueeze": first_holds,
    "Pad": pad_holds, "Identity": lambda node, args, opset: [], "Dropout": lambda node, args, opset: [],
    "Cast": first_holds, "Shape": lambda node, args, opset: [], "Gather": gather_holds,
    "Constant": lambda node, args, opset: [np.shape(v) for v in node.attrs.values()],
}


def room(where: str, live: int, shapes: Shapes) -> int:
    """Bytes held once ``shapes`` are allocated on top of ``live`` bytes; refused over the limits."""
    for shape in shapes:
        if shape_size(shape) > MAX_SIZE:
            raise LimitError("size", f"{where}: the float model's tensor of shape {list(shape)} holds more than "
                                     f"2^30 elements")
    total = live + 8 * sum(shape_size(shape) for shape in shapes)
    if total > FLOAT_MEMORY:
        raise LimitError("memory", f"{where}: the float model would hold {total} bytes here, over the importer's "
                                   f"budget of {FLOAT_MEMORY}")
    return total


class Evaluator:
    """Runs a graph in float64; constants are converted once and shared by every run."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.peak = 0   # the most bytes a run held, activations counted as if none were a view
        self.constants = {k: as_float(v) for k, v in graph.constants.items()}
        last: dict[str, int] = {}
        for n in graph.nodes:
            for t in n.inputs:
                last[t] = n.index
        keep = set(graph.outputs)
        self.free_after: dict[int, list[str]] = {}
        for t, i in last.items():
            if t not in keep and t not in self.constants:
                self.free_after.setdefault(i, []).append(t)

    def run(self, feeds: Mapping[str, np.ndarray],
            observe: Callable[[Node, str, np.ndarray], None] | None = None) -> dict[str, np.ndarray]:
        """The graph's outputs for float64 feeds; ``observe(node, name, value)`` sees every node output.

        NaN and infinity flow on without numpy's warnings: the observers refuse them, naming the node.
        """
        env: dict[str, np.ndarray] = dict(self.constants)
        env.update(feeds)
        held = {k: v.nbytes for k, v in feeds.items()}
        live = sum(held.values())
        for node in self.graph.nodes:
            fn = FLOAT_OPS.get(node.op)
            if fn is None:
                raise InvalidError("onnx_op", f"{node.label}: op {node.op} is not in the importer's subset")
            holds = HOLDS[node.op]
            args = [env[t] if t else None for t in node.inputs]
            try:
                self.peak = max(self.peak, room(node.label, live, holds(node, args, self.graph.opset)))
                with np.errstate(all="ignore"):
                    results = fn(node, args, self.graph.opset)
            except Rejected as e:
                raise unsupported(node, str(e)) from None
            except (ValueError, IndexError, TypeError, KeyError, ZeroDivisionError, OverflowError) as e:
                # Attributes and shapes the checks above do not cover (a perm out of range, operands
                # that do not broadcast): numpy says what is wrong, and the node is named.
                raise InvalidError("onnx_attr", f"{node.label}: does not evaluate on inputs of shapes "
                                                f"{[None if a is None else list(a.shape) for a in args]}: "
                                                f"{type(e).__name__}: {e}") from None
            for t, v in zip(node.outputs, results):
                if t:
                    env[t] = v
                    held[t] = v.nbytes
                    live += v.nbytes
                    if observe is not None:
                        observe(node, t, v)
            for t in self.free_after.get(node.index, ()):
                env.pop(t, None)
                live -= held.pop(t, 0)
        return {t: env[t] for t in self.graph.outputs}
