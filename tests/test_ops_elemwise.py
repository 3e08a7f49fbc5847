"""Elementwise ops: hand tables, precision boundary tables, SEMANTICS.md section 4
cases, the formalization's shape grid, reference kernels under hypothesis,
and must-be-rejected cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import cvmvm
from cvmvm.vm.verify import verify
from isa.attrs import parse_attrs
from isa.ops import elemwise as E
from isa.table import OP_BY_NAME
from isa.types import TensorType
from serializer.model import Input, Instr, Model
from tests.opkit import arr, family, reference1, rejected, run1

M = 2**31 - 1  # INT32_MAX, the largest magnitude any precision allows





def out_precision(name, attrs, *precisions, shape=(3,)) -> int:
    op = OP_BY_NAME[name]
    record = parse_attrs(op.attrs, attrs, fill_defaults=True)
    (p,) = op.precision(record, *(TensorType(shape, q) for q in precisions))
    return p


def program_ops(name, attrs, *types) -> int:
    op = OP_BY_NAME[name]
    record = parse_attrs(op.attrs, attrs, fill_defaults=True)
    n = len(types)
    model = Model(tuple(Input(f"in{k}", t) for k, t in enumerate(types)), (),
                  (Instr(name, record, tuple(range(n)), (n,)),), (n,))
    return verify(model).ops


# -- hand-computed ------------------------------------------------------------

HAND = [
    ("relu", [arr([-5, 0, 7, -1, 1])], {}, [0, 0, 7, 0, 1]),
    ("relu", [arr([-M, M])], {}, [0, M]),
    ("abs", [arr([-127, 0, 127, -1])], {}, [127, 0, 127, 1]),
    ("abs", [arr([-M, M])], {}, [M, M]),
    ("negative", [arr([-3, 0, 4])], {}, [3, 0, -4]),
    ("negative", [arr([-M, M])], {}, [M, -M]),
    ("cvm_precision", [arr([0, 1, -1, 2, 3, 4, -7, 8, 127, -128, M, -M])], {},
     [1, 1, 1, 2, 2, 3, 3, 4, 7, 8, 31, 31]),
    ("elemwise_add", [arr([[1, -2], [3, 4]]), arr([[10, 20], [-30, 40]])], {}, [[11, 18], [-27, 44]]),
    ("elemwise_add", [arr([2**30 - 1, -(2**30 - 1)]), arr([2**30 - 1, -(2**30 - 1)])], {},
     [2**31 - 2, -(2**31 - 2)]),
    ("elemwise_sub", [arr([[1, -2], [3, 4]]), arr([[10, 20], [-30, 40]])], {}, [[-9, -22], [33, -36]]),
    ("elemwise_sub", [arr([2**30 - 1]), arr([-(2**30 - 1)])], {}, [2**31 - 2]),
    ("clip", [arr([-100, -19, -18, 0, 9, 10, 11])], {"a_min": -19, "a_max": 10}, [-19, -19, -18, 0, 9, 10, 10]),
    ("clip", [arr([0, 83, 84, 386, 387, 400])], {"a_min": 83, "a_max": 387}, [83, 83, 84, 386, 387, 387]),
    ("clip", [arr([-M, -5, M])], {"a_min": -2**30, "a_max": -7}, [-2**30, -7, -7]),
    ("cvm_clip", [arr([-5, -1, 0, 1, 5])], {"precision": 2}, [-1, -1, 0, 1, 1]),
    ("cvm_clip", [arr([-5, 0, 5])], {"precision": 1}, [0, 0, 0]),
    ("cvm_clip", [arr([200, -200, 127, -127, 126])], {"precision": 8}, [127, -127, 127, -127, 126]),
    ("cvm_clip", [arr([M, -M])], {"precision": 32}, [M, -M]),
    # x / 4 rounded half toward +inf: -1.5 -> -1, -0.5 -> 0, 0.5 -> 1, 1.5 -> 2
    ("cvm_right_shift", [arr([-6, -5, -3, -2, -1, 0, 1, 2, 5, 6, 7])], {"precision": 8, "shift_bit": 2},
     [-1, -1, -1, 0, 0, 0, 0, 1, 1, 2, 2]),
    ("cvm_right_shift", [arr([100, -100, 15, 14, -14, -15])], {"precision": 4, "shift_bit": 1},
     [7, -7, 7, 7, -7, -7]),
    ("cvm_left_shift", [arr([1, -1, 15, 16, -16, 0])], {"precision": 8, "shift_bit": 3}, [8, -8, 120, 127, -127, 0]),
    ("cvm_left_shift", [arr([2**15 - 1, -(2**15 - 1)])], {"precision": 32, "shift_bit": 16},
     [2**31 - 2**16, -(2**31 - 2**16)]),
]


@pytest.mark.parametrize("name, inputs, attrs, expected", HAND, ids=[f"{h[0]}-{i}" for i, h in enumerate(HAND)])
def test_hand(name, inputs, attrs, expected):
    out = run1(name, inputs, attrs)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, arr(expected))


# -- SEMANTICS.md section 4 --------------------------------------------------

@pytest.mark.parametrize("precision, expected", [
    (32, [2**30, -(2**30 - 1), 2**30 - 1]),
    (31, [2**30 - 1, -(2**30 - 1), 2**30 - 1]),
    (8, [127, -127, 127]),
])
def test_right_shift_int32_max_shift1_is_exact(precision, expected):
    # (M + 1) >> 1 = 2^30 in exact math; int32 math would wrap M + 1 to -2^31.
    out = run1("cvm_right_shift", [arr([M, -M, M - 1])], {"precision": precision, "shift_bit": 1})
    np.testing.assert_array_equal(out, arr(expected))


def test_right_shift_31_rounds_half_up_and_clips():
    x = arr([M, 2**30, 2**30 - 1, 0, -1, -(2**30), -(2**30) - 1, -M])
    # x / 2^31 rounded half toward +inf: 2^30 / 2^31 = 0.5 -> 1, -0.5 -> 0
    out = run1("cvm_right_shift", [x], {"precision": 8, "shift_bit": 31})
    np.testing.assert_array_equal(out, arr([1, 1, 0, 0, 0, 0, -1, -1]))


def test_right_shift_32_rounds_everything_to_zero():
    x = arr([M, 2**30, 1, 0, -1, -(2**30), -M])
    out = run1("cvm_right_shift", [x], {"precision": 8, "shift_bit": 32})
    np.testing.assert_array_equal(out, np.zeros(7, dtype=np.int32))


@pytest.mark.parametrize("precision, shift_bit, expected", [
    (16, 16, [32767, -32767, 1]),         # M >> 15 = 65535, rounds to 32768 -> clipped
    (30, 2, [2**29 - 1, -(2**29 - 1), 12288]),
    (8, 24, [127, -127, 0]),
    (24, 8, [2**23 - 1, -(2**23 - 1), 192]),
    (1, 32, [0, 0, 0]),
])
def test_right_shift_precision_plus_shift_at_least_32_clips(precision, shift_bit, expected):
    x = arr([M, -M, 3 * 2**14])
    out = run1("cvm_right_shift", [x], {"precision": precision, "shift_bit": shift_bit})
    np.testing.assert_array_equal(out, arr(expected))


def test_left_shift_works():
    # The runtime's CPU device always fails here; the formal device (and cvmvm) compute it.
    out = run1("cvm_left_shift", [arr([[3, -2, 0], [127, -127, 1]])], {"precision": 12, "shift_bit": 4}, [8])
    np.testing.assert_array_equal(out, arr([[48, -32, 0], [2032, -2032, 16]]))


@pytest.mark.parametrize("p_in, shift_bit", [(2, 30), (16, 16), (31, 1)])
def test_left_shift_of_negatives_at_the_precision_edge(p_in, shift_bit):
    # p_in + b = 32: the largest products the precision rule lets through, negatives included
    # (a left shift of a negative value is undefined in C; the kernel multiplies).
    top = 2 ** (p_in - 1) - 1
    x = arr([top, -top, -1, 1, 0])
    want = [v * 2 ** shift_bit for v in (top, -top, -1, 1, 0)]
    out = run1("cvm_left_shift", [x], {"precision": 32, "shift_bit": shift_bit}, [p_in])
    assert out.tolist() == want
    bound = 2 ** 30 - 1
    out = run1("cvm_left_shift", [x], {"precision": 31, "shift_bit": shift_bit}, [p_in])
    assert out.tolist() == [min(max(v, -bound), bound) for v in want]


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_right_shift_is_arithmetic(dtype):
    # The right-shift kernel's >> must copy the sign bit (floor division by 2^k) on every
    # platform: C leaves it implementation-defined, so this pins numpy's behaviour wherever
    # the tests run (x86_64, and s390x and arm64 under tests/test_platforms.py).
    info = np.iinfo(dtype)
    values = [info.min, info.min + 1, -(2 ** 20) - 1, -3, -2, -1, 0, 1, 2, 3, info.max - 1, info.max]
    x = np.array(values, dtype=dtype)
    for k in range(info.bits):
        assert np.right_shift(x, dtype(k)).tolist() == [v // 2 ** k for v in values], f"shift by {k}"


# -- precision rules and boundary tables -------------------------------------

@pytest.mark.parametrize("name, attrs, precisions, expected", [
    ("relu", {}, (8,), 8), ("relu", {}, (1,), 1), ("abs", {}, (17,), 17), ("negative", {}, (32,), 32),
    ("cvm_precision", {}, (32,), 6), ("cvm_precision", {}, (1,), 6),
    ("elemwise_add", {}, (8, 5), 9), ("elemwise_add", {}, (5, 8), 9), ("elemwise_sub", {}, (31, 31), 32),
    ("elemwise_sub", {}, (1, 1), 2),
    ("cvm_clip", {"precision": 7}, (32,), 7),
    ("cvm_right_shift", {"precision": 9, "shift_bit": 20}, (32,), 9),
    ("cvm_left_shift", {"precision": 12, "shift_bit": 4}, (8,), 12),
    ("cvm_left_shift", {"precision": 32, "shift_bit": 16}, (16,), 32),
])
def test_precision_rule(name, attrs, precisions, expected):
    assert out_precision(name, attrs, *precisions) == expected


# number_precision(n) = bitlen(n + 1) + 1: 2^k - 2 -> k + 1; 2^k - 1, 2^k, 2^k + 1 -> k + 2.
CLIP_TABLE = [(1, 3), (2, 3), (3, 4), (4, 4), (5, 4), (6, 4), (7, 5), (8, 5), (9, 5),
              (126, 8), (127, 9), (128, 9), (129, 9), (255, 10), (256, 10),
              (2**30 - 2, 31), (2**30 - 1, 32), (2**30, 32), (2**30 + 1, 32), (2**31 - 2, 32), (2**31 - 1, 33)]
CLIP_TABLE += [(2**k + d, k + 2) for k in range(2, 31) for d in (-1, 0, 1)]
CLIP_TABLE += [(2**k - 2, k + 1) for k in range(2, 32)]


@pytest.mark.parametrize("n, expected", CLIP_TABLE)
def test_clip_precision_boundaries(n, expected):
    assert out_precision("clip", {"a_min": -n, "a_max": 0}, 8) == expected
    assert out_precision("clip", {"a_min": 0, "a_max": n}, 32) == expected
    assert out_precision("clip", {"a_min": -n, "a_max": n - 1}, 1) == expected
    assert out_precision("clip", {"a_min": 1 - n, "a_max": n}, 16) == expected


@pytest.mark.parametrize("n, accepted", [(2**31 - 2, True), (2**30 + 1, True), (2**31 - 1, False)])
def test_clip_precision_acceptance(n, accepted):
    x = arr([M, -M, 0])
    if accepted:
        np.testing.assert_array_equal(run1("clip", [x], {"a_min": -n, "a_max": n}), arr([n, -n, 0]))
    else:
        assert rejected("clip", [x], {"a_min": -n, "a_max": n}) == "invalid.precision"


# bitlen at 2^k - 1, 2^k, 2^k + 1 (and negatives): k, k + 1, k + 1.
PRECISION_TABLE = [(0, 1), (1, 1), (2, 2), (3, 2), (M, 31)]
PRECISION_TABLE += [(2**k + d, k + (d >= 0)) for k in range(2, 31) for d in (-1, 0, 1)]


def test_cvm_precision_boundaries():
    xs = [v for v, _ in PRECISION_TABLE]
    want = [b for _, b in PRECISION_TABLE]
    np.testing.assert_array_equal(run1("cvm_precision", [arr(xs)]), arr(want))
    np.testing.assert_array_equal(run1("cvm_precision", [arr([-v for v in xs])]), arr(want))


def test_cost_is_unit():
    t = TensorType((2, 3), 8)
    for name, attrs, types in [("relu", {}, (t,)), ("elemwise_add", {}, (t, t)),
                               ("cvm_right_shift", {"precision": 8, "shift_bit": 2}, (t,))]:
        assert program_ops(name, attrs, *types) == 5 * 6 * len(types) + 1 * 6 + 5 * 6


# -- the formalization's shape grid ------------------------------------------

GRID = [(1, j, l, r) for j in (1, 14, 27, 40, 53, 66, 79, 92) for l in (1, 18, 35, 52, 69, 86)
        for r in (1, 24, 47, 70, 93)]


def grid_data(rng, shape, precision) -> np.ndarray:
    bound = 2 ** (precision - 1) - 1
    x = rng.integers(-bound, bound, size=shape, endpoint=True, dtype=np.int64)
    flat = x.reshape(-1)
    flat[: min(4, flat.size)] = [bound, -bound, 0, 1][: min(4, flat.size)]
    return x.astype(np.int32)


def floor_right_shift(x, b):
    """The formula with floor division (numpy // floors, as the formula's brackets ask)."""
    return (np.floor_divide(x.astype(np.int64), 2 ** (b - 1)) + 1) // 2


GRID_CASES = [
    # op, attrs, input precision, independent vectorised oracle
    ("relu", {}, 16, lambda x: np.where(x > 0, x, 0)),
    ("abs", {}, 32, lambda x: np.where(x < 0, -x.astype(np.int64), x)),
    ("negative", {}, 32, lambda x: 0 - x.astype(np.int64)),
    ("cvm_precision", {}, 32,
     lambda x: np.maximum(1, sum((np.abs(x.astype(np.int64)) >> k > 0).astype(np.int64) for k in range(32)))),
    ("clip", {"a_min": -19, "a_max": 10}, 8, lambda x: np.minimum(np.maximum(x, -19), 10)),
    ("cvm_clip", {"precision": 2}, 8, lambda x: np.minimum(np.maximum(x, -1), 1)),
    ("cvm_right_shift", {"precision": 2, "shift_bit": 2}, 8,
     lambda x: np.minimum(np.maximum(floor_right_shift(x, 2), -1), 1)),
    ("cvm_left_shift", {"precision": 2, "shift_bit": 2}, 8,
     lambda x: np.minimum(np.maximum(x.astype(np.int64) * 4, -1), 1)),
]


@pytest.mark.parametrize("name, attrs, precision, oracle", GRID_CASES, ids=[g[0] for g in GRID_CASES])
def test_grid_unary(name, attrs, precision, oracle):
    rng = np.random.default_rng(20240601)
    for shape in GRID:
        x = grid_data(rng, shape, precision)
        out = run1(name, [x], attrs, [precision])
        assert out.shape == shape
        np.testing.assert_array_equal(out, oracle(x), err_msg=f"{name} {shape}")


@pytest.mark.parametrize("name, sign", [("elemwise_add", 1), ("elemwise_sub", -1)])
def test_grid_binary(name, sign):
    rng = np.random.default_rng(20240602)
    for shape in GRID:
        a, b = grid_data(rng, shape, 31), grid_data(rng, shape, 31)
        out = run1(name, [a, b], {}, [31, 31])
        np.testing.assert_array_equal(out, a.astype(np.int64) + sign * b.astype(np.int64), err_msg=f"{shape}")


# -- reference kernels under hypothesis -------------------------------------

SHAPES = hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4)


