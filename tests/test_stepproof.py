"""Step proofs: prove any instruction, check it alone, and refuse every altered byte or tensor."""

from __future__ import annotations

import dataclasses

import msgpack
import numpy as np
import pytest

from serializer.records import stepproof as proof_codec
from cvmvm.tx import stepproof
from cvmvm.cli.common import EXIT_CODES
from cvmvm.tx.store import Store
from cvmvm.vm.trace import Tracer, trace_layout
from cvmvm.vm.execute import execute
from isa.attrs import attr_fields
from isa.errors import CvmError
from isa.types import TensorType
from serializer.hashing import INSTR, leaf_hash, merkle_proof, tensor_hash
from tests.test_receipt import REPO, cli_json, digits_model, mlp_model, pair_model

X = {"x": np.array([[5, -100, 120, 7]], dtype=np.int32)}


def proof_of(model, inputs, step):
    proof, root = stepproof.prove_step(model, inputs, step)
    return proof, root


def valid(checks) -> bool:
    return all(c.ok for c in checks)


def failed(checks) -> list[str]:
    return [c.name for c in checks if not c.ok]


@pytest.mark.parametrize("step", range(4))
def test_every_step_of_a_small_model_proves(step):
    model = mlp_model()
    proof, root = proof_of(model, X, step)
    assert root == model.run(X, trace=True).trace.root
    back = proof_codec.decode(proof_codec.encode(proof))
    assert proof_codec.encode(back) == proof_codec.encode(proof)
    checks = stepproof.check_step(back, root, model)
    assert valid(checks), failed(checks)


def test_multi_input_multi_output_and_digits_steps():
    model = pair_model()
    inputs = {"a": np.array([[1, 2, 3], [4, 5, 6]], np.int32), "b": np.array([[7, 8, 9], [1, 1, 1]], np.int32)}
    for step in range(2):
        proof, root = proof_of(model, inputs, step)
        assert valid(stepproof.check_step(proof_codec.decode(proof_codec.encode(proof)), root, model))
    digits = digits_model()
    image = np.load(REPO / "fixtures" / "models" / "digits" / "test_inputs.npy")[3]
    for step in (0, 2, 4, 8, 12):
        proof, root = proof_of(digits, {"data": image}, step)
        assert valid(stepproof.check_step(proof_codec.decode(proof_codec.encode(proof)), root, digits))
        assert valid(stepproof.check_step(proof_codec.decode(proof_codec.encode(proof)), root))


def test_wire_layout():
    proof, _ = proof_of(mlp_model(), X, 3)
    wire = msgpack.unpackb(proof_codec.encode(proof))
    assert list(wire) == ["format", "version", "model_hash", "leaves", "step", "op", "attrs", "inputs", "outputs"]
    assert list(wire["inputs"][0]) == ["tensor", "kind", "index", "output", "node", "dtype", "shape", "precision",
                                       "data", "path"]
    assert list(wire["outputs"][0]) == ["tensor", "dtype", "shape", "precision", "hash", "path"]
    assert list(wire["attrs"]) == [f.name for f in attr_fields(type(proof.attrs))]
    assert (wire["attrs"]["precision"], wire["attrs"]["shift_bit"], wire["leaves"], wire["step"]) == (8, 4, 8, 3)


@pytest.mark.parametrize("step", [1, 3])
@pytest.mark.parametrize("mask", [0x01, 0x80])
def test_every_altered_byte_is_refused(step, mask):
    model = mlp_model()
    proof, root = proof_of(model, X, step)
    data = proof_codec.encode(proof)
    for i in range(len(data)):
        tampered = bytearray(data)
        tampered[i] ^= mask
        try:
            altered = proof_codec.decode(bytes(tampered))
        except CvmError as e:
            assert e.family in ("malformed", "invalid", "limit"), (i, e.code)
            continue
        assert not valid(stepproof.check_step(altered, root, model)), f"byte {i} altered, proof still valid"
        assert not valid(stepproof.check_step(altered, root)), f"byte {i} altered, valid against the root alone"


