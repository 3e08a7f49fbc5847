"""Step proofs (docs/FORMAT.md section 9): whole-instruction and element proofs of any step,
checked against the trace root and program root alone, with the three verdicts -- correct,
wrong (fraud), or an error with its code -- and every altered byte refused."""

from __future__ import annotations

import dataclasses

import msgpack
import numpy as np
import pytest

from isa.errors import CvmError
from isa.types import TensorType
from serializer.hashing import tensor_commitment
from serializer.records import stepproof as proof_codec
from serializer.records.stepproof import Chunk
from cvmvm.cli.common import EXIT_CODES
from cvmvm.vm.execute import execute
from cvmvm.vm.trace import make_trace
from cvmvm.vm.verify import Limits
from cvmvm.tx import stepproof
from tests.test_receipt import REPO, cli_json, digits_model, mlp_model, pair_model

X = {"x": np.array([[5, -100, 120, 7]], dtype=np.int32)}


def roots(model, trace) -> tuple[bytes, bytes]:
    return trace.root, model.program_root


def checked(model, inputs, step, element=None) -> stepproof.Verdict:
    proof, trace = stepproof.prove_step(model, inputs, step, element)
    decoded = proof_codec.decode(proof_codec.encode(proof))
    assert proof_codec.encode(decoded) == proof_codec.encode(proof)
    return stepproof.check_step(decoded, *roots(model, trace))


def code_of(fn, *args) -> str:
    with pytest.raises(CvmError) as e:
        fn(*args)
    return e.value.code


@pytest.mark.parametrize("step", range(4))
def test_every_step_of_a_small_model_proves_whole_and_by_element(step):
    model = mlp_model()
    assert checked(model, X, step).correct
    size = model.program.steps[step].out_types[0].size
    for element in range(size):
        verdict = checked(model, X, step, element)
        assert verdict.correct and verdict.element == element


def test_multi_input_multi_output_and_digits_steps():
    model = pair_model()
    inputs = {"a": np.array([[1, 2, 3], [4, 5, 6]], np.int32), "b": np.array([[7, 8, 9], [1, 1, 1]], np.int32)}
    for step in range(2):
        assert checked(model, inputs, step).correct and checked(model, inputs, step, 1).correct
    digits = digits_model()
    image = np.load(REPO / "fixtures" / "models" / "digits" / "test_inputs.npy")[3]
    for step in range(len(digits.program.steps)):
        assert checked(digits, {"data": image}, step).correct
        assert checked(digits, {"data": image}, step, 3).correct


def test_wire_layout():
    proof, _ = stepproof.prove_step(mlp_model(), X, 3, 1)
    wire = msgpack.unpackb(proof_codec.encode(proof))
    assert list(wire) == ["format", "version", "program", "inputs", "step", "instruction", "path", "element",
                          "operands", "results"]
    assert (wire["version"], wire["program"], wire["step"], wire["element"]) == (3, [1, 3, 4, 1, 8], 3, 1)
    assert list(wire["operands"][0]) == ["data", "chunks", "path"]
    assert list(wire["operands"][0]["chunks"][0]) == ["index", "data", "path"]
    assert list(wire["results"][0]) == ["commitment", "chunk", "path"]
    whole, _ = stepproof.prove_step(mlp_model(), X, 3)
    wire = msgpack.unpackb(proof_codec.encode(whole))
    assert wire["element"] is None and wire["operands"][0]["chunks"] == [] and wire["results"][0]["chunk"] is None


def committed_run(model, inputs):
    """Every tensor of a run, by tensor id."""
    env: dict[int, np.ndarray] = {}
    execute(model.program, inputs, env.__setitem__)
    return [env[t] for t in range(len(model.program.types))]


def wrong_run(model, inputs, step, index):
    """The run with element ``index`` of step ``step``'s output off by one, committed consistently."""
    values = committed_run(model, inputs)
    t = model.program.steps[step].outputs[0]
    values[t] = values[t].copy()
    values[t].reshape(-1)[index] += 1
    commitments = [tensor_commitment(v, model.program.types[u]) for u, v in enumerate(values)]
    return values, make_trace(model.program, commitments)


