"""Fixing the shapes, folding constants, and measuring every activation's range.

``input_shapes`` turns the graph's (possibly dynamic) input dims into
concrete shapes; ``specialize`` runs the float graph once on zeros at those
shapes to learn every tensor's shape and to fold the constant subgraphs
(shape arithmetic, Constant nodes); ``calibrate`` runs it over the calibration
data and keeps max |x| of every activation.  A maximum does not depend on the
order it is taken in, and the float values it is taken over are
platform-independent (floateval), so the statistics are too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, cast

import numpy as np

from isa.errors import InputError, InvalidError, LimitError, shown
from isa.types import MAX_DIM, MAX_RANK, check_shape
from cvmvm.importer.floateval import FLOAT_MEMORY, Evaluator, room
from cvmvm.importer.graph import Graph, Node

CHUNK = 256  # samples per float evaluation when the batch dimension is free


def input_shapes(graph: Graph, batch: int | None,
                 overrides: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """Concrete shapes: a dynamic first dim becomes ``batch`` (default 1); any other dynamic dim needs an override."""
    names = [i.name for i in graph.inputs]
    for name in overrides:
        if name not in names:
            raise InvalidError("onnx_shape", f"--input-shape names {name!r}; the model's inputs are {names}")
    shapes = {}
    for i in graph.inputs:
        if i.name in overrides:
            shape = tuple(overrides[i.name])
            if i.dims and (len(shape) != len(i.dims)
                           or any(d is not None and d != s for d, s in zip(i.dims, shape))):
                raise InvalidError("onnx_shape", f"input {i.name!r}: shape {_shape_text(shape)} contradicts the "
                                                 f"model's {_dims_text(i.dims)}")
        elif not i.dims:
            raise InvalidError("onnx_shape", f"input {i.name!r} declares no shape; give --input-shape "
                                             f"{i.name}=D0,D1,...")
        else:
            for k, d in enumerate(i.dims[1:], start=1):
                if d is None:
                    raise InvalidError("onnx_shape", f"input {i.name!r} has a dynamic dimension {k} in "
                                                     f"{_dims_text(i.dims)}; give --input-shape {i.name}=D0,D1,...")
            if i.dims[0] is not None and batch is not None and batch != i.dims[0]:
                raise InvalidError("onnx_shape", f"input {i.name!r} has a fixed batch of {i.dims[0]}; "
                                                 f"--batch {batch} does not apply")
            # Every dimension but the batch is known here (the loop above refused a dynamic one).
            shape = ((batch or 1) if i.dims[0] is None else i.dims[0],) + cast(tuple[int, ...], i.dims[1:])
        if not 1 <= len(shape) <= MAX_RANK or min(shape) < 1 or max(shape) > MAX_DIM:
            raise InvalidError("onnx_shape", f"input {i.name!r}: shape {_shape_text(shape)} must have 1 to {MAX_RANK} "
                                             f"dims in [1, 2^24]")
        check_shape(tuple(shape), f"input {i.name!r}")   # at most 2^30 elements, as every CVM tensor
        shapes[i.name] = tuple(int(d) for d in shape)
    room("the model's inputs", 0, list(shapes.values()))   # as the float model's first run holds them
    return shapes


def _shape_text(shape: tuple[int, ...]) -> str:
    # Each dim through shown: a caller's dim may be an integer too long for repr.
    return "[" + ", ".join(shown(d) for d in shape) + "]"


def _dims_text(dims: tuple[int | None, ...]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def free_batch(graph: Graph) -> bool:
    """Whether every input's batch dimension is dynamic, so any number of samples can run at once."""
    return all(i.dims and i.dims[0] is None for i in graph.inputs)


@dataclass(frozen=True)
class Specialized:
    shapes: dict[str, tuple[int, ...]]      # every tensor
    constants: dict[str, np.ndarray]        # initializers and folded tensors, float64 or integer
    peak: int                               # the most bytes the float run held (Evaluator.peak)


