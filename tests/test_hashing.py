"""Known answers for every hash of commitment format 3 (docs/FORMAT.md sections 1.3 and 2-5).

Every expected value is computed here from the FORMAT.md text with hashlib and
struct alone (the ``ref_*`` functions), never by calling the code under test,
and the literal hex strings are the examples printed in FORMAT.md.
"""

from __future__ import annotations

import hashlib
import random
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isa.ops.elemwise import NoAttrs, RightShiftAttrs
from isa.types import TensorType
from serializer import hashing as cm
from serializer.records import program as records
from tests.test_native_format import EXAMPLE

CODES = {"int8": 1, "uint8": 2, "int32": 3, "int64": 4, "float16": 5, "float32": 6, "float64": 7}


def sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def ref_lane(dtype: str, precision: int | None) -> int:
    if dtype == "int32":
        return 4 if precision is None else 1 if precision <= 8 else 2 if precision <= 16 else 4
    return {"int8": 1, "uint8": 1, "int64": 8, "float16": 2, "float32": 4, "float64": 8}[dtype]


def ref_body(dtype: str, shape: tuple[int, ...], precision: int | None, flat: list[int]) -> bytes:
    """Row-major ints -> the committed body: channel-last for rank 4 in 1-byte lanes, each value
    little-endian in its lane."""
    lane = ref_lane(dtype, precision)
    order = list(range(len(flat)))
    if len(shape) == 4 and lane == 1:
        n_, c_, h_, w_ = shape
        order = [((n * c_ + c) * h_ + h) * w_ + x
                 for n in range(n_) for h in range(h_) for x in range(w_) for c in range(c_)]
    fmt = "<B" if dtype == "uint8" else {1: "<b", 2: "<h", 4: "<i", 8: "<q"}[lane]
    return b"".join(struct.pack(fmt, flat[i]) for i in order)


def ref_tree(leaves: list[bytes]) -> bytes:
    """RFC 6962: split at the largest power of two below n."""
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return sha(b"\x01" + ref_tree(leaves[:k]) + ref_tree(leaves[k:]))


def ref_path(leaves: list[bytes], i: int) -> list[bytes]:
    if len(leaves) == 1:
        return []
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    if i < k:
        return ref_path(leaves[:k], i) + [ref_tree(leaves[k:])]
    return ref_path(leaves[k:], i - k) + [ref_tree(leaves[:k])]


def ref_type(dtype: str, shape: tuple[int, ...], precision: int | None) -> bytes:
    return bytes([CODES[dtype], precision or 0, len(shape)]) + b"".join(struct.pack("<I", d) for d in shape)


def ref_chunks(body: bytes) -> list[bytes]:
    """256-byte chunks for a body of at most 4096 bytes, else 4096-byte ones; the last may be short."""
    size = 256 if len(body) <= 4096 else 4096
    return [body[i:i + size] for i in range(0, len(body), size)]


def ref_commitment_of_body(dtype: str, shape: tuple[int, ...], precision: int | None, body: bytes) -> bytes:
    root = ref_tree([sha(b"\x00" + c) for c in ref_chunks(body)])
    return sha(b"cvmvm/tensor/v3\x00" + ref_type(dtype, shape, precision) + root)


def ref_commitment(dtype: str, shape: tuple[int, ...], precision: int | None, flat: list[int]) -> bytes:
    return ref_commitment_of_body(dtype, shape, precision, ref_body(dtype, shape, precision, flat))


# -- section 2 ----------------------------------------------------------------------------

EX1 = [1, -2, 3, 4, 5, -6, 7, 8, 9, 10, -11, 12]
EX2 = [1, -2, 300, -32767, 5, -6]
EX3 = [i * i - 1000000 for i in range(3000)]
EX4 = [i * 37 - 11000 for i in range(600)]


