"""Trace diff: name the one op two runs disagree on, or the input that differs first."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from serializer.records.trace import trace_bytes
from cvmvm.tx import tracediff
from cvmvm.cli.common import EXIT_CODES
from cvmvm.vm.trace import trace_to_json
from isa.errors import CvmError
from serializer.hashing import trace_root, tree_root
from cvmvm.vm.api import Model
from cvmvm.vm.verify import verify
from tests.test_receipt import cli_json, mlp_model, pair_model

X = {"x": np.array([[5, -100, 120, 7]], dtype=np.int32)}
Y = {"x": np.array([[6, -100, 120, 7]], dtype=np.int32)}


def trace_doc(model, inputs) -> dict:
    return trace_to_json(model.program, model.run(inputs, trace=True).trace, model.model_hash)


def reroot(doc: dict) -> dict:
    """After editing entries, recompute the root as a (dishonest) node would."""
    leaves = [bytes.fromhex(e["commitment"]) for e in doc["entries"]]
    root = trace_root(bytes.fromhex(doc["program_root"]), bytes.fromhex(doc["input_commitment"]), len(leaves),
                      tree_root(leaves))
    return {**doc, "root": root.hex()}


def loaded(doc: dict):
    return tracediff.read_trace(trace_bytes(doc), "trace")


def test_identical_traces():
    doc = trace_doc(mlp_model(), X)
    report = tracediff.diff(loaded(doc), loaded(doc))
    assert report == {"same": True, "root": doc["root"]}


def test_one_wrong_op_is_isolated():
    doc = trace_doc(mlp_model(), X)
    bad = json.loads(json.dumps(doc))
    bad["entries"][6]["commitment"] = "ab" * 32   # instruction 2 (broadcast_mul), tensor 6
    bad["entries"][7]["commitment"] = "cd" * 32   # and what followed from it
    report = tracediff.diff(loaded(doc), loaded(reroot(bad)))
    ins = report["instruction"]
    assert (ins["index"], ins["op"], ins["tensor"], ins["inputs_agree"]) == (2, "broadcast_mul", 6, True)
    assert [e["tensor"] for e in ins["inputs"]] == [5, 3] and ins["outputs"][0]["shape"] == [1, 3]
    assert "the dispute is this one op" in tracediff.render(report)


def test_differing_inputs_are_named_first():
    model = mlp_model()
    report = tracediff.diff(loaded(trace_doc(model, X)), loaded(trace_doc(model, Y)))
    first = report["first_entry"]["a"]
    assert report["reason"] == "tensor" and first["kind"] == "input" and first["name"] == "x"
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
    assert report["reason"] == "program" and not report["same_model"]
    assert report["model_hash"] == [mlp_model().model_hash.hex(), pair_model().model_hash.hex()]
    assert (report["first_entry"]["a"]["shape"], report["first_entry"]["b"]["shape"]) == ([1, 4], [2, 3])
    assert "different models" in tracediff.render(report)


def test_models_that_differ_in_one_param_name_the_param_and_the_first_instruction():
    # Defect: only "the traces are of different models".
    model = mlp_model()
    w = model.program.model.params[0]
    other = np.array(w.value)
    other[1, 2] += 1
    other.setflags(write=False)
    changed = Model(verify(dataclasses.replace(model.program.model, params=(
        dataclasses.replace(w, value=other), *model.program.model.params[1:]))))
    report = tracediff.diff(loaded(trace_doc(model, X)), loaded(trace_doc(changed, X)))
    assert report["reason"] == "tensor" and not report["same_model"]
    first = report["first_entry"]["a"]
    assert (first["kind"], first["name"], first["tensor"]) == ("param", "w", 1)
    ins = report["instruction"]
    assert (ins["index"], ins["op"], ins["inputs_agree"], ins["differing_inputs"]) == (1, "dense", False, [1])
    assert ins["attrs"]["units"] == 3
    text = tracediff.render(report)
    assert "different models" in text and "param 0 (w, tensor 1) differs first" in text and "dense" in text


def test_traces_that_differ_only_in_their_outputs_say_so(capsys, tmp_path):
    """The same inputs and instructions, another output list: every entry agrees and the roots
    differ, and the report blamed names (which the root does not commit to)."""
    from tests.test_receipt import Input, TensorType, build, instr

    def model(outputs):
        return build([Input("x", TensorType((1, 4), 8))], [], [instr("relu", (0,), 1), instr("negative", (1,), 2)],
                     outputs)
    x = {"x": np.array([[5, -100, 120, 7]], dtype=np.int32)}
    for name, outputs in (("a", [2]), ("b", [1, 2])):
        (tmp_path / f"{name}.json").write_bytes(trace_bytes(trace_doc(model(outputs), x)))
    report = tracediff.diff(*(loaded(json.loads((tmp_path / f"{n}.json").read_bytes())) for n in "ab"))
    assert (report["reason"], report["outputs"]) == ("outputs", [[2], [1, 2]])
    assert "outputs differ, tensors [2] vs [1, 2]" in tracediff.render(report)
    code, info = cli_json(capsys, ["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    assert code == 1 and info["reason"] == "outputs" and info["outputs"] == [[2], [1, 2]]


def test_cli_diff_of_two_models_exits_1(capsys, tmp_path):
    (tmp_path / "a.json").write_bytes(trace_bytes(trace_doc(mlp_model(), X)))
    (tmp_path / "b.json").write_bytes(trace_bytes(trace_doc(pair_model(), {"a": np.ones((2, 3), np.int32),
                                                                           "b": np.ones((2, 3), np.int32)})))
    code, info = cli_json(capsys, ["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    assert code == 1 and info["first_entry"]["a"]["kind"] == "input" and not info["same_model"]


# Each edit rewrites a field the root commits to; the root is then recomputed from the leaves as a
# dishonest node would, but the node digests no longer match the fields (or the types the ops infer).
FORGERIES = {
    "op": lambda d: d["entries"][4].update(op="abs"),
    "attrs": lambda d: d["entries"][5]["attrs"].update(units=4),
    "inputs": lambda d: d["entries"][6].update(inputs=[5, 2]),
    "instr shape": lambda d: d["entries"][7].update(shape=[3, 1]),
    "instr dtype": lambda d: d["entries"][7].update(dtype="int64", precision=None),
    "input shape": lambda d: d["entries"][0].update(shape=[4, 1]),
    "param dtype": lambda d: d["entries"][1].update(dtype="int8", precision=None),
    "kind": lambda d: d["entries"][3].update(kind="input", index=1),
    "output count": lambda d: d["entries"].append({**d["entries"][7], "tensor": 8, "output": 1}),
    "extra key": lambda d: d["entries"][2].update(note="x"),
    "missing key": lambda d: d["entries"][2].pop("name"),
}


@pytest.mark.parametrize("field", sorted(FORGERIES))
def test_a_rewritten_field_is_refused(field):
    doc = json.loads(json.dumps(trace_doc(mlp_model(), X)))
    FORGERIES[field](doc)
    with pytest.raises(CvmError) as e:
        loaded(reroot(doc))
    assert e.value.code == "malformed.trace"


def test_names_are_labels_the_root_does_not_commit_to():
    doc = json.loads(json.dumps(trace_doc(mlp_model(), X)))
    doc["entries"][1]["name"] = "renamed"
    assert loaded(doc).root == doc["root"]


@pytest.mark.parametrize("text", [
    b'{"entries": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b"[" * 1_000_000,
    b'{"format": "cvmvm-trace/1", "entries": [], "x": ' + b"9" * 5000 + b"}",
    b'{"format": "cvmvm-trace/1", "format": "cvmvm-trace/1", "entries": []}',
    b'{"format": "cvmvm-trace/1", "entries": [NaN]}',
    b"\xff",
])
def test_hostile_json_is_malformed_trace(capsys, tmp_path, text):
    # Defect: a deeply nested file gave RecursionError (internal.bug, exit 7).
    (tmp_path / "t.json").write_bytes(text)
    code, info = cli_json(capsys, ["diff", str(tmp_path / "t.json"), str(tmp_path / "t.json")])
    assert code == EXIT_CODES["malformed"] and info["error"] == "malformed.trace"


@pytest.mark.parametrize("edit", [
    lambda d: {**d, "root": "00" * 32},                                           # root not of its entries
    lambda d: {**d, "entries": [{**d["entries"][0], "commitment": "zz" * 32}] + d["entries"][1:]},
    lambda d: {**d, "entries": [{**d["entries"][0], "commitment": "AB" * 32}] + d["entries"][1:]},
    lambda d: reroot({**d, "entries": [{**d["entries"][0], "commitment": "ab" * 32}] + d["entries"][1:]}),  # inputs
    lambda d: {**d, "program_root": "00" * 32},
    lambda d: {**d, "entries": [{**d["entries"][0], "kind": "tensor"}] + d["entries"][1:]},
    lambda d: {**d, "entries": [{**d["entries"][0], "index": -1}] + d["entries"][1:]},
    lambda d: {**d, "entries": d["entries"][1:]},                                 # tensor ids out of order
    lambda d: {**d, "entries": []},
    lambda d: {**d, "format": "cvmvm-trace/0"},
    lambda d: {**d, "format": "cvmvm-trace/1"},
])
def test_malformed_traces_are_rejected(edit):
    with pytest.raises(CvmError) as e:
        loaded(edit(trace_doc(mlp_model(), X)))
    assert e.value.code == "malformed.trace"


@pytest.mark.parametrize("version", [1, 2])
def test_trace_files_of_older_formats_are_refused_by_their_version(version):
    with pytest.raises(CvmError) as e:
        loaded({**trace_doc(mlp_model(), X), "format": f"cvmvm-trace/{version}"})
    assert e.value.code == "malformed.trace" and f"version {version}" in e.value.message


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