@pytest.mark.parametrize("step", range(4))
def test_a_wrong_result_is_proven_wrong_whole_and_at_its_element(step):
    model = mlp_model()
    values, trace = wrong_run(model, X, step, 0)
    kept = dict(enumerate(values))
    whole = stepproof.make_proof(model.program, trace, kept, step)
    verdict = stepproof.check_step(whole, *roots(model, trace))
    assert not verdict.correct and verdict.element is None
    wrong = stepproof.check_step(stepproof.make_proof(model.program, trace, kept, step, 0), *roots(model, trace))
    assert not wrong.correct and wrong.element == 0
    if model.program.steps[step].out_types[0].size > 1:
        right = stepproof.check_step(stepproof.make_proof(model.program, trace, kept, step, 1), *roots(model, trace))
        assert right.correct


@pytest.mark.parametrize("element", [None, 2])
@pytest.mark.parametrize("mask", [0x01, 0x80])
def test_every_altered_byte_is_refused(element, mask):
    """A fraud proof with any byte altered: an error, or no longer proving fraud."""
    model = mlp_model()
    values, trace = wrong_run(model, X, 1, 2)
    data = proof_codec.encode(stepproof.make_proof(model.program, trace, dict(enumerate(values)), 1, element))
    assert not stepproof.check_step(proof_codec.decode(data), *roots(model, trace)).correct
    for i in range(len(data)):
        tampered = bytearray(data)
        tampered[i] ^= mask
        try:
            verdict = stepproof.check_step(proof_codec.decode(bytes(tampered)), *roots(model, trace))
        except CvmError as e:
            assert e.family in ("malformed", "input", "limit"), (i, e.code)
            continue
        assert verdict.correct, f"byte {i} altered, still a proof of fraud"


def test_nothing_is_computed_before_the_proof_is_authenticated(monkeypatch):
    """Every size, path and root is checked first: a proof that is not included never reaches
    verify_instruction or execution, whatever its operands say."""
    model = mlp_model()
    proof, trace = stepproof.prove_step(model, X, 1)
    trace_root, program_root = roots(model, trace)

    def never(*args, **kwargs):
        raise AssertionError("re-executed before authentication")

    first = proof.operands[0]
    altered = dataclasses.replace(proof, operands=(dataclasses.replace(first, data=bytes([first.data[0] ^ 1])
                                                                        + first.data[1:]), *proof.operands[1:]))
    monkeypatch.setattr(stepproof, "verify_instruction", never)
    monkeypatch.setattr(stepproof, "execute", never)
    assert code_of(stepproof.check_step, altered, trace_root, program_root) == "input.not_included"
    assert code_of(stepproof.check_step, proof, b"\x01" * 32, program_root) == "input.not_included"
    assert code_of(stepproof.check_step, proof, trace_root, b"\x01" * 32) == "input.not_included"


def test_re_execution_is_held_to_the_run_limits():
    """An authentic whole-instruction proof re-executes within the limits given: over them is
    limit.*, raised as it is (not a verdict, not a malformed proof); the record's own static
    check is the ISA's rules only."""
    model = mlp_model()
    proof, trace = stepproof.prove_step(model, X, 1)
    assert code_of(stepproof.check_step, proof, *roots(model, trace), Limits(memory=1000)) == "limit.memory"
    assert code_of(stepproof.check_step, proof, *roots(model, trace), Limits(work=1000)) == "limit.work"
    assert stepproof.check_step(proof, *roots(model, trace), Limits(memory=None, work=None)).correct