def test_format_examples_by_the_reference():
    assert ref_body("int32", (1, 2, 2, 3), 8, EX1).hex() == "0107fe080309040a05f5fa0c"
    assert ref_commitment("int32", (1, 2, 2, 3), 8, EX1).hex() == \
        "908e8305ff2b6db547c9dfbb2ceb7bec877f038128138663117187b8ae118785"
    assert ref_body("int32", (2, 3), 16, EX2).hex() == "0100feff2c0101800500faff"
    assert ref_commitment("int32", (2, 3), 16, EX2).hex() == \
        "578df59a89a705c5f21fc8128ea6dd9a00b14a2c3854e90f5b12e8c528231738"
    body = ref_body("int32", (3000,), 32, EX3)
    leaves = [sha(b"\x00" + body[i:i + 4096]) for i in range(0, len(body), 4096)]
    assert [len(body[i:i + 4096]) for i in range(0, len(body), 4096)] == [4096, 4096, 3808]
    assert ref_tree(leaves) == sha(b"\x01" + sha(b"\x01" + leaves[0] + leaves[1]) + leaves[2])
    assert ref_tree(leaves).hex() == "69ba8dd51cf9942d70f2026fd8329490c79485738fac6d662142c1248f60d5f6"
    assert ref_commitment("int32", (3000,), 32, EX3).hex() == \
        "1bf8bd98a285df1e6c662079d75a06fcd32d786eb503cb0585995bb745a74f2d"
    body = ref_body("int32", (600,), 16, EX4)
    assert len(body) == 1200 and body[:8].hex() == "08d52dd552d577d5"
    leaves = [sha(b"\x00" + body[i:i + 256]) for i in range(0, len(body), 256)]
    assert [len(body[i:i + 256]) for i in range(0, len(body), 256)] == [256, 256, 256, 256, 176]
    assert [leaf.hex()[:8] for leaf in leaves] == ["59b2b1a0", "38e2691f", "e93ab39b", "1b7d7067", "a2c9b35e"]
    assert ref_tree(leaves) == sha(b"\x01" + sha(b"\x01" + sha(b"\x01" + leaves[0] + leaves[1])
                                                + sha(b"\x01" + leaves[2] + leaves[3])) + leaves[4])
    assert ref_tree(leaves).hex() == "51fd42ffd7cfa8c55b8231881f74d0c013cb46af5fe875503ca2620f41849e7f"
    assert ref_commitment("int32", (600,), 16, EX4).hex() == \
        "d8d912c0cbdd5bdce891e669ddac58336492e39a8a1a993748961e30c7ddb5f7"


@pytest.mark.parametrize("shape,precision,flat", [((1, 2, 2, 3), 8, EX1), ((2, 3), 16, EX2), ((3000,), 32, EX3),
                                                  ((600,), 16, EX4)])
def test_tensor_commitment_matches_the_reference(shape, precision, flat):
    value = np.array(flat, dtype=np.int32).reshape(shape)
    assert cm.tensor_commitment(value, TensorType(shape, precision)) == ref_commitment("int32", shape, precision, flat)


@pytest.mark.parametrize("length,chunks", [(1, [1]), (255, [255]), (256, [256]), (257, [256, 1]),
                                           (4095, [256] * 15 + [255]), (4096, [256] * 16), (4097, [4096, 1]),
                                           (8192, [4096, 4096]), (8193, [4096, 4096, 1])])
def test_chunk_size_by_body_length(length, chunks):
    """256-byte chunks up to a 4096-byte body, 4096-byte chunks beyond (a uint8 tensor's body is
    its bytes); the chunk count and every commitment follow."""
    flat = [(i * 7 + 3) % 256 for i in range(length)]
    body = ref_body("uint8", (length,), None, flat)
    assert [len(c) for c in ref_chunks(body)] == chunks
    t = TensorType((length,), None, "uint8")
    assert cm.chunk_size(length) == (256 if length <= 4096 else 4096)
    assert cm.chunk_count(t) == len(chunks)
    value = np.array(flat, dtype=np.uint8)
    assert cm.tensor_commitment(value, t) == cm.Committer(t)(value) == ref_commitment("uint8", (length,), None, flat)
    assert cm.chunk_leaves(memoryview(body), cm.chunk_size(length)) == [sha(b"\x00" + c) for c in ref_chunks(body)]


@pytest.mark.parametrize("precision,lane", [(1, 1), (8, 1), (9, 2), (16, 2), (17, 4), (32, 4), (None, 4)])
def test_lane_boundaries(precision, lane):
    t = TensorType((3,), precision)
    assert cm.lane_width(t) == lane
    bound = (1 << (precision - 1)) - 1 if precision else (1 << 31) - 1
    flat = [-bound, 0, bound] if precision else [-(1 << 31), 0, bound]
    value = np.array(flat, dtype=np.int32)
    assert bytes(cm.tensor_body(value, t)) == ref_body("int32", (3,), precision, flat)
    assert cm.tensor_commitment(value, t) == ref_commitment("int32", (3,), precision, flat)


