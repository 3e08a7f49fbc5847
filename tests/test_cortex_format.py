# Over 400 lines: a test file, one case per rule.
"""The Cortex format reader and writer (serializer/cortex/); attribute literals: tests/test_attr_text.py.

Graphs and params blobs are built here by hand (not by the writer), so every
reader rule is tested against bytes and objects the implementation did not
produce; the reference cases and models then pin the round trip.
"""

from __future__ import annotations

import copy
import dataclasses
import gzip
import json
import struct
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cvmvm
from isa.attrs import parse_attrs
from isa.errors import CvmError
from isa.table import OP_BY_NAME, OPS
from isa.types import DTYPES, INT32, TensorType
from serializer import cortex, limits
from serializer.cortex import CortexLayout, graph_to_json_bytes, op_name, read_cortex, write_cortex
from serializer.cortex import read as cortex_read
from serializer.model import Input, Instr, Model, Param
from tests.reference import FIXTURES, case_params, cvm_cases

PARAMS_MAGIC = 0xF7E58D4F05049CB7
ARRAY_MAGIC = 0xDD5E40F096B4A13F


# -- hand-built graphs and params --------------------------------------------

def var(name):
    return {"op": "null", "name": name, "inputs": []}


def op(name, func, inputs, num_outputs=1):
    return {"op": "cvm_op", "name": name,
            "attrs": {"flatten_data": "0", "func_name": func, "num_inputs": str(len(inputs)),
                      "num_outputs": str(num_outputs)},
            "inputs": [[nid, idx, 0] for nid, idx in inputs]}


def graph(nodes, shapes, precision, op_attrs, heads, *, outputs=None, storage=None, version="cvm_1.0.0"):
    """A graph dict as the Cortex tools write it; ``outputs`` gives the entries per node (default 1)."""
    outputs = outputs or [1] * len(nodes)
    row_ptr = [0]
    for n in outputs:
        row_ptr.append(row_ptr[-1] + n)
    return {
        "nodes": nodes,
        "arg_nodes": [i for i, n in enumerate(nodes) if n["op"] == "null"],
        "node_row_ptr": row_ptr,
        "heads": [[nid, idx, 0] for nid, idx in heads],
        "attrs": {
            "op_attrs": ["list_str", op_attrs],
            "dltype": ["list_str", ["int32"] * row_ptr[-1]],
            "precision": ["list_int", precision],
            "storage_id": ["list_int", storage if storage is not None else list(range(row_ptr[-1]))],
            "shape": ["list_shape", shapes],
        },
        "version": version,
    }


def var_attrs(precision, shape):
    return json.dumps({"precision": str(precision), "shape": str(tuple(shape))})


def relu_graph(shape=(2, 3), precision=8):
    """data -> relu."""
    return graph([var("data"), op("relu_0", "relu", [(0, 0)])], [list(shape), list(shape)], [precision, -1],
                 [var_attrs(precision, shape), "{}"], [(1, 0)])


def unary_graph(func, attrs="{}", storage=None):
    return graph([var("data"), op(f"{func}_0", func, [(0, 0)])], [[2, 3], [2, 3]], [8, -1],
                 [var_attrs(8, (2, 3)), attrs], [(1, 0)], storage=storage)


def add_graph(func="broadcast_add", storage=None):
    """data (3,) p8 + y (3,) p8; y comes from params."""
    return graph([var("data"), var("y"), op(f"{func}_0", func, [(0, 0), (1, 0)])], [[3], [3], [3]],
                 [8, 8, -1], [var_attrs(8, (3,)), var_attrs(8, (3,)), "{}"], [(2, 0)], storage=storage)


def blob_fields(arrays, *, names=None):
    """Labelled fields of a params blob: [(label, bytes)], arrays = [(name, values, bits)]."""
    names = [a[0] for a in arrays] if names is None else names
    fields = [("magic", struct.pack("<Q", PARAMS_MAGIC)), ("reserved", struct.pack("<Q", 0)),
              ("count", struct.pack("<Q", len(names)))]
    for k, name in enumerate(names):
        encoded = name.encode("utf-8") if isinstance(name, str) else name
        fields += [(f"name{k}.len", struct.pack("<Q", len(encoded))), (f"name{k}", encoded)]
    fields.append(("arrays", struct.pack("<Q", len(arrays))))
    for k, (_, values, bits) in enumerate(arrays):
        values = np.asarray(values)
        data = values.astype("i1" if bits == 8 else "<i4").tobytes()
        fields += [(f"a{k}.magic", struct.pack("<Q", ARRAY_MAGIC)), (f"a{k}.reserved", struct.pack("<Q", 0)),
                   (f"a{k}.device", struct.pack("<i", 1)), (f"a{k}.device_id", struct.pack("<i", 0)),
                   (f"a{k}.ndim", struct.pack("<i", values.ndim)), (f"a{k}.code", struct.pack("<B", 0)),
                   (f"a{k}.bits", struct.pack("<B", bits)), (f"a{k}.lanes", struct.pack("<H", 1)),
                   (f"a{k}.shape", struct.pack(f"<{values.ndim}q", *values.shape)),
                   (f"a{k}.nbytes", struct.pack("<q", len(data))), (f"a{k}.data", data)]
    return fields


def blob(arrays, *, patch=None, names=None):
    patch = patch or {}
    return b"".join(patch.get(label, data) for label, data in blob_fields(arrays, names=names))


Y8 = [("y", np.array([1, -2, 127], dtype=np.int32), 8)]


def code_of(graph_, params=None):
    """The code reading ``graph_`` fails with; a dict is read as JSON text too (a piece at a time),
    with the same outcome."""
    with pytest.raises(CvmError) as e:
        read_cortex(graph_, params)
    if isinstance(graph_, dict):
        text = json.dumps(graph_)
        for walk in (cortex_read._WALK_CHARS, 0):   # and every array and object walked, none parsed whole
            with pytest.raises(CvmError) as t, mock.patch.object(cortex_read, "_WALK_CHARS", walk):
                read_cortex(text.encode(), params)
            assert t.value.code == e.value.code
            if json.loads(text) == graph_:   # no tuple, which JSON spells as a list
                assert t.value.message == e.value.message
    return e.value.code


# -- a small valid model, read ---------------------------------------------

def test_reads_a_model_with_interleaved_variables():
    # y (param), data (input), add, w (param), mul: tensor ids are inputs, params, then outputs.
    g = graph([var("y"), var("data"), op("add", "broadcast_add", [(1, 0), (0, 0)]), var("w"),
               op("mul_3", "broadcast_mul", [(2, 0), (3, 0)])],
              [[3], [3], [3], [1], [3]], [4, 8, -1, 5, 12],
              [var_attrs(4, (3,)), var_attrs(8, (3,)), "{}", "{}", "{}"], [(4, 0), (1, 0)])
    p = blob([("w", np.array([-15]), 32), ("y", np.array([7, 0, -7]), 8)])
    m = read_cortex(g, p)
    assert m.inputs == (Input("data", TensorType((3,), 8)),)
    assert [(q.name, q.type) for q in m.params] == [("y", TensorType((3,), 4)), ("w", TensorType((1,), 5))]
    assert m.instrs == (
        Instr("broadcast_add", parse_attrs(OP_BY_NAME["broadcast_add"].attrs, {}, fill_defaults=True),
              (0, 1), (3,), "add", ((3,),), ("int32",)),
        Instr("broadcast_mul", parse_attrs(OP_BY_NAME["broadcast_mul"].attrs, {}, fill_defaults=True),
              (3, 2), (4,), "mul_3", ((3,),), ("int32",)),
    )
    assert m.outputs == (4, 0)
    y, w = m.params
    assert y.value.dtype == np.int32 and y.value.tolist() == [7, 0, -7]   # int8, sign-extended
    assert w.value.dtype == np.int32 and w.value.tolist() == [-15]
    assert not y.value.flags.writeable and not w.value.flags.writeable
    assert isinstance(m.source, CortexLayout)
    assert write_cortex(m) == (g, p)


