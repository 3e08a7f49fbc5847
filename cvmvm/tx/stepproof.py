"""Step proofs: settle a dispute about one instruction without re-running the model.

A proof carries instruction K (op, attributes, tensor ids and types), the
values of its inputs, the hashes of its outputs, and Merkle inclusion proofs
of all of them against a trace root (docs/FORMAT.md section 8).  Checking it
re-executes only that instruction, verified as a one-instruction program with
the input types from the proof, and recomputes every inclusion proof.  Every
trace leaf commits to its tensor id and to a digest of the node that produced
it (op code, tensor ids, every attribute), so the root alone binds the proof's
instruction: a checker needs the root, not the model.  Given the model too, it
also confirms the proof names that model's instruction K.  The proof record and
its bytes are serializer.records.stepproof.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from isa.attrs import attrs_to_dict
from isa.errors import CvmError, InputError, LimitError
from isa.table import OP_BY_NAME
from isa.types import TensorType
from serializer import native
from serializer.hashing import (INSTR, KIND_NAMES, leaf_hash, merkle_proof, node_digest, root_from_proof, tensor_hash,
                                trace_root)
from serializer.records.stepproof import Claim, Operand, StepProof
from cvmvm.vm.api import Model
from cvmvm.vm.blas import hashing_alongside
from cvmvm.vm.execute import execute
from cvmvm.vm.trace import Tracer, trace_layout
from cvmvm.vm.verify import Limits, verify_instruction


# -- proving ---------------------------------------------------------------------------

def prove_step(model: Model, inputs: Mapping[str, np.ndarray], step: int) -> tuple[StepProof, bytes]:
    """Run the model once, traced, keeping instruction ``step``'s inputs; return its proof and the trace root."""
    program = model.program
    if not 0 <= step < len(program.steps):
        raise InputError("step", f"step {step} is out of range: the model's instructions are 0 to "
                                 f"{len(program.steps) - 1}")
    s = program.steps[step]
    tracer = Tracer(program, model.model_hash)
    kept: dict[int, np.ndarray] = {}

    def observe(t: int, value: np.ndarray) -> None:
        tracer(t, value)
        if t in s.inputs:
            kept[t] = value

    with hashing_alongside(program):
        execute(program, inputs, observe)
    trace = tracer.trace()
    leaves = trace.leaves
    layout = trace_layout(program)
    operands = tuple(Operand(t, *layout.positions[t], layout.nodes[t], program.types[t], kept[t],
                             tuple(merkle_proof(leaves, t))) for t in s.inputs)
    claims = tuple(Claim(t, program.types[t], trace.entries[t].digest, tuple(merkle_proof(leaves, t)))
                   for t in s.outputs)
    return StepProof(model.model_hash, len(leaves), step, s.op.name, s.attrs, operands, claims), trace.root


# -- checking ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str = ""


def _said(ok: bool, holds: str, fails: str) -> str:
    return holds if ok else fails


def _structure(p: StepProof) -> list[Check]:
    """Tensor ids and trace positions consistent with one instruction of some program."""
    first = p.outputs[0].tensor
    ids = [c.tensor for c in p.outputs]
    ok = all(c.tensor == first + j for j, c in enumerate(p.outputs)) and first + len(p.outputs) <= p.leaves
    checks = [Check("output ids", ok, _said(ok, f"outputs {ids} are consecutive tensor ids below {p.leaves}",
                                            f"outputs {ids} are not consecutive tensor ids below {p.leaves}"))]
    for k, o in enumerate(p.inputs):
        ok = o.tensor < first and (o.index < p.step if o.kind == INSTR else o.output == 0)
        where = (f"tensor {o.tensor} ({KIND_NAMES[o.kind] if o.kind < len(KIND_NAMES) else o.kind} {o.index}, "
                 f"output {o.output})")
        checks.append(Check(f"input {k} position", ok,
                            _said(ok, f"{where} is produced before instruction {p.step}",
                                  f"{where} cannot be an input of instruction {p.step}: it is not produced before it")))
    return checks


def _inclusion(p: StepProof, root: bytes) -> list[Check]:
    """Every leaf, with its path, reaches one Merkle tree, and that tree with the proof's model hash and
    leaf count is the trace root."""
    checks = []
    for k, o in enumerate(p.inputs):
        leaf = leaf_hash(o.tensor, o.kind, o.index, o.output, o.type.precision, o.node,
                         tensor_hash(o.value, o.type.dtype))
        ok = _reaches(root_from_proof(leaf, o.tensor, p.leaves, o.path), p, root)
        checks.append(Check(f"input {k} in trace", ok, _inclusion_text(ok, "its value", o.tensor, p.leaves, root)))
    # The outputs' leaves commit to this instruction itself: op, tensor ids, every attribute.
    node = node_digest(native.instr_descriptor(p.op, tuple(o.tensor for o in p.inputs),
                                               tuple(c.tensor for c in p.outputs), p.attrs))
    for j, c in enumerate(p.outputs):
        leaf = leaf_hash(c.tensor, INSTR, p.step, j, c.type.precision, node, c.digest)
        ok = _reaches(root_from_proof(leaf, c.tensor, p.leaves, c.path), p, root)
        checks.append(Check(f"output {j} in trace", ok, _inclusion_text(ok, "its hash", c.tensor, p.leaves, root)))
    return checks


