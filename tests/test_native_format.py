# Over 400 lines: a test file, one case per rule.
"""The canonical native model format (docs/FORMAT.md section 1).

Round trips for hand-built models, the byte-exact example of FORMAT.md 1.5,
and one test per way a file can be non-canonical or malformed.  Malformed
bytes are written by the small msgpack emitter below (straight from the table
of FORMAT.md 1.1), since msgpack-python never produces most of them.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from isa.attrs import parse_attrs
from isa.errors import CvmError
from isa.table import ISA_VERSION, OP_BY_NAME, OPCODE, OPS
from isa.types import DTYPES, INT32, TensorType
from serializer import native
from serializer.model import Input, Instr, Model, Param
from serializer import strict
from serializer.strict import Reader

# -- a msgpack emitter written from FORMAT.md 1.1 ------------------------------


class Raw(bytes):
    """Bytes emitted verbatim: a hand-made (often non-canonical) encoding."""


@dataclasses.dataclass
class Pairs:
    """A map given as its key/value pairs, so keys may repeat."""

    items: list[tuple[Any, Any]]


def be(fmt: str, v: int) -> bytes:
    return struct.pack(">" + fmt, v)


def pack_int(v: int) -> bytes:
    if 0 <= v <= 0x7F:
        return bytes([v])
    if -32 <= v < 0:
        return bytes([v & 0xFF])
    if v >= 0:
        for code, fmt, bits in ((0xCC, "B", 8), (0xCD, "H", 16), (0xCE, "I", 32), (0xCF, "Q", 64)):
            if v < 1 << bits:
                return bytes([code]) + be(fmt, v)
    for code, fmt, bits in ((0xD0, "b", 8), (0xD1, "h", 16), (0xD2, "i", 32), (0xD3, "q", 64)):
        if v >= -(1 << (bits - 1)):
            return bytes([code]) + be(fmt, v)
    raise ValueError(v)


def str_header(n: int, form: str | None = None) -> bytes:
    form = form or ("fix" if n <= 31 else "8" if n <= 255 else "16")
    return {"fix": lambda: bytes([0xA0 | n]), "8": lambda: b"\xd9" + be("B", n),
            "16": lambda: b"\xda" + be("H", n), "32": lambda: b"\xdb" + be("I", n)}[form]()


def bin_header(n: int, form: str | None = None) -> bytes:
    form = form or ("8" if n <= 255 else "16" if n <= 0xFFFF else "32")
    return {"8": lambda: b"\xc4" + be("B", n), "16": lambda: b"\xc5" + be("H", n),
            "32": lambda: b"\xc6" + be("I", n)}[form]()


def array_header(n: int, form: str | None = None) -> bytes:
    form = form or ("fix" if n <= 15 else "16" if n <= 0xFFFF else "32")
    return {"fix": lambda: bytes([0x90 | n]), "16": lambda: b"\xdc" + be("H", n),
            "32": lambda: b"\xdd" + be("I", n)}[form]()


def map_header(n: int, form: str | None = None) -> bytes:
    form = form or ("fix" if n <= 15 else "16")
    return {"fix": lambda: bytes([0x80 | n]), "16": lambda: b"\xde" + be("H", n),
            "32": lambda: b"\xdf" + be("I", n)}[form]()


def pack(v: Any) -> bytes:
    """The canonical msgpack encoding of FORMAT.md 1.1 (plus floats, to test their rejection)."""
    if isinstance(v, Raw):
        return bytes(v)
    if v is None:
        return b"\xc0"
    if v is True:
        return b"\xc3"
    if v is False:
        return b"\xc2"
    if isinstance(v, int):
        return pack_int(v)
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, str):
        b = v.encode("utf-8")
        return str_header(len(b)) + b
    if isinstance(v, bytes):
        return bin_header(len(v)) + v
    if isinstance(v, list):
        return array_header(len(v)) + b"".join(pack(x) for x in v)
    if isinstance(v, dict):
        v = Pairs(list(v.items()))
    if isinstance(v, Pairs):
        return map_header(len(v.items)) + b"".join(pack(k) + pack(x) for k, x in v.items)
    raise TypeError(type(v))


def as_str(text: str, form: str) -> Raw:
    b = text.encode("utf-8")
    return Raw(str_header(len(b), form) + b)


def as_array(items: list[Any], form: str) -> Raw:
    return Raw(array_header(len(items), form) + b"".join(pack(x) for x in items))


def as_map(d: dict[str, Any], form: str) -> Raw:
    return Raw(map_header(len(d), form) + b"".join(pack(k) + pack(x) for k, x in d.items()))


def as_bin(data: bytes, form: str) -> Raw:
    return Raw(bin_header(len(data), form) + data)


# -- models --------------------------------------------------------------------


def attrs(op: str, **kw: Any) -> Any:
    return parse_attrs(OP_BY_NAME[op].attrs, kw, fill_defaults=True)


def i32(values: Any) -> np.ndarray:
    return np.array(values, dtype=np.int32)


def example_model() -> Model:
    """The model of FORMAT.md 1.5."""
    return Model(
        inputs=(Input("x", TensorType((2, 3), 8)),),
        params=(Param("w", TensorType((2, 3), 8), i32([[1, -127, 127], [0, 5, -3]])),),
        instrs=(Instr("elemwise_add", attrs("elemwise_add"), (0, 1), (2,), "add"),
                Instr("cvm_right_shift", attrs("cvm_right_shift", precision=8, shift_bit=1), (2,), (3,), "rs")),
        outputs=(3,))


EXAMPLE_HEX = (
    "87a6666f726d6174a563766d766da776657273696f6e01a369736102a6696e70"
    "7574739184a46e616d65a178a56474797065a5696e743332a573686170659202"
    "03a9707265636973696f6e08a6706172616d739186a46e616d65a177a5647479"
    "7065a5696e743332a57368617065920203a9707265636973696f6e08a773746f"
    "72616765a4696e7438a464617461c40601817f0005fda4636f64659285a26f70"
    "04a46e616d65a3616464a2696e920001a36f75749102a561747472738085a26f"
    "7008a46e616d65a27273a2696e9102a36f75749103a5617474727383a9707265"
    "636973696f6e08a973686966745f62697401a769735f7369676ec3a76f757470"
    "7574739103")
EXAMPLE = bytes.fromhex(EXAMPLE_HEX)
EXAMPLE_HASH = "166f79ac39032572b3553b5b488e5b5b2fae852d32b2416a3a46175752bcac0d"


def example_wire() -> dict[str, Any]:
    """FORMAT.md 1.5's model as the msgpack value of FORMAT.md 1.2, written by hand."""
    return {
        "format": "cvmvm", "version": 1, "isa": ISA_VERSION,
        "inputs": [{"name": "x", "dtype": "int32", "shape": [2, 3], "precision": 8}],
        "params": [{"name": "w", "dtype": "int32", "shape": [2, 3], "precision": 8, "storage": "int8",
                    "data": bytes([1, 0x81, 0x7F, 0, 5, 0xFD])}],
        "code": [{"op": 4, "name": "add", "in": [0, 1], "out": [2], "attrs": {}},
                 {"op": 8, "name": "rs", "in": [2], "out": [3],
                  "attrs": {"precision": 8, "shift_bit": 1, "is_sign": True}}],
        "outputs": [3],
    }