def test_reads_typed_attributes_with_defaults():
    g = graph([var("data"), var("w"), var("b"), op("conv", "conv2d", [(0, 0), (1, 0), (2, 0)])],
              [[1, 3, 8, 8], [4, 3, 3, 3], [4], [1, 4, 8, 8]], [8, 8, 16, -1],
              ["{}", "{}", "{}", json.dumps({"channels": "4", "kernel_size": "[3, 3]", "padding": "(1, 1)",
                                                "use_bias": "TRUE"})], [(3, 0)])
    p = blob([("w", np.zeros((4, 3, 3, 3)), 8), ("b", np.arange(4), 32)])
    record = read_cortex(g, p).instrs[0].attrs
    assert record == parse_attrs(OP_BY_NAME["conv2d"].attrs, {"channels": 4, "kernel_size": (3, 3),
                                                               "padding": (1, 1), "use_bias": True},
                                 fill_defaults=True)
    assert record.strides == (1, 1) and record.groups == 1 and record.layout == "NCHW"


def test_multi_output_op_entries_and_heads():
    g = graph([var("data"), op("gvc", "get_valid_counts", [(0, 0)], 2), op("r", "relu", [(1, 1)])],
              [[1, 3, 6], [1], [1, 3, 6], [1, 3, 6]], [8, -1, -1, -1],
              ["{}", json.dumps({"score_threshold": "3"}), "{}"], [(1, 0), (2, 0), (1, 1)],
              outputs=[1, 2, 1])
    m = read_cortex(g)
    assert [i.outputs for i in m.instrs] == [(1, 2), (3,)]
    assert m.instrs[1].inputs == (2,)
    assert m.instrs[0].declared_shapes == ((1,), (1, 3, 6))
    assert m.outputs == (1, 3, 2)
    assert write_cortex(m) == (g, None)


def test_reads_every_source_kind(tmp_path):
    g, p = add_graph(), blob(Y8)
    text = json.dumps(g)
    (tmp_path / "g.json").write_text(text)
    (tmp_path / "p.bin").write_bytes(p)
    expected = read_cortex(g, p)
    for graph_src in (text, "  \n" + text, text.encode(), bytearray(text.encode())):
        for params_src in (p, memoryview(p)):
            assert read_cortex(graph_src, params_src) == expected
    # Paths are read by cvmvm.load_cortex (bounded file reads live above the serializer).
    want = cvmvm.load_cortex(g, p).model_hash
    for graph_src in (text, tmp_path / "g.json", str(tmp_path / "g.json")):
        for params_src in (p, tmp_path / "p.bin", str(tmp_path / "p.bin")):
            assert cvmvm.load_cortex(graph_src, params_src).model_hash == want
    for graph_src, params_src in ((tmp_path / "missing.json", None), (g, tmp_path / "missing.bin")):
        with pytest.raises(CvmError) as e:
            cvmvm.load_cortex(graph_src, params_src)
        assert e.value.code == "io.not_found"
    for bad in (42, tmp_path / "g.json"):
        assert code_of(bad) == "usage.argument"


def test_byte_limits(monkeypatch, tmp_path):
    g, p = add_graph(), blob(Y8)
    text = json.dumps(g)
    (tmp_path / "g.json").write_text(text)
    (tmp_path / "p.bin").write_bytes(p)

    def code(graph_src, params_src):
        with pytest.raises(CvmError) as e:
            cvmvm.load_cortex(graph_src, params_src)
        return e.value.code

    monkeypatch.setattr(limits, "MAX_GRAPH_JSON_BYTES", len(text.encode()) - 1)
    for src in (text, text.encode(), tmp_path / "g.json"):
        assert code(src, p) == "limit.bytes"
    monkeypatch.setattr(limits, "MAX_GRAPH_JSON_BYTES", len(text.encode()))
    monkeypatch.setattr(limits, "MAX_PARAMS_BYTES", len(p) - 1)
    for src in (p, tmp_path / "p.bin"):
        assert code(text, src) == "limit.bytes"
    monkeypatch.setattr(limits, "MAX_PARAMS_BYTES", len(p))
    cvmvm.load_cortex(text, tmp_path / "p.bin")


# -- JSON syntax (malformed.graph_json) ---------------------------------------

@pytest.mark.parametrize("text", [
    b"", b"{", b"[]", b"null", b"{\"nodes\": []} trailing", b"\xff\xfe{}", b"\xef\xbb\xbf{}",
])
def test_rejects_text_that_is_not_a_graph_object(text):
    assert code_of(text) == "malformed.graph_json"


def test_rejects_json_the_runtime_cannot_read():
    text = json.dumps(relu_graph())
    assert code_of(text.replace('"version"', '"version": "cvm_1.0.0", "version"', 1)) == "malformed.graph_json"
    assert code_of(text.replace('"relu_0"', '"relu\\u005f0"')) == "malformed.graph_json"   # \u: unknown to it
    assert code_of(text.replace('"relu_0"', '"relu\\/0"')) == "malformed.graph_json"
    assert code_of(text.replace('"relu_0"', '"relu\\b0"')) == "malformed.graph_json"
    assert code_of(text.replace("[1, 0, 0]]", "[1, 0, NaN]]")) == "malformed.graph_json"
    assert code_of(text.replace('"relu_0"', '"relu\x010"')) == "malformed.graph_json"   # raw control character
    # The escapes it knows are fine, in names and in op_attrs strings.
    m = read_cortex(text.replace('"relu_0"', '"r\\t\\"e\\\\l\\nu"'))
    assert m.instrs[0].name == 'r\t"e\\l\nu'


# -- key sets and JSON types --------------------------------------------------

def _drop(path):
    def mutate(g):
        *parents, key = path
        obj = g
        for p in parents:
            obj = obj[p]
        del obj[key]
    return mutate


def _add(path, value="x"):
    def mutate(g):
        obj = g
        for p in path:
            obj = obj[p]
        obj["extra"] = value
    return mutate


def _set(path, value):
    def mutate(g):
        *parents, key = path
        obj = g
        for p in parents:
            obj = obj[p]
        obj[key] = value
    return mutate


