"""The trace file (docs/FORMAT.md section 6): a run's every tensor commitment as JSON,
self-describing enough to name the op at a disagreement without the model.

Written by cvmvm.vm.trace.trace_to_json (through ``entry_to_json`` and
``trace_doc``) and ``trace_bytes`` (one JSON document) or ``trace_lines``
(JSON lines: a header, then one entry per line, so line-based diff tools work
on two traces); read back, in either form, by ``load_trace``, which checks
every entry and recomputes from the fields it shows the program root (the
records of FORMAT.md section 3: input types, param commitments, each
instruction's op, attributes and typed tensor ids, the outputs), the input
commitment and the trace root, so no field the root commits to can be rewritten.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from isa.attrs import INTS, attr_fields, attrs_to_dict
from isa.errors import CvmError, LimitError, MalformedError
from isa.table import OP_BY_NAME, OPS
from isa.types import TensorType
from serializer.hashing import (HASH_SIZE, INPUT, INSTR, KIND_NAMES, PARAM, TraceEntry, input_commitment, leaf_hash,
                                program_root, trace_root, tree_root)
from serializer.records.program import head_record, input_record, instr_record, param_record
from serializer.strict import MAX_ITEMS, MAX_NAME, JsonWalk, Reader, Span, StrictJson, skip_space

TRACE_VERSION = 3
TRACE_FORMAT = f"cvmvm-trace/{TRACE_VERSION}"
MAX_TRACE_BYTES = 1 << 28
# One entry per tensor: a native model has at most 2^20 inputs, params and instructions.
MAX_ENTRIES = 1 << 22
# A file is parsed an entry at a time, each kept only as its checked Entry, so what parsing builds
# at once is one entry's objects, bounded by these two limits before it is parsed (a JSON-lines
# line, the document form's header and its `outputs` alike):
# - characters: an instruction may read MAX_ITEMS tensors, ids of at most 7 digits (MAX_ENTRIES),
#   8 MiB written without spaces; twice that leaves room for spaces;
MAX_ENTRY_CHARS = 1 << 24
# - brackets, counted in strings too: an entry's own, its shape's, inputs', attrs' and one for each
#   list-valued attribute of its op, and its name may be brackets throughout.  JSON's costliest
#   objects are nested arrays (56 bytes for `[],`), so without them an entry's text builds at most
#   about 15 bytes of objects a character.
MAX_ENTRY_BRACKETS = 4 + max(sum(f.kind == INTS for f in attr_fields(op.attrs)) for op in OPS) + MAX_NAME


def entry_to_json(e: TraceEntry, t: TensorType, name: str,
                  instr: tuple[str, Sequence[int], Any] | None = None) -> dict[str, Any]:
    """One entry: its position, type and commitment; ``instr`` (op, input tensor ids, attribute
    record) for an instruction's output."""
    row: dict[str, Any] = {"kind": KIND_NAMES[e.kind], "index": e.index, "output": e.output,
                           "tensor": e.tensor, "dtype": t.dtype, "shape": list(t.shape),
                           "precision": t.precision, "commitment": e.commitment.hex()}
    if instr is not None:
        op, inputs, attrs = instr
        row.update(op=op, name=name, inputs=list(inputs),
                   attrs={k: (list(v) if isinstance(v, tuple) else v) for k, v in attrs_to_dict(attrs).items()})
    else:
        row["name"] = name
    return row


