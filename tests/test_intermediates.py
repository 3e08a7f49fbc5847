"""Looking inside a run: run --dump-tensors, traces as JSON lines, disasm --json and --dot."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import cvmvm
from isa.errors import CvmError
from isa.types import vm_dtype
from serializer.hashing import tensor_commitment
from serializer.records import trace as trace_codec
from cvmvm.cli.main import main
from tests.conftest import cvmvm_json


def test_dump_tensors_writes_every_tensor_named_by_id_and_producer(capsys, demo_files, tmp_path):
    code, info = cvmvm_json(capsys, ["run", str(demo_files / "digits.cvm"), "--input",
                                     f"data={demo_files / 'image0.npy'}", "--dump-tensors", str(tmp_path / "t")])
    model = cvmvm.load(demo_files / "digits.cvm")
    kept = model.run({"data": np.load(demo_files / "image0.npy")}, trace=True, keep=True)
    names = sorted(p.name for p in (tmp_path / "t").iterdir())
    assert code == 0 and info["dumped_tensors"] == len(names) == len(kept.tensors) == 22
    assert names[0] == "0000-input-data.npy" and names[1] == "0001-param-conv1_weight.npy"
    assert names[9] == "0009-conv2d-conv2d_0.npy" and names[21] == "0021-dense-dense_0.npy"
    for name, value, entry in zip(names, kept.tensors, kept.trace.entries):
        got = np.load(tmp_path / "t" / name, allow_pickle=False)
        assert np.array_equal(got, value) and vm_dtype(got.dtype) == vm_dtype(value.dtype)   # files little-endian
        assert tensor_commitment(got, model.program.types[entry.tensor]).hex() == entry.commitment_hex
        assert re.fullmatch(r"\d{4}-[a-z0-9_]+-[A-Za-z0-9_.]+\.npy", name)


@pytest.mark.parametrize("argv_tail, lines", [(["--trace", "{t}.jsonl"], True), (["--trace", "{t}.json"], False),
                                              (["--trace", "{t}", "--trace-format", "jsonl"], True),
                                              (["--trace", "{t}.jsonl", "--trace-format", "json"], False)])
def test_traces_as_json_lines(capsys, demo_files, tmp_path, argv_tail, lines):
    tail = [a.format(t=tmp_path / "trace") for a in argv_tail]
    code, info = cvmvm_json(capsys, ["run", str(demo_files / "digits.cvm"), "--input",
                                     f"data={demo_files / 'image0.npy'}", *tail])
    with open(tail[1], "rb") as f:
        data = f.read()
    text = data.decode()
    assert (text.count("\n") == 23) == lines and text.endswith("\n")
    header = json.loads(text.splitlines()[0])
    assert header["root"] == info["trace_root"] and ("entries" in header) != lines
    loaded = trace_codec.load_trace(data, "t")
    assert loaded.root == info["trace_root"] and len(loaded.entries) == 22


def test_json_lines_traces_differ_in_the_tensors_that_differ(demo_files):
    a = (demo_files / "run0.jsonl").read_text().splitlines()
    b = (demo_files / "run1.jsonl").read_text().splitlines()
    differ = [k for k, (x, y) in enumerate(zip(a, b)) if x != y]
    rows = [json.loads(a[k]) for k in differ[1:]]
    assert differ[0] == 0 and rows[0]["kind"] == "input"  # the header (root), then the input
    assert all(r["kind"] != "param" for r in rows)         # params are the same in both runs
    assert main(["diff", str(demo_files / "run0.jsonl"), str(demo_files / "run1.jsonl")]) == 1
    assert main(["diff", str(demo_files / "run0.json"), str(demo_files / "run0.jsonl")]) == 0


def test_json_lines_traces_are_checked_like_documents(demo_files):
    good = (demo_files / "run0.jsonl").read_bytes()
    lines = good.splitlines(keepends=True)
    for bad in (b"".join(lines[:1] + lines[2:]),                       # an entry missing
                b"".join(lines[:3] + [b"{not json\n"] + lines[4:]),      # a line that is not JSON
                b"".join(lines[:3] + [b"\n"] + lines[3:]),               # an empty line
                good.replace(b'"tensor":5', b'"tensor":6', 1),           # the root no longer matches
                b"".join(lines[1:])):                                   # no header
        with pytest.raises(CvmError) as e:
            trace_codec.load_trace(bad, "t")
        assert e.value.code == "malformed.trace"


def test_disasm_json_is_one_object_per_instruction_with_names(capsys, demo_files):
    code, info = cvmvm_json(capsys, ["disasm", str(demo_files / "digits.cvm")])
    assert code == 0 and info["tensors"] == 22 and len(info["instructions"]) == 13
    first = info["instructions"][0]
    assert (first["op"], first["name"], first["inputs"], first["outputs"]) == ("conv2d", "conv2d_0", [0, 1, 2], [9])
    assert first["attrs"]["channels"] == 8 and first["types"] == [{"dtype": "int32", "shape": [1, 8, 8, 8],
                                                                    "precision": 21}]
    assert first["plan"].startswith("gemm") and sum(i["cost"] for i in info["instructions"]) < info["ops"]
    # The text listing's work and memory, as data.
    model = cvmvm.load(demo_files / "digits.cvm")
    assert (info["work"], info["memory_bytes"]) == (model.work, model.memory_bytes)
    assert [i["work"] for i in info["instructions"]] == [s.work for s in model.program.steps]
    assert info["outputs"] == [{"tensor": 21, "name": "dense_0"}]


def test_disasm_dot_is_a_graph_of_every_tensor(capsys, demo_files):
    assert main(["disasm", str(demo_files / "digits.cvm"), "--dot"]) == 0
    dot = capsys.readouterr().out
    assert dot.startswith("digraph cvmvm {") and dot.rstrip().endswith("}")
    declared = set(re.findall(r"^  (\w+) \[label=", dot, flags=re.M))
    edges = re.findall(r"^  (\w+) -> (\w+) ", dot, flags=re.M)
    assert declared == {f"t{k}" for k in range(9)} | {f"i{k}" for k in range(13)} | {"out0"}
    assert {a for a, _ in edges} | {b for _, b in edges} <= declared
    assert len(edges) == 1 + sum(len(s.inputs) for s in cvmvm.load(demo_files / "digits.cvm").program.steps)
    assert dot.count('"') % 2 == 0


def test_dot_escapes_names():
    from isa.attrs import parse_attrs
    from isa.table import OP_BY_NAME
    from isa.types import TensorType
    from serializer.model import Input, Instr
    from tests.test_receipt import build
    name = 'we"ird\\name'
    model = build([Input(name, TensorType((1, 3), 8))], [],
                  [Instr("relu", parse_attrs(OP_BY_NAME["relu"].attrs, {}, fill_defaults=True), (0,), (1,), name)], [1])
    from cvmvm.vm.disasm import dot
    text = dot(model.program)
    assert 'we\\"ird\\\\name' in text
    for line in text.splitlines()[3:-1]:
        assert re.fullmatch(r'  \w+( -> \w+)? \[label="([^"\\]|\\.)*"(, [^\]]*)?\];', line), line
