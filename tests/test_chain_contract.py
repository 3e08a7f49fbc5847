"""The verifier contract in a real EVM (py-evm through titanoboa): honest elements are never
refuted, a dishonest trace is refuted exactly at its wrong element, any flipped byte of a
proof reverts, and every revert reason is the documented one (docs/FORMAT.md 10.4)."""

from __future__ import annotations

import dataclasses
import json
import random
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

boa = pytest.importorskip("boa")
from eth_abi import encode  # noqa: E402

from isa.errors import CvmError  # noqa: E402
from serializer.hashing import audit_path, leaf_hash, program_root, trace_root, tree_levels  # noqa: E402
from serializer.records.stepproof import (Chunk, Head, Operand, Result, StepProof, calldata_proof,  # noqa: E402
                                          outputs_calldata_proof)
from cvmvm.vm.trace import program_layout  # noqa: E402
from cvmvm.tx import contract, element  # noqa: E402
from cvmvm.tx.stepproof import check_step, chunks_of, prove_outputs  # noqa: E402
from tests.chainkit import (ARTIFACT, VERIFY_OUTPUTS, Run, artifact, instance, reason,  # noqa: E402
                            outputs_verifier as make_outputs_verifier, verifier as make_verifier)

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def verifier():
    return make_verifier(boa)


@pytest.fixture(scope="module")
def digits_run() -> Run:
    return Run.of_fixture("digits")


def check(verifier, run: Run, proof: bytes) -> str | None:
    return verifier(proof, run.roots)


def test_honest_digits_every_instruction_never_refuted(verifier, digits_run):
    rnd = random.Random(17)
    for s in digits_run.program.steps:
        size = s.out_types[0].size
        for index in sorted({0, size - 1, rnd.randrange(size)}):
            assert check(verifier, digits_run, digits_run.calldata(s.index, index)) == "step correct", (s.index, index)


def test_dishonest_digits_refuted_exactly_at_the_changed_element(verifier, digits_run):
    rnd = random.Random(18)
    for s in digits_run.program.steps:
        size = s.out_types[0].size
        index = rnd.randrange(size)
        bad = digits_run.changed(s.index, index)
        assert check(verifier, bad, bad.calldata(s.index, index)) is None, (s.index, index)
        other = (index + 1) % size
        assert check(verifier, bad, bad.calldata(s.index, other)) == "step correct", (s.index, other)


def largest_instances(program) -> list:
    """Per op kind, the instruction with the most work per output element (ties: the larger output)."""
    best: dict[str, tuple] = {}
    for s in program.steps:
        key = (s.cost // s.out_types[0].size, s.out_types[0].size)
        if s.op.name not in best or key > best[s.op.name][0]:
            best[s.op.name] = (key, s)
    return [v[1] for v in best.values()]


@pytest.mark.parametrize("name", ["perf", "perf-large"])
def test_honest_perf_models_never_refuted(verifier, name):
    """Every op kind at its largest instance (the largest conv2d included) and one more instance
    of each kind, at a random element and at the centre."""
    run = Run.of_fixture(name)
    rnd = random.Random(name)
    steps = {s.index: s for s in largest_instances(run.program)}
    kinds: dict[str, list] = {}
    for s in run.program.steps:
        kinds.setdefault(s.op.name, []).append(s)
    for same in kinds.values():
        s = rnd.choice(same)
        steps[s.index] = s
    for s in steps.values():
        size = s.out_types[0].size
        for index in (rnd.randrange(size), size // 2):
            assert check(verifier, run, run.calldata(s.index, index)) == "step correct", (name, s.index, index)


def test_dishonest_perf_large_refuted_at_its_largest_conv(verifier):
    run = Run.of_fixture("perf-large")
    conv = max((s for s in run.program.steps if s.op.name == "conv2d"), key=lambda s: s.cost)
    index = conv.out_types[0].size // 3
    bad = run.changed(conv.index, index)
    assert check(verifier, bad, bad.calldata(conv.index, index)) is None


@pytest.mark.parametrize("step", [11, 4])
def test_every_flipped_byte_of_a_fraud_proof_reverts(verifier, digits_run, step):
    """The proof of a wrong element refutes; the same proof with any one byte changed does not.
    Step 11 is a cvm_right_shift (the shortest digits proof), step 4 a broadcast_mul by a param
    (whose commitment its record carries)."""
    bad = digits_run.changed(step, 5)
    proof = bad.calldata(step, 5)
    assert check(verifier, bad, proof) is None
    for k in range(len(proof)):
        flipped = proof[:k] + bytes([proof[k] ^ 0x01]) + proof[k + 1:]
        assert check(verifier, bad, flipped) is not None, k


def mutate(data: st.DataObject, proof: bytes, donor: bytes) -> bytes:
    """One to three edits of a proof: a byte set to any value, bytes inserted or deleted, the end
    cut, or a 32-byte window copied from elsewhere in it or from another instruction's proof."""
    out = bytearray(proof)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(out)))
        kind = data.draw(st.sampled_from(["set", "insert", "delete", "cut", "window", "donor"]))
        if kind == "set" and at < len(out):
            out[at] = data.draw(st.integers(0, 255))
        elif kind == "insert":
            out[at:at] = data.draw(st.binary(min_size=1, max_size=40))
        elif kind == "delete":
            del out[at:at + data.draw(st.integers(1, 40))]
        elif kind == "cut":
            del out[at:]
        else:
            source = bytes(out) if kind == "window" else donor
            start = data.draw(st.integers(0, max(0, len(source) - 32)))
            out[at:at + 32] = source[start:start + 32]
    return bytes(out)