KEY_MUTATIONS = {
    **{f"top-missing-{k}": _drop([k]) for k in cortex.TOP_KEYS},
    **{f"variable-missing-{k}": _drop(["nodes", 0, k]) for k in cortex.VARIABLE_KEYS},
    **{f"operator-missing-{k}": _drop(["nodes", 1, k]) for k in cortex.OPERATOR_KEYS if k != "op"},
    **{f"node-attrs-missing-{k}": _drop(["nodes", 1, "attrs", k]) for k in cortex.NODE_ATTR_KEYS},
    **{f"graph-attrs-missing-{k}": _drop(["attrs", k])
       for k in ("shape", "precision", "op_attrs", "storage_id", "dltype")},
    "top-unknown": _add([]),
    "top-postprocess": _set(["postprocess"], "detection"),     # the runtime reads it; the format here does not
    "variable-unknown": _add(["nodes", 0]),
    "variable-with-attrs": _set(["nodes", 0, "attrs"], {"func_name": "relu"}),
    "operator-unknown": _add(["nodes", 1]),
    "operator-precision": _set(["nodes", 1, "precision"], 8),
    "node-attrs-unknown": _add(["nodes", 1, "attrs"]),
    "node-attrs-op_attrs": _set(["nodes", 1, "attrs", "op_attrs"], "{}"),
    "graph-attrs-unknown": _set(["attrs", "layout"], ["list_str", ["NCHW", "NCHW"]]),
}


@pytest.mark.parametrize("name", sorted(KEY_MUTATIONS))
def test_rejects_missing_and_unknown_keys(name):
    g = relu_graph()
    KEY_MUTATIONS[name](g)
    assert code_of(g) == "malformed.graph_json"


TYPE_MUTATIONS = {
    "top-not-object": lambda g: g.clear() or g.update({"x": 1}),
    "nodes-not-list": _set(["nodes"], {"0": var("data")}),
    "node-not-object": _set(["nodes", 0], ["null", "data"]),
    "op-kind": _set(["nodes", 1, "op"], "tvm_op"),
    "op-kind-not-str": _set(["nodes", 1, "op"], None),
    "name-int": _set(["nodes", 0, "name"], 7),
    "inputs-not-list": _set(["nodes", 1, "inputs"], (0, 0, 0)),
    "entry-two-items": _set(["nodes", 1, "inputs"], [[0, 0]]),
    "entry-four-items": _set(["nodes", 1, "inputs"], [[0, 0, 0, 0]]),
    "entry-bool": _set(["nodes", 1, "inputs"], [[0, False, 0]]),
    "entry-float": _set(["nodes", 1, "inputs"], [[0.0, 0, 0]]),
    "entry-str": _set(["nodes", 1, "inputs"], [["0", 0, 0]]),
    "head-bool": _set(["heads"], [[True, 0, 0]]),
    "node-attrs-int": _set(["nodes", 1, "attrs", "num_inputs"], 1),
    "func-name-list": _set(["nodes", 1, "attrs", "func_name"], ["relu"]),
    "arg-nodes-bool": _set(["arg_nodes"], [False]),
    "arg-nodes-negative": _set(["arg_nodes"], [-1]),
    "row-ptr-huge": _set(["node_row_ptr"], [0, 1, 1 << 32]),
    "row-ptr-not-list": _set(["node_row_ptr"], 2),
    "version-int": _set(["version"], 100),
    "attrs-not-object": _set(["attrs"], []),
    "attr-not-pair": _set(["attrs", "precision"], [8, -1]),
    "attr-three-items": _set(["attrs", "precision"], ["list_int", [8, -1], []]),
    "shape-tag": _set(["attrs", "shape"], ["list_int", [[2, 3], [2, 3]]]),
    "precision-tag": _set(["attrs", "precision"], ["list_str", [8, -1]]),
    "op-attrs-tag": _set(["attrs", "op_attrs"], ["list_int", ["{}", "{}"]]),
    "dltype-tag": _set(["attrs", "dltype"], ["str", ["int32", "int32"]]),
    "storage-tag": _set(["attrs", "storage_id"], ["list_shape", [0, 1]]),
    "shape-float-dim": _set(["attrs", "shape"], ["list_shape", [[2, 3.0], [2, 3]]]),
    "shape-bool-dim": _set(["attrs", "shape"], ["list_shape", [[2, True], [2, 3]]]),
    "shape-not-list": _set(["attrs", "shape"], ["list_shape", [6, [2, 3]]]),
    "precision-bool": _set(["attrs", "precision"], ["list_int", [True, -1]]),
    "precision-str": _set(["attrs", "precision"], ["list_int", ["8", -1]]),
    "storage-float": _set(["attrs", "storage_id"], ["list_int", [0, 1.0]]),
    "dltype-int": _set(["attrs", "dltype"], ["list_str", [32, "int32"]]),
    "op-attrs-dict": _set(["attrs", "op_attrs"], ["list_str", [{}, "{}"]]),
    "device-index-tag": _set(["attrs", "device_index"], ["list_str", []]),
    "dtype-tag": _set(["attrs", "dtype"], ["list_str", [4, 4]]),
    "dtype-str": _set(["attrs", "dtype"], ["list_int", ["int32"]]),
}


@pytest.mark.parametrize("name", sorted(TYPE_MUTATIONS))
def test_rejects_wrong_json_types(name):
    g = relu_graph()
    TYPE_MUTATIONS[name](g)
    assert code_of(g) == "malformed.graph_json"


@pytest.mark.parametrize("version", ["cvm_2.0.0", "cvm_1.0", "", "CVM_1.0.0"])
def test_rejects_unknown_versions(version):
    g = relu_graph()
    g["version"] = version
    assert code_of(g) == "malformed.graph_json"


# -- versions: what 1.0.0 checks and 1.1.0 recomputes --------------------------

def test_version_1_0_0_checks_row_ptr_and_arg_nodes():
    for key, value in (("node_row_ptr", [0, 1, 3]), ("node_row_ptr", [0, 1]), ("arg_nodes", [0, 1]),
                       ("arg_nodes", []), ("arg_nodes", [1])):
        g = relu_graph()
        g[key] = value
        assert code_of(g) == "invalid.graph", (key, value)
        g["version"] = "cvm_1.1.0"
        assert write_cortex(read_cortex(g)) == (g, None)   # recomputed, not checked; kept as given


def test_dltype_optional_in_1_1_0_only():
    g = relu_graph()
    del g["attrs"]["dltype"]
    assert code_of(g) == "malformed.graph_json"
    g["version"] = "cvm_1.1.0"
    assert write_cortex(read_cortex(g)) == (g, None)


@pytest.mark.parametrize("version", ["cvm_1.0.0", "cvm_1.1.0"])
def test_dltype_must_be_a_vm_dtype(version):
    g = relu_graph()
    g["version"] = version
    for bad in ("float128", "int16", "uint32", "INT32", "", "bool"):
        g["attrs"]["dltype"][1] = ["int32", bad]
        assert code_of(g) == "invalid.dtype", bad


def test_dltype_of_an_operator_entry_is_declared_and_checked_at_verification():
    from cvmvm.vm.verify import verify
    g = relu_graph()
    g["attrs"]["dltype"][1] = ["int32", "float32"]
    model = read_cortex(g)
    assert model.instrs[0].declared_dtypes == ("float32",)
    with pytest.raises(CvmError) as e:
        verify(model)
    assert e.value.code == "invalid.dtype"


def test_a_non_int32_variable_has_no_precision():
    g = relu_graph()
    g["attrs"]["dltype"][1] = ["float32", "int32"]
    g["attrs"]["op_attrs"][1][0] = "{}"
    assert code_of(g) == "invalid.precision"  # declared precision 8 for a float32 variable
    g["attrs"]["precision"][1][0] = -1
    assert read_cortex(g).inputs[0].type == TensorType(tuple(g["attrs"]["shape"][1][0]), None, "float32")


