"""Step proofs: settle a dispute about one instruction without re-running the model.

A proof carries instruction K (op, attributes, tensor ids and types), the
values of its inputs, the hashes of its outputs, and Merkle inclusion proofs
of all of them against a trace root (docs/FORMAT.md section 8).  Checking it
re-executes only that instruction, verified as a one-instruction program with
the input types from the proof, and recomputes every inclusion proof.  Every
trace leaf commits to its tensor id and to a digest of the node that produced
it (op code, tensor ids, every attribute), so the root alone binds the proof's
instruction: a checker needs the root, not the model.  Given the model too, it
also confirms the proof names that model's instruction K.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from isa.attrs import attrs_to_dict
from isa.errors import CvmError, InputError
from isa.table import OP_BY_NAME, OPCODE, OPS
from isa.types import TensorType
from serializer import native, strict
from serializer.hashing import (HASH_SIZE, INPUT, INSTR, leaf_hash, merkle_proof, node_digest, root_from_proof,
                                tensor_hash, trace_root)
from serializer.strict import Reader, attrs_to_wire, pack, tensor_data
from cvmvm.vm.api import Model
from cvmvm.vm.execute import execute
from cvmvm.vm.trace import Tracer, trace_layout
from cvmvm.vm.verify import verify_instruction

PROOF_FORMAT = "cvmvm-step-proof"
PROOF_VERSION = 1
MAX_PROOF_BYTES = 1 << 32
MAX_LEAVES = 1 << 32   # leaf indices and counts are u32 in the trace

KEYS = ("format", "version", "model_hash", "leaves", "step", "op", "attrs", "inputs", "outputs")
OPERAND_KEYS = ("tensor", "kind", "index", "output", "node", "dtype", "shape", "precision", "data", "path")
RESULT_KEYS = ("tensor", "dtype", "shape", "precision", "hash", "path")

_READER = Reader("step_proof")


@dataclass(frozen=True)
class Operand:
    """An input of the instruction: its trace position, type, value and inclusion proof."""

    tensor: int
    kind: int
    index: int
    output: int
    node: bytes  # node digest of its producer, as its trace leaf holds it
    type: TensorType
    value: np.ndarray
    path: tuple[bytes, ...]


@dataclass(frozen=True)
class Claim:
    """An output of the instruction as the trace records it: its type, hash and inclusion proof."""

    tensor: int
    type: TensorType
    digest: bytes
    path: tuple[bytes, ...]


@dataclass(frozen=True)
class StepProof:
    model_hash: bytes
    leaves: int   # entries in the trace (the model's tensor count)
    step: int     # the instruction's index in the model's code
    op: str
    attrs: Any
    inputs: tuple[Operand, ...]
    outputs: tuple[Claim, ...]


# -- proving ---------------------------------------------------------------------------

def prove_step(model: Model, inputs: Mapping[str, np.ndarray], step: int) -> tuple[StepProof, bytes]:
    """Run the model once, traced, keeping instruction ``step``'s inputs; return its proof and the trace root."""
    program = model.program
    if not 0 <= step < len(program.steps):
        raise InputError("step", f"step {step} is not an instruction of the model (it has {len(program.steps)})")
    s = program.steps[step]
    tracer = Tracer(program, model.model_hash)
    kept: dict[int, np.ndarray] = {}

    def observe(t: int, value: np.ndarray) -> None:
        tracer(t, value)
        if t in s.inputs:
            kept[t] = value

    execute(program, inputs, observe)
    trace = tracer.trace()
    leaves = trace.leaves
    layout = trace_layout(program)
    operands = tuple(Operand(t, *layout.positions[t], layout.nodes[t], program.types[t], kept[t],
                             tuple(merkle_proof(leaves, t))) for t in s.inputs)
    claims = tuple(Claim(t, program.types[t], trace.entries[t].digest, tuple(merkle_proof(leaves, t)))
                   for t in s.outputs)
    return StepProof(model.model_hash, len(leaves), step, s.op.name, s.attrs, operands, claims), trace.root


# -- the format ----------------------------------------------------------------------------

def _type_wire(t: TensorType) -> dict[str, Any]:
    return {"dtype": t.dtype, "shape": list(t.shape), "precision": t.precision}