def specialize(graph: Graph, shapes: Mapping[str, tuple[int, ...]]) -> Specialized:
    """Run the graph once on zeros: every tensor's shape, and the value of every constant one."""
    constant = set(graph.constants)
    for node in graph.nodes:
        if node.op == "Shape" or all(not t or t in constant for t in node.inputs):
            constant.update(t for t in node.outputs if t)
    evaluator = Evaluator(graph)
    seen: dict[str, tuple[int, ...]] = dict(shapes)
    folded = dict(evaluator.constants)

    def observe(node: Node, name: str, value: np.ndarray) -> None:
        seen[name] = tuple(int(d) for d in value.shape)
        if name not in constant and value.size == 0:
            # A CVM tensor has every dim >= 1; lowered, an empty activation would meet empty weights.
            raise InvalidError("onnx_shape", f"{node.label}: output {name!r} has shape {list(value.shape)}, "
                                             f"which holds no elements")
        if name in constant:
            if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
                raise InvalidError("onnx_weight", f"{node.label}: folds to a constant holding NaN or infinity")
            folded[name] = value

    evaluator.run({k: np.zeros(s) for k, s in shapes.items()}, observe)
    for k, v in graph.constants.items():
        seen[k] = tuple(int(d) for d in v.shape)
    return Specialized(seen, folded, evaluator.peak)


def check_samples(what: str, name: str, data: np.ndarray, shape: tuple[int, ...], fixed_batch: bool) -> np.ndarray:
    """Float samples stacked on axis 0 for an input of ``shape``, as float64."""
    if not isinstance(data, np.ndarray) or data.dtype.kind not in "fiu":
        kind = getattr(data, "dtype", type(data).__name__)
        raise InputError(what, f"{what} data for input {name!r} has dtype {kind}; numbers are needed")
    if data.ndim != len(shape) or tuple(data.shape[1:]) != shape[1:] or data.shape[0] < 1:
        raise InputError(what, f"{what} data for input {name!r} has shape {list(data.shape)}; expected "
                               f"[N, {', '.join(map(str, shape[1:]))}] (samples stacked on axis 0)")
    if fixed_batch and data.shape[0] % shape[0]:
        raise InputError(what, f"{what} data for input {name!r} has {data.shape[0]} samples; the model's fixed "
                               f"batch of {shape[0]} must divide it")
    # Bounded before the copy: a broadcast view holds few bytes and claims any number of samples.
    if 8 * data.size > FLOAT_MEMORY:
        raise LimitError("memory", f"{what} data for input {name!r}: {data.size} values, {8 * data.size} bytes as "
                                   f"float64, over the importer's budget of {FLOAT_MEMORY}")
    values = data.astype(np.float64)
    if not np.all(np.isfinite(values)):
        raise InputError(what, f"{what} data for input {name!r} holds NaN or infinity")
    return values


def chunks(count: int, size: int) -> list[tuple[int, int]]:
    return [(k, min(k + size, count)) for k in range(0, count, size)]


Progress = Callable[[int], None]


def calibrate(graph: Graph, data: Mapping[str, np.ndarray], chunk: int, skip: set[str],
              advance: Progress | None = None) -> dict[str, float]:
    """max |x| over the data of every input and every activation (tensors in ``skip`` are constants)."""
    evaluator = Evaluator(graph)
    peaks: dict[str, float] = {}
    count = next(iter(data.values())).shape[0]

    def observe(node: Node, name: str, value: np.ndarray) -> None:
        if name in skip:
            return
        top = float(np.max(np.abs(value))) if value.size else 0.0
        if not np.isfinite(top):
            raise InputError("calibration", f"{node.label}: the float model produces NaN or infinity on the "
                                            f"calibration data")
        peaks[name] = max(peaks.get(name, 0.0), top)

    for lo, hi in chunks(count, chunk):
        batch = {k: v[lo:hi] for k, v in data.items()}
        for k, v in batch.items():
            peaks[k] = max(peaks.get(k, 0.0), float(np.max(np.abs(v))))
        evaluator.run(batch, observe)
        if advance is not None:
            advance(hi - lo)
    return peaks