@st.composite
def tensor(draw, precision=None, shape=None):
    p = draw(st.integers(1, 32)) if precision is None else precision
    s = draw(SHAPES) if shape is None else shape
    bound = 2 ** (p - 1) - 1
    edge = st.sampled_from([bound, -bound, 0, 1, -1]).filter(lambda v: abs(v) <= bound)
    x = draw(hnp.arrays(np.int32, s, elements=st.one_of(st.integers(-bound, bound), edge)))
    return x, p


PROPERTY = settings(derandomize=True, max_examples=60, deadline=None)


@PROPERTY
@given(tensor(), st.sampled_from(["relu", "abs", "negative", "cvm_precision"]))
def test_unary_matches_reference(xp, name):
    x, p = xp
    np.testing.assert_array_equal(run1(name, [x], {}, [p]), reference1(name, [x]))


@PROPERTY
@given(tensor())
def test_both_relu_formulations_match_reference(xp):
    x, p = xp
    for plan in ("maximum", "clip"):   # chosen by size (relu_plan); each must be exact at any size
        (y,) = E.relu_kernel(E.NoAttrs(), x, plan=plan)
        np.testing.assert_array_equal(y, reference1("relu", [x]))
    assert E.relu_plan(E.NoAttrs(), TensorType((E.SMALL_ELEMWISE,), p)) == "maximum"
    assert E.relu_plan(E.NoAttrs(), TensorType((E.SMALL_ELEMWISE + 1,), p)) == "clip"