@settings(max_examples=400, derandomize=True, deadline=None)
@given(data=st.data())
def test_mutated_proofs_never_refute_an_honest_run_and_only_the_exact_one_refutes(verifier, digits_run, data):
    """Soundness against proofs a challenger could forge: any edit of an honest run's proof never
    refutes it; a dishonest run is refuted only by its exact proof."""
    step = data.draw(st.sampled_from([s.index for s in digits_run.program.steps]))
    size = digits_run.program.steps[step].out_types[0].size
    index = data.draw(st.integers(0, size - 1))
    donor = digits_run.calldata((step + 1) % len(digits_run.program.steps), 0)
    honest = digits_run.calldata(step, index)
    edited = mutate(data, honest, donor)
    assert check(verifier, digits_run, edited) is not None
    bad = digits_run.changed(step, index)
    fraud = bad.calldata(step, index)
    edited = mutate(data, fraud, donor)
    assert (check(verifier, bad, edited) is None) == (edited == fraud)


def edit_structure(data: st.DataObject, p: StepProof, size: int) -> StepProof:
    """One edit of a proof's fields rather than its bytes: what a careless or hostile prover
    would send, still well formed."""
    def bent(path: tuple[bytes, ...]) -> tuple[bytes, ...]:
        if not path or data.draw(st.booleans()):
            return (*path, bytes(32)) if data.draw(st.booleans()) else path[:-1]
        k = data.draw(st.integers(0, len(path) - 1))
        return (*path[:k], bytes([path[k][0] ^ 1]) + path[k][1:], *path[k + 1:])

    n = data.draw(st.integers(0, len(p.operands) - 1))
    operand = p.operands[n]
    kind = data.draw(st.sampled_from(["element", "step", "path", "operand path", "chunk data", "chunk index",
                                      "chunk path", "no chunk", "result chunk", "result path", "swap"]))
    if kind == "element":
        return dataclasses.replace(p, element=data.draw(st.integers(0, size + 2)))
    if kind == "step":
        return dataclasses.replace(p, step=data.draw(st.integers(0, p.counts[2])))
    if kind == "path":
        return dataclasses.replace(p, path=bent(p.path))
    if kind == "operand path":
        operand = dataclasses.replace(operand, path=bent(operand.path))
    elif kind in ("chunk data", "chunk index", "chunk path", "no chunk") and operand.chunks:
        k = data.draw(st.integers(0, len(operand.chunks) - 1))
        c = operand.chunks[k]
        if kind == "chunk data":
            at = data.draw(st.integers(0, len(c.data) - 1))
            c = dataclasses.replace(c, data=c.data[:at] + bytes([data.draw(st.integers(0, 255))]) + c.data[at + 1:])
        elif kind == "chunk index":
            c = dataclasses.replace(c, index=data.draw(st.integers(0, c.index + 3)))
        elif kind == "chunk path":
            c = dataclasses.replace(c, path=bent(c.path))
        chunks = (*operand.chunks[:k], *(() if kind == "no chunk" else (c,)), *operand.chunks[k + 1:])
        operand = dataclasses.replace(operand, chunks=chunks)
    elif kind in ("result chunk", "result path"):
        (result,) = p.results
        if kind == "result path":
            result = dataclasses.replace(result, path=bent(result.path))
        else:
            c = result.chunk
            at = data.draw(st.integers(0, len(c.data) - 1))
            chunk = dataclasses.replace(c, data=c.data[:at] + bytes([c.data[at] ^ 1]) + c.data[at + 1:])
            result = dataclasses.replace(result, chunk=chunk)
        return dataclasses.replace(p, results=(result,))
    elif kind == "swap" and len(p.operands) > 1:
        return dataclasses.replace(p, operands=(*p.operands[1:], p.operands[0]))
    return dataclasses.replace(p, operands=(*p.operands[:n], operand, *p.operands[n + 1:]))