def rich_model() -> Model:
    """Every attribute kind, every dtype, int8 and int32 storage, a two-output op.

    Only the structure is meaningful (tensor ids, kinds, domains): the format
    does not check shapes, verification does.
    """
    x = TensorType((1, 2, 4, 4), 8)
    params = (
        Param("w", TensorType((3, 2, 3, 3), 8), i32(np.arange(54).reshape(3, 2, 3, 3) % 255 - 127)),
        Param("b", TensorType((3,), 9), i32([-128, 127, 0])),                 # int8 storage
        Param("big", TensorType((4,), 31), i32([128, -129, 2**30, -(2**31 - 1)])),  # int32 storage
        Param("idx", TensorType((2,), 2), i32([1, 0])),
        Param("bytes", TensorType((3,), None, "uint8"), np.array([0, 128, 255], np.uint8)),
        Param("i8", TensorType((2,), None, "int8"), np.array([-128, 127], np.int8)),
        Param("i64", TensorType((2,), None, "int64"), np.array([-(2**63), 2**63 - 1], np.int64)),
        Param("h", TensorType((2,), None, "float16"), np.array([-0.0, 1.5], np.float16)),
        Param("d", TensorType((2,), None, "float64"), np.array([np.inf, -1e300], np.float64)),
    )
    inputs = (Input("x", x), Input("u", TensorType((4,), None, "uint8")),
              Input("f", TensorType((1, 1, 4, 4), None, "float32")))
    n = len(inputs) + len(params)
    code = [
        ("conv2d", attrs("conv2d", channels=3, kernel_size=(3, 3), padding=(1, 1), layout="NCHW"), (0, 3, 4), 1),
        ("sum", attrs("sum", axis=(1, -1), keepdims=True, exclude=False), (n,), 1),
        ("clip", attrs("clip", a_min=-(2**31 - 1), a_max=70000), (n + 1,), 1),
        ("take", attrs("take", axis=None), (0, 6), 1),
        ("take", attrs("take", axis=-1), (0, 6), 1),
        ("strided_slice", attrs("strided_slice", begin=(-(2**63),), end=(2**63 - 1,), stride=(-1,)), (0,), 1),
        ("get_valid_counts", attrs("get_valid_counts", score_threshold=-33), (n + 2,), 2),
        ("max_pool", attrs("max_pool", kernel_shape=(2, 2), strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0),
                           auto_pad="SAME_LOWER", ceil_mode=1, storage_order=0, index_axis=-129,
                           index_dtype="int64"), (2,), 2),
        ("upsampling", attrs("upsampling", scale=2), (0,), 1),
        ("reshape", attrs("reshape", shape=(-1, 0, -4, 2, -1)), (0,), 1),
        ("non_max_suppression", attrs("non_max_suppression", iou_threshold=50, force_suppress=True),
         (n + 7, n + 6), 1),
    ]
    instrs = []
    next_id = n
    for k, (op, a, ins, nout) in enumerate(code):
        instrs.append(Instr(op, a, ins, tuple(range(next_id, next_id + nout)), f"{op}_{k}"))
        next_id += nout
    return Model(inputs, params, tuple(instrs), (next_id - 1, n + 6, n + 7, 0, 4))


def assert_round_trip(model: Model) -> bytes:
    data = native.encode(model)
    back = native.decode(data)
    assert back == model
    assert native.encode(back) == data
    for p, q in zip(model.params, back.params):
        assert q.value.dtype == p.value.dtype and q.value.shape == p.value.shape
        assert q.value.tobytes() == p.value.tobytes()  # bit for bit, NaN payloads and -0.0 included
        assert not q.value.flags.writeable
    return data


def reject(data: bytes, code: str) -> None:
    with pytest.raises(CvmError) as e:
        native.decode(data)
    assert e.value.code == code


def edited(path: tuple[Any, ...], value: Any, wire: dict[str, Any] | None = None) -> bytes:
    """The example (or ``wire``) with the value at ``path`` replaced, packed.

    The unedited value must decode, so that each rejection has the one fault
    the test puts in.
    """
    w = copy.deepcopy(wire or example_wire())
    native.decode(pack(w))
    node = w
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return pack(w)


def at(path: tuple[Any, ...], wire: dict[str, Any]) -> Any:
    for key in path:
        wire = wire[key]
    return wire


# -- the pinned example --------------------------------------------------------


def test_example_encodes_to_the_bytes_of_format_md():
    assert native.encode(example_model()) == EXAMPLE


def test_example_is_the_spec_encoding_of_its_wire_value():
    assert pack(example_wire()) == EXAMPLE


def test_example_model_hash():
    assert hashlib.sha256(EXAMPLE).hexdigest() == EXAMPLE_HASH


def test_example_round_trips():
    assert assert_round_trip(example_model()) == EXAMPLE


def test_example_op_codes_are_the_table_indices():
    assert (OPCODE["elemwise_add"], OPCODE["cvm_right_shift"]) == (4, 8)
    assert OPS[4].name == "elemwise_add"


def test_decode_accepts_bytearray_and_memoryview():
    assert native.decode(bytearray(EXAMPLE)) == example_model()
    assert native.decode(memoryview(EXAMPLE)) == example_model()


def test_is_native():
    assert native.is_native(EXAMPLE)
    assert not native.is_native(b'{"nodes": []}')
    assert not native.is_native(b"")


# -- round trips ---------------------------------------------------------------


def test_rich_model_round_trips():
    assert_round_trip(rich_model())