@PROPERTY
@given(st.data(), st.sampled_from(["elemwise_add", "elemwise_sub"]))
def test_binary_matches_reference(data, name):
    a, pa = data.draw(tensor())
    b, pb = data.draw(tensor(precision=data.draw(st.integers(1, 31 if pa == 32 else 32)), shape=a.shape))
    if max(pa, pb) == 32:
        assert rejected(name, [a, b], {}, [pa, pb]) == "invalid.precision"
    else:
        np.testing.assert_array_equal(run1(name, [a, b], {}, [pa, pb]), reference1(name, [a, b]))


@PROPERTY
@given(tensor(), st.integers(-M, M), st.integers(-M, M))
def test_clip_matches_reference(xp, lo, hi):
    x, p = xp
    a_min, a_max = min(lo, hi), max(lo, hi)
    assume(a_min < a_max and max(-a_min, a_max) < M)
    attrs = {"a_min": a_min, "a_max": a_max}
    np.testing.assert_array_equal(run1("clip", [x], attrs, [p]), reference1("clip", [x], attrs))


@PROPERTY
@given(tensor(), st.integers(1, 32))
def test_cvm_clip_matches_reference(xp, precision):
    x, p = xp
    attrs = {"precision": precision}
    np.testing.assert_array_equal(run1("cvm_clip", [x], attrs, [p]), reference1("cvm_clip", [x], attrs))


