"""sum and max: the formalization's example and four cases, shape and precision
tables, SEMANTICS.md section 4 cases, the formalization's shape grid with every
axis set, the reference kernel under hypothesis, and must-be-rejected cases."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from cvmvm.vm.verify import verify
from isa.attrs import parse_attrs
from isa.ops.reduce import ReduceAttrs
from isa.table import OP_BY_NAME
from isa.types import TensorType
from serializer.model import Input, Instr, Model
from tests.opkit import arr, reference1, rejected, run1

M = 2**31 - 1





def record(attrs) -> ReduceAttrs:
    return parse_attrs(ReduceAttrs, attrs, fill_defaults=True)


def program_ops(name, attrs, t: TensorType) -> int:
    model = Model((Input("x", t),), (), (Instr(name, record(attrs), (0,), (1,)),), (1,))
    return verify(model).ops


# -- hand-computed ------------------------------------------------------------

EXAMPLE = arr([[[1, 2], [2, 3], [1, 3]],
               [[1, 4], [4, 3], [5, 2]],
               [[7, 1], [7, 2], [7, 3]]])


def test_formalization_example():
    np.testing.assert_array_equal(run1("sum", [EXAMPLE], {"axis": (1,)}), arr([[4, 8], [10, 9], [21, 6]]))
    np.testing.assert_array_equal(run1("sum", [EXAMPLE], {"axis": [1, 2]}), arr([12, 19, 27]))
    np.testing.assert_array_equal(run1("max", [EXAMPLE], {"axis": (1,)}), arr([[2, 3], [5, 4], [7, 3]]))
    np.testing.assert_array_equal(run1("max", [EXAMPLE], {"axis": (1, 2)}), arr([3, 5, 7]))


X234 = np.arange(24, dtype=np.int32).reshape(2, 3, 4) - 12

SHAPE_TABLE = [
    # attrs, output shape, sum of X234 over R (as nested lists)
    ({}, (1,), [-12]),                                                    # case 2
    ({"keepdims": True}, (1, 1, 1), [[[-12]]]),                           # case 2, K = N
    ({"exclude": True}, (1,), [-12]),                                     # exclude of nothing: U - {} = U
    ({"axis": (0, 1, 2), "exclude": True}, (2, 3, 4), X234.tolist()),     # case 1: Y = X
    ({"axis": (2, 0, 1), "exclude": True, "keepdims": True}, (2, 3, 4), X234.tolist()),
    ({"axis": (0, 1, 2)}, (1,), [-12]),
    ({"axis": (-1,)}, (2, 3), [[-42, -26, -10], [6, 22, 38]]),            # case 3
    ({"axis": (0,)}, (3, 4), [[-12, -10, -8, -6], [-4, -2, 0, 2], [4, 6, 8, 10]]),
    ({"axis": (0, 2)}, (3,), [-36, -4, 28]),
    ({"axis": (2, 0)}, (3,), [-36, -4, 28]),
    ({"axis": (-3, -1)}, (3,), [-36, -4, 28]),
    ({"axis": (1,), "exclude": True}, (3,), [-36, -4, 28]),
    ({"axis": (1,), "keepdims": True}, (2, 1, 4), [[[-24, -21, -18, -15]], [[12, 15, 18, 21]]]),   # case 4
    ({"axis": (0, 2), "keepdims": True}, (1, 3, 1), [[[-36], [-4], [28]]]),
    ({"axis": (1,), "exclude": True, "keepdims": True}, (1, 3, 1), [[[-36], [-4], [28]]]),
]


@pytest.mark.parametrize("attrs, shape, expected", SHAPE_TABLE)
def test_sum_cases(attrs, shape, expected):
    out = run1("sum", [X234], attrs)
    assert out.shape == shape and out.dtype == np.int32
    np.testing.assert_array_equal(out, arr(expected))


@pytest.mark.parametrize("attrs, shape, expected", SHAPE_TABLE)
def test_max_cases(attrs, shape, expected):
    out = run1("max", [X234], attrs)
    assert out.shape == shape
    np.testing.assert_array_equal(out, reference1("max", [X234], attrs))


# -- SEMANTICS.md section 4 --------------------------------------------------

@pytest.mark.parametrize("attrs, expected", [
    ({}, [-2]), ({"keepdims": True}, [[-2]]), ({"exclude": True}, [-2]), ({"axis": (0, 1)}, [-2]),
    ({"axis": (1,)}, [-2, -8]),
])
def test_max_is_the_true_max_of_negative_data(attrs, expected):
    # Both runtime devices start axis=() from 0 and would give 0.
    x = arr([[-5, -2, -9], [-8, -1000, -2**30]])
    np.testing.assert_array_equal(run1("max", [x], attrs), arr(expected))


def test_max_of_a_single_negative_element():
    np.testing.assert_array_equal(run1("max", [arr([-7])]), arr([-7]))


# The divergence vectors' shapes: an unreduced size-1 axis right of a reduced one.
SIZE_ONE = [((3, 4, 1), {"axis": (1,)}), ((2, 3, 1, 1), {"axis": (1,)}), ((1, 14, 18, 1), {"axis": (2,)}),
            ((4, 3, 1), {"axis": (1,), "keepdims": True}), ((3, 4, 1), {"axis": (0, 2), "exclude": True}),
            ((5, 2, 1), {"axis": (-2,)}), ((2, 3, 2, 1), {"axis": (1, 2)}), ((3, 1, 4), {"axis": (2,)}),
            ((2, 1, 3, 1, 2, 1), {"axis": (0, 2, 4)})]


@pytest.mark.parametrize("shape, attrs", SIZE_ONE)
@pytest.mark.parametrize("name", ["sum", "max"])
def test_size_one_axes_right_of_reduced_axes(name, shape, attrs):
    x = (np.arange(np.prod(shape), dtype=np.int32).reshape(shape) * 37 % 101 - 50).astype(np.int32)
    np.testing.assert_array_equal(run1(name, [x], attrs), reference1(name, [x], attrs))


def test_size_one_hand_values():
    x = np.arange(12, dtype=np.int32).reshape(3, 4, 1)
    np.testing.assert_array_equal(run1("sum", [x], {"axis": (1,)}), arr([[6], [22], [38]]))
    np.testing.assert_array_equal(run1("max", [x], {"axis": (0, 2), "exclude": True}), arr([[3], [7], [11]]))
    y = np.arange(6, dtype=np.int32).reshape(2, 3, 1, 1)
    np.testing.assert_array_equal(run1("max", [y], {"axis": (1,)}), arr([[[2]], [[5]]]))


# -- precision, cost ---------------------------------------------------------

def sum_precision(p, shape, attrs) -> int:
    (q,) = OP_BY_NAME["sum"].precision(record(attrs), TensorType(shape, p))
    return q


# bitlen(terms) at 2^j - 1, 2^j, 2^j + 1: j, j + 1, j + 1.
TERMS = [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 3), (8, 4), (9, 4), (18, 5)]
TERMS += [(2**j + d, j + (d >= 0)) for j in range(2, 24) for d in (-1, 0, 1)]


@pytest.mark.parametrize("terms, bits", TERMS)
def test_sum_precision_boundaries(terms, bits):
    assert sum_precision(8, (terms,), {}) == 8 + bits
    assert sum_precision(3, (2, terms), {"axis": (1,)}) == 3 + bits
    assert sum_precision(1, (terms, 5), {"axis": (1,), "exclude": True, "keepdims": True}) == 1 + bits


def test_sum_precision_split_terms():
    assert sum_precision(8, (3, 5, 7), {"axis": (0, 2)}) == 8 + 5        # 21 terms
    assert sum_precision(8, (3, 5, 7), {"axis": (0, 1, 2), "exclude": True}) == 8 + 1    # 1 term
    assert OP_BY_NAME["max"].precision(record({"axis": (0,)}), TensorType((9, 2), 13)) == (13,)


@pytest.mark.parametrize("p, n", [(2, 2**20 - 1), (8, 255), (8, 256), (16, 2**15 + 1), (31, 1), (24, 7), (25, 127)])
def test_sum_precision_is_sound_at_the_bound(p, n):
    bound = 2 ** (p - 1) - 1
    for sign in (1, -1):
        x = np.full((n,), sign * bound, dtype=np.int32)
        np.testing.assert_array_equal(run1("sum", [x], {}, [p]), arr([sign * bound * n]))


def test_cost():
    t = TensorType((2, 3, 4), 8)
    assert program_ops("sum", {"axis": (1,)}, t) == 5 * 24 + 3 * 8 + 5 * 8
    assert program_ops("sum", {}, t) == 5 * 24 + 24 * 1 + 5 * 1
    assert program_ops("sum", {"axis": (0, 1, 2), "exclude": True}, t) == 5 * 24 + 1 * 24 + 5 * 24
    assert program_ops("max", {"axis": (1,)}, t) == 5 * 24 + 1 * 8 + 5 * 8
    assert program_ops("max", {}, t) == 5 * 24 + 1 * 1 + 5 * 1


# -- the formalization's grid, with every axis set ---------------------------

GRID = [(1, j, l, r) for j in (1, 34, 67) for l in (1, 58) for r in (1, 64)]
AXIS_SETS = [s for k in range(5) for s in itertools.combinations(range(4), k)]


def oracle(name, x, attrs):
    """Reduce by moving R to the back and folding one flat axis: a different route from the kernel's."""
    n = x.ndim
    given_ = {i % n for i in attrs["axis"]}
    r = [i for i in range(n) if (i in given_) != attrs["exclude"]] if given_ or attrs["exclude"] else list(range(n))
    kept = [i for i in range(n) if i not in r]
    flat = np.transpose(x.astype(np.int64), kept + r).reshape(int(np.prod([x.shape[i] for i in kept])), -1)
    folded = flat.sum(axis=1) if name == "sum" else flat.max(axis=1)
    if attrs["keepdims"]:
        return folded.reshape([1 if i in r else x.shape[i] for i in range(n)])
    return folded.reshape([x.shape[i] for i in kept] or [1])


