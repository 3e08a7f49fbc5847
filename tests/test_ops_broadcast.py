"""Broadcast ops and where: hand tables, the shape rule over the formalization's
whole shape grid, kernels on a deterministic sample of grid pairs, reference
kernels under hypothesis, and must-be-rejected cases."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from cvmvm.vm.verify import verify
from isa.errors import Rejected
from isa.ops import broadcast as B
from isa.ops.elemwise import NoAttrs
from isa.table import OP_BY_NAME
from isa.types import TensorType
from serializer.model import Input, Instr, Model
from tests.opkit import arr, reference1, rejected, run1

M = 2**31 - 1
BINARY = ["broadcast_add", "broadcast_sub", "broadcast_mul", "broadcast_div", "broadcast_max", "broadcast_greater"]





# -- hand-computed ------------------------------------------------------------

HAND = [
    # the formalization's example
    ("broadcast_add", [arr([[1, 1, 1], [1, 1, 1]]), arr([[0], [1]])], [[1, 1, 1], [2, 2, 2]]),
    ("broadcast_add", [arr([5]), arr([[1, -2, 3]])], [[6, 3, 8]]),
    ("broadcast_sub", [arr([[10, 20, 30], [40, 50, 60]]), arr([1, 2, 3])], [[9, 18, 27], [39, 48, 57]]),
    ("broadcast_sub", [arr([1, 2, 3]), arr([[10], [20]])], [[-9, -8, -7], [-19, -18, -17]]),
    ("broadcast_mul", [arr([[1], [-2]]), arr([[3, 0, -4]])], [[3, 0, -4], [-6, 0, 8]]),
    ("broadcast_mul", [arr([2**15 - 1]), arr([-(2**15 - 1), 2**15 - 1])], [-(2**30 - 2**16 + 1), 2**30 - 2**16 + 1]),
    # C division: truncation toward zero for every sign combination, x / 0 = 0
    ("broadcast_div", [arr([7, -7, 7, -7, 0, 5, -5, M, -M, 1, -1]), arr([2, 2, -2, -2, 3, 0, 0, -1, 2, 3, 3])],
     [3, -3, -3, 3, 0, 0, 0, -M, -(2**30 - 1), 0, 0]),
    ("broadcast_div", [arr([[9, -9, 0], [100, -100, 7]]), arr([4, 0, -3])], [[2, 0, 0], [25, 0, -2]]),
    ("broadcast_div", [arr([6]), arr([[4], [-4], [0], [7]])], [[1], [-1], [0], [0]]),
    ("broadcast_max", [arr([[-5, 3], [0, -1]]), arr([-2, -2])], [[-2, 3], [0, -1]]),
    ("broadcast_max", [arr([-M]), arr([-M, M])], [-M, M]),
    ("broadcast_greater", [arr([[1, 2, 3], [4, 5, 6]]), arr([3])], [[0, 0, 0], [1, 1, 1]]),
    ("broadcast_greater", [arr([-1, 0, 1]), arr([[0], [-1]])], [[0, 0, 1], [0, 1, 1]]),
]


@pytest.mark.parametrize("name, inputs, expected", HAND, ids=[f"{h[0]}-{i}" for i, h in enumerate(HAND)])
def test_hand(name, inputs, expected):
    out = run1(name, inputs)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, arr(expected))


def test_where_same_shape():
    cond = arr([[1, 0, -3], [0, 0, 7]])
    x = arr([[1, 2, 3], [4, 5, 6]])
    y = arr([[-1, -2, -3], [-4, -5, -6]])
    np.testing.assert_array_equal(run1("where", [cond, x, y]), arr([[1, -2, 3], [-4, -5, 6]]))


def test_where_1d_condition_selects_rows():
    # SEMANTICS.md section 4: cond[i] selects row i of x or y.
    cond = arr([0, 5, -1])
    x = np.arange(12, dtype=np.int32).reshape(3, 2, 2)
    y = -np.arange(12, dtype=np.int32).reshape(3, 2, 2) - 100
    out = run1("where", [cond, x, y])
    np.testing.assert_array_equal(out[0], y[0])
    np.testing.assert_array_equal(out[1], x[1])
    np.testing.assert_array_equal(out[2], x[2])


def test_where_1d_everything():
    np.testing.assert_array_equal(run1("where", [arr([0, 1, 0]), arr([1, 2, 3]), arr([7, 8, 9])]), arr([7, 2, 9]))


def test_where_output_precision_is_the_values_not_the_condition():
    # The runtime would say precision 1 (the condition's) for values up to 2^20.
    x = arr([2**20, -(2**20)])
    out = run1("where", [arr([0, 0]), arr([1, 1]), x], None, [1, 2, 22])
    np.testing.assert_array_equal(out, x)


# -- precision rules ---------------------------------------------------------

@pytest.mark.parametrize("name, precisions, expected", [
    ("broadcast_add", (8, 5), 9), ("broadcast_add", (5, 8), 9), ("broadcast_add", (31, 31), 32),
    ("broadcast_sub", (1, 1), 2), ("broadcast_sub", (12, 30), 31),
    ("broadcast_mul", (8, 8), 16), ("broadcast_mul", (16, 16), 32), ("broadcast_mul", (1, 9), 10),
    ("broadcast_div", (8, 3), 8), ("broadcast_div", (3, 8), 3), ("broadcast_div", (32, 32), 32),
    ("broadcast_max", (8, 5), 8), ("broadcast_max", (5, 8), 8),
    ("broadcast_greater", (1, 8), 2), ("broadcast_greater", (1, 1), 2), ("broadcast_greater", (8, 1), 8),
    ("broadcast_greater", (2, 32), 2),
    ("where", (32, 8, 5), 8), ("where", (1, 3, 7), 7), ("where", (9, 1, 1), 1),
])
def test_precision_rule(name, precisions, expected):
    op = OP_BY_NAME[name]
    assert op.precision(NoAttrs(), *(TensorType((2, 3), p) for p in precisions)) == (expected,)


def test_precision_rules_are_sound_at_the_extremes():
    # Every value at +-bound: the executor's output check would raise internal.precision otherwise.
    for name in BINARY:
        for pa, pb in [(1, 1), (2, 2), (8, 3), (16, 16), (31, 1), (1, 31), (30, 31)]:
            if name == "broadcast_mul" and pa + pb > 32:
                continue
            ba, bb = 2 ** (pa - 1) - 1, 2 ** (pb - 1) - 1
            a = arr([ba, -ba, ba, -ba, 0])
            b = arr([bb, bb, -bb, -bb, 0])
            out = run1(name, [a, b], None, [pa, pb])
            np.testing.assert_array_equal(out, reference1(name, [a, b]))


def test_cost_is_unit():
    a, b = TensorType((2, 1, 3), 8), TensorType((4, 1), 8)
    op = OP_BY_NAME["broadcast_mul"]
    model = Model((Input("a", a), Input("b", b)), (), (Instr("broadcast_mul", NoAttrs(), (0, 1), (2,)),), (2,))
    assert op.shape(NoAttrs(), a, b) == ((2, 4, 3),)
    assert verify(model).ops == 5 * 6 + 5 * 4 + 1 * 24 + 5 * 24


# -- the formalization's grid ------------------------------------------------

GRID = [(1, j, l, r) for j in (1, 14, 27, 40, 53, 66, 79, 92) for l in (1, 18, 35, 52, 69, 86)
        for r in (1, 24, 47, 70, 93)]


def test_shape_rule_over_all_grid_pairs():
    accepted = 0
    for sx, sy in itertools.product(GRID, GRID):
        fits = all(m == n or m == 1 or n == 1 for m, n in zip(sx, sy))
        try:
            (shape,) = B.broadcast_shape(NoAttrs(), TensorType(sx, 8), TensorType(sy, 8))
        except Rejected:
            assert not fits, (sx, sy)
            continue
        assert fits, (sx, sy)
        assert shape == tuple(max(m, n) for m, n in zip(sx, sy))
        accepted += 1
    assert accepted == 22 * 16 * 13          # per axis: equal sizes, or a 1 on either side


@pytest.mark.parametrize("sx, sy, expected", [
    ((3,), (2, 3), (2, 3)), ((2, 3), (3,), (2, 3)), ((1,), (4, 5, 6), (4, 5, 6)),
    ((5, 1, 1, 1, 1, 1), (7,), (5, 1, 1, 1, 1, 7)), ((2, 1, 3), (4, 1), (2, 4, 3)),
    ((1, 1), (1,), (1, 1)), ((6,), (6,), (6,)),
])
def test_shape_rule_ranks(sx, sy, expected):
    assert B.broadcast_shape(NoAttrs(), TensorType(sx, 8), TensorType(sy, 8)) == (expected,)


def collapse(shape, mask):
    return tuple(1 if mask >> i & 1 else d for i, d in enumerate(shape))


def c_div_oracle(a, b):
    """C division through the C remainder: a - fmod(a, b) is an exact multiple of b."""
    safe = np.where(b == 0, 1, b)
    return np.where(b == 0, 0, (a - np.fmod(a, safe)) // safe)


ORACLES = {
    "broadcast_add": lambda a, b: a + b,
    "broadcast_sub": lambda a, b: a - b,
    "broadcast_mul": lambda a, b: a * b,
    "broadcast_div": c_div_oracle,
    "broadcast_max": lambda a, b: np.where(a >= b, a, b),
    "broadcast_greater": lambda a, b: (a > b).astype(np.int64),
}


@pytest.mark.parametrize("name", BINARY)
def test_grid_sample(name):
    # Every grid shape once, paired with itself or a copy with some axes collapsed to 1
    # (on either side), the pattern cycling deterministically through the grid.
    rng = np.random.default_rng(7)
    pa, pb = (16, 16) if name == "broadcast_mul" else (31, 8)
    for i, shape in enumerate(GRID):
        sa, sb = shape, collapse(shape, i % 16)
        if i % 2:
            sa, sb = sb, sa
        a = rng.integers(-(2 ** (pa - 1) - 1), 2 ** (pa - 1), size=sa, dtype=np.int64).astype(np.int32)
        b = rng.integers(-(2 ** (pb - 1) - 1), 2 ** (pb - 1), size=sb, dtype=np.int64).astype(np.int32)
        b.reshape(-1)[0] = 0
        out = run1(name, [a, b], None, [pa, pb])
        out_shape = np.broadcast_shapes(sa, sb)
        wide_a = np.broadcast_to(a, out_shape).astype(np.int64)
        wide_b = np.broadcast_to(b, out_shape).astype(np.int64)
        want = ORACLES[name](wide_a, wide_b)
        np.testing.assert_array_equal(out, want, err_msg=f"{name} {sa} {sb}")


# -- reference kernels under hypothesis -------------------------------------

PROPERTY = settings(derandomize=True, max_examples=80, deadline=None)


def values(shape, precision):
    bound = 2 ** (precision - 1) - 1
    edge = st.sampled_from([bound, -bound, 0, 1, -1]).filter(lambda v: abs(v) <= bound)
    return hnp.arrays(np.int32, shape, elements=st.one_of(st.integers(-bound, bound), edge))


@PROPERTY
@given(st.data(), st.sampled_from(BINARY),
       hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=4, min_side=1, max_side=4))
def test_binary_matches_reference(data, name, shapes):
    sa, sb = shapes.input_shapes
    pa = data.draw(st.integers(1, 31))
    pb = data.draw(st.integers(1, 32 - pa if name == "broadcast_mul" else 31))
    a, b = data.draw(values(sa, pa)), data.draw(values(sb, pb))
    np.testing.assert_array_equal(run1(name, [a, b], None, [pa, pb]), reference1(name, [a, b]))


@PROPERTY
@given(st.data(), hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4), st.booleans())
def test_where_matches_reference(data, shape, rows):
    cond = data.draw(values(shape[:1] if rows else shape, data.draw(st.integers(1, 32))))
    px, py = data.draw(st.integers(1, 32)), data.draw(st.integers(1, 32))
    x, y = data.draw(values(shape, px)), data.draw(values(shape, py))
    np.testing.assert_array_equal(run1("where", [cond, x, y], None, [None, px, py]), reference1("where", [cond, x, y]))


# -- must be rejected --------------------------------------------------------

x23 = arr([[1, 2, 3], [4, 5, 6]])
x3 = arr([1, 2, 3])

REJECT = [(name, [x23, arr([1, 2, 3, 4])], {}, None, "invalid.shape") for name in BINARY]
REJECT += [(name, [x23, x23.reshape(3, 2)], {}, None, "invalid.shape") for name in BINARY]
REJECT += [(name, [x3], {}, None, "invalid.arity") for name in BINARY]
REJECT += [(name, [x3, x3.astype(np.uint8)], {}, None, "invalid.dtype") for name in BINARY]
REJECT += [(name, [x3, x3], {"foo": 1}, None, "invalid.attr") for name in BINARY]
REJECT += [
    ("broadcast_add", [np.zeros((2, 3, 4), np.int32), np.zeros((3, 1, 4), np.int32)], {}, None, "invalid.shape"),
    ("broadcast_mul", [np.zeros((2, 2), np.int32), np.zeros((2,), np.int32), np.zeros((2,), np.int32)], {}, None,
     "invalid.arity"),
    ("broadcast_add", [x3, x3], {}, [32, 8], "invalid.precision"),
    ("broadcast_sub", [x3, x3], {}, [8, 32], "invalid.precision"),
    ("broadcast_mul", [x23, x23], {}, [16, 17], "invalid.precision"),
    ("broadcast_mul", [x3, arr([1, 0, -1])], {}, [31, 2], "invalid.precision"),
    ("broadcast_add", [x3, x3], {"axis": 1}, None, "invalid.attr"),
    ("broadcast_div", [x3, x3.astype(np.int8)], {}, None, "invalid.dtype"),
    ("broadcast_max", [x3.astype(np.float64), x3], {}, None, "invalid.dtype"),
    ("where", [x23, x23, arr([[1, 2], [3, 4]])], {}, None, "invalid.shape"),      # x and y differ
    ("where", [x3, x23, x23], {}, None, "invalid.shape"),                         # 3 rows? x has 2
    ("where", [arr([1, 0, 1, 0, 1, 0]), x23, x23], {}, None, "invalid.shape"),
    ("where", [arr([1]), x23, x23], {}, None, "invalid.shape"),                   # no broadcasting
    ("where", [arr([[1, 0, 1]]), x23, x23], {}, None, "invalid.shape"),
    ("where", [arr([1, 0]).reshape(2, 1), x23, x23], {}, None, "invalid.shape"),
    ("where", [x23, x23], {}, None, "invalid.arity"),
    ("where", [x23, x23, x23], {"foo": 0}, None, "invalid.attr"),
    ("where", [x23, x23.astype(np.int8), x23], {}, None, "invalid.dtype"),
]


@pytest.mark.parametrize("name, inputs, attrs, precisions, code", REJECT,
                         ids=[f"{r[0]}-{i}" for i, r in enumerate(REJECT)])
def test_rejected(name, inputs, attrs, precisions, code):
    assert rejected(name, inputs, attrs, precisions) == code
