"""Cortex parity (docs/PARITY.md): attribute values the runtime accepts and ignores are accepted,
kept in the model (both formats round-trip them, the model hash covers them) and change no result;
values the runtime refuses are refused, in both formats."""

from __future__ import annotations

import json

import numpy as np
import pytest

import cvmvm
from isa.attrs import RUNTIME_DTYPE_NAMES
from isa.errors import CvmError
from serializer import native
from serializer.cortex import graph_to_json_bytes, read_cortex, write_cortex
from tests.test_cortex_format import graph, op, var, var_attrs
from tests.test_native_format import pack

X = np.array([[1, -2, 127], [-127, 0, 100]], dtype=np.int32)   # the unary graphs' data: (2, 3), precision 8

SHIFT_OPS = {"cvm_clip": {"precision": 6},
             "cvm_right_shift": {"precision": 6, "shift_bit": 2},
             "cvm_left_shift": {"precision": 12, "shift_bit": 3}}
REDUCE_OPS = {"sum": {"axis": (1,)}, "max": {"axis": (1,)}}


def op_attrs_text(attrs: dict) -> str:
    """Typed attributes as Cortex op_attrs (the runtime's spellings: True/False, (1,))."""
    return json.dumps({k: str(v) for k, v in attrs.items()})


def one_op_graph(func: str, attrs_text: str) -> dict:
    """data (2, 3) p8 -> func; a reduction over axis 1 gives shape (2,)."""
    out = [2] if func in REDUCE_OPS else [2, 3]
    return graph([var("data"), op(f"{func}_0", func, [(0, 0)])], [[2, 3], out], [8, -1],
                 [var_attrs(8, (2, 3)), attrs_text], [(1, 0)])


def cortex_model(func: str, attrs_text: str) -> cvmvm.Model:
    return cvmvm.load_cortex(one_op_graph(func, attrs_text))


def run(model: cvmvm.Model) -> tuple[bytes, list[list[int]]]:
    result = model.run({"data": X}, trace=True)
    return result.trace.root, [o.tolist() for o in result.outputs]


def native_round_trip(model: cvmvm.Model) -> cvmvm.Model:
    again = cvmvm.load(model.canonical_bytes)
    assert again.model_hash == model.model_hash
    return again


def cortex_round_trip(model: cvmvm.Model) -> cvmvm.Model:
    graph, params = write_cortex(model.program.model, model.program.types)
    return cvmvm.load_cortex(graph_to_json_bytes(graph), params)


def attr_of(model: cvmvm.Model, name: str):
    return getattr(model.program.model.instrs[0].attrs, name)


# -- accepted, kept, ignored ----------------------------------------------------

@pytest.mark.parametrize("spelling", ["False", "false", "0", "FALSE"])
@pytest.mark.parametrize("func", sorted(SHIFT_OPS))
def test_is_sign_false_is_kept_and_ignored(func, spelling):
    signed = cortex_model(func, op_attrs_text({**SHIFT_OPS[func], "is_sign": True}))
    unsigned = cortex_model(func, op_attrs_text(SHIFT_OPS[func])[:-1] + f', "is_sign": "{spelling}"}}')
    assert attr_of(unsigned, "is_sign") is False
    assert run(unsigned)[1] == run(signed)[1]                 # the same values ...
    assert unsigned.model_hash != signed.model_hash          # ... from a model that says something else
    for again in (native_round_trip(unsigned), cortex_round_trip(unsigned)):
        assert attr_of(again, "is_sign") is False
        assert again.model_hash == unsigned.model_hash
        assert run(again) == run(unsigned)


@pytest.mark.parametrize("func", sorted(SHIFT_OPS))
def test_is_sign_false_through_run_op(func):
    x = X.astype(np.int64)
    want = cvmvm.run_op(func, [x], {**SHIFT_OPS[func], "is_sign": True}, [8])
    got = cvmvm.run_op(func, [x], {**SHIFT_OPS[func], "is_sign": False}, [8])
    assert [g.tolist() for g in got] == [w.tolist() for w in want]


@pytest.mark.parametrize("dtype", RUNTIME_DTYPE_NAMES)
@pytest.mark.parametrize("func", sorted(REDUCE_OPS))
def test_every_runtime_dtype_on_a_reduction_is_kept_and_ignored(func, dtype):
    base = op_attrs_text(REDUCE_OPS[func])[:-1]
    plain = cortex_model(func, base + "}")
    given = cortex_model(func, base + f', "dtype": "{dtype}"}}')
    assert attr_of(given, "dtype") == dtype
    assert run(given)[1] == run(plain)[1]
    assert (given.model_hash == plain.model_hash) == (dtype == "int32")
    assert given.output_types == plain.output_types
    for again in (native_round_trip(given), cortex_round_trip(given)):
        assert attr_of(again, "dtype") == dtype
        assert again.model_hash == given.model_hash


# -- refused, in both formats -----------------------------------------------------

REFUSED_DTYPES = ["bool", "int4", "Int32", "INT32", "float", "int32 ", " int32", "", "same", "uint128"]


@pytest.mark.parametrize("dtype", REFUSED_DTYPES)
@pytest.mark.parametrize("func", sorted(REDUCE_OPS))
def test_a_dtype_the_runtime_does_not_parse_is_refused(func, dtype):
    text = op_attrs_text(REDUCE_OPS[func])[:-1] + f', "dtype": {json.dumps(dtype)}}}'
    with pytest.raises(CvmError) as e:
        read_cortex(one_op_graph(func, text))
    assert e.value.code == "invalid.attr"
    with pytest.raises(CvmError) as e:
        cvmvm.run_op(func, [X], {**REDUCE_OPS[func], "dtype": dtype}, [8])
    assert e.value.code == "invalid.attr"


def native_code(func: str, attrs: dict, attr: str, value) -> str:
    """The error decoding a one-op native model whose ``attr`` is edited to ``value``."""
    wire = native.to_wire(cortex_model(func, op_attrs_text(attrs)).program.model)
    wire["code"][0]["attrs"][attr] = value
    with pytest.raises(CvmError) as e:
        native.decode(pack(wire))
    return e.value.code


@pytest.mark.parametrize("dtype", REFUSED_DTYPES)
def test_a_native_model_with_an_unparsed_dtype_is_refused(dtype):
    assert native_code("sum", REDUCE_OPS["sum"], "dtype", dtype) == "invalid.attr"


@pytest.mark.parametrize("spelling", ["yes", "2", "-1", "", "truee", "t"])
@pytest.mark.parametrize("func", sorted(SHIFT_OPS))
def test_is_sign_that_is_not_a_bool_is_refused(func, spelling):
    text = op_attrs_text(SHIFT_OPS[func])[:-1] + f', "is_sign": "{spelling}"}}'
    with pytest.raises(CvmError) as e:
        read_cortex(one_op_graph(func, text))
    assert e.value.code == "malformed.attr"


@pytest.mark.parametrize("value", [0, 1, "false", None])
def test_a_native_is_sign_that_is_not_a_bool_is_refused(value):
    assert native_code("cvm_clip", SHIFT_OPS["cvm_clip"], "is_sign", value) == "malformed.native"