@pytest.mark.parametrize("name", ["sum", "max"])
def test_grid_every_axis_set(name):
    rng = np.random.default_rng(11)
    for shape in GRID:
        x = rng.integers(-(2**11 - 1), 2**11, size=shape, dtype=np.int64).astype(np.int32)
        for axes, keepdims, exclude in itertools.product(AXIS_SETS, (False, True), (False, True)):
            attrs = {"axis": tuple(a - 4 if (a + len(axes)) % 2 else a for a in axes),
                     "keepdims": keepdims, "exclude": exclude}
            out = run1(name, [x], attrs, [12])
            np.testing.assert_array_equal(out, oracle(name, x, attrs), err_msg=f"{name} {shape} {attrs}")


def test_grid_sum_axis_1():
    rng = np.random.default_rng(12)
    for shape in GRID:
        x = rng.integers(-127, 128, size=shape, dtype=np.int64).astype(np.int32)
        out = run1("sum", [x], {"axis": (1,)}, [8])
        np.testing.assert_array_equal(out, x.astype(np.int64).sum(axis=1))


# -- the reference kernel under hypothesis ----------------------------------

@st.composite
def reduce_case(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4))
    n = len(shape)
    axes = draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n))
    axes = [a - n if draw(st.booleans()) else a for a in axes]
    p = draw(st.integers(1, 26))
    bound = 2 ** (p - 1) - 1
    edge = st.sampled_from([bound, -bound, 0, 1, -1]).filter(lambda v: abs(v) <= bound)
    x = draw(hnp.arrays(np.int32, shape, elements=st.one_of(st.integers(-bound, bound), edge)))
    return x, p, {"axis": tuple(axes), "keepdims": draw(st.booleans()), "exclude": draw(st.booleans())}