def test_channel_last_only_for_rank_4_in_one_byte_lanes():
    assert cm.channel_last(TensorType((1, 2, 3, 4), 8))
    assert not cm.channel_last(TensorType((1, 2, 3, 4), 9))     # 2-byte lanes stay row-major
    assert not cm.channel_last(TensorType((2, 3, 4), 8))        # rank 3
    assert not cm.channel_last(TensorType((1, 1, 2, 3, 4), 8))  # rank 5
    assert cm.channel_last(TensorType((1, 2, 3, 4), None, "int8"))


@pytest.mark.parametrize("dtype,flat", [("int8", [-128, 0, 127]), ("uint8", [0, 200, 255]),
                                        ("int64", [-(1 << 63), 0, (1 << 63) - 1])])
def test_other_dtypes(dtype, flat):
    value = np.array(flat, dtype=dtype)
    t = TensorType((3,), None, dtype)
    assert cm.tensor_commitment(value, t) == ref_commitment(dtype, (3,), None, flat)


@pytest.mark.parametrize("dtype,bits", [("float16", "<u2"), ("float32", "<u4"), ("float64", "<u8")])
def test_floats_bit_for_bit(dtype, bits):
    """NaN payloads and -0.0 are kept: the body is the IEEE 754 bit patterns."""
    raw = np.array([0, 1 << (np.dtype(bits).itemsize * 8 - 1), (1 << (np.dtype(bits).itemsize * 8 - 1)) - 1],
                   dtype=bits)
    value = raw.view(np.dtype(dtype).newbyteorder("<"))
    t = TensorType((3,), None, dtype)
    assert bytes(cm.tensor_body(value, t)) == raw.tobytes()
    body = raw.tobytes()
    assert cm.tensor_commitment(value, t) == sha(b"cvmvm/tensor/v3\x00" + ref_type(dtype, (3,), None)
                                                + sha(b"\x00" + body))
    assert cm.tensor_commitment(value, t) != cm.tensor_commitment(np.zeros(3, dtype=dtype), t)


def test_body_round_trips():
    for shape, precision in (((1, 3, 4, 5), 8), ((2, 3), 16), ((7,), 32), ((1, 2, 3, 4), 20)):
        bound = (1 << (precision - 1)) - 1
        value = np.random.default_rng(precision).integers(-bound, bound + 1, size=shape).astype(np.int32)
        t = TensorType(shape, precision)
        back = cm.tensor_from_body(bytes(cm.tensor_body(value, t)), t)
        assert back.dtype == np.int32 and (back == value).all()


def test_byte_order_and_layout_do_not_change_a_commitment():
    value = np.arange(-30, 30, dtype=np.int32).reshape(1, 3, 4, 5)
    t = TensorType((1, 3, 4, 5), 8)
    want = cm.tensor_commitment(value, t)
    assert cm.tensor_commitment(value.astype(">i4"), t) == want
    assert cm.tensor_commitment(np.asfortranarray(value), t) == want
    assert cm.tensor_commitment(value.astype(np.int64), t) == want


def test_type_is_part_of_the_commitment():
    value = np.arange(6, dtype=np.int32).reshape(2, 3)
    seen = {cm.tensor_commitment(value, TensorType((2, 3), 8)), cm.tensor_commitment(value, TensorType((2, 3), 7)),
            cm.tensor_commitment(value.reshape(3, 2), TensorType((3, 2), 8)),
            cm.tensor_commitment(value.reshape(6), TensorType((6,), 8))}
    assert len(seen) == 4


@settings(max_examples=60, derandomize=True, deadline=None)
@given(st.integers(1, 3), st.integers(1, 9), st.integers(1, 40), st.integers(1, 40), st.sampled_from([4, 8, 12, 20]))
def test_random_tensors_match_the_reference(n, c, h, w, precision):
    rnd = random.Random(n * 1000003 + c * 1009 + h * 101 + w)
    bound = (1 << (precision - 1)) - 1
    flat = [rnd.randint(-bound, bound) for _ in range(n * c * h * w)]
    value = np.array(flat, dtype=np.int32).reshape(n, c, h, w)
    t = TensorType((n, c, h, w), precision)
    assert cm.tensor_commitment(value, t) == ref_commitment("int32", (n, c, h, w), precision, flat)