def test_device_index_must_be_empty_and_dtype_is_kept():
    g = relu_graph()
    g["attrs"]["device_index"] = ["list_int", [1, 1]]
    assert code_of(g) == "invalid.graph"
    g["attrs"]["device_index"] = ["list_int", []]
    g["attrs"]["dtype"] = ["list_int", [4, 4]]
    assert write_cortex(read_cortex(g)) == (g, None)


# -- topology, names, counts (invalid.graph) ---------------------------------

def _two_relus():
    return graph([var("data"), op("r0", "relu", [(0, 0)]), op("r1", "relu", [(1, 0)])],
                 [[2], [2], [2]], [8, -1, -1], ["{}", "{}", "{}"], [(2, 0)])


GRAPH_MUTATIONS = {
    "forward-reference": _set(["nodes", 1, "inputs"], [[2, 0, 0]]),
    "self-reference": _set(["nodes", 1, "inputs"], [[1, 0, 0]]),
    "out-of-range-node": _set(["nodes", 2, "inputs"], [[9, 0, 0]]),
    "output-index-too-big": _set(["nodes", 2, "inputs"], [[1, 1, 0]]),
    "variable-output-index": _set(["nodes", 1, "inputs"], [[0, 1, 0]]),
    "negative-node": _set(["nodes", 1, "inputs"], [[-1, 0, 0]]),
    "entry-version": _set(["nodes", 1, "inputs"], [[0, 0, 1]]),
    "variable-with-inputs": _set(["nodes", 0, "inputs"], [[0, 0, 0]]),
    "no-heads": _set(["heads"], []),
    "head-out-of-range": _set(["heads"], [[3, 0, 0]]),
    "head-output-index": _set(["heads"], [[2, 1, 0]]),
    "head-version": _set(["heads"], [[2, 0, 5]]),
    "shape-count": _set(["attrs", "shape"], ["list_shape", [[2], [2]]]),
    "precision-count": _set(["attrs", "precision"], ["list_int", [8, -1, -1, -1]]),
    "storage-count": _set(["attrs", "storage_id"], ["list_int", [0, 1]]),
    "dltype-count": _set(["attrs", "dltype"], ["list_str", ["int32"]]),
    "op-attrs-count": _set(["attrs", "op_attrs"], ["list_str", ["{}", "{}"]]),
    "storage-negative": _set(["attrs", "storage_id"], ["list_int", [0, -1, 2]]),
    "storage-huge": _set(["attrs", "storage_id"], ["list_int", [0, 1, 1 << 31]]),
}


@pytest.mark.parametrize("name", sorted(GRAPH_MUTATIONS))
def test_rejects_graph_rule_violations(name):
    g = _two_relus()
    GRAPH_MUTATIONS[name](g)
    assert code_of(g) == "invalid.graph"


def test_rejects_duplicate_variable_names_only():
    g = add_graph()
    g["nodes"][1]["name"] = "data"
    assert code_of(g, blob([("data", np.zeros(3), 8)])) == "invalid.graph"
    # Operator names may repeat, and may equal a variable's (the runtime checks variables only).
    g = _two_relus()
    g["nodes"][1]["name"] = g["nodes"][2]["name"] = "data"
    assert [i.name for i in read_cortex(g).instrs] == ["data", "data"]


# -- storage reuse --------------------------------------------------------------

@pytest.mark.parametrize("func", ["relu", "abs", "cvm_precision", "flatten"])
def test_whitelisted_unary_ops_may_reuse_input_storage(func):
    read_cortex(unary_graph(func, storage=[3, 3]))


@pytest.mark.parametrize("func", ["negative", "transpose", "sum"])
def test_other_unary_ops_may_not_reuse_input_storage(func):
    # negative is spelled "nagetive" in the runtime's whitelist, so it is not whitelisted.
    assert code_of(unary_graph(func, storage=[3, 3])) == "invalid.graph"


@pytest.mark.parametrize("func, ok", [("elemwise_add", True), ("elemwise_sub", True), ("broadcast_add", False),
                                      ("broadcast_mul", False)])
def test_binary_storage_reuse(func, ok):
    for storage in ([0, 1, 1], [0, 1, 0]):
        g = add_graph(func, storage=storage)
        if ok:
            read_cortex(g, blob(Y8))
        else:
            assert code_of(g, blob(Y8)) == "invalid.graph"
    read_cortex(add_graph(func, storage=[4, 5, 6]), blob(Y8))   # distinct ids are always fine
    read_cortex(add_graph(func, storage=[0, 0, 1]), blob(Y8))   # two inputs sharing is the planner's business


def test_storage_reuse_checks_every_output():
    g = graph([var("data"), op("gvc", "get_valid_counts", [(0, 0)], 2)], [[1, 3, 6], [1], [1, 3, 6]],
              [8, -1, -1], ["{}", "{}"], [(1, 0)], outputs=[1, 2], storage=[0, 1, 0])
    assert code_of(g) == "invalid.graph"
    g["attrs"]["storage_id"][1] = [0, 1, 1]   # its two outputs may share with each other
    read_cortex(g)


# -- shapes (limit.*) and precisions --------------------------------------------

@pytest.mark.parametrize("shape, code", [
    ([], "limit.rank"), ([1] * 7, "limit.rank"), ([2, 0], "limit.dim"), ([2, -3], "limit.dim"),
    ([(1 << 24) + 1], "limit.dim"), ([1 << 24, 64, 2], "limit.size"), ([1 << 10, 1 << 10, 1 << 10, 2], "limit.size"),
])
def test_rejects_shapes_outside_the_limits(shape, code):
    for entry in (0, 1):
        g = relu_graph()
        g["attrs"]["op_attrs"][1][0] = "{}"
        g["attrs"]["shape"][1][entry] = shape
        assert code_of(g) == code


def test_accepts_shapes_at_the_limits():
    for shape in ([1] * 6, [1 << 24], [1 << 24, 64], [1 << 10, 1 << 10, 1 << 10]):
        g = relu_graph()
        g["attrs"]["op_attrs"][1][0] = "{}"
        g["attrs"]["shape"][1] = [shape, shape]
        assert read_cortex(g).inputs[0].type.shape == tuple(shape)


@pytest.mark.parametrize("declared", [-1, 0, 33, -2])
def test_variable_precision_must_be_in_1_32(declared):
    g = relu_graph()
    g["attrs"]["op_attrs"][1][0] = "{}"
    g["attrs"]["precision"][1][0] = declared
    assert code_of(g) == "invalid.precision"


@pytest.mark.parametrize("declared, ok", [(-1, True), (1, True), (5, True), (32, True), (0, False), (33, False),
                                          (-2, False)])
def test_operator_precision_is_minus_one_or_in_1_32(declared, ok):
    g = relu_graph()
    g["attrs"]["precision"][1][1] = declared
    if ok:
        m = read_cortex(g)
        assert write_cortex(m) == (g, None)   # informational, but kept as declared
    else:
        assert code_of(g) == "invalid.precision"


# -- op names ----------------------------------------------------------------

def test_op_name_strips_one_digit_suffix():
    assert op_name("relu_17") == "relu"
    assert op_name("relu_") == "relu"          # the runtime strips an underscore followed by no digit too
    assert op_name("cvm_right_shift_3") == "cvm_right_shift"
    assert op_name("a_1_2") == "a_1"
    assert op_name("relu17") == "relu17"
    assert op_name("relu_x") == "relu_x"
    assert op_name("_17") == ""
    assert op_name("17") == "17"


