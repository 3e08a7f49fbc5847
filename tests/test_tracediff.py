"""Trace diff: name the one op two runs disagree on, or the input that differs first."""

from __future__ import annotations

import json

import numpy as np
import pytest

from serializer.records import trace as trace_codec
from serializer.records.trace import trace_bytes
from cvmvm.tx import tracediff
from cvmvm.cli.common import EXIT_CODES
from cvmvm.vm.trace import trace_to_json
from isa.errors import CvmError
from serializer.hashing import KIND_NAMES, leaf_hash, merkle_root, trace_root
from tests.test_receipt import cli_json, mlp_model, pair_model

X = {"x": np.array([[5, -100, 120, 7]], dtype=np.int32)}
Y = {"x": np.array([[6, -100, 120, 7]], dtype=np.int32)}


def trace_doc(model, inputs) -> dict:
    return trace_to_json(model.program, model.run(inputs, trace=True).trace, model.model_hash)


def reroot(doc: dict) -> dict:
    """After editing entries, recompute the root as a (dishonest) node would."""
    leaves = [leaf_hash(e["tensor"], KIND_NAMES.index(e["kind"]), e["index"], e["output"], e["precision"],
                        bytes.fromhex(e["node"]), bytes.fromhex(e["hash"])) for e in doc["entries"]]
    tree = merkle_root(leaves)
    return {**doc, "root": trace_root(bytes.fromhex(doc["model_hash"]), len(leaves), tree).hex()}


def loaded(doc: dict):
    return trace_codec.load_trace(trace_bytes(doc), "trace")


def test_identical_traces():
    doc = trace_doc(mlp_model(), X)
    report = tracediff.diff(loaded(doc), loaded(doc))
    assert report == {"same": True, "root": doc["root"]}


def test_one_wrong_op_is_isolated():
    doc = trace_doc(mlp_model(), X)
    bad = json.loads(json.dumps(doc))
    bad["entries"][6]["hash"] = "ab" * 32   # instruction 2 (broadcast_mul), tensor 6
    bad["entries"][7]["hash"] = "cd" * 32   # and what followed from it
    report = tracediff.diff(loaded(doc), loaded(reroot(bad)))
    ins = report["instruction"]
    assert (ins["index"], ins["op"], ins["tensor"], ins["inputs_agree"]) == (2, "broadcast_mul", 6, True)
    assert [e["tensor"] for e in ins["inputs"]] == [5, 3] and ins["outputs"][0]["shape"] == [1, 3]
    assert "the dispute is this one op" in tracediff.render(report)


def test_differing_inputs_are_named_first():
    model = mlp_model()
    report = tracediff.diff(loaded(trace_doc(model, X)), loaded(trace_doc(model, Y)))
    assert report["first_tensor"]["kind"] == "input" and report["first_tensor"]["name"] == "x"
    ins = report["instruction"]
    assert (ins["index"], ins["op"], ins["inputs_agree"], ins["differing_inputs"]) == (0, "relu", False, [0])
    assert "its inputs differ too" in tracediff.render(report)


def test_inputs_that_differ_only_before_clipping_give_identical_traces():
    model = mlp_model()
    clipped = tracediff.diff(loaded(trace_doc(model, {"x": np.array([[5, -100, 300, 7]], np.int32)})),
                             loaded(trace_doc(model, {"x": np.array([[5, -100, 127, 7]], np.int32)})))
    assert clipped["same"]


def test_different_models():
    report = tracediff.diff(loaded(trace_doc(mlp_model(), X)),
                            loaded(trace_doc(pair_model(), {"a": np.ones((2, 3), np.int32),
                                                            "b": np.ones((2, 3), np.int32)})))
    assert report["reason"] == "model"
    assert "different models" in tracediff.render(report)


@pytest.mark.parametrize("edit", [
    lambda d: {**d, "root": "00" * 32},                                           # root not of its entries
    lambda d: {**d, "entries": [{**d["entries"][0], "hash": "zz" * 32}] + d["entries"][1:]},
    lambda d: {**d, "entries": [{**d["entries"][0], "hash": "AB" * 32}] + d["entries"][1:]},
    lambda d: {**d, "entries": [{**d["entries"][0], "kind": "tensor"}] + d["entries"][1:]},
    lambda d: {**d, "entries": [{**d["entries"][0], "index": -1}] + d["entries"][1:]},
    lambda d: {**d, "entries": d["entries"][1:]},                                 # tensor ids out of order
    lambda d: {**d, "entries": []},
    lambda d: {**d, "format": "cvmvm-trace/0"},
])
def test_malformed_traces_are_rejected(edit):
    with pytest.raises(CvmError) as e:
        loaded(edit(trace_doc(mlp_model(), X)))
    assert e.value.code == "malformed.trace"


def test_cli_diff(capsys, tmp_path):
    model = mlp_model()
    (tmp_path / "a.json").write_bytes(trace_bytes(trace_doc(model, X)))
    (tmp_path / "b.json").write_bytes(trace_bytes(trace_doc(model, Y)))
    (tmp_path / "bad.json").write_text("{not json")
    code, info = cli_json(capsys, ["diff", str(tmp_path / "a.json"), str(tmp_path / "a.json")])
    assert code == 0 and info["same"]
    code, info = cli_json(capsys, ["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    assert code == 1 and info["instruction"]["op"] == "relu"
    code, info = cli_json(capsys, ["diff", str(tmp_path / "a.json"), str(tmp_path / "bad.json")])
    assert code == EXIT_CODES["malformed"] and info["error"] == "malformed.trace"
