"""Execution of a verified Program.

Inputs are checked against the program (name, dtype, shape), and every int32
input with a precision p (all of a Cortex model's, whose one input is ``data``)
is clipped to [-(2^(p-1) - 1), 2^(p-1) - 1], as the Cortex runtime does for
``data``; a float array for an input with a scale is quantized to it, clipped
the same way (FORMAT.md 1.6).  What was clipped is reported (``Clipping``),
never an error.  Each instruction's outputs are confirmed against their
inferred type: a mismatch is a VM bug (internal.*), never silently passed on.
A small program may run instead as one call of a compiled loop (cvmvm.vm.native),
which confirms every value the same way and gives the same bytes.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Iterable, Mapping, NamedTuple, cast

import numpy as np

from isa.errors import InputError, InternalError, LimitError
from isa.attrs import INT32_MAX
from isa.types import DTYPES, INT32, TensorType, precision_bound, quantize_float, round_half_away, vm_dtype
from cvmvm.vm import native
from cvmvm.vm.verify import Program

# Called with (tensor id, array) for every tensor as it comes into existence:
# inputs, params, then each instruction's outputs in program order.
TensorObserver = Callable[[int, np.ndarray], None]


@dataclass(frozen=True)
class Clipping:
    """Values of one int32 input outside its declared precision, clipped into it."""

    input: str
    count: int      # how many values were outside [-bound, bound]
    low: int        # the smallest value given (a float input: quantized, before the clip)
    high: int       # the largest value given (likewise)
    precision: int

    @property
    def bound(self) -> int:
        return precision_bound(self.precision)

    def __str__(self) -> str:
        return (f"input {self.input}: {self.count} value{'s' if self.count != 1 else ''} outside precision "
                f"{self.precision} clipped to [{-self.bound}, {self.bound}] (given values span "
                f"[{self.low}, {self.high}])")


def prepare_input(name: str, t: TensorType, value: object, scale: float | None = None,
                  clipped: list[Clipping] | None = None) -> np.ndarray:
    """A caller's array -> the VM's canonical array for this input (clipped int32, or exact dtype);
    a clipped input is reported in ``clipped`` when given.

    With a ``scale``, a float16/32/64 array is quantized: round half away from zero of x / scale in
    float64, clipped to the precision (FORMAT.md 1.6).
    """
    if not isinstance(value, np.ndarray):
        raise InputError("dtype", f"input {name}: expected a numpy array, got {type(value).__name__}")
    if tuple(value.shape) != t.shape:
        raise InputError("shape", f"input {name}: shape {tuple(value.shape)} must be {t.shape}")
    if t.dtype == INT32 and t.precision is not None:
        bound = precision_bound(t.precision)
        if value.dtype.kind == "f" and scale is not None and vm_dtype(value.dtype) is not None:
            if not np.all(np.isfinite(value)):
                raise InputError("value", f"input {name}: a float input holds NaN or infinity")
            if clipped is not None and value.size:
                _report_float_clipping(name, t.precision, value, scale, clipped)
            return np.ascontiguousarray(quantize_float(value, scale, t.precision))
        if value.dtype.kind not in "iu":
            hint = ", and the model gives this input no scale" if value.dtype.kind == "f" and scale is None else ""
            raise InputError("dtype", f"input {name}: dtype {value.dtype} is not an integer type{hint}")
        # uint64 of either byte order (a '<u8' .npy on a big-endian host is not np.uint64) saturates
        # at INT64_MAX first: cast directly, 2^64 - 1 would wrap to -1.
        if value.dtype.kind == "u" and value.dtype.itemsize == 8:
            wide = np.minimum(value, np.iinfo(np.int64).max).astype(np.int64)
        else:
            wide = value.astype(np.int64)
        if clipped is not None and wide.size:
            count = int(np.count_nonzero(wide < -bound)) + int(np.count_nonzero(wide > bound))
            if count:
                # The values given, not the saturated ones, for a uint64 input.
                clipped.append(Clipping(name, count, int(value.min()), int(value.max()), t.precision))
        np.clip(wide, -bound, bound, out=wide)  # in place: one int64 copy of the input at a time (INPUT_SCRATCH)
        return wide.astype(np.int32)
    if vm_dtype(value.dtype) != t.dtype:
        raise InputError("dtype", f"input {name}: dtype {value.dtype} must be {t.dtype}")
    # The VM's own copy, as for int32: a result's tensors must not change when the caller's array does.
    return np.array(value, dtype=DTYPES[t.dtype], order="C")


def _report_float_clipping(name: str, precision: int, value: np.ndarray, scale: float,
                           clipped: list[Clipping]) -> None:
    """quantize_float's q = round_half_away(x / scale) leaves [-bound, bound] exactly when
    |x / scale| >= bound + 1/2.  (A function of its own: its float64 temporaries are gone
    before quantize_float makes its own, SCALED_INPUT_SCRATCH.)"""
    bound = precision_bound(precision)
    with np.errstate(over="ignore"):    # infinite where the quotient overflows: _exact_quantized
        ratio = np.asarray(value, dtype=np.float64) / np.float64(scale)
    count = int(np.count_nonzero(np.abs(ratio) >= bound + 0.5))
    if count:
        lo, hi = (int(round_half_away(r)) if np.isfinite(r) else _exact_quantized(x, scale)
                  for r, x in ((ratio.min(), value.min()), (ratio.max(), value.max())))
        clipped.append(Clipping(name, count, lo, hi, precision))


def _exact_quantized(x: float, scale: float) -> int:
    """round_half_away(x / scale) of a finite x whose float64 quotient overflows (1.7e308 at a scale
    below 1), exactly: the clip makes it the bound either way, but the report gives the value."""
    q = Fraction(float(x)) / Fraction(float(scale))
    whole = math.floor(abs(q) + Fraction(1, 2))
    return whole if q >= 0 else -whole


def prepare_inputs(program: Program, inputs: Mapping[str, object] | Iterable[tuple[str, object]],
                   clipped: list[Clipping] | None = None) -> list[np.ndarray]:
    """Every input of the program, by name from ``inputs`` (a mapping or (name, value) pairs),
    checked and prepared in the model's input order."""
    plan = compiled(program)
    given = dict(inputs)
    if given.keys() != plan.names_set:
        _check_names(plan, given)
    return [prepare(given[name], clipped) for name, prepare in zip(plan.names, plan.prepare)]