def test_an_element_is_held_to_the_run_limits_before_its_footprint_is_built(monkeypatch):
    # Defect: element proofs ignored the limits (one element of a sum over 2^20 values: 32 MB, 0.9 s).
    model = mlp_model()
    proof, trace = stepproof.prove_step(model, X, 1, element=0)
    assert stepproof.check_step(proof, *roots(model, trace)).correct
    monkeypatch.setattr(stepproof.elements, "footprint", lambda *a: pytest.fail("the footprint was built"))
    assert code_of(stepproof.check_step, proof, *roots(model, trace), Limits(memory=1000)) == "limit.memory"
    assert code_of(stepproof.check_step, proof, *roots(model, trace), Limits(work=10)) == "limit.work"


def test_error_codes():
    model = mlp_model()
    proof, trace = stepproof.prove_step(model, X, 1, 1)
    trace_root, program_root = roots(model, trace)
    check = stepproof.check_step
    assert code_of(check, proof, b"\0" * 32, program_root) == "input.not_included"
    assert code_of(check, proof, trace_root, b"\0" * 32) == "input.not_included"
    assert code_of(check, dataclasses.replace(proof, step=2), trace_root, program_root) == "malformed.step_proof"
    assert code_of(check, dataclasses.replace(proof, step=4), trace_root, program_root) == "malformed.step_proof"
    assert code_of(check, dataclasses.replace(proof, element=3), trace_root, program_root) == "malformed.step_proof"
    assert code_of(check, dataclasses.replace(proof, inputs=()), trace_root, program_root) == "malformed.step_proof"
    assert code_of(check, dataclasses.replace(proof, record=proof.record[:-1]), trace_root,
                   program_root) == "malformed.step_proof"
    assert code_of(check, dataclasses.replace(proof, path=proof.path[:-1]), trace_root,
                   program_root) == "input.not_included"
    from serializer.records.program import decode_instr, instr_record
    from isa.types import TensorType
    r = decode_instr(proof.record, proof.counts, "step_proof")
    (out, t), = r.outputs
    params = {u: c for (u, _), c in zip(r.inputs, r.params) if c is not None}
    assert instr_record(r.index, r.op, r.inputs, r.outputs, r.attrs, params) == proof.record
    lying = instr_record(r.index, r.op, r.inputs, [(out, TensorType(t.shape, t.precision - 1))], r.attrs, params)
    assert code_of(check, dataclasses.replace(proof, record=lying), trace_root, program_root) == "malformed.step_proof"
    first = proof.operands[0]
    chunk = first.chunks[0]
    short = dataclasses.replace(first, chunks=(Chunk(0, chunk.data[:-1], chunk.path),))
    assert code_of(check, dataclasses.replace(proof, operands=(short, *proof.operands[1:])), trace_root,
                   program_root) == "malformed.step_proof"
    none = dataclasses.replace(first, chunks=())
    assert code_of(check, dataclasses.replace(proof, operands=(none, *proof.operands[1:])), trace_root,
                   program_root) == "malformed.step_proof"
    flipped = dataclasses.replace(first, chunks=(Chunk(0, bytes([chunk.data[0] ^ 1]) + chunk.data[1:], chunk.path),))
    assert code_of(check, dataclasses.replace(proof, operands=(flipped, *proof.operands[1:])), trace_root,
                   program_root) == "input.not_included"
    assert code_of(check, dataclasses.replace(proof, operands=proof.operands[:2]), trace_root,
                   program_root) == "malformed.step_proof"
    # Built by hand without its result (the decoder refuses such bytes): was a bare ValueError.
    assert code_of(check, dataclasses.replace(proof, results=()), trace_root, program_root) == "malformed.step_proof"
    assert code_of(check, dataclasses.replace(proof, results=proof.results * 2), trace_root,
                   program_root) == "malformed.step_proof"
    whole, _ = stepproof.prove_step(model, X, 1)
    data = whole.operands[0]
    assert code_of(check, dataclasses.replace(whole, operands=(dataclasses.replace(data, data=data.data + b"\0"),
                                                               *whole.operands[1:])),
                   trace_root, program_root) == "malformed.step_proof"


