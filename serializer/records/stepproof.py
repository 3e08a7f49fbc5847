"""The step proof record and its codecs (docs/FORMAT.md sections 9 and 10.2).

A proof opens instruction K of a run against the program root and the trace
root: the instruction's record with its program path, the input commitments,
and per operand either its whole body (a whole-instruction proof) or the chunks
one output element reads (an element proof), each with the path that puts its
commitment under one of the roots.  ``encode``/``decode`` are the canonical
msgpack file; ``calldata_proof`` is an element proof in the binary form the
contract reads.  Making and checking proofs is cvmvm.tx.stepproof.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from isa.errors import MalformedError
from serializer import strict
from serializer.hashing import HASH_SIZE
from serializer.records.program import decode_instr
from serializer.strict import Reader, pack

PROOF_FORMAT = "cvmvm-step-proof"
PROOF_VERSION = 3
MAX_PROOF_BYTES = 1 << 32
MAX_COUNT = (1 << 32) - 1   # counts, ids and indices are u32 in the records
MAX_PATH = 32               # an audit path of a tree of at most 2^32 leaves
# The 4-byte ABI selectors of challenge(uint256,bytes) and challengeOutputs(uint256,bytes): the
# first bytes of their Keccak-256 (hashlib has no Keccak; tests/test_chain_contract.py recomputes them).
CHALLENGE_SELECTOR = bytes.fromhex("a03aafbf")
CHALLENGE_OUTPUTS_SELECTOR = bytes.fromhex("068fc355")

KEYS = ("format", "version", "program", "inputs", "step", "instruction", "path", "element", "operands", "results")
OPERAND_KEYS = ("data", "chunks", "path")
CHUNK_KEYS = ("index", "data", "path")
RESULT_KEYS = ("commitment", "chunk", "path")

_READER = Reader("step_proof")

Path = tuple[bytes, ...]


@dataclass(frozen=True)
class Chunk:
    index: int
    data: bytes   # exactly chunk ``index`` of the tensor's body
    path: Path    # its audit path in the tensor's chunk tree


@dataclass(frozen=True)
class Operand:
    data: bytes                 # whole proof: the operand's body; element proof: empty
    chunks: tuple[Chunk, ...]   # element proof: the footprint's chunks, ascending; whole proof: none
    path: Path                  # its commitment: none (a model input), program path (param) or trace path


@dataclass(frozen=True)
class Result:
    commitment: bytes | None    # whole proof: the trace's commitment of the result
    chunk: Chunk | None         # element proof: the chunk holding the element
    path: Path                  # its trace path


@dataclass(frozen=True)
class StepProof:
    counts: tuple[int, int, int, int, int]   # I, P, N, H, T (the program root's counts)
    inputs: tuple[bytes, ...]                # the input commitments
    step: int
    record: bytes                            # instruction ``step``'s program record
    path: Path                               # its program path
    element: int | None                      # None: a whole-instruction proof
    operands: tuple[Operand, ...]
    results: tuple[Result, ...]


# -- msgpack -----------------------------------------------------------------------------------

def _chunk_wire(c: Chunk) -> dict[str, Any]:
    return {"index": c.index, "data": c.data, "path": list(c.path)}


def to_wire(p: StepProof) -> dict[str, Any]:
    return {
        "format": PROOF_FORMAT,
        "version": PROOF_VERSION,
        "program": list(p.counts),
        "inputs": list(p.inputs),
        "step": p.step,
        "instruction": p.record,
        "path": list(p.path),
        "element": p.element,
        "operands": [{"data": o.data, "chunks": [_chunk_wire(c) for c in o.chunks], "path": list(o.path)}
                     for o in p.operands],
        "results": [{"commitment": r.commitment, "chunk": None if r.chunk is None else _chunk_wire(r.chunk),
                     "path": list(r.path)} for r in p.results],
    }


def encode(p: StepProof) -> bytes:
    return pack(to_wire(p))


def _path(rd: Reader, value: Any, where: str) -> Path:
    return tuple(rd.bin(h, where, HASH_SIZE) for h in rd.list(value, where, MAX_PATH))


def _chunk(rd: Reader, e: Any, where: str) -> Chunk:
    e = rd.map(e, CHUNK_KEYS, where)
    return Chunk(rd.int(e["index"], f"{where}.index", 0, MAX_COUNT), rd.bin(e["data"], f"{where}.data"),
                 _path(rd, e["path"], f"{where}.path"))


def from_wire(top: Any) -> StepProof:
    """The proof's structure; whether its sizes fit its instruction, its paths its roots and
    its results its re-execution is cvmvm.tx.stepproof's to check."""
    rd = _READER
    rd.version(top, PROOF_FORMAT, PROOF_VERSION, "step proof")
    top = rd.map(top, KEYS, "proof")
    rd.const(top["format"], PROOF_FORMAT, "format")
    rd.const(top["version"], PROOF_VERSION, "version")
    counts = tuple(rd.int(v, "program", 0, MAX_COUNT) for v in rd.list(top["program"], "program", 5))
    if len(counts) != 5:
        raise rd.fail(f"program: {len(counts)} counts, expected 5 (inputs, params, instructions, heads, tensors)")
    inputs = tuple(rd.bin(h, "inputs", HASH_SIZE) for h in rd.list(top["inputs"], "inputs", MAX_COUNT))
    element = top["element"]
    if element is not None:
        element = rd.int(element, "element", 0, MAX_COUNT)
    operands = []
    for k, e in enumerate(rd.list(top["operands"], "operands")):
        w = f"operands[{k}]"
        e = rd.map(e, OPERAND_KEYS, w)
        chunks = tuple(_chunk(rd, c, f"{w}.chunks[{j}]") for j, c in enumerate(rd.list(e["chunks"], f"{w}.chunks")))
        operands.append(Operand(rd.bin(e["data"], f"{w}.data"), chunks, _path(rd, e["path"], f"{w}.path")))
        if element is None and chunks or element is not None and operands[-1].data:
            raise rd.fail(f"{w}: a {'whole-instruction' if element is None else 'element'} proof carries "
                          f"{'data, not chunks' if element is None else 'chunks, not data'}")
    results = []
    for j, e in enumerate(rd.list(top["results"], "results")):
        w = f"results[{j}]"
        e = rd.map(e, RESULT_KEYS, w)
        whole = element is None
        if (e["commitment"] is None) == whole or (e["chunk"] is None) != whole:
            raise rd.fail(f"{w}: a {'whole-instruction' if whole else 'element'} proof's result carries "
                          f"{'a commitment' if whole else 'a chunk'} only")
        results.append(Result(None if e["commitment"] is None else rd.bin(e["commitment"], f"{w}.commitment", HASH_SIZE),
                              None if e["chunk"] is None else _chunk(rd, e["chunk"], f"{w}.chunk"),
                              _path(rd, e["path"], f"{w}.path")))
    if element is not None and len(results) != 1:
        raise rd.fail(f"results: an element proof has one result, not {len(results)}")
    return StepProof(counts, inputs, rd.int(top["step"], "step", 0, MAX_COUNT), rd.bin(top["instruction"], "instruction"),
                     _path(rd, top["path"], "path"), element, tuple(operands), tuple(results))


