"""Execution of a verified Program.

Inputs are checked against the program (name, dtype, shape), and every int32
input with a precision p (all of a Cortex model's, whose one input is ``data``)
is clipped to [-(2^(p-1) - 1), 2^(p-1) - 1], as the Cortex runtime does for
``data``; a float array for an input with a scale is quantized to it, clipped
the same way (FORMAT.md 1.6).  What was clipped is reported (``Clipping``),
never an error.  Each instruction's outputs are confirmed against their
inferred type: a mismatch is a VM bug (internal.*), never silently passed on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, cast

import numpy as np

from isa.errors import InputError, InternalError, LimitError
from isa.types import DTYPES, INT32, TensorType, precision_bound, quantize_float, round_half_away, vm_dtype
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
                # The largest given value, not the saturated one, for a uint64 input.
                high = int(value.max())
                clipped.append(Clipping(name, count, int(wide.min()), high, t.precision))
        np.clip(wide, -bound, bound, out=wide)  # in place: one int64 copy of the input at a time (INPUT_SCRATCH)
        return wide.astype(np.int32)
    if vm_dtype(value.dtype) != t.dtype:
        raise InputError("dtype", f"input {name}: dtype {value.dtype} must be {t.dtype}")
    return np.ascontiguousarray(value, dtype=DTYPES[t.dtype])


def _report_float_clipping(name: str, precision: int, value: np.ndarray, scale: float,
                           clipped: list[Clipping]) -> None:
    """quantize_float's q = round_half_away(x / scale) leaves [-bound, bound] exactly when
    |x / scale| >= bound + 1/2.  (A function of its own: its float64 temporaries are gone
    before quantize_float makes its own, SCALED_INPUT_SCRATCH.)"""
    bound = precision_bound(precision)
    ratio = np.asarray(value, dtype=np.float64) / np.float64(scale)
    count = int(np.count_nonzero(np.abs(ratio) >= bound + 0.5))
    if count:
        lo, hi = round_half_away(np.array([ratio.min(), ratio.max()]))
        clipped.append(Clipping(name, count, int(lo), int(hi), precision))


def prepare_inputs(program: Program, inputs: Mapping[str, object] | Iterable[tuple[str, object]],
                   clipped: list[Clipping] | None = None) -> list[np.ndarray]:
    """Every input of the program, by name from ``inputs`` (a mapping or (name, value) pairs),
    checked and prepared in the model's input order."""
    given = dict(inputs)
    expected = [i.name for i in program.model.inputs]
    unknown = sorted(set(given) - set(expected))
    if unknown:
        raise InputError("name", f"unknown input {unknown[0]!r}; the model takes {expected}")
    feeds = []
    for inp, scale in zip(program.model.inputs, program.model.input_scales):
        if inp.name not in given:
            raise InputError("name", f"missing input {inp.name!r}")
        feeds.append(prepare_input(inp.name, inp.type, given[inp.name], scale, clipped))
    return feeds


def peak_bytes(program: Program) -> int:
    """The most bytes of tensors alive at once during a run, from the program alone (every size is
    static, and execution drops each tensor after its last use, ``Program.free_after``): what
    ``execute`` measures, for the runs that do not measure it (a batched run's items)."""
    sizes = [t.size * DTYPES[t.dtype].itemsize for t in program.types]
    live = sum(sizes[:program.model.num_variables])
    peak = live
    for step in program.steps:
        live += sum(sizes[t] for t in step.outputs)
        peak = max(peak, live)
        live -= sum(sizes[t] for t in program.free_after[step.index])
    return peak


def confirm(where: str, t: TensorType, value: np.ndarray) -> np.ndarray:
    """Check a kernel's output against its verified type; return it canonical (exact dtype, C order)."""
    if not isinstance(value, np.ndarray) or tuple(value.shape) != t.shape:
        shape = getattr(value, "shape", None)
        raise InternalError("shape", f"{where}: kernel produced shape {shape}, verified {t.shape}")
    if t.dtype == INT32 and t.precision is not None:
        if vm_dtype(value.dtype) not in (INT32, "int64"):
            raise InternalError("dtype", f"{where}: kernel produced {value.dtype}, verified int32")
        if value.size:
            bound = precision_bound(t.precision)
            lo, hi = int(np.minimum.reduce(value, axis=None)), int(np.maximum.reduce(value, axis=None))
            if lo < -bound or hi > bound:
                raise InternalError("precision", f"{where}: value {lo if lo < -bound else hi} outside "
                                                 f"inferred precision {t.precision}")
        return np.ascontiguousarray(value, dtype=np.int32)
    if vm_dtype(value.dtype) != t.dtype:
        raise InternalError("dtype", f"{where}: kernel produced {value.dtype}, verified {t.dtype}")
    return np.ascontiguousarray(value, dtype=DTYPES[t.dtype])


def execute(program: Program, inputs: Mapping[str, np.ndarray], observe: TensorObserver | None = None,
            clipped: list[Clipping] | None = None) -> tuple[list[np.ndarray], int]:
    """Run the program; return its outputs in head order and the peak bytes of live tensors
    (what ``peak_bytes`` computes from the program alone).  Clipped inputs are reported in
    ``clipped`` when given.

    Verification bounded the run's memory (``program.memory_bytes``); a host
    that cannot give that much is refused as limit.memory, never a crash.
    """
    position = ["its inputs"]  # where the run is, for that refusal
    try:
        return _execute(program, inputs, observe, clipped, position)
    except MemoryError:
        raise LimitError("memory", f"out of memory at {position[0]}: this host cannot give the "
                                   f"{program.memory_bytes} bytes the program needs at its peak") from None


def _execute(program: Program, inputs: Mapping[str, np.ndarray], observe: TensorObserver | None,
             clipped: list[Clipping] | None, position: list[str]) -> tuple[list[np.ndarray], int]:
    model = program.model
    variables = prepare_inputs(program, inputs, clipped) + [p.value for p in model.params]
    if observe is not None:
        for k, value in enumerate(variables):
            observe(k, value)
    env: list[np.ndarray | None] = [*variables, *[None] * (len(program.types) - len(variables))]
    nbytes = [v.nbytes for v in variables] + [0] * (len(program.types) - len(variables))
    del variables  # each tensor is held by env alone, so freeing it there frees it
    live = sum(nbytes)
    peak = live
    for step in program.steps:
        where = f"instruction {step.index} ({step.op.name})"
        position[0] = where
        results = step.run(*(env[t] for t in step.inputs))
        if len(results) != len(step.outputs):
            raise InternalError("arity", f"{where}: kernel returned {len(results)} outputs, "
                                         f"verified {len(step.outputs)}")
        for t, ty, value in zip(step.outputs, step.out_types, results):
            out = confirm(where, ty, value)
            env[t] = out
            nbytes[t] = out.nbytes
            live += out.nbytes
            if observe is not None:
                observe(t, out)
        # The kernel's own arrays (an int64 result beside its int32 copy) go before the next kernel runs.
        del results, value, out
        peak = max(peak, live)
        for t in program.free_after[step.index]:
            live -= nbytes[t]
            env[t] = None
    # Verification never frees an output (Program.free_after), so each is still there.
    return cast(list[np.ndarray], [env[t] for t in model.outputs]), peak
