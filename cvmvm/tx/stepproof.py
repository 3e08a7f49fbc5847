"""Step proofs: settle a dispute about one instruction against two roots alone.

``prove_step`` runs a model once, traced, and opens instruction K: its program
record and path, and either every operand in full (a whole-instruction proof)
or the chunks one output element reads (an element proof, for the ops the
contract covers, cvmvm.tx.element).  ``make_proof`` does the same from any
set of committed tensors, an honest run's or not.

``check_step`` authenticates everything before it computes anything -- every
size, every chunk and audit path, the program root, the input commitment and the
trace root -- then re-executes (the whole instruction, verified as a
one-instruction program within a run's limits, or the one element) and returns
a verdict: the step is correct, or it is wrong (fraud).  A proof that is
malformed or not included raises its CvmError.  The record and its codecs are
serializer.records.stepproof (docs/FORMAT.md section 9).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from isa.errors import CvmError, InputError, MalformedError
from isa.table import OP_BY_NAME
from isa.types import DTYPES, TensorType, precision_bound
from serializer.hashing import (audit_path, body_length, chunk_count, chunk_leaves, chunk_root, chunk_size, commitment_of,
                                input_commitment, joins, lane_width, leaf_hash, positions, program_root, root_from_path,
                                shared_path, tensor_body, tensor_commitment, tensor_from_body, trace_root, tree_levels)
from serializer.records.program import InstrRecord, decode_instr
from serializer.records.stepproof import Chunk, Head, Operand, Result, StepProof
from cvmvm.vm.api import Model
from cvmvm.vm.execute import execute
from cvmvm.vm.trace import Trace, Tracer, make_trace, program_layout
from cvmvm.vm.verify import NOT_RUN, Limits, Program, verify_instruction, verify_types
from cvmvm.tx import element as elements


def _malformed(message: str) -> MalformedError:
    return MalformedError("step_proof", message)


def _not_included(message: str) -> InputError:
    return InputError("not_included", message)


# -- proving ----------------------------------------------------------------------------------

def _chunk_size(t: TensorType) -> int:
    return chunk_size(body_length(t))


def chunks_of(value: np.ndarray, t: TensorType, wanted: Sequence[int]) -> tuple[Chunk, ...]:
    """Chunks ``wanted`` of a tensor's body, ascending, each with its path in the tensor's chunk
    tree: the first one's full audit path, each later one's shared with it (``shared_path``)."""
    body = tensor_body(value, t)
    size = _chunk_size(t)
    levels = tree_levels(chunk_leaves(body, size))
    indices = sorted(set(wanted))
    paths = [audit_path(levels, i) for i in indices]
    paths[1:] = [shared_path(path, i, indices[0], len(levels[0])) for i, path in zip(indices[1:], paths[1:])]
    return tuple(Chunk(i, bytes(body[i * size:(i + 1) * size]), tuple(path)) for i, path in zip(indices, paths))


def footprint_chunks(t: TensorType, reads: np.ndarray) -> list[int]:
    """The chunks of a tensor's body that hold these row-major elements."""
    return sorted(set((positions(t, reads) * lane_width(t) // _chunk_size(t)).tolist()))


def make_proof(program: Program, trace: Trace, values: Mapping[int, np.ndarray], step: int,
               element: int | None = None) -> StepProof:
    """The proof of instruction ``step`` (of output element ``element``, row-major, when given)
    of a run committed as ``trace``; ``values`` holds the step's operands and results."""
    layout = program_layout(program)
    if not 0 <= step < len(program.steps):
        raise InputError("step", f"step {step} is out of range: the model's instructions are 0 to "
                                 f"{len(program.steps) - 1}")
    s = program.steps[step]
    types = program.types
    n_in, n_params = layout.counts[0], layout.counts[1]
    first: list[int] = []   # the first tensor whose trace path the proof carries

    def path(t: int) -> tuple[bytes, ...]:
        # A model input's commitment is among the proof's inputs, a param's in the record; every
        # trace path after the first is shared with it.
        if t < n_in + n_params:
            return ()
        if not first:
            first.append(t)
            return tuple(trace.path(t))
        return tuple(shared_path(trace.path(t), t, first[0], len(types)))

    if element is None:
        operands = tuple(Operand(bytes(tensor_body(values[t], types[t])), (), path(t)) for t in s.inputs)
        results = tuple(Result(trace.entries[t].commitment, None, path(t)) for t in s.outputs)
    else:
        out = s.outputs[0]
        if s.op.name not in elements.COVERED:
            raise InputError("not_covered", f"{s.op.name} has no element proofs (covered: {sorted(elements.COVERED)})")
        if not 0 <= element < types[out].size:
            raise InputError("element", f"element {element} is not in output 0 of instruction {step} "
                                        f"({types[out].size} elements)")
        reads = elements.footprint(s.op.name, s.attrs, [types[t] for t in s.inputs], types[out], element)
        operands = tuple(Operand(b"", chunks_of(values[t], types[t], wanted), path(t) if wanted else ())
                         for t, r in zip(s.inputs, reads) for wanted in (footprint_chunks(types[t], r),))
        (held,) = chunks_of(values[out], types[out], footprint_chunks(types[out], np.array([element])))
        results = (Result(None, held, path(out)),)
    leaf = layout.instruction_leaf(step)
    return StepProof(layout.counts, trace.commitments[:n_in], step, layout.records[leaf], tuple(layout.path(leaf)),
                     element, operands, results)


def prove_step(model: Model, inputs: Mapping[str, np.ndarray], step: int,
               element: int | None = None) -> tuple[StepProof, Trace]:
    """Run the model once, traced, keeping instruction ``step``'s tensors; its proof and the trace."""
    program = model.program
    if not 0 <= step < len(program.steps):
        raise InputError("step", f"step {step} is out of range: the model's instructions are 0 to "
                                 f"{len(program.steps) - 1}")
    s = program.steps[step]
    wanted = set(s.inputs) | set(s.outputs)
    tracer = Tracer(program)
    kept: dict[int, np.ndarray] = {}

    def observe(t: int, value: np.ndarray) -> None:
        tracer(t, value)
        if t in wanted:
            kept[t] = value

    with tracer.running():
        execute(program, inputs, observe)
    trace = tracer.trace()
    return make_proof(program, trace, kept, step, element), trace


def prove_outputs(program: Program, trace: Trace) -> tuple[Head, ...]:
    """Every head of the program, opened in a trace: what ``challengeOutputs`` needs besides the
    counts and the input commitments (FORMAT.md section 10.2)."""
    layout = program_layout(program)
    n_in, n_params, n_instr = layout.counts[:3]

    def path(t: int) -> tuple[bytes, ...]:
        if t < n_in:
            return ()
        return tuple(layout.path(t) if t < n_in + n_params else trace.path(t))

    return tuple(Head(t, trace.entries[t].commitment, tuple(layout.path(n_in + n_params + n_instr + h)), path(t))
                 for h, t in enumerate(program.model.outputs))


def prove_against(model: Model, inputs: Mapping[str, np.ndarray], disputed: Sequence[bytes],
                  claimed: np.ndarray, step: int | None = None,
                  element: int | None = None) -> tuple[StepProof, Trace, int, int | None]:
    """A proof that a disputed run of ``model`` on ``inputs`` is wrong: ``disputed`` is its trace's
    commitments (by tensor id), ``claimed`` its value of the first wrong instruction's output 0.

    The instruction is the first whose output commitment differs from an honest run's (``step``,
    when given, must be it: before it the traces agree, so its operands are the honest ones); the
    element, unless given, is the first that differs.  Returns the proof (an element proof when the
    op is covered, else a whole-instruction one), the disputed trace, the step and the element.
    """
    program = model.program
    if len(disputed) != len(program.types):
        raise InputError("trace", f"the disputed trace has {len(disputed)} tensors, the model {len(program.types)}")
    tracer = Tracer(program)
    kept: dict[int, np.ndarray] = {}

    def observe(t: int, value: np.ndarray) -> None:
        tracer(t, value)
        kept[t] = value

    with tracer.running():
        execute(program, inputs, observe)
    honest = tracer.commitments
    n_in = len(program.model.inputs)
    if list(disputed[:n_in]) != honest[:n_in]:
        raise InputError("trace", "the disputed trace is of other inputs (its input commitments differ)")
    first = next((t for t in range(n_in, len(honest)) if disputed[t] != honest[t]), None)
    if first is None:
        raise InputError("no_dispute", "the disputed trace commits to exactly the honest run's tensors")
    if first < n_in + len(program.model.params):   # no instruction outputs a param: another model's trace
        raise InputError("trace", f"the disputed trace commits to another value of param tensor {first}: it is "
                                  f"not a trace of this model")
    wrong = next(s for s in program.steps if first in s.outputs)
    if step is not None and step != wrong.index:
        raise InputError("step", f"the traces first differ at instruction {wrong.index} (tensor {first}), "
                                 f"not {step}: prove that one")
    out = wrong.outputs[0]
    t = program.types[out]
    claimed = np.asarray(claimed)
    if tuple(claimed.shape) != t.shape or claimed.dtype.kind not in "iu":
        raise InputError("claimed", f"the claimed output is not tensor {out} of the disputed trace (an integer "
                                    f"array of shape {t.shape} is)")
    # A value outside the type would wrap into its lane and commit like another (300 like 44 in 1-byte
    # lanes): the proof would then open an element whose committed bytes agree with the honest run.
    low, high = ((-precision_bound(t.precision), precision_bound(t.precision)) if t.precision is not None
                 else (int(np.iinfo(DTYPES[t.dtype]).min), int(np.iinfo(DTYPES[t.dtype]).max)))
    if claimed.size and (int(claimed.min()) < low or int(claimed.max()) > high):
        raise InputError("claimed", f"the claimed output holds values outside [{low}, {high}], its type's range")
    claimed = claimed.astype(DTYPES[t.dtype])
    if tensor_commitment(claimed, t) != disputed[out]:
        raise InputError("claimed", f"the claimed output is not tensor {out} of the disputed trace "
                                    f"(its commitment differs)")
    covered = wrong.op.name in elements.COVERED and len(wrong.outputs) == 1
    if element is None and covered:
        differing = np.flatnonzero(claimed.reshape(-1) != kept[out].reshape(-1))
        element = int(differing[0]) if differing.size else None
    values = {**{u: kept[u] for u in wrong.inputs}, out: claimed}
    trace = make_trace(program, list(disputed))
    return make_proof(program, trace, values, wrong.index, element if covered else None), trace, wrong.index, element


# -- checking -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    correct: bool                 # False: the trace recorded a wrong result (fraud)
    step: int
    op: str
    element: int | None
    detail: tuple[str, ...]       # what was recomputed, against what the trace committed


class _Auth:
    """Where each commitment of a proof comes from, and the one trace tree its paths must all
    reach: the first trace path gives the tree, every later one joins the first (shared paths)."""

    def __init__(self, p: StepProof) -> None:
        self.p = p
        self.trace_tree: bytes | None = None
        self.first: tuple[bytes, int, Sequence[bytes]] = (b"", 0, ())   # the first trace leaf, its index and path

    def trace(self, commitment: bytes, tensor: int, path: Sequence[bytes], what: str) -> None:
        count = self.p.counts[4]
        if self.trace_tree is None:
            tree = root_from_path(commitment, tensor, count, path)
            if tree is None:
                raise _not_included(f"{what}: its commitment and path do not reach a trace tree")
            self.trace_tree = tree
            self.first = (commitment, tensor, path)
        elif not joins(commitment, tensor, path, self.first[0], self.first[1], self.first[2], count):
            raise _not_included(f"{what}: its commitment and path do not reach the trace tree")

    def operand(self, commitment: bytes, tensor: int, param: bytes | None, path: Sequence[bytes], what: str) -> None:
        """``param``: the commitment the record gives the operand when it is a param."""
        if tensor < self.p.counts[0]:
            if path or commitment != self.p.inputs[tensor]:
                raise _not_included(f"{what}: model input {tensor}'s commitment is not the proof's input {tensor}")
        elif param is not None:
            if path or commitment != param:
                raise _not_included(f"{what}: param tensor {tensor}'s commitment is not the one its record gives")
        else:
            self.trace(commitment, tensor, path, what)


def _sized(c: Chunk, t: TensorType, what: str) -> None:
    """A chunk's index and size checked against its tensor."""
    count = chunk_count(t)
    size = _chunk_size(t)
    if c.index >= count or len(c.data) != min(size, body_length(t) - c.index * size):
        raise _malformed(f"{what}: chunk {c.index} of {count} has {len(c.data)} bytes")


def _chunk_root(c: Chunk, t: TensorType, what: str) -> bytes:
    """The chunk root a chunk and its full audit path give."""
    _sized(c, t, what)
    root = root_from_path(leaf_hash(c.data), c.index, chunk_count(t), c.path)
    if root is None:
        raise _not_included(f"{what}: chunk {c.index}'s path does not fit a tree of {chunk_count(t)} chunks")
    return root


def _chunks_root(chunks: Sequence[Chunk], t: TensorType, what: str) -> bytes:
    """The chunk root the first chunk's path gives; every later chunk's shared path must join it."""
    first = chunks[0]
    root = _chunk_root(first, t, f"{what}, chunk {first.index}")
    for c in chunks[1:]:
        _sized(c, t, f"{what}, chunk {c.index}")
        if not joins(leaf_hash(c.data), c.index, c.path, leaf_hash(first.data), first.index, first.path,
                     chunk_count(t)):
            raise _not_included(f"{what}, chunk {c.index}: its path does not join the first chunk's")
    return root


def _structure(p: StepProof) -> InstrRecord:
    n_in, n_params, n_instr, n_heads, tensors = p.counts
    if not p.step < n_instr or n_in + n_params + n_instr > tensors or len(p.inputs) != n_in:
        raise _malformed(f"counts {list(p.counts)} with step {p.step} and {len(p.inputs)} input commitments")
    record = decode_instr(p.record, p.counts, "step_proof")
    if record.index != p.step:
        raise _malformed(f"the record is instruction {record.index}'s, the proof names step {p.step}")
    try:
        # The ISA's rules only: a run's limits apply to re-execution, once the proof is authenticated.
        inferred = verify_types(OP_BY_NAME[record.op], record.attrs, [t for _, t in record.inputs],
                                NOT_RUN).output_types
    except CvmError as e:
        raise _malformed(f"the record's instruction does not verify ({e.code}: {e.message})") from None
    if inferred != tuple(t for _, t in record.outputs):
        raise _malformed(f"the record's result types {[t for _, t in record.outputs]} are not what its operands "
                         f"give ({list(inferred)})")
    if len(p.operands) != len(record.inputs):
        raise _malformed(f"{len(p.operands)} operands for an instruction of {len(record.inputs)}")
    if p.element is None:
        if len(p.results) != len(record.outputs):
            raise _malformed(f"{len(p.results)} results for an instruction of {len(record.outputs)}")
    else:
        if record.op not in elements.COVERED:
            raise InputError("not_covered", f"{record.op} has no element proofs")
        if len(p.results) != 1:
            raise _malformed(f"{len(p.results)} results for an element proof (one: output 0's chunk)")
        if p.element >= record.outputs[0][1].size:
            raise _malformed(f"element {p.element} is not in output 0 ({record.outputs[0][1].size} elements)")
    return record


def _authenticate(p: StepProof, record: InstrRecord, trace_root_: bytes, program_root_: bytes,
                  limits: Limits) -> list[bytes]:
    """Every size, path and root; returns each operand's chunk root (b'' when it carries nothing)."""
    n_in, n_params, n_instr, n_heads, tensors = p.counts
    tree = root_from_path(leaf_hash(p.record), n_in + n_params + p.step, n_in + n_params + n_instr + n_heads, p.path)
    if tree is None or program_root((n_in, n_params, n_instr, n_heads, tensors), tree) != program_root_:
        raise _not_included(f"instruction {p.step}'s record and path do not give the program root")
    auth = _Auth(p)
    roots = []
    reads = None
    if p.element is not None:
        # An element reads no more than its whole instruction does: it is held to the run's limits as a
        # whole-instruction proof is, before its footprint is built (one of a sum over 2^20 values took
        # 32 MB and 0.9 s under any limit).
        verify_types(OP_BY_NAME[record.op], record.attrs, [t for _, t in record.inputs], limits)
        reads = elements.footprint(record.op, record.attrs, [t for _, t in record.inputs], record.outputs[0][1],
                                   p.element)
    for k, ((tensor, t), o) in enumerate(zip(record.inputs, p.operands)):
        what = f"operand {k} (tensor {tensor})"
        if reads is None:
            if len(o.data) != body_length(t):
                raise _malformed(f"{what}: {len(o.data)} bytes, its body has {body_length(t)}")
            root = chunk_root(memoryview(o.data))
        else:
            wanted = footprint_chunks(t, reads[k])
            if [c.index for c in o.chunks] != wanted:
                raise _malformed(f"{what}: carries chunks {[c.index for c in o.chunks]}; its footprint is {wanted}")
            if not wanted:
                if o.path:
                    raise _malformed(f"{what}: a path for an operand that carries nothing")
                roots.append(b"")
                continue
            root = _chunks_root(o.chunks, t, what)
        auth.operand(commitment_of(t, root), tensor, record.params[k], o.path, what)
        roots.append(root)
    for j, ((tensor, t), r) in enumerate(zip(record.outputs, p.results)):
        what = f"result {j} (tensor {tensor})"
        if r.chunk is not None:
            held = int(positions(t, np.array([p.element]))[0]) * lane_width(t) // _chunk_size(t)
            if r.chunk.index != held:
                raise _malformed(f"{what}: chunk {r.chunk.index} does not hold element {p.element} (chunk {held})")
            commitment = commitment_of(t, _chunk_root(r.chunk, t, what))
        else:
            commitment = r.commitment   # type: ignore[assignment]
        auth.trace(commitment, tensor, r.path, what)
    inputs = input_commitment(p.inputs)
    if auth.trace_tree is None or trace_root(program_root_, inputs, tensors, auth.trace_tree) != trace_root_:
        raise _not_included("the trace paths, the program root and the input commitments do not give the trace root")
    return roots


def _lanes(chunks: Sequence[Chunk], t: TensorType, reads: np.ndarray) -> np.ndarray:
    """The values of row-major elements ``reads`` from the chunks that hold them."""
    lane = lane_width(t)
    size = _chunk_size(t)
    dtype = np.dtype({1: "i1", 2: "<i2", 4: "<i4"}[lane])
    by_index = {c.index: c.data for c in chunks}
    at = positions(t, reads) * lane
    return np.array([int(np.frombuffer(by_index[b // size], dtype=dtype, count=1, offset=b % size)[0])
                     for b in at.tolist()], dtype=np.int64)


def _reexecute_whole(p: StepProof, record: InstrRecord, limits: Limits) -> Verdict:
    op = OP_BY_NAME[record.op]
    values = [tensor_from_body(o.data, t) for (_, t), o in zip(record.inputs, p.operands)]
    program = verify_instruction(op, record.attrs, [(t, v) for (_, t), v in zip(record.inputs, values)], limits)
    outputs, _ = execute(program, {f"in{k}": v for k, v in enumerate(values)})
    detail = []
    correct = True
    for j, ((tensor, t), r, v) in enumerate(zip(record.outputs, p.results, outputs)):
        got = tensor_commitment(v, t)
        correct = correct and got == r.commitment
        detail.append(f"result {j} (tensor {tensor}): recomputed {got.hex()}, trace has {r.commitment.hex()}")  # type: ignore[union-attr]
    return Verdict(correct, p.step, record.op, None, tuple(detail))


def _reexecute_element(p: StepProof, record: InstrRecord) -> Verdict:
    out = record.outputs[0][1]
    reads = elements.footprint(record.op, record.attrs, [t for _, t in record.inputs], out, p.element)  # type: ignore[arg-type]
    values = [_lanes(o.chunks, t, r) for (_, t), o, r in zip(record.inputs, p.operands, reads)]
    got = elements.value(record.op, record.attrs, values)
    (result,) = p.results
    committed = int(_lanes((result.chunk,), out, np.array([p.element]))[0])  # type: ignore[arg-type]
    return Verdict(got == committed, p.step, record.op, p.element,
                   (f"element {p.element} of tensor {record.outputs[0][0]}: recomputed {got}, trace has {committed}",))


def check_step(p: StepProof, trace_root_: bytes, program_root_: bytes, limits: Limits = Limits()) -> Verdict:
    """The proof authenticated against the two roots, then its step re-executed: a verdict,
    or the CvmError of a proof that is malformed (``malformed.step_proof``), not included
    (``input.not_included``) or of an op without element proofs (``input.not_covered``)."""
    record = _structure(p)
    _authenticate(p, record, trace_root_, program_root_, limits)
    if p.element is None:
        return _reexecute_whole(p, record, limits)
    return _reexecute_element(p, record)
