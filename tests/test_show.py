"""File kinds: told from content (serializer.kinds), shown by `cvmvm show`, and named when a command
is given a file of another kind."""

from __future__ import annotations

import json

import numpy as np
import pytest

from isa.errors import CvmError
from serializer import kinds
from serializer.limits import MAX_GRAPH_JSON_BYTES
from serializer.records import receipt as receipt_codec, trace as trace_codec
from cvmvm import files
from cvmvm.cli.common import EXIT_CODES
from cvmvm.cli.main import main
from tests.conftest import cvmvm_json

FILES = {"digits.cvm": kinds.NATIVE, "digits.json": kinds.CORTEX_GRAPH, "digits.params": kinds.CORTEX_PARAMS,
         "run0.receipt": kinds.RECEIPT, "run0.json": kinds.TRACE, "run0.jsonl": kinds.TRACE,
         "step3.proof": kinds.STEP_PROOF, "one.txs": kinds.TXS, "image0.npy": kinds.NPY}


@pytest.mark.parametrize("name", sorted(FILES))
def test_every_kind_is_detected(demo_files, name):
    assert kinds.detect((demo_files / name).read_bytes()) == FILES[name]


def test_detection_is_by_content_alone(demo_files):
    doc = json.loads((demo_files / "run0.json").read_bytes())
    assert kinds.detect(json.dumps(doc, indent=2).encode()) == kinds.TRACE  # reformatted: still a trace
    for data in (b"", b"\x00\x01", b"plain text", b'{"a": 1}', b"\x81\xa6format\xa3xyz", b"\x81\xa6format\x05",
                 (demo_files / "digits.cvm").read_bytes()[:7]):
        assert kinds.detect(data) is None, data
    assert kinds.detect((demo_files / "digits.cvm").read_bytes()[:30]) == kinds.NATIVE  # truncated: still claims it
    with pytest.raises(CvmError, match="this is a receipt, not a model") as e:
        kinds.expect((demo_files / "run0.receipt").read_bytes(), kinds.MODEL, "r", "a model")
    assert e.value.code == "malformed.kind"
    assert kinds.expect(b"junk", kinds.MODEL, "j") is None  # no known kind: the decoder will say what is wrong


@pytest.mark.parametrize("name", sorted(FILES))
def test_show_decodes_every_kind(capsys, demo_files, name):
    code, info = cvmvm_json(capsys, ["show", str(demo_files / name)])
    assert code == 0 and info["kind"] == FILES[name]
    assert main(["show", str(demo_files / name)]) == 0
    assert capsys.readouterr().out.strip()


def test_show_details(capsys, demo_files):
    r = receipt_codec.decode((demo_files / "run0.receipt").read_bytes())
    _, info = cvmvm_json(capsys, ["show", str(demo_files / "run0.receipt")])
    assert info["trace_root"] == r.trace_root.hex() and info["signer"] is None
    _, native = cvmvm_json(capsys, ["show", str(demo_files / "digits.cvm")])
    assert native["verified"] is True and native["model_hash"] == r.model_hash.hex() and len(native["instructions"]) == 13
    _, graph = cvmvm_json(capsys, ["show", str(demo_files / "digits.json")])
    assert len(graph["nodes"]) == 22 and "verified" not in graph  # without its params: the nodes as written
    _, model = cvmvm_json(capsys, ["show", str(demo_files / "digits.json"), "--params", str(demo_files / "digits.params")])
    assert model["verified"] is True and model["model_hash"] == r.model_hash.hex()
    _, a = cvmvm_json(capsys, ["show", str(demo_files / "run0.json")])
    _, b = cvmvm_json(capsys, ["show", str(demo_files / "run0.jsonl")])
    assert a == b and a["root"] == r.trace_root.hex() and len(a["entries"]) == 22
    _, proof = cvmvm_json(capsys, ["show", str(demo_files / "step3.proof")])
    assert proof["step"] == 3 and proof["op"] == "cvm_right_shift"
    _, txs = cvmvm_json(capsys, ["show", str(demo_files / "one.txs")])
    assert len(txs["transactions"]) == 1 and txs["transactions"][0]["receipt"]["output_hash"] == r.output_hash.hex()
    _, npy = cvmvm_json(capsys, ["show", str(demo_files / "image0.npy")])
    assert npy["shape"] == [1, 1, 8, 8] and npy["commitment"] == r.inputs[0][1].hex()


@pytest.mark.parametrize("name", sorted(FILES))
def test_json_is_told_from_the_first_byte(demo_files, name):
    """A reader picks a JSON file's byte limit (a graph's or a trace's) from its first bytes alone."""
    head = (demo_files / name).read_bytes()[:files.HEAD_BYTES]
    assert kinds.json_head(head) == (FILES[name] in (kinds.CORTEX_GRAPH, kinds.TRACE))
    assert kinds.json_head(b" \n\t" + head) and not kinds.json_head(b"")


