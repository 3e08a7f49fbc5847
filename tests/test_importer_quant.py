"""The importer's arithmetic: rounding, input quantization, weight scales, and rescale plans.

Rescale plans are checked three ways under hypothesis: run as real CVM ops
(so every intermediate precision passes the ISA's own rules), against an
exact-integer simulation, and against the exact rational result within the
error bound the plan claims.  None of this needs the onnx extra.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cvmvm
from isa.errors import InvalidError
from isa.types import precision_bound, quantize_float, round_half_away
from cvmvm.importer.quant import Rescale, Term, activation_scale, min_precision, plan_rescale, quantize_weights


# -- rounding and input quantization ----------------------------------------------------------

@pytest.mark.parametrize("x, want", [
    (0.5, 1.0), (-0.5, -1.0), (1.5, 2.0), (2.5, 3.0), (-2.5, -3.0), (0.49999999999999994, 0.0),
    (-0.49999999999999994, -0.0), (4503599627370495.5, 4503599627370496.0), (2.0 ** 52 + 1, 2.0 ** 52 + 1),
    (1e300, 1e300), (0.0, 0.0), (-0.0, -0.0), (126.5, 127.0), (-126.50000000000001, -127.0),
])
def test_round_half_away_hand_table(x, want):
    assert round_half_away(np.float64(x)) == want


@settings(derandomize=True, max_examples=300)
@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15))
def test_round_half_away_is_nearest_with_halves_outward(x):
    r = Fraction(float(round_half_away(np.float64(x))))
    exact = Fraction(x)
    assert abs(r - exact) <= Fraction(1, 2)
    if abs(r - exact) == Fraction(1, 2):
        assert abs(r) > abs(exact)


@pytest.mark.parametrize("x, scale, precision, want", [
    ([0.0, 1.0, -1.0, 0.5, -0.5], 0.5, 8, [0, 2, -2, 1, -1]),
    ([0.25, -0.25, 0.75], 0.5, 8, [1, -1, 2]),               # halves away from zero
    ([1e30, -1e30, 63.5, -63.5], 0.5, 8, [127, -127, 127, -127]),
    ([0.1], 0.1, 8, [1]),                                    # IEEE 0.1 / 0.1 is exactly 1
    ([3.0], 1.0, 2, [1]),
])
def test_quantize_float_hand_table(x, scale, precision, want):
    got = quantize_float(np.array(x, dtype=np.float32 if x == [0.1] else np.float64), scale, precision)
    assert got.dtype == np.int32
    assert got.tolist() == want


@settings(derandomize=True, max_examples=200)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), min_size=1, max_size=20),
       st.floats(min_value=1e-6, max_value=1e3), st.integers(2, 16))
def test_quantize_float_matches_exact_rounding(values, scale, precision):
    x = np.array(values, dtype=np.float32)
    got = quantize_float(x, scale, precision)
    bound = precision_bound(precision)
    for v, q in zip(values, got.tolist()):
        ratio = Fraction(float(np.float64(v) / np.float64(scale)))  # the IEEE quotient is the defined input
        floor = ratio.numerator // ratio.denominator
        nearest = floor + 1 if ratio - floor > Fraction(1, 2) or (ratio - floor == Fraction(1, 2) and ratio > 0) \
            else floor
        assert q == max(-bound, min(bound, nearest))


def test_activation_scale():
    assert activation_scale(127.0, 8) == 1.0
    assert activation_scale(0.0, 8) == 1.0     # an all-zero tensor: any scale is exact
    assert activation_scale(1.0, 2) == 1.0


def test_quantize_weights_per_channel_and_zero_channels():
    w = np.array([[1.0, -0.5], [0.0, 0.0], [0.01, -0.02]])
    q, s = quantize_weights(w, 8)
    assert q.dtype == np.int32
    assert q.tolist() == [[127, -64], [0, 0], [64, -127]]
    assert s[0] == 1 / 127 and s[2] == 0.02 / 127
    assert s[1] == s[0]                          # a zero channel takes the largest scale
    q, s = quantize_weights(np.zeros((2, 3)), 8)
    assert q.tolist() == [[0] * 3] * 2 and s.tolist() == [1.0, 1.0]


def test_min_precision():
    assert [min_precision(np.array(v)) for v in ([0], [1], [-1], [127], [-128], [128])] == [1, 2, 2, 8, 9, 9]


# -- rescale plans ---------------------------------------------------------------------------


def shift_round(x: int, s: int) -> int:
    """cvm_right_shift's rounding: ((x >> (s-1)) + 1) >> 1, floor shifts."""
    return ((x >> (s - 1)) + 1) >> 1