def test_rich_model_matches_the_spec_encoder():
    """native.encode against the emitter above, applied to the wire value of FORMAT.md 1.2."""
    m = rich_model()
    wire = {
        "format": "cvmvm", "version": 1, "isa": ISA_VERSION,
        "inputs": [{"name": i.name, "dtype": i.type.dtype, "shape": list(i.type.shape),
                    "precision": i.type.precision} for i in m.inputs],
        "params": [],
        "code": [],
        "outputs": list(m.outputs),
    }
    for p in m.params:
        fits = p.type.dtype == "int32" and all(-128 <= int(v) <= 127 for v in p.value.ravel())
        storage = "int8" if fits else p.type.dtype
        data = b"".join(struct.pack("<b", int(v)) for v in p.value.ravel()) if fits else \
            p.value.astype(p.value.dtype.newbyteorder("<")).tobytes()
        wire["params"].append({"name": p.name, "dtype": p.type.dtype, "shape": list(p.type.shape),
                               "precision": p.type.precision, "storage": storage, "data": data})
    for ins in m.instrs:
        raw = {f.name: getattr(ins.attrs, f.name) for f in dataclasses.fields(ins.attrs)}
        wire["code"].append({"op": OPS.index(OP_BY_NAME[ins.op]), "name": ins.name, "in": list(ins.inputs),
                             "out": list(ins.outputs),
                             "attrs": {k: list(v) if isinstance(v, tuple) else v for k, v in raw.items()}})
    assert native.encode(m) == pack(wire)


def one_param(value: np.ndarray, t: TensorType) -> Model:
    return Model((), (Param("p", t, value),), (), (0,))


def param_wire(model: Model) -> dict[str, Any]:
    import msgpack  # inspection only: decoding under test goes through native.decode
    return msgpack.unpackb(native.encode(model))["params"][0]


@pytest.mark.parametrize("values, storage", [
    ([-128, 127, 0], "int8"),
    ([-128], "int8"),
    ([127], "int8"),
    ([128], "int32"),
    ([-129], "int32"),
    ([-128, 127, 128], "int32"),
    ([2**31 - 1, -(2**31 - 1)], "int32"),
])
def test_int32_param_storage(values, storage):
    m = one_param(i32(values), TensorType((len(values),), 32))
    w = param_wire(m)
    assert w["storage"] == storage
    width = 1 if storage == "int8" else 4
    assert w["data"] == b"".join(struct.pack("<b" if width == 1 else "<i", v) for v in values)
    assert_round_trip(m)


def test_int8_storage_sign_extends_on_load():
    back = native.decode(native.encode(one_param(i32([-128, -1, 127]), TensorType((3,), 9))))
    assert back.params[0].value.dtype == DTYPES[INT32]
    assert back.params[0].value.tolist() == [-128, -1, 127]


@pytest.mark.parametrize("dtype, values", [
    ("int8", [-128, 0, 127]),
    ("uint8", [0, 128, 255]),
    ("int64", [-(2**63), 0, 2**63 - 1]),
    ("float16", [-0.0, 65504.0, float("inf")]),
    ("float32", [-0.0, 1.0e-45, -3.4e38]),
    ("float64", [-0.0, 5e-324, float("-inf")]),
])
def test_non_int32_params_store_their_dtype(dtype, values):
    m = one_param(np.array(values, dtype=dtype), TensorType((3,), None, dtype))
    w = param_wire(m)
    assert w["storage"] == dtype and w["precision"] is None
    assert w["data"] == np.array(values, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()
    assert_round_trip(m)


@pytest.mark.parametrize("dtype, uint, bits", [
    ("float16", np.uint16, [0x7E01, 0xFC01, 0x7D55, 0x8000]),
    ("float32", np.uint32, [0x7FC00001, 0xFF800123, 0x7F8FFFFF, 0x80000000]),
    ("float64", np.uint64, [0x7FF8000000000001, 0xFFF0000000000ABC, 0x7FF0DEADBEEF0001, 0x8000000000000000]),
])
def test_float_params_keep_nan_payloads(dtype, uint, bits):
    value = np.array(bits, dtype=uint).view(dtype)
    back = native.decode(native.encode(one_param(value, TensorType((4,), None, dtype))))
    assert back.params[0].value.view(uint).tolist() == bits


def test_non_int32_inputs_have_nil_precision():
    m = Model((Input("f", TensorType((2, 2), None, "float32")), Input("u", TensorType((3,), None, "uint8"))),
              (), (), (0, 1))
    assert native.encode(m) == pack({
        "format": "cvmvm", "version": 1, "isa": ISA_VERSION,
        "inputs": [{"name": "f", "dtype": "float32", "shape": [2, 2], "precision": None},
                   {"name": "u", "dtype": "uint8", "shape": [3], "precision": None}],
        "params": [], "code": [], "outputs": [0, 1]})
    assert_round_trip(m)


def test_long_and_unicode_names():
    names = ["", "é" * 512, "a" * 1024, "名" * 341, "x" * 31, "y" * 32, "z" * 256]
    m = Model(tuple(Input(n, TensorType((1,), 8)) for n in names), (), (), (0,))
    data = assert_round_trip(m)
    assert as_str("y" * 32, "8") in data and as_str("z" * 256, "16") in data


def test_long_arrays_and_big_data_take_16_and_32_bit_headers():
    big = i32(np.arange(17000) - 8500)   # 68000 bytes of int32 storage: bin32
    mid = i32(np.arange(100) * 3)        # 400 bytes: bin16
    m = Model((Input("x", TensorType((1,), 8)),),
              (Param("big", TensorType((17000,), 15), big), Param("mid", TensorType((100,), 10), mid)),
              (), tuple([0, 1, 2] * 7))
    data = assert_round_trip(m)
    assert b"\xc6" + be("I", 68000) in data and b"\xc5" + be("H", 400) in data
    assert data.endswith(b"\xa7outputs" + array_header(21, "16") + bytes([0, 1, 2] * 7))


def test_encode_refuses_a_value_of_another_dtype():
    m = one_param(np.array([300], np.int64), TensorType((1,), 10))
    with pytest.raises(CvmError) as e:
        native.encode(m)
    assert e.value.code == "internal.param"


@st.composite
def models(draw: Any) -> Model:
    name = st.text(max_size=8)
    dims = st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple)
    inputs = tuple(Input(draw(name), TensorType(draw(dims), draw(st.integers(1, 32))))
                   for _ in range(draw(st.integers(0, 2))))
    params = []
    for _ in range(draw(st.integers(0, 2))):
        shape = draw(dims)
        hi = draw(st.sampled_from([127, 128, 2**31 - 1]))
        size = int(np.prod(shape))
        values = draw(st.lists(st.integers(-hi, hi), min_size=size, max_size=size))
        params.append(Param(draw(name), TensorType(shape, 32), i32(values).reshape(shape)))
    n = len(inputs) + len(params)
    instrs = []
    for _ in range(draw(st.integers(0, 3)) if n else 0):
        op = draw(st.sampled_from(["relu", "cvm_clip", "sum", "take", "repeat"]))
        a = {"relu": lambda: attrs("relu"),
             "cvm_clip": lambda: attrs("cvm_clip", precision=draw(st.integers(1, 32))),
             "sum": lambda: attrs("sum", axis=tuple(draw(st.lists(st.integers(-6, 5), max_size=3))),
                                  keepdims=draw(st.booleans())),
             "take": lambda: attrs("take", axis=draw(st.none() | st.integers(-(2**31), 2**31 - 1))),
             "repeat": lambda: attrs("repeat", repeats=draw(st.integers(1, 2**31 - 1)),
                                     axis=draw(st.integers(-(2**31), 2**31 - 1)))}[op]()
        arity = 2 if op == "take" else 1
        instrs.append(Instr(op, a, tuple(draw(st.integers(0, n - 1)) for _ in range(arity)), (n,), draw(name)))
        n += 1
    outputs = tuple(draw(st.lists(st.integers(0, n - 1), max_size=3))) if n else ()
    return Model(inputs, tuple(params), tuple(instrs), outputs)