def test_show_refuses_a_graph_json_over_its_limit(capsys, tmp_path):
    # Read under a trace's larger limit (JSON text is either), then held to a graph's own.
    with open(tmp_path / "big.json", "wb") as f:
        f.write(b'{"nodes": ')
        f.truncate(MAX_GRAPH_JSON_BYTES + 1)
    code, info = cvmvm_json(capsys, ["show", str(tmp_path / "big.json")])
    assert code == EXIT_CODES["limit"] and info["error"] == "limit.bytes" and "graph JSON" in info["message"]
    with open(tmp_path / "bigger.json", "wb") as f:
        f.write(b'{"format": "cvmvm-trace/3", ')
        f.truncate(trace_codec.MAX_TRACE_BYTES + 1)
    code, info = cvmvm_json(capsys, ["show", str(tmp_path / "bigger.json")])
    assert code == EXIT_CODES["limit"] and info["error"] == "limit.bytes"
    assert f"exceed the limit of {trace_codec.MAX_TRACE_BYTES}" in info["message"]


def test_show_refuses_what_it_cannot_show(capsys, demo_files, tmp_path):
    (tmp_path / "junk").write_bytes(b"junk")
    code, info = cvmvm_json(capsys, ["show", str(tmp_path / "junk")])
    assert code == EXIT_CODES["malformed"] and info["error"] == "malformed.kind"
    code, info = cvmvm_json(capsys, ["show", str(demo_files / "digits.cvm"), "--params", str(demo_files / "digits.params")])
    assert code == EXIT_CODES["usage"] and info["error"] == "usage.conflict"
    graph = json.loads((demo_files / "digits.json").read_text())
    graph["nodes"][1] = []
    for text in (b'{"nodes": [}', b'{"nodes": [{"op": "null"}, []]}', json.dumps(graph).encode()):
        (tmp_path / "bad.json").write_bytes(text)
        code, info = cvmvm_json(capsys, ["show", str(tmp_path / "bad.json")])
        assert info["error"] == "malformed.graph_json"
    # Shown only once it reads as run reads it, without its params: not as nodes that are not there.
    assert "nodes[1] must be a JSON object, got list" in info["message"]


ROOT = "93bd626ef64c8395f12e585f0d678bd3076f723729c6c4187384cc9d1df6bc4a"


@pytest.mark.parametrize("argv", [
    ["verify", "{d}/run0.receipt"],
    ["verify", "{d}/image0.npy"],
    ["hash", "{d}/step3.proof"],
    ["disasm", "{d}/run0.json"],
    ["convert", "{d}/one.txs", "{d}/out.cvm"],
    ["run", "{d}/digits.cvm", "--input", "data={d}/run0.receipt"],
    ["run", "{d}/digits.json", "--params", "{d}/image0.npy", "--input", "data={d}/image0.npy"],
    ["check-receipt", "{d}/digits.cvm", "--model", "{d}/digits.cvm", "--input", "data={d}/image0.npy"],
    ["check-receipt", "{d}/run0.receipt", "--model", "{d}/step3.proof", "--input", "data={d}/image0.npy"],
    ["replay", "{d}/run0.receipt", "--store", "{d}/models"],
    ["diff", "{d}/run0.json", "{d}/run0.receipt"],
    ["prove-step", "{d}/run0.jsonl", "--input", "data={d}/image0.npy", "--step", "1", "--out", "{d}/p"],
    ["check-step", "{d}/run0.receipt", "--root", ROOT],
    ["check-step", "{d}/step3.proof", "--root", ROOT, "--model", "{d}/run0.receipt"],
    ["store", "add", "{d}/models", "{d}/image0.npy"],
])
def test_every_command_names_a_file_of_another_kind(capsys, demo_files, argv):
    code, info = cvmvm_json(capsys, [a.format(d=demo_files) for a in argv])
    assert code == EXIT_CODES["malformed"] and info["error"] == "malformed.kind", info
    assert "this is a" in info["message"] and ", not a" in info["message"]


def test_an_array_of_the_wrong_dtype_is_an_input_error_not_a_kind(capsys, demo_files, tmp_path):
    np.save(tmp_path / "f.npy", np.zeros((1, 1, 8, 8), np.float32))
    code, info = cvmvm_json(capsys, ["run", str(demo_files / "digits.cvm"), "--input", f"data={tmp_path / 'f.npy'}"])
    assert code == EXIT_CODES["input"] and info["error"] == "input.dtype"


@pytest.mark.parametrize("values, bounds", [([np.inf, -np.inf], ("-inf", "inf")), ([np.nan, np.nan], ("nan", "nan")),
                                            ([np.nan, 2.5, -1.0], (-1.0, 2.5))])
def test_show_gives_float_bounds_json_can_hold(capsys, tmp_path, values, bounds):
    # Defect: --json raised ValueError on inf (internal.bug), and NaN only warned on stderr.
    np.save(tmp_path / "f.npy", np.array(values))
    status, info = cvmvm_json(capsys, ["show", str(tmp_path / "f.npy")])
    assert status == 0 and (info["min"], info["max"]) == bounds
    assert main(["show", str(tmp_path / "f.npy")]) == 0 and capsys.readouterr().err == ""