def clip(x: int, p: int) -> int:
    b = precision_bound(p)
    return max(-b, min(b, x))


def simulate(plan: Rescale, xs: list[int], idx: int, preclip: bool = True) -> int:
    """The plan on one position, in exact integers (idx picks each multiplier's element)."""
    if len(xs) == 1 and plan.pre_shift:
        xs = [clip(shift_round(xs[0], plan.pre_shift), plan.pre_precision if preclip else 64)]
    elif len(xs) == 1 and preclip:
        xs = [clip(xs[0], plan.pre_precision)]
    acc = sum(x * int(m.reshape(-1)[idx % m.size]) for x, m in zip(xs, plan.multipliers))
    if plan.offset is not None:
        acc += int(plan.offset.reshape(-1)[idx % plan.offset.size])
    return clip(shift_round(acc, plan.shift), plan.precision)


def run_plan(plan: Rescale, xs: list[np.ndarray], precisions: list[int]) -> np.ndarray:
    """The plan as real CVM instructions, each verified by the ISA's rules (as the lowering emits them)."""
    xs = list(xs)
    if len(xs) == 1 and plan.pre_shift:
        xs = cvmvm.run_op("cvm_right_shift", xs, {"precision": plan.pre_precision, "shift_bit": plan.pre_shift},
                          precisions)
        precisions = [plan.pre_precision]
    elif len(xs) == 1 and plan.pre_precision < precisions[0]:
        xs = cvmvm.run_op("cvm_clip", xs, {"precision": plan.pre_precision}, precisions)
        precisions = [plan.pre_precision]
    terms = []
    for x, p, m in zip(xs, precisions, plan.multipliers):
        if np.all(m == 1):   # the lowering emits no multiply (plan_rescale counts none)
            terms.append((x, p))
            continue
        m32 = m.astype(np.int32)
        (t,) = cvmvm.run_op("broadcast_mul", [x, m32], {}, [p, min_precision(m)])
        terms.append((t, p + min_precision(m)))
    acc, p_acc = terms[0]
    for t, p in terms[1:]:
        (acc,) = cvmvm.run_op("broadcast_add", [acc, t], {}, [p_acc, p])
        p_acc = max(p_acc, p) + 1
    if plan.offset is not None:
        (acc,) = cvmvm.run_op("broadcast_add", [acc, plan.offset.astype(np.int32)], {},
                              [p_acc, min_precision(plan.offset)])
        p_acc = max(p_acc, min_precision(plan.offset)) + 1
    (y,) = cvmvm.run_op("cvm_right_shift", [acc], {"precision": plan.precision, "shift_bit": plan.shift}, [p_acc])
    return y


