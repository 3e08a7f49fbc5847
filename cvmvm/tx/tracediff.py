"""Comparing two traces: narrow a disagreement down to one entry and one op.

Trace entries come in tensor-id order, and an instruction's inputs have
smaller ids than its outputs, so the first instruction whose output commitment
differs either read identical inputs (the dispute is that one op) or read a
model input or param that already differs.  Traces of two different models
are compared the same way, entry by entry: the first entry whose producer or
commitment differs is named (a param, an input or an instruction, with its op and
attributes), beside the two model hashes.

``read_trace`` reads a file: serializer.records.trace.load_trace checks every
field the root commits to, and this module adds what only the verifier can
check, that every instruction output has the type its op infers.
"""

from __future__ import annotations

from typing import Any

from isa.errors import CvmError, MalformedError
from serializer.hashing import INPUT, INSTR, PARAM
from serializer.model import Input, Instr, Model
from serializer.records.trace import Entry, TraceFile, load_trace
from cvmvm.vm.verify import verify


def read_trace(data: bytes, what: str) -> TraceFile:
    """A trace file, checked: its roots, and every instruction output's type."""
    tf = load_trace(data, what)
    variables = [e for e in tf.entries if e.kind in (INPUT, PARAM)]
    # Params as inputs: the types an instruction infers do not depend on which a variable is.
    inputs = tuple(Input(f"v{e.tensor}", e.type) for e in variables)
    instrs = tuple(Instr(e.op, e.attrs, e.inputs, tuple(range(e.tensor, e.tensor + _arity(tf, e))))
                   for e in tf.entries if e.kind == INSTR and e.output == 0)
    try:
        program = verify(Model(inputs, (), instrs, ()))
    except CvmError as err:
        raise MalformedError("trace", f"{what}: its instructions do not verify ({err.code}: {err.message})") from None
    for entry in tf.entries:
        t = program.types[entry.tensor]
        if t != entry.type:
            raise MalformedError("trace", f"{what}: entries[{entry.tensor}] says {entry.type.dtype}"
                                          f"{list(entry.type.shape)} p{entry.type.precision}; instruction "
                                          f"{entry.index} ({entry.op}) gives {t.dtype}{list(t.shape)} p{t.precision}")
    return tf


def _arity(tf: TraceFile, first: Entry) -> int:
    n = 0
    while first.tensor + n < len(tf.entries) and tf.entries[first.tensor + n].kind == INSTR \
            and tf.entries[first.tensor + n].index == first.index:
        n += 1
    return n


def _describe(e: Entry) -> dict[str, Any]:
    keys = ("kind", "index", "output", "tensor", "name", "dtype", "shape", "precision", "commitment")
    row = {k: e.row.get(k) for k in keys}
    if e.kind == INSTR:
        row.update(op=e.op, attrs=e.row["attrs"], inputs=list(e.inputs))
    return row


def _position(e: Entry) -> tuple[Any, ...]:
    """What the program root commits to about an entry (its producer), besides a param's value."""
    return (e.kind, e.index, e.output, e.type, e.op, e.attrs, e.inputs)


def diff(a: TraceFile, b: TraceFile) -> dict[str, Any]:
    """What differs between two traces, as a JSON-ready report; ``same`` is True when nothing does."""
    if a.root == b.root:
        return {"same": True, "root": a.root}
    report: dict[str, Any] = {"same": False, "model_hash": [a.model_hash, b.model_hash],
                              "same_model": a.model_hash == b.model_hash, "roots": [a.root, b.root],
                              "entries": [len(a.entries), len(b.entries)]}
    pairs = list(zip(a.entries, b.entries))
    first = next((k for k, (x, y) in enumerate(pairs)
                  if (_position(x), x.commitment) != (_position(y), y.commitment)), None)
    if first is None:
        # Entry for entry the same, and the roots differ: one trace goes on where the other stops,
        # or the programs differ in their output lists (head records), the one thing the program
        # root commits to that no entry shows (names are not committed to: those traces are the same).
        if len(a.entries) != len(b.entries):
            report.update(reason="length", first_entry=None, instruction=None)
        else:
            report.update(reason="outputs", outputs=[list(a.outputs), list(b.outputs)], first_entry=None,
                          instruction=None)
        return report
    x, y = pairs[first]
    program_differs = _position(x) != _position(y)
    report.update(reason="program" if program_differs else "tensor", first_entry={"a": _describe(x), "b": _describe(y)})
    # The first instruction output whose hash differs while the program up to it agrees.
    same_program = next((k for k, (p, q) in enumerate(pairs) if _position(p) != _position(q)),
                        len(pairs))
    instr = next((k for k in range(first, same_program) if a.entries[k].kind == INSTR
                  and a.entries[k].commitment != b.entries[k].commitment), None)
    report["instruction"] = None if instr is None else _instruction(a, b, instr)
    return report