def peak_bytes(program: Program) -> int:
    """The most bytes of tensors alive at once during a run, from the program alone: every size is
    static, and execution drops each tensor after its last use (``Program.free_after``)."""
    sizes = [t.size * DTYPES[t.dtype].itemsize for t in program.types]
    live = sum(sizes[:program.model.num_variables])
    peak = live
    for step in program.steps:
        live += sum(sizes[t] for t in step.outputs)
        peak = max(peak, live)
        live -= sum(sizes[t] for t in program.free_after[step.index])
    return peak


# -- the compiled program ------------------------------------------------------------
#
# Everything about a run that does not depend on the input values is decided once per
# program, on its first run: each input's check, each step's bound kernel, how each of
# its outputs is confirmed, which tensors die after it, and the run's peak bytes.

_INT32 = np.dtype(np.int32)
_INT64 = np.dtype(np.int64)
_INT32_MIN = -(1 << 31)

Confirm = Callable[[object], np.ndarray]


def _confirmer(t: TensorType, in_range: bool) -> Confirm:
    """How a kernel's output of type ``t`` is confirmed against it and made canonical (exact dtype,
    C order, native byte order).  An int32 CVM tensor's values are checked against its precision,
    one min/max pass, unless the op proves they cannot leave it (``OpDef.in_range``) and the kernel
    kept native int32; an int64 (or non-native) result is always checked before its cast.  A failure
    is an InternalError; the executor adds which instruction."""
    shape = t.shape

    def wrong(value: object) -> InternalError:
        if not isinstance(value, np.ndarray) or tuple(value.shape) != shape:
            return InternalError("shape", f"kernel produced shape {getattr(value, 'shape', None)}, verified {shape}")
        return InternalError("dtype", f"kernel produced {value.dtype}, verified {t.dtype}")

    if t.dtype != INT32 or t.precision is None:
        dtype = DTYPES[t.dtype]

        def confirm_exact(value: object) -> np.ndarray:
            if not isinstance(value, np.ndarray) or value.shape != shape or vm_dtype(value.dtype) != t.dtype:
                raise wrong(value)
            return _own(np.ascontiguousarray(value, dtype=dtype))   # native byte order
        return confirm_exact

    precision = t.precision
    bound = precision_bound(precision)

    def outside(value: np.ndarray) -> bool:
        return bool(np.minimum.reduce(value, axis=None) < -bound or np.maximum.reduce(value, axis=None) > bound)

    def outside_int32(value: np.ndarray) -> bool:   # only INT32_MIN is outside precision 32
        return bool(np.minimum.reduce(value, axis=None) == _INT32_MIN)

    check_int32 = None if in_range else outside_int32 if bound == INT32_MAX else outside

    def confirm(value: object) -> np.ndarray:
        if not isinstance(value, np.ndarray) or value.shape != shape:
            raise wrong(value)
        if value.dtype == _INT32:
            if check_int32 is not None and check_int32(value):
                raise _out_of_range(value, precision)
            return _own(np.ascontiguousarray(value))
        if value.dtype == _INT64 or vm_dtype(value.dtype) in (INT32, "int64"):   # either byte order
            if outside(value):
                raise _out_of_range(value, precision)
            return np.ascontiguousarray(value, dtype=_INT32)
        raise wrong(value)
    return confirm