def _inclusion_text(ok: bool, what: str, tensor: int, leaves: int, root: bytes) -> str:
    if ok:
        return f"tensor {tensor} (leaf {tensor} of {leaves}) and its path lead to root {root.hex()}"
    return (f"tensor {tensor} (leaf {tensor} of {leaves}) with its path does not lead to root {root.hex()}: "
            f"{what}, its position, its producer or its path is not what that trace committed to")


def _reaches(tree: bytes | None, p: StepProof, root: bytes) -> bool:
    return tree is not None and trace_root(p.model_hash, p.leaves, tree) == root


def _text(t: TensorType) -> str:
    return f"{t.dtype}{list(t.shape)}" + ("" if t.precision is None else f" p{t.precision}")


def _reexecute(p: StepProof, limits: Limits) -> list[Check]:
    """Verify the instruction alone, over the proof's input types and values, and run it within
    ``limits``: an instruction over them is refused (LimitError), not called invalid."""
    try:
        program = verify_instruction(OP_BY_NAME[p.op], p.attrs, [(o.type, o.value) for o in p.inputs], limits)
        values, _ = execute(program, {f"in{k}": o.value for k, o in enumerate(p.inputs)})
    except LimitError:
        raise
    except CvmError as e:
        return [Check("instruction", False, f"{p.op} does not verify and run over the proof's inputs: "
                                            f"{e.code}: {e.message}")]
    checks = [Check("instruction", True, f"{p.op} verifies over the proof's input types")]
    for j, (c, t, v) in enumerate(zip(p.outputs, program.output_types, values)):
        ok = t == c.type
        checks.append(Check(f"output {j} type", ok, _said(ok, f"{_text(t)}, as inferred",
                                                          f"the proof says {_text(c.type)}; the instruction "
                                                          f"infers {_text(t)}")))
        got = tensor_hash(v, t.dtype)
        ok = got == c.digest
        checks.append(Check(f"output {j} value", ok,
                            _said(ok, f"re-executed, it hashes to {got.hex()}, as the trace says",
                                  f"re-executed, it hashes to {got.hex()}; the trace says {c.digest.hex()}")))
    return checks


def _binding(p: StepProof, model: Model) -> list[Check]:
    """The proof's instruction, ids, types and positions are the model's instruction ``step``."""
    program = model.program
    if p.step >= len(program.steps):
        return [Check("model instruction", False, f"the proof names instruction {p.step}; the model's "
                                                   f"instructions are 0 to {len(program.steps) - 1}")]
    s = program.steps[p.step]
    positions = trace_layout(program).positions
    same = (p.model_hash == model.model_hash and p.leaves == len(program.types) and p.op == s.op.name
            and attrs_to_dict(p.attrs) == attrs_to_dict(s.attrs)
            and tuple(o.tensor for o in p.inputs) == s.inputs and tuple(c.tensor for c in p.outputs) == s.outputs
            and all(o.type == program.types[o.tensor] and (o.kind, o.index, o.output) == positions[o.tensor]
                    for o in p.inputs)
            and all(c.type == program.types[c.tensor] for c in p.outputs))
    named = f"instruction {p.step} of model {model.model_hash.hex()}: {s.op.name} {list(s.inputs)} -> {list(s.outputs)}"
    return [Check("model instruction", same, _said(same, f"the proof is {named}",
                                                   f"the proof ({p.op} {[o.tensor for o in p.inputs]} -> "
                                                   f"{[c.tensor for c in p.outputs]} of model {p.model_hash.hex()}) "
                                                   f"is not {named}"))]


def check_step(p: StepProof, root: bytes, model: Model | None = None, limits: Limits = Limits()) -> list[Check]:
    """Every check, in order; the proof holds when all are ok.

    The root binds everything the re-execution relies on, so the proof is
    authenticated first: its ids and positions, every Merkle path (its length
    is exact for the leaf count) and every leaf against the root.  Only then is
    the one instruction re-executed, within ``limits`` as a run would be.  A
    model, when given, is also compared with the proof (its hash, its
    instruction K).
    """
    checks = _structure(p) + _inclusion(p, root)
    if all(c.ok for c in checks):  # else the proof is invalid already, and nothing is run for it
        checks += _reexecute(p, limits)
    return checks + (_binding(p, model) if model is not None else [])