def test_an_altered_input_tensor_is_refused():
    model = mlp_model()
    proof, root = proof_of(model, X, 1)
    first = proof.inputs[0]
    value = first.value.copy()
    value[0, 0] += 1
    altered = dataclasses.replace(proof, inputs=(dataclasses.replace(first, value=value), *proof.inputs[1:]))
    # Authenticated first: an input that is not in the trace is never run.
    checks = stepproof.check_step(proof_codec.decode(proof_codec.encode(altered)), root, model)
    assert failed(checks) == ["input 0 in trace"]
    assert not any(c.name.startswith("output") and "value" in c.name or c.name == "instruction" for c in checks)


def test_a_wrong_root_or_model_is_refused():
    model = mlp_model()
    proof, root = proof_of(model, X, 2)
    assert "output 0 in trace" in failed(stepproof.check_step(proof, b"\x00" * 32, model))
    assert failed(stepproof.check_step(proof, root, pair_model())) == ["model instruction"]


def test_a_wrong_result_in_the_trace_is_proven():
    """A node that recorded a wrong output for step 2: the proof's inclusion holds, re-execution does not."""
    model = mlp_model()
    program = model.program
    tracer = Tracer(program, model.model_hash)
    kept = {}
    step = program.steps[2]

    def observe(t, value):
        tracer(t, value)
        kept[t] = value

    execute(program, X, observe)
    out = step.outputs[0]
    tracer.digests[out] = tensor_hash(kept[out] + 1)  # the node's wrong result
    trace = tracer.trace()
    leaves, root = trace.leaves, trace.root
    proof, _ = proof_of(model, X, 2)
    claims = (dataclasses.replace(proof.outputs[0], digest=tracer.digests[out], path=tuple(merkle_proof(leaves, out))),)
    inputs = tuple(dataclasses.replace(o, path=tuple(merkle_proof(leaves, o.tensor))) for o in proof.inputs)
    fraud = dataclasses.replace(proof, inputs=inputs, outputs=claims)
    assert leaves[out] == leaf_hash(out, INSTR, 2, 0, program.types[out].precision, trace_layout(program).nodes[out],
                                    tracer.digests[out])
    assert failed(stepproof.check_step(fraud, root, model)) == ["output 0 value"]


def test_attribute_and_type_changes_are_refused():
    model = mlp_model()
    proof, root = proof_of(model, X, 3)
    shifted = dataclasses.replace(proof, attrs=dataclasses.replace(proof.attrs, shift_bit=5))
    assert "model instruction" in failed(stepproof.check_step(shifted, root, model))
    assert "output 0 in trace" in failed(stepproof.check_step(shifted, root))  # the root binds the attributes
    first = proof.inputs[0]
    narrow = dataclasses.replace(first, type=TensorType(first.type.shape, 2))
    checks = stepproof.check_step(dataclasses.replace(proof, inputs=(narrow,)), root, model)
    # The leaf commits to the precision: refused by the root, before anything is re-executed.
    assert "input 0 in trace" in failed(checks) and "model instruction" in failed(checks)
    assert "instruction" not in [c.name for c in checks]


def _code(data: bytes) -> str:
    with pytest.raises(CvmError) as e:
        proof_codec.decode(data)
    return e.value.code


def test_malformed_proofs_are_rejected():
    proof, _ = proof_of(mlp_model(), X, 1)
    data = proof_codec.encode(proof)
    wire = msgpack.unpackb(data)
    assert _code(data + b"\x00") == "malformed.step_proof"
    assert _code(data[:-1]) == "malformed.step_proof"
    assert _code(data.replace(b"\xa6format", b"\xd9\x06format", 1)) == "malformed.noncanonical"
    for bad in ({**wire, "version": 2}, {**wire, "op": 999}, {**wire, "leaves": 0},
                {**wire, "outputs": []}, {**wire, "attrs": {}},
                {**wire, "inputs": [{**wire["inputs"][0], "data": b"\x00"}]},
                {**wire, "inputs": [{**wire["inputs"][0], "path": [b"\x00" * 31]}]},
                {**wire, "inputs": [{**wire["inputs"][0], "tensor": wire["leaves"]}]},
                {**wire, "outputs": [{**wire["outputs"][0], "hash": b""}]},
                {k: wire[k] for k in reversed(list(wire))}):
        assert _code(msgpack.packb(bad, use_bin_type=True)) == "malformed.step_proof"


