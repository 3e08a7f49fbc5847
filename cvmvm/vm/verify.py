"""Verification: a decoded Model becomes a checked Program, or a CvmError.

Every static rule runs here, before any kernel: graph structure, op arity,
attribute records, dtype, shape and precision inference, the size limits and
the cost ("ops", SEMANTICS.md section 3).  Execution accepts only a Program.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from isa.errors import InputError, InternalError, InvalidError, LimitError, Rejected
from isa.spec import OpDef, int32_only
from isa.table import OP_BY_NAME
from isa.types import DTYPES, INT32, MAX_OPS, MAX_PRECISION, MIN_PRECISION, TensorType, check_shape, precision_bound
from serializer.model import Input, Instr, Model, Param, Scales

MAX_BASE_COST = 1 << 30
VARIABLE_COST = 5  # ops per element of every input and param, and of every op output


@dataclass(frozen=True)
class Limits:
    """Caller-chosen budgets on top of the ISA's own limits."""

    ops: int | None = None  # reject a model whose cost exceeds this, before running it


@dataclass(frozen=True)
class Step:
    """One verified instruction: everything execution needs, nothing it must re-check."""

    index: int
    op: OpDef
    attrs: Any
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    out_types: tuple[TensorType, ...]
    plan: Any
    cost: int  # this instruction's share of the total ops
    name: str
    run: Callable[..., tuple[np.ndarray, ...]]


@dataclass(frozen=True)
class Program:
    model: Model
    types: tuple[TensorType, ...]       # every tensor id
    steps: tuple[Step, ...]
    ops: int
    # After step i runs, the tensors in free_after[i] are dead (no later step or
    # output reads them) and execution drops them.
    free_after: tuple[tuple[int, ...], ...]

    @property
    def input_types(self) -> tuple[TensorType, ...]:
        return self.types[: len(self.model.inputs)]

    @property
    def output_types(self) -> tuple[TensorType, ...]:
        return tuple(self.types[t] for t in self.model.outputs)


def check_tensor_type(t: TensorType, what: str) -> None:
    """The ISA's value limits, shared by variables and op outputs."""
    if t.dtype not in DTYPES:
        raise InvalidError("dtype", f"{what}: unknown dtype {t.dtype!r}")
    check_shape(t.shape, what)
    if t.dtype == INT32:
        if t.precision is not None and not MIN_PRECISION <= t.precision <= MAX_PRECISION:
            raise InvalidError("precision", f"{what}: precision {t.precision} must be in [1, 32]")
    elif t.precision is not None:
        raise InvalidError("precision", f"{what}: dtype {t.dtype} carries no precision, got {t.precision}")


def check_param_value(name: str, t: TensorType, value: np.ndarray) -> None:
    if value.dtype != DTYPES[t.dtype] or tuple(value.shape) != t.shape:
        raise InternalError("param", f"param {name}: value {value.dtype}{value.shape} does not match {t}")
    if t.precision is not None and value.size:
        bound = precision_bound(t.precision)
        lo, hi = int(value.min()), int(value.max())
        if lo < -bound or hi > bound:
            bad = lo if lo < -bound else hi
            raise InvalidError("param", f"param {name}: value {bad} outside precision {t.precision} (+-{bound})")


def check_scales(model: Model, scales: Scales, types: list[TensorType]) -> None:
    """FORMAT.md 1.6: one scale or None per input and output, each finite and > 0, and only on CVM int32 tensors."""
    for what, values, ids in (("input", scales.inputs, range(len(model.inputs))),
                              ("output", scales.outputs, model.outputs)):
        if len(values) != len(ids):
            raise InvalidError("scale", f"{len(values)} {what} scales for {len(ids)} {what}s")
        for k, (scale, t) in enumerate(zip(values, ids)):
            if scale is None:
                continue
            if type(scale) is not float or not (math.isfinite(scale) and scale > 0):
                raise InvalidError("scale", f"{what} {k}: scale {scale!r} must be a finite float above 0")
            if types[t].dtype != INT32 or types[t].precision is None:
                raise InvalidError("scale", f"{what} {k}: a {types[t].dtype} tensor without a precision has no scale")


def _apply_rule(rule: Callable[..., Any], reason: str, where: str, *args: Any) -> Any:
    try:
        return rule(*args)
    except Rejected as e:
        if reason == "ops":
            raise LimitError("ops", f"{where}: {e}") from None
        raise InvalidError(reason, f"{where}: {e}") from None


