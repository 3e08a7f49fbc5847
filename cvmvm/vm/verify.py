"""Verification: a decoded Model becomes a checked Program, or a CvmError.

Every static rule runs here, before any kernel: graph structure, op arity,
attribute records, dtype, shape and precision inference, the size limits, the
cost ("ops", SEMANTICS.md section 3), and the resources a run needs (work and
peak memory, docs/RESOURCES.md) against the caller's limits.  Execution
accepts only a Program.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from isa.attrs import INTS, STR, attr_fields
from isa.errors import InputError, InternalError, InvalidError, LimitError, Rejected, UsageError, shown
from isa.spec import OpDef, int32_only
from isa.table import OP_BY_NAME
from isa.types import (DTYPES, INT32, MAX_OPS, MAX_PRECISION, MIN_PRECISION, TensorType, check_shape, precision_bound,
                       vm_dtype)
from serializer import native
from serializer.model import Input, Instr, Model, Param, Scales
from serializer.strict import MAX_ITEMS, MAX_NAME

MAX_BASE_COST = 1 << 30
VARIABLE_COST = 5  # ops per element of every input and param, and of every op output

# -- resources (docs/RESOURCES.md) ---------------------------------------------------
#
# A run's work is each kernel's (its op's work rule) plus the executor's own:
# per instruction (dispatch, output checks, trace leaf) and per byte of every
# tensor it checks and hashes.  Its memory is the peak, over the run, of the
# live tensors (params and what plans hold always, every other tensor from its
# creation to its last use) plus the running kernel's outputs and scratch.
# Units: bench/work.py.
RUN_WORK = 40_000         # work units per run: inputs checked, trace set up, its root and the output hash
STEP_WORK = 15_000        # per instruction
VARIABLE_WORK = 2_000     # per input or param: its leaf
INPUT_WORK = 3            # per input element: checked, clipped, copied
SCALED_INPUT_WORK = 12    # per element of an input with a scale, which may come as floats to quantize
STEP_SCRATCH = 1 << 20    # bytes every kernel may hold besides its rule's (numpy's buffers, index arrays)
INPUT_SCRATCH = 9         # bytes per input element while it is prepared (an int64 copy, a mask counting clips)
SCALED_INPUT_SCRATCH = 48  # ... or quantized from floats (float64 temporaries)

DEFAULT_MEMORY_LIMIT = 2 << 30          # bytes: a 4 GiB machine runs any verified program
DEFAULT_WORK_LIMIT = 5_000_000_000      # work units: a few seconds


def tensor_work(t: TensorType) -> int:
    """The executor's work on one tensor: its values checked, its bytes hashed."""
    return t.size + tensor_bytes(t) // 2


def tensor_bytes(t: TensorType) -> int:
    return t.size * DTYPES[t.dtype].itemsize


@dataclass(frozen=True)
class Limits:
    """Caller-chosen budgets on top of the ISA's own limits; None: no limit."""

    ops: int | None = None  # reject a model whose cost exceeds this, before running it
    memory: int | None = DEFAULT_MEMORY_LIMIT  # bytes: peak live tensors + scratch of a run
    work: int | None = DEFAULT_WORK_LIMIT      # work units of a run

    def __post_init__(self) -> None:
        for name in ("ops", "memory", "work"):
            check_limit(f"Limits.{name}", getattr(self, name))


def check_limit(name: str, value: object) -> None:
    """A limit is a positive int (not a bool) or None."""
    if value is not None and (type(value) is not int or value < 1):
        raise UsageError("argument", f"{name}: expected a positive integer or None, got {shown(value)}")


# What a model verified but not run here is held to (cvmvm hash, convert, disasm, store add, the
# record of a step proof before it is authenticated): the ISA's rules only.
NOT_RUN = Limits(memory=None, work=None)


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
    work: int  # its kernel's work and the executor's
    scratch: int  # bytes its kernel holds beyond its inputs and outputs
    held: int  # bytes its plan holds for the program's life (OpDef.held)
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
    work: int               # work units of one run (docs/RESOURCES.md)
    memory_bytes: int       # peak bytes of one run: live tensors + scratch
    limits: Limits          # what it was verified under
    # What execution derives from the program once, on its first run (cvmvm.vm.execute: the
    # compiled steps); not part of what the program is.
    runtime: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

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
    if vm_dtype(value.dtype) != t.dtype or tuple(value.shape) != t.shape:
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


def _name(name: str, what: str) -> None:
    """A name the native format can carry: valid Unicode of at most MAX_NAME UTF-8 bytes."""
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidError("graph", f"{what} {name[:40]!r}...: not valid Unicode (a lone surrogate)") from None
    if size > MAX_NAME:
        raise InvalidError("graph", f"{what} {name[:40]!r}...: {size} UTF-8 bytes exceed {MAX_NAME}")