@PROPERTY
@given(tensor(), st.integers(1, 32), st.integers(1, 32))
def test_right_shift_matches_reference(xp, precision, shift_bit):
    x, p = xp
    attrs = {"precision": precision, "shift_bit": shift_bit}
    np.testing.assert_array_equal(run1("cvm_right_shift", [x], attrs, [p]),
                                  reference1("cvm_right_shift", [x], attrs))


@PROPERTY
@given(st.data(), st.integers(1, 32), st.integers(1, 31))
def test_left_shift_matches_reference(data, precision, shift_bit):
    x, p = data.draw(tensor(precision=data.draw(st.integers(1, 32 - shift_bit))))
    attrs = {"precision": precision, "shift_bit": shift_bit}
    np.testing.assert_array_equal(run1("cvm_left_shift", [x], attrs, [p]),
                                  reference1("cvm_left_shift", [x], attrs))


# -- must be rejected --------------------------------------------------------

x3 = arr([1, 2, 3])
x23 = arr([[1, 2, 3], [4, 5, 6]])

REJECT = [
    ("elemwise_add", [x23, x23.reshape(3, 2)], {}, None, "invalid.shape"),
    ("elemwise_add", [x23, x3], {}, None, "invalid.shape"),               # no broadcasting here
    ("elemwise_sub", [x3.reshape(1, 3), x3], {}, None, "invalid.shape"),
    ("elemwise_add", [x3, x3], {}, [32, 31], "invalid.precision"),
    ("elemwise_sub", [x3, x3], {}, [32, 32], "invalid.precision"),
    ("elemwise_add", [x3], {}, None, "invalid.arity"),
    ("relu", [x3, x3], {}, None, "invalid.arity"),
    ("relu", [x3], {"foo": 1}, None, "invalid.attr"),
    ("negative", [x3], {"precision": 8}, None, "invalid.attr"),
    ("abs", [x3.astype(np.int8)], {}, None, "invalid.dtype"),
    ("cvm_precision", [x3.astype(np.float32)], {}, None, "invalid.dtype"),
    ("clip", [x3], {"a_min": 0}, None, "invalid.attr"),
    ("clip", [x3], {"a_max": 5}, None, "invalid.attr"),
    ("clip", [x3], {}, None, "invalid.attr"),
    ("clip", [x3], {"a_min": 5, "a_max": 5}, None, "invalid.attr"),
    ("clip", [x3], {"a_min": 6, "a_max": 5}, None, "invalid.attr"),
    ("clip", [x3], {"a_min": 0, "a_max": 2**31}, None, "invalid.attr"),
    ("clip", [x3], {"a_min": -2**31, "a_max": 0}, None, "invalid.attr"),
    ("clip", [x3], {"a_min": False, "a_max": 5}, None, "invalid.attr"),
    ("clip", [x3], {"a_min": "0", "a_max": 5}, None, "invalid.attr"),
    ("clip", [x3], {"a_min": -5, "a_max": M}, None, "invalid.precision"),
    ("clip", [x3], {"a_min": -M, "a_max": 5}, None, "invalid.precision"),
    ("cvm_clip", [x3], {"precision": 0}, None, "invalid.attr"),
    ("cvm_clip", [x3], {"precision": 33}, None, "invalid.attr"),
    ("cvm_clip", [x3], {}, None, "invalid.attr"),
    ("cvm_clip", [x3], {"precision": True}, None, "invalid.attr"),
    ("cvm_right_shift", [x3], {"precision": 8, "shift_bit": 0}, None, "invalid.attr"),
    ("cvm_right_shift", [x3], {"precision": 8, "shift_bit": 33}, None, "invalid.attr"),
    ("cvm_right_shift", [x3], {"precision": 0, "shift_bit": 2}, None, "invalid.attr"),
    ("cvm_right_shift", [x3], {"precision": 33, "shift_bit": 2}, None, "invalid.attr"),
    ("cvm_right_shift", [x3], {"precision": 8}, None, "invalid.attr"),
    ("cvm_right_shift", [x3], {"shift_bit": 2}, None, "invalid.attr"),
    ("cvm_right_shift", [x3], {"precision": 8, "shift_bit": [2]}, None, "invalid.attr"),
    ("cvm_left_shift", [x3], {"precision": 8, "shift_bit": 13}, [20], "invalid.precision"),
    ("cvm_left_shift", [x3], {"precision": 8, "shift_bit": 1}, [32], "invalid.precision"),
    ("cvm_left_shift", [arr([0, 0, 0])], {"precision": 8, "shift_bit": 32}, [1], "invalid.precision"),
    ("cvm_left_shift", [x3], {"precision": 8, "shift_bit": 33}, None, "invalid.attr"),
    ("cvm_left_shift", [x3], {"precision": 33, "shift_bit": 1}, None, "invalid.attr"),
    ("cvm_left_shift", [x3], {"precision": 8}, None, "invalid.attr"),
]
VALID_ATTRS = {"clip": {"a_min": -1, "a_max": 1}, "cvm_clip": {"precision": 8},
               "cvm_right_shift": {"precision": 8, "shift_bit": 1}, "cvm_left_shift": {"precision": 8, "shift_bit": 1}}