def to_wire(p: StepProof) -> dict[str, Any]:
    return {
        "format": PROOF_FORMAT,
        "version": PROOF_VERSION,
        "model_hash": p.model_hash,
        "leaves": p.leaves,
        "step": p.step,
        "op": OPCODE[p.op],
        "attrs": attrs_to_wire(p.attrs),
        "inputs": [{"tensor": o.tensor, "kind": o.kind, "index": o.index, "output": o.output, "node": o.node,
                    **_type_wire(o.type),
                    "data": tensor_data(o.value, o.type.dtype), "path": list(o.path)} for o in p.inputs],
        "outputs": [{"tensor": c.tensor, **_type_wire(c.type), "hash": c.digest, "path": list(c.path)}
                    for c in p.outputs],
    }


def encode(p: StepProof) -> bytes:
    return pack(to_wire(p))


def _path(rd: Reader, value: Any, where: str) -> tuple[bytes, ...]:
    # An audit path of a tree of at most 2^32 leaves has at most 32 hashes.
    return tuple(rd.bin(h, where, HASH_SIZE) for h in rd.list(value, where, 32))


def from_wire(top: Any) -> StepProof:
    rd = _READER
    top = rd.map(top, KEYS, "proof")
    rd.const(top["format"], PROOF_FORMAT, "format")
    rd.const(top["version"], PROOF_VERSION, "version")
    model_hash = rd.bin(top["model_hash"], "model_hash", HASH_SIZE)
    leaves = rd.int(top["leaves"], "leaves", 1, MAX_LEAVES)
    step = rd.int(top["step"], "step", 0, MAX_LEAVES - 1)
    op = OPS[rd.int(top["op"], "op", 0, len(OPS) - 1)]
    attrs = rd.attrs(op.attrs, top["attrs"], "attrs")
    operands = []
    for k, e in enumerate(rd.list(top["inputs"], "inputs")):
        w = f"inputs[{k}]"
        e = rd.map(e, OPERAND_KEYS, w)
        t = rd.tensor_type(e, w)
        operands.append(Operand(rd.int(e["tensor"], f"{w}.tensor", 0, leaves - 1),
                                rd.int(e["kind"], f"{w}.kind", INPUT, INSTR),
                                rd.int(e["index"], f"{w}.index", 0, MAX_LEAVES - 1),
                                rd.int(e["output"], f"{w}.output", 0, MAX_LEAVES - 1),
                                rd.bin(e["node"], f"{w}.node", HASH_SIZE), t, rd.array(t.dtype, t.shape, e["data"], f"{w}.data"), _path(rd, e["path"], f"{w}.path")))
    claims = []
    for j, e in enumerate(rd.list(top["outputs"], "outputs")):
        w = f"outputs[{j}]"
        e = rd.map(e, RESULT_KEYS, w)
        claims.append(Claim(rd.int(e["tensor"], f"{w}.tensor", 0, leaves - 1), rd.tensor_type(e, w),
                            rd.bin(e["hash"], f"{w}.hash", HASH_SIZE), _path(rd, e["path"], f"{w}.path")))
    if len(claims) != len(op.outputs):
        raise rd.fail(f"outputs: {len(claims)} entries, but {op.name} has {len(op.outputs)} outputs")
    return StepProof(model_hash, leaves, step, op.name, attrs, tuple(operands), tuple(claims))


def decode(data: bytes) -> StepProof:
    return strict.decode(data, _READER, MAX_PROOF_BYTES, "step proof", from_wire, to_wire)


# -- checking ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str = ""


def _structure(p: StepProof) -> list[Check]:
    """Tensor ids and trace positions consistent with one instruction of some program."""
    first = p.outputs[0].tensor
    checks = [Check("output ids", all(c.tensor == first + j for j, c in enumerate(p.outputs))
                    and first + len(p.outputs) <= p.leaves,
                    f"outputs {[c.tensor for c in p.outputs]} must be consecutive ids below {p.leaves}")]
    for k, o in enumerate(p.inputs):
        ok = o.tensor < first and (o.index < p.step if o.kind == INSTR else o.output == 0)
        checks.append(Check(f"input {k} position", ok,
                            f"tensor {o.tensor}, (kind {o.kind}, index {o.index}, output {o.output}) "
                            f"before instruction {p.step}'s outputs"))
    return checks


