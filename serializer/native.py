"""cvmvm's own model format: canonical msgpack (docs/FORMAT.md).

``encode`` writes a Model in the one canonical form.  ``decode`` is strict:
bounded msgpack limits, exact key sets, checked types, sizes checked before any
allocation, and finally decode -> re-encode must reproduce the input bytes, so
every model has exactly one encoding (and one model hash).
"""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

from isa.attrs import BOOL, INT, INTS, OPT_INT, STR, attr_fields, parse_attrs
from isa.errors import CvmError, LimitError, MalformedError
from isa.table import ISA_VERSION, OP_BY_NAME, OPS
from isa.types import DTYPES, INT32, MAX_PRECISION, MAX_RANK, MAX_SIZE, TensorType, shape_size
from serializer.model import Input, Instr, Model, Param

FORMAT_NAME = "cvmvm"
FORMAT_VERSION = 1
MAX_MODEL_BYTES = 1 << 32
MAX_ITEMS = 1 << 20       # inputs, params, instructions, outputs, list lengths
MAX_NAME = 1 << 10        # bytes in a name or attribute string

TOP_KEYS = ("format", "version", "isa", "inputs", "params", "code", "outputs")
INPUT_KEYS = ("name", "dtype", "shape", "precision")
PARAM_KEYS = ("name", "dtype", "shape", "precision", "storage", "data")
INSTR_KEYS = ("op", "name", "in", "out", "attrs")


def _storage(p: Param) -> str:
    """int32 params are stored as int8 when every value fits; other dtypes as themselves."""
    if p.type.dtype == INT32 and (p.value.size == 0 or (int(p.value.min()) >= -128 and int(p.value.max()) <= 127)):
        return "int8"
    return p.type.dtype


def _attr_wire(record: Any) -> dict[str, Any]:
    return {f.name: (list(v) if f.kind == INTS else v) for f in attr_fields(type(record))
            for v in (getattr(record, f.name),)}


def to_wire(model: Model) -> dict[str, Any]:
    opcode = {op.name: i for i, op in enumerate(OPS)}
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "isa": ISA_VERSION,
        "inputs": [{"name": i.name, "dtype": i.type.dtype, "shape": list(i.type.shape),
                    "precision": i.type.precision} for i in model.inputs],
        "params": [{"name": p.name, "dtype": p.type.dtype, "shape": list(p.type.shape),
                    "precision": p.type.precision, "storage": (s := _storage(p)),
                    "data": np.ascontiguousarray(p.value, dtype=DTYPES[s].newbyteorder("<")).tobytes()}
                   for p in model.params],
        "code": [{"op": opcode[ins.op], "name": ins.name, "in": list(ins.inputs), "out": list(ins.outputs),
                  "attrs": _attr_wire(ins.attrs)} for ins in model.instrs],
        "outputs": list(model.outputs),
    }


def encode(model: Model) -> bytes:
    return msgpack.packb(to_wire(model), use_bin_type=True)


# -- decoding ----------------------------------------------------------------

def _fail(message: str) -> MalformedError:
    return MalformedError("native", message)