@settings(max_examples=400, derandomize=True, deadline=None)
@given(data=st.data())
def test_python_check_and_contract_agree_on_edited_proofs(verifier, digits_run, data):
    """check-step and the contract give the same of the three verdicts on proofs with one field
    edited: refused (a CvmError; a revert other than "step correct"), correct ("step correct")
    or wrong (the challenge refutes).  Half the proofs are of digits' instructions, half of a
    random one-instruction program of an op the contract covers (its operands model inputs)."""
    if data.draw(st.booleans()):
        run, step = digits_run, data.draw(st.sampled_from([s.index for s in digits_run.program.steps]))
    else:
        op = data.draw(st.sampled_from(sorted(element.COVERED)))
        inputs, attrs, precisions = instance(random.Random(data.draw(st.integers(0, 2**32 - 1))), op)
        try:
            run, step = Run.of_op(op, inputs, attrs, precisions), 0
        except CvmError:
            assume(False)                      # outside the op's rules (e.g. an output over 32 bits)
    size = run.program.steps[step].out_types[0].size
    index = data.draw(st.integers(0, size - 1))
    if data.draw(st.booleans()):
        run = run.changed(step, index)
    p = edit_structure(data, run.proof(step, index), size)
    try:
        verdict = check_step(p, run.trace.root, run.program_root)
        python = "step correct" if verdict.correct else None
    except CvmError as e:
        python = e.code
    evm = verifier(calldata_proof(p), run.roots)
    if python is None or python == "step correct":
        assert evm == python, (python, evm)
    else:
        assert evm not in (None, "step correct"), (python, evm)


# -- CvmChallenge -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def challenge_contract():
    art = artifact()
    factory = boa.loads_abi(json.dumps(art["contracts"]["CvmChallenge"]["abi"]), name="CvmChallenge")
    address, _ = boa.env.deploy_code(bytecode=bytes.fromhex(art["contracts"]["CvmChallenge"]["bytecode"]))
    return factory.at(address)


def test_register_commit_challenge(challenge_contract, digits_run):
    c = challenge_contract
    model = c.registerModel(digits_run.program_root)
    bad = digits_run.changed(6, 40)
    honest_id = c.commit(model, digits_run.trace.inputs, b"\0" * 32, digits_run.trace.root)
    bad_id = c.commit(model, bad.trace.inputs, b"\0" * 32, bad.trace.root)
    with boa.reverts("step correct"):
        c.challenge(honest_id, digits_run.calldata(6, 40))
    with boa.reverts("trace root mismatch"):
        c.challenge(honest_id, bad.calldata(6, 40))
    c.challenge(bad_id, bad.calldata(6, 40))
    assert c.commitments(bad_id)[2] is True and c.commitments(honest_id)[2] is False
    with boa.reverts("already refuted"):
        c.challenge(bad_id, bad.calldata(6, 40))
    with boa.reverts("unknown commitment"):
        c.challenge(99, bad.calldata(6, 40))
    with boa.reverts("unknown model"):
        c.commit(99, b"\0" * 32, b"\0" * 32, b"\0" * 32)