def test_leaf_counts_and_positions_are_bounded_at_decode():
    # Defect: 2^32 leaves decoded, then struct.error escaped from the root's u32 leaf count.
    proof, root = proof_of(mlp_model(), X, 1)
    wire = msgpack.unpackb(proof_codec.encode(proof))
    top = (1 << 32) - 1
    for bad in ({**wire, "leaves": 1 << 32}, {**wire, "step": 1 << 32}, {**wire, "leaves": 1 << 63},
                {**wire, "inputs": [{**wire["inputs"][0], "index": 1 << 32}]},
                {**wire, "inputs": [{**wire["inputs"][0], "output": 1 << 32}]}):
        assert _code(msgpack.packb(bad, use_bin_type=True)) == "malformed.step_proof"
    for edge in ({**wire, "leaves": top}, {**wire, "step": top},
                 {**wire, "inputs": [{**wire["inputs"][0], "index": top, "output": top}, *wire["inputs"][1:]]}):
        decoded = proof_codec.decode(msgpack.packb(edge, use_bin_type=True))
        assert not valid(stepproof.check_step(decoded, root))


def test_cli_prove_and_check(capsys, tmp_path):
    model = mlp_model()
    (tmp_path / "m.cvm").write_bytes(model.canonical_bytes)
    np.save(tmp_path / "x.npy", X["x"])
    Store(tmp_path / "store").add(model)
    code, info = cli_json(capsys, ["prove-step", str(tmp_path / "m.cvm"), "--input", f"x={tmp_path / 'x.npy'}",
                                   "--step", "1", "--out", str(tmp_path / "proof")])
    assert code == 0 and info["op"] == "dense"
    root = info["trace_root"]
    for where in (["--model", str(tmp_path / "m.cvm")], ["--store", str(tmp_path / "store")]):
        code, info = cli_json(capsys, ["check-step", str(tmp_path / "proof"), "--root", root, *where])
        assert code == 0 and info["valid"]
    code, info = cli_json(capsys, ["check-step", str(tmp_path / "proof"), "--root", "00" * 32,
                                   "--model", str(tmp_path / "m.cvm")])
    assert code == 1 and not info["valid"]
    code, info = cli_json(capsys, ["check-step", str(tmp_path / "proof"), "--root", root])
    assert code == 0 and info["valid"]  # the root alone binds the instruction: a light client needs no model
    code, info = cli_json(capsys, ["check-step", str(tmp_path / "proof"), "--root", "xyz", "--model", "m"])
    assert code == EXIT_CODES["usage"] and info["error"] == "usage.argument"
    code, info = cli_json(capsys, ["prove-step", str(tmp_path / "m.cvm"), "--input", f"x={tmp_path / 'x.npy'}",
                                   "--step", "4", "--out", str(tmp_path / "p2")])
    assert code == EXIT_CODES["input"] and info["error"] == "input.step"
    (tmp_path / "proof").write_bytes((tmp_path / "proof").read_bytes()[:-1])
    code, info = cli_json(capsys, ["check-step", str(tmp_path / "proof"), "--root", root,
                                   "--model", str(tmp_path / "m.cvm")])
    assert code == EXIT_CODES["malformed"] and info["error"] == "malformed.step_proof"


def test_every_instruction_of_the_perf_model_proves():
    import sys
    sys.path.insert(0, str(REPO / "fixtures"))
    import generate
    model = generate.load_fixture_model("perf")
    x = {"data": generate.load_fixture_inputs("perf")[0]}
    roots = set()
    for step in range(len(model.program.steps)):
        proof, root = proof_of(model, x, step)
        roots.add(root)
        decoded = proof_codec.decode(proof_codec.encode(proof))
        assert valid(stepproof.check_step(decoded, root)), step
    assert len(roots) == 1


def test_one_instruction_checks_each_value_against_its_type():
    from cvmvm.vm.verify import verify_instruction
    from isa.table import OP_BY_NAME
    from isa.attrs import parse_attrs
    relu = OP_BY_NAME["relu"]
    attrs = parse_attrs(relu.attrs, {}, fill_defaults=True)
    for t, value, code in ((TensorType((2, 2), 8), np.zeros((4,), np.int32), "input.shape"),
                           (TensorType((4,), 8), np.zeros((2, 2), np.int32), "input.shape"),
                           (TensorType((4,), None, "float32"), np.zeros((4,), np.float64), "input.dtype")):
        with pytest.raises(CvmError) as e:
            verify_instruction(relu, attrs, [(t, value)])
        assert e.value.code == code