def _own(value: np.ndarray) -> np.ndarray:
    """A tensor that holds no more memory than its own bytes.  A kernel may return a view into a
    larger array (a contiguous slice, one output of split): it would keep that array alive past its
    last use, which memory_bytes does not count (4 one-element slices of 64 MiB tensors held 256 MiB)."""
    base = value.base
    if base is None:
        return value
    try:
        held = base.nbytes if isinstance(base, np.ndarray) else memoryview(base).nbytes
    except TypeError:   # a base of no buffer we can measure: assume the worst
        return value.copy()
    return value.copy() if held > value.nbytes else value


def _out_of_range(value: np.ndarray, precision: int) -> InternalError:
    bound = precision_bound(precision)
    lo, hi = int(value.min()), int(value.max())
    return InternalError("precision", f"value {lo if lo < -bound else hi} outside inferred precision {precision}")


Prepare = Callable[[object, "list[Clipping] | None"], np.ndarray]


def _preparer(name: str, t: TensorType, scale: float | None) -> Prepare:
    """One input's check: an int32 array of the right shape within its precision (what callers
    pass nearly always) costs one comparison of dtype and shape and one range check; anything
    else takes ``prepare_input``'s general path (casts, clipping and its report, quantization)."""
    if t.dtype != INT32 or t.precision is None:
        return lambda value, clipped: prepare_input(name, t, value, scale, clipped)
    shape, bound = t.shape, precision_bound(t.precision)

    def prepare(value: object, clipped: list[Clipping] | None) -> np.ndarray:
        if (isinstance(value, np.ndarray) and value.dtype == _INT32 and value.shape == shape
                and np.minimum.reduce(value, axis=None) >= -bound and np.maximum.reduce(value, axis=None) <= bound):
            return np.array(value, dtype=_INT32, order="C")  # the VM's own copy
        return prepare_input(name, t, value, scale, clipped)
    return prepare


class CompiledStep(NamedTuple):
    """One instruction as execution runs it (a tuple: the loop unpacks it)."""

    run: Callable[..., tuple[np.ndarray, ...]]  # the kernel bound with its attributes and plan
    fetch: Callable[[list[np.ndarray | None]], Any]  # its inputs from the tensors by id: one, or a tuple
    several: bool                                 # fetch gives a tuple (more than one input)
    output: int                                   # its first output's tensor id, and how it is confirmed
    confirm: Confirm
    more: tuple[tuple[int, Confirm], ...]         # the others' (most ops have one output)
    dead: tuple[int, ...]   # tensors no later step or output reads: dropped once it ran
    step: int               # its instruction's index


@dataclass(frozen=True)
class Compiled:
    names: tuple[str, ...]                # the inputs, in order
    names_set: frozenset[str]
    prepare: tuple[Prepare, ...]
    template: tuple[np.ndarray | None, ...]  # by tensor id: the params in place, None elsewhere
    variables: int                        # inputs and params
    steps: tuple[CompiledStep, ...]
    outputs: tuple[int, ...]
    peak: int


def compiled(program: Program) -> Compiled:
    """The program's compiled form, made on its first run and kept with it."""
    done = program.runtime.get("compiled")
    if done is None:
        done = program.runtime["compiled"] = _compile(program)
    return cast(Compiled, done)


def _compile(program: Program) -> Compiled:
    model = program.model
    # One confirmer per output type and kind of op (a long chain of one type shares one).
    confirmers: dict[tuple[TensorType, bool], Confirm] = {}
    steps = []
    for step in program.steps:
        outputs = []
        for t, ty in zip(step.outputs, step.out_types):
            key = (ty, step.op.in_range is not None)
            if key not in confirmers:
                confirmers[key] = _confirmer(*key)
            outputs.append((t, confirmers[key]))
        steps.append(CompiledStep(step.run, operator.itemgetter(*step.inputs), len(step.inputs) > 1, *outputs[0],
                                  tuple(outputs[1:]), program.free_after[step.index], step.index))
    template = [None] * len(model.inputs) + [p.value for p in model.params]
    template += [None] * (len(program.types) - len(template))
    names = tuple(i.name for i in model.inputs)
    return Compiled(names, frozenset(names),
                    tuple(_preparer(i.name, i.type, s) for i, s in zip(model.inputs, model.input_scales)),
                    tuple(template), model.num_variables, tuple(steps), model.outputs, peak_bytes(program))