@settings(derandomize=True, max_examples=150, deadline=None)
@given(reduce_case(), st.sampled_from(["sum", "max"]))
def test_matches_reference(case, name):
    x, p, attrs = case
    np.testing.assert_array_equal(run1(name, [x], attrs, [p]), reference1(name, [x], attrs))


# -- must be rejected --------------------------------------------------------

X = np.zeros((2, 3, 4), dtype=np.int32)

REJECT = [(name, [X], attrs, None, code) for name in ("sum", "max") for attrs, code in [
    ({"axis": (3,)}, "invalid.shape"),
    ({"axis": (-4,)}, "invalid.shape"),
    ({"axis": (0, 3)}, "invalid.shape"),
    ({"axis": (3,), "exclude": True}, "invalid.shape"),
    ({"axis": (1, 1)}, "invalid.shape"),
    ({"axis": (1, -2)}, "invalid.shape"),
    ({"axis": (2, -1), "exclude": True}, "invalid.shape"),
    ({"axis": (0, 1, 2, 0)}, "invalid.shape"),
    ({"axis": (0, 1, 2, 0, 1, 2, 0)}, "invalid.attr"),
    ({"axis": 1}, "invalid.attr"),
    ({"axis": (1.0,)}, "invalid.attr"),
    ({"axis": (2**31,)}, "invalid.attr"),
    ({"axis": (True,)}, "invalid.attr"),
    ({"keepdims": 1}, "invalid.attr"),
    ({"exclude": "true"}, "invalid.attr"),
    ({"foo": 0}, "invalid.attr"),
]]
REJECT += [
    ("sum", [np.zeros(8, np.int32)], {}, [31], "invalid.precision"),        # 31 + bitlen(8) = 35
    ("sum", [np.zeros(2, np.int32)], {}, [31], "invalid.precision"),        # 31 + bitlen(2) = 33
    ("sum", [np.zeros((1, 3), np.int32)], {"axis": (0,)}, [32], "invalid.precision"),   # one term still adds a bit
    ("sum", [X, X], {}, None, "invalid.arity"),
    ("max", [], {}, None, "invalid.arity"),
    ("sum", [X.astype(np.int8)], {}, None, "invalid.dtype"),
    ("max", [X.astype(np.float32)], {}, None, "invalid.dtype"),
]


@pytest.mark.parametrize("name, inputs, attrs, precisions, code", REJECT,
                         ids=[f"{r[0]}-{i}" for i, r in enumerate(REJECT)])
def test_rejected(name, inputs, attrs, precisions, code):
    assert rejected(name, inputs, attrs, precisions) == code


def test_accepted_at_the_precision_limit():
    np.testing.assert_array_equal(run1("sum", [np.full((1, 3), 5, np.int32)], {"axis": (0,)}, [31]), arr([5, 5, 5]))
    np.testing.assert_array_equal(run1("max", [arr([-M, M])], {}, [32]), arr([M]))