@pytest.mark.parametrize("element", [None, 1])
def test_a_param_operand_is_authenticated_by_its_record(element):
    """An operand that is a param has its commitment in the instruction record (which the
    program root authenticates): it carries no path, and its data or chunks must give exactly
    that commitment."""
    from serializer.records.program import decode_instr, instr_record
    model = mlp_model()
    proof, trace = stepproof.prove_step(model, X, 1, element)   # dense(relu(x), w, b): w and b are params
    check = stepproof.check_step
    types, values = model.program.types, committed_run(model, X)
    r = decode_instr(proof.record, proof.counts, "step_proof")
    assert [u for u, _ in r.inputs] == [4, 1, 2]
    assert r.params == (None, tensor_commitment(values[1], types[1]), tensor_commitment(values[2], types[2]))
    assert proof.operands[0].path and not proof.operands[1].path and not proof.operands[2].path
    assert check(proof, *roots(model, trace)).correct
    w = proof.operands[1]
    with_path = dataclasses.replace(w, path=(trace.path(1)[0],))
    assert code_of(check, dataclasses.replace(proof, operands=(proof.operands[0], with_path, proof.operands[2])),
                   *roots(model, trace)) == "input.not_included"
    if element is None:
        other = dataclasses.replace(w, data=bytes([w.data[0] ^ 1]) + w.data[1:])
    else:
        c = w.chunks[0]
        other = dataclasses.replace(w, chunks=(Chunk(c.index, bytes([c.data[0] ^ 1]) + c.data[1:], c.path),))
    assert code_of(check, dataclasses.replace(proof, operands=(proof.operands[0], other, proof.operands[2])),
                   *roots(model, trace)) == "input.not_included"
    # A record giving the param another commitment is not the program's record.
    lying = instr_record(r.index, r.op, r.inputs, r.outputs, r.attrs, {1: b"\1" * 32, 2: r.params[2]})
    assert len(lying) == len(proof.record) and lying != proof.record
    assert code_of(check, dataclasses.replace(proof, record=lying), *roots(model, trace)) == "input.not_included"
    # Read with other counts, the same bytes are not a record: where a param's commitment is
    # depends on which ids are params, which the program root's counts fix.
    for counts in ((1, 1, 4, 1, 8), (1, 4, 4, 1, 8)):
        assert code_of(decode_instr, proof.record, counts, "step_proof") == "malformed.step_proof"


def test_later_paths_are_shared_with_the_first():
    """The first trace path of a proof, and the first chunk path of an operand, are full; every
    later one stops where it meets the first (FORMAT.md section 9): a full path there is refused."""
    from serializer.hashing import audit_path, chunk_leaves, tensor_body, tree_levels
    model = mlp_model()
    proof, trace = stepproof.prove_step(model, X, 1, 1)   # dense(tensor 4, w, b) -> tensor 5, 4's sibling
    assert len(proof.operands[0].path) == 3 and proof.results[0].path == ()
    assert stepproof.check_step(proof, *roots(model, trace)).correct
    full = dataclasses.replace(proof.results[0], path=tuple(trace.path(5)))
    assert code_of(stepproof.check_step, dataclasses.replace(proof, results=(full,)),
                   *roots(model, trace)) == "input.not_included"
    # digits' second convolution at output channel 7: its weights straddle chunks 1 and 2.
    digits = digits_model()
    image = np.load(REPO / "fixtures" / "models" / "digits" / "test_inputs.npy")[0]
    proof, trace = stepproof.prove_step(digits, {"data": image}, 6, 119)
    weight = proof.operands[1]
    assert [c.index for c in weight.chunks] == [1, 2] and [len(c.path) for c in weight.chunks] == [3, 1]
    assert stepproof.check_step(proof, *roots(digits, trace)).correct
    values = committed_run(digits, {"data": image})
    w = tensor_body(values[4], digits.program.types[4])
    unshared = dataclasses.replace(weight.chunks[1], path=tuple(audit_path(tree_levels(chunk_leaves(w, 256)), 2)))
    altered = dataclasses.replace(weight, chunks=(weight.chunks[0], unshared))
    assert code_of(stepproof.check_step, dataclasses.replace(proof, operands=(proof.operands[0], altered,
                                                                              proof.operands[2])),
                   *roots(digits, trace)) == "input.not_included"


