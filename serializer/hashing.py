"""Every hash of commitment format 3 (docs/FORMAT.md sections 1.3 and 2-5): chunked
tensor commitments, Merkle trees and audit paths, the program root, the model hash,
the input commitment, the trace root and the output hash.

Everything a contract opens is here, byte for byte: the committed body of a
tensor (lanes by precision, channel-last for rank-4 tensors in 1-byte lanes),
its chunks (256 bytes for a body of at most 4096 bytes, else 4096) and their
RFC 6962 tree.  The program records themselves
are serializer.records.program.  SHA-256 throughout; every preimage starts with
its own domain tag or tree prefix, and known-answer tests recompute each one
(tests/test_hashing.py).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import numpy as np

from isa.types import DTYPES, INT32, WIRE_DTYPES, TensorType, vm_dtype

CHUNK_SIZE = 4096        # the chunks of a body longer than this
SMALL_CHUNK_SIZE = 256   # the chunks of a body of at most CHUNK_SIZE bytes
HASH_SIZE = 32
LEAF = b"\x00"
INNER = b"\x01"

TENSOR_TAG = b"cvmvm/tensor/v3\x00"
PROGRAM_TAG = b"cvmvm/program/v3\x00"
MODEL_TAG = b"cvmvm/model/v3\x00"
INPUTS_TAG = b"cvmvm/inputs/v3\x00"
TRACE_TAG = b"cvmvm/trace/v3\x00"
OUTPUTS_TAG = b"cvmvm/outputs/v3\x00"

# Wire codes of the dtypes, fixed forever.
DTYPE_CODES: dict[str, int] = {"int8": 1, "uint8": 2, "int32": 3, "int64": 4,
                               "float16": 5, "float32": 6, "float64": 7}

# Kinds of trace entries (a tensor's producer), for trace files and diffs.
INPUT, PARAM, INSTR = 0, 1, 2
KIND_NAMES = ("input", "param", "instr")

_LANE_DTYPES: dict[int, np.dtype] = {1: np.dtype("i1"), 2: np.dtype("<i2"), 4: np.dtype("<i4")}


# -- the committed body ---------------------------------------------------------------

def lane_width(t: TensorType) -> int:
    """Bytes per element: by precision for int32 (1, 2 or 4), else the dtype's size."""
    if t.dtype == INT32:
        p = t.precision
        return 4 if p is None or p > 16 else 2 if p > 8 else 1
    return DTYPES[t.dtype].itemsize


def channel_last(t: TensorType) -> bool:
    """Rank-4 tensors in 1-byte lanes (every conv2d input and weight) are laid out (N, H, W, C)."""
    return t.ndim == 4 and lane_width(t) == 1


def body_length(t: TensorType) -> int:
    return t.size * lane_width(t)


def chunk_size(length: int) -> int:
    """The chunk size of a body of ``length`` bytes: a body that one large chunk would hold is
    cut into small ones, so an element proof of a small tensor carries a small part of it."""
    return SMALL_CHUNK_SIZE if length <= CHUNK_SIZE else CHUNK_SIZE