def execute(program: Program, inputs: Mapping[str, np.ndarray], observe: TensorObserver | None = None,
            clipped: list[Clipping] | None = None) -> tuple[list[np.ndarray], int]:
    """Run the program; return its outputs in head order and the peak bytes of live tensors
    (``peak_bytes``).  Clipped inputs are reported in ``clipped`` when given.

    Verification bounded the run's memory (``program.memory_bytes``); a host
    that cannot give that much is refused as limit.memory, never a crash.
    """
    plan = compiled(program)
    given = dict(inputs)
    if given.keys() != plan.names_set:
        _check_names(plan, given)
    env = list(plan.template)
    step = -1  # the instruction running, for an error's message
    try:
        for k, (name, prepare) in enumerate(zip(plan.names, plan.prepare)):
            env[k] = prepare(given[name], clipped)
        del given
        if observe is not None:
            for k in range(plan.variables):
                observe(k, cast(np.ndarray, env[k]))
        fast = _native(program)
        if fast is not None:
            return _run_native(program, plan, fast, cast(list[np.ndarray], env[:len(plan.names)]), observe)
        for run, fetch, several, output, confirm, more, dead, step in plan.steps:
            # The kernel's own arrays (an int64 result beside its int32 copy) go before the next kernel runs.
            if not more:
                results = run(*fetch(env)) if several else run(fetch(env))
                if len(results) != 1:
                    raise InternalError("arity", f"kernel returned {len(results)} outputs, verified 1")
                env[output] = value = confirm(results[0])
                del results
                if observe is not None:
                    observe(output, value)
                del value
            else:
                _outputs(run(*fetch(env)) if several else run(fetch(env)), ((output, confirm), *more), env, observe)
            for t in dead:
                env[t] = None
    except MemoryError:
        raise LimitError("memory", f"out of memory at {_where(program, step)}: this host cannot give the "
                                   f"{program.memory_bytes} bytes the program needs at its peak") from None
    except InternalError as e:
        if step < 0:
            raise
        raise InternalError(e.reason, f"{_where(program, step)}: {e.message}") from None
    # Verification never frees an output (Program.free_after), so each is still there.
    return cast(list[np.ndarray], [env[t] for t in plan.outputs]), plan.peak


def compile_native(program: Program) -> bool:
    """Lay the program out for the compiled loop (cvmvm.vm.native) and compile the loop, once;
    whether its runs go through the loop from now on."""
    ready = program.runtime.get("native")
    if ready is None:
        ready = program.runtime["native"] = native.prepare(program) or False
    return bool(ready)


def _native(program: Program) -> native.Ready | None:
    """The program's compiled loop from its WARM_RUNS-th run on (or once compiled), when it is
    one for the loop and numba is installed; else None: the kernels run one by one."""
    ready = program.runtime.get("native")
    if ready is None:
        runs = program.runtime["runs"] = program.runtime.get("runs", 0) + 1
        if runs < native.WARM_RUNS:
            return None
        compile_native(program)
        ready = program.runtime["native"]
    return cast("native.Ready | None", ready or None)


def _run_native(program: Program, plan: Compiled, fast: native.Ready, inputs: list[np.ndarray],
                observe: TensorObserver | None) -> tuple[list[np.ndarray], int]:
    layout, loop = fast
    arena, failed = native.run(layout, loop, inputs)
    if failed >= 0:
        step = program.steps[failed]
        raise InternalError("precision", f"{_where(program, failed)}: a value outside inferred precision "
                                         f"{step.out_types[0].precision}")
    if observe is not None:
        # A tracer takes the whole arena at once (Tracer.observe_arena); any other observer sees
        # each instruction's output in order, as from the kernels.
        whole = getattr(observe, "observe_arena", None)
        if whole is not None:
            whole(layout, arena)
        else:
            for step in program.steps:
                observe(step.outputs[0], native.tensor(layout, arena, step.outputs[0]))
    return [native.tensor(layout, arena, t).copy() for t in plan.outputs], plan.peak


def _where(program: Program, index: int) -> str:
    return "its inputs" if index < 0 else f"instruction {index} ({program.steps[index].op.name})"


def _outputs(results: tuple[np.ndarray, ...], outputs: tuple[tuple[int, Confirm], ...],
             env: list[np.ndarray | None], observe: TensorObserver | None) -> None:
    """Every output of a step confirmed and stored, each shown to ``observe`` when given."""
    if len(results) != len(outputs):
        raise InternalError("arity", f"kernel returned {len(results)} outputs, verified {len(outputs)}")
    for (t, confirm), value in zip(outputs, results):
        env[t] = out = confirm(value)
        if observe is not None:
            observe(t, out)


def _check_names(plan: Compiled, given: Mapping[str, object]) -> None:
    """Raise for an unknown input name first, then a missing one."""
    unknown = sorted(set(given) - set(plan.names))
    if unknown:
        raise InputError("name", f"unknown input {unknown[0]!r}; the model takes {list(plan.names)}")
    for name in plan.names:
        if name not in given:
            raise InputError("name", f"missing input {name!r}")