def verify(model: Model, limits: Limits = Limits()) -> Program:
    types: list[TensorType] = []
    names: set[str] = set()
    ops = 0
    variables: tuple[Input | Param, ...] = (*model.inputs, *model.params)
    for var in variables:
        if var.name in names:
            raise InvalidError("graph", f"variable name {var.name!r} is used twice")
        names.add(var.name)
        check_tensor_type(var.type, f"variable {var.name}")
        types.append(var.type)
        ops += VARIABLE_COST * var.type.size
    for p in model.params:
        check_param_value(p.name, p.type, p.value)

    steps = []
    for index, instr in enumerate(model.instrs):
        where = f"instruction {index} ({instr.op}{' ' + instr.name if instr.name else ''})"
        op = OP_BY_NAME.get(instr.op)
        if op is None:
            raise InvalidError("op", f"{where}: unknown op {instr.op!r}")
        if type(instr.attrs) is not op.attrs:
            raise InternalError("attrs", f"{where}: attributes are {type(instr.attrs).__name__}, not {op.attrs.__name__}")
        expected = op.inputs(instr.attrs)
        if expected is None:
            if not instr.inputs:
                raise InvalidError("arity", f"{where}: needs at least one input")
        elif len(instr.inputs) != len(expected):
            raise InvalidError("arity", f"{where}: takes {len(expected)} inputs {expected}, got {len(instr.inputs)}")
        for t in instr.inputs:
            if not 0 <= t < len(types):
                raise InvalidError("graph", f"{where}: input tensor {t} is not defined before it")
        fresh = tuple(range(len(types), len(types) + len(op.outputs)))
        if instr.outputs != fresh:
            raise InvalidError("graph", f"{where}: outputs {instr.outputs} must be the next tensor ids {fresh}")
        ins = tuple(types[t] for t in instr.inputs)
        dtypes = _apply_rule(op.dtypes or int32_only, "dtype", where, instr.attrs, *ins)
        shapes = _apply_rule(op.shape, "shape", where, instr.attrs, *ins)
        precisions = _apply_rule(op.precision, "precision", where, instr.attrs, *ins)
        outs = tuple(TensorType(tuple(s), p, d) for s, p, d in zip(shapes, precisions, dtypes, strict=True))
        for k, out in enumerate(outs):
            check_tensor_type(out, f"{where} output {k}")
        if instr.declared_shapes is not None and tuple(map(tuple, instr.declared_shapes)) != tuple(t.shape for t in outs):
            raise InvalidError("shape", f"{where}: declared output shapes {list(instr.declared_shapes)} "
                                        f"differ from inferred {[t.shape for t in outs]}")
        if instr.declared_dtypes is not None and tuple(instr.declared_dtypes) != tuple(t.dtype for t in outs):
            raise InvalidError("dtype", f"{where}: declared output dtypes {list(instr.declared_dtypes)} "
                                        f"differ from inferred {[t.dtype for t in outs]}")
        base = _apply_rule(op.cost, "ops", where, instr.attrs, ins, outs)
        if not 0 <= base <= MAX_BASE_COST:
            raise LimitError("ops", f"{where}: base cost {base} exceeds 2^30")
        cost = base * outs[0].size + VARIABLE_COST * sum(t.size for t in outs)
        ops += cost
        if ops > MAX_OPS:
            raise LimitError("ops", f"{where}: total ops {ops} exceed 2^40")
        plan = _apply_rule(op.plan, "precision", where, instr.attrs, *ins) if op.plan else None
        run = functools.partial(op.kernel, instr.attrs, plan=plan) if op.plan else functools.partial(op.kernel, instr.attrs)
        steps.append(Step(index, op, instr.attrs, instr.inputs, instr.outputs, outs, plan, cost, instr.name, run))
        types.extend(outs)

    for t in model.outputs:
        if not 0 <= t < len(types):
            raise InvalidError("graph", f"output tensor {t} does not exist")
    if model.scales is not None:
        check_scales(model, model.scales, types)
    if limits.ops is not None and ops > limits.ops:
        raise LimitError("ops", f"model costs {ops} ops, over the limit of {limits.ops}")
    return Program(model, tuple(types), tuple(steps), ops, _liveness(model, steps))


def verify_instruction(op: OpDef, attrs: Any, inputs: Sequence[tuple[TensorType, np.ndarray]]) -> Program:
    """``op`` alone, as a program over inputs in0, in1, ... of the given types and values: what
    run_op runs and what a step proof re-executes.

    Execution clips an int32 input to its precision, as a model's ``data``; one
    instruction is checked on exactly the values it is given, so values outside
    it are refused (input.value) before the program is verified.
    """
    for k, (t, value) in enumerate(inputs):
        # A precision outside [1, 32] is verification's to refuse (invalid.precision).
        if t.dtype == INT32 and t.precision is not None and MIN_PRECISION <= t.precision <= MAX_PRECISION and value.size:
            bound = precision_bound(t.precision)
            if int(value.min()) < -bound or int(value.max()) > bound:
                raise InputError("value", f"input {k}: values outside precision {t.precision} (+-{bound})")
    n = len(inputs)
    outputs = tuple(range(n, n + len(op.outputs)))
    return verify(Model(tuple(Input(f"in{k}", t) for k, (t, _) in enumerate(inputs)), (),
                        (Instr(op.name, attrs, tuple(range(n)), outputs),), outputs))


def _liveness(model: Model, steps: list[Step]) -> tuple[tuple[int, ...], ...]:
    last_use: dict[int, int] = {}
    for step in steps:
        for t in step.inputs:
            last_use[t] = step.index
        for t in step.outputs:
            last_use.setdefault(t, step.index)  # produced and never read: free at once
    keep = set(model.outputs)
    free: list[list[int]] = [[] for _ in steps]
    for t, i in sorted(last_use.items()):
        if t not in keep:
            free[i].append(t)
    return tuple(tuple(f) for f in free)