def test_no_isa_op_name_is_mangled_by_the_suffix_rule():
    for o in OPS:
        assert op_name(o.name) == o.name


@pytest.mark.parametrize("func, ok", [("relu_17", True), ("relu_", True), ("relu_0_1", False), ("relu17", False),
                                      ("_17", False), ("softmax", False), ("pad_3", False), ("Relu", False),
                                      ("nagetive", False), ("", False)])
def test_func_names(func, ok):
    g = relu_graph()
    g["nodes"][1]["attrs"]["func_name"] = func
    if ok:
        m = read_cortex(g)
        assert m.instrs[0].op == "relu"
        assert write_cortex(m) == (g, None)   # the suffix is kept
    else:
        assert code_of(g) == "invalid.op"


def test_num_inputs_and_outputs_are_not_trusted():
    g = relu_graph()
    g["nodes"][1]["attrs"].update(num_inputs="7", num_outputs="three", flatten_data="yes")
    m = read_cortex(g)
    assert m.instrs[0].outputs == (1,)
    assert write_cortex(m) == (g, None)


# -- op_attrs ----------------------------------------------------------------

@pytest.mark.parametrize("text", ["", "{", "[]", '"x"', "{precision: 8}", '{"a": "1"} x', "NaN",
                                  '{"precision": 8}', '{"precision": ["8"]}', '{"precision": null}',
                                  '{"precision": "8", "precision": "8"}', '{"precision": "\\u0038"}',
                                  '{"precision": "8"', '{"shift_bit": true}'])
def test_rejects_op_attrs_that_are_not_an_object_of_strings(text):
    g = unary_graph("cvm_clip")
    g["attrs"]["op_attrs"][1][1] = text
    assert code_of(g) == "malformed.attr"


@pytest.mark.parametrize("attrs, code", [
    ({"precision": "8", "shift_bit": "3"}, None),
    ({"precision": " 8 ", "shift_bit": "+3"}, None),
    ({"precision": "8"}, "invalid.attr"),                           # shift_bit has no default
    ({"precision": "8", "shift_bit": "3", "foo": "1"}, "invalid.attr"),
    ({"precision": "0", "shift_bit": "3"}, "invalid.attr"),          # the domain is the ISA's
    ({"precision": "8", "shift_bit": "33"}, "invalid.attr"),
    ({"precision": "8.0", "shift_bit": "3"}, "malformed.attr"),
    ({"precision": "8", "shift_bit": "3L"}, "malformed.attr"),
    ({"precision": "eight", "shift_bit": "3"}, "malformed.attr"),
    ({"precision": "2147483648", "shift_bit": "3"}, "malformed.attr"),
    ({"precision": "", "shift_bit": "3"}, "malformed.attr"),
])
def test_operator_attribute_strings(attrs, code):
    g = unary_graph("cvm_right_shift", json.dumps(attrs))
    if code is None:
        assert read_cortex(g).instrs[0].attrs == parse_attrs(OP_BY_NAME["cvm_right_shift"].attrs,
                                                             {"precision": 8, "shift_bit": 3}, fill_defaults=True)
    else:
        assert code_of(g) == code


@pytest.mark.parametrize("func, attrs, code", [
    ("relu", '{"precision": "8"}', "invalid.attr"),                 # an op without attributes takes none
    ("sum", '{"axis": "(0, 1", "keepdims": "True"}', "malformed.attr"),
    ("sum", '{"axis": "(0,)", "keepdims": "maybe"}', "malformed.attr"),
    ("sum", '{"axis": "(0,)", "keepdims": "yes"}', "malformed.attr"),
    ("take", '{"axis": "none"}', "malformed.attr"),
    ("upsampling", '{"scale": "2", "method": "BILINEAR"}', "invalid.attr"),
])
def test_attribute_kinds_in_a_graph(func, attrs, code):
    assert code_of(unary_graph(func, attrs)) == code


def test_variable_op_attrs():
    g = relu_graph()
    for text in ("{}", '{"precision": "8"}', '{"shape": "[2, 3]"}', '{"shape": "(2,3)", "precision": " 8"}'):
        g["attrs"]["op_attrs"][1][0] = text
        assert write_cortex(read_cortex(g)) == (g, None)
    for text, code in (('{"shape": "(2, 4)"}', "invalid.shape"), ('{"shape": "(3, 2)"}', "invalid.shape"),
                       ('{"shape": "(2, 3, 1)"}', "invalid.shape"), ('{"precision": "9"}', "invalid.precision"),
                       ('{"dtype": "int32"}', "invalid.attr"), ('{"shape": "2, 3"}', "malformed.attr"),
                       ('{"precision": "p8"}', "malformed.attr"), ('{"precision": 8}', "malformed.attr"),
                       ("[]", "malformed.attr"), ("{precision: 8}", "malformed.attr")):
        g["attrs"]["op_attrs"][1][0] = text
        assert code_of(g) == code, text


# -- the params binary ---------------------------------------------------------

def test_int8_and_int32_params():
    g = add_graph()
    g["attrs"]["precision"][1][1] = 32
    g["attrs"]["op_attrs"][1][1] = var_attrs(32, (3,))
    for bits, values in ((8, [-127, 0, 127]), (32, [-(1 << 31) + 1, 5, (1 << 31) - 1]), (32, [1, 2, 3])):
        p = blob([("y", np.array(values), bits)])
        m = read_cortex(g, p)
        assert m.params[0].value.tolist() == values
        assert m.params[0].value.dtype == DTYPES[INT32]   # the VM's (native) int32, whatever the file's byte order
        assert write_cortex(m) == (g, p)      # the stored width is kept


def _three_variables():
    return graph([var("data"), var("y"), var("z"), op("add", "broadcast_add", [(0, 0), (1, 0)])],
                 [[3], [3], [2, 2], [3]], [8, 8, 8, -1], ["{}"] * 4, [(3, 0)])


def test_truncated_at_every_byte():
    g = _three_variables()
    p = blob([("z", np.ones((2, 2)), 32), ("y", np.array([1, 2, 3]), 8)])
    read_cortex(g, p)
    for n in range(len(p)):
        assert code_of(g, p[:n]) == "malformed.params", n
    assert code_of(g, p + b"\x00") == "malformed.params"
    assert code_of(g, p + p) == "malformed.params"


def _q(v):
    return struct.pack("<Q", v)