def test_challenge_calldata_is_the_abi_encoding(digits_run):
    """prove-step --calldata's bytes: the selector of challenge(uint256,bytes) and eth_abi's encoding."""
    from eth_utils import function_signature_to_4byte_selector
    from serializer.records.stepproof import CHALLENGE_SELECTOR, challenge_calldata
    assert CHALLENGE_SELECTOR == function_signature_to_4byte_selector("challenge(uint256,bytes)")
    proof = digits_run.calldata(3, 7)
    assert challenge_calldata(5, proof) == CHALLENGE_SELECTOR + encode(["uint256", "bytes"], [5, proof])


# -- revert reasons ---------------------------------------------------------------------------

def replace(p: StepProof, **changes) -> bytes:
    return calldata_proof(dataclasses.replace(p, **changes))


def test_revert_reasons(verifier, digits_run):
    run = digits_run
    ok = run.proof(6, 3)
    good = calldata_proof(ok)
    root, inputs, trace = run.roots
    assert verifier(good, run.roots) == "step correct"
    assert verifier(b"", run.roots) == "proof: truncated"
    assert verifier(b"\x01" + good[1:], run.roots) == "proof: version"
    assert verifier(good[:-1], run.roots) == "proof: truncated"
    assert verifier(good + b"\x00", run.roots) == "proof: trailing bytes"
    assert verifier(replace(ok, step=ok.counts[2]), run.roots) == "proof: counts"
    assert verifier(replace(ok, element=run.program.steps[6].out_types[0].size), run.roots) == "proof: element"
    assert verifier(replace(ok, path=ok.path + (b"\0" * 32,)), run.roots) == "proof: path length"
    assert verifier(replace(ok, path=ok.path[:-1]), run.roots) == "proof: path length"
    first = ok.operands[0]
    chunk = first.chunks[0]
    moved = dataclasses.replace(first, chunks=(Chunk(1, chunk.data, chunk.path),))
    assert verifier(replace(ok, operands=(moved, *ok.operands[1:])), run.roots) == "proof: chunk"
    bare = Operand(b"", (), ())
    # Without operand 0's trace path the result's is the first of the proof: a full one.
    full = dataclasses.replace(ok.results[0], path=tuple(run.trace.path(run.program.steps[6].outputs[0])))
    assert verifier(replace(ok, operands=(bare, *ok.operands[1:]), results=(full,)), run.roots) == "proof: chunk missing"
    assert verifier(replace(ok, operands=(bare, *ok.operands[1:])), run.roots) == "proof: path length"
    # One authenticated chunk more than the footprint: refused on both sides, honest or not (the
    # contract took it, where check-step called it malformed).
    relu = Run.of_op("relu", [np.arange(-500, 500, dtype=np.int64) % 200 - 100], {}, [8])   # 4 chunks of 256
    for r in (relu, relu.changed(0, 0)):
        exact = r.proof(0, 0)
        assert [c.index for c in exact.operands[0].chunks] == [0]
        assert verifier(calldata_proof(exact), r.roots) == ("step correct" if r is relu else None)
        extra = Operand(b"", chunks_of(r.values[0], r.program.types[0], [0, 3]), ())
        assert verifier(replace(exact, operands=(extra,)), r.roots) == "proof: chunk not read"
        with pytest.raises(CvmError) as e:
            check_step(dataclasses.replace(exact, operands=(extra,)), r.trace.root, r.program_root)
        assert e.value.code == "malformed.step_proof"
    wrong_path = dataclasses.replace(first, path=(b"\1" * 32, *first.path[1:]))
    assert verifier(replace(ok, operands=(wrong_path, *ok.operands[1:])), run.roots) == "operand not included"
    # The weight is a param: its commitment is in the record, so it has no path, and its chunks
    # must give exactly that commitment.
    weight = ok.operands[1]
    assert run.program.steps[6].inputs[1] == 4 and weight.path == ()
    with_path = dataclasses.replace(weight, path=(b"\1" * 32,))
    assert verifier(replace(ok, operands=(first, with_path, ok.operands[2])), run.roots) == "operand not included"
    c = weight.chunks[-1]
    altered = dataclasses.replace(weight, chunks=(*weight.chunks[:-1], Chunk(c.index, bytes([c.data[0] ^ 1]) + c.data[1:],
                                                                              c.path)))
    assert verifier(replace(ok, operands=(first, altered, ok.operands[2])), run.roots) == "operand not included"
    assert verifier(good, (b"\1" * 32, inputs, trace)) == "instruction not in program"
    assert verifier(good, (root, inputs, b"\1" * 32)) == "trace root mismatch"
    # No operand of step 6 is a model input: the proof carries no input commitments, and the
    # committed input commitment is the one the trace root binds.
    model_input = run.trace.commitments[0]
    assert model_input not in good
    assert verifier(good, (root, b"\1" * 32, trace)) == "trace root mismatch"
    # Step 0 reads the model input: its proof carries them, and they must be the committed ones.
    first_step = calldata_proof(run.proof(0, 3))
    assert model_input in first_step and verifier(first_step, run.roots) == "step correct"
    assert verifier(first_step, (root, b"\1" * 32, trace)) == "inputs not committed"