@pytest.mark.parametrize("shape,precision", [((1, 2, 2, 3), 8), ((2, 3, 4, 5), 4), ((2, 3), 16), ((3000,), 32),
                                             ((5000,), 8), ((1, 1, 64, 65), 8), ((4, 4), None)])
def test_a_committer_commits_as_the_reference(shape, precision):
    """Committer (what a traced run commits with: the type's prefix hashed once, a one-chunk body
    its own root) gives the reference's commitment, and tensor_commitment's, for one chunk or many,
    channel-last or not, whatever the array's byte order, layout or integer width."""
    bound = (1 << ((precision or 32) - 1)) - 1
    flat = [random.Random(len(shape)).randint(-bound, bound) for _ in range(int(np.prod(shape)))]
    value = np.array(flat, dtype=np.int32).reshape(shape)
    t = TensorType(shape, precision)
    want = ref_commitment("int32", shape, precision, flat)
    committer = cm.Committer(t)
    for form in (value, value.astype(">i4"), np.asfortranarray(value), value.astype(np.int64), value[..., ::-1][..., ::-1]):
        assert committer(form) == cm.tensor_commitment(form, t) == want
    assert committer.of_root(cm.chunk_root(committer.body(value))) == want
    assert bytes(committer.body(value)) == bytes(cm.tensor_body(value, t)) == ref_body("int32", shape, precision, flat)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int64", "float16", "float32", "float64"])
def test_a_committer_of_every_dtype(dtype):
    value = np.arange(-700, 2300, dtype=np.int64).astype(dtype).reshape(2, 3, 500)   # small chunks or large
    t = TensorType(value.shape, None, dtype)
    body = bytes(cm.tensor_body(value, t))
    assert cm.Committer(t)(value) == cm.tensor_commitment(value, t) == \
        ref_commitment_of_body(dtype, value.shape, None, body)


BULK_TYPES = [TensorType((1, 1, 8, 8), 8), TensorType((1, 3, 5, 7), 8), TensorType((2, 3, 4, 5), 4),
              TensorType((16, 8, 3, 3), 8), TensorType((3, 100), 16), TensorType((1, 256), 24),
              TensorType((1, 10), None), TensorType((1025,), 32), TensorType((4096,), 8),
              TensorType((4097,), 8), TensorType((1, 8, 40, 50), 8), TensorType((16383,), 32),
              TensorType((2, 3, 500), None, "int8"), TensorType((7, 9), None, "uint8"), TensorType((5, 5), None, "int64"),
              TensorType((33,), None, "float16"), TensorType((2, 600), None, "float32"), TensorType((3, 3), None, "float64")]


def _bulk_value(t: TensorType, seed: int) -> np.ndarray:
    rnd = np.random.default_rng(seed)
    if t.dtype == "int32":
        bound = (1 << ((t.precision or 32) - 1)) - 1
        return rnd.integers(-bound, bound, size=t.shape, endpoint=True, dtype=np.int64).astype(np.int32)
    if t.dtype in ("float16", "float32", "float64"):
        return rnd.normal(size=t.shape).astype(t.dtype)
    info = np.iinfo(t.dtype)
    return rnd.integers(info.min, info.max, size=t.shape, endpoint=True, dtype=t.dtype)


def test_a_bulk_committer_commits_as_the_reference():
    """BulkCommitter (a traced run's small tensors, committed together) gives each tensor the
    reference's commitment: one chunk or many, small chunks or large, channel-last or not, every lane
    width and dtype; and its buffers, reused, give the next values' commitments."""
    bulk = cm.BulkCommitter(BULK_TYPES)
    bodies = bulk.bodies()
    for seed in (1, 2):
        values = [_bulk_value(t, seed + k) for k, t in enumerate(BULK_TYPES)]
        for dest, value in zip(bodies.dests, values):
            np.copyto(dest, value, casting="unsafe")
        want = [ref_commitment_of_body(t.dtype, t.shape, t.precision, ref_body(t.dtype, t.shape, t.precision,
                                                                                 [int(v) for v in value.ravel()]))
                if t.dtype == "int32" else ref_commitment_of_body(t.dtype, t.shape, None, bytes(cm.tensor_body(value, t)))
                for t, value in zip(BULK_TYPES, values)]
        assert bulk.commit(bodies) == want
        assert want == [cm.Committer(t)(v) for t, v in zip(BULK_TYPES, values)]


