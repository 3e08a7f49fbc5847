"""cvmvm's own model format: canonical msgpack (docs/FORMAT.md section 1).

``encode`` writes a Model in the one canonical form.  ``decode`` is strict and
runs in three passes (serializer.strict): a scan of the msgpack token stream
that bounds every size before anything is allocated, a typed walk of the
unpacked value (exact keys in order, exact types, tensor ids, data lengths),
and finally a re-encode that must reproduce the input bytes, so every model
has exactly one encoding (and one model hash).
"""

from __future__ import annotations

import math
import struct
from typing import Any

import msgpack
import numpy as np

from isa.errors import InternalError, InvalidError
from isa.table import ISA_VERSION, OPCODE, OPS
from isa.types import INT32, WIRE_DTYPES, vm_dtype
from serializer import strict
from serializer.model import Input, Instr, Model, Param, Scales
from serializer.strict import Reader, attrs_to_wire, tensor_data

FORMAT_NAME = "cvmvm"
FORMAT_VERSION = 1
MAX_MODEL_BYTES = 1 << 32

TOP_KEYS = ("format", "version", "isa", "inputs", "params", "code", "outputs")
SCALES_KEY = "scales"                # an eighth top-level key, present only when some scale is (1.6)
SCALE_KEYS = ("inputs", "outputs")
INPUT_KEYS = ("name", "dtype", "shape", "precision")
PARAM_KEYS = ("name", "dtype", "shape", "precision", "storage", "data")
INSTR_KEYS = ("op", "name", "in", "out", "attrs")

INT8_STORAGE = "int8"


def _storage(value: np.ndarray, dtype: str) -> str:
    """int32 params are stored as int8 when every value fits; other dtypes as themselves."""
    if dtype == INT32 and value.size and -128 <= int(value.min()) and int(value.max()) <= 127:
        return INT8_STORAGE
    return dtype


def _param_wire(p: Param, data: bool = True) -> dict[str, Any]:
    # Encoding casts to the storage dtype; a value of another dtype than its
    # type says would be wrapped silently, so it is refused.
    if vm_dtype(p.value.dtype) != p.type.dtype or tuple(p.value.shape) != p.type.shape:
        raise InternalError("param", f"param {p.name}: value {p.value.dtype}{p.value.shape} does not match {p.type}")
    storage = _storage(p.value, p.type.dtype)
    return {"name": p.name, "dtype": p.type.dtype, "shape": list(p.type.shape),
            "precision": p.type.precision, "storage": storage,
            "data": tensor_data(p.value, storage) if data else b""}


SCALE = struct.Struct("<d")


def _scale_wire(scale: float | None) -> bytes | None:
    return None if scale is None else SCALE.pack(scale)


def to_wire(model: Model, data: bool = True) -> dict[str, Any]:
    """The model as the msgpack value of FORMAT.md section 1.2 (dicts in key order); with
    ``data`` False, every param's data is empty."""
    wire = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "isa": ISA_VERSION,
        "inputs": [{"name": i.name, "dtype": i.type.dtype, "shape": list(i.type.shape),
                    "precision": i.type.precision} for i in model.inputs],
        "params": [_param_wire(p, data) for p in model.params],
        "code": [{"op": OPCODE[ins.op], "name": ins.name, "in": list(ins.inputs), "out": list(ins.outputs),
                  "attrs": attrs_to_wire(ins.attrs)} for ins in model.instrs],
        "outputs": list(model.outputs),
    }
    if model.scales is not None:
        wire[SCALES_KEY] = {"inputs": [_scale_wire(x) for x in model.scales.inputs],
                            "outputs": [_scale_wire(x) for x in model.scales.outputs]}
    return wire


def _bin_header(n: int) -> int:
    return 2 if n <= 0xff else 3 if n <= 0xffff else 5


def encoded_size(model: Model, at_most: int | None = None) -> int:
    """``len(encode(model))``, without copying any param's data.  With ``at_most``, any size
    not above it may be returned when the true one is not above it either (params are then
    counted at their dtype's width, sparing the scan that chooses int8 storage)."""
    size = len(msgpack.packb(to_wire(model, data=False), use_bin_type=True))
    widths = [p.type.size * WIRE_DTYPES[p.type.dtype].itemsize for p in model.params]
    if at_most is not None and size + sum(n + 3 for n in widths) <= at_most:
        return size + sum(n + _bin_header(n) - _bin_header(0) for n in widths)
    for p in model.params:
        n = p.type.size * WIRE_DTYPES[_storage(p.value, p.type.dtype)].itemsize
        size += n + _bin_header(n) - _bin_header(0)
    return size


def encode(model: Model) -> bytes:
    # strict.pack's canonical form, called through this module's msgpack, which
    # tests/test_native_format.py reaches to prove nothing is unpacked before the scan.
    return msgpack.packb(to_wire(model), use_bin_type=True)


# -- decoding -------------------------------------------------------------------

_READER = Reader("native", verifier_codes=True)


