"""The trace file (docs/FORMAT.md section 5): a run's every tensor hash as JSON, self-describing
enough to name the op at a disagreement without the model.

Written by cvmvm.vm.trace.trace_to_json (through ``entry_to_json`` and
``trace_doc``) and ``trace_bytes`` (one JSON document) or ``trace_lines``
(JSON lines: a header, then one entry per line, so line-based diff tools work
on two traces); read back, in either form, by ``load_trace``, which checks
every entry and recomputes the root from them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Sequence

from isa.attrs import attrs_to_dict
from isa.errors import MalformedError
from isa.types import TensorType
from serializer.hashing import HASH_SIZE, KIND_NAMES, TraceEntry, leaf_hash, merkle_root, trace_root

TRACE_VERSION = 1
TRACE_FORMAT = f"cvmvm-trace/{TRACE_VERSION}"
_INSTR = KIND_NAMES.index("instr")


def entry_to_json(e: TraceEntry, t: TensorType, name: str,
                  instr: tuple[str, Sequence[int], Any] | None = None) -> dict[str, Any]:
    """One entry: its position, type, node and hash; ``instr`` (op, input tensor ids, attribute
    record) for an instruction's output."""
    row: dict[str, Any] = {"kind": KIND_NAMES[e.kind], "index": e.index, "output": e.output,
                           "tensor": e.tensor, "dtype": t.dtype, "shape": list(t.shape),
                           "precision": t.precision, "node": e.node.hex(), "hash": e.digest.hex()}
    if instr is not None:
        op, inputs, attrs = instr
        row.update(op=op, name=name, inputs=list(inputs),
                   attrs={k: (list(v) if isinstance(v, tuple) else v) for k, v in attrs_to_dict(attrs).items()})
    else:
        row["name"] = name
    return row


def trace_doc(model_hash: bytes, root: bytes, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"format": TRACE_FORMAT, "model_hash": model_hash.hex(), "root": root.hex(), "entries": rows}


def _line(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def trace_bytes(doc: dict[str, Any]) -> bytes:
    return (_line(doc) + "\n").encode("utf-8")


def trace_lines(doc: dict[str, Any]) -> bytes:
    """JSON lines: the document without its entries, then each entry on its own line."""
    header = {k: v for k, v in doc.items() if k != "entries"}
    return "".join(_line(row) + "\n" for row in [header, *doc["entries"]]).encode("utf-8")


def _from_lines(data: bytes, what: str) -> Any:
    """A JSON-lines trace as the document it spells (None when its first line is no header)."""
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    rows = []
    for k, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except (ValueError, UnicodeDecodeError) as e:
            raise MalformedError("trace", f"{what}: line {k + 1} is not JSON ({e})") from None
    if not rows or type(rows[0]) is not dict or "entries" in rows[0]:
        return None
    return {**rows[0], "entries": rows[1:]}


def read_trace(data: bytes, what: str) -> dict[str, Any]:
    """The trace document of a trace file in either form."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        doc = _from_lines(data, what)
        if doc is None:
            raise MalformedError("trace", f"{what}: not JSON ({e})") from None
    if type(doc) is not dict or doc.get("format") != TRACE_FORMAT or type(doc.get("entries")) is not list:
        raise MalformedError("trace", f"{what}: not a {TRACE_FORMAT} file")
    return doc


@dataclass(frozen=True)
class Entry:
    kind: int
    index: int
    output: int
    tensor: int
    precision: int | None
    node: bytes
    digest: bytes
    row: dict[str, Any]  # the entry as the file has it (name, dtype, shape, op, attrs, ...)


def _int(row: dict[str, Any], key: str, where: str) -> int:
    v = row.get(key)
    if type(v) is not int or not 0 <= v < 1 << 32:
        raise MalformedError("trace", f"{where}.{key}: expected an integer in [0, 2^32), got {v!r}")
    return v


def _hex_hash(row: dict[str, Any], key: str, where: str) -> bytes:
    text = row.get(key)
    try:
        raw = bytes.fromhex(text) if type(text) is str else b""
    except ValueError:
        raw = b""
    if len(raw) != HASH_SIZE or raw.hex() != text:
        raise MalformedError("trace", f"{where}.{key}: expected {2 * HASH_SIZE} lowercase hex digits")
    return raw


def _entry(row: Any, where: str) -> Entry:
    if type(row) is not dict or row.get("kind") not in KIND_NAMES:
        raise MalformedError("trace", f"{where}: expected an entry with kind one of {list(KIND_NAMES)}")
    kind = KIND_NAMES.index(row["kind"])
    if kind == _INSTR and (type(row.get("inputs")) is not list or any(type(t) is not int for t in row["inputs"])):
        raise MalformedError("trace", f"{where}.inputs: expected a list of tensor ids")
    precision = row.get("precision")
    if precision is not None and (type(precision) is not int or not 1 <= precision <= 32):
        raise MalformedError("trace", f"{where}.precision: expected null or an integer in [1, 32]")
    return Entry(kind, _int(row, "index", where), _int(row, "output", where), _int(row, "tensor", where),
                 precision, _hex_hash(row, "node", where), _hex_hash(row, "hash", where), row)


@dataclass(frozen=True)
class TraceFile:
    model_hash: str
    root: str
    entries: tuple[Entry, ...]


def load_trace(data: bytes, what: str) -> TraceFile:
    """A trace file, its entries checked and its root recomputed from them."""
    doc = read_trace(data, what)
    entries = tuple(_entry(row, f"{what}: entries[{k}]") for k, row in enumerate(doc["entries"]))
    if not entries or any(e.tensor != k for k, e in enumerate(entries)):
        raise MalformedError("trace", f"{what}: entries must be tensors 0, 1, 2, ... in order")
    model_hash = doc.get("model_hash")
    if type(model_hash) is not str or not re.fullmatch("[0-9a-f]{64}", model_hash):
        raise MalformedError("trace", f"{what}: model_hash must be {2 * HASH_SIZE} lowercase hex digits")
    tree = merkle_root([leaf_hash(e.tensor, e.kind, e.index, e.output, e.precision, e.node, e.digest) for e in entries])
    root = trace_root(bytes.fromhex(model_hash), len(entries), tree).hex()
    if root != doc.get("root"):
        raise MalformedError("trace", f"{what}: root {doc.get('root')!r} is not the root of its entries ({root})")
    return TraceFile(str(doc.get("model_hash")), root, entries)