def test_a_whole_proof_of_two_results_shares_their_trace_paths():
    """max_pool's two results (values, indices) are tensors 1 and 2: the second's trace path is
    shared with the first's (empty: they are siblings); its full path is refused."""
    from cvmvm.vm.api import single_op_model
    x = np.arange(2 * 3 * 4 * 4, dtype=np.float32).reshape(2, 3, 4, 4)
    attrs = {"kernel_shape": (2, 2), "strides": (2, 2), "dilations": (1, 1), "pads": (0, 0, 0, 0),
             "auto_pad": "NOTSET", "ceil_mode": 0, "storage_order": 0, "index_axis": 2, "index_dtype": "int32"}
    model, feeds = single_op_model("max_pool", [x], attrs)
    proof, trace = stepproof.prove_step(model, feeds, 0)
    assert [len(r.path) for r in proof.results] == [2, 0]
    assert stepproof.check_step(proof, *roots(model, trace)).correct
    full = dataclasses.replace(proof.results[1], path=tuple(trace.path(2)))
    assert code_of(stepproof.check_step, dataclasses.replace(proof, results=(proof.results[0], full)),
                   *roots(model, trace)) == "input.not_included"


def test_ops_without_element_proofs():
    model = pair_model()
    inputs = {"a": np.array([[1, 2, 3], [4, 5, 6]], np.int32), "b": np.array([[7, 8, 9], [1, 1, 1]], np.int32)}
    import cvmvm
    model = cvmvm.load(model.canonical_bytes)
    assert checked(model, inputs, 0).correct
    from cvmvm.vm.api import single_op_model
    one, feeds = single_op_model("transpose", [np.arange(6, dtype=np.int32).reshape(2, 3)], {"axes": (1, 0)}, [8])
    assert code_of(stepproof.prove_step, one, feeds, 0, 0) == "input.not_covered"
    assert checked(one, feeds, 0).correct   # a whole-instruction proof settles it off-chain


@pytest.mark.parametrize("version", [1, 2])
def test_proofs_of_older_formats_are_refused_by_their_version(version):
    proof, _ = stepproof.prove_step(mlp_model(), X, 1)
    wire = msgpack.unpackb(proof_codec.encode(proof))
    with pytest.raises(CvmError) as e:
        proof_codec.decode(msgpack.packb({**wire, "version": version}, use_bin_type=True))
    assert e.value.code == "malformed.step_proof" and f"version {version}" in e.value.message


def _code(data: bytes) -> str:
    with pytest.raises(CvmError) as e:
        proof_codec.decode(data)
    return e.value.code


def test_malformed_proofs_are_rejected():
    proof, _ = stepproof.prove_step(mlp_model(), X, 1, 0)
    data = proof_codec.encode(proof)
    wire = msgpack.unpackb(data)
    assert _code(data + b"\x00") == "malformed.step_proof"
    assert _code(data[:-1]) == "malformed.step_proof"
    assert _code(data.replace(b"\xa6format", b"\xd9\x06format", 1)) == "malformed.noncanonical"
    operand = wire["operands"][0]
    for bad in ({**wire, "version": 4}, {**wire, "program": [1, 2, 3]}, {**wire, "program": [1, 2, 3, 4, -1]},
                {**wire, "element": -1}, {**wire, "element": True}, {**wire, "results": []},
                {**wire, "results": [{**wire["results"][0], "chunk": None}]},
                {**wire, "results": [{**wire["results"][0], "commitment": b"\0" * 32}]},
                {**wire, "operands": [{**operand, "data": b"\x00"}]},
                {**wire, "operands": [{**operand, "path": [b"\x00" * 31]}]},
                {**wire, "operands": [{**operand, "chunks": [{**operand["chunks"][0], "index": -1}]}]},
                {**wire, "element": None},
                {**wire, "inputs": [b"\0" * 33]},
                {k: wire[k] for k in reversed(list(wire))}):
        assert _code(msgpack.packb(bad, use_bin_type=True)) == "malformed.step_proof"