def test_revert_result_chunk(verifier):
    run = Run.of_op("relu", [np.arange(-1500, 1500, dtype=np.int32).reshape(2, 1500) * 1000], {}, [32])
    p = run.proof(0, 0)
    (other,) = chunks_of(run.values[1], run.program.types[1], [1])
    result = dataclasses.replace(p.results[0], chunk=other)
    assert verifier(calldata_proof(p), run.roots) == "step correct"
    assert verifier(replace(p, results=(result,)), run.roots) == "proof: result chunk"


def test_revert_op_not_supported(verifier):
    run = Run.of_op("transpose", [np.arange(6, dtype=np.int32).reshape(2, 3)], {"axes": (1, 0)}, [8])
    whole = run.proof(0, None)
    types = run.program.types
    operand = Operand(b"", chunks_of(run.values[0], types[0], [0]), ())
    (held,) = chunks_of(run.values[1], types[1], [0])
    p = dataclasses.replace(whole, element=0, operands=(operand,), results=(Result(None, held, whole.results[0].path),))
    assert verifier(calldata_proof(p), run.roots) == "op not supported on-chain"


def test_revert_malformed_record(verifier):
    """A registered program whose record does not decode: authenticated, then refused."""
    run = Run.of_op("relu", [np.arange(6, dtype=np.int32)], {}, [8])
    layout = program_layout(run.program)
    leaf = layout.instruction_leaf(0)
    records = list(layout.records)
    records[leaf] = b"\x05" + records[leaf][1:]
    levels = tree_levels([leaf_hash(r) for r in records])
    p = dataclasses.replace(run.proof(0, 0), record=records[leaf], path=tuple(audit_path(levels, leaf)))
    registered = program_root(layout.counts, levels[-1][0])
    roots = (registered, run.trace.inputs, trace_root(registered, run.trace.inputs, len(run.values), run.trace.levels[-1][0]))
    assert verifier(calldata_proof(p), roots) == "proof: record"


@pytest.fixture(scope="module")
def outputs_verifier():
    from eth_utils import function_signature_to_4byte_selector
    signature = "verifyOutputs(bytes,bytes32,bytes32,bytes32,bytes32)"
    assert VERIFY_OUTPUTS == function_signature_to_4byte_selector(signature)
    return make_outputs_verifier(boa)


def outputs_proof(run: Run, heads: tuple[Head, ...] | None = None, counts: tuple[int, ...] | None = None) -> bytes:
    layout = program_layout(run.program)
    return outputs_calldata_proof(layout.counts if counts is None else counts,
                                  run.trace.commitments[:layout.counts[0]],
                                  prove_outputs(run.program, run.trace) if heads is None else heads)


