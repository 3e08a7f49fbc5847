"""Comparing two traces of one model: narrow a disagreement down to one op.

Trace entries come in tensor-id order, and an instruction's inputs have
smaller ids than its outputs, so the first instruction whose output hash
differs either read identical inputs (the dispute is that one op) or read a
model input or param that already differs.  The files are read and checked by
serializer.records.trace.load_trace.
"""

from __future__ import annotations

from typing import Any

from serializer.hashing import KIND_NAMES
from serializer.records.trace import Entry, TraceFile

_INSTR = KIND_NAMES.index("instr")


def _describe(e: Entry) -> dict[str, Any]:
    keys = ("kind", "index", "output", "tensor", "name", "dtype", "shape", "precision", "hash")
    return {k: e.row.get(k) for k in keys}


def diff(a: TraceFile, b: TraceFile) -> dict[str, Any]:
    """What differs between two traces, as a JSON-ready report; ``same`` is True when nothing does."""
    if a.model_hash != b.model_hash:
        return {"same": False, "reason": "model", "model_hash": [a.model_hash, b.model_hash]}
    if len(a.entries) != len(b.entries) or any((x.kind, x.index, x.output) != (y.kind, y.index, y.output)
                                               for x, y in zip(a.entries, b.entries)):
        return {"same": False, "reason": "structure",
                "detail": "the traces claim one model but list different tensors"}
    differing = [k for k, (x, y) in enumerate(zip(a.entries, b.entries)) if x.digest != y.digest]
    if not differing:
        return {"same": True, "root": a.root}
    first = differing[0]
    report: dict[str, Any] = {"same": False, "reason": "tensor", "first_tensor": _describe(a.entries[first]),
                              "first_tensor_hashes": [a.entries[first].row["hash"], b.entries[first].row["hash"]],
                              "roots": [a.root, b.root]}
    instr = next((k for k in differing if a.entries[k].kind == _INSTR), None)
    if instr is None:
        report["instruction"] = None
        return report
    x, y = a.entries[instr], b.entries[instr]
    ins = x.row["inputs"]
    bad_inputs = [t for t in ins if not 0 <= t < len(a.entries) or a.entries[t].digest != b.entries[t].digest]
    report["instruction"] = {
        "index": x.index, "output": x.output, "tensor": x.tensor, "op": x.row.get("op"), "name": x.row.get("name"),
        "attrs": x.row.get("attrs"),
        "inputs": [_describe(a.entries[t]) for t in ins if 0 <= t < len(a.entries)],
        "outputs": [_describe(e) for e in a.entries if e.kind == _INSTR and e.index == x.index],
        "output_hashes": [x.row["hash"], y.row["hash"]],
        "inputs_agree": not bad_inputs,
        "differing_inputs": bad_inputs,
        "same_op": all(x.row.get(k) == y.row.get(k) for k in ("op", "attrs", "inputs", "shape", "dtype", "precision")),
    }
    return report


def _value(v: Any) -> str:
    return "(" + ",".join(map(str, v)) + ")" if isinstance(v, list) else str(v)


def render(report: dict[str, Any]) -> str:
    if report["same"]:
        return f"identical: trace root {report['root']}"
    if report["reason"] == "model":
        a, b = report["model_hash"]
        return f"the traces are of different models: model hash {a} vs {b}"
    if report["reason"] == "structure":
        return f"different: {report['detail']}"
    t = report["first_tensor"]
    lines = []
    if t["kind"] != "instr":
        lines.append(f"{t['kind']} {t['index']} ({t['name']}, tensor {t['tensor']}) differs first: "
                     f"{report['first_tensor_hashes'][0]} vs {report['first_tensor_hashes'][1]}")
    ins = report["instruction"]
    if ins is None:
        lines.append("no instruction output differs")
        return "\n".join(lines)
    lines.append(f"first differing instruction: {ins['index']} {ins['op']} ({ins['name']}) output {ins['output']} "
                 f"(tensor {ins['tensor']})")
    attrs = ins["attrs"] if isinstance(ins["attrs"], dict) else {}
    lines.append("  attrs   " + (" ".join(f"{k}={_value(v)}" for k, v in attrs.items()) or "none"))
    for e in ins["inputs"]:
        lines.append(f"  input   tensor {e['tensor']} {e['dtype']}{e['shape']} p{e['precision']} hash {e['hash']}")
    for e in ins["outputs"]:
        lines.append(f"  output  tensor {e['tensor']} {e['dtype']}{e['shape']} p{e['precision']}")
    lines.append(f"  output hash {ins['output_hashes'][0]} vs {ins['output_hashes'][1]}")
    if ins["inputs_agree"]:
        lines.append("inputs agree in both traces: the dispute is this one op")
    else:
        lines.append(f"its inputs differ too (tensors {ins['differing_inputs']}); the first differing tensor is "
                     f"tensor {t['tensor']} ({t['kind']} {t['index']}, {t['name']})")
    if not ins["same_op"]:
        lines.append("warning: the two traces describe this instruction differently")
    return "\n".join(lines)