def _items(n: int, what: str) -> None:
    if n > MAX_ITEMS:
        raise LimitError("items", f"{what}: {n} items exceed {MAX_ITEMS}")


def check_wire_bounds(model: Model) -> None:
    """Every bound the native decoder enforces (FORMAT.md section 1.4), so that a model that
    verifies can be encoded, stored, decoded and replayed: names, counts, attribute lengths,
    and the encoded size."""
    for what, items in (("inputs", model.inputs), ("params", model.params), ("code", model.instrs),
                        ("outputs", model.outputs)):
        _items(len(items), what)
    variables: tuple[Input | Param, ...] = (*model.inputs, *model.params)
    for var in variables:
        _name(var.name, "variable name")
    for k, instr in enumerate(model.instrs):
        where = f"instruction {k} ({instr.op})"
        _name(instr.name, f"{where} name")
        _items(len(instr.inputs), f"{where} inputs")
        for spec in attr_fields(type(instr.attrs)):
            value = getattr(instr.attrs, spec.name)
            if spec.kind == INTS:
                _items(len(value), f"{where} attribute {spec.name}")
            elif spec.kind == STR:
                _name(value, f"{where} attribute {spec.name}")
    size = native.encoded_size(model, at_most=native.MAX_MODEL_BYTES)
    if size > native.MAX_MODEL_BYTES:
        raise LimitError("bytes", f"the model encodes to {size} bytes, over the native format's {native.MAX_MODEL_BYTES}")


def _apply_rule(rule: Callable[..., Any], reason: str, where: str, *args: Any) -> Any:
    try:
        return rule(*args)
    except Rejected as e:
        if reason == "ops":
            raise LimitError("ops", f"{where}: {e}") from None
        raise InvalidError(reason, f"{where}: {e}") from None


def _read_only(value: np.ndarray) -> np.ndarray:
    if not value.flags.writeable:
        return value
    copy = value.copy()
    copy.setflags(write=False)
    return copy


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
    if ops > MAX_OPS:
        raise LimitError("ops", f"variables: total ops {ops} exceed 2^40")
    for p in model.params:
        check_param_value(p.name, p.type, p.value)
    if any(p.value.flags.writeable for p in model.params):
        # A param is read-only (serializer.model.Param); one built from a writeable array gets a
        # read-only copy, so that nobody holding it (an output that is a param) changes what every
        # later run computes, while its commitment stays the same.
        model = dataclasses.replace(model, params=tuple(dataclasses.replace(p, value=_read_only(p.value))
                                                        for p in model.params))

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
        params = tuple(len(model.inputs) <= t < model.num_variables for t in instr.inputs)
        held = op.held(instr.attrs, plan, *params) if op.held else 0
        work = STEP_WORK + op.work(instr.attrs, ins, outs) + sum(tensor_work(t) for t in outs)
        scratch = STEP_SCRATCH + op.scratch(instr.attrs, ins, outs)
        steps.append(Step(index, op, instr.attrs, instr.inputs, instr.outputs, outs, plan, cost, work, scratch,
                          held, instr.name, _kernel(op, instr.attrs, plan)))
        types.extend(outs)

    for t in model.outputs:
        if not 0 <= t < len(types):
            raise InvalidError("graph", f"output tensor {t} does not exist")
    if model.scales is not None:
        check_scales(model, model.scales, types)
    check_wire_bounds(model)
    if limits.ops is not None and ops > limits.ops:
        raise LimitError("ops", f"model costs {ops} ops, over the limit of {limits.ops}")
    free_after = _liveness(model, steps)
    work, memory = _resources(model, tuple(types), steps, free_after, limits)
    return Program(model, tuple(types), tuple(_bind(model, s) for s in steps), ops, free_after, work, memory, limits)


def _kernel(op: OpDef, attrs: Any, plan: Any) -> Callable[..., tuple[np.ndarray, ...]]:
    return functools.partial(op.kernel, attrs, plan=plan) if op.plan else functools.partial(op.kernel, attrs)


def _bind(model: Model, step: Step) -> Step:
    """The step with its plan bound to the params it reads (OpDef.bind): only once the program's
    memory, which counts what binding holds (Step.held), is known to be within its limit."""
    if step.op.bind is None:
        return step
    first = len(model.inputs)
    values = tuple(model.params[t - first].value if first <= t < model.num_variables else None for t in step.inputs)
    plan = step.op.bind(step.attrs, step.plan, *values)
    return dataclasses.replace(step, plan=plan, run=_kernel(step.op, step.attrs, plan))


