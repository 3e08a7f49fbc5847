"""cvmvm's own model format: canonical msgpack (docs/FORMAT.md section 1).

``encode`` writes a Model in the one canonical form.  ``decode`` is strict and
runs in three passes: a scan of the msgpack token stream that bounds every
size before anything is allocated, a typed walk of the unpacked value (exact
keys in order, exact types, tensor ids, data lengths), and finally a re-encode
that must reproduce the input bytes, so every model has exactly one encoding
(and one model hash).
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import numpy as np

from isa.attrs import BOOL, INT, INTS, OPT_INT, attr_fields, parse_attrs
from isa.errors import CvmError, InternalError, InvalidError, LimitError, MalformedError
from isa.table import ISA_VERSION, OPCODE, OPS
from isa.types import DTYPES, INT32, MAX_PRECISION, MIN_PRECISION, TensorType, check_shape
from serializer.model import Input, Instr, Model, Param

FORMAT_NAME = "cvmvm"
FORMAT_VERSION = 1
MAX_MODEL_BYTES = 1 << 32
MAX_ITEMS = 1 << 20       # items in any msgpack array
MAX_KEYS = 64             # entries in any msgpack map
MAX_NAME = 1 << 10        # bytes in any msgpack str

TOP_KEYS = ("format", "version", "isa", "inputs", "params", "code", "outputs")
INPUT_KEYS = ("name", "dtype", "shape", "precision")
PARAM_KEYS = ("name", "dtype", "shape", "precision", "storage", "data")
INSTR_KEYS = ("op", "name", "in", "out", "attrs")

INT8_STORAGE = "int8"


def _storage(value: np.ndarray, dtype: str) -> str:
    """int32 params are stored as int8 when every value fits; other dtypes as themselves."""
    if dtype == INT32 and value.size and -128 <= int(value.min()) and int(value.max()) <= 127:
        return INT8_STORAGE
    return dtype


def _param_wire(p: Param) -> dict[str, Any]:
    # Encoding casts to the storage dtype; a value of another dtype than its
    # type says would be wrapped silently, so it is refused.
    if p.value.dtype != DTYPES[p.type.dtype] or tuple(p.value.shape) != p.type.shape:
        raise InternalError("param", f"param {p.name}: value {p.value.dtype}{p.value.shape} does not match {p.type}")
    storage = _storage(p.value, p.type.dtype)
    data = np.ascontiguousarray(p.value, dtype=DTYPES[storage].newbyteorder("<")).tobytes()
    return {"name": p.name, "dtype": p.type.dtype, "shape": list(p.type.shape),
            "precision": p.type.precision, "storage": storage, "data": data}


def to_wire(model: Model) -> dict[str, Any]:
    """The model as the msgpack value of FORMAT.md section 1.2 (dicts in key order)."""
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "isa": ISA_VERSION,
        "inputs": [{"name": i.name, "dtype": i.type.dtype, "shape": list(i.type.shape),
                    "precision": i.type.precision} for i in model.inputs],
        "params": [_param_wire(p) for p in model.params],
        "code": [{"op": OPCODE[ins.op], "name": ins.name, "in": list(ins.inputs), "out": list(ins.outputs),
                  "attrs": {f.name: (list(v) if f.kind == INTS else v)
                            for f in attr_fields(type(ins.attrs)) for v in (getattr(ins.attrs, f.name),)}}
                 for ins in model.instrs],
        "outputs": list(model.outputs),
    }


def encode(model: Model) -> bytes:
    # msgpack-python writes every integer, str, bin, array and map header in its
    # shortest form and dicts in insertion order: exactly FORMAT.md section 1.1.
    return msgpack.packb(to_wire(model), use_bin_type=True)


# -- decoding: pass 1, the token scan ------------------------------------------

def _fail(message: str) -> MalformedError:
    return MalformedError("native", message)


# Header byte -> (bytes of the big-endian length or count after it, what it heads).
_SIZED: dict[int, tuple[int, str]] = {
    0xc4: (1, "bin"), 0xc5: (2, "bin"), 0xc6: (4, "bin"),
    0xd9: (1, "str"), 0xda: (2, "str"), 0xdb: (4, "str"),
    0xdc: (2, "array"), 0xdd: (4, "array"), 0xde: (2, "map"), 0xdf: (4, "map"),
}
# Header byte -> payload bytes of a sized integer.
_FIXED: dict[int, int] = {0xcc: 1, 0xcd: 2, 0xce: 4, 0xcf: 8, 0xd0: 1, 0xd1: 2, 0xd2: 4, 0xd3: 8}
_LENGTH = {1: struct.Struct(">B"), 2: struct.Struct(">H"), 4: struct.Struct(">I")}


def scan(data: bytes) -> None:
    """Check the token stream before unpacking: one complete value, no floats or
    extension types, every count and length within its bound and within the
    bytes that remain.  A container's items take at least one byte each, so
    the lists msgpack preallocates never hold more slots than the file has
    bytes, whatever the headers claim.
    """
    end = len(data)
    pos = 0
    pending = 1  # values still to read
    while pending:
        if pos >= end:
            raise _fail(f"truncated: {pending} more values expected at byte {pos}")
        b = data[pos]
        pos += 1
        pending -= 1
        if b <= 0x7f or b >= 0xe0 or b in (0xc0, 0xc2, 0xc3):
            continue
        if b in _FIXED:
            pos += _FIXED[b]
            continue
        if 0x80 <= b <= 0x8f:
            kind, n = "map", b & 0x0f
        elif 0x90 <= b <= 0x9f:
            kind, n = "array", b & 0x0f
        elif 0xa0 <= b <= 0xbf:
            kind, n = "str", b & 0x1f
        elif b in _SIZED:
            width, kind = _SIZED[b]
            if pos + width > end:
                raise _fail(f"truncated header at byte {pos - 1}")
            (n,) = _LENGTH[width].unpack_from(data, pos)
            pos += width
        elif b in (0xca, 0xcb):
            raise _fail(f"float at byte {pos - 1}: the format has no floats")
        elif b == 0xc1:
            raise _fail(f"reserved byte 0xc1 at byte {pos - 1}")
        else:
            raise _fail(f"extension type at byte {pos - 1}: the format has none")
        if kind == "array":
            if n > MAX_ITEMS:
                raise _fail(f"array of {n} items exceeds {MAX_ITEMS}")
            pending += n
        elif kind == "map":
            if n > MAX_KEYS:
                raise _fail(f"map of {n} keys exceeds {MAX_KEYS}")
            pending += 2 * n
        else:
            if kind == "str" and n > MAX_NAME:
                raise _fail(f"string of {n} bytes exceeds {MAX_NAME}")
            pos += n
        if pos + pending > end:
            raise _fail(f"truncated: {pending} more values expected after byte {pos} of {end}")
    if pos > end:
        raise _fail("truncated: the last value runs past the end")
    if pos != end:
        raise _fail(f"{end - pos} trailing bytes after the model")


# -- decoding: pass 2, the typed walk ------------------------------------------

def _pairs(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    # msgpack-python keeps the last of duplicate keys; the format allows none.
    d = dict(pairs)
    if len(d) != len(pairs):
        raise _fail(f"duplicate key in map {[k for k, _ in pairs]}")
    return d


def _map(value: Any, keys: tuple[str, ...], where: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise _fail(f"{where}: expected a map")
    if tuple(value) != keys:
        raise _fail(f"{where}: keys {list(value)} must be exactly {list(keys)} in that order")
    return value


def _int(value: Any, where: str) -> int:
    if type(value) is not int:
        raise _fail(f"{where}: expected an integer, got {value!r}")
    return value


def _str(value: Any, where: str) -> str:
    if type(value) is not str:
        raise _fail(f"{where}: expected a string, got {value!r}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if type(value) is not list:
        raise _fail(f"{where}: expected an array")
    return value


def _shape(value: Any, where: str) -> tuple[int, ...]:
    shape = tuple(_int(d, where) for d in _list(value, where))
    check_shape(shape, where)
    return shape


def _tensor_type(e: dict[str, Any], where: str) -> TensorType:
    dtype = _str(e["dtype"], f"{where}.dtype")
    if dtype not in DTYPES:
        raise InvalidError("dtype", f"{where}: unknown dtype {dtype!r}")
    shape = _shape(e["shape"], f"{where}.shape")
    precision = e["precision"]
    if precision is not None:
        _int(precision, f"{where}.precision")
    if dtype == INT32:
        # nil: a raw int32 tensor (full range, INT32_MIN included), which only max_pool accepts
        if precision is not None and not MIN_PRECISION <= precision <= MAX_PRECISION:
            raise InvalidError("precision", f"{where}: precision {precision!r} of an int32 tensor must be in [1, 32]")
    elif precision is not None:
        raise InvalidError("precision", f"{where}: dtype {dtype} carries no precision (nil), got {precision}")
    return TensorType(shape, precision, dtype)


def _param(e: Any, where: str) -> Param:
    e = _map(e, PARAM_KEYS, where)
    name = _str(e["name"], f"{where}.name")
    t = _tensor_type(e, where)
    storage = _str(e["storage"], f"{where}.storage")
    allowed = (INT8_STORAGE, INT32) if t.dtype == INT32 else (t.dtype,)
    if storage not in allowed:
        raise _fail(f"{where}: storage {storage!r} must be one of {allowed} for dtype {t.dtype}")
    data = e["data"]
    if type(data) is not bytes:
        raise _fail(f"{where}.data: expected bin")
    st = DTYPES[storage].newbyteorder("<")
    if len(data) != t.size * st.itemsize:
        raise _fail(f"{where}.data: {len(data)} bytes, expected {t.size} x {st.itemsize}")
    value = np.frombuffer(data, dtype=st).reshape(t.shape).astype(DTYPES[t.dtype])
    value.setflags(write=False)
    return Param(name, t, value)


def _of_kind(kind: str, v: Any) -> bool:
    if kind == INT:
        return type(v) is int
    if kind == BOOL:
        return type(v) is bool
    if kind == INTS:
        return type(v) is list and all(type(x) is int for x in v)
    if kind == OPT_INT:
        return v is None or type(v) is int
    return type(v) is str


def _attrs(record: type, raw: Any, where: str) -> Any:
    specs = attr_fields(record)
    raw = _map(raw, tuple(s.name for s in specs), f"{where}.attrs")
    for s in specs:
        if not _of_kind(s.kind, raw[s.name]):
            raise _fail(f"{where}: attribute {s.name}={raw[s.name]!r} is not of kind {s.kind}")
    # Every value is well typed; parse_attrs checks the domains (invalid.attr).
    return parse_attrs(record, raw, fill_defaults=False)


def _ids(value: Any, where: str) -> tuple[int, ...]:
    return tuple(_int(t, where) for t in _list(value, where))


def _instr(e: Any, where: str, first_out: int) -> Instr:
    e = _map(e, INSTR_KEYS, where)
    code = _int(e["op"], f"{where}.op")
    if not 0 <= code < len(OPS):
        raise InvalidError("op", f"{where}: unknown op code {code} (the ISA has {len(OPS)} ops)")
    op = OPS[code]
    name = _str(e["name"], f"{where}.name")
    ins = _ids(e["in"], f"{where}.in")
    outs = _ids(e["out"], f"{where}.out")
    for t in ins:
        if not 0 <= t < first_out:
            raise InvalidError("graph", f"{where}: input tensor {t} is not defined before it")
    fresh = tuple(range(first_out, first_out + len(op.outputs)))
    if outs != fresh:
        raise InvalidError("graph", f"{where}: outputs {list(outs)} must be the next tensor ids {list(fresh)}")
    return Instr(op.name, _attrs(op.attrs, e["attrs"], where), ins, outs, name)


def from_wire(top: Any) -> Model:
    """The unpacked msgpack value -> Model, checking every key, type and tensor id."""
    top = _map(top, TOP_KEYS, "model")
    if type(top["format"]) is not str or top["format"] != FORMAT_NAME:
        raise _fail(f"format {top['format']!r} is not {FORMAT_NAME!r}")
    if type(top["version"]) is not int or top["version"] != FORMAT_VERSION:
        raise _fail(f"format version {top['version']!r} is not supported (expected {FORMAT_VERSION})")
    if type(top["isa"]) is not int or top["isa"] != ISA_VERSION:
        raise _fail(f"ISA version {top['isa']!r} is not supported (expected {ISA_VERSION})")
    inputs = []
    for k, e in enumerate(_list(top["inputs"], "inputs")):
        e = _map(e, INPUT_KEYS, f"inputs[{k}]")
        inputs.append(Input(_str(e["name"], f"inputs[{k}].name"), _tensor_type(e, f"inputs[{k}]")))
    params = [_param(e, f"params[{k}]") for k, e in enumerate(_list(top["params"], "params"))]
    instrs = []
    next_id = len(inputs) + len(params)
    for k, e in enumerate(_list(top["code"], "code")):
        instr = _instr(e, f"code[{k}]", next_id)
        instrs.append(instr)
        next_id += len(instr.outputs)
    outputs = _ids(top["outputs"], "outputs")
    for t in outputs:
        if not 0 <= t < next_id:
            raise InvalidError("graph", f"output tensor {t} does not exist (the model has {next_id})")
    return Model(tuple(inputs), tuple(params), tuple(instrs), outputs)


# -- decoding: the whole ---------------------------------------------------------

def _reject_ext(code: int, data: bytes) -> Any:
    raise _fail(f"msgpack extension type {code} is not allowed")


def decode(data: bytes) -> Model:
    """Bytes -> Model; rejects anything but the canonical encoding of a well-formed model."""
    data = bytes(data)
    if len(data) > MAX_MODEL_BYTES:
        raise LimitError("bytes", f"model of {len(data)} bytes exceeds {MAX_MODEL_BYTES}")
    scan(data)
    try:
        # The limits repeat the scan's, so that msgpack itself never allocates past them.
        top = msgpack.unpackb(
            data, raw=False, use_list=True, strict_map_key=True, object_pairs_hook=_pairs,
            ext_hook=_reject_ext, max_str_len=MAX_NAME, max_bin_len=MAX_MODEL_BYTES,
            max_array_len=MAX_ITEMS, max_map_len=MAX_KEYS, max_ext_len=0)
    except CvmError:
        raise
    except (ValueError, msgpack.UnpackException, TypeError) as e:
        # Invalid UTF-8, a non-str map key, nesting deeper than msgpack's stack.
        raise _fail(f"not valid msgpack: {type(e).__name__} {e}") from None
    model = from_wire(top)
    if encode(model) != data:
        raise MalformedError("noncanonical", "the bytes decode, but are not the canonical encoding of the model")
    return model


def is_native(data: bytes) -> bool:
    """Whether bytes look like a native model: a msgpack map whose first key is "format"."""
    return data[:8] == b"\x87\xa6format"
