"""Traces: a hash of every tensor a run produces, committed by a Merkle root.

Tensor ids are visited in order (inputs, params, then each instruction's
outputs), so the leaf list of a trace is fixed by the program alone; only the
tensor hashes depend on the data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from isa.attrs import attrs_to_dict
from isa.errors import MalformedError
from serializer.hashing import INPUT, INSTR, KIND_NAMES, PARAM, TraceEntry, merkle_root, tensor_hash
from cvmvm.verify import Program

TRACE_FORMAT = "cvmvm-trace/1"


def entry_positions(program: Program) -> list[tuple[int, int, int]]:
    """(kind, index, output) of every tensor id, in tensor-id order."""
    model = program.model
    pos = [(INPUT, k, 0) for k in range(len(model.inputs))]
    pos += [(PARAM, k, 0) for k in range(len(model.params))]
    for step in program.steps:
        pos += [(INSTR, step.index, j) for j in range(len(step.outputs))]
    return pos


@dataclass(frozen=True)
class Trace:
    entries: tuple[TraceEntry, ...]
    root: bytes

    @property
    def leaves(self) -> list[bytes]:
        return [e.leaf for e in self.entries]


class Tracer:
    """An execution observer that hashes each tensor once, as it is produced."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.digests: list[bytes | None] = [None] * len(program.types)

    def __call__(self, tensor: int, value: np.ndarray) -> None:
        self.digests[tensor] = tensor_hash(value, self.program.types[tensor].dtype)

    def trace(self) -> Trace:
        entries = tuple(TraceEntry(kind, index, out, t, d)
                        for t, ((kind, index, out), d) in enumerate(zip(entry_positions(self.program), self.digests)))
        return Trace(entries, merkle_root([e.leaf for e in entries]))


def trace_to_json(program: Program, trace: Trace, model_hash: bytes) -> dict[str, Any]:
    """A self-describing trace file: enough to name the op at a disagreement without the model."""
    model = program.model
    rows = []
    for e in trace.entries:
        t = program.types[e.tensor]
        row: dict[str, Any] = {"kind": KIND_NAMES[e.kind], "index": e.index, "output": e.output,
                               "tensor": e.tensor, "dtype": t.dtype, "shape": list(t.shape),
                               "precision": t.precision, "hash": e.digest.hex()}
        if e.kind == INSTR:
            step = program.steps[e.index]
            row.update(op=step.op.name, name=step.name, inputs=list(step.inputs),
                       attrs={k: (list(v) if isinstance(v, tuple) else v) for k, v in attrs_to_dict(step.attrs).items()})
        else:
            row["name"] = (model.inputs[e.index] if e.kind == INPUT else model.params[e.index]).name
        rows.append(row)
    return {"format": TRACE_FORMAT, "model_hash": model_hash.hex(), "root": trace.root.hex(), "entries": rows}


def trace_bytes(doc: dict[str, Any]) -> bytes:
    return (json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n").encode("utf-8")


def read_trace(data: bytes, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise MalformedError("trace", f"{what}: not JSON ({e})") from None
    if type(doc) is not dict or doc.get("format") != TRACE_FORMAT or type(doc.get("entries")) is not list:
        raise MalformedError("trace", f"{what}: not a {TRACE_FORMAT} file")
    return doc