def test_counts_and_positions_are_bounded_at_decode():
    # Defect (format 1): 2^32 leaves decoded, then struct.error escaped from the root's u32 leaf
    # count.  Every count, step, element and chunk index is u32 in the records and the calldata.
    proof, trace = stepproof.prove_step(mlp_model(), X, 1, 0)
    wire = msgpack.unpackb(proof_codec.encode(proof))
    top = (1 << 32) - 1
    operand = wire["operands"][0]
    chunk = operand["chunks"][0]
    for value in (1 << 32, 1 << 63):
        for bad in ({**wire, "program": [value, *wire["program"][1:]]}, {**wire, "program": [*wire["program"][:4], value]},
                    {**wire, "step": value}, {**wire, "element": value},
                    {**wire, "operands": [{**operand, "chunks": [{**chunk, "index": value}]}, *wire["operands"][1:]]}):
            assert _code(msgpack.packb(bad, use_bin_type=True)) == "malformed.step_proof"
    for edge in ({**wire, "program": [*wire["program"][:4], top]}, {**wire, "step": top}, {**wire, "element": top},
                 {**wire, "operands": [{**operand, "chunks": [{**chunk, "index": top}]}, *wire["operands"][1:]]}):
        decoded = proof_codec.decode(msgpack.packb(edge, use_bin_type=True))
        assert code_of(stepproof.check_step, decoded, *roots(mlp_model(), trace)) in (
            "malformed.step_proof", "input.not_included")


def test_cli_prove_and_check(capsys, tmp_path):
    model = mlp_model()
    (tmp_path / "m.cvm").write_bytes(model.canonical_bytes)
    np.save(tmp_path / "x.npy", X["x"])
    base = ["prove-step", str(tmp_path / "m.cvm"), "--input", f"x={tmp_path / 'x.npy'}", "--step", "1"]
    code, info = cli_json(capsys, [*base, "--out", str(tmp_path / "proof")])
    assert code == 0 and info["op"] == "dense" and info["element"] is None
    trace_root, program_root = info["trace_root"], info["program_root"]
    assert program_root == model.program_root.hex()
    for where in (["--model", str(tmp_path / "m.cvm")], ["--program-root", program_root]):
        code, info = cli_json(capsys, ["check-step", str(tmp_path / "proof"), "--root", trace_root, *where])
        assert code == 0 and info["verdict"] == "correct"
    code, info = cli_json(capsys, [*base, "--element", "2", "--out", str(tmp_path / "e"),
                                   "--calldata", str(tmp_path / "c.hex"), "--commitment-id", "7"])
    assert code == 0 and info["element"] == 2
    calldata = bytes.fromhex((tmp_path / "c.hex").read_text().strip()[2:])
    element = proof_codec.decode((tmp_path / "e").read_bytes())
    assert calldata == proof_codec.challenge_calldata(7, proof_codec.calldata_proof(element))
    code, info = cli_json(capsys, ["check-step", str(tmp_path / "e"), "--root", trace_root, "--program-root",
                                   program_root])
    assert code == 0 and info["verdict"] == "correct" and info["element"] == 2
    code, info = cli_json(capsys, ["check-step", str(tmp_path / "proof"), "--root", "00" * 32,
                                   "--program-root", program_root])
    assert code == EXIT_CODES["input"] and info["error"] == "input.not_included"
    code, info = cli_json(capsys, ["check-step", str(tmp_path / "proof"), "--root", trace_root])
    assert code == EXIT_CODES["usage"] and info["error"] == "usage.conflict"
    code, info = cli_json(capsys, ["check-step", str(tmp_path / "proof"), "--root", "xyz", "--program-root", "ab"])
    assert code == EXIT_CODES["usage"] and info["error"] == "usage.argument"
    for bad in (["--step", "4", "--out", str(tmp_path / "p2")], ["--step", "1", "--calldata", str(tmp_path / "c2")],
                ["--step", "1", "--element", "9", "--out", str(tmp_path / "p3")], ["--step", "1"]):
        code, info = cli_json(capsys, ["prove-step", str(tmp_path / "m.cvm"), "--input", f"x={tmp_path / 'x.npy'}",
                                       *bad])
        assert info["error"] in ("input.step", "usage.conflict", "input.element"), bad
        assert code == EXIT_CODES[info["error"].split(".")[0]], bad
    (tmp_path / "proof").write_bytes((tmp_path / "proof").read_bytes()[:-1])
    code, info = cli_json(capsys, ["check-step", str(tmp_path / "proof"), "--root", trace_root,
                                   "--model", str(tmp_path / "m.cvm")])
    assert code == EXIT_CODES["malformed"] and info["error"] == "malformed.step_proof"


