"""Execution of a verified Program.

Inputs are checked against the program (name, dtype, shape) and int32 inputs
are clipped to their declared precision, as the Cortex runtime does for
``data``; a float array for an input with a scale is quantized to it
(FORMAT.md 1.6).  Each instruction's outputs are confirmed against their inferred
type: a mismatch is a VM bug (internal.*), never silently passed on.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from isa.errors import InputError, InternalError
from isa.types import DTYPES, INT32, TensorType, clip_to_precision, precision_bound, quantize_float, vm_dtype
from cvmvm.vm.verify import Program

# Called with (tensor id, array) for every tensor as it comes into existence:
# inputs, params, then each instruction's outputs in program order.
TensorObserver = Callable[[int, np.ndarray], None]


def prepare_input(name: str, t: TensorType, value: object, scale: float | None = None) -> np.ndarray:
    """A caller's array -> the VM's canonical array for this input (clipped int32, or exact dtype).

    With a ``scale``, a float16/32/64 array is quantized: round half away from zero of x / scale in
    float64, clipped to the precision (FORMAT.md 1.6).
    """
    if not isinstance(value, np.ndarray):
        raise InputError("dtype", f"input {name}: expected a numpy array, got {type(value).__name__}")
    if tuple(value.shape) != t.shape:
        raise InputError("shape", f"input {name}: shape {tuple(value.shape)} must be {t.shape}")
    if t.dtype == INT32 and t.precision is not None:
        if value.dtype.kind == "f" and scale is not None and vm_dtype(value.dtype) is not None:
            if not np.all(np.isfinite(value)):
                raise InputError("value", f"input {name}: a float input holds NaN or infinity")
            return np.ascontiguousarray(quantize_float(value, scale, t.precision))
        if value.dtype.kind not in "iu":
            hint = ", and the model gives this input no scale" if value.dtype.kind == "f" and scale is None else ""
            raise InputError("dtype", f"input {name}: dtype {value.dtype} is not an integer type{hint}")
        wide = value.astype(np.int64) if value.dtype != np.uint64 else np.minimum(value, np.iinfo(np.int64).max).astype(np.int64)
        return np.ascontiguousarray(clip_to_precision(wide, t.precision))
    if vm_dtype(value.dtype) != t.dtype:
        raise InputError("dtype", f"input {name}: dtype {value.dtype} must be {t.dtype}")
    return np.ascontiguousarray(value, dtype=DTYPES[t.dtype])


def confirm(where: str, t: TensorType, value: np.ndarray) -> np.ndarray:
    """Check a kernel's output against its verified type; return it canonical (exact dtype, C order)."""
    if not isinstance(value, np.ndarray) or tuple(value.shape) != t.shape:
        shape = getattr(value, "shape", None)
        raise InternalError("shape", f"{where}: kernel produced shape {shape}, verified {t.shape}")
    if t.dtype == INT32 and t.precision is not None:
        if value.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise InternalError("dtype", f"{where}: kernel produced {value.dtype}, verified int32")
        if value.size:
            bound = precision_bound(t.precision)
            lo, hi = int(np.minimum.reduce(value, axis=None)), int(np.maximum.reduce(value, axis=None))
            if lo < -bound or hi > bound:
                raise InternalError("precision", f"{where}: value {lo if lo < -bound else hi} outside "
                                                 f"inferred precision {t.precision}")
        return np.ascontiguousarray(value, dtype=np.int32)
    if value.dtype != DTYPES[t.dtype]:
        raise InternalError("dtype", f"{where}: kernel produced {value.dtype}, verified {t.dtype}")
    return np.ascontiguousarray(value)


def execute(program: Program, inputs: Mapping[str, np.ndarray],
            observe: TensorObserver | None = None) -> tuple[list[np.ndarray], int]:
    """Run the program; return its outputs in head order and the peak bytes of live tensors."""
    model = program.model
    expected = [i.name for i in model.inputs]
    unknown = sorted(set(inputs) - set(expected))
    if unknown:
        raise InputError("name", f"unknown input {unknown[0]!r}; the model takes {expected}")
    env: list[np.ndarray | None] = [None] * len(program.types)
    for k, inp in enumerate(model.inputs):
        if inp.name not in inputs:
            raise InputError("name", f"missing input {inp.name!r}")
        env[k] = prepare_input(inp.name, inp.type, inputs[inp.name], model.input_scales[k])
    for k, p in enumerate(model.params, start=len(model.inputs)):
        env[k] = p.value
    if observe is not None:
        for k in range(model.num_variables):
            observe(k, env[k])
    live = sum(env[k].nbytes for k in range(model.num_variables))
    peak = live
    for step in program.steps:
        args = [env[t] for t in step.inputs]
        results = step.run(*args)
        if len(results) != len(step.outputs):
            raise InternalError("arity", f"instruction {step.index} ({step.op.name}): kernel returned "
                                         f"{len(results)} outputs, verified {len(step.outputs)}")
        for t, ty, value in zip(step.outputs, step.out_types, results):
            env[t] = confirm(f"instruction {step.index} ({step.op.name})", ty, value)
            live += env[t].nbytes
            if observe is not None:
                observe(t, env[t])
        peak = max(peak, live)
        for t in program.free_after[step.index]:
            live -= env[t].nbytes
            env[t] = None
    return [env[t] for t in model.outputs], peak
