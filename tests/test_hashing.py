"""Known answers for every hash of commitment format 2 (docs/FORMAT.md sections 1.3 and 2-5).

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

from isa.ops.elemwise import RightShiftAttrs
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


def ref_commitment(dtype: str, shape: tuple[int, ...], precision: int | None, flat: list[int]) -> bytes:
    body = ref_body(dtype, shape, precision, flat)
    chunks = [body[i:i + 4096] for i in range(0, len(body), 4096)]
    root = ref_tree([sha(b"\x00" + c) for c in chunks])
    return sha(b"cvmvm/tensor/v2\x00" + ref_type(dtype, shape, precision) + root)


# -- section 2 ----------------------------------------------------------------------------

EX1 = [1, -2, 3, 4, 5, -6, 7, 8, 9, 10, -11, 12]
EX2 = [1, -2, 300, -32767, 5, -6]
EX3 = [i * i - 1000000 for i in range(3000)]


def test_format_examples_by_the_reference():
    assert ref_body("int32", (1, 2, 2, 3), 8, EX1).hex() == "0107fe080309040a05f5fa0c"
    assert ref_commitment("int32", (1, 2, 2, 3), 8, EX1).hex() == \
        "ce60dcb1b9d73aef36ae8e6db5eb6e1703e4c44143fd665cba6276e8ee88979e"
    assert ref_body("int32", (2, 3), 16, EX2).hex() == "0100feff2c0101800500faff"
    assert ref_commitment("int32", (2, 3), 16, EX2).hex() == \
        "6248e99d373e26bee73f795d35e41751b87a9da5d3bd5468441c1f53be4b3557"
    body = ref_body("int32", (3000,), 32, EX3)
    leaves = [sha(b"\x00" + body[i:i + 4096]) for i in range(0, len(body), 4096)]
    assert [len(body[i:i + 4096]) for i in range(0, len(body), 4096)] == [4096, 4096, 3808]
    assert ref_tree(leaves) == sha(b"\x01" + sha(b"\x01" + leaves[0] + leaves[1]) + leaves[2])
    assert ref_tree(leaves).hex() == "69ba8dd51cf9942d70f2026fd8329490c79485738fac6d662142c1248f60d5f6"
    assert ref_commitment("int32", (3000,), 32, EX3).hex() == \
        "c771099073009a3db22b5b45503d0949f932b662be5dfba0ea4d446f4638f033"


@pytest.mark.parametrize("shape,precision,flat", [((1, 2, 2, 3), 8, EX1), ((2, 3), 16, EX2), ((3000,), 32, EX3)])
def test_tensor_commitment_matches_the_reference(shape, precision, flat):
    value = np.array(flat, dtype=np.int32).reshape(shape)
    assert cm.tensor_commitment(value, TensorType(shape, precision)) == ref_commitment("int32", shape, precision, flat)


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
    assert cm.tensor_commitment(value, t) == sha(b"cvmvm/tensor/v2\x00" + ref_type(dtype, (3,), None)
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
    value = np.arange(-700, 2300, dtype=np.int64).astype(dtype).reshape(2, 3, 500)   # several chunks at 8 bytes
    t = TensorType(value.shape, None, dtype)
    assert cm.Committer(t)(value) == cm.commitment_of(t, cm.tree_root(cm.chunk_leaves(cm.tensor_body(value, t))))


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
    ty = lambda p: ref_type("int32", (2, 3), p)  # noqa: E731
    return [b"\x00" + struct.pack("<I", 0) + ty(8),
            b"\x01" + struct.pack("<I", 1) + ref_commitment("int32", (2, 3), 8, W),
            b"\x02" + struct.pack("<IHBB", 0, 4, 2, 1) + struct.pack("<I", 0) + ty(8) + struct.pack("<I", 1) + ty(8)
            + struct.pack("<I", 2) + ty(9),
            b"\x02" + struct.pack("<IHBB", 1, 8, 1, 1) + struct.pack("<I", 2) + ty(9) + struct.pack("<I", 3) + ty(8)
            + struct.pack("<qq", 8, 1) + b"\x01",
            b"\x03" + struct.pack("<II", 0, 3)]


def ref_program_root() -> bytes:
    tree = ref_tree([sha(b"\x00" + r) for r in ref_records()])
    return sha(b"cvmvm/program/v2\x00" + struct.pack("<5I", 1, 1, 2, 1, 4) + tree)


def test_program_root_and_model_hash_examples():
    assert len(NATIVE_EXAMPLE) == 261
    assert ref_records()[1].hex() == "0101000000f2f7132c067f1b4e40b1675975c968362642d4613d941c016e8e2a3ed1f843b5"
    assert ref_tree([sha(b"\x00" + r) for r in ref_records()]).hex() == \
        "145842d2eefb12a620b5b64befe92af5d94447cca205931cee5db375369790c4"
    assert ref_program_root().hex() == "02ff29d65d20893395f59e86894fc004c7e64a3ef0b6b9a5e742421ffb5686a8"
    model_hash = sha(b"cvmvm/model/v2\x00" + ref_program_root() + sha(NATIVE_EXAMPLE))
    assert model_hash.hex() == "1528019076a2022ddb71d7ed356dc88cc048996117d2ed2b8ba2a208b910e665"
    assert cm.model_hash(ref_program_root(), NATIVE_EXAMPLE) == model_hash


def test_scales_are_in_the_model_hash_not_the_program_root():
    """FORMAT.md 1.6's scaled example: its program root is 1.5's, its model hash its own."""
    import cvmvm
    from tests.test_native_scales import SCALED
    model = cvmvm.load(SCALED)
    assert model.program_root == ref_program_root()
    assert model.model_hash == sha(b"cvmvm/model/v2\x00" + ref_program_root() + sha(SCALED))
    assert model.model_hash.hex() == "b00ec22e52b98d4fedba9ae908539d9fa8748ea31f6db1a5721b646e161cd712"


def test_instruction_record_matches_the_reference():
    t8, t9 = TensorType((2, 3), 8), TensorType((2, 3), 9)
    assert records.instr_record(1, "cvm_right_shift", [(2, t9)], [(3, t8)], RightShiftAttrs(8, 1, True)) == ref_records()[3]
    assert records.input_record(0, t8) == ref_records()[0]
    assert records.head_record(0, 3) == ref_records()[4]


def test_trace_root_and_output_hash_examples():
    add = [a + b for a, b in zip(X, W)]
    rs = [max(-127, min(127, (v + 1) >> 1)) for v in add]
    assert rs == [1, -62, 65, 2, 5, 2]
    commitments = [ref_commitment("int32", (2, 3), p, v) for p, v in ((8, X), (8, W), (9, add), (8, rs))]
    inputs = sha(b"cvmvm/inputs/v2\x00" + struct.pack("<I", 1) + commitments[0])
    tree = ref_tree([sha(b"\x00" + c) for c in commitments])
    root = sha(b"cvmvm/trace/v2\x00" + ref_program_root() + inputs + struct.pack("<I", 4) + tree)
    outputs = sha(b"cvmvm/outputs/v2\x00" + struct.pack("<I", 1) + commitments[3])
    assert inputs.hex() == "e46ed51cbad8bd3767a43f999799e82b8f5f3cb717fb68e6bec0705c7a92f511"
    assert tree.hex() == "abb18a14d9f0629cd7c74958e6d5d1f1f5e0bb4a1b7d6d13b2ca5fc27816843e"
    assert root.hex() == "2290f2e3e9326863928a741c5942f8d5b3a8bd26620e454b0ce74b64c74523bc"
    assert outputs.hex() == "2c233906dd7a7bf3068e2af990e76778d2ef47a40d48bca011704bbdb36a861d"
    assert cm.input_commitment(commitments[:1]) == inputs
    assert cm.trace_root(ref_program_root(), inputs, 4, tree) == root
    assert cm.outputs_hash(commitments[3:]) == outputs