def decode(data: bytes) -> StepProof:
    return strict.decode(data, _READER, MAX_PROOF_BYTES, "step proof", from_wire, to_wire)


# -- the contract's binary form (FORMAT.md section 10.2) ------------------------------------

def _hashes(path: Path) -> bytes:
    return bytes([len(path)]) + b"".join(path)


def _binary_chunk(c: Chunk) -> bytes:
    return struct.pack("<I", c.index) + c.data + _hashes(c.path)


def calldata_proof(p: StepProof) -> bytes:
    """An element proof as the bytes ``challenge`` takes."""
    if p.element is None:
        raise ValueError("only an element proof has a calldata form")
    (result,) = p.results
    # The input commitments only when an operand is a model input: the contract has the input
    # commitment itself, and needs the list only to open such an operand.  (A record that does not
    # decode is refused before anything after it is read.)
    try:
        needed = any(t < p.counts[0] for t, _ in decode_instr(p.record, p.counts, "step_proof").inputs)
    except MalformedError:
        needed = True
    inputs = b"".join(p.inputs) if needed else b""
    out = [bytes([PROOF_VERSION]), struct.pack("<5I", *p.counts), struct.pack("<II", p.step, p.element),
           struct.pack("<I", len(p.record)), p.record, _hashes(p.path), inputs]
    for o in p.operands:
        out += [_hashes(o.path), struct.pack("<I", len(o.chunks)), *(_binary_chunk(c) for c in o.chunks)]
    out += [_hashes(result.path), _binary_chunk(result.chunk)]   # type: ignore[arg-type]
    return b"".join(out)


@dataclass(frozen=True)
class Head:
    """One head of the program in an outputs proof."""

    tensor: int
    commitment: bytes
    record_path: Path   # head record's audit path in the program tree
    path: Path          # the commitment's: none (a model input), program path (param) or trace path


def outputs_calldata_proof(counts: tuple[int, int, int, int, int], inputs: tuple[bytes, ...],
                           heads: tuple[Head, ...]) -> bytes:
    """An outputs proof as the bytes ``challengeOutputs`` takes."""
    out = [bytes([PROOF_VERSION]), struct.pack("<5I", *counts), b"".join(inputs)]
    for h in heads:
        out += [struct.pack("<I", h.tensor), h.commitment, _hashes(h.record_path), _hashes(h.path)]
    return b"".join(out)


def challenge_calldata(commitment_id: int, proof: bytes, selector: bytes = CHALLENGE_SELECTOR) -> bytes:
    """The ABI encoding of challenge(uint256 commitmentId, bytes proof) (or, with its selector,
    challengeOutputs), selector first."""
    padded = proof + b"\x00" * (-len(proof) % 32)
    return (selector + commitment_id.to_bytes(32, "big") + (64).to_bytes(32, "big")
            + len(proof).to_bytes(32, "big") + padded)
