"""The command line: every command, its JSON, and one clear line with the family's exit code on failure."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cvmvm.cli.common import EXIT_CODES
from cvmvm.cli.main import main

REPO = Path(__file__).resolve().parent.parent
DIGITS = REPO / "fixtures" / "models" / "digits"


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("digits")
    (d / "graph.json").write_bytes(gzip.decompress((DIGITS / "graph.json.gz").read_bytes()))
    (d / "params.bin").write_bytes(gzip.decompress((DIGITS / "params.bin.gz").read_bytes()))
    images = np.load(DIGITS / "test_inputs.npy", allow_pickle=False)
    np.save(d / "x.npy", images[0])
    np.save(d / "x_bad_shape.npy", images[0][0])
    np.save(d / "x_float.npy", images[0].astype(np.float32))
    np.save(d / "x_bool.npy", images[0] > 0)
    np.save(d / "x_object.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    return {"graph": d / "graph.json", "params": d / "params.bin", "x": d / "x.npy", "dir": d}


def run_json(capsys, argv: list[str]) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_verify_reports_ops_gas_and_types(capsys, digits):
    code, info = run_json(capsys, ["verify", str(digits["graph"]), "--params", str(digits["params"])])
    assert code == 0
    assert info["ops"] == 115096 and info["gas"] == 5
    assert info["inputs"] == {"data": {"shape": [1, 1, 8, 8], "dtype": "int32", "precision": 8, "scale": None}}
    assert info["outputs"][0]["shape"] == [1, 10]


def test_run_json_has_hashes_and_matches_the_runtime(capsys, digits, tmp_path):
    code, info = run_json(capsys, ["run", str(digits["graph"]), "--params", str(digits["params"]),
                                   "--input", f"data={digits['x']}", "--trace", str(tmp_path / "t.json"),
                                   "--save-outputs", str(tmp_path / "out")])
    assert code == 0
    assert set(info) >= {"model_hash", "output_hash", "trace_root", "ops", "outputs", "peak_tensor_bytes"}
    expected = np.load(DIGITS / "expected_outputs.npy")[0]
    got = np.load(tmp_path / "out" / "output_0.npy", allow_pickle=False)
    assert np.array_equal(got.reshape(-1), expected.reshape(-1))
    trace = json.loads((tmp_path / "t.json").read_text())
    assert trace["root"] == info["trace_root"] and trace["model_hash"] == info["model_hash"]


def test_convert_round_trip_keeps_the_model_hash(capsys, digits, tmp_path):
    native = tmp_path / "digits.cvm"
    code, a = run_json(capsys, ["convert", str(digits["graph"]), "--params", str(digits["params"]), str(native)])
    assert code == 0
    code, b = run_json(capsys, ["convert", str(native), str(tmp_path / "back.json")])
    assert code == 0 and b["params"].endswith("back.params")
    code, c = run_json(capsys, ["hash", str(tmp_path / "back.json"), "--params", b["params"]])
    assert code == 0 and a["model_hash"] == b["model_hash"] == c["model_hash"]
    code, d = run_json(capsys, ["run", str(native), "--input", f"data={digits['x']}"])
    code, e = run_json(capsys, ["run", str(digits["graph"]), "--params", str(digits["params"]),
                                "--input", f"data={digits['x']}"])
    assert d == e


def test_hash_of_a_tensor(capsys, digits, tmp_path):
    from isa.types import TensorType
    from serializer.hashing import tensor_commitment
    x = np.load(digits["x"])
    code, info = run_json(capsys, ["hash", str(digits["x"])])
    smallest = int(np.abs(x).max()).bit_length() + 1
    assert code == 0 and info["precision"] == smallest
    assert info["commitment"] == tensor_commitment(x, TensorType(x.shape, smallest)).hex()
    code, info = run_json(capsys, ["hash", str(digits["x"]), "--precision", "20"])
    assert code == 0 and info["commitment"] == tensor_commitment(x, TensorType(x.shape, 20)).hex()
    code, info = run_json(capsys, ["hash", str(digits["x"]), "--precision", "2"])
    assert code == 5 and info["error"] == "input.value"
    np.save(tmp_path / "f.npy", np.array([1.5, -0.0], dtype=np.float32))
    code, info = run_json(capsys, ["hash", str(tmp_path / "f.npy")])
    assert code == 0 and info["dtype"] == "float32" and info["precision"] is None


def test_hash_of_a_model_shows_its_program_root(capsys, digits):
    code, info = run_json(capsys, ["hash", str(digits["graph"]), "--params", str(digits["params"])])
    assert code == 0 and len(info["model_hash"]) == 64 and len(info["program_root"]) == 64
    code, verified = run_json(capsys, ["verify", str(digits["graph"]), "--params", str(digits["params"])])
    assert verified["program_root"] == info["program_root"] and verified["model_hash"] == info["model_hash"]


def test_disasm_lists_every_instruction(capsys, digits):
    code, info = run_json(capsys, ["disasm", str(digits["graph"]), "--params", str(digits["params"])])
    assert code == 0
    assert len(info["instructions"]) == 13 and info["instructions"][0]["op"] == "conv2d"
    assert all(set(i) >= {"index", "op", "name", "inputs", "outputs", "attrs", "types", "cost", "plan"}
               for i in info["instructions"])
    assert [v["kind"] for v in info["variables"]] == ["input"] + ["param"] * 8
    assert main(["disasm", str(digits["graph"]), "--params", str(digits["params"])]) == 0
    text = capsys.readouterr().out
    assert sum(" conv2d(" in line for line in text.splitlines()) == 2


def test_ops_lists_the_table(capsys):
    from isa.table import OPS
    code, info = run_json(capsys, ["ops"])
    assert code == 0
    assert [o["name"] for o in info["ops"]] == [op.name for op in OPS]
    assert [o["code"] for o in info["ops"]] == list(range(len(OPS)))


def test_demo(capsys):
    code, info = run_json(capsys, ["demo"])
    assert code == 0
    assert info["total"] == 20 and info["correct"] >= 18
    assert len(info["model_hash"]) == 64


@pytest.mark.parametrize("argv, family", [
    (["verify", "{dir}/missing.json"], "io"),
    (["verify", "{dir}/x.npy"], "malformed"),
    (["run", "{graph}", "--params", "{params}", "--input", "data={dir}/x_bad_shape.npy"], "input"),
    (["run", "{graph}", "--params", "{params}", "--input", "data={dir}/x_float.npy"], "input"),
    (["run", "{graph}", "--params", "{params}", "--input", "data={dir}/x_object.npy"], "malformed"),
    (["run", "{graph}", "--params", "{params}", "--input", "nodata={dir}/x.npy"], "input"),
    (["run", "{graph}", "--params", "{params}", "--input", "data"], "usage"),
    (["verify", "{graph}", "--params", "{params}", "--ops-limit", "1000"], "limit"),
    (["verify", "{graph}"], "invalid"),
    (["hash", "{dir}/x_bool.npy"], "input"),
])
def test_errors_exit_with_their_family_code(capsys, digits, argv, family):
    argv = [a.format(dir=digits["dir"], graph=digits["graph"], params=digits["params"]) for a in argv]
    assert main(argv) == EXIT_CODES[family]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"cvmvm: error {family}.")


def test_a_failing_command_prints_no_traceback(digits):
    proc = subprocess.run([sys.executable, "-m", "cvmvm", "run", str(digits["graph"]), "--params",
                           str(digits["params"]), "--input", f"data={digits['dir']}/x_bad_shape.npy"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == EXIT_CODES["input"]
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