BLOB_PATCHES = {
    "file-magic": {"magic": _q(PARAMS_MAGIC ^ 1)},
    "array-magic-as-file-magic": {"magic": _q(ARRAY_MAGIC)},
    "file-reserved": {"reserved": _q(1)},
    "name-count-huge": {"count": _q(1 << 60)},
    "name-count-max": {"count": _q((1 << 64) - 1)},
    "name-count-too-big": {"count": _q(2)},
    "name-count-zero": {"count": _q(0)},
    "name-length-huge": {"name0.len": _q(1 << 62)},
    "name-length-long": {"name0.len": _q(2)},
    "name-not-utf8": {"name0": b"\xff"},
    "array-count-more": {"arrays": _q(2)},
    "array-count-fewer": {"arrays": _q(0)},
    "array-magic": {"a0.magic": _q(PARAMS_MAGIC)},
    "array-reserved": {"a0.reserved": _q(7)},
    "device-gpu": {"a0.device": struct.pack("<i", 2)},
    "device-id": {"a0.device_id": struct.pack("<i", 1)},
    "ndim-zero": {"a0.ndim": struct.pack("<i", 0), "a0.shape": b""},
    "ndim-seven": {"a0.ndim": struct.pack("<i", 7), "a0.shape": struct.pack("<7q", 1, 1, 1, 1, 1, 1, 3)},
    "ndim-negative": {"a0.ndim": struct.pack("<i", -1)},
    "ndim-huge": {"a0.ndim": struct.pack("<i", (1 << 31) - 1)},
    "type-uint": {"a0.code": struct.pack("<B", 1)},
    "type-float": {"a0.code": struct.pack("<B", 2)},
    "bits-16": {"a0.bits": struct.pack("<B", 16)},
    "bits-64": {"a0.bits": struct.pack("<B", 64)},
    "lanes-2": {"a0.lanes": struct.pack("<H", 2)},
    "lanes-0": {"a0.lanes": struct.pack("<H", 0)},
    "dim-zero": {"a0.shape": struct.pack("<q", 0)},
    "dim-negative": {"a0.shape": struct.pack("<q", -3)},
    "dim-huge": {"a0.shape": struct.pack("<q", 1 << 62), "a0.nbytes": struct.pack("<q", 1 << 62)},
    "nbytes-small": {"a0.nbytes": struct.pack("<q", 2)},
    "nbytes-big": {"a0.nbytes": struct.pack("<q", 4)},
    "nbytes-negative": {"a0.nbytes": struct.pack("<q", -3)},
    "nbytes-as-int32": {"a0.nbytes": struct.pack("<q", 12)},
}


@pytest.mark.parametrize("name", sorted(BLOB_PATCHES))
def test_rejects_malformed_params(name):
    assert code_of(add_graph(), blob(Y8, patch=BLOB_PATCHES[name])) == "malformed.params"


def test_rejects_a_name_given_twice():
    g = add_graph()
    assert code_of(g, blob(Y8 + Y8)) == "malformed.params"


def test_empty_params_file():
    g = relu_graph()
    empty = blob([])
    assert empty == _q(PARAMS_MAGIC) + _q(0) + _q(0) + _q(0)
    assert write_cortex(read_cortex(g, empty)) == (g, empty)
    assert write_cortex(read_cortex(g)) == (g, None)


@pytest.mark.parametrize("arrays, code", [
    ([], "invalid.graph"),                                                     # y missing
    (Y8 + [("zzz", np.zeros(3), 8)], "invalid.graph"),                         # not a variable
    (Y8 + [("broadcast_add_0", np.zeros(3), 8)], "invalid.graph"),             # an operator, not a variable
    ([("y", np.zeros((1, 3)), 8)], "invalid.shape"),
    ([("y", np.zeros((3, 1)), 8)], "invalid.shape"),
    ([("y", np.zeros(4), 8)], "invalid.shape"),
    ([("y", np.array([1, 128, 3]), 32)], "invalid.param"),
    ([("y", np.array([1, -128, 3]), 8)], "invalid.param"),                    # int8 -128 is outside precision 8
    ([("y", np.array([-(1 << 31), 0, 0]), 32)], "invalid.param"),
])
def test_params_against_the_graph(arrays, code):
    assert code_of(add_graph(), blob(arrays)) == code


def test_params_missing_file():
    assert code_of(add_graph()) == "invalid.graph"


@pytest.mark.parametrize("precision", [1, 2, 8, 9, 16, 31, 32])
def test_param_precision_boundaries(precision):
    g = add_graph()
    g["attrs"]["precision"][1][1] = precision
    g["attrs"]["op_attrs"][1][1] = "{}"
    bound = (1 << (precision - 1)) - 1
    bits = 8 if bound <= 127 else 32
    read_cortex(g, blob([("y", np.array([-bound, 0, bound]), bits)]))
    assert code_of(g, blob([("y", np.array([0, bound + 1, 0]), 32)])) == "invalid.param"
    assert code_of(g, blob([("y", np.array([-bound - 1, 0, 0]), 32)])) == "invalid.param"


def test_data_given_through_params_is_clipped_and_kept_raw():
    g = relu_graph(shape=(4,), precision=4)
    raw = np.array([-100, -7, 7, 100])
    for bits in (8, 32):
        p = blob([("data", raw, bits)])
        m = read_cortex(g, p)
        assert m.inputs == ()
        (data,) = m.params
        assert data.name == "data" and data.value.tolist() == [-7, -7, 7, 7]
        assert not data.value.flags.writeable
        assert write_cortex(m) == (g, p)
        canonical = write_cortex(Model(m.inputs, m.params, m.instrs, m.outputs))
        again = read_cortex(*canonical)
        assert again == m and again.params[0].value.tolist() == [-7, -7, 7, 7]


@settings(derandomize=True, max_examples=400, deadline=None)
@given(st.data())
def test_corrupted_params_never_crash(data):
    g = _three_variables()
    p = bytearray(blob([("z", np.ones((2, 2)), 32), ("y", np.array([1, 2, 3]), 8)]))
    for _ in range(data.draw(st.integers(1, 4))):
        p[data.draw(st.integers(0, len(p) - 1))] = data.draw(st.integers(0, 255))
    try:
        read_cortex(g, bytes(p))
    except CvmError as e:
        assert e.family in ("malformed", "invalid")


# -- the reference cases --------------------------------------------------------

CASES = cvm_cases()


# What read_cortex itself must reject, by rule (not the op rules left to verification).
FORMAT_ERRORS = {
    "error/broadcast_add/param-out-of-precision-1": "invalid.param",
    "error/conv2d/weight-minus128-4": "invalid.param",
    "error/broadcast_add/param-prec1-nonzero-2": "invalid.param",
    "error/broadcast_add/params-int8-minus128-10": "invalid.param",
    "error/broadcast_add/param-blob-shape-mismatch-4": "invalid.shape",
    "error/conv2d/unknown-attr-key-12": "invalid.attr",
    "error/conv2d/bad-bool-13": "malformed.attr",
    "error/relu/graph-op-attrs-bad-json-16": "malformed.attr",
    "error/pad/unknown-op-pad-1": "invalid.op",
    "error/softmax/unknown-op-softmax-1": "invalid.op",
    "error/abs/graph-forward-reference-1": "invalid.graph",
    "error/relu/graph-self-reference-2": "invalid.graph",
    "error/relu/graph-ndim7-3": "limit.rank",
    "error/relu/graph-dim-gt-2pow24-4": "limit.dim",
    "error/relu/graph-dim0-5": "limit.dim",
    "error/relu/graph-size-gt-2pow30-6": "limit.size",
    "error/broadcast_add/params-missing-param-5": "invalid.graph",
    "undefined/broadcast_add/params-no-params-at-all-1": "invalid.graph",
    "error/broadcast_add/params-extra-param-6": "invalid.graph",
    "error/broadcast_add/params-bad-magic-7": "malformed.params",
    "error/broadcast_add/params-truncated-names-8": "malformed.params",
    "error/broadcast_add/params-truncated-array-header-9": "malformed.params",
    "error/relu/graph-unknown-top-key-7": "malformed.graph_json",
    "error/relu/graph-unknown-node-key-8": "malformed.graph_json",
    "error/relu/graph-unknown-node-attrs-key-9": "malformed.graph_json",
    "error/relu/graph-unknown-graph-attr-10": "malformed.graph_json",
    "error/relu/graph-missing-dltype-12": "malformed.graph_json",
    "error/relu/graph-missing-heads-13": "malformed.graph_json",
    "error/relu/graph-missing-op-attrs-14": "malformed.graph_json",
    "error/relu/graph-op-attrs-count-15": "invalid.graph",
    "error/relu/graph-var-precision-minus1-17": "invalid.precision",
    "error/relu/graph-var-precision-33-18": "invalid.precision",
    "error/relu/graph-storage-id-negative-19": "invalid.graph",
    "error/negative/graph-storage-reuse-negative-1": "invalid.graph",
    "error/transpose/graph-storage-reuse-transpose-2": "invalid.graph",
    "error/relu/graph-arg-nodes-mismatch-20": "invalid.graph",
    "error/relu/graph-node-row-ptr-mismatch-21": "invalid.graph",
    "error/relu/graph-version-unknown-22": "malformed.graph_json",
    "error/broadcast_add/graph-duplicate-var-name-12": "invalid.graph",
}


