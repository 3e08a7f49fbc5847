"""A model mixing CVM ops and max_pool: conv2d -> relu -> max_pool, its values and its indices as heads."""

from __future__ import annotations

import json

import numpy as np
import pytest

import cvmvm
from isa.attrs import parse_attrs
from isa.table import OP_BY_NAME
from isa.types import TensorType
from serializer import cortex, native
from serializer.model import Input, Instr, Model, Param
from cvmvm.vm.api import Model as VmModel
from cvmvm.vm.verify import verify

MAXPOOL_ATTRS = {"kernel_shape": "(2, 2)", "strides": "(2, 2)", "dilations": "(1, 1)", "pads": "(0, 0, 0, 0)",
                 "auto_pad": "NOTSET", "ceil_mode": "0", "storage_order": "0", "index_axis": "0",
                 "index_dtype": "int64"}


def graph(index_dtype: str = "int64") -> dict:
    attrs = dict(MAXPOOL_ATTRS, index_dtype=index_dtype)
    conv = {"channels": "2", "kernel_size": "(3, 3)", "padding": "(1, 1)", "use_bias": "False"}

    def node(name, func, inputs):
        return {"op": "cvm_op", "name": name, "inputs": [[i, 0, 0] for i in inputs],
                "attrs": {"flatten_data": "0", "func_name": func, "num_inputs": str(len(inputs)), "num_outputs": "1"}}

    nodes = [{"op": "null", "name": "data", "inputs": []}, {"op": "null", "name": "w", "inputs": []},
             node("conv", "conv2d", [0, 1]), node("relu", "relu", [2])]
    pool = node("pool", "max_pool", [3])
    pool["attrs"]["num_outputs"] = "2"
    nodes.append(pool)
    return {
        "nodes": nodes, "arg_nodes": [0, 1], "node_row_ptr": [0, 1, 2, 3, 4, 6],
        "heads": [[4, 0, 0], [4, 1, 0]],
        "attrs": {
            "op_attrs": ["list_str", ['{"precision": "8", "shape": "(1, 1, 6, 6)"}', "{}", json.dumps(conv), "{}",
                                      json.dumps(attrs)]],
            "dltype": ["list_str", ["int32"] * 5 + [index_dtype]],
            "precision": ["list_int", [8, 8, -1, -1, -1, -1]],
            "storage_id": ["list_int", [0, 1, 2, 3, 4, 5]],
            "shape": ["list_shape", [[1, 1, 6, 6], [2, 1, 3, 3], [1, 2, 6, 6], [1, 2, 6, 6], [1, 2, 3, 3],
                                     [1, 2, 3, 3]]],
        },
        "version": "cvm_1.0.0",
    }


WEIGHT = np.array([[[[1, 0, -1], [2, 0, -2], [1, 0, -1]]], [[[0, 1, 0], [1, -4, 1], [0, 1, 0]]]], dtype=np.int32)
DATA = ((np.arange(36, dtype=np.int64) * 37) % 255 - 127).reshape(1, 1, 6, 6).astype(np.int32)


def params_blob() -> bytes:
    """The params file holding w, written by the serializer's own canonical writer."""
    model = Model((), (Param("w", TensorType((2, 1, 3, 3), 8), WEIGHT),), (), (0,))
    _, blob = cortex.write_cortex(model)
    return blob


def expected() -> tuple[np.ndarray, np.ndarray]:
    """conv (pad 1) -> relu -> 2x2/2 max pool with whole-tensor flat indices, by loops."""
    x = np.pad(DATA[0, 0].astype(np.int64), 1)
    conv = np.zeros((2, 6, 6), dtype=np.int64)
    for o in range(2):
        for i in range(6):
            for j in range(6):
                conv[o, i, j] = int((x[i:i + 3, j:j + 3] * WEIGHT[o, 0]).sum())
    relu = np.maximum(conv, 0)
    y = np.zeros((1, 2, 3, 3), dtype=np.int64)
    idx = np.zeros((1, 2, 3, 3), dtype=np.int64)
    for o in range(2):
        for i in range(3):
            for j in range(3):
                best = None
                for di in range(2):
                    for dj in range(2):
                        r, c = 2 * i + di, 2 * j + dj
                        if best is None or relu[o, r, c] > best[0]:
                            best = (relu[o, r, c], (o * 6 + r) * 6 + c)
                y[0, o, i, j], idx[0, o, i, j] = best
    return y, idx