for op in family(E):
    n_in = 2 if op.name.startswith("elemwise_") else 1
    valid = VALID_ATTRS.get(op.name, {})
    REJECT += [
        (op.name, [], valid, None, "invalid.arity"),
        (op.name, [x3] * (n_in + 1), valid, None, "invalid.arity"),
        (op.name, [x3.astype(np.int8)] * n_in, valid, None, "invalid.dtype"),
        (op.name, [x3] * n_in, {**valid, "foo": 1}, None, "invalid.attr"),
    ]


@pytest.mark.parametrize("name, inputs, attrs, precisions, code", REJECT,
                         ids=[f"{r[0]}-{i}" for i, r in enumerate(REJECT)])
def test_rejected(name, inputs, attrs, precisions, code):
    assert rejected(name, inputs, attrs, precisions) == code


def test_left_shift_accepts_exactly_32_bits():
    out = run1("cvm_left_shift", [arr([1, -1])], {"precision": 32, "shift_bit": 12}, [20])
    np.testing.assert_array_equal(out, arr([4096, -4096]))


def test_attrs_record_rejects_reversed_clip_bounds_directly():
    with pytest.raises(cvmvm.InvalidError) as e:
        E.ClipAttrs(a_min=3, a_max=-3)
    assert e.value.code == "invalid.attr"
