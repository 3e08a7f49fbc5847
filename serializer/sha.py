"""SHA-256 from compiled code: serializer.hashing's commitments and trees, byte for byte, where
per-call overhead, not SHA-256, is the cost.

A traced digits call makes some 130 SHA-256 calls of a few hundred bytes, and through hashlib
each costs about 0.4 us, nearly all of it the call; a large body is hashed 4 KiB chunk by
chunk, a hashlib call each (perf: 29 MiB in 24 ms, against OpenSSL's 17).  When numba is
installed (the ``speed`` extra), the same calls are made from functions compiled by numba to
libcrypto, the OpenSSL library hashlib itself uses, through SHA256_Init/Update/Final
(``Hasher``).  Only where every known answer below matches hashlib's; nothing here depends on
it: without numba or libcrypto, hashlib commits everything, and only timing differs.

Beside it, the one compiled piece that is not SHA-256: the channel mover, which writes a large
channel-last body into the hashing process's ring (``channel_mover``), checked against numpy's bytes.

It stands apart from the VM (serializer's layer: numpy, and numba when installed) so that the
hashing process of cvmvm.vm.hashworker can use it without loading the VM.  Everything is
compiled in each process, never cached on disk: numba's cache is pickles.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any, Callable, NamedTuple, Sequence, TypeVar, cast

import numpy as np

from isa.errors import InternalError
from isa.types import TensorType, precision_bound
from serializer.hashing import INNER, LEAF, BulkCommitter, BulkPlan, Committer, blocks_root, body_length, tree_root


T = TypeVar("T")
_lock = threading.RLock()   # a compilation that asks for another compiled piece takes it again


def compile_once(cache: list[T], make: Callable[[], T]) -> T:
    """``make()``'s result, made on the first call for this ``cache`` (an empty list, then holding
    it) by one thread while any other waits: each compiled piece is compiled once per process."""
    if not cache:
        with _lock:
            if not cache:
                cache.append(make())
    return cache[0]


def compile_function(function: Callable[..., int], signature: str) -> Callable[..., int] | None:
    """``function`` compiled by numba for ``signature`` (the only argument types it is given), now
    rather than on a first call inside a run; None without numba, with its JIT disabled, or where
    it cannot compile."""
    try:
        import numba
    except Exception:   # not installed, or installed and broken (or out of memory): no compiled code either way
        return None
    # numba's config module sets its attributes from the environment at import.
    if getattr(numba.config, "DISABLE_JIT", False):
        return None
    try:
        compiled: Callable[..., int] = numba.njit(signature, nogil=True)(function)
    except Exception:   # numba's errors have no common base; any of them means none here
        return None
    return compiled


class Hasher(NamedTuple):
    """SHA-256 through libcrypto, compiled: every commitment of a BulkCommitter's bodies, for one
    item or many laid end to end, tree roots, a body's chunk tree, and a batch's per-item digests
    of a head and parts of each item's row (serializer.hashing's, byte for byte)."""

    bulk: Callable[..., int]
    tree: Callable[..., int]
    leaves: Callable[..., int]
    gathered: Callable[..., int]
    lanes: Any = None   # serializer.sha_lanes.Lanes: the first items' work, sixteen at a time
    streams: Any = None   # serializer.sha_lanes.Streams: a body's chunks four at a time, through SHA-NI

    def commit(self, plan: BulkPlan, buffer: np.ndarray) -> list[bytes]:
        """``BulkCommitter.commit`` of the bodies in ``buffer``."""
        raw = self._commit(plan, buffer, 0, 1).tobytes()   # a traced call's hot path: no more arrays than this
        return [raw[i:i + 32] for i in range(0, len(raw), 32)]

    def commit_rows(self, plan: BulkPlan, buffer: np.ndarray, size: int, count: int) -> np.ndarray:
        """The commitments of ``count`` items' bodies, item i's laid out as one item's plan says but
        ``i * size`` bytes on (``BulkCommitter.row_dests``): shape (count, tensors, 32), uint8."""
        return self._commit(plan, buffer, size, count).reshape(count, len(plan.roots), 32)

    def _commit(self, plan: BulkPlan, buffer: np.ndarray, size: int, count: int) -> np.ndarray:
        out = np.empty(32 * count * len(plan.roots), dtype=np.uint8)
        # Sixteen items at a time where the lanes are here, then the rest one by one: the same bytes
        # (_known_answers).
        done = 0 if self.lanes is None else self.lanes.commit(plan, buffer, size, count, out)
        if done < count and self.bulk(buffer[done * size:], size, count - done, plan.chunks, plan.pairs, plan.roots,
                                      plan.prefixes, plan.spans,
                                      np.empty(32 * (len(plan.chunks) + len(plan.pairs)), dtype=np.uint8),
                                      out[32 * done * len(plan.roots):], np.empty(_CTX_BYTES, dtype=np.uint8)) != 0:
            raise InternalError("hash", "libcrypto's SHA-256 failed")
        return out

    def tree_root(self, leaves: Sequence[bytes]) -> bytes:
        """``serializer.hashing.tree_root``."""
        level = np.frombuffer(b"".join(leaves), dtype=np.uint8).copy()
        if len(leaves) < 1 or level.size != 32 * len(leaves):
            raise InternalError("hash", "a tree's leaves are 32 bytes each, and at least one")
        # Straight to the compiled fold (a traced call's hot path), as tree_roots of one tree.
        if self.tree(level, 1, len(leaves), np.empty(_CTX_BYTES, dtype=np.uint8)) != 0:
            raise InternalError("hash", "libcrypto's SHA-256 failed")
        return level[:32].tobytes()

    def tree_roots(self, levels: np.ndarray) -> np.ndarray:
        """``tree_root`` of each row of ``levels`` (uint8, shape (trees, leaves, 32), C order, at
        least one leaf), folded in place: shape (trees, 32), a view of ``levels``."""
        count, leaves, width = levels.shape
        if leaves < 1 or width != 32 or levels.dtype != np.uint8 or not levels.flags.c_contiguous:
            raise InternalError("hash", "trees of 32-byte leaves, at least one each, in one C-ordered uint8 array")
        done = 0 if self.lanes is None else self.lanes.fold(levels)
        if done < count and self.tree(levels[done:].reshape(-1), count - done, leaves,
                                      np.empty(_CTX_BYTES, dtype=np.uint8)) != 0:
            raise InternalError("hash", "libcrypto's SHA-256 failed")
        return levels[:, 0, :]

    def gather(self, rows: np.ndarray, segments: np.ndarray, head: bytes) -> np.ndarray:
        """For each row of ``rows`` (uint8, shape (count, width), C order), SHA-256 of ``head`` and
        then the row's bytes at ``segments`` (int64 (start, length) pairs within a row), in order:
        shape (count, 32).  A batch's input commitments, output hashes and trace roots, one call each."""
        count, width = rows.shape
        if rows.dtype != np.uint8 or not rows.flags.c_contiguous or segments.dtype != np.int64 \
                or segments.ndim != 2 or segments.shape[1] != 2 \
                or not all(0 <= start and 0 <= length and start + length <= width for start, length in segments.tolist()):
            raise InternalError("hash", "rows of bytes in C order, and (start, length) segments within a row")
        out = np.empty((count, 32), dtype=np.uint8)
        if self.gathered(rows.reshape(-1), width, count, np.ascontiguousarray(segments),
                         np.frombuffer(head, dtype=np.uint8).copy(), out.reshape(-1),
                         np.empty(_CTX_BYTES, dtype=np.uint8)) != 0:
            raise InternalError("hash", "libcrypto's SHA-256 failed")
        return out

    def blocks_root(self, body: np.ndarray, size: int) -> bytes:
        """``serializer.hashing.blocks_root`` of ``body`` (uint8, one dimension, contiguous, not empty)
        cut into ``size``-byte chunks."""
        if body.dtype != np.uint8 or body.ndim != 1 or not body.flags.c_contiguous or not body.size or size < 1:
            raise InternalError("hash", "a body is a non-empty contiguous run of bytes, cut into chunks of a byte or more")
        count = -(-body.size // size)
        nodes = np.empty(32 * count, dtype=np.uint8)
        ctx = np.empty(_CTX_BYTES, dtype=np.uint8)
        # Whole chunks four at a time through SHA-NI or sixteen at a time in the lanes, then the rest
        # one by one.  A hasher has the streams only where they are the faster way (_compile_hasher).
        chunks = self.streams or self.lanes
        done = 0 if chunks is None else chunks.leaves(body, size, nodes)
        if (done < count and self.leaves(body[done * size:], size, nodes[32 * done:], ctx) != 0) \
                or self.tree(nodes, 1, count, ctx) != 0:
            raise InternalError("hash", "libcrypto's SHA-256 failed")
        return nodes[:32].tobytes()


_CTX_BYTES = 256   # SHA256_CTX is 112 bytes; room to spare
_hashers: list[Hasher | None] = []


def hasher() -> Hasher | None:
    """The compiled hasher, compiled on first use (some 3.5-4 s, once per process); None without
    numba or libcrypto's SHA-256, or where its answers are not hashlib's."""
    return compile_once(_hashers, _compile_hasher)


def block_root(fast: Hasher | None, body: np.ndarray, size: int) -> bytes:
    """``serializer.hashing.blocks_root`` of ``body`` (uint8, one dimension, contiguous, not empty)
    through ``fast`` when there is one, else hashlib: the same root either way."""
    return blocks_root(body.data, size) if fast is None else fast.blocks_root(body, size)


def compiled_hasher() -> Hasher | None:
    """The hasher if this process compiled it already (``hasher``); never compiles."""
    return _hashers[0] if _hashers else None


_movers: list[Callable[..., int] | None] = []


def channel_mover() -> Callable[..., int] | None:
    """``move(value, lanes)``: an int32 tensor's values, viewed (N, C, H*W), written into int8 lanes
    (N, H*W*C) in channel-last order (``Committer.write_body``'s ``move``), compiled on first use
    (some 0.3 s once numba is loaded); None without numba, or where its lanes are not numpy's."""
    return compile_once(_movers, _compile_mover)


def compiled_channel_mover() -> Callable[..., int] | None:
    """The channel mover if this process compiled it already (``channel_mover``); never compiles."""
    return _movers[0] if _movers else None


def _compile_mover() -> Callable[..., int] | None:
    def move(value: np.ndarray, lanes: np.ndarray) -> int:
        # Each channel's row read in order, its lanes written C apart: the reads stream, and the
        # writes stay within a body small enough for the caches (numpy reads across the channels).
        n_, c_, hw = value.shape
        for n in range(n_):
            for c in range(c_):
                for i in range(hw):
                    lanes[n, i * c_ + c] = value[n, c, i]   # exact: the values are within the lanes' precision
        return 0

    compiled = compile_function(move, "int64(int32[:, :, ::1], int8[:, ::1])")
    if compiled is None:
        return None
    rng = np.random.default_rng(20261128)
    for shape in ((1, 1, 1, 1), (1, 3, 2, 5), (2, 7, 4, 3)):
        t = TensorType(shape, 8)
        value = rng.integers(-127, 128, size=shape, dtype=np.int64).astype(np.int32)
        want, got = np.empty(body_length(t), dtype=np.uint8), np.empty(body_length(t), dtype=np.uint8)
        Committer(t).write_body(value, want)
        Committer(t).write_body(value, got, compiled)
        if not np.array_equal(want, got):
            return None
    return compiled


def _libcrypto() -> tuple[Any, Any, Any] | None:
    """SHA256_Init, SHA256_Update and SHA256_Final of the libcrypto hashlib itself loaded, typed for
    ctypes; None where that library cannot be named (only Linux lists a process's libraries, in
    /proc/self/maps: loading another one by name can abort a process, as macOS's stub does) or
    does not export them."""
    import ctypes
    import hashlib   # noqa: F401  (its _hashlib loads libcrypto)
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            paths = {line.split()[-1] for line in f if "/libcrypto" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
            init, update, final = lib.SHA256_Init, lib.SHA256_Update, lib.SHA256_Final
        except (OSError, AttributeError):
            continue
        void, size, status = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
        init.argtypes, init.restype = [void], status
        update.argtypes, update.restype = [void, void, size], status
        final.argtypes, final.restype = [void, void], status
        return init, update, final
    return None


def _compile_hasher() -> Hasher | None:
    functions = _libcrypto()
    if functions is None:
        return None
    init, update, final = functions
    leaf, inner = np.frombuffer(LEAF, dtype=np.uint8).copy(), np.frombuffer(INNER, dtype=np.uint8).copy()

    def bulk(buffer: np.ndarray, size: int, count: int, chunks: np.ndarray, pairs: np.ndarray, roots: np.ndarray,
             prefixes: np.ndarray, spans: np.ndarray, nodes: np.ndarray, out: np.ndarray, ctx: np.ndarray) -> int:
        c, n = ctx.ctypes.data, nodes.ctypes.data
        ok = 1
        for item in range(count):
            b = buffer.ctypes.data + np.uint64(item * size)
            o = out.ctypes.data + np.uint64(32 * item * roots.shape[0])
            for i in range(chunks.shape[0]):
                ok &= init(c) & update(c, leaf.ctypes.data, leaf.size)
                ok &= update(c, b + np.uint64(chunks[i, 0]), chunks[i, 1] - chunks[i, 0])
                ok &= final(n + np.uint64(32 * i), c)
            first = chunks.shape[0]
            for j in range(pairs.shape[0]):
                ok &= init(c) & update(c, inner.ctypes.data, inner.size)
                ok &= update(c, n + np.uint64(32 * pairs[j, 0]), 32) & update(c, n + np.uint64(32 * pairs[j, 1]), 32)
                ok &= final(n + np.uint64(32 * (first + j)), c)
            for k in range(roots.shape[0]):
                ok &= init(c) & update(c, prefixes.ctypes.data + np.uint64(spans[k]), spans[k + 1] - spans[k])
                ok &= update(c, n + np.uint64(32 * roots[k]), 32) & final(o + np.uint64(32 * k), c)
        return 0 if ok == 1 else -1

    def tree(levels: np.ndarray, trees: int, leaves: int, ctx: np.ndarray) -> int:
        # Each tree level by level in place: node i of the next level is written after nodes 2i and
        # 2i+1 of this one were read, and no later pair reads below 2i + 2.
        c = ctx.ctypes.data
        ok = 1
        for t in range(trees):
            base = 32 * leaves * t
            p = levels.ctypes.data + np.uint64(base)
            count = leaves
            while count > 1:
                for i in range(count // 2):
                    ok &= init(c) & update(c, inner.ctypes.data, inner.size)
                    ok &= update(c, p + np.uint64(64 * i), 64) & final(p + np.uint64(32 * i), c)
                if count % 2:
                    last = base + 32 * (count - 1)
                    levels[base + 32 * (count // 2):base + 32 * (count // 2) + 32] = levels[last:last + 32]
                count = (count + 1) // 2
        return 0 if ok == 1 else -1

    def leaves(body: np.ndarray, size: int, nodes: np.ndarray, ctx: np.ndarray) -> int:
        c, b, n = ctx.ctypes.data, body.ctypes.data, nodes.ctypes.data
        ok = 1
        for i in range((body.size + size - 1) // size):
            start = i * size
            ok &= init(c) & update(c, leaf.ctypes.data, leaf.size)
            ok &= update(c, b + np.uint64(start), min(size, body.size - start)) & final(n + np.uint64(32 * i), c)
        return 0 if ok == 1 else -1

    def gathered(rows: np.ndarray, width: int, count: int, segments: np.ndarray, head: np.ndarray, out: np.ndarray,
                 ctx: np.ndarray) -> int:
        c = ctx.ctypes.data
        ok = 1
        for item in range(count):
            r = rows.ctypes.data + np.uint64(item * width)
            ok &= init(c) & update(c, head.ctypes.data, head.size)
            for j in range(segments.shape[0]):
                ok &= update(c, r + np.uint64(segments[j, 0]), segments[j, 1])
            ok &= final(out.ctypes.data + np.uint64(32 * item), c)
        return 0 if ok == 1 else -1

    compiled_bulk = compile_function(bulk, "int64(uint8[::1], int64, int64, int64[:, ::1], int64[:, ::1], int64[::1], "
                                            "uint8[::1], int64[::1], uint8[::1], uint8[::1], uint8[::1])")
    compiled_tree = compile_function(tree, "int64(uint8[::1], int64, int64, uint8[::1])")
    compiled_leaves = compile_function(leaves, "int64(uint8[::1], int64, uint8[::1], uint8[::1])")
    compiled_gathered = compile_function(gathered, "int64(uint8[::1], int64, int64, int64[:, ::1], uint8[::1], "
                                                   "uint8[::1], uint8[::1])")
    if compiled_bulk is None or compiled_tree is None or compiled_leaves is None or compiled_gathered is None:
        return None
    compiled = Hasher(compiled_bulk, compiled_tree, compiled_leaves, compiled_gathered)
    if not _known_answers(compiled):
        return None
    # Each addition kept only if its answers are hashlib's: two groups of sixteen and three more,
    # so that the lanes (or streams) and libcrypto both answer.
    for field, compile_ in (("lanes", _compile_lanes), ("streams", _compile_streams)):
        # The streams only where the lanes are not kept, or on a CPU whose SHA-NI outruns its lanes
        # (sha_lanes.streams_first): the lanes still do everything but a body's chunks.
        if compiled.lanes is not None and not _streams_first():
            break
        extra = compile_()
        with_extra = compiled._replace(**{field: extra})
        if extra is not None and _known_answers(with_extra, 35):
            compiled = with_extra
    return compiled


def _compile_lanes() -> Any:
    """serializer.sha_lanes' commitments and trees of sixteen items at a time, where this CPU
    makes them faster than libcrypto's one at a time; None elsewhere."""
    lanes = _sha_lanes()
    return lanes.compile_lanes(LEAF, INNER) if lanes is not None and lanes.fast_here() else None


def _compile_streams() -> Any:
    """serializer.sha_lanes' chunk leaves four at a time through SHA-NI, where this CPU has it;
    None elsewhere (a hasher with the lanes never asks: ``_compile_hasher``)."""
    lanes = _sha_lanes()
    return lanes.compile_streams(LEAF) if lanes is not None and lanes.sha_here() else None


def _streams_first() -> bool:
    """``serializer.sha_lanes.streams_first``, False where it cannot be imported."""
    lanes = _sha_lanes()
    return lanes is not None and lanes.streams_first()


def _sha_lanes() -> Any:
    """serializer.sha_lanes, or None where it cannot be imported."""
    try:
        from serializer import sha_lanes
    except Exception:   # numba and llvmlite import here (compile_function did), but stay safe if not
        return None
    return sha_lanes


def _known_answers(h: Hasher, count: int = 3) -> bool:
    """The compiled hasher against hashlib (serializer.hashing) on trees of 1 to 9 leaves, one at a
    time and ``count`` at once, on chunk trees of bodies of 1 to 3 chunks and a part chunk, and on
    tensors of every lane width, one chunk of 256 bytes or a short one, several of 4096 and a short
    one, one item at a time and ``count`` laid end to end."""
    rng = np.random.default_rng(20261128)
    for length in (1, 4095, 4096, 4097, 3 * 4096 + 7, 17 * 4096 + 5):
        body = rng.integers(0, 256, size=length, dtype=np.uint8)
        if h.blocks_root(body, 4096) != blocks_root(body.data, 4096):
            return False
    for leaves in range(1, 10):
        trees = [[rng.bytes(32) for _ in range(leaves)] for _ in range(count)]
        if h.tree_root(trees[0]) != tree_root(trees[0]):
            return False
        levels = np.frombuffer(b"".join(b"".join(t) for t in trees), dtype=np.uint8).reshape(count, leaves, 32).copy()
        if [bytes(r) for r in h.tree_roots(levels)] != [tree_root(t) for t in trees]:
            return False
    types = [TensorType((3,), 8), TensorType((2, 70), 16), TensorType((1, 4, 5, 6), 21), TensorType((300,), 32),
             TensorType((5000,), 8), TensorType((1, 2, 3, 300), 31)]
    bulk = BulkCommitter(types)
    items = []
    for _ in range(count):
        bodies = bulk.bodies()
        for dest, t in zip(bodies.dests, types):
            bound = precision_bound(cast(int, t.precision))
            np.copyto(dest, rng.integers(-bound, bound + 1, size=t.shape, dtype=np.int64), casting="unsafe")
        if h.commit(bulk.plan, bodies.buffer) != bulk.commit(bodies):
            return False
        items.append(bodies)
    rows = np.zeros(count * bulk.size, dtype=np.uint8)
    for dest, k in zip(bulk.row_dests(rows, count), range(len(types))):
        np.copyto(dest, np.stack([b.dests[k] for b in items]))
    got = h.commit_rows(bulk.plan, rows, bulk.size, count)
    if [[bytes(c) for c in item] for item in got] != [bulk.commit(b) for b in items]:
        return False
    lines = rng.integers(0, 256, size=(count, 100), dtype=np.uint8)
    segments = np.array([[64, 32], [0, 0], [5, 31], [99, 1]], dtype=np.int64)
    want = [hashlib.sha256(b"head" + b"".join(bytes(r[s:s + n]) for s, n in segments.tolist())).digest() for r in lines]
    return [bytes(d) for d in h.gather(lines, segments, b"head")] == want
