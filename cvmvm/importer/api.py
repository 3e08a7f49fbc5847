"""import_onnx: a float ONNX model and calibration data -> a verified native CVM model and a report."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Mapping

import numpy as np

from isa.errors import InputError, InvalidError, UsageError, shown
from isa.types import MAX_DIM
from serializer.model import Model as ModelIR
from serializer.model import with_scales
from cvmvm import files
from cvmvm.importer import calibrate as cal
from cvmvm.importer import graph as g
from cvmvm.importer import floateval as fe
from cvmvm.importer import report as rep
from cvmvm.importer.lower import Lowering, Options, check_supported
from cvmvm.vm.api import Model
from cvmvm.vm.verify import verify


@dataclass(frozen=True)
class ImportResult:
    model: Model                 # verified; model.canonical_bytes is the .cvm file
    report: rep.Report


def _as_arrays(what: str, data: np.ndarray | Mapping[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    if isinstance(data, Mapping):
        arrays = dict(data)
    elif len(names) == 1:
        arrays = {names[0]: data}
    else:
        raise InputError(what, f"the model has inputs {names}; give {what} data per input name")
    if sorted(arrays) != sorted(names):
        raise InputError(what, f"{what} data for {sorted(arrays)}; the model's inputs are {names}")
    return arrays


def import_onnx(source: str | os.PathLike[str] | bytes | bytearray | memoryview,
                calibration: np.ndarray | Mapping[str, np.ndarray], *,
                eval_data: np.ndarray | None = None, eval_labels: np.ndarray | None = None,
                batch: int | None = None, input_shapes: Mapping[str, tuple[int, ...]] | None = None,
                options: Options = Options(), progress: bool = False) -> ImportResult:
    """Quantize a float ONNX model (a path, or its bytes as bytes, bytearray or memoryview) into a
    verified CVM program.

    ``calibration``: float samples stacked on axis 0 (a dict by input name for
    several inputs).  ``eval_data``/``eval_labels``: optional samples and
    integer labels for the report's accuracy.  ``batch`` an int, ``input_shapes``
    input names to tuples (or lists) of ints, ``progress`` a bool; other types are
    usage.argument.  The result's model is the same bytes for the same ONNX
    model, calibration data and options.
    """
    started = time.perf_counter()
    _check_arguments(batch, input_shapes, options, progress)
    data, _ = files.given_bytes(source, "ONNX model", lambda head: (g.MAX_ONNX_BYTES, "ONNX model"))
    full = g.parse(data)
    graph, tail = g.drop_tail(full)
    if not graph.outputs:
        # A tail over constants alone leaves nothing for the program to compute.
        raise InvalidError("onnx_op", "no graph output depends on an input once the classifier tail is dropped")
    check_supported(graph)
    names = [i.name for i in graph.inputs]
    shapes = cal.input_shapes(graph, batch, input_shapes or {})
    fixed = not cal.free_batch(graph)
    # Before the float model first runs, which allocates at the input shapes whatever the data.
    samples = {k: cal.check_samples("calibration", k, v, shapes[k], fixed)
               for k, v in _as_arrays("calibration", calibration, names).items()}
    counts = {v.shape[0] for v in samples.values()}
    if len(counts) != 1:
        raise InputError("calibration", f"calibration inputs hold different numbers of samples {sorted(counts)}")
    spec = cal.specialize(graph, shapes)
    chunk = _chunk(graph, shapes, spec, fixed)
    _dry_run(graph, spec, options, names)
    bar = rep.progress_bar(counts.pop(), "calibrating", progress)
    try:
        peaks = cal.calibrate(graph, samples, chunk, set(spec.constants), bar.update if bar else None)
    finally:
        if bar:
            bar.close()
    lowering, model_ir = _lower(graph, spec, peaks, options, names)
    program = verify(model_ir)
    model = Model(program)
    imported = time.perf_counter() - started
    report = rep.evaluate(graph, tail, lowering, model, samples, eval_data, eval_labels, chunk, progress)
    return ImportResult(model, replace(report, import_seconds=imported, source_nodes=len(full.nodes)))


def _check_arguments(batch: object, input_shapes: object, options: object, progress: object) -> None:
    """Refuse arguments of the wrong type before anything is read: they would otherwise surface as
    Python's own errors deep in the pipeline, or, as floats and bools in a shape, be taken as ints."""
    if batch is not None and (type(batch) is not int or not 1 <= batch <= MAX_DIM):
        raise UsageError("argument", f"batch={shown(batch)}: an int in [1, 2^24] or None")
    if input_shapes is not None:
        if not isinstance(input_shapes, Mapping):
            raise UsageError("argument", f"input_shapes={shown(input_shapes)}: a mapping from input name to "
                                         f"a tuple of ints, or None")
        for name, shape in input_shapes.items():
            if type(name) is not str or not isinstance(shape, (tuple, list)) \
                    or any(type(d) is not int for d in shape):
                raise UsageError("argument", f"input_shapes[{shown(name)}]={shown(shape)}: each input name "
                                             f"(a str) maps to a tuple of ints")
    if not isinstance(options, Options):
        raise UsageError("argument", f"options={shown(options)}: a cvmvm.importer.Options")
    if type(progress) is not bool:
        raise UsageError("argument", f"progress={shown(progress)}: True or False")


def _dry_run(graph: g.Graph, spec: cal.Specialized, options: Options, names: list[str]) -> None:
    """Lower once on unit statistics, so an unsupported op, attribute or shape fails before calibration.

    Whether a precision fits depends on the real ranges, so a precision failure here proves nothing:
    the real lowering decides it.
    """
    try:
        _lower(graph, spec, {k: 1.0 for k in spec.shapes}, options, names)
    except InvalidError as e:
        if e.code != "invalid.precision":
            raise


def _lower(graph: g.Graph, spec: cal.Specialized, peaks: dict[str, float], options: Options,
           names: list[str]) -> tuple[Lowering, ModelIR]:
    lowering = Lowering(graph, spec.shapes, spec.constants, peaks, options)
    # Constants the lowering combines (alpha * B, a folded BatchNormalization) are refused where they
    # are formed if they hold NaN or infinity (lower.finite): numpy's warnings about forming them
    # would be more lines on stderr saying less.
    with np.errstate(all="ignore"):
        model_ir, input_scales, output_scales = lowering.run(names)
    return lowering, with_scales(model_ir, input_scales, output_scales)


def _chunk(graph: g.Graph, shapes: dict[str, tuple[int, ...]], spec: cal.Specialized, fixed: bool) -> int:
    """Samples per float run: the model's batch, or when the graph is batch-polymorphic (every
    activation's shape at batch 2B is its shape at B with the leading dim doubled) up to CHUNK, as
    many as the float run's memory budget holds (its peak grows linearly with the batch)."""
    batch = next(iter(shapes.values()))[0]
    if fixed or 2 * spec.peak > fe.FLOAT_MEMORY:
        return batch
    doubled = cal.specialize(graph, {k: (2 * s[0],) + s[1:] for k, s in shapes.items()})
    for name, shape in spec.shapes.items():
        if name in spec.constants:
            continue
        if shape[:1] != (batch,) or doubled.shapes[name] != (2 * batch,) + shape[1:]:
            return batch
    per_batch = doubled.peak - spec.peak
    if per_batch <= 0:
        return cal.CHUNK
    return max(batch, min(cal.CHUNK, batch + (fe.FLOAT_MEMORY - spec.peak) * batch // per_batch))