def chunk_count(t: TensorType) -> int:
    length = body_length(t)
    return -(-length // chunk_size(length))


def _lane_dtype(t: TensorType) -> np.dtype:
    if t.dtype == INT32:
        return _LANE_DTYPES[lane_width(t)]
    return WIRE_DTYPES[t.dtype]


def tensor_body(value: np.ndarray, t: TensorType) -> memoryview:
    """The tensor's committed bytes: its elements in the committed order, each in its lane.

    A value must be of the VM dtype its type says and within its precision
    (verification and execution guarantee both); narrowing to the lane is then
    exact.  No copy when the array already is its body (4-byte lanes, row-major).
    """
    return _body(value, _lane_dtype(t), channel_last(t))


def _body(value: np.ndarray, dtype: np.dtype, channel_last: bool) -> memoryview:
    if channel_last:
        out = value.transpose(0, 2, 3, 1).astype(dtype, order="C")
    elif value.dtype == dtype and value.flags.c_contiguous:  # the very bytes (a big-endian array is not)
        out = value
    else:
        out = value.astype(dtype, order="C")
    return out.data.cast("B")


def lanes_as_tensor(lanes: np.ndarray, t: TensorType) -> np.ndarray:
    """A body's lanes (the last dimension, in the committed order) seen as the tensor, without a
    copy: writing a value into the view lays its body out, reading it reads the body back.  Leading
    dimensions stay in front: lanes of shape (k, length) are k bodies, seen as shape (k, *t.shape)."""
    lead = lanes.shape[:-1]
    if channel_last(t):
        n, c, h, w = t.shape
        k = len(lead)
        return lanes.reshape(*lead, n, h, w, c).transpose(*range(k), k, k + 3, k + 1, k + 2)
    return lanes.reshape(*lead, *t.shape)


def tensor_from_body(body: bytes | memoryview, t: TensorType) -> np.ndarray:
    """A committed body back to its tensor: row-major, the VM dtype (int32 lanes sign-extended).
    The body must be exactly ``body_length(t)`` bytes."""
    return np.ascontiguousarray(lanes_as_tensor(np.frombuffer(body, dtype=_lane_dtype(t)), t), dtype=DTYPES[t.dtype])


def positions(t: TensorType, index: np.ndarray) -> np.ndarray:
    """Row-major element indices -> positions in the committed order."""
    index = np.asarray(index, dtype=np.int64)
    if not channel_last(t):
        return index
    n, c, h, w = np.unravel_index(index, t.shape)
    _, cs, hs, ws = t.shape
    return ((n * hs + h) * ws + w) * cs + c


def type_bytes(t: TensorType) -> bytes:
    """u8 dtype code || u8 precision (0: none) || u8 ndim || u32le dims."""
    return bytes([DTYPE_CODES[t.dtype], t.precision or 0, t.ndim]) + struct.pack(f"<{t.ndim}I", *t.shape)


# -- trees (RFC 6962 shape) ----------------------------------------------------------------

# Every leaf and inner hash starts from one of these states (the prefix hashed once, the state
# copied for each node: cheaper than a new hash object over a concatenation).
_LEAF_STATE = hashlib.sha256(LEAF)
_INNER_STATE = hashlib.sha256(INNER)


def leaf_hash(data: bytes | memoryview) -> bytes:
    h = _LEAF_STATE.copy()
    h.update(data)
    return h.digest()


def inner_hash(left: bytes, right: bytes) -> bytes:
    h = _INNER_STATE.copy()
    h.update(left)
    h.update(right)
    return h.digest()


def tree_levels(leaves: Sequence[bytes]) -> list[list[bytes]]:
    """Every level of the tree, leaves first: adjacent pairs from the left, an odd last node
    carried up unchanged.  That is RFC 6962's split tree, built bottom-up."""
    if not leaves:
        raise ValueError("a tree has at least one leaf")
    levels = [list(leaves)]
    while len(levels[-1]) > 1:
        level = levels[-1]
        up = [inner_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            up.append(level[-1])
        levels.append(up)
    return levels


def tree_root(leaves: Sequence[bytes]) -> bytes:
    """The root of ``tree_levels(leaves)``, in one pass that keeps no level below the one it makes."""
    if not leaves:
        raise ValueError("a tree has at least one leaf")
    level = leaves
    copy = _INNER_STATE.copy
    while len(level) > 1:
        up = []
        for i in range(1, len(level), 2):
            h = copy()
            h.update(level[i - 1])
            h.update(level[i])
            up.append(h.digest())
        if len(level) % 2:
            up.append(level[-1])
        level = up
    return level[0]


def tree_roots(trees: Sequence[Sequence[bytes]]) -> list[bytes]:
    """``tree_root`` of each of many leaf lists of one length, given by position: ``trees[p][i]``
    is leaf p of tree i.  Level by level, left to right, an odd last node carried up as it is
    (``tree_levels``' shape), without a call per node: a batched run's trace trees
    (tests/test_hashing.py checks it against tree_root)."""
    if not trees:
        raise ValueError("a tree has at least one leaf")
    level: list[Sequence[bytes]] = list(trees)
    copy = _INNER_STATE.copy
    while len(level) > 1:
        paired: list[Sequence[bytes]] = []
        for left, right in zip(level[0::2], level[1::2]):
            up = []
            for a, b in zip(left, right):
                h = copy()
                h.update(a)
                h.update(b)
                up.append(h.digest())
            paired.append(up)
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return list(level[0])


def audit_path(levels: list[list[bytes]], index: int) -> list[bytes]:
    """Leaf ``index``'s siblings from the bottom up (a carried node has none at its level)."""
    if not 0 <= index < len(levels[0]):
        raise ValueError(f"leaf {index} out of range")
    path = []
    for level in levels[:-1]:
        sibling = index ^ 1
        if sibling < len(level):
            path.append(level[sibling])
        index //= 2
    return path


def root_from_path(leaf: bytes, index: int, count: int, path: Sequence[bytes]) -> bytes | None:
    """The root one leaf and its audit path give (RFC 9162 section 2.1.3.2), or None when the
    path does not have exactly the length (index, count) needs."""
    if not 0 <= index < count or len(path) > 64 or any(len(h) != HASH_SIZE for h in path):
        return None
    fn, sn, r = index, count - 1, leaf
    for p in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = inner_hash(p, r)
            while not fn & 1 and fn:
                fn >>= 1
                sn >>= 1
        else:
            r = inner_hash(r, p)
        fn >>= 1
        sn >>= 1
    return r if sn == 0 else None


def meeting_level(a: int, b: int) -> int:
    """The lowest level at which leaves a and b have one ancestor (level 0: the leaves)."""
    return (a ^ b).bit_length()


def sibling_levels(index: int, count: int, below: int) -> int:
    """How many of the levels under ``below`` give leaf ``index``'s ancestor a sibling: the
    entries of its audit path that lie below that level (a carried node has none)."""
    fn, sn, k = index, count - 1, 0
    for _ in range(below):
        if fn & 1 or fn < sn:
            k += 1
        fn >>= 1
        sn >>= 1
    return k


def shared_path(path: Sequence[bytes], index: int, first: int, count: int) -> list[bytes]:
    """Leaf ``index``'s audit path as a proof carries it after leaf ``first``'s in the same tree:
    only its entries below the level where its ancestor is the sibling of ``first``'s (FORMAT.md
    section 9), none for the same leaf."""
    if index == first:
        return []
    return list(path[:sibling_levels(index, count, meeting_level(index, first) - 1)])


def node_from_path(leaf: bytes, index: int, count: int, path: Sequence[bytes], levels: int) -> bytes | None:
    """Leaf ``index``'s ancestor ``levels`` levels up, from the path's entries below it, or None
    when the path does not have exactly the entries those levels need."""
    if not 0 <= index < count or len(path) > 64 or any(len(h) != HASH_SIZE for h in path):
        return None
    fn, sn, r, k = index, count - 1, leaf, 0
    for _ in range(levels):
        if fn & 1 or fn < sn:
            if k == len(path):
                return None
            r = inner_hash(path[k], r) if fn & 1 else inner_hash(r, path[k])
            k += 1
        fn >>= 1
        sn >>= 1
    return r if k == len(path) else None


def joins(leaf: bytes, index: int, path: Sequence[bytes], first_leaf: bytes, first: int,
          first_path: Sequence[bytes], count: int) -> bool:
    """Whether leaf ``index`` with its shared path (``shared_path``) is in the tree that leaf
    ``first`` and its full audit path give: its ancestor below the meeting level is the entry
    of the first path there."""
    if index == first:
        return leaf == first_leaf and not path
    below = meeting_level(index, first) - 1
    node = node_from_path(leaf, index, count, path, below)
    k = sibling_levels(first, count, below)
    return node is not None and k < len(first_path) and node == first_path[k]


# -- tensors -------------------------------------------------------------------------------------

def chunk_leaves(body: memoryview, size: int) -> list[bytes]:
    """The leaf hashes of ``size``-byte chunks of the body, straight from its buffer (slices of a
    memoryview copy nothing).  ``size`` is the tensor's (``chunk_size`` of its whole body): a part
    of a body, a block of its chunks, is cut as the whole is."""
    leaves = []
    copy = _LEAF_STATE.copy
    for i in range(0, len(body), size):
        h = copy()
        h.update(body[i:i + size])
        leaves.append(h.digest())
    return leaves


def chunk_root(body: memoryview) -> bytes:
    """The root of a tensor's chunk tree, from its whole body; a body of one chunk is its own leaf."""
    size = chunk_size(len(body))
    if len(body) <= size:
        return leaf_hash(body)
    return blocks_root(body, size)


def blocks_root(body: memoryview, size: int) -> bytes:
    """``tree_root(chunk_leaves(body, size))``: each pair of leaves is hashed straight into its
    parent (no list of leaves), then ``tree_root`` folds the parents.  Also the root of a block of
    a body's chunks (a power-of-two run of them, or its last ones): in an RFC 6962 tree the nodes at
    height m are the roots of consecutive 2^m-leaf blocks, so block roots fold into the chunk root."""
    copy = _LEAF_STATE.copy
    pair = _INNER_STATE.copy
    end = len(body)
    parents = []
    for i in range(0, end, 2 * size):
        h = copy()
        h.update(body[i:min(i + size, end)])
        if i + size < end:
            right = copy()
            right.update(body[i + size:min(i + 2 * size, end)])
            p = pair()
            p.update(h.digest())
            p.update(right.digest())
            parents.append(p.digest())
        else:
            parents.append(h.digest())
    return tree_root(parents)


def commitment_of(t: TensorType, chunk_root: bytes) -> bytes:
    return hashlib.sha256(TENSOR_TAG + type_bytes(t) + chunk_root).digest()


def tensor_commitment(value: np.ndarray, t: TensorType) -> bytes:
    """SHA-256("cvmvm/tensor/v3" || 0x00 || type || chunk root) (FORMAT.md section 2)."""
    return commitment_of(t, chunk_root(tensor_body(value, t)))


class Committer:
    """Commits tensors of one type, for a caller that commits many (a traced run commits every
    tensor of a program on every run): what the type fixes is decided once, the lane dtype, the
    layout, the chunk size and the commitment's prefix, hashed once and copied for each
    commitment.  The commitments are ``tensor_commitment``'s, byte for byte (tests/test_hashing.py)."""

    def __init__(self, t: TensorType) -> None:
        self.type = t
        self.length = body_length(t)
        self.chunk = chunk_size(self.length)
        self._lane = _lane_dtype(t)
        self._channel_last = channel_last(t)
        self._prefix = hashlib.sha256(TENSOR_TAG + type_bytes(t))

    def body(self, value: np.ndarray) -> memoryview:
        """``tensor_body(value, self.type)``."""
        return _body(value, self._lane, self._channel_last)

    def write_body(self, value: np.ndarray, out: np.ndarray,
                   move: Callable[[np.ndarray, np.ndarray], int] | None = None) -> None:
        """Write ``tensor_body(value, self.type)`` into ``out`` (``self.length`` uint8), narrowing into
        the lanes and reordering in the same pass.  ``move``: serializer.sha's compiled channel mover,
        for a channel-last body of a native int32 array in C order (numpy's copy into the transposed
        view reads the tensor channel by channel across its rows: some 5x as long)."""
        if move is not None and self._channel_last and vm_dtype(value.dtype) == INT32 and value.dtype.isnative \
                and value.flags.c_contiguous:
            n, c, h, w = value.shape
            move(value.reshape(n, c, h * w), out.reshape(n, h * w * c).view(np.int8))
        else:
            np.copyto(lanes_as_tensor(out.view(self._lane), self.type), value, casting="unsafe")

    def of_root(self, root: bytes) -> bytes:
        """``commitment_of(self.type, root)``."""
        h = self._prefix.copy()
        h.update(root)
        return h.digest()

    def rows(self, body: memoryview, count: int) -> list[bytes]:
        """The commitment of each of ``count`` bodies of this type laid end to end (a batched run's
        tensor, its items stacked along axis 0).  Chunk p of every item is hashed in one loop, then
        every item's tree is folded level by level (``tree_roots``): no call per item."""
        length, size = self.length, self.chunk
        leaf = _LEAF_STATE.copy
        items = range(0, count * length, length)
        by_chunk = []
        for a in range(0, length, size):
            b = min(a + size, length)
            leaves = []
            for start in items:
                h = leaf()
                h.update(body[start + a:start + b])
                leaves.append(h.digest())
            by_chunk.append(leaves)
        prefix = self._prefix.copy
        out = []
        for root in by_chunk[0] if len(by_chunk) == 1 else tree_roots(by_chunk):
            h = prefix()
            h.update(root)
            out.append(h.digest())
        return out

    def __call__(self, value: np.ndarray) -> bytes:
        """``tensor_commitment(value, self.type)``."""
        body = self.body(value)
        if self.length <= self.chunk:
            # One chunk: its leaf is the chunk root (the hash reads the body's buffer as it is).
            leaf = _LEAF_STATE.copy()
            leaf.update(body)
            root = leaf.digest()
        else:
            root = blocks_root(body, self.chunk)
        h = self._prefix.copy()
        h.update(root)
        return h.digest()


class Bodies(NamedTuple):
    """One set of buffers for ``BulkCommitter``: where each tensor's value is written
    (``np.copyto(dests[k], value, casting="unsafe")``: an array of the tensor's shape whose elements
    land in their lanes, in the committed order) and every chunk of every body, in order."""

    dests: tuple[np.ndarray, ...]
    chunks: tuple[memoryview, ...]
    buffer: np.ndarray        # every body, uint8: what the chunks are slices of


class BulkPlan(NamedTuple):
    """``BulkCommitter``'s positions as arrays: each chunk's [start, end) in the buffer (leaves,
    nodes 0..), each inner node's two children (nodes numbered on from the leaves, in order),
    each tensor's root node, and the commitments' prefixes (TENSOR_TAG || type_bytes) end to end
    with their boundaries."""

    chunks: np.ndarray     # (leaves, 2) int64
    pairs: np.ndarray      # (inner nodes, 2) int64
    roots: np.ndarray      # (tensors,) int64
    prefixes: np.ndarray   # uint8
    spans: np.ndarray      # (tensors + 1,) int64


class BulkCommitter:
    """Commits a fixed list of small tensors together.  For a model of a few kilobytes a traced run
    spends most of its hashing in per-call overhead, not in SHA-256: so the bodies are written into
    one buffer as the tensors come, and ``commit`` then hashes every chunk, every inner node of every
    chunk tree and every commitment in three flat loops over positions fixed here.  The commitments
    are ``Committer``'s byte for byte (tests/test_hashing.py)."""

    def __init__(self, types: Sequence[TensorType]) -> None:
        self.types = tuple(types)
        self._spans: list[tuple[int, int]] = []     # each body's bytes in the buffer
        chunks: list[tuple[int, int]] = []
        trees: list[list[int]] = []                 # each tensor's leaves, as node indices
        pos = 0
        for t in self.types:
            length = body_length(t)
            size = chunk_size(length)
            self._spans.append((pos, length))
            first = len(chunks)
            chunks += [(pos + i, pos + min(i + size, length)) for i in range(0, length, size)] or [(pos, pos)]
            trees.append(list(range(first, len(chunks))))
            pos += -(-length // 8) * 8   # every body 8-byte aligned for its lanes
        self.size = pos
        self.spans = tuple(self._spans)           # each body's (start, length) in the buffer, in order
        self._chunks = tuple(chunks)
        # Nodes are numbered leaves first, then inner nodes as they are made: each tree is folded as
        # tree_root folds it (adjacent pairs from the left, an odd last node carried up).
        pairs: list[tuple[int, int]] = []
        roots = []
        node = len(chunks)
        for level in trees:
            while len(level) > 1:
                up = []
                for i in range(1, len(level), 2):
                    pairs.append((level[i - 1], level[i]))
                    up.append(node)
                    node += 1
                if len(level) % 2:
                    up.append(level[-1])
                level = up
            roots.append(level[0])
        self._pairs = tuple(pairs)
        self._roots = tuple(roots)
        prefixes = [TENSOR_TAG + type_bytes(t) for t in self.types]
        self._prefixes = tuple(hashlib.sha256(p) for p in prefixes)
        # The same positions as flat arrays, for a compiled commit (serializer.sha.Hasher).
        spans = np.cumsum([0] + [len(p) for p in prefixes], dtype=np.int64)
        self.plan = BulkPlan(np.array(chunks, dtype=np.int64).reshape(-1, 2),
                             np.array(pairs, dtype=np.int64).reshape(-1, 2), np.array(roots, dtype=np.int64),
                             np.frombuffer(b"".join(prefixes), dtype=np.uint8).copy(), spans)

    def bodies(self) -> Bodies:
        """A new set of buffers (a caller reuses one run after run: making it costs more than using it)."""
        buffer = np.zeros(self.size, dtype=np.uint8)
        dests = tuple(lanes_as_tensor(buffer[start:start + length].view(_lane_dtype(t)), t)
                      for t, (start, length) in zip(self.types, self._spans))
        view = buffer.data
        return Bodies(dests, tuple(view[a:b] for a, b in self._chunks), buffer)

    def row_dests(self, buffer: np.ndarray, count: int) -> tuple[np.ndarray, ...]:
        """Where each tensor's values of ``count`` items go in ``buffer`` (uint8, ``count * size``
        bytes): item i's bodies at ``i * size``, laid out as one item's are (``bodies``), so each
        item's chunks are the plan's shifted by ``i * size``.  Tensor k's view has shape
        (count, *types[k].shape): item i's value is written into ``dests[k][i]``."""
        items = buffer.reshape(count, self.size)
        return tuple(lanes_as_tensor(items[:, start:start + length].view(_lane_dtype(t)), t)
                     for t, (start, length) in zip(self.types, self._spans))

    def commit(self, bodies: Bodies) -> list[bytes]:
        """Every tensor's commitment, from the bodies written into ``bodies``."""
        leaf = _LEAF_STATE.copy
        nodes = []
        for chunk in bodies.chunks:
            h = leaf()
            h.update(chunk)
            nodes.append(h.digest())
        inner = _INNER_STATE.copy
        for left, right in self._pairs:
            h = inner()
            h.update(nodes[left])
            h.update(nodes[right])
            nodes.append(h.digest())
        out = []
        for prefix, root in zip(self._prefixes, self._roots):
            h = prefix.copy()
            h.update(nodes[root])
            out.append(h.digest())
        return out


# -- program, model, run ----------------------------------------------------------------------------

def program_root(counts: Sequence[int], tree: bytes) -> bytes:
    """SHA-256("cvmvm/program/v3" || 0x00 || u32le I, P, N, H, T || record tree root)."""
    return hashlib.sha256(PROGRAM_TAG + struct.pack("<5I", *counts) + tree).digest()


def model_hash(program_root_: bytes, canonical: bytes) -> bytes:
    return hashlib.sha256(MODEL_TAG + program_root_ + hashlib.sha256(canonical).digest()).digest()


# -- runs --------------------------------------------------------------------------------------------

# A run's three digests, each SHA-256 of a fixed head and then 32-byte digests (and, in the trace
# root, a count): the heads are functions so that compiled code (serializer.sha) hashes the same bytes.

def inputs_head(count: int) -> bytes:
    return INPUTS_TAG + struct.pack("<I", count)


def outputs_head(count: int) -> bytes:
    return OUTPUTS_TAG + struct.pack("<I", count)


def trace_head(program_root_: bytes) -> bytes:
    return TRACE_TAG + program_root_


def input_commitment(commitments: Sequence[bytes]) -> bytes:
    return hashlib.sha256(inputs_head(len(commitments)) + b"".join(commitments)).digest()


def trace_root(program_root_: bytes, inputs: bytes, count: int, tree: bytes) -> bytes:
    """SHA-256(trace head || input commitment || u32le tensors || trace tree root)."""
    return hashlib.sha256(trace_head(program_root_) + inputs + struct.pack("<I", count) + tree).digest()


def outputs_hash(commitments: Sequence[bytes]) -> bytes:
    return hashlib.sha256(outputs_head(len(commitments)) + b"".join(commitments)).digest()


@dataclass(frozen=True)
class TraceEntry:
    """Trace leaf ``tensor`` (the leaf is the commitment itself): where the tensor comes from, and
    its commitment."""

    kind: int      # INPUT, PARAM or INSTR
    index: int     # input index, param index, or instruction index
    output: int    # output index within the instruction (0 for variables)
    tensor: int
    precision: int | None
    commitment: bytes