def _instruction(a: TraceFile, b: TraceFile, k: int) -> dict[str, Any]:
    x, y = a.entries[k], b.entries[k]
    bad_inputs = [t for t in x.inputs if a.entries[t].commitment != b.entries[t].commitment]
    return {
        "index": x.index, "output": x.output, "tensor": x.tensor, "op": x.op, "name": x.row["name"],
        "attrs": x.row["attrs"],
        "inputs": [_describe(a.entries[t]) for t in x.inputs],
        "outputs": [_describe(e) for e in a.entries if e.kind == INSTR and e.index == x.index],
        "output_commitments": [x.row["commitment"], y.row["commitment"]],
        "inputs_agree": not bad_inputs,
        "differing_inputs": bad_inputs,
    }


def _entry_text(e: dict[str, Any]) -> str:
    what = f"{e['kind']} {e['index']}" + (f" output {e['output']}" if e["kind"] == "instr" else "")
    text = f"{what} (tensor {e['tensor']}, {e['name']!r}) {e['dtype']}{e['shape']} p{e['precision']}"
    if e["kind"] == "instr":
        text += f" {e['op']} {e['attrs']} inputs {e['inputs']}"
    return text


def _value(v: Any) -> str:
    return "(" + ",".join(map(str, v)) + ")" if isinstance(v, list) else str(v)


def render(report: dict[str, Any]) -> str:
    if report["same"]:
        return f"identical: trace root {report['root']}"
    lines = []
    a_hash, b_hash = report["model_hash"]
    if not report["same_model"]:
        lines.append(f"the traces are of different models: model hash {a_hash} vs {b_hash}")
    if report["reason"] == "outputs":
        a_out, b_out = report["outputs"]
        lines.append(f"every entry agrees: the programs' outputs differ, tensors {a_out} vs {b_out}")
        return "\n".join(lines)
    if report["reason"] == "length":
        n, m = report["entries"]
        lines.append(f"the first {min(n, m)} entries agree; one trace has {n} entries, the other {m}")
        return "\n".join(lines)
    first = report["first_entry"]
    if report["reason"] == "program":
        lines.append(f"the first entry that differs is produced differently:\n  a: {_entry_text(first['a'])}\n"
                     f"  b: {_entry_text(first['b'])}")
    elif first["a"]["kind"] != "instr":
        t = first["a"]
        lines.append(f"{t['kind']} {t['index']} ({t['name']}, tensor {t['tensor']}) differs first: "
                     f"{t['commitment']} vs {first['b']['commitment']}")
    ins = report["instruction"]
    if ins is None:
        if report["reason"] == "tensor":
            lines.append("no instruction output differs")
        return "\n".join(lines)
    lines.append(f"first differing instruction: {ins['index']} {ins['op']} ({ins['name']}) output {ins['output']} "
                 f"(tensor {ins['tensor']})")
    attrs = ins["attrs"] if isinstance(ins["attrs"], dict) else {}
    lines.append("  attrs   " + (" ".join(f"{k}={_value(v)}" for k, v in attrs.items()) or "none"))
    for e in ins["inputs"]:
        lines.append(f"  input   tensor {e['tensor']} {e['dtype']}{e['shape']} p{e['precision']} commitment {e['commitment']}")
    for e in ins["outputs"]:
        lines.append(f"  output  tensor {e['tensor']} {e['dtype']}{e['shape']} p{e['precision']}")
    lines.append(f"  output commitment {ins['output_commitments'][0]} vs {ins['output_commitments'][1]}")
    if ins["inputs_agree"]:
        lines.append("inputs agree in both traces: the dispute is this one op")
    else:
        t = first["a"]
        lines.append(f"its inputs differ too (tensors {ins['differing_inputs']}); the first differing tensor is "
                     f"tensor {t['tensor']} ({t['kind']} {t['index']}, {t['name']})")
    return "\n".join(lines)