@settings(derandomize=True, max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models())
def test_random_models_round_trip(model):
    assert_round_trip(model)
    size = len(native.encode(model))
    assert native.encoded_size(model) == size
    assert native.encoded_size(model, at_most=size) <= size == native.encoded_size(model, at_most=size - 1)


# -- the verifier enforces every bound of the decoder ----------------------------------

def _named(model: Model, name: str) -> Model:
    return dataclasses.replace(model, instrs=(dataclasses.replace(model.instrs[0], name=name),))


def _stored_and_reloaded(model: Model) -> None:
    import cvmvm
    from cvmvm.vm.verify import verify
    loaded = cvmvm.Model(verify(model))
    assert cvmvm.load(loaded.canonical_bytes).model_hash == loaded.model_hash


def test_a_model_that_verifies_always_decodes():
    # Defect: a Cortex model with a 2,000-byte op name verified and got a model hash that no
    # native decoder could read back.
    from cvmvm.vm.verify import verify
    base = Model((Input("data", TensorType((2,), 8)),), (), (Instr("relu", attrs("relu"), (0,), (1,)),), (1,))
    _stored_and_reloaded(_named(base, "x" * native.strict.MAX_NAME))
    _stored_and_reloaded(_named(base, "\u00e9" * (native.strict.MAX_NAME // 2)))
    for name, code in (("x" * 2000, "invalid.graph"), ("\u00e9" * (native.strict.MAX_NAME // 2 + 1), "invalid.graph"),
                       ("\ud800", "invalid.graph")):
        with pytest.raises(CvmError) as e:
            verify(_named(base, name))
        assert e.value.code == code
    with pytest.raises(CvmError) as e:
        verify(dataclasses.replace(base, inputs=(Input("\udc80", TensorType((2,), 8)),)))
    assert e.value.code == "invalid.graph"


def test_the_verifier_bounds_counts_and_the_encoded_size(monkeypatch):
    from cvmvm.vm.verify import verify
    x = Input("data", TensorType((2,), 8))
    w = Param("w", TensorType((2,), 8), i32([1, 2]))
    model = Model((x,), (w,), (Instr("elemwise_add", attrs("elemwise_add"), (0, 1), (2,)),), (2,))
    size = len(native.encode(model))
    monkeypatch.setattr(native, "MAX_MODEL_BYTES", size)
    verify(model)
    monkeypatch.setattr(native, "MAX_MODEL_BYTES", size - 1)
    with pytest.raises(CvmError) as e:
        verify(model)
    assert e.value.code == "limit.bytes"
    monkeypatch.undo()
    monkeypatch.setattr(native.strict, "MAX_ITEMS", 1)
    monkeypatch.setattr("cvmvm.vm.verify.MAX_ITEMS", 1)
    with pytest.raises(CvmError) as e:
        verify(model)
    assert e.value.code == "limit.items"


def test_a_cortex_model_with_a_long_node_name_is_refused_at_verification():
    import json
    import cvmvm
    from tests.test_cortex_format import unary_graph
    g = unary_graph("relu")
    g["nodes"][1]["name"] = "n" * 2000
    with pytest.raises(CvmError) as e:
        cvmvm.load_cortex(json.dumps(g))
    assert e.value.code == "invalid.graph"
    g["nodes"][1]["name"] = "n" * native.strict.MAX_NAME
    model = cvmvm.load_cortex(json.dumps(g))
    assert cvmvm.load(model.canonical_bytes).model_hash == model.model_hash


@settings(derandomize=True, max_examples=400, deadline=None)
@given(st.integers(0, len(EXAMPLE) - 1), st.integers(0, 255))
def test_any_byte_change_is_rejected_or_canonical(pos, byte):
    """Decoding never crashes, and accepts only what it re-encodes to the same bytes."""
    data = EXAMPLE[:pos] + bytes([byte]) + EXAMPLE[pos + 1:]
    try:
        model = native.decode(data)
    except CvmError as e:
        assert e.code.split(".")[0] in ("malformed", "invalid", "limit")
    else:
        assert native.encode(model) == data


# -- non-canonical encodings: they decode, but are not the one encoding -----------


def test_small_int_as_uint8():
    reject(edited(("version",), Raw(b"\xcc\x01")), "malformed.noncanonical")


def test_small_int_as_int16():
    reject(edited(("inputs", 0, "shape", 0), Raw(b"\xd1\x00\x02")), "malformed.noncanonical")


def test_positive_int_in_int8_form():
    reject(edited(("inputs", 0, "precision"), Raw(b"\xd0\x08")), "malformed.noncanonical")


def test_uint8_value_as_uint16():
    w = example_wire()
    w["inputs"][0]["shape"] = [200]
    assert native.decode(pack(w)).inputs[0].type.shape == (200,)
    reject(edited(("inputs", 0, "shape", 0), Raw(b"\xcd\x00\xc8"), w), "malformed.noncanonical")


def test_small_int_as_uint64():
    reject(edited(("code", 1, "op"), Raw(b"\xcf" + be("Q", 8))), "malformed.noncanonical")


def test_negative_fixint_as_int8():
    w = example_wire()
    w["code"][1] = {"op": OPCODE["clip"], "name": "c", "in": [2], "out": [3], "attrs": {"a_min": -5, "a_max": 5}}
    assert native.decode(pack(w)).instrs[1].attrs.a_min == -5
    reject(edited(("code", 1, "attrs", "a_min"), Raw(b"\xd0\xfb"), w), "malformed.noncanonical")


def test_int8_value_as_int16():
    w = example_wire()
    w["code"][1] = {"op": OPCODE["clip"], "name": "c", "in": [2], "out": [3], "attrs": {"a_min": -100, "a_max": 5}}
    reject(edited(("code", 1, "attrs", "a_min"), Raw(b"\xd1\xff\x9c"), w), "malformed.noncanonical")


def test_short_string_as_str8():
    reject(edited(("format",), as_str("cvmvm", "8")), "malformed.noncanonical")


def test_short_string_as_str16():
    reject(edited(("inputs", 0, "name"), as_str("x", "16")), "malformed.noncanonical")


def test_short_key_as_str8():
    data = pack(example_wire())
    bad = data.replace(b"\xa6format", as_str("format", "8"), 1)
    reject(bad, "malformed.noncanonical")


def test_short_bin_as_bin16():
    reject(edited(("params", 0, "data"), as_bin(bytes([1, 0x81, 0x7F, 0, 5, 0xFD]), "16")), "malformed.noncanonical")


def test_short_bin_as_bin32():
    reject(edited(("params", 0, "data"), as_bin(bytes([1, 0x81, 0x7F, 0, 5, 0xFD]), "32")), "malformed.noncanonical")


def test_two_item_array_as_array16():
    reject(edited(("inputs", 0, "shape"), as_array([2, 3], "16")), "malformed.noncanonical")


def test_one_item_array_as_array32():
    reject(edited(("outputs",), as_array([3], "32")), "malformed.noncanonical")


def test_empty_array_as_array16():
    reject(edited(("code", 0, "in"), as_array([], "16"), _with_relu_first()), "malformed.noncanonical")


def _with_relu_first() -> dict[str, Any]:
    # relu takes one input; an empty "in" still decodes (arity is verification's).
    w = example_wire()
    w["code"][0] = {"op": OPCODE["relu"], "name": "add", "in": [], "out": [2], "attrs": {}}
    return w


def test_top_map_as_map16():
    data = pack(example_wire())
    reject(map_header(7, "16") + data[1:], "malformed.noncanonical")


def test_attrs_map_as_map16():
    reject(edited(("code", 1, "attrs"), as_map({"precision": 8, "shift_bit": 1, "is_sign": True}, "16")),
           "malformed.noncanonical")


def test_empty_attrs_as_map16():
    reject(edited(("code", 0, "attrs"), as_map({}, "16")), "malformed.noncanonical")


def test_int32_storage_for_a_param_that_fits_int8():
    data = struct.pack("<6i", 1, -127, 127, 0, 5, -3)
    w = example_wire()
    w["params"][0].update(storage="int32", data=data)
    reject(pack(w), "malformed.noncanonical")


# -- malformed: structure -------------------------------------------------------


def test_empty_file():
    reject(b"", "malformed.native")


def test_top_level_not_a_map():
    reject(pack([1, 2]), "malformed.native")


def test_top_level_int():
    reject(pack(1), "malformed.native")


def test_trailing_byte():
    reject(EXAMPLE + b"\x00", "malformed.native")


def test_trailing_second_model():
    reject(EXAMPLE + EXAMPLE, "malformed.native")


@pytest.mark.parametrize("cut", range(len(EXAMPLE)))
def test_truncated(cut):
    reject(EXAMPLE[:cut], "malformed.native")


def test_duplicate_top_key():
    w = example_wire()
    reject(pack(Pairs(list(w.items()) + [("outputs", [3])])), "malformed.native")


def test_duplicate_key_replacing_a_missing_one():
    # 7 entries with "format" twice and no "outputs": a last-wins dict would still hold 6 keys.
    items = list(example_wire().items())
    reject(pack(Pairs([items[0]] + items[:-1])), "malformed.native")


def test_duplicate_attrs_key():
    reject(edited(("code", 1, "attrs"), Pairs([("precision", 8), ("precision", 8), ("shift_bit", 1),
                                               ("is_sign", True)])), "malformed.native")


def test_duplicate_key_in_input():
    reject(edited(("inputs", 0), Pairs([("name", "x"), ("name", "x"), ("dtype", "int32"), ("shape", [2, 3]),
                                        ("precision", 8)])), "malformed.native")


KEYED = [(), ("inputs", 0), ("params", 0), ("code", 0), ("code", 1), ("code", 1, "attrs")]


@pytest.mark.parametrize("path", KEYED, ids=lambda p: ".".join(map(str, p)) or "top")
def test_extra_key(path):
    w = example_wire()
    at(path, w)["extra"] = 0
    reject(pack(w), "malformed.native")


@pytest.mark.parametrize("path", KEYED, ids=lambda p: ".".join(map(str, p)) or "top")
def test_missing_key(path):
    w = example_wire()
    node = at(path, w)
    del node[next(reversed(node))]
    reject(pack(w), "malformed.native")


def test_missing_first_key():
    w = example_wire()
    del w["format"]
    reject(pack(w), "malformed.native")


@pytest.mark.parametrize("path", KEYED, ids=lambda p: ".".join(map(str, p)) or "top")
def test_keys_out_of_order(path):
    w = example_wire()
    node = at(path, w)
    items = list(node.items())
    items[0], items[1] = items[1], items[0]
    node.clear()
    node.update(items)
    reject(pack(w), "malformed.native")


def test_key_renamed():
    w = example_wire()
    w["code"][0] = {("inputs" if k == "in" else k): v for k, v in w["code"][0].items()}
    reject(pack(w), "malformed.native")


def test_attrs_on_an_op_without_attributes():
    reject(edited(("code", 0, "attrs"), {"precision": 8}), "malformed.native")


def test_attrs_missing_one_attribute():
    reject(edited(("code", 1, "attrs"), {"precision": 8, "shift_bit": 1}), "malformed.native")


def test_attrs_of_another_op():
    reject(edited(("code", 1, "attrs"), {"a_min": 0, "a_max": 1}), "malformed.native")


def test_int_map_key():
    reject(edited(("code", 1, "attrs"), Pairs([(1, 8), ("shift_bit", 1), ("is_sign", True)])), "malformed.native")


def test_bin_map_key():
    reject(edited(("code", 1, "attrs"), Pairs([(b"precision", 8), ("shift_bit", 1), ("is_sign", True)])),
           "malformed.native")


def test_invalid_utf8_name():
    reject(edited(("inputs", 0, "name"), Raw(b"\xa2\xc3\x28")), "malformed.native")


def test_surrogate_in_name():
    reject(edited(("inputs", 0, "name"), Raw(b"\xa3\xed\xa0\x80")), "malformed.native")


def test_overlong_utf8_name():
    reject(edited(("inputs", 0, "name"), Raw(b"\xa2\xc1\xb8")), "malformed.native")


def test_name_of_1025_bytes():
    reject(edited(("inputs", 0, "name"), "n" * 1025), "malformed.native")


def test_name_of_1024_bytes_is_accepted():
    assert native.decode(edited(("inputs", 0, "name"), "n" * 1024)).inputs[0].name == "n" * 1024


def test_deep_nesting():
    reject(edited(("outputs",), Raw(b"\x91" * 3000 + b"\x03")), "malformed.native")


# -- malformed: types ------------------------------------------------------------

INT_FIELDS = [("version",), ("isa",), ("inputs", 0, "shape", 0), ("inputs", 0, "precision"),
              ("params", 0, "shape", 1), ("params", 0, "precision"), ("code", 0, "op"), ("code", 0, "in", 0),
              ("code", 1, "out", 0), ("outputs", 0), ("code", 1, "attrs", "shift_bit")]
STR_FIELDS = [("format",), ("inputs", 0, "name"), ("inputs", 0, "dtype"), ("params", 0, "name"),
              ("params", 0, "dtype"), ("params", 0, "storage"), ("code", 1, "name")]
LIST_FIELDS = [("inputs",), ("params",), ("code",), ("outputs",), ("inputs", 0, "shape"), ("code", 0, "in"),
               ("code", 0, "out")]
MAP_FIELDS = [("inputs", 0), ("params", 0), ("code", 0), ("code", 0, "attrs")]
WRONG = {
    "int": [("str", "8"), ("true", True), ("false", False), ("float", 1.0), ("bin", b"\x01"), ("array", [1]),
            ("map", {"a": 1})],
    "str": [("int", 1), ("bin", b"int32"), ("true", True), ("nil", None), ("array", ["x"]), ("float", 0.5)],
    "list": [("map", {"a": 1}), ("str", "x"), ("int", 0), ("nil", None), ("bin", b"")],
    "map": [("array", []), ("str", "x"), ("nil", None), ("int", 0)],
}
CASES = ([(f, "int", w) for f in INT_FIELDS for w in WRONG["int"]]
         + [(f, "str", w) for f in STR_FIELDS for w in WRONG["str"]]
         + [(f, "list", w) for f in LIST_FIELDS for w in WRONG["list"]]
         + [(f, "map", w) for f in MAP_FIELDS for w in WRONG["map"]])


@pytest.mark.parametrize("path, kind, wrong", CASES,
                         ids=[f"{'.'.join(map(str, p))}-{w[0]}-for-{k}" for p, k, w in CASES])
def test_wrong_type(path, kind, wrong):
    reject(edited(path, wrong[1]), "malformed.native")


def test_nil_for_an_int():
    reject(edited(("code", 0, "op"), None), "malformed.native")


@pytest.mark.parametrize("wrong", ["b", 1, True, [1], {"a": 1}, 1.5])
def test_wrong_type_for_bin(wrong):
    reject(edited(("params", 0, "data"), wrong), "malformed.native")


def test_str_for_bin_with_the_same_bytes():
    reject(edited(("params", 0, "data"), Raw(b"\xa6" + bytes([1, 0x41, 0x7F, 0, 5, 0x3D]))), "malformed.native")


def test_float32_anywhere():
    reject(edited(("version",), Raw(b"\xca" + struct.pack(">f", 1.0))), "malformed.native")


def test_float64_in_data_position():
    reject(edited(("params", 0, "data"), 1.0), "malformed.native")


@pytest.mark.parametrize("ext", [b"\xd4\x01\x00", b"\xd5\x01\x00\x00", b"\xc7\x01\x05\x00",
                                 b"\xd6\xff\x00\x00\x00\x01", b"\xd7\xff" + bytes(8), b"\xc7\x0c\xff" + bytes(12),
                                 b"\xd8\x02" + bytes(16), b"\xc8\x00\x01\x03\x00", b"\xc9\x00\x00\x00\x01\x03\x00"],
                         ids=["fixext1", "fixext2", "ext8", "timestamp32", "timestamp64", "timestamp96",
                              "fixext16", "ext16", "ext32"])
def test_extension_types(ext):
    reject(edited(("code", 1, "attrs", "shift_bit"), Raw(ext)), "malformed.native")


def test_extension_as_data():
    reject(edited(("params", 0, "data"), Raw(b"\xc7\x06\x01" + bytes(6))), "malformed.native")


def test_reserved_byte_c1():
    reject(edited(("isa",), Raw(b"\xc1")), "malformed.native")


# -- malformed: values -----------------------------------------------------------


@pytest.mark.parametrize("value", ["cvmvn", "CVMVM", "", "cvmvm\x00"])
def test_wrong_format_name(value):
    reject(edited(("format",), value), "malformed.native")


@pytest.mark.parametrize("value", [0, 2, -1, 2**64 - 1])
def test_wrong_format_version(value):
    reject(edited(("version",), value), "malformed.native")


@pytest.mark.parametrize("value", [0, 1, 3, -1])  # 1: before is_sign/dtype parity (docs/PARITY.md)
def test_wrong_isa_version(value):
    reject(edited(("isa",), value), "malformed.native")


def test_param_data_one_byte_short():
    reject(edited(("params", 0, "data"), bytes([1, 0x81, 0x7F, 0, 5])), "malformed.native")


def test_param_data_one_byte_long():
    reject(edited(("params", 0, "data"), bytes([1, 0x81, 0x7F, 0, 5, 0xFD, 0])), "malformed.native")


def test_param_data_empty():
    reject(edited(("params", 0, "data"), b""), "malformed.native")


def test_int8_storage_with_int32_data():
    reject(edited(("params", 0, "data"), struct.pack("<6i", 1, -127, 127, 0, 5, -3)), "malformed.native")


def test_int32_storage_with_int8_data():
    reject(edited(("params", 0, "storage"), "int32"), "malformed.native")


def test_int8_storage_for_an_int64_param():
    w = example_wire()
    w["params"][0].update(dtype="int64", precision=None, storage="int64",
                          data=struct.pack("<6q", 1, -127, 127, 0, 5, -3))
    assert native.decode(pack(w)).params[0].value.tolist() == [[1, -127, 127], [0, 5, -3]]
    w["params"][0].update(storage="int8", data=bytes([1, 0x81, 0x7F, 0, 5, 0xFD]))
    reject(pack(w), "malformed.native")


def test_storage_other_than_the_dtype_for_uint8():
    w = example_wire()
    w["params"][0].update(dtype="uint8", precision=None, storage="int8")
    reject(pack(w), "malformed.native")


@pytest.mark.parametrize("storage", ["float32", "int64", "uint8", "INT8", ""])
def test_storage_not_allowed_for_int32(storage):
    reject(edited(("params", 0, "storage"), storage), "malformed.native")


def test_data_length_checked_before_building_the_array(monkeypatch):
    data = edited(("params", 0, "data"), bytes(5))
    monkeypatch.setattr(native.np, "frombuffer", lambda *a, **k: pytest.fail("an array was built"))
    reject(data, "malformed.native")


def test_unknown_op_code():
    reject(edited(("code", 1, "op"), len(OPS)), "invalid.op")


def test_negative_op_code():
    reject(edited(("code", 1, "op"), -1), "invalid.op")


def test_huge_op_code():
    reject(edited(("code", 1, "op"), 2**64 - 1), "invalid.op")


@pytest.mark.parametrize("attr, value", [("precision", 0), ("precision", 33), ("shift_bit", 0),
                                         ("shift_bit", -1), ("shift_bit", 2**63)])
def test_attribute_out_of_domain(attr, value):
    reject(edited(("code", 1, "attrs", attr), value), "invalid.attr")


def test_str_attribute_out_of_domain():
    m = rich_model()
    wire = msgpack_wire(m)
    conv = wire["code"][0]
    assert conv["attrs"]["layout"] == "NCHW"
    conv["attrs"]["layout"] = "NHWC"
    reject(pack(wire), "invalid.attr")


def test_ints_attribute_out_of_domain():
    wire = msgpack_wire(rich_model())
    wire["code"][0]["attrs"]["kernel_size"] = [3, 3, 3]
    reject(pack(wire), "invalid.attr")


def test_opt_int_attribute_out_of_domain():
    wire = msgpack_wire(rich_model())
    assert wire["code"][4]["attrs"] == {"axis": -1}
    wire["code"][4]["attrs"]["axis"] = 2**31
    reject(pack(wire), "invalid.attr")


def msgpack_wire(model: Model) -> dict[str, Any]:
    import msgpack  # inspection only: decoding under test goes through native.decode
    return msgpack.unpackb(native.encode(model))


RICH_KINDS = [  # (instruction, attribute, kind)
    (0, "channels", "int"), (1, "keepdims", "bool"), (1, "axis", "ints"), (3, "axis", "opt_int"),
    (0, "layout", "str"), (7, "auto_pad", "str"), (2, "a_min", "int"),
]
WRONG_ATTR = {
    "int": [True, "3", None, [3], 3.0, b"\x03"],
    "bool": [0, 1, "true", None, [True], b"\x01"],
    "ints": [1, [True], ["1"], [None], None, [1.0], "1", {"a": 1}, b"\x01"],
    "opt_int": [True, "0", [0], 0.0, b""],
    "str": [1, b"NCHW", None, ["NCHW"], True],
}
ATTR_CASES = [(i, a, k, w) for i, a, k in RICH_KINDS for w in WRONG_ATTR[k]]


@pytest.mark.parametrize("index, attr, kind, wrong", ATTR_CASES,
                         ids=[f"{a}-{k}-{w!r}" for _, a, k, w in ATTR_CASES])
def test_attribute_of_the_wrong_kind(index, attr, kind, wrong):
    wire = msgpack_wire(rich_model())
    assert attr in wire["code"][index]["attrs"]
    wire["code"][index]["attrs"][attr] = wrong
    reject(pack(wire), "malformed.native")


def test_unknown_dtype():
    reject(edited(("inputs", 0, "dtype"), "int16"), "invalid.dtype")


def test_unknown_param_dtype():
    reject(edited(("params", 0, "dtype"), "bool"), "invalid.dtype")


@pytest.mark.parametrize("precision", [0, 33, -1])
def test_int32_precision_out_of_range(precision):
    reject(edited(("inputs", 0, "precision"), precision), "invalid.precision")


def test_int32_without_precision_is_raw_int32_and_only_max_pool_takes_it():
    from cvmvm.vm.verify import verify
    model = native.decode(edited(("inputs", 0, "precision"), None))
    assert model.inputs[0].type.precision is None and model.inputs[0].type.dtype == "int32"
    with pytest.raises(CvmError) as e:
        verify(model)  # the example feeds it to elemwise_add
    assert e.value.code == "invalid.dtype"


def test_precision_on_a_float_input():
    w = example_wire()
    w["inputs"][0].update(dtype="float32", precision=None)
    reject(edited(("inputs", 0, "precision"), 8, w), "invalid.precision")


def test_empty_shape():
    reject(edited(("inputs", 0, "shape"), []), "limit.rank")


def test_rank_7():
    reject(edited(("inputs", 0, "shape"), [1] * 7), "limit.rank")


@pytest.mark.parametrize("dim", [0, -1, 2**24 + 1, 2**64 - 1])
def test_dim_out_of_range(dim):
    reject(edited(("inputs", 0, "shape"), [dim]), "limit.dim")


def test_size_over_2_30():
    reject(edited(("inputs", 0, "shape"), [2**24, 2**7]), "limit.size")


def test_param_size_over_2_30_fails_before_allocation(monkeypatch):
    data = edited(("params", 0, "shape"), [2**24, 2**6, 2])
    monkeypatch.setattr(native.np, "frombuffer", lambda *a, **k: pytest.fail("an array was built"))
    reject(data, "limit.size")


def test_dim_2_24_is_accepted():
    assert native.decode(edited(("inputs", 0, "shape"), [2**24, 2**6])).inputs[0].type.shape == (2**24, 64)


# -- malformed: tensor ids -------------------------------------------------------


def test_input_id_not_yet_defined():
    reject(edited(("code", 0, "in"), [0, 2]), "invalid.graph")


def test_input_id_defined_later():
    reject(edited(("code", 0, "in"), [0, 3]), "invalid.graph")


def test_negative_input_id():
    reject(edited(("code", 0, "in"), [0, -1]), "invalid.graph")


def test_output_id_skipped():
    w = example_wire()
    w["code"][0]["out"] = [3]
    w["code"][1].update({"in": [3], "out": [4]})
    w["outputs"] = [4]
    reject(pack(w), "invalid.graph")


def test_output_ids_reused():
    reject(edited(("code", 1, "out"), [2]), "invalid.graph")


def test_too_many_output_ids():
    reject(edited(("code", 1, "out"), [3, 4]), "invalid.graph")


def test_no_output_ids():
    reject(edited(("code", 1, "out"), []), "invalid.graph")


def test_too_few_output_ids_for_a_two_output_op():
    wire = msgpack_wire(rich_model())
    gvc = wire["code"][6]
    assert len(gvc["out"]) == 2
    gvc["out"] = gvc["out"][:1]
    reject(pack(wire), "invalid.graph")


def test_model_output_out_of_range():
    reject(edited(("outputs",), [4]), "invalid.graph")


def test_negative_model_output():
    reject(edited(("outputs",), [-1]), "invalid.graph")


# -- bounds: sizes are checked before anything is allocated ---------------------------


def reject_unread(data: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reject as malformed.native before msgpack is asked to unpack anything."""
    monkeypatch.setattr(native.msgpack, "unpackb", lambda *a, **k: pytest.fail("msgpack.unpackb was reached"))
    reject(data, "malformed.native")


def test_array_claiming_2_31_items(monkeypatch):
    reject_unread(edited(("inputs",), Raw(b"\xdd" + be("I", 2**31))), monkeypatch)


def test_array_claiming_2_20_items_on_a_short_buffer(monkeypatch):
    reject_unread(edited(("inputs",), Raw(b"\xdd" + be("I", 2**20))), monkeypatch)


def test_array16_claiming_more_items_than_bytes(monkeypatch):
    assert EXAMPLE.endswith(b"outputs\x91\x03")
    reject_unread(EXAMPLE[:-2] + b"\xdc\xff\xff" + b"\x03" * 100, monkeypatch)


def test_map_claiming_2_31_entries(monkeypatch):
    reject_unread(b"\xdf" + be("I", 2**31) + EXAMPLE[1:], monkeypatch)


def test_map_of_65_keys(monkeypatch):
    reject_unread(edited(("code", 1, "attrs"), {f"k{i}": 0 for i in range(65)}), monkeypatch)


def test_str32_claiming_4_gib(monkeypatch):
    reject_unread(edited(("inputs", 0, "name"), Raw(b"\xdb\xff\xff\xff\xff")), monkeypatch)


def test_bin32_claiming_4_gib(monkeypatch):
    reject_unread(edited(("params", 0, "data"), Raw(b"\xc6\xff\xff\xff\xff")), monkeypatch)


def test_nested_arrays_each_claiming_2_20_items(monkeypatch):
    # Each header alone would make msgpack preallocate a list of 2^20 slots.
    reject_unread(b"\x91" + (b"\xdd" + be("I", 2**20)) * 2000, monkeypatch)


def test_array_of_2_20_plus_1_items(monkeypatch):
    reject_unread(edited(("outputs",), Raw(b"\xdd" + be("I", 2**20 + 1) + b"\x00" * (2**20 + 1))), monkeypatch)


def test_array_of_2_20_items_is_within_bounds():
    model = native.decode(edited(("outputs",), Raw(b"\xdd" + be("I", 2**20) + b"\x03" * 2**20)))
    assert len(model.outputs) == 2**20


def test_file_over_the_byte_limit(monkeypatch):
    monkeypatch.setattr(native, "MAX_MODEL_BYTES", len(EXAMPLE) - 1)
    reject(EXAMPLE, "limit.bytes")


# -- the objects a record unpacks into (strict.scan) --------------------------------

def test_a_stream_of_empty_maps_is_refused_unread(monkeypatch):
    # 1 MiB of empty maps would unpack into 75 MB of dicts: 72 bytes of objects a byte.
    inner = b"\xdd" + be("I", 1 << 16) + b"\x80" * (1 << 16)
    reject_unread(b"\x81\xa6format\xdc" + be("H", 16) + inner * 16, monkeypatch)


@pytest.mark.parametrize("ints, maps, accepted", [(7, 3, True), (6, 3, False), (2, 0, True), (1, 0, False)])
def test_objects_are_costed_at_their_size(ints, maps, accepted):
    """An array of fixints (8 bytes each: a reference to a shared int) and empty maps (72: a
    64-byte dict and its reference): 64 + 8 ints + 72 maps bytes of objects for 1 + ints + maps
    bytes, at most 32 a byte (7 and 3: 336 <= 352; 6 and 3: 328 > 320; 2: 80 <= 96; 1: 72 > 64)."""
    data = bytes([0x90 + ints + maps]) + b"\x01" * ints + b"\x80" * maps
    if accepted:
        strict.scan(data, Reader("native"))
    else:
        with pytest.raises(CvmError) as e:
            strict.scan(data, Reader("native"))
        assert e.value.code == "malformed.native" and "more than 32 a byte" in e.value.message


@pytest.mark.parametrize("value, cost", [
    (b"\xa2ab", 8 + 49 + 2),                      # an ASCII str: 49 bytes and one a character
    (b"\xa2\xc3\xa9", 8 + 80 + 4 * 2),             # not ASCII: up to 4 bytes a character
    (b"\xa1a", 8), (b"\xa0", 8),                  # one byte and empty: shared
    (b"\xc4\x02ab", 8 + 33), (b"\xc4\x01a", 8),   # a bin, beside its payload
    (b"\xcd\x01\x00", 8 + 32), (b"\xcc\xff", 8),  # an int outside [-5, 256]; inside: shared
    (b"\xc0", 8), (b"\xc3", 8), (b"\x7f", 8),      # nil, true, a fixint: shared
    (b"\x92\x01\x02", 8 + 56 + 16),               # an array and its references
    (b"\x81\x01\x02", 8 + 64 + 40 + 16),          # a map, a key's entry and the references
])
def test_each_value_is_costed_as_documented(monkeypatch, value, cost):
    monkeypatch.setattr(strict, "OBJECT_BYTES_PER_BYTE", 1 << 20)
    assert strict.scan(value, Reader("native")) == cost


def test_the_bundled_model_unpacks_well_within_the_bound():
    data = (Path(__file__).parent.parent / "cvmvm" / "cli" / "demo" / "digits.cvm").read_bytes()
    assert strict.scan(data, Reader("native")) < 20 * len(data)


def test_a_model_that_does_not_fit_in_memory_unpacked_is_a_limit(monkeypatch):
    def no_memory(*a, **k):
        raise MemoryError
    monkeypatch.setattr(strict.msgpack, "unpackb", no_memory)
    reject(EXAMPLE, "limit.memory")