def test_cortex_model_with_max_pool_runs_end_to_end():
    model = cvmvm.load_cortex(graph(), params_blob())
    assert [t.dtype for t in model.output_types] == ["int32", "int64"]
    result = model.run({"data": DATA}, trace=True)
    y, idx = expected()
    assert result.outputs[0].dtype == np.int32 and np.array_equal(result.outputs[0], y)
    assert result.outputs[1].dtype == np.int64 and np.array_equal(result.outputs[1], idx)
    assert model.output_types[0].precision == model.program.types[3].precision


def test_native_round_trip_gives_the_same_hashes():
    model = cvmvm.load_cortex(graph(), params_blob())
    again = cvmvm.load(model.canonical_bytes)
    a, b = model.run({"data": DATA}, trace=True), again.run({"data": DATA}, trace=True)
    assert a.output_hash == b.output_hash and a.trace.root == b.trace.root
    g, blob = cortex.write_cortex(again.program.model, again.program.types)
    back = cvmvm.load_cortex(g, blob)
    assert back.model_hash == model.model_hash


def test_int32_indices():
    model = cvmvm.load_cortex(graph("int32"), params_blob())
    out = model.run({"data": DATA}).outputs[1]
    assert out.dtype == np.int32 and np.array_equal(out, expected()[1])


def test_declared_index_dtype_must_match():
    g = graph("int64")
    g["attrs"]["dltype"][1][5] = "int32"
    with pytest.raises(cvmvm.CvmError) as e:
        cvmvm.load_cortex(g, params_blob())
    assert e.value.code == "invalid.dtype"


def _record(name, **attrs):
    return parse_attrs(OP_BY_NAME[name].attrs, attrs, fill_defaults=True)


def pool_record(**over):
    attrs = dict(kernel_shape=(2, 2), strides=(2, 2), dilations=(1, 1), pads=(0, 0, 0, 0), auto_pad="NOTSET",
                 ceil_mode=0, storage_order=0, index_axis=0, index_dtype="int64")
    attrs.update(over)
    return parse_attrs(OP_BY_NAME["max_pool"].attrs, attrs, fill_defaults=False)


def test_indices_cannot_feed_arithmetic():
    model = Model((Input("x", TensorType((1, 1, 4, 4), 8)),), (),
                  (Instr("max_pool", pool_record(), (0,), (1, 2)), Instr("relu", _record("relu"), (2,), (3,))), (3,))
    with pytest.raises(cvmvm.CvmError) as e:
        verify(model)
    assert e.value.code == "invalid.dtype"


def test_float_input_native_model():
    model = Model((Input("x", TensorType((1, 1, 2, 2), None, "float32")),), (),
                  (Instr("max_pool", pool_record(), (0,), (1, 2)),), (1, 2))
    vm = VmModel(verify(model))
    x = np.array([[[[np.nan, -0.0], [0.0, -np.inf]]]], dtype=np.float32)
    y, idx = vm.run({"x": x}).outputs
    assert np.signbit(y[0, 0, 0, 0]) and y[0, 0, 0, 0] == 0 and idx.item() == 1  # -0.0 first, +0.0 ties
    assert cvmvm.load(native.encode(model)).run({"x": x}).output_hash == vm.run({"x": x}).output_hash
    with pytest.raises(cvmvm.CvmError) as e:
        vm.run({"x": x.astype(np.float64)})
    assert e.value.code == "input.dtype"
