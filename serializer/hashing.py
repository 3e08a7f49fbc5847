"""Canonical hashes: tensors, traces (a Merkle tree) and outputs.

Every construction is specified byte for byte in docs/FORMAT.md and pinned by
known-answer tests.  SHA-256 throughout; every preimage starts with its own
domain tag so a hash of one kind can never be read as another.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from isa.types import WIRE_DTYPES, vm_dtype

TENSOR_TAG = b"cvmvm/tensor/v1\x00"
OUTPUTS_TAG = b"cvmvm/outputs/v1\x00"
NODE_TAG = b"cvmvm/node/v1\x00"
HASH_SIZE = 32
LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"
ROOT_PREFIX = b"\x02"

# Wire codes of the dtypes, fixed forever (docs/FORMAT.md).
DTYPE_CODES: dict[str, int] = {"int8": 1, "uint8": 2, "int32": 3, "int64": 4,
                               "float16": 5, "float32": 6, "float64": 7}

# Kinds of trace entries.
INPUT, PARAM, INSTR = 0, 1, 2
KIND_NAMES = ("input", "param", "instr")


def tensor_header(dtype: str, shape: Sequence[int]) -> bytes:
    return (TENSOR_TAG + struct.pack("<BB", DTYPE_CODES[dtype], len(shape))
            + b"".join(struct.pack("<Q", d) for d in shape))


def canonical_array(value: np.ndarray, dtype: str) -> np.ndarray:
    """The array as C-contiguous little-endian ``dtype``; no copy when it already is.

    Not ``np.ascontiguousarray``: that turns a 0-d array into shape (1,).
    """
    return np.asarray(value, dtype=WIRE_DTYPES[dtype], order="C")


def tensor_hash(value: np.ndarray, dtype: str | None = None) -> bytes:
    """SHA-256(TENSOR_TAG || u8 dtype || u8 ndim || u64le dims || little-endian data).

    ``dtype`` names the VM dtype, and must be the array's own (byte order and
    memory layout aside: a big-endian or strided array hashes like its
    canonical form); by default it is read from the array.  An array of
    another dtype is refused rather than cast, since a cast could wrap values.
    A C-contiguous little-endian array is hashed straight from its buffer.
    """
    own = vm_dtype(value.dtype)
    if own is None:
        raise ValueError(f"no VM dtype for numpy dtype {value.dtype}")
    if dtype is not None and dtype != own:
        raise ValueError(f"a {value.dtype} array is not of VM dtype {dtype}")
    data = canonical_array(value, own)
    h = hashlib.sha256(tensor_header(own, data.shape))
    h.update(data.data.cast("B"))
    return h.digest()


def node_digest(descriptor: bytes) -> bytes:
    """SHA-256(NODE_TAG || descriptor): commits a trace leaf to what produced its tensor (FORMAT.md section 3)."""
    return hashlib.sha256(NODE_TAG + descriptor).digest()


def leaf_prefix(tensor: int, kind: int, index: int, output: int, precision: int | None, node: bytes) -> bytes:
    """Everything a leaf commits to but the tensor hash; fixed by the program alone."""
    return LEAF_PREFIX + struct.pack("<IBIIB", tensor, kind, index, output, precision or 0) + node


def leaf_hash(tensor: int, kind: int, index: int, output: int, precision: int | None, node: bytes,
              digest: bytes) -> bytes:
    """A trace leaf: SHA-256(0x00 || u32le tensor || u8 kind || u32le index || u32le output
    || u8 precision (0: none) || node digest || tensor hash)."""
    return hashlib.sha256(leaf_prefix(tensor, kind, index, output, precision, node) + digest).digest()


def trace_root(model_hash: bytes, count: int, tree: bytes) -> bytes:
    """The trace root: SHA-256(0x02 || model hash || u32le leaf count || Merkle root of the leaves)."""
    return hashlib.sha256(ROOT_PREFIX + model_hash + struct.pack("<I", count) + tree).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(NODE_PREFIX + left + right).digest()


def _split(n: int) -> int:
    """Largest power of two strictly less than n (n >= 2): RFC 6962's split point."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def merkle_root(leaves: Sequence[bytes]) -> bytes:
    """RFC 6962-style root: no duplicated nodes, so no two leaf lists share a root."""
    if not leaves:
        raise ValueError("a trace has at least one leaf")
    if len(leaves) == 1:
        return leaves[0]
    k = _split(len(leaves))
    return node_hash(merkle_root(leaves[:k]), merkle_root(leaves[k:]))