def _param(e: Any, where: str) -> Param:
    rd = _READER
    e = rd.map(e, PARAM_KEYS, where)
    name = rd.str(e["name"], f"{where}.name")
    t = rd.tensor_type(e, where)
    storage = rd.str(e["storage"], f"{where}.storage")
    allowed = (INT8_STORAGE, INT32) if t.dtype == INT32 else (t.dtype,)
    if storage not in allowed:
        raise rd.fail(f"{where}: storage {storage!r} must be one of {allowed} for dtype {t.dtype}")
    return Param(name, t, rd.array(t.dtype, t.shape, e["data"], f"{where}.data", storage))


def _ids(value: Any, where: str) -> tuple[int, ...]:
    return tuple(_READER.int(t, where) for t in _READER.list(value, where))


def _instr(e: Any, where: str, first_out: int) -> Instr:
    rd = _READER
    e = rd.map(e, INSTR_KEYS, where)
    code = rd.int(e["op"], f"{where}.op")
    if not 0 <= code < len(OPS):
        raise InvalidError("op", f"{where}: unknown op code {code} (the ISA has {len(OPS)} ops)")
    op = OPS[code]
    name = rd.str(e["name"], f"{where}.name")
    ins = _ids(e["in"], f"{where}.in")
    outs = _ids(e["out"], f"{where}.out")
    for t in ins:
        if not 0 <= t < first_out:
            raise InvalidError("graph", f"{where}: input tensor {t} is not defined before it")
    fresh = tuple(range(first_out, first_out + len(op.outputs)))
    if outs != fresh:
        raise InvalidError("graph", f"{where}: outputs {list(outs)} must be the next tensor ids {list(fresh)}")
    return Instr(op.name, rd.attrs(op.attrs, e["attrs"], f"{where}.attrs"), ins, outs, name)


def from_wire(top: Any) -> Model:
    """The unpacked msgpack value -> Model, checking every key, type and tensor id."""
    rd = _READER
    top = rd.map(top, TOP_KEYS + (SCALES_KEY,) if type(top) is dict and len(top) == 8 else TOP_KEYS, "model")
    rd.const(top["format"], FORMAT_NAME, "format")
    rd.const(top["version"], FORMAT_VERSION, "format version")
    rd.const(top["isa"], ISA_VERSION, "ISA version")
    inputs = []
    for k, e in enumerate(rd.list(top["inputs"], "inputs")):
        e = rd.map(e, INPUT_KEYS, f"inputs[{k}]")
        inputs.append(Input(rd.str(e["name"], f"inputs[{k}].name"), rd.tensor_type(e, f"inputs[{k}]")))
    params = [_param(e, f"params[{k}]") for k, e in enumerate(rd.list(top["params"], "params"))]
    instrs = []
    next_id = len(inputs) + len(params)
    for k, e in enumerate(rd.list(top["code"], "code")):
        instr = _instr(e, f"code[{k}]", next_id)
        instrs.append(instr)
        next_id += len(instr.outputs)
    outputs = _ids(top["outputs"], "outputs")
    for t in outputs:
        if not 0 <= t < next_id:
            raise InvalidError("graph", f"output tensor {t} does not exist (the model has {next_id})")
    scales = _scales(top[SCALES_KEY], len(inputs), len(outputs)) if SCALES_KEY in top else None
    return Model(tuple(inputs), tuple(params), tuple(instrs), outputs, scales)


def _scales(value: Any, inputs: int, outputs: int) -> Scales | None:
    """FORMAT.md 1.6: one nil or 8-byte little-endian float64 per input and per output, each finite and > 0.

    All nil decodes to no scales, so that such a file re-encodes without the key and fails as
    non-canonical.
    """
    rd = _READER
    value = rd.map(value, SCALE_KEYS, "scales")
    lists = []
    for key, count in zip(SCALE_KEYS, (inputs, outputs)):
        entries = rd.list(value[key], f"scales.{key}")
        if len(entries) != count:
            raise rd.fail(f"scales.{key}: {len(entries)} entries for {count} {key}")
        scales: list[float | None] = []
        for k, e in enumerate(entries):
            if e is None:
                scales.append(None)
                continue
            (scale,) = SCALE.unpack(rd.bin(e, f"scales.{key}[{k}]", SCALE.size))
            if not (math.isfinite(scale) and scale > 0):
                raise InvalidError("scale", f"scales.{key}[{k}]: {scale!r} must be a finite float above 0")
            scales.append(scale)
        lists.append(tuple(scales))
    if all(s is None for s in (*lists[0], *lists[1])):
        return None
    return Scales(*lists)


def decode(data: bytes) -> Model:
    """Bytes -> Model; rejects anything but the canonical encoding of a well-formed model."""
    return strict.decode(data, _READER, MAX_MODEL_BYTES, "model", from_wire, to_wire)


def is_native(data: bytes) -> bool:
    """Whether bytes look like a native model: a msgpack map whose first key is "format"."""
    return data[:8] in (b"\x87\xa6format", b"\x88\xa6format")