def test_format_error_table_names_real_error_cases():
    by_id = {c["id"]: c for c in CASES}
    for case_id in FORMAT_ERRORS:
        assert by_id[case_id]["expect"]["cvmvm"]["status"] == "error", case_id


@pytest.mark.parametrize("case_id", sorted(FORMAT_ERRORS))
def test_reference_format_errors(case_id):
    (case,) = [c for c in CASES if c["id"] == case_id]
    assert code_of(case["graph"], case_params(case)) == FORMAT_ERRORS[case_id]


def _loaded_cases():
    """(case, model) for every reference case that read_cortex accepts; the others must expect an error."""
    out = []
    for case in CASES:
        try:
            out.append((case, read_cortex(case["graph"], case_params(case))))
        except CvmError:
            assert case["expect"]["cvmvm"]["status"] == "error", case["id"]
    return out


LOADED = _loaded_cases()


def test_most_reference_cases_load():
    assert len(LOADED) >= 760
    assert not {c["id"] for c, _ in LOADED} & set(FORMAT_ERRORS)


def test_reference_cases_round_trip_exactly():
    for case, model in LOADED:
        assert write_cortex(model) == (case["graph"], case_params(case)), case["id"]


def test_reference_cases_read_the_same_from_json_bytes():
    for case, model in LOADED:
        again = read_cortex(graph_to_json_bytes(case["graph"]), case_params(case))
        assert again == model, case["id"]
        assert json.loads(graph_to_json_bytes(case["graph"])) == case["graph"]


def _same_values(a, b):
    assert len(a.params) == len(b.params)
    for p, q in zip(a.params, b.params):
        assert np.array_equal(p.value, q.value) and q.value.dtype == DTYPES[INT32], p.name


def test_reference_cases_canonical_form_reads_back_equal():
    for case, model in LOADED:
        bare = Model(model.inputs, model.params, model.instrs, model.outputs)
        g, p = write_cortex(bare)
        again = read_cortex(g, p)
        assert again == model, case["id"]
        _same_values(again, model)
        assert write_cortex(Model(again.inputs, again.params, again.instrs, again.outputs)) == (g, p)


@pytest.mark.parametrize("name", ["digits", "perf", "perf-large"])
def test_reference_models_round_trip(name):
    root = FIXTURES / "models" / name
    graph_bytes = gzip.decompress((root / "graph.json.gz").read_bytes())
    params = gzip.decompress((root / "params.bin.gz").read_bytes())
    model = read_cortex(graph_bytes, params)
    assert write_cortex(model) == (json.loads(graph_bytes), params)
    g, p = write_cortex(Model(model.inputs, model.params, model.instrs, model.outputs))
    again = read_cortex(graph_to_json_bytes(g), p)
    assert again == model
    _same_values(again, model)


# -- the canonical form ----------------------------------------------------------

def _record(name, **attrs):
    return parse_attrs(OP_BY_NAME[name].attrs, attrs, fill_defaults=True)


def _in_memory_model(shapes=True):
    t = TensorType
    inputs = (Input("data", t((1, 3, 6), 8)),)
    params = (Param("w", t((3,), 8), np.array([-127, 0, 127], dtype=np.int32)),
              Param("b", t((3,), 20), np.array([-128, 1, 500000], dtype=np.int32)),
              Param("k", t((1,), 1), np.array([0], dtype=np.int32)))
    instrs = [
        ("get_valid_counts", _record("get_valid_counts", score_threshold=-1), (0,), (4, 5), ((1,), (1, 3, 6))),
        ("sum", _record("sum", axis=(), keepdims=True), (5,), (6,), ((1, 1, 1),)),
        ("take", _record("take"), (2, 1), (7,), ((3,),)),
        ("take", _record("take", axis=0), (2, 3), (8,), ((1,),)),
        ("strided_slice", _record("strided_slice", begin=(0, 1), end=(1, 3), stride=(1,)), (5,), (9,),
         ((1, 2, 6),)),
        ("cvm_right_shift", _record("cvm_right_shift", precision=8, shift_bit=3), (9,), (10,), ((1, 2, 6),)),
        ("upsampling", _record("upsampling", scale=2), (10,), (11,), ((1, 2, 12),)),
    ]
    return Model(inputs, params,
                 tuple(Instr(o, a, i, out, f"{o}_{k}" if k % 2 else "", s if shapes else None,
                             ("int32",) * len(out) if shapes else None)
                       for k, (o, a, i, out, s) in enumerate(instrs)),
                 (6, 4, 11, 1))


def test_canonical_form():
    model = _in_memory_model()
    g, p = write_cortex(model)
    nodes = g["nodes"]
    assert [n["op"] for n in nodes] == ["null"] * 4 + ["cvm_op"] * 7
    assert [n["name"] for n in nodes[:4]] == ["data", "w", "b", "k"]
    assert g["version"] == "cvm_1.0.0"
    entries = g["node_row_ptr"][-1]
    assert entries == 12 and g["arg_nodes"] == [0, 1, 2, 3]
    assert g["attrs"]["storage_id"] == ["list_int", list(range(12))]
    assert g["attrs"]["precision"] == ["list_int", [8, 8, 20, 1] + [-1] * 8]
    assert g["attrs"]["dltype"] == ["list_str", ["int32"] * 12]
    assert g["heads"] == [[5, 0, 0], [4, 0, 0], [10, 0, 0], [1, 0, 0]]
    op_attrs = g["attrs"]["op_attrs"][1]
    assert op_attrs[0] == '{"precision": "8", "shape": "(1, 3, 6)"}'
    assert op_attrs[4] == '{"score_threshold": "-1"}'
    assert op_attrs[5] == '{"axis": "()", "keepdims": "True", "exclude": "False", "dtype": "int32"}'
    assert op_attrs[6] == '{"axis": "None"}'
    assert op_attrs[7] == '{"axis": "0"}'
    assert op_attrs[8] == '{"begin": "(0, 1)", "end": "(1, 3)", "stride": "(1,)"}'
    assert op_attrs[10] == '{"scale": "2", "layout": "NCHW", "method": "NEAREST_NEIGHBOR"}'
    assert nodes[4]["attrs"] == {"flatten_data": "0", "func_name": "get_valid_counts", "num_inputs": "1",
                                 "num_outputs": "2"}
    # w fits int8 ([-127, 127]); b does not (-128 and 500000), k does.
    fields = dict(blob_fields([("w", model.params[0].value, 8), ("b", model.params[1].value, 32),
                               ("k", model.params[2].value, 8)]))
    assert p == b"".join(fields.values())
    again = read_cortex(g, p)
    assert again == model
    _same_values(again, model)
    assert write_cortex(again) == (g, p)