def test_outputs_revert_reasons(outputs_verifier, digits_run):
    """Every way an outputs proof (FORMAT.md 10.2) can fail, each with its documented reason."""
    run = digits_run
    right = run.output_hash
    wrong = b"\1" * 32
    good = outputs_proof(run)
    (head,) = prove_outputs(run.program, run.trace)
    root, inputs, trace = run.roots
    assert outputs_verifier(good, run.roots, wrong) is None
    assert outputs_verifier(good, run.roots, right) == "outputs correct"
    assert outputs_verifier(good[:-1], run.roots, wrong) == "proof: truncated"
    assert outputs_verifier(good + b"\0", run.roots, wrong) == "proof: trailing bytes"
    assert outputs_verifier(b"\x02" + good[1:], run.roots, wrong) == "proof: version"
    counts = program_layout(run.program).counts
    assert outputs_verifier(outputs_proof(run, heads=(), counts=(*counts[:3], 0, counts[4])), run.roots,
                            wrong) == "proof: counts"
    assert outputs_verifier(outputs_proof(run, heads=(dataclasses.replace(head, tensor=counts[4]),)), run.roots,
                            wrong) == "proof: record"
    # The head's record names the tensor: another tensor, with its own commitment and trace path,
    # is not the program's head.
    other = run.program.steps[-2].outputs[0]
    impostor = Head(other, run.trace.commitments[other], head.record_path, tuple(run.trace.path(other)))
    assert outputs_verifier(outputs_proof(run, heads=(impostor,)), run.roots, wrong) == "head not in program"
    bent = dataclasses.replace(head, record_path=(b"\1" * 32, *head.record_path[1:]))
    assert outputs_verifier(outputs_proof(run, heads=(bent,)), run.roots, wrong) == "head not in program"
    assert outputs_verifier(good, (b"\1" * 32, inputs, trace), wrong) == "head not in program"
    forged = dataclasses.replace(head, commitment=b"\1" * 32)
    assert outputs_verifier(outputs_proof(run, heads=(forged,)), run.roots, wrong) == "trace root mismatch"
    assert outputs_verifier(good, (root, inputs, b"\1" * 32), wrong) == "trace root mismatch"
    assert outputs_verifier(good, (root, b"\1" * 32, trace), wrong) == "inputs not committed"


def test_outputs_revert_reasons_of_a_second_head(outputs_verifier):
    """With two heads, each record must climb to the same program tree, and the heads' paths to
    the same trace tree."""
    x = np.arange(-8, 8, dtype=np.int32).reshape(1, 1, 4, 4)
    run = Run.of_op("max_pool", [x], {"kernel_shape": (2, 2), "strides": (2, 2), "dilations": (1, 1),
                                   "pads": (0, 0, 0, 0), "auto_pad": "NOTSET", "ceil_mode": 0, "storage_order": 0,
                                   "index_axis": 0, "index_dtype": "int64"}, [8])
    first, second = prove_outputs(run.program, run.trace)
    assert outputs_verifier(outputs_proof(run), run.roots, b"\1" * 32) is None
    bent = dataclasses.replace(second, record_path=(b"\1" * 32, *second.record_path[1:]))
    assert outputs_verifier(outputs_proof(run, heads=(first, bent)), run.roots, b"\1" * 32) == "head not in program"
    swapped = (dataclasses.replace(first, record_path=second.record_path),
               dataclasses.replace(second, record_path=first.record_path))
    assert outputs_verifier(outputs_proof(run, heads=swapped), run.roots, b"\1" * 32) == "head not in program"
    forged = dataclasses.replace(second, commitment=b"\1" * 32)
    assert outputs_verifier(outputs_proof(run, heads=(first, forged)), run.roots, b"\1" * 32) == "operand not included"