def _map(value: Any, keys: tuple[str, ...], where: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise _fail(f"{where}: expected a map")
    if tuple(value) != keys:
        raise _fail(f"{where}: keys {list(value)} must be exactly {list(keys)} in that order")
    return value


def _int(value: Any, where: str, lo: int, hi: int) -> int:
    if type(value) is not int or not lo <= value <= hi:
        raise _fail(f"{where}: expected an integer in [{lo}, {hi}], got {value!r}")
    return value


def _str(value: Any, where: str) -> str:
    if type(value) is not str or len(value.encode("utf-8")) > MAX_NAME:
        raise _fail(f"{where}: expected a string of at most {MAX_NAME} bytes")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if type(value) is not list:
        raise _fail(f"{where}: expected an array")
    return value


def _shape(value: Any, where: str) -> tuple[int, ...]:
    dims = _list(value, where)
    if not 1 <= len(dims) <= MAX_RANK:
        raise LimitError("rank", f"{where}: rank {len(dims)} must be in [1, {MAX_RANK}]")
    shape = tuple(_int(d, where, 1, 1 << 24) for d in dims)
    if shape_size(shape) > MAX_SIZE:
        raise LimitError("size", f"{where}: {shape_size(shape)} elements exceed 2^30")
    return shape


def _tensor_type(e: dict[str, Any], where: str) -> TensorType:
    dtype = e["dtype"]
    if dtype not in DTYPES:
        raise _fail(f"{where}: unknown dtype {dtype!r}")
    shape = _shape(e["shape"], f"{where}.shape")
    if dtype == INT32:
        precision = _int(e["precision"], f"{where}.precision", 1, MAX_PRECISION)
    elif e["precision"] is not None:
        raise _fail(f"{where}: dtype {dtype} has no precision (nil), got {e['precision']!r}")
    else:
        precision = None
    return TensorType(shape, precision, dtype)


def _attrs(op_name: str, raw: Any, where: str) -> Any:
    op = OP_BY_NAME[op_name]
    if type(raw) is not dict:
        raise _fail(f"{where}: attrs must be a map")
    specs = attr_fields(op.attrs)
    if tuple(raw) != tuple(s.name for s in specs):
        raise _fail(f"{where}: attrs {list(raw)} must be exactly {[s.name for s in specs]} in that order")
    typed = {}
    for s in specs:
        v = raw[s.name]
        ok = {INT: type(v) is int, BOOL: type(v) is bool, STR: type(v) is str,
              OPT_INT: v is None or type(v) is int,
              INTS: type(v) is list and len(v) <= MAX_ITEMS and all(type(x) is int for x in v)}[s.kind]
        if not ok:
            raise _fail(f"{where}: attribute {s.name}={v!r} is not of kind {s.kind}")
        typed[s.name] = tuple(v) if s.kind == INTS else v
    return parse_attrs(op.attrs, typed, fill_defaults=False)


def from_wire(top: Any) -> Model:
    top = _map(top, TOP_KEYS, "model")
    if top["format"] != FORMAT_NAME:
        raise _fail(f"format {top['format']!r} is not {FORMAT_NAME!r}")
    if top["version"] != FORMAT_VERSION or type(top["version"]) is not int:
        raise _fail(f"format version {top['version']!r} is not supported (expected {FORMAT_VERSION})")
    if top["isa"] != ISA_VERSION or type(top["isa"]) is not int:
        raise _fail(f"ISA version {top['isa']!r} is not supported (expected {ISA_VERSION})")
    inputs = []
    for k, e in enumerate(_list(top["inputs"], "inputs")):
        e = _map(e, INPUT_KEYS, f"inputs[{k}]")
        inputs.append(Input(_str(e["name"], f"inputs[{k}].name"), _tensor_type(e, f"inputs[{k}]")))
    params = []
    for k, e in enumerate(_list(top["params"], "params")):
        where = f"params[{k}]"
        e = _map(e, PARAM_KEYS, where)
        t = _tensor_type(e, where)
        storage = e["storage"]
        allowed = ("int8", INT32) if t.dtype == INT32 else (t.dtype,)
        if storage not in allowed:
            raise _fail(f"{where}: storage {storage!r} must be one of {allowed}")
        data = e["data"]
        if type(data) is not bytes:
            raise _fail(f"{where}.data: expected bin")
        st = DTYPES[storage].newbyteorder("<")
        if len(data) != t.size * st.itemsize:
            raise _fail(f"{where}.data: {len(data)} bytes, expected {t.size} x {st.itemsize}")
        value = np.frombuffer(data, dtype=st).reshape(t.shape).astype(DTYPES[t.dtype])
        value.setflags(write=False)
        params.append(Param(_str(e["name"], f"{where}.name"), t, value))
    instrs = []
    for k, e in enumerate(_list(top["code"], "code")):
        where = f"code[{k}]"
        e = _map(e, INSTR_KEYS, where)
        code = _int(e["op"], f"{where}.op", 0, len(OPS) - 1)
        op_name = OPS[code].name
        ins = tuple(_int(t, f"{where}.in", 0, 1 << 32) for t in _list(e["in"], f"{where}.in"))
        outs = tuple(_int(t, f"{where}.out", 0, 1 << 32) for t in _list(e["out"], f"{where}.out"))
        instrs.append(Instr(op_name, _attrs(op_name, e["attrs"], where), ins, outs, _str(e["name"], f"{where}.name")))
    outputs = tuple(_int(t, "outputs", 0, 1 << 32) for t in _list(top["outputs"], "outputs"))
    return Model(tuple(inputs), tuple(params), tuple(instrs), outputs)


def _reject_ext(code: int, data: bytes) -> Any:
    raise _fail(f"msgpack extension type {code} is not allowed")


def decode(data: bytes) -> Model:
    """Bytes -> Model; rejects anything but the canonical encoding."""
    if len(data) > MAX_MODEL_BYTES:
        raise LimitError("bytes", f"model of {len(data)} bytes exceeds {MAX_MODEL_BYTES}")
    try:
        top = msgpack.unpackb(
            data, raw=False, use_list=True, strict_map_key=True, ext_hook=_reject_ext,
            max_buffer_size=len(data), max_str_len=MAX_NAME, max_bin_len=MAX_SIZE * 8,
            max_array_len=MAX_ITEMS, max_map_len=64)
    except CvmError:
        raise
    except msgpack.ExtraData:
        raise _fail("trailing bytes after the model") from None
    except (ValueError, msgpack.UnpackException, TypeError) as e:
        raise _fail(f"not valid msgpack: {e}") from None
    model = from_wire(top)
    if encode(model) != data:
        raise MalformedError("noncanonical", "the bytes decode, but are not the canonical encoding of the model")
    return model


def is_native(data: bytes) -> bool:
    """Whether bytes look like a native model: a msgpack map whose first key is "format"."""
    return data[:8] == b"\x87\xa6format"