def test_cli_fraud_verdict(capsys, tmp_path):
    model = mlp_model()
    values, trace = wrong_run(model, X, 2, 1)
    proof = stepproof.make_proof(model.program, trace, dict(enumerate(values)), 2, 1)
    (tmp_path / "fraud").write_bytes(proof_codec.encode(proof))
    code, info = cli_json(capsys, ["check-step", str(tmp_path / "fraud"), "--root", trace.root.hex(),
                                   "--program-root", model.program_root.hex()])
    assert code == 1 and info["verdict"] == "wrong" and (info["step"], info["element"]) == (2, 1)


def test_cli_contract(capsys, tmp_path):
    code, info = cli_json(capsys, ["contract", str(tmp_path / "out")])
    assert code == 0 and "CvmChallenge.bin" in info["files"]
    assert (tmp_path / "out" / "CvmChallenge.sol").read_text().startswith("// SPDX-License-Identifier: MIT")


def test_every_instruction_of_the_perf_model_proves():
    """One run, every instruction proved at element 0 and three of them whole."""
    from tests.fixture_script import generate
    model = generate.load_fixture_model("perf")
    values = committed_run(model, {"data": generate.load_fixture_inputs("perf")[0]})
    trace = make_trace(model.program, [tensor_commitment(v, model.program.types[t]) for t, v in enumerate(values)])
    assert trace.root == model.run({"data": generate.load_fixture_inputs("perf")[0]}, trace=True).trace.root
    kept = dict(enumerate(values))
    for step in range(len(model.program.steps)):
        proof = proof_codec.decode(proof_codec.encode(stepproof.make_proof(model.program, trace, kept, step, 0)))
        assert stepproof.check_step(proof, *roots(model, trace)).correct, step
    for step in (0, 50, 102):
        proof = stepproof.make_proof(model.program, trace, kept, step)
        assert stepproof.check_step(proof, *roots(model, trace)).correct, step


def test_a_disputed_trace_of_other_params_is_not_of_this_model():
    """No instruction outputs a param, so a disputed trace whose first difference is a param's
    commitment has no wrong instruction: it was a bare StopIteration."""
    model = mlp_model()
    values = committed_run(model, X)
    disputed = [tensor_commitment(v, model.program.types[t]) for t, v in enumerate(values)]
    disputed[len(model.program.model.inputs)] = bytes(32)
    claimed = values[model.program.steps[0].outputs[0]]
    assert code_of(stepproof.prove_against, model, X, disputed, claimed) == "input.trace"


def disputed_files(tmp_path, model, inputs, step, index):
    """A dishonest run's trace file and its claimed value of instruction ``step``'s output."""
    from serializer.records.trace import trace_bytes
    from cvmvm.vm.trace import trace_to_json
    values, trace = wrong_run(model, inputs, step, index)
    (tmp_path / "disputed.json").write_bytes(trace_bytes(trace_to_json(model.program, trace, model.model_hash)))
    np.save(tmp_path / "claimed.npy", values[model.program.steps[step].outputs[0]])
    return trace