ratios = st.lists(st.tuples(st.floats(min_value=2.0 ** -24, max_value=16.0), st.booleans()), min_size=1, max_size=3)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(st.integers(2, 31), ratios, st.integers(2, 16), st.booleans(), st.data())
def test_single_operand_plans_fit_32_bits_and_meet_their_bound(precision, raw, out_precision, with_offset, data):
    ratio = np.array([r if positive else -r for r, positive in raw])
    offset = np.array(data.draw(st.lists(st.floats(-300, 300), min_size=len(raw), max_size=len(raw)))) \
        if with_offset else None
    plan = plan_rescale([Term(precision, ratio)], offset, out_precision, "test")
    top = precision_bound(precision)
    xs = np.array(data.draw(st.lists(st.integers(-top, top), min_size=8, max_size=8)) + [top, -top, 0],
                  dtype=np.int64)
    for k in range(len(raw)):
        x = xs.astype(np.int32)
        m_plan = Rescale(plan.pre_shift, plan.pre_precision, (plan.multipliers[0].reshape(-1)[k:k + 1],),
                         None if plan.offset is None else plan.offset.reshape(-1)[k:k + 1],
                         plan.shift, plan.precision, plan.error)
        got = run_plan(m_plan, [x], [precision])           # multiplier element k on every x
        for xv, yv in zip(xs.tolist(), got.tolist()):
            assert yv == simulate(m_plan, [xv], 0)
            assert yv == simulate(m_plan, [xv], 0, preclip=False)      # the pre-clip never changes a result
            exact = Fraction(xv) * Fraction(float(ratio[k])) + (Fraction(float(offset[k])) if with_offset else 0)
            bound = precision_bound(out_precision)
            if abs(exact) <= bound:                                    # unsaturated: within the claimed error
                assert abs(Fraction(yv) - exact) <= Fraction(plan.error) + Fraction(1, 10 ** 9)


def test_a_unit_multiplier_beside_an_offset_is_no_multiply():
    """A 30-bit operand at ratio 2^-24 plus an offset: multiplier 1, which the lowering leaves out
    (a multiply by it would make the sum 33 bits).  Hypothesis 6.130's draws found it."""
    plan = plan_rescale([Term(30, np.array([2.0 ** -24]))], np.array([0.0]), 5, "test")
    assert [m.tolist() for m in plan.multipliers] == [[1]]
    top = precision_bound(30)
    xs = [0, 1, -1, 1 << 23, top, -top]
    got = run_plan(plan, [np.array(xs, dtype=np.int32)], [30])
    assert got.tolist() == [simulate(plan, [x], 0) for x in xs] == [0, 0, 0, 1, 15, -15]   # 2^23 is half a step: away from zero


@settings(derandomize=True, max_examples=150, deadline=None)
@given(st.integers(2, 8), st.integers(2, 8), st.floats(2.0 ** -8, 8.0), st.floats(2.0 ** -8, 8.0),
       st.integers(2, 16), st.data())
def test_two_operand_sums(pa, pb, ra, rb, out_precision, data):
    plan = plan_rescale([Term(pa, np.array([ra])), Term(pb, np.array([rb]))], None, out_precision, "test")
    assert plan.pre_shift == 0
    a = np.array(data.draw(st.lists(st.integers(-precision_bound(pa), precision_bound(pa)), min_size=6, max_size=6)))
    b = np.array(data.draw(st.lists(st.integers(-precision_bound(pb), precision_bound(pb)), min_size=6, max_size=6)))
    got = run_plan(plan, [a.astype(np.int32), b.astype(np.int32)], [pa, pb])
    for x, y, v in zip(a.tolist(), b.tolist(), got.tolist()):
        assert v == simulate(plan, [x, y], 0)
        exact = Fraction(x) * Fraction(ra) + Fraction(y) * Fraction(rb)
        if abs(exact) <= precision_bound(out_precision):
            assert abs(Fraction(v) - exact) <= Fraction(plan.error) + Fraction(1, 10 ** 9)


def test_a_wide_accumulator_is_pre_shifted_to_meet_an_accurate_multiplier():
    plan = plan_rescale([Term(26, np.array([1.3e-3, 7e-4, 2.1e-3]))], None, 8, "conv")
    assert plan.pre_shift > 0
    widest = plan.pre_precision + max(min_precision(m) for m in plan.multipliers)
    assert widest <= 32
    assert plan.error < 0.52        # within 2% of a step over the final rounding


def test_zero_ratios_give_zero_multipliers():
    plan = plan_rescale([Term(8, np.array([0.0, 0.5]))], None, 8, "x")
    assert plan.multipliers[0].reshape(-1)[0] == 0


def test_a_ratio_no_multiplier_can_hold_is_refused():
    with pytest.raises(InvalidError) as e:
        plan_rescale([Term(31, np.array([2.0 ** 40]))], None, 31, "node 'x' (Mul)")
    assert e.value.code == "invalid.precision"
    assert "node 'x' (Mul)" in e.value.message