def trace_doc(model_hash: bytes, program_root: bytes, inputs: bytes, root: bytes, outputs: Sequence[int],
              rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``outputs``: the program's output tensor ids (its head records, so the program root can be
    recomputed from the file)."""
    return {"format": TRACE_FORMAT, "model_hash": model_hash.hex(), "program_root": program_root.hex(),
            "input_commitment": inputs.hex(), "outputs": list(outputs), "root": root.hex(), "entries": rows}


def _line(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def trace_bytes(doc: dict[str, Any]) -> bytes:
    return (_line(doc) + "\n").encode("utf-8")


def trace_lines(doc: dict[str, Any]) -> bytes:
    """JSON lines: the document without its entries, then each entry on its own line."""
    header = {k: v for k, v in doc.items() if k != "entries"}
    return "".join(_line(row) + "\n" for row in [header, *doc["entries"]]).encode("utf-8")


def _bounded(text: str, start: int, end: int, where: str) -> None:
    """Refuse an entry (or header) that could build more than one entry may, before it is parsed."""
    if end - start > MAX_ENTRY_CHARS:
        raise LimitError("bytes", f"{where}: {end - start} characters; an entry has at most {MAX_ENTRY_CHARS}")
    brackets = text.count("[", start, end) + text.count("{", start, end)
    if brackets > MAX_ENTRY_BRACKETS:
        raise MalformedError("trace", f"{where}: {brackets} brackets; an entry has at most {MAX_ENTRY_BRACKETS}")


def _object(text: str, pos: int, where: str) -> None:
    if not text.startswith("{", pos):
        raise MalformedError("trace", f"{where}: expected an entry with kind one of {list(KIND_NAMES)}")


def _document(walk: JsonWalk, what: str) -> tuple[dict[str, Any], Iterator[Any] | None]:
    """The document form: its top level's values (strings and numbers parsed, arrays and objects
    located, unparsed), and an iterator parsing its entries one at a time (None if `entries` is
    no array)."""
    top = walk.first(what)
    if top is None or top.array:
        raise MalformedError("trace", f"{what}: not a {TRACE_FORMAT} file")
    fields = walk.members(top, what)
    entries = fields.pop("entries", None)
    if type(entries) is not Span or not entries.array:
        return fields, None
    return fields, _items(walk, entries, what)


def _items(walk: JsonWalk, entries: Span, what: str) -> Iterator[Any]:
    for k, item in enumerate(walk.items(entries, f"{what}: entries")):   # load_trace bounds the count
        where = f"{what}: entries[{k}]"
        if type(item) is not Span or item.array:
            raise MalformedError("trace", f"{where}: expected an entry with kind one of {list(KIND_NAMES)}")
        _bounded(walk.text, item.start, item.end, where)
        yield walk.parse(item, where)


def _lines(text: str, json_: StrictJson, what: str) -> tuple[Any, Iterator[Any]]:
    """The JSON-lines form: its header, and an iterator parsing the entries a line at a time."""
    # A header and an entry a line: more lines are refused before any is parsed.
    if text.count("\n", 0, len(text) - 1) >= MAX_ENTRIES + 1:
        raise MalformedError("trace", f"{what}: more than {MAX_ENTRIES + 1} lines (a header and {MAX_ENTRIES} entries)")
    ends = (m.start() for m in re.finditer("\n", text))

    def line(start: int, where: str, entry: bool) -> tuple[Any, int]:
        end = next(ends, len(text))
        if entry:
            _object(text, skip_space(text, start), where)
        _bounded(text, start, end, where)
        return json_.document(text[start:end], where), end + 1

    header, pos = line(0, f"{what}: line 1", False)

    def rows(pos: int) -> Iterator[Any]:
        k = 1
        while pos < len(text):
            row, pos = line(pos, f"{what}: line {k + 1}", True)
            k += 1
            yield row

    return header, rows(pos)


def _read(data: bytes, what: str) -> tuple[dict[str, Any], Iterator[Any]]:
    """A trace file in either form: its top-level fields but `entries`, whose rows are parsed
    as the iterator is read, an entry at a time."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedError("trace", f"{what}: not UTF-8 ({e.reason} at byte {e.start})") from None
    # The document form's top-level arrays and objects (its keys, at most) and its entries (with
    # anything else as deep), past the most there may be, are not located.
    walk = JsonWalk(text, StrictJson("trace"), what, {2: len(DOC_KEYS), 3: MAX_ENTRIES})
    header: Any
    rows: Iterator[Any] | None
    if walk.layout.first_end >= 0 and skip_space(text, walk.layout.first_end) < len(text):   # more than one value
        header, rows = _lines(text, walk.json, what)
    else:
        header, rows = _document(walk, what)
    fmt = header.get("format") if type(header) is dict else None
    if type(fmt) is str and fmt.startswith("cvmvm-trace/") and fmt != TRACE_FORMAT:
        version = fmt.split("/", 1)[1]
        shown = version if re.fullmatch("[0-9]{1,10}", version) else repr(version[:20])
        raise MalformedError("trace", f"{what}: a trace file of version {shown}; this cvmvm reads {TRACE_FORMAT}")
    if type(header) is not dict or fmt != TRACE_FORMAT or "entries" in header or rows is None:
        raise MalformedError("trace", f"{what}: not a {TRACE_FORMAT} file")
    if set(header) | {"entries"} != DOC_KEYS:
        raise MalformedError("trace", f"{what}: keys {sorted(set(header) | {'entries'})} must be exactly "
                                      f"{sorted(DOC_KEYS)}")
    outputs = header["outputs"]
    if type(outputs) is Span:
        _bounded(text, outputs.start, outputs.end, f"{what}: outputs")
        header["outputs"] = walk.parse(outputs, f"{what}: outputs")
    return header, rows


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry, checked; only what it says is kept, not the objects parsing it built."""

    kind: int
    index: int
    output: int
    tensor: int
    type: TensorType
    commitment: bytes
    name: str
    op: str = ""                   # an instruction output's op, attributes and input tensor ids
    attrs: Any = None
    inputs: tuple[int, ...] = ()

    @property
    def precision(self) -> int | None:
        return self.type.precision

    @property
    def row(self) -> dict[str, Any]:
        """The entry as a trace file writes it."""
        leaf = TraceEntry(self.kind, self.index, self.output, self.tensor, self.precision, self.commitment)
        return entry_to_json(leaf, self.type, self.name,
                             (self.op, self.inputs, self.attrs) if self.kind == INSTR else None)


_READER = Reader("trace")
ENTRY_KEYS = {"kind", "index", "output", "tensor", "dtype", "shape", "precision", "commitment", "name"}
INSTR_KEYS = ENTRY_KEYS | {"op", "inputs", "attrs"}


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


def _type(row: dict[str, Any], where: str) -> TensorType:
    try:
        return _READER.tensor_type(row, where)
    except CvmError as e:   # a dtype, dim or precision out of its domain is a fault of the file here
        raise MalformedError("trace", e.message) from None


def _name(row: dict[str, Any], where: str) -> str:
    name = row["name"]
    try:
        ok = type(name) is str and len(name.encode("utf-8")) <= MAX_NAME
    except UnicodeEncodeError:   # a lone surrogate ("\ud800" in JSON) is no UTF-8 text
        ok = False
    if not ok:
        raise MalformedError("trace", f"{where}.name: expected UTF-8 text of at most {MAX_NAME} bytes")
    return name


def _entry(row: Any, where: str) -> Entry:
    if type(row) is not dict or row.get("kind") not in KIND_NAMES:
        raise MalformedError("trace", f"{where}: expected an entry with kind one of {list(KIND_NAMES)}")
    kind = KIND_NAMES.index(row["kind"])
    keys = INSTR_KEYS if kind == INSTR else ENTRY_KEYS
    if set(row) != keys:
        raise MalformedError("trace", f"{where}: keys {sorted(row)} must be exactly {sorted(keys)}")
    base = (kind, _int(row, "index", where), _int(row, "output", where), _int(row, "tensor", where),
            _type(row, where), _hex_hash(row, "commitment", where), _name(row, where))
    if kind != INSTR:
        return Entry(*base)
    op = OP_BY_NAME.get(row["op"]) if type(row["op"]) is str else None
    if op is None:
        raise MalformedError("trace", f"{where}.op: {str(row['op'])[:40]!r} is not an op of the ISA")
    inputs = row["inputs"]
    if type(inputs) is not list or len(inputs) > MAX_ITEMS or any(type(t) is not int for t in inputs):
        raise MalformedError("trace", f"{where}.inputs: expected a list of tensor ids")
    raw = row["attrs"]
    names = tuple(f.name for f in attr_fields(op.attrs))
    if type(raw) is not dict or set(raw) != set(names):
        raise MalformedError("trace", f"{where}.attrs: expected exactly the attributes {list(names)} of {op.name}")
    try:
        attrs = _READER.attrs(op.attrs, {n: raw[n] for n in names}, f"{where}.attrs")
    except CvmError as e:
        raise MalformedError("trace", e.message) from None
    return Entry(*base, op=op.name, attrs=attrs, inputs=tuple(inputs))


def _positions(entries: tuple[Entry, ...], what: str) -> None:
    """Tensors 0, 1, 2, ... in order: inputs, then params, then each instruction's outputs in
    order; every instruction reads only tensors before its own."""
    expect = [0, 0, 0]   # next index of each kind
    last = INPUT
    for t, e in enumerate(entries):
        where = f"{what}: entries[{t}]"
        if e.tensor != t:
            raise MalformedError("trace", f"{what}: entries must be tensors 0, 1, 2, ... in order")
        if e.kind < last:
            raise MalformedError("trace", f"{where}: inputs come first, then params, then instruction outputs")
        if e.kind == INSTR:
            first = t - e.output
            if e.output and (t == 0 or entries[t - 1].kind != INSTR or entries[t - 1].index != e.index):
                raise MalformedError("trace", f"{where}: output {e.output} of instruction {e.index} does not "
                                              "follow its output 0")
            if e.output == 0:
                if e.index != expect[INSTR]:
                    raise MalformedError("trace", f"{where}: instruction {e.index}, expected {expect[INSTR]}")
                expect[INSTR] += 1
            if any(not 0 <= i < first for i in e.inputs):
                raise MalformedError("trace", f"{where}: inputs {list(e.inputs)} must be tensors before {first}")
        else:
            if (e.index, e.output) != (expect[e.kind], 0):
                raise MalformedError("trace", f"{where}: {KIND_NAMES[e.kind]} {e.index} output {e.output}, "
                                              f"expected {KIND_NAMES[e.kind]} {expect[e.kind]} output 0")
            expect[e.kind] += 1
        last = e.kind


@dataclass(frozen=True)
class TraceFile:
    model_hash: str
    program_root: str
    input_commitment: str
    root: str
    entries: tuple[Entry, ...]
    outputs: tuple[int, ...]   # the program's output tensor ids (its head records)


DOC_KEYS = {"format", "model_hash", "program_root", "input_commitment", "outputs", "root", "entries"}


def _program_root(entries: tuple[Entry, ...], heads: list[int], what: str) -> bytes:
    """The program root the entries and the output ids spell (FORMAT.md section 3)."""
    outputs: dict[int, list[int]] = {}
    params = {e.tensor: e.commitment for e in entries if e.kind == PARAM}
    for e in entries:
        if e.kind == INSTR:
            outputs.setdefault(e.index, []).append(e.tensor)
    records = []
    for e in entries:
        if e.kind == INPUT:
            records.append(input_record(e.tensor, e.type))
        elif e.kind == PARAM:
            records.append(param_record(e.tensor, e.commitment))
        elif e.output:
            first = entries[e.tensor - e.output]   # its output 0 (_positions): one instruction, one record
            if (e.op, e.attrs, e.inputs) != (first.op, first.attrs, first.inputs):
                raise MalformedError("trace", f"{what}: entries[{e.tensor}]: output {e.output} of instruction "
                                              f"{e.index} shows another op, attributes or inputs than its output 0")
        else:
            if len(outputs[e.index]) != len(OP_BY_NAME[e.op].outputs):
                raise MalformedError("trace", f"{what}: entries[{e.tensor}]: instruction {e.index} ({e.op}) has "
                                              f"{len(OP_BY_NAME[e.op].outputs)} outputs, the file lists "
                                              f"{len(outputs[e.index])}")
            try:
                records.append(instr_record(e.index, e.op, [(t, entries[t].type) for t in e.inputs],
                                            [(t, entries[t].type) for t in outputs[e.index]], e.attrs, params))
            except (struct.error, ValueError) as exc:   # more operands than a record counts
                raise MalformedError("trace", f"{what}: entries[{e.tensor}]: not an instruction record ({exc})") \
                    from None
    records += [head_record(h, t) for h, t in enumerate(heads)]
    counts = [sum(e.kind == k for e in entries) for k in (INPUT, PARAM)] + [len(outputs), len(heads), len(entries)]
    return program_root(counts, tree_root([leaf_hash(r) for r in records]))


def load_trace(data: bytes, what: str) -> TraceFile:
    """A trace file, every field the root commits to recomputed from the entries: the program
    root from their types, param commitments, ops, attributes and tensor ids (and the output
    ids), the input commitment from the input entries, then the trace root.  (That an
    instruction's outputs have the types its inputs imply needs the verifier:
    cvmvm.tx.tracediff.read_trace.)"""
    if len(data) > MAX_TRACE_BYTES:
        raise LimitError("bytes", f"{what}: {len(data)} bytes exceed the limit of {MAX_TRACE_BYTES}")
    doc, rows = _read(data, what)
    read = []
    for k, row in enumerate(rows):
        if k == MAX_ENTRIES:
            raise MalformedError("trace", f"{what}: more than {MAX_ENTRIES} entries")
        read.append(_entry(row, f"{what}: entries[{k}]"))
    if not read:
        raise MalformedError("trace", f"{what}: a trace has at least one entry")
    entries = tuple(read)
    _positions(entries, what)
    hashes = {}
    for key in ("model_hash", "program_root", "input_commitment", "root"):
        value = doc[key]
        if type(value) is not str or not re.fullmatch("[0-9a-f]{64}", value):
            raise MalformedError("trace", f"{what}: {key} must be {2 * HASH_SIZE} lowercase hex digits")
        hashes[key] = value
    heads = doc["outputs"]
    if type(heads) is not list or not heads or len(heads) > MAX_ITEMS \
            or any(type(t) is not int or not 0 <= t < len(entries) for t in heads):
        raise MalformedError("trace", f"{what}: outputs must be a non-empty list of tensor ids of the trace")
    program = _program_root(entries, heads, what).hex()
    if program != hashes["program_root"]:
        raise MalformedError("trace", f"{what}: program_root is not that of its entries and outputs ({program})")
    inputs = input_commitment([e.commitment for e in entries if e.kind == INPUT]).hex()
    if inputs != hashes["input_commitment"]:
        raise MalformedError("trace", f"{what}: input_commitment is not that of its input entries ({inputs})")
    tree = tree_root([e.commitment for e in entries])
    root = trace_root(bytes.fromhex(program), bytes.fromhex(inputs), len(entries), tree).hex()
    if root != hashes["root"]:
        raise MalformedError("trace", f"{what}: root {hashes['root']} is not the root of its entries ({root})")
    return TraceFile(hashes["model_hash"], program, inputs, root, entries, tuple(heads))