@given(st.lists(st.tuples(st.lists(st.integers(1, 9), min_size=1, max_size=4), st.sampled_from([None, 1, 8, 9, 16, 17, 32])),
                min_size=1, max_size=6), st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_a_bulk_committer_equals_one_committer_per_tensor(specs, seed):
    types = [TensorType(tuple(shape), precision) for shape, precision in specs]
    bulk = cm.BulkCommitter(types)
    bodies = bulk.bodies()
    values = [_bulk_value(t, seed + k) for k, t in enumerate(types)]
    for dest, value in zip(bodies.dests, values):
        np.copyto(dest, value.astype(">i4"), casting="unsafe")   # the bytes written, whatever the value's order
    assert bulk.commit(bodies) == [cm.Committer(t)(v) for t, v in zip(types, values)]


def test_row_dests_lay_each_item_out_as_its_own_bodies():
    """A stacked run's items written item-major (``row_dests``, for the compiled hasher): item i's
    bytes at ``i * size`` are, span by span, the bytes ``bodies`` holds for its values alone, for
    every type of BULK_TYPES (every dtype and lane width, channel-last or not)."""
    bulk = cm.BulkCommitter(BULK_TYPES)
    count = 3
    rows = np.zeros(count * bulk.size, dtype=np.uint8)
    values = [[_bulk_value(t, 10 * i + k) for k, t in enumerate(BULK_TYPES)] for i in range(count)]
    dests = bulk.row_dests(rows, count)
    assert [d.shape for d in dests] == [(count, *t.shape) for t in BULK_TYPES]
    for k, dest in enumerate(dests):
        np.copyto(dest, np.stack([v[k] for v in values]).astype(dest.dtype.newbyteorder(">")), casting="unsafe")
    for i in range(count):
        one = bulk.bodies()
        for dest, value in zip(one.dests, values[i]):
            np.copyto(dest, value, casting="unsafe")
        item = rows[i * bulk.size:(i + 1) * bulk.size]
        assert all(item[a:a + n].tobytes() == one.buffer[a:a + n].tobytes() for a, n in bulk.spans)


# -- trees -------------------------------------------------------------------------------------

def test_tree_and_paths_match_rfc_6962_for_every_size_to_70():
    rnd = random.Random(7)
    for n in range(1, 71):
        leaves = [rnd.randbytes(32) for _ in range(n)]
        levels = cm.tree_levels(leaves)
        assert levels[-1][0] == ref_tree(leaves) == cm.tree_root(leaves)   # tree_root: one pass, no levels
        for i in range(n):
            path = cm.audit_path(levels, i)
            assert path == ref_path(leaves, i)
            assert cm.root_from_path(leaves[i], i, n, path) == ref_tree(leaves)


@pytest.mark.parametrize("n", list(range(1, 70)) + [127, 128, 129, 300])
def test_tree_roots_of_many_trees_are_each_trees_root(n):
    trees = [[hashlib.sha256(f"{i} {p}".encode()).digest() for p in range(n)] for i in range(3)]
    by_position = [list(column) for column in zip(*trees)]
    assert cm.tree_roots(by_position) == [ref_tree(t) for t in trees]


def ref_shared(leaves: list[bytes], j: int, f: int) -> list[bytes]:
    """FORMAT.md section 9, from its text: leaf j's audit path, cut below the level where j's
    ancestor is the sibling of f's (the level under the lowest one where they have one ancestor);
    none for j = f."""
    if j == f:
        return []
    n = len(leaves)
    meet = next(level for level in range(64) if j >> level == f >> level)
    width, index, kept = n, j, 0
    for level in range(meet - 1):
        if index ^ 1 < width:            # the ancestor has a sibling at this level: a path entry
            kept += 1
        width, index = (width + 1) // 2, index // 2
    return ref_path(leaves, j)[:kept]


@pytest.mark.parametrize("length", [300, 512, 1000, 4096, 4097, 9000, 20000])
def test_rows_are_each_rows_commitment(length):
    """A batched run's rows, committed in one loop, give each row's own commitment, and each row's
    chunk root is the reference's."""
    rows = [random.Random(length + k).randbytes(length) for k in range(3)]
    want = [ref_tree([sha(b"\x00" + c) for c in ref_chunks(r)]) for r in rows]
    assert [cm.chunk_root(memoryview(r)) for r in rows] == want
    t = TensorType((length,), None, "uint8")
    assert cm.Committer(t).rows(memoryview(b"".join(rows)), 3) == [
        sha(b"cvmvm/tensor/v3\x00" + ref_type("uint8", (length,), None) + root) for root in want]
    assert cm.Committer(t).rows(memoryview(rows[0]), 1) == [cm.Committer(t)(np.frombuffer(rows[0], np.uint8))]


def test_shared_paths_match_the_reference_for_every_size_to_40():
    rnd = random.Random(9)
    for n in range(1, 41):
        leaves = [rnd.randbytes(32) for _ in range(n)]
        for f in range(n):
            first = ref_path(leaves, f)
            for j in range(n):
                shared = cm.shared_path(ref_path(leaves, j), j, f, n)
                assert shared == ref_shared(leaves, j, f)
                assert cm.joins(leaves[j], j, shared, leaves[f], f, first, n)
                assert not cm.joins(rnd.randbytes(32), j, shared, leaves[f], f, first, n)
                assert not cm.joins(leaves[j], j, [*shared, first[0] if first else leaves[f]], leaves[f], f, first, n)
                if shared:
                    assert not cm.joins(leaves[j], j, shared[:-1], leaves[f], f, first, n)
                    bad = bytearray(shared[-1])
                    bad[0] ^= 1
                    assert not cm.joins(leaves[j], j, [*shared[:-1], bytes(bad)], leaves[f], f, first, n)


def test_shared_path_example():
    """FORMAT.md section 9's example: the trace of section 4 opened at add (tensor 2), then at rs
    (tensor 3), its sibling: rs's path is empty, and add's first entry is rs's commitment."""
    leaves = [sha(bytes([k])) for k in range(4)]
    assert ref_path(leaves, 2) == [leaves[3], sha(b"\x01" + leaves[0] + leaves[1])]
    assert ref_shared(leaves, 3, 2) == [] and ref_shared(leaves, 0, 2) == [leaves[1]]
    assert ref_shared(leaves, 1, 2) == [leaves[0]] and ref_shared(leaves, 2, 2) == []


def test_a_path_must_be_exact():
    rnd = random.Random(8)
    leaves = [rnd.randbytes(32) for _ in range(11)]
    root = ref_tree(leaves)
    path = ref_path(leaves, 6)
    assert cm.root_from_path(leaves[6], 6, 11, path) == root
    assert cm.root_from_path(leaves[6], 6, 11, path[:-1]) is None
    assert cm.root_from_path(leaves[6], 6, 11, path + [root]) is None
    assert cm.root_from_path(leaves[6], 11, 11, path) is None
    assert cm.root_from_path(leaves[6], 7, 11, path) != root
    assert cm.root_from_path(leaves[6], 6, 11, [path[0][:31], *path[1:]]) is None
    for k in range(len(path)):
        for bit in range(0, 256, 37):
            bad = bytearray(path[k])
            bad[bit // 8] ^= 1 << (bit % 8)
            assert cm.root_from_path(leaves[6], 6, 11, [*path[:k], bytes(bad), *path[k + 1:]]) != root


# -- sections 1.3, 3, 4, 5 -------------------------------------------------------------------------

NATIVE_EXAMPLE = EXAMPLE   # FORMAT.md section 1.5's model
W = [1, -127, 127, 0, 5, -3]
X = [1, 2, 3, 4, 5, 6]


def ref_records() -> list[bytes]:
    """Operand w of instruction 0 is a param (tensor 1 of I = 1, P = 1): its commitment follows its type."""
    ty = lambda p: ref_type("int32", (2, 3), p)  # noqa: E731
    w = ref_commitment("int32", (2, 3), 8, W)
    return [b"\x00" + struct.pack("<I", 0) + ty(8),
            b"\x01" + struct.pack("<I", 1) + w,
            b"\x02" + struct.pack("<IHBB", 0, 4, 2, 1) + struct.pack("<I", 0) + ty(8) + struct.pack("<I", 1) + ty(8) + w
            + struct.pack("<I", 2) + ty(9),
            b"\x02" + struct.pack("<IHBB", 1, 8, 1, 1) + struct.pack("<I", 2) + ty(9) + struct.pack("<I", 3) + ty(8)
            + struct.pack("<qq", 8, 1) + b"\x01",
            b"\x03" + struct.pack("<II", 0, 3)]


def ref_program_root() -> bytes:
    tree = ref_tree([sha(b"\x00" + r) for r in ref_records()])
    return sha(b"cvmvm/program/v3\x00" + struct.pack("<5I", 1, 1, 2, 1, 4) + tree)


def test_program_root_and_model_hash_examples():
    assert len(NATIVE_EXAMPLE) == 261
    assert ref_records()[1].hex() == "0101000000622521ea04ef4a6498c137dcee3902de274d3597019ea4a3aab0066867995f77"
    assert ref_tree([sha(b"\x00" + r) for r in ref_records()]).hex() == \
        "6de2399a7118ef008171e86325ecd09ebf991417b702e26eafea9d65c6a6aab9"
    assert ref_program_root().hex() == "57b312198230dd52446aaa3d38d149f6a16aaf2b66a6b24701f3410a74d43f5c"
    model_hash = sha(b"cvmvm/model/v3\x00" + ref_program_root() + sha(NATIVE_EXAMPLE))
    assert model_hash.hex() == "941b1c6f08df0452fd36184c4393e57dadad0aa932b718e2d20604fdb0504fbf"
    assert cm.model_hash(ref_program_root(), NATIVE_EXAMPLE) == model_hash


def test_scales_are_in_the_model_hash_not_the_program_root():
    """FORMAT.md 1.6's scaled example: its program root is 1.5's, its model hash its own."""
    import cvmvm
    from tests.test_native_scales import SCALED
    model = cvmvm.load(SCALED)
    assert model.program_root == ref_program_root()
    assert model.model_hash == sha(b"cvmvm/model/v3\x00" + ref_program_root() + sha(SCALED))
    assert model.model_hash.hex() == "ceacd4df7afa6903931ec64c76cb2db64a615223e60baa230eb2c97660c021a4"


def test_instruction_record_matches_the_reference():
    t8, t9 = TensorType((2, 3), 8), TensorType((2, 3), 9)
    w = ref_commitment("int32", (2, 3), 8, W)
    assert records.instr_record(0, "elemwise_add", [(0, t8), (1, t8)], [(2, t9)], NoAttrs(), {1: w}) == \
        ref_records()[2]
    assert records.instr_record(1, "cvm_right_shift", [(2, t9)], [(3, t8)], RightShiftAttrs(8, 1, True), {1: w}) == \
        ref_records()[3]
    decoded = records.decode_instr(ref_records()[2], (1, 1, 2, 1, 4), "step_proof")
    assert decoded.inputs == ((0, t8), (1, t8)) and decoded.params == (None, w) and decoded.outputs == ((2, t9),)
    assert records.input_record(0, t8) == ref_records()[0]
    assert records.head_record(0, 3) == ref_records()[4]


def test_trace_root_and_output_hash_examples():
    add = [a + b for a, b in zip(X, W)]
    rs = [max(-127, min(127, (v + 1) >> 1)) for v in add]
    assert rs == [1, -62, 65, 2, 5, 2]
    commitments = [ref_commitment("int32", (2, 3), p, v) for p, v in ((8, X), (8, W), (9, add), (8, rs))]
    inputs = sha(b"cvmvm/inputs/v3\x00" + struct.pack("<I", 1) + commitments[0])
    tree = ref_tree(commitments)   # the commitments are the trace leaves
    root = sha(b"cvmvm/trace/v3\x00" + ref_program_root() + inputs + struct.pack("<I", 4) + tree)
    outputs = sha(b"cvmvm/outputs/v3\x00" + struct.pack("<I", 1) + commitments[3])
    assert inputs.hex() == "d41323e093448699ebc6336ae668f3402b699e8b1cbf4019405b1ca239be67e0"
    assert tree.hex() == "d4e459fc89e0ed9e2c58e69a0f7647bd858adf2d20b14e5cb4a78f078b170cef"
    assert root.hex() == "35b1a4b6cc1b9456a6481b08beb6381377aea341ea3eae5f85999e00ef1aff64"
    assert outputs.hex() == "f78fdcb00beae93563c60c316a731c717fecc1717cc2bc4f832681f39b480787"
    assert cm.input_commitment(commitments[:1]) == inputs
    assert cm.trace_root(ref_program_root(), inputs, 4, tree) == root
    assert cm.outputs_hash(commitments[3:]) == outputs