def _resources(model: Model, types: tuple[TensorType, ...], steps: list[Step],
               free_after: tuple[tuple[int, ...], ...], limits: Limits) -> tuple[int, int]:
    """(work, peak memory) of one run, walking it in program order; the first point at which
    either crosses its limit is refused, naming it, the measure and both numbers."""
    def check(where: str, work: int, memory: int, detail: str) -> None:
        if limits.memory is not None and memory > limits.memory:
            raise LimitError("memory", f"{where}: needs {memory} bytes of memory ({detail}), "
                                       f"over the memory limit of {limits.memory}")
        if limits.work is not None and work > limits.work:
            raise LimitError("work", f"{where}: total work {work} units exceeds the work limit of {limits.work}")

    variables: tuple[Input | Param, ...] = (*model.inputs, *model.params)
    held = sum(s.held for s in steps)
    live = sum(tensor_bytes(v.type) for v in variables) + held
    work = RUN_WORK + sum(VARIABLE_WORK + tensor_work(v.type) for v in variables)
    work += sum((SCALED_INPUT_WORK if scale is not None else INPUT_WORK) * i.type.size
                for i, scale in zip(model.inputs, model.input_scales))
    prepare = _preparation_bytes(model)
    peak = live + prepare + STEP_SCRATCH
    check("variables", work, peak, f"{live - held} of inputs and params, {held} held by plans, "
                                   f"{prepare + STEP_SCRATCH} to prepare the inputs")
    params = set(range(len(model.inputs), model.num_variables))  # held by the model, never freed
    for step in steps:
        work += step.work
        made = sum(tensor_bytes(t) for t in step.out_types)
        memory = live + made + step.scratch
        where = f"instruction {step.index} ({step.op.name}{' ' + step.name if step.name else ''})"
        check(where, work, memory, f"{live} live{f' ({held} of them held by plans)' if held else ''}, "
                                   f"{made} of outputs, {step.scratch} of scratch")
        peak = max(peak, memory)
        live += made - sum(tensor_bytes(types[t]) for t in free_after[step.index] if t not in params)
    return work, peak


def _preparation_bytes(model: Model) -> int:
    """Scratch of preparing the largest input (inputs are prepared one at a time)."""
    return max(((SCALED_INPUT_SCRATCH if scale is not None else INPUT_SCRATCH) * i.type.size
                for i, scale in zip(model.inputs, model.input_scales)), default=0)


def kept_memory(program: Program) -> int:
    """Peak bytes of a run that keeps every tensor to its end (Model.run(keep=True), run --dump-tensors):
    all of them, and the largest scratch or input preparation beside them."""
    return (sum(tensor_bytes(t) for t in program.types) + sum(s.held for s in program.steps)
            + max([_preparation_bytes(program.model) + STEP_SCRATCH, *(s.scratch for s in program.steps)]))


def verify_instruction(op: OpDef, attrs: Any, inputs: Sequence[tuple[TensorType, np.ndarray]],
                       limits: Limits = Limits()) -> Program:
    """``op`` alone, as a program over inputs in0, in1, ... of the given types and values: what
    run_op runs and what a step proof re-executes.

    Execution clips an int32 input to its precision, as a model's ``data``; one
    instruction is checked on exactly the values it is given, so values outside
    it are refused (input.value) before the program is verified.
    """
    for k, (t, value) in enumerate(inputs):
        if tuple(value.shape) != t.shape:
            raise InputError("shape", f"input {k}: shape {tuple(value.shape)} is not its type's {t.shape}")
        if t.dtype in DTYPES and vm_dtype(value.dtype) != t.dtype and not (t.dtype == INT32 and value.dtype.kind == "i"):
            raise InputError("dtype", f"input {k}: dtype {value.dtype} is not its type's {t.dtype}")
        # A precision outside [1, 32] is verification's to refuse (invalid.precision).
        if t.dtype == INT32 and t.precision is not None and MIN_PRECISION <= t.precision <= MAX_PRECISION and value.size:
            bound = precision_bound(t.precision)
            if int(value.min()) < -bound or int(value.max()) > bound:
                raise InputError("value", f"input {k}: values outside precision {t.precision} (+-{bound})")
    return verify_types(op, attrs, [t for t, _ in inputs], limits)


def verify_types(op: OpDef, attrs: Any, types: Sequence[TensorType], limits: Limits = Limits()) -> Program:
    """``op`` alone, as a program over inputs in0, in1, ... of these types: every static rule,
    no value (what a step proof's record must pass before anything reads its tensors)."""
    n = len(types)
    outputs = tuple(range(n, n + len(op.outputs)))
    return verify(Model(tuple(Input(f"in{k}", t) for k, t in enumerate(types)), (),
                        (Instr(op.name, attrs, tuple(range(n)), outputs),), outputs), limits)


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
