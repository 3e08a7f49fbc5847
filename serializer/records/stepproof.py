"""The step proof record and its codec (docs/FORMAT.md section 8).

A proof carries instruction K (op, attributes, tensor ids and types), the
values of its inputs, the hashes of its outputs, and Merkle inclusion proofs
of all of them against a trace root.  Making and checking proofs is
cvmvm.tx.stepproof.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from isa.table import OPCODE, OPS
from isa.types import TensorType
from serializer import strict
from serializer.hashing import HASH_SIZE, INPUT, INSTR
from serializer.strict import Reader, attrs_to_wire, pack, tensor_data

PROOF_FORMAT = "cvmvm-step-proof"
PROOF_VERSION = 1
MAX_PROOF_BYTES = 1 << 32
MAX_LEAVES = (1 << 32) - 1   # leaf counts, tensor ids and positions are u32 in every leaf and root preimage

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
    step = rd.int(top["step"], "step", 0, MAX_LEAVES)
    op = OPS[rd.int(top["op"], "op", 0, len(OPS) - 1)]
    attrs = rd.attrs(op.attrs, top["attrs"], "attrs")
    operands = []
    for k, e in enumerate(rd.list(top["inputs"], "inputs")):
        w = f"inputs[{k}]"
        e = rd.map(e, OPERAND_KEYS, w)
        t = rd.tensor_type(e, w)
        operands.append(Operand(rd.int(e["tensor"], f"{w}.tensor", 0, leaves - 1),
                                rd.int(e["kind"], f"{w}.kind", INPUT, INSTR),
                                rd.int(e["index"], f"{w}.index", 0, MAX_LEAVES),
                                rd.int(e["output"], f"{w}.output", 0, MAX_LEAVES),
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