@settings(max_examples=200, derandomize=True, deadline=None)
@given(data=st.data())
def test_mutated_outputs_proofs_never_refute_a_right_output_hash(outputs_verifier, digits_run, data):
    """The same for outputs proofs: an edited proof never refutes the right output hash, and a
    wrong one is refuted only by the exact proof."""
    run = digits_run
    right = run.output_hash
    proof = outputs_proof(run)
    edited = mutate(data, proof, run.calldata(0, 0))
    assert outputs_verifier(edited, run.roots, right) is not None
    assert (outputs_verifier(edited, run.roots, b"\1" * 32) is None) == (edited == proof)


# -- the artifact -------------------------------------------------------------------------------

def test_package_data_is_what_the_pinned_compiler_builds(tmp_path):
    """`npm ci` installs the pinned solc; recompiling the packaged source gives the packaged bytes."""
    if shutil.which("node") is None or not (REPO / "node_modules" / "solc").is_dir():
        pytest.fail("node and `npm ci` (the pinned solc) are needed: see .ci/run")
    out = subprocess.run(["node", str(REPO / "scripts" / "compile_contract.js"), str(ARTIFACT.parent)],
                         check=True, capture_output=True, text=True, cwd=REPO).stdout
    assert json.loads(out) == json.loads(ARTIFACT.read_text())
    assert out == ARTIFACT.read_text()
    lock = json.loads((REPO / "package-lock.json").read_text())
    assert artifact()["compiler"].startswith(lock["packages"]["node_modules/solc"]["version"] + "+")


def test_every_revert_reason_is_documented_and_tested():
    """Every require of the contracts has a reason; the reasons are exactly FORMAT.md 10.4's, and a
    test expects each one."""
    source = "".join(p.read_text() for p in sorted(ARTIFACT.parent.glob("*.sol")))
    requires = re.findall(r"\brequire\(([^;]*)\);", source)
    assert requires and all(re.search(r',\s*"[^"]+"\s*$', r) for r in requires), "a require without a reason"
    reasons = {re.search(r'"([^"]*)"\s*$', r).group(1) for r in requires}
    reasons |= {literal for statement in re.findall(r"\brevert\(([^;{}]*)\);", source)
                for literal in re.findall(r'"([^"]*)"', statement)}
    format_md = (REPO / "docs" / "FORMAT.md").read_text()
    table = format_md[format_md.index("### 10.4 Revert reasons"):format_md.index("### 10.5")]
    first_cells = [row.split("|")[1] for row in table.splitlines() if row.startswith("| `")]
    assert reasons == {r for cell in first_cells for r in re.findall(r"`([^`]+)`", cell)}
    tests = "".join(p.read_text() for p in sorted((REPO / "tests").glob("*.py")))
    assert {r for r in reasons if f'"{r}"' not in tests} == set()


def test_code_fits_eip_170():
    for name in contract.CONTRACTS:
        assert len(artifact()["contracts"][name]["deployedBytecode"]) // 2 <= 24_576


def test_deployment_files():
    files = contract.deployment_files()
    assert set(files) == {"CvmStep.sol", "CvmChallenge.sol", "CvmStep.abi.json", "CvmChallenge.abi.json",
                          "CvmStep.bin", "CvmChallenge.bin", "compiler.json"}
    assert files["CvmChallenge.bin"].decode().strip() == artifact()["contracts"]["CvmChallenge"]["bytecode"]
    assert b"function challenge(uint256 commitmentId, bytes calldata proof)" in files["CvmChallenge.sol"]


