"""Program records (docs/FORMAT.md section 3): the leaves of the program tree.

One record per input, param, instruction and head.  An instruction record
carries what a checker needs about instruction K without the model: its op
code, operand and result tensor ids and verified types, the commitment of each
operand that is a param, and every attribute in a fixed binary form the
contract parses.  ``decode_instr`` is the strict inverse of ``instr_record``:
it is what a step proof's checker reads.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from isa.attrs import BOOL, INT, INTS, OPT_INT, STR, attr_fields, parse_attrs
from isa.errors import CvmError, MalformedError
from isa.table import OPCODE, OPS
from isa.types import INT32, MAX_PRECISION, TensorType, check_shape
from serializer.hashing import DTYPE_CODES, HASH_SIZE, type_bytes

INPUT_RECORD, PARAM_RECORD, INSTR_RECORD, HEAD_RECORD = 0, 1, 2, 3
MAX_RANK = 6

_DTYPE_NAMES = {code: name for name, code in DTYPE_CODES.items()}


def attrs_bytes(record: Any) -> bytes:
    """Every attribute in declared order: int i64le; bool u8; ints u8 count + i64le each;
    opt_int u8 flag (+ i64le); str u16le length + UTF-8."""
    out = bytearray()
    for spec in attr_fields(type(record)):
        v = getattr(record, spec.name)
        if spec.kind == INT:
            out += struct.pack("<q", v)
        elif spec.kind == BOOL:
            out.append(1 if v else 0)
        elif spec.kind == INTS:
            out.append(len(v))
            out += struct.pack(f"<{len(v)}q", *v)
        elif spec.kind == OPT_INT:
            out += b"\x00" if v is None else b"\x01" + struct.pack("<q", v)
        elif spec.kind == STR:
            raw = v.encode("utf-8")
            out += struct.pack("<H", len(raw)) + raw
        else:
            raise ValueError(f"attribute {spec.name}: unknown kind {spec.kind!r}")
    return bytes(out)


def input_record(tensor: int, t: TensorType) -> bytes:
    return bytes([INPUT_RECORD]) + struct.pack("<I", tensor) + type_bytes(t)


def param_record(tensor: int, commitment: bytes) -> bytes:
    return bytes([PARAM_RECORD]) + struct.pack("<I", tensor) + commitment


def instr_record(index: int, op: str, inputs: Sequence[tuple[int, TensorType]],
                 outputs: Sequence[tuple[int, TensorType]], attrs: Any, params: Mapping[int, bytes]) -> bytes:
    """``params``: the commitment of every param of the program, by tensor id; each operand that
    is one carries it after its type."""
    head = bytes([INSTR_RECORD]) + struct.pack("<IHBB", index, OPCODE[op], len(inputs), len(outputs))
    operands = b"".join(struct.pack("<I", t) + type_bytes(ty) + params.get(t, b"") for t, ty in inputs)
    results = b"".join(struct.pack("<I", t) + type_bytes(ty) for t, ty in outputs)
    return head + operands + results + attrs_bytes(attrs)


def head_record(h: int, tensor: int) -> bytes:
    return bytes([HEAD_RECORD]) + struct.pack("<II", h, tensor)


# -- reading an instruction record ----------------------------------------------------

@dataclass(frozen=True)
class InstrRecord:
    index: int
    op: str
    inputs: tuple[tuple[int, TensorType], ...]    # (tensor id, verified type), in order
    outputs: tuple[tuple[int, TensorType], ...]
    attrs: Any
    params: tuple[bytes | None, ...]              # by operand: its commitment when it is a param


class _Bytes:
    """A cursor over a record; running out is a fault of the record."""

    def __init__(self, data: bytes, fail: Any) -> None:
        self.data, self.at, self.fail = data, 0, fail

    def take(self, n: int) -> bytes:
        if n > len(self.data) - self.at:
            raise self.fail("the record ends early")
        piece = self.data[self.at:self.at + n]
        self.at += n
        return piece

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))


def _type(b: _Bytes, tensors: int, where: str) -> tuple[int, TensorType]:
    (tensor,) = b.unpack("<I")
    code, precision, ndim = b.unpack("<BBB")
    dtype = _DTYPE_NAMES.get(code)
    if tensor >= tensors or dtype is None or not 1 <= ndim <= MAX_RANK or precision > MAX_PRECISION \
            or (precision and dtype != INT32):
        raise b.fail(f"{where}: tensor {tensor}, dtype code {code}, precision {precision}, rank {ndim}")
    shape = b.unpack(f"<{ndim}I")
    try:
        check_shape(shape, where)
    except CvmError as e:
        raise b.fail(e.message) from None
    return tensor, TensorType(shape, precision or None, dtype)


def _attrs(b: _Bytes, record: type) -> Any:
    raw: dict[str, Any] = {}
    for spec in attr_fields(record):
        if spec.kind == INT:
            raw[spec.name] = b.unpack("<q")[0]
        elif spec.kind == BOOL:
            (flag,) = b.unpack("<B")
            if flag > 1:
                raise b.fail(f"attribute {spec.name}: bool byte {flag}")
            raw[spec.name] = flag == 1
        elif spec.kind == INTS:
            (count,) = b.unpack("<B")
            raw[spec.name] = b.unpack(f"<{count}q")
        elif spec.kind == OPT_INT:
            (flag,) = b.unpack("<B")
            if flag > 1:
                raise b.fail(f"attribute {spec.name}: flag byte {flag}")
            raw[spec.name] = b.unpack("<q")[0] if flag else None
        else:
            (length,) = b.unpack("<H")
            try:
                raw[spec.name] = b.take(length).decode("utf-8")
            except UnicodeDecodeError:
                raise b.fail(f"attribute {spec.name}: not UTF-8") from None
    try:
        return parse_attrs(record, raw, fill_defaults=False)
    except CvmError as e:
        raise b.fail(e.message) from None


def decode_instr(data: bytes, counts: Sequence[int], reason: str) -> InstrRecord:
    """An instruction record of a program of ``counts`` (I, P, N, H, T: which tensor ids are
    params), every field checked (op code, arity, tensor ids below T, types within the ISA's
    limits, attributes in their domains), all of it read; ``malformed.<reason>`` otherwise."""
    def fail(message: str) -> MalformedError:
        return MalformedError(reason, f"instruction record: {message}")

    n_inputs, n_params, _, _, tensors = counts
    b = _Bytes(data, fail)
    kind, index, code, n_in, n_out = b.unpack("<BIHBB")
    if kind != INSTR_RECORD or code >= len(OPS):
        raise fail(f"kind {kind}, op code {code}")
    op = OPS[code]
    inputs = []
    params: list[bytes | None] = []
    for k in range(n_in):
        inputs.append(_type(b, tensors, f"operand {k}"))
        params.append(b.take(HASH_SIZE) if n_inputs <= inputs[-1][0] < n_inputs + n_params else None)
    outputs = tuple(_type(b, tensors, f"result {j}") for j in range(n_out))
    attrs = _attrs(b, op.attrs)
    if b.at != len(data):
        raise fail(f"{len(data) - b.at} bytes after the attributes")
    expected = op.inputs(attrs)
    if n_out != len(op.outputs) or (expected is not None and n_in != len(expected)) or n_in == 0:
        raise fail(f"{op.name} with {n_in} operands and {n_out} results")
    first = outputs[0][0]
    if any(t != first + j for j, (t, _) in enumerate(outputs)) or any(t >= first for t, _ in inputs):
        raise fail(f"operands {[t for t, _ in inputs]} must precede results {[t for t, _ in outputs]}, "
                   f"which are consecutive")
    return InstrRecord(index, op.name, tuple(inputs), outputs, attrs, tuple(params))