def merkle_roots(trees: Sequence[Sequence[bytes]]) -> list[bytes]:
    """``merkle_root`` of each of many leaf lists of one length, given by position: ``trees[p][i]``
    is leaf p of tree i.  Level by level, left to right, an odd last node carried up as it is:
    the same tree as RFC 6962's split at the largest power of two below n, built without a call
    per node (a batched run's roots; tests/test_hashing.py checks it against merkle_root)."""
    if not trees:
        raise ValueError("a trace has at least one leaf")
    level = [list(column) for column in trees]
    while len(level) > 1:
        paired = [[hashlib.sha256(NODE_PREFIX + a + b).digest() for a, b in zip(left, right)]
                  for left, right in zip(level[0::2], level[1::2])]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def merkle_proof(leaves: Sequence[bytes], index: int) -> list[bytes]:
    """Sibling hashes from the leaf up to the root (RFC 6962 audit path)."""
    if not 0 <= index < len(leaves):
        raise ValueError(f"leaf {index} out of range")
    if len(leaves) == 1:
        return []
    k = _split(len(leaves))
    if index < k:
        return merkle_proof(leaves[:k], index) + [merkle_root(leaves[k:])]
    return merkle_proof(leaves[k:], index - k) + [merkle_root(leaves[:k])]


def root_from_proof(leaf: bytes, index: int, count: int, proof: Sequence[bytes]) -> bytes | None:
    """The Merkle root that one leaf and its audit path imply, or None if the path does not fit (index, count)."""
    if not 0 <= index < count or any(len(h) != HASH_SIZE for h in proof):
        return None
    path = list(proof)

    def climb(lo: int, n: int) -> bytes | None:
        # Root of the subtree [lo, lo + n) holding `index`; the path's top sibling is last.
        if n == 1:
            return leaf
        if not path:
            return None
        k = _split(n)
        sibling = path.pop()
        if index < lo + k:
            inner = climb(lo, k)
            return None if inner is None else node_hash(inner, sibling)
        inner = climb(lo + k, n - k)
        return None if inner is None else node_hash(sibling, inner)

    got = climb(0, count)
    return got if got is not None and not path else None


def verify_merkle_proof(leaf: bytes, index: int, count: int, proof: Sequence[bytes], root: bytes) -> bool:
    """Whether one leaf and its audit path give this Merkle root; the path length must be exact."""
    return len(leaf) == HASH_SIZE and root_from_proof(leaf, index, count, proof) == root


def outputs_hash(digests: Sequence[bytes]) -> bytes:
    """SHA-256(OUTPUTS_TAG || u32le count || tensor hashes in head order)."""
    return hashlib.sha256(OUTPUTS_TAG + struct.pack("<I", len(digests)) + b"".join(digests)).digest()


@dataclass(frozen=True)
class TraceEntry:
    kind: int      # INPUT, PARAM or INSTR
    index: int     # input index, param index, or instruction index
    output: int    # output index within the instruction (0 for variables)
    tensor: int    # tensor id
    precision: int | None
    node: bytes    # node digest of the variable or instruction that produced it
    digest: bytes  # tensor hash

    @property
    def leaf(self) -> bytes:
        return leaf_hash(self.tensor, self.kind, self.index, self.output, self.precision, self.node, self.digest)