def test_cli_challenge_of_a_disputed_commitment_refutes_it(challenge_contract, tmp_path, capsys):
    """The user's flow end to end: a proposer commits a wrong digits run on chain; the challenger
    runs `cvmvm prove-step --against TRACE --claimed-output T --calldata`, sends the calldata, and
    the commitment is refuted."""
    from serializer.records.trace import trace_bytes
    from cvmvm.vm.trace import trace_to_json
    from cvmvm.cli.main import main
    from tests.test_models import generate
    model = generate.load_fixture_model("digits")
    x = generate.load_fixture_inputs("digits")[0]
    run = Run.of_fixture("digits")
    bad = run.changed(6, 77)
    (tmp_path / "m.cvm").write_bytes(model.canonical_bytes)
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "disputed.json").write_bytes(trace_bytes(trace_to_json(model.program, bad.trace, model.model_hash)))
    np.save(tmp_path / "claimed.npy", bad.values[model.program.steps[6].outputs[0]])
    c = challenge_contract
    model_id = c.registerModel(model.program_root)
    commitment = c.commit(model_id, bad.trace.inputs, b"\0" * 32, bad.trace.root)
    assert main(["prove-step", str(tmp_path / "m.cvm"), "--input", f"data={tmp_path / 'x.npy'}",
                 "--against", str(tmp_path / "disputed.json"), "--claimed-output", str(tmp_path / "claimed.npy"),
                 "--calldata", str(tmp_path / "c.hex"), "--commitment-id", str(commitment)]) == 0
    capsys.readouterr()
    calldata = bytes.fromhex((tmp_path / "c.hex").read_text().strip()[2:])
    result = boa.env.execute_code(to_address=c.address, data=calldata, gas=30_000_000)
    assert not result.is_error
    assert c.commitments(commitment)[2] is True


def test_outputs_challenge(challenge_contract, tmp_path, capsys):
    """A commitment pairing an honest trace with a wrong output hash is refuted by
    `cvmvm prove-outputs`'s calldata; one with the right output hash is not."""
    from eth_utils import function_signature_to_4byte_selector
    from serializer.records.stepproof import CHALLENGE_OUTPUTS_SELECTOR
    from serializer.records.trace import trace_bytes
    from cvmvm.vm.trace import trace_to_json
    from cvmvm.cli.main import main
    from tests.test_models import generate
    assert CHALLENGE_OUTPUTS_SELECTOR == function_signature_to_4byte_selector("challengeOutputs(uint256,bytes)")
    model = generate.load_fixture_model("digits")
    run = Run.of_fixture("digits")
    right = run.output_hash
    c = challenge_contract
    model_id = c.registerModel(model.program_root)
    honest = c.commit(model_id, run.trace.inputs, right, run.trace.root)
    lying = c.commit(model_id, run.trace.inputs, b"\1" * 32, run.trace.root)
    (tmp_path / "m.cvm").write_bytes(model.canonical_bytes)
    (tmp_path / "t.json").write_bytes(trace_bytes(trace_to_json(model.program, run.trace, model.model_hash)))
    for commitment, name in ((honest, "h.hex"), (lying, "l.hex")):
        assert main(["prove-outputs", str(tmp_path / "m.cvm"), "--against", str(tmp_path / "t.json"),
                     "--calldata", str(tmp_path / name), "--commitment-id", str(commitment)]) == 0
    capsys.readouterr()
    honest_call = bytes.fromhex((tmp_path / "h.hex").read_text().strip()[2:])
    result = boa.env.execute_code(to_address=c.address, data=honest_call, gas=30_000_000)
    assert result.is_error and reason(result.output) == "outputs correct"
    lying_call = bytes.fromhex((tmp_path / "l.hex").read_text().strip()[2:])
    result = boa.env.execute_code(to_address=c.address, data=lying_call, gas=30_000_000)
    assert not result.is_error and c.commitments(lying)[2] is True and c.commitments(honest)[2] is False
    proof_start = 4 + 32 * 3
    proof_len = int.from_bytes(lying_call[4 + 64:4 + 96], "big")
    again = c.commit(model_id, run.trace.inputs, b"\2" * 32, run.trace.root)
    fresh = challenge_calldata_for(again, lying_call)
    for k in range(proof_start, proof_start + proof_len):
        flipped = fresh[:k] + bytes([fresh[k] ^ 1]) + fresh[k + 1:]
        result = boa.env.execute_code(to_address=c.address, data=flipped, gas=30_000_000)
        assert result.is_error, k
    assert not boa.env.execute_code(to_address=c.address, data=fresh, gas=30_000_000).is_error


def challenge_calldata_for(commitment: int, calldata: bytes) -> bytes:
    """The same challenge, addressed to another commitment."""
    return calldata[:4] + commitment.to_bytes(32, "big") + calldata[36:]