def test_canonical_form_takes_shapes_from_types():
    declared = _in_memory_model()
    bare = _in_memory_model(shapes=False)
    types = [v.type for v in (*declared.inputs, *declared.params)]
    for instr in declared.instrs:
        types += [TensorType(s, 9) for s in instr.declared_shapes]
    with pytest.raises(ValueError):
        write_cortex(bare)
    assert write_cortex(bare, types) == write_cortex(declared)
    int8_out = list(types)
    int8_out[11] = TensorType((1, 2, 12), None, "int8")
    g, _ = write_cortex(bare, int8_out)  # max_pool's dtypes travel in dltype
    assert g["attrs"]["dltype"][1][11] == "int8"


def test_canonical_form_needs_one_input_named_data():
    model = _in_memory_model()
    t = model.inputs[0].type
    for inputs in ((Input("x", t),), (Input("data", t), Input("data2", t))):
        with pytest.raises(CvmError) as e:
            write_cortex(dataclasses.replace(model, inputs=inputs))
        assert e.value.code == "invalid.graph"
    float_param = Param("f", TensorType((1,), None, "float32"), np.zeros(1, dtype="<f4"))
    with pytest.raises(CvmError) as e:
        write_cortex(dataclasses.replace(model, params=model.params + (float_param,)))
    assert e.value.code == "invalid.dtype"


def test_a_changed_model_does_not_reuse_its_layout():
    model = read_cortex(add_graph(), blob(Y8))
    changed = dataclasses.replace(model, outputs=(0,))
    assert changed.source is model.source
    with pytest.raises(ValueError):
        write_cortex(changed)
    assert write_cortex(dataclasses.replace(changed, source=None))[0]["heads"] == [[0, 0, 0]]


@settings(derandomize=True, max_examples=60, deadline=None)
@given(st.data())
def test_random_chains_round_trip_canonically(data):
    """data -> a chain of unary ops and adds of params -> heads; canonical write, read back equal."""
    shape = tuple(data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    size = int(np.prod(shape))
    inputs = (Input("data", TensorType(shape, data.draw(st.integers(1, 32)))),)
    params, instrs, tensors = [], [], [0]
    steps = data.draw(st.lists(st.sampled_from(["relu", "abs", "negative", "add", "shift"]), min_size=1, max_size=6))
    n_params = steps.count("add")
    next_id = 1 + n_params
    for step in steps:
        if step == "add":
            p = data.draw(st.integers(1, 32))
            bound = (1 << (p - 1)) - 1
            values = np.array(data.draw(st.lists(st.integers(-bound, bound), min_size=size, max_size=size)),
                              dtype=np.int32).reshape(shape)
            params.append(Param(f"p{len(params)}", TensorType(shape, p), values))
            ins, record, name = (tensors[-1], len(params)), _record("broadcast_add"), "broadcast_add"
        elif step == "shift":
            ins, record, name = (tensors[-1],), _record("cvm_right_shift", precision=8, shift_bit=2), "cvm_right_shift"
        else:
            ins, record, name = (tensors[-1],), _record(step), step
        instrs.append(Instr(name, record, ins, (next_id,), data.draw(st.sampled_from(["", "n", "x_1"])), (shape,),
                            ("int32",)))
        tensors.append(next_id)
        next_id += 1
    heads = tuple(data.draw(st.lists(st.sampled_from(tensors), min_size=1, max_size=3)))
    model = Model(inputs, tuple(params), tuple(instrs), heads)
    g, p = write_cortex(model)
    again = read_cortex(graph_to_json_bytes(g), p)
    assert again == model
    _same_values(again, model)
    assert write_cortex(again) == (g, p)


# -- graph_to_json_bytes -----------------------------------------------------------

def test_graph_json_bytes_are_deterministic_and_ordered():
    g = relu_graph()
    shuffled = {k: g[k] for k in reversed(list(g))}
    shuffled["attrs"] = {k: g["attrs"][k] for k in sorted(g["attrs"])}
    shuffled["nodes"] = [{k: n[k] for k in sorted(n)} for n in g["nodes"]]
    text = graph_to_json_bytes(g)
    assert graph_to_json_bytes(shuffled) == text
    assert text.startswith(b'{"nodes": [{"op": "null", "name": "data", "inputs": []}, {"op": "cvm_op", '
                           b'"name": "relu_0", "attrs": {"flatten_data": "0", "func_name": "relu"')
    assert text.index(b'"arg_nodes"') < text.index(b'"node_row_ptr"') < text.index(b'"heads"') \
        < text.index(b'"attrs": {"op_attrs"') < text.index(b'"version"')
    assert json.loads(text) == g


def test_graph_json_escapes_only_what_the_runtime_reads():
    g = relu_graph()
    g["nodes"][1]["name"] = 'é"\\\n\r\t/\u2028'
    text = graph_to_json_bytes(g)
    assert b'"\xc3\xa9\\"\\\\\\n\\r\\t/\xe2\x80\xa8"' in text
    assert read_cortex(text).instrs[0].name == g["nodes"][1]["name"]
    g["nodes"][1]["name"] = "a\x01b"
    with pytest.raises(CvmError) as e:
        graph_to_json_bytes(g)
    assert e.value.code == "invalid.graph"


def test_graph_json_rejects_foreign_keys():
    g = copy.deepcopy(relu_graph())
    g["extra"] = 1
    with pytest.raises(ValueError):
        graph_to_json_bytes(g)


def test_read_does_not_mutate_its_argument():
    g = relu_graph()
    before = copy.deepcopy(g)
    read_cortex(g)
    assert g == before


def test_layout_is_not_part_of_model_equality():
    m = read_cortex(relu_graph())
    assert m == Model(m.inputs, m.params, m.instrs, m.outputs)


@pytest.mark.parametrize("max_digits", [0, 4300, 640])
def test_long_integers_are_refused_whatever_the_interpreter_allows(monkeypatch, max_digits):
    # An integer of more than 4,300 digits gave malformed.graph_json or limit.dim by PYTHONINTMAXSTRDIGITS,
    # and an uncaught ValueError inside op_attrs.
    import sys
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(max_digits)
    try:
        text = json.dumps(add_graph())
        dims = json.dumps(add_graph()["attrs"]["shape"][1][0])
        huge = text.replace(dims, "[" + "9" * 5000 + "]", 1)
        assert huge != text and code_of(huge) == "malformed.graph_json"
        for token in ("9" * 25, "-" + "9" * 21, "9" * 5000):
            assert code_of(text.replace(dims, f"[{token}]", 1)) == "malformed.graph_json"
        assert code_of(text.replace(dims, "[" + "9" * 15 + "]", 1)) == "limit.dim"
        g = unary_graph("cvm_right_shift")
        g["attrs"]["op_attrs"][1][1] = json.dumps({"precision": "8", "shift_bit": "9" * 5000})
        assert code_of(g) == "malformed.attr"
    finally:
        sys.set_int_max_str_digits(old)
