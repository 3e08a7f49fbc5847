"""The import report: the float model beside the quantized one, layer by layer and at the outputs.

The quantized side is the imported program itself, run by the VM on the
evaluation samples (its own batch at a time); the float side is floateval on
the same samples.  Per quantization point: the chosen precision, the widest
intermediate on the way to it, and the largest error against the float
activations, measured and as bounded at import (both relative to the tensor's
calibrated max |x|).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from isa.errors import InputError
from cvmvm.importer import calibrate as cal
from cvmvm.importer.floateval import Evaluator
from cvmvm.importer.graph import Graph, Node, Tail
from cvmvm.importer.lower import Lowering
from cvmvm.vm.api import Model
from cvmvm.vm.execute import execute

MEASURE_SAMPLES = 256  # without evaluation data, errors are measured on this many calibration samples


def progress_bar(total: int, what: str, enabled: bool) -> Any:
    """A tqdm bar on stderr (its ``update(n)``, ``close()``) when asked for, stderr is a terminal and
    tqdm is installed (the onnx extra brings it); else None."""
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=what, unit="sample", leave=False, disable=None)


@dataclass(frozen=True)
class LayerReport:
    tensor: str
    nodes: tuple[str, ...]
    precision: int
    widest: int          # widest intermediate precision on the way (the accumulator)
    scale: float
    peak: float          # calibrated max |x| of the float tensor
    bound: float         # predicted max |error| / peak, for float values within the calibrated range
    measured: float      # measured max |error| / peak
    beyond: float        # the fraction of measured float values beyond the calibrated peak (saturated)


@dataclass(frozen=True)
class OutputReport:
    name: str
    shape: tuple[int, ...]
    precision: int | None
    scale: float | None
    bound: float | None      # predicted max |error|, float units
    measured: float | None   # measured max |error|, float units


@dataclass(frozen=True)
class Report:
    model_hash: str
    instructions: int
    ops: int
    gas: int
    op_counts: tuple[tuple[str, int], ...]
    inputs: tuple[tuple[str, tuple[int, ...], float | None], ...]
    outputs: tuple[OutputReport, ...]
    dropped: tuple[str, ...]               # the classifier tail, by node
    classes: tuple[Any, ...] | None
    calibration_samples: int
    layers: tuple[LayerReport, ...]
    measured_on: str                        # "evaluation" or "calibration"
    measured_samples: int
    float_accuracy: float | None
    quantized_accuracy: float | None
    agreement: float | None                 # top-1 agreement of float and quantized
    import_seconds: float = 0.0
    evaluate_seconds: float = 0.0
    source_nodes: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "model_hash": self.model_hash, "instructions": self.instructions, "ops": self.ops, "gas": self.gas,
            "op_counts": dict(self.op_counts),
            "inputs": [{"name": n, "shape": list(s), "scale": sc} for n, s, sc in self.inputs],
            "outputs": [{"name": o.name, "shape": list(o.shape), "precision": o.precision, "scale": o.scale,
                         "error_bound": o.bound, "error_measured": o.measured} for o in self.outputs],
            "dropped_tail": list(self.dropped),
            "classes": None if self.classes is None else list(self.classes),
            "calibration_samples": self.calibration_samples,
            "layers": [{"tensor": x.tensor, "nodes": list(x.nodes), "precision": x.precision, "widest": x.widest,
                        "scale": x.scale, "peak": x.peak, "relative_error_bound": x.bound,
                        "relative_error_measured": x.measured, "beyond_range": x.beyond} for x in self.layers],
            "measured_on": self.measured_on, "measured_samples": self.measured_samples,
            "float_accuracy": self.float_accuracy, "quantized_accuracy": self.quantized_accuracy,
            "top1_agreement": self.agreement, "source_nodes": self.source_nodes,
            "import_seconds": round(self.import_seconds, 3), "evaluate_seconds": round(self.evaluate_seconds, 3),
        }

    def text(self) -> str:
        lines = [f"imported {self.source_nodes} ONNX nodes -> {self.instructions} instructions, "
                 f"ops {self.ops}, gas {self.gas} ({self.import_seconds:.2f} s)",
                 f"model hash {self.model_hash}"]
        if self.dropped:
            lines.append(f"dropped the output tail ({', '.join(self.dropped)}): the outputs are logits")
        lines += [f"input  {n}: {list(s)} scale {sc:.6g}" if sc is not None else f"input  {n}: {list(s)}"
                  for n, s, sc in self.inputs]
        lines.append(f"calibrated on {self.calibration_samples} samples; errors measured on "
                     f"{self.measured_samples} {self.measured_on} samples, relative to each tensor's calibrated "
                     f"max |x| (the bound holds within it; 'beyond': values past it, saturated)")
        width = max([len(x.tensor) for x in self.layers] + [6])
        lines.append(f"  {'tensor':<{width}}  bits  widest  {'scale':>10}  measured     bound   beyond  nodes")
        for x in self.layers:
            lines.append(f"  {x.tensor:<{width}}  {x.precision:>4}  {x.widest:>6}  {x.scale:>10.4g}  "
                         f"{x.measured:>8.3%}  {x.bound:>8.3%}  {x.beyond:>7.3%}  {', '.join(x.nodes)}")
        for k, o in enumerate(self.outputs):
            if o.scale is None:
                lines.append(f"output {k} {o.name}: {list(o.shape)} indices (int64)")
            else:
                lines.append(f"output {k} {o.name}: {list(o.shape)} precision {o.precision} scale {o.scale:.6g}; "
                             f"max |error| {o.measured:.4g} (bound {o.bound:.4g})")
        if self.float_accuracy is not None:
            lines.append(f"top-1 accuracy on {self.measured_samples} samples: float {self.float_accuracy:.2%}, "
                         f"quantized {self.quantized_accuracy:.2%}; agreement {self.agreement:.2%}")
        elif self.agreement is not None:
            lines.append(f"top-1 agreement of float and quantized: {self.agreement:.2%}")
        lines.append("ops: " + ", ".join(f"{op} {n}" for op, n in self.op_counts))
        return "\n".join(lines)


def evaluate(graph: Graph, tail: Tail, lowering: Lowering, model: Model, calibration: Mapping[str, np.ndarray],
             eval_data: np.ndarray | None, eval_labels: np.ndarray | None, chunk: int, progress: bool) -> Report:
    """Run float and quantized side by side and fill the report."""
    started = time.perf_counter()
    names = [i.name for i in graph.inputs]
    program = model.program
    batch = program.input_types[0].shape[0]
    free = chunk != batch
    if eval_data is not None:
        if len(names) != 1:
            raise InputError("eval", f"evaluation data works for one-input models; this one has {names}")
        data = {names[0]: cal.check_samples("eval", names[0], eval_data, program.input_types[0].shape, not free)}
        measured_on = "evaluation"
    else:
        count = min(next(iter(calibration.values())).shape[0], MEASURE_SAMPLES)
        count = count if free else max(batch, count - count % batch)
        data = {k: v[:count] for k, v in calibration.items()}
        measured_on = "calibration"
    count = next(iter(data.values())).shape[0]
    labels = _labels(eval_labels, count) if eval_labels is not None else None
    if eval_labels is not None and eval_data is None:
        raise InputError("eval", "labels were given without evaluation data")
    in_scales = program.model.input_scales
    layer_ids = {lowering.builder.ids[x.value.ref]: x for x in lowering.layers}
    layer_err = {x.tensor: 0.0 for x in lowering.layers}
    beyond = {x.tensor: 0 for x in lowering.layers}
    totals = {x.tensor: 0 for x in lowering.layers}
    out_err = [0.0] * len(graph.outputs)
    float_top: list[np.ndarray] = []
    quant_top: list[np.ndarray] = []
    evaluator = Evaluator(graph)
    wanted = {x.tensor for x in lowering.layers}
    step = batch * max(1, chunk // batch)
    bar = progress_bar(count, "evaluating", progress)
    for lo, hi in cal.chunks(count, step):
        seen: dict[str, np.ndarray] = {}

        def keep(node: Node, name: str, value: np.ndarray) -> None:
            if name in wanted:
                seen[name] = value

        floats = evaluator.run({k: v[lo:hi] for k, v in data.items()}, keep)
        for name, v in data.items():
            if name in wanted:
                seen[name] = v[lo:hi]
        for s0 in range(lo, hi, batch):
            s1 = min(s0 + batch, hi)
            feeds = {}
            for name in names:
                x = data[name][s0:s1]
                if s1 - s0 < batch:  # the last, short batch: padded with zeros, the padding dropped below
                    x = np.concatenate([x, np.zeros((batch - (s1 - s0),) + x.shape[1:])])
                feeds[name] = x      # float: the VM quantizes it at the input's scale
            got: dict[int, np.ndarray] = {}
            outs, _ = execute(program, feeds, lambda t, v: got.__setitem__(t, v) if t in layer_ids else None)
            rows = slice(s0 - lo, s1 - lo) if free else slice(None)
            for t, layer in layer_ids.items():
                ref = seen[layer.tensor][rows]
                q = got[t][: s1 - s0] if free else got[t]
                diff = np.abs(q.reshape(ref.shape).astype(np.float64) * layer.value.scale - ref)
                layer_err[layer.tensor] = max(layer_err[layer.tensor], float(np.max(diff)) if diff.size else 0.0)
                beyond[layer.tensor] += int(np.count_nonzero(np.abs(ref) > layer.value.peak))
                totals[layer.tensor] += ref.size
            for k, (name, v, scale) in enumerate(zip(graph.outputs, outs, program.model.output_scales)):
                ref = floats[name][rows]
                q = v[: s1 - s0] if free else v
                if scale is not None:
                    diff = np.abs(q.reshape(ref.shape).astype(np.float64) * scale - ref)
                    out_err[k] = max(out_err[k], float(np.max(diff)) if diff.size else 0.0)
                if k == 0 and ref.ndim == 2:
                    float_top.append(np.argmax(ref, axis=1))
                    quant_top.append(np.argmax(q.reshape(ref.shape), axis=1))
        if bar:
            bar.update(hi - lo)
    if bar:
        bar.close()
    agreement = float_acc = quant_acc = None
    if float_top:
        f_top, q_top = np.concatenate(float_top), np.concatenate(quant_top)
        agreement = float(np.mean(f_top == q_top))
        if labels is not None:
            classes = tail.classes
            f_pred = classes[f_top] if classes is not None else f_top
            q_pred = classes[q_top] if classes is not None else q_top
            float_acc = float(np.mean(f_pred == labels))
            quant_acc = float(np.mean(q_pred == labels))
    return Report(
        model_hash=model.model_hash.hex(),
        instructions=len(program.steps), ops=model.ops, gas=model.gas,
        op_counts=tuple(sorted(Counter(s.op.name for s in program.steps).items())),
        inputs=tuple((i.name, i.type.shape, s) for i, s in zip(program.model.inputs, in_scales)),
        outputs=tuple(_output_report(lowering, program, k, name, out_err[k]) for k, name in enumerate(graph.outputs)),
        dropped=tuple(n.label for n in tail.dropped),
        classes=None if tail.classes is None else tuple(v.item() for v in tail.classes.reshape(-1)),
        calibration_samples=next(iter(calibration.values())).shape[0],
        layers=tuple(LayerReport(x.tensor, x.nodes, x.value.precision, x.widest, x.value.scale, x.value.peak,
                                 _relative(x.value.error, x.value.peak), _relative(layer_err[x.tensor], x.value.peak),
                                 beyond[x.tensor] / max(totals[x.tensor], 1))
                     for x in lowering.layers),
        measured_on=measured_on, measured_samples=count,
        float_accuracy=float_acc, quantized_accuracy=quant_acc, agreement=agreement,
        evaluate_seconds=time.perf_counter() - started)


def _output_report(lowering: Lowering, program: Any, k: int, name: str, measured: float) -> OutputReport:
    v = lowering.env[name]
    t = program.output_types[k]
    scale = getattr(v, "scale", None)
    return OutputReport(name, t.shape, t.precision, scale, getattr(v, "error", None),
                        measured if scale is not None else None)


def _relative(error: float, peak: float) -> float:
    return error / peak if peak > 0 else error


def _labels(labels: np.ndarray, count: int) -> np.ndarray:
    if not isinstance(labels, np.ndarray) or labels.shape != (count,) or labels.dtype.kind not in "iu":
        shape = getattr(labels, "shape", None)
        raise InputError("eval", f"labels of shape {shape} and dtype {getattr(labels, 'dtype', None)}; expected "
                                 f"{count} integers, one per evaluation sample")
    return labels.astype(np.int64)
