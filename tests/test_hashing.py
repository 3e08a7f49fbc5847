# Over 400 lines: a test file, one case per rule.
"""Known answers for every hash construction of docs/FORMAT.md sections 2-4.

Each expected digest is computed here from the FORMAT.md text with hashlib and
struct alone (the ``ref_*`` functions), never by calling the code under test;
a few literal digests pin the constructions against any future change.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serializer.hashing import (INPUT, INSTR, PARAM, TraceEntry, leaf_hash, merkle_proof, merkle_root, merkle_roots,
                                node_hash, outputs_hash, tensor_hash, verify_merkle_proof)

# -- references, straight from FORMAT.md ----------------------------------------

CODES = {"int8": 1, "uint8": 2, "int32": 3, "int64": 4, "float16": 5, "float32": 6, "float64": 7}
# struct's little-endian element format of each dtype.
ELEMENT = {"int8": "<b", "uint8": "<B", "int32": "<i", "int64": "<q", "float16": "<e", "float32": "<f",
           "float64": "<d"}
# Unsigned struct format of the same width, to write float bit patterns exactly.
BITS = {"float16": "<H", "float32": "<I", "float64": "<Q"}


def sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def ref_tensor(dtype: str, shape: tuple[int, ...], data: bytes) -> bytes:
    """tensor_hash = SHA-256("cvmvm/tensor/v1" || 0x00 || u8 code || u8 ndim || u64le dims || data)."""
    header = b"cvmvm/tensor/v1" + b"\x00" + bytes([CODES[dtype], len(shape)])
    return sha(header + b"".join(struct.pack("<Q", d) for d in shape) + data)


def ref_data(dtype: str, flat: list) -> bytes:
    """Row-major elements, each little-endian."""
    return b"".join(struct.pack(ELEMENT[dtype], v) for v in flat)


def ref_float_data(dtype: str, bits: list[int]) -> bytes:
    return b"".join(struct.pack(BITS[dtype], b) for b in bits)


def ref_leaf(tensor: int, kind: int, index: int, output: int, precision, node: bytes, th: bytes) -> bytes:
    """leaf = SHA-256(0x00 || u32le tensor || u8 kind || u32le index || u32le output || u8 precision (0: none)
    || node || tensor_hash)."""
    return sha(b"\x00" + struct.pack("<I", tensor) + bytes([kind]) + struct.pack("<I", index)
               + struct.pack("<I", output) + bytes([precision or 0]) + node + th)


def ref_trace_root(model_hash: bytes, count: int, tree: bytes) -> bytes:
    """trace root = SHA-256(0x02 || model_hash || u32le count || Merkle root)."""
    return sha(b"\x02" + model_hash + struct.pack("<I", count) + tree)


def ref_node(descriptor: bytes) -> bytes:
    """node = SHA-256("cvmvm/node/v1" || 0x00 || descriptor)."""
    return sha(b"cvmvm/node/v1\x00" + descriptor)


def ref_inner(left: bytes, right: bytes) -> bytes:
    return sha(b"\x01" + left + right)


def largest_power_of_two_below(n: int) -> int:
    return 1 << ((n - 1).bit_length() - 1)


def ref_root(leaves: list[bytes]) -> bytes:
    if len(leaves) == 1:
        return leaves[0]
    k = largest_power_of_two_below(len(leaves))
    return ref_inner(ref_root(leaves[:k]), ref_root(leaves[k:]))


def ref_proof(i: int, leaves: list[bytes]) -> list[bytes]:
    if len(leaves) == 1:
        return []
    k = largest_power_of_two_below(len(leaves))
    if i < k:
        return ref_proof(i, leaves[:k]) + [ref_root(leaves[k:])]
    return ref_proof(i - k, leaves[k:]) + [ref_root(leaves[:k])]


def ref_outputs(hashes: list[bytes]) -> bytes:
    """output_hash = SHA-256("cvmvm/outputs/v1" || 0x00 || u32le count || tensor hashes)."""
    return sha(b"cvmvm/outputs/v1" + b"\x00" + struct.pack("<I", len(hashes)) + b"".join(hashes))


def leaves_of(n: int) -> list[bytes]:
    return [ref_leaf(i, INSTR, i, i % 3, 8, sha(b"node"), sha(bytes([i]))) for i in range(n)]


def test_power_of_two_split_matches_the_text():
    # "k the largest power of two strictly less than n"
    for n in range(2, 70):
        k = largest_power_of_two_below(n)
        assert k < n <= 2 * k and k & (k - 1) == 0


# -- tensor hash ---------------------------------------------------------------


INT32_VALUES = [[1, -2, 3], [4, 5, -6]]


def test_int32():
    a = np.array(INT32_VALUES, np.int32)
    expected = ref_tensor("int32", (2, 3), ref_data("int32", [1, -2, 3, 4, 5, -6]))
    assert tensor_hash(a) == expected
    assert tensor_hash(a, "int32") == expected


def test_int32_extremes():
    values = [-(2**31), 2**31 - 1, 0, -1]
    assert tensor_hash(np.array(values, np.int32)) == ref_tensor("int32", (4,), ref_data("int32", values))


def test_int32_big_endian_input():
    a = np.array(INT32_VALUES, dtype=">i4")
    assert a.tobytes() != np.array(INT32_VALUES, "<i4").tobytes()
    assert tensor_hash(a) == ref_tensor("int32", (2, 3), ref_data("int32", [1, -2, 3, 4, 5, -6]))
    assert tensor_hash(a, "int32") == tensor_hash(np.array(INT32_VALUES, np.int32))


def test_int32_transposed_view():
    a = np.array(INT32_VALUES, np.int32).T  # logical [[1, 4], [-2, 5], [3, -6]], not C-contiguous
    assert not a.flags.c_contiguous
    expected = ref_tensor("int32", (3, 2), ref_data("int32", [1, 4, -2, 5, 3, -6]))
    assert tensor_hash(a) == expected
    assert tensor_hash(np.ascontiguousarray(a)) == expected


def test_int32_strided_and_reversed_views():
    base = np.arange(24, dtype=np.int32).reshape(4, 6)
    view = base[::-2, 1::2]                 # rows 3, 1; columns 1, 3, 5
    flat = [19, 21, 23, 7, 9, 11]
    assert view.tolist() == [flat[:3], flat[3:]]
    assert tensor_hash(view) == ref_tensor("int32", (2, 3), ref_data("int32", flat))


def test_int32_fortran_order_big_endian():
    a = np.asfortranarray(np.array(INT32_VALUES, dtype=">i4"))
    assert tensor_hash(a) == tensor_hash(np.array(INT32_VALUES, np.int32))


def test_shape_is_part_of_the_hash():
    flat = [1, -2, 3, 4, 5, -6]
    a = np.array(flat, np.int32)
    hashes = {tensor_hash(a.reshape(s)) for s in [(6,), (2, 3), (3, 2), (1, 6), (6, 1), (1, 2, 3), (1, 1, 1, 1, 1, 6)]}
    assert len(hashes) == 7
    assert tensor_hash(a.reshape(1, 1, 1, 1, 2, 3)) == ref_tensor("int32", (1, 1, 1, 1, 2, 3), ref_data("int32", flat))


def test_dtype_is_part_of_the_hash():
    assert tensor_hash(np.array([1, 2], np.int8)) != tensor_hash(np.array([1, 2], np.uint8))


def test_int8():
    values = [-128, -1, 0, 127]
    assert tensor_hash(np.array(values, np.int8)) == ref_tensor("int8", (4,), ref_data("int8", values))


def test_uint8():
    values = [[0, 128], [255, 7]]
    assert tensor_hash(np.array(values, np.uint8)) == ref_tensor("uint8", (2, 2), ref_data("uint8", [0, 128, 255, 7]))


def test_int64():
    values = [-(2**63), 2**63 - 1, -1, 2**32]
    expected = ref_tensor("int64", (4,), ref_data("int64", values))
    assert tensor_hash(np.array(values, np.int64)) == expected
    assert tensor_hash(np.array(values, ">i8")) == expected


FLOAT_BITS = {
    # -0.0, +0.0, 1.0, a quiet NaN with a payload, a negative signalling NaN, -inf
    "float16": [0x8000, 0x0000, 0x3C00, 0x7E01, 0xFD55, 0xFC00],
    "float32": [0x80000000, 0x00000000, 0x3F800000, 0x7FC00001, 0xFF812345, 0xFF800000],
    "float64": [0x8000000000000000, 0, 0x3FF0000000000000, 0x7FF8000000000001, 0xFFF0DEADBEEF0001,
                0xFFF0000000000000],
}
UINT = {"float16": np.uint16, "float32": np.uint32, "float64": np.uint64}


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_floats_bit_for_bit(dtype):
    bits = FLOAT_BITS[dtype]
    a = np.array(bits, UINT[dtype]).view(dtype).reshape(2, 3)
    expected = ref_tensor(dtype, (2, 3), ref_float_data(dtype, bits))
    assert tensor_hash(a) == expected
    assert tensor_hash(a, dtype) == expected
    assert tensor_hash(a.astype(a.dtype.newbyteorder(">"))) == expected  # a byte swap keeps every bit


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_negative_zero_and_nan_payloads_change_the_hash(dtype):
    bits = FLOAT_BITS[dtype]
    hashes = {tensor_hash(np.array([b], UINT[dtype]).view(dtype)) for b in bits}
    assert len(hashes) == len(bits)


def test_float32_values():
    values = [0.5, -2.25, 3.0e38]
    assert tensor_hash(np.array(values, np.float32)) == ref_tensor("float32", (3,), ref_data("float32", values))


def test_zero_dimensional_array():
    assert tensor_hash(np.array(7, np.int32)) == ref_tensor("int32", (), ref_data("int32", [7]))


def test_explicit_dtype_must_be_the_arrays_own():
    with pytest.raises(ValueError):
        tensor_hash(np.array([1], np.int64), "int32")
    with pytest.raises(ValueError):
        tensor_hash(np.array([1], np.int32), "float32")


@pytest.mark.parametrize("dtype", [np.bool_, np.int16, np.uint16, np.uint32, np.uint64, np.complex64, np.object_])
def test_arrays_of_no_vm_dtype_are_refused(dtype):
    with pytest.raises(ValueError):
        tensor_hash(np.zeros(2, dtype))


@settings(derandomize=True, max_examples=200, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=4), seed=st.integers(0, 2**32 - 1),
       order=st.sampled_from("CF"), byteorder=st.sampled_from("<>"), flip=st.booleans())
def test_any_layout_hashes_like_its_row_major_values(shape, seed, order, byteorder, flip):
    values = np.random.default_rng(seed).integers(-(2**31), 2**31, size=shape, dtype=np.int64).astype(np.int32)
    a = np.array(values, dtype=byteorder + "i4", order=order)
    if flip:
        a = a[::-1]
        values = values[::-1]
    expected = ref_tensor("int32", tuple(shape), ref_data("int32", [int(v) for v in values.ravel()]))
    assert tensor_hash(a) == expected


# -- leaves and inner nodes ------------------------------------------------------


@pytest.mark.parametrize("tensor, kind, index, output", [(0, INPUT, 0, 0), (5, PARAM, 3, 0), (9, INSTR, 7, 1),
                                                         (2**32 - 1, INSTR, 2**32 - 1, 2**32 - 1),
                                                         (70000, INSTR, 256, 65536)])
def test_leaf_hash(tensor, kind, index, output):
    th, node = sha(b"tensor"), sha(b"node")
    for precision in (None, 1, 8, 32):
        assert leaf_hash(tensor, kind, index, output, precision, node, th) == \
            ref_leaf(tensor, kind, index, output, precision, node, th)
    assert leaf_hash(tensor, kind, index, output, 8, node, th) != leaf_hash(tensor, kind, index, output, 9, node, th)


def test_trace_root():
    from serializer.hashing import trace_root
    tree, model = sha(b"tree"), sha(b"model")
    assert trace_root(model, 7, tree) == ref_trace_root(model, 7, tree)
    assert trace_root(model, 7, tree) not in (trace_root(model, 8, tree), trace_root(sha(b"other"), 7, tree))


def test_node_digests_of_variables_and_instructions():
    from isa.attrs import parse_attrs
    from isa.table import OP_BY_NAME
    from isa.types import TensorType
    from serializer import native
    from serializer.hashing import node_digest
    # Descriptors are msgpack maps (FORMAT.md section 3), written out by hand here.
    var = b"\x83\xa5dtype\xa5int32\xa5shape\x92\x02\x03\xa9precision\x08"
    assert native.variable_descriptor(TensorType((2, 3), 8)) == var
    assert node_digest(var) == ref_node(var)
    raw = b"\x83\xa5dtype\xa7float32\xa5shape\x91\x04\xa9precision\xc0"
    assert native.variable_descriptor(TensorType((4,), None, "float32")) == raw
    record = parse_attrs(OP_BY_NAME["cvm_clip"].attrs, {"precision": 8}, fill_defaults=True)
    instr = (b"\x84\xa2op\x07\xa2in\x91\x00\xa3out\x91\x01"
             b"\xa5attrs\x82\xa9precision\x08\xa7is_sign\xc3")
    assert native.instr_descriptor("cvm_clip", (0,), (1,), record) == instr


def test_leaf_kind_codes():
    assert (INPUT, PARAM, INSTR) == (0, 1, 2)


def test_trace_entry_leaf():
    th, node = sha(b"t"), sha(b"n")
    assert TraceEntry(INSTR, 4, 1, 9, 12, node, th).leaf == ref_leaf(9, 2, 4, 1, 12, node, th)


def test_node_hash():
    left, right = sha(b"l"), sha(b"r")
    assert node_hash(left, right) == ref_inner(left, right)
    assert node_hash(left, right) != node_hash(right, left)


def test_leaf_and_node_are_domain_separated():
    # The leaf preimage read as an inner-node preimage: different first byte, different hash.
    th, node = sha(b"x"), sha(b"y")
    preimage = struct.pack("<IBIIB", 3, 2, 1, 0, 8) + node + th
    assert leaf_hash(3, 2, 1, 0, 8, node, th) != sha(b"\x01" + preimage)


# -- Merkle root ---------------------------------------------------------------


@pytest.mark.parametrize("n", range(1, 10))
def test_merkle_root(n):
    leaves = leaves_of(n)
    assert merkle_root(leaves) == ref_root(leaves)


def test_merkle_root_shapes_by_hand():
    a, b, c, d, e = leaves_of(5)
    assert merkle_root([a]) == a
    assert merkle_root([a, b]) == ref_inner(a, b)
    assert merkle_root([a, b, c]) == ref_inner(ref_inner(a, b), c)
    assert merkle_root([a, b, c, d]) == ref_inner(ref_inner(a, b), ref_inner(c, d))
    assert merkle_root([a, b, c, d, e]) == ref_inner(ref_inner(ref_inner(a, b), ref_inner(c, d)), e)


@pytest.mark.parametrize("n", list(range(1, 70)) + [127, 128, 129, 300])
def test_merkle_roots_of_many_trees_are_each_trees_root(n):
    trees = [[hashlib.sha256(f"{i} {p}".encode()).digest() for p in range(n)] for i in range(3)]
    by_position = [list(column) for column in zip(*trees)]
    assert merkle_roots(by_position) == [merkle_root(t) for t in trees]


def test_merkle_root_larger_counts():
    for n in (16, 17, 31, 33, 100):
        leaves = leaves_of(n)
        assert merkle_root(leaves) == ref_root(leaves)


def test_no_two_leaf_lists_share_a_root():
    # No duplicated last node (unlike Bitcoin's tree): [a, b, c] and [a, b, c, c] differ.
    a, b, c = leaves_of(3)
    assert merkle_root([a, b, c]) != merkle_root([a, b, c, c])


def test_empty_trace_has_no_root():
    with pytest.raises(ValueError):
        merkle_root([])


# -- inclusion proofs -------------------------------------------------------------

PROOF_CASES = [(n, i) for n in range(1, 18) for i in range(n)]


def test_proof_matches_the_reference_and_verifies():
    for n, i in PROOF_CASES:
        leaves = leaves_of(n)
        root = ref_root(leaves)
        proof = merkle_proof(leaves, i)
        assert proof == ref_proof(i, leaves)
        assert verify_merkle_proof(leaves[i], i, n, proof, root)


def test_proof_length_is_the_path_length():
    for n, i in PROOF_CASES:
        assert len(merkle_proof(leaves_of(n), i)) == len(ref_proof(i, leaves_of(n)))
    assert [len(merkle_proof(leaves_of(5), i)) for i in range(5)] == [3, 3, 3, 3, 1]


def test_any_flipped_proof_byte_fails():
    for n, i in PROOF_CASES:
        leaves = leaves_of(n)
        root, proof = ref_root(leaves), ref_proof(i, leaves)
        for j, h in enumerate(proof):
            for byte in range(32):
                for bit in (0x01, 0x80):
                    bad = h[:byte] + bytes([h[byte] ^ bit]) + h[byte + 1:]
                    assert not verify_merkle_proof(leaves[i], i, n, proof[:j] + [bad] + proof[j + 1:], root)


def test_another_index_fails():
    for n, i in PROOF_CASES:
        leaves = leaves_of(n)
        root, proof = ref_root(leaves), ref_proof(i, leaves)
        for j in [*range(n), -1, n, n + 1, 2**32]:
            if j != i:
                assert not verify_merkle_proof(leaves[i], j, n, proof, root)


def test_a_dropped_hash_fails():
    for n, i in PROOF_CASES:
        leaves = leaves_of(n)
        root, proof = ref_root(leaves), ref_proof(i, leaves)
        for j in range(len(proof)):
            assert not verify_merkle_proof(leaves[i], i, n, proof[:j] + proof[j + 1:], root)


def test_an_appended_or_prepended_hash_fails():
    for n, i in PROOF_CASES:
        leaves = leaves_of(n)
        root, proof = ref_root(leaves), ref_proof(i, leaves)
        for extra in (root, leaves[i], leaves[-1], bytes(32)):
            assert not verify_merkle_proof(leaves[i], i, n, proof + [extra], root)
            assert not verify_merkle_proof(leaves[i], i, n, [extra] + proof, root)


def test_another_leaf_fails():
    for n, i in PROOF_CASES:
        leaves = leaves_of(n)
        root, proof = ref_root(leaves), ref_proof(i, leaves)
        for other in [*leaves[:i], *leaves[i + 1:], sha(b"other"), leaves[i][:31] + bytes([leaves[i][31] ^ 1])]:
            assert not verify_merkle_proof(other, i, n, proof, root)


def test_another_root_fails():
    leaves = leaves_of(6)
    proof = ref_proof(2, leaves)
    assert verify_merkle_proof(leaves[2], 2, 6, proof, ref_root(leaves))
    assert not verify_merkle_proof(leaves[2], 2, 6, proof, ref_root(leaves[:5]))


def test_proof_hashes_of_the_wrong_length_fail():
    leaves = leaves_of(4)
    root, proof = ref_root(leaves), ref_proof(1, leaves)
    assert not verify_merkle_proof(leaves[1], 1, 4, [proof[0] + b"\x00", proof[1]], root)
    assert not verify_merkle_proof(leaves[1], 1, 4, [proof[0][:31], proof[1]], root)
    assert not verify_merkle_proof(leaves[1], 1, 4, [proof[0] + proof[1]], root)


def test_proof_of_a_missing_leaf_is_refused():
    with pytest.raises(ValueError):
        merkle_proof(leaves_of(3), 3)
    with pytest.raises(ValueError):
        merkle_proof(leaves_of(3), -1)


# -- output hash -----------------------------------------------------------------


def test_outputs_hash_known_answers():
    hashes = [sha(bytes([i])) for i in range(3)]
    for k in range(4):
        assert outputs_hash(hashes[:k]) == ref_outputs(hashes[:k])


def test_outputs_hash_depends_on_order():
    a, b = sha(b"a"), sha(b"b")
    assert outputs_hash([a, b]) != outputs_hash([b, a])


def test_outputs_hash_of_real_tensors():
    t1 = np.array(INT32_VALUES, np.int32)
    t2 = np.array([0.5], np.float32)
    expected = ref_outputs([ref_tensor("int32", (2, 3), ref_data("int32", [1, -2, 3, 4, 5, -6])),
                            ref_tensor("float32", (1,), ref_data("float32", [0.5]))])
    assert outputs_hash([tensor_hash(t1), tensor_hash(t2)]) == expected


# -- pinned literal digests: any change to a construction breaks these ---------------------


def test_pinned_tensor_hash_of_format_md():
    # FORMAT.md section 2's example.
    assert tensor_hash(np.array(INT32_VALUES, np.int32)).hex() == \
        "0b4fea0cb3e554b84e24d542e0a20ddf13b250f67cc2f7d3035e4d5cc9089cdd"


def test_pinned_tensor_hashes_of_other_dtypes():
    assert tensor_hash(np.array([[-128, 127]], np.int8)).hex() == \
        "d62c4f5182fe43b75ed71a29eb20f661b12a3856dc9e217f0fd4f95c99d1eb4a"
    assert tensor_hash(np.array([2**63 - 1, -(2**63)], np.int64)).hex() == \
        "9c42422d2e653ea1fc9a64f9c1d302641cd8faf4f7786a201094a9d3fa51e6f4"
    assert tensor_hash(np.array([0x7E01, 0x8000], np.uint16).view(np.float16)).hex() == \
        "c3ed43cdacb2de59980cf4f6f39c53491fa634e9a1e6bb07aad6bff0f7ce5012"


def test_pinned_leaf_node_and_root():
    th = bytes.fromhex("0b4fea0cb3e554b84e24d542e0a20ddf13b250f67cc2f7d3035e4d5cc9089cdd")
    node = sha(b"n")
    assert leaf_hash(0, INPUT, 0, 0, 8, node, th).hex() == \
        "41329a78313790e075ea352a721f77873463aca761f5b5f4d216ecccc06685a2"
    assert node_hash(bytes(32), b"\xff" * 32).hex() == \
        "bc6b943b820c449acf880d293c216a24a8066b153f87f2361fae2beda3a72641"
    three = [leaf_hash(t, kind, 0, 0, 8, node, th) for t, kind in enumerate((INPUT, PARAM, INSTR))]
    assert merkle_root(three).hex() == "1f8b8eb7e259b0079d8020bdc5f9e527a0b60d45a46de7ddf8b51a97c4061e83"


def test_pinned_outputs_hash():
    th = bytes.fromhex("0b4fea0cb3e554b84e24d542e0a20ddf13b250f67cc2f7d3035e4d5cc9089cdd")
    assert outputs_hash([th]).hex() == "5a2c7eac7e344675a5a44767b44073f6e9c49221a4b9aee1f36001a97389131e"
    assert outputs_hash([]).hex() == "a38e3c94dae5cbc29ea5a8c61a0a81c524495f1fcff413f13c69dd63aa9ff91c"