def _inclusion(p: StepProof, root: bytes) -> list[Check]:
    """Every leaf, with its path, reaches one Merkle tree, and that tree with the proof's model hash and
    leaf count is the trace root."""
    checks = []
    for k, o in enumerate(p.inputs):
        leaf = leaf_hash(o.tensor, o.kind, o.index, o.output, o.type.precision, o.node,
                         tensor_hash(o.value, o.type.dtype))
        checks.append(Check(f"input {k} in trace", _reaches(root_from_proof(leaf, o.tensor, p.leaves, o.path), p, root),
                            f"tensor {o.tensor}, leaf {o.tensor} of {p.leaves}"))
    # The outputs' leaves commit to this instruction itself: op, tensor ids, every attribute.
    node = node_digest(native.instr_descriptor(p.op, tuple(o.tensor for o in p.inputs),
                                               tuple(c.tensor for c in p.outputs), p.attrs))
    for j, c in enumerate(p.outputs):
        leaf = leaf_hash(c.tensor, INSTR, p.step, j, c.type.precision, node, c.digest)
        checks.append(Check(f"output {j} in trace", _reaches(root_from_proof(leaf, c.tensor, p.leaves, c.path), p, root),
                            f"tensor {c.tensor}, leaf {c.tensor} of {p.leaves}"))
    return checks


def _reaches(tree: bytes | None, p: StepProof, root: bytes) -> bool:
    return tree is not None and trace_root(p.model_hash, p.leaves, tree) == root


def _text(t: TensorType) -> str:
    return f"{t.dtype}{list(t.shape)}" + ("" if t.precision is None else f" p{t.precision}")


def _reexecute(p: StepProof) -> list[Check]:
    """Verify the instruction alone, over the proof's input types and values, and run it."""
    try:
        program = verify_instruction(OP_BY_NAME[p.op], p.attrs, [(o.type, o.value) for o in p.inputs])
        values, _ = execute(program, {f"in{k}": o.value for k, o in enumerate(p.inputs)})
    except CvmError as e:
        return [Check("instruction", False, f"{e.code}: {e.message}")]
    checks = [Check("instruction", True, f"{p.op} verifies over the proof's input types")]
    for j, (c, t, v) in enumerate(zip(p.outputs, program.output_types, values)):
        checks.append(Check(f"output {j} type", t == c.type, f"inferred {_text(t)}, proof says {_text(c.type)}"))
        got = tensor_hash(v, t.dtype)
        checks.append(Check(f"output {j} value", got == c.digest,
                            f"recomputed hash {got.hex()}, trace has {c.digest.hex()}"))
    return checks


def _binding(p: StepProof, model: Model) -> list[Check]:
    """The proof's instruction, ids, types and positions are the model's instruction ``step``."""
    program = model.program
    if p.step >= len(program.steps):
        return [Check("model instruction", False, f"the model has {len(program.steps)} instructions")]
    s = program.steps[p.step]
    positions = trace_layout(program).positions
    same = (p.model_hash == model.model_hash and p.leaves == len(program.types) and p.op == s.op.name
            and attrs_to_dict(p.attrs) == attrs_to_dict(s.attrs)
            and tuple(o.tensor for o in p.inputs) == s.inputs and tuple(c.tensor for c in p.outputs) == s.outputs
            and all(o.type == program.types[o.tensor] and (o.kind, o.index, o.output) == positions[o.tensor]
                    for o in p.inputs)
            and all(c.type == program.types[c.tensor] for c in p.outputs))
    return [Check("model instruction", same, f"instruction {p.step} of model {model.model_hash.hex()}: "
                                             f"{s.op.name} {list(s.inputs)} -> {list(s.outputs)}")]


def check_step(p: StepProof, root: bytes, model: Model | None = None) -> list[Check]:
    """Every check, in order; the proof holds when all are ok.

    The root binds everything the re-execution relies on; a model, when given,
    is also compared with the proof (its hash, its instruction K).  Nothing
    but the one instruction is executed.
    """
    checks = _structure(p) + _inclusion(p, root) + _reexecute(p)
    return checks + (_binding(p, model) if model is not None else [])