def test_cli_proves_a_disputed_trace_wrong(capsys, tmp_path):
    """The challenger's flow: the disputed trace and its claimed tensor in, the first wrong
    instruction and element found, a proof of fraud out."""
    model = mlp_model()
    (tmp_path / "m.cvm").write_bytes(model.canonical_bytes)
    np.save(tmp_path / "x.npy", X["x"])
    trace = disputed_files(tmp_path, model, X, 1, 2)
    base = ["prove-step", str(tmp_path / "m.cvm"), "--input", f"x={tmp_path / 'x.npy'}",
            "--against", str(tmp_path / "disputed.json"), "--claimed-output", str(tmp_path / "claimed.npy")]
    code, info = cli_json(capsys, [*base, "--out", str(tmp_path / "fraud"), "--calldata", str(tmp_path / "c.hex"),
                                   "--commitment-id", "0"])
    assert code == 0 and (info["step"], info["element"], info["op"]) == (1, 2, "dense")
    assert info["trace_root"] == trace.root.hex()
    code, info = cli_json(capsys, ["check-step", str(tmp_path / "fraud"), "--root", trace.root.hex(),
                                   "--model", str(tmp_path / "m.cvm")])
    assert code == 1 and info["verdict"] == "wrong"
    code, info = cli_json(capsys, [*base, "--step", "2", "--out", str(tmp_path / "p")])
    assert code == EXIT_CODES["input"] and info["error"] == "input.step"
    np.save(tmp_path / "claimed.npy", np.zeros((1, 3), np.int32))
    code, info = cli_json(capsys, [*base, "--out", str(tmp_path / "p")])
    assert code == EXIT_CODES["input"] and info["error"] == "input.claimed"
    from serializer.records.trace import trace_bytes
    from cvmvm.vm.trace import trace_to_json
    honest = model.run(X, trace=True).trace
    (tmp_path / "disputed.json").write_bytes(trace_bytes(trace_to_json(model.program, honest, model.model_hash)))
    code, info = cli_json(capsys, [*base, "--out", str(tmp_path / "p")])
    assert code == EXIT_CODES["input"] and info["error"] == "input.no_dispute"
    code, info = cli_json(capsys, ["prove-step", str(tmp_path / "m.cvm"), "--input", f"x={tmp_path / 'x.npy'}",
                                   "--against", str(tmp_path / "disputed.json"), "--out", str(tmp_path / "p")])
    assert code == EXIT_CODES["usage"] and info["error"] == "usage.conflict"


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


def test_a_claimed_output_outside_its_type_is_refused_though_it_commits_alike(capsys, tmp_path):
    """A value past the precision wraps into its lane and commits like another (300 like 44 in
    1-byte lanes): the proof would open an element whose committed bytes the honest run shares."""
    model = mlp_model()
    (tmp_path / "m.cvm").write_bytes(model.canonical_bytes)
    np.save(tmp_path / "x.npy", X["x"])
    disputed_files(tmp_path, model, X, 1, 2)
    out = model.program.steps[1].outputs[0]
    p = model.program.types[out].precision
    claimed = np.load(tmp_path / "claimed.npy").astype(np.int64)
    claimed.flat[0] += 1 << (8 if p <= 8 else 16 if p <= 16 else 32)
    assert tensor_commitment(claimed, model.program.types[out]) == \
        tensor_commitment(np.load(tmp_path / "claimed.npy"), model.program.types[out])
    np.save(tmp_path / "claimed.npy", claimed)
    code, info = cli_json(capsys, ["prove-step", str(tmp_path / "m.cvm"), "--input", f"x={tmp_path / 'x.npy'}",
                                   "--against", str(tmp_path / "disputed.json"),
                                   "--claimed-output", str(tmp_path / "claimed.npy"), "--out", str(tmp_path / "p")])
    assert code == EXIT_CODES["input"] and info["error"] == "input.claimed" and "outside" in info["message"]
