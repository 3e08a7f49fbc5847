"""The exact fast paths: GEMM plans at the edges of their bounds, every path
forced on one instruction, and the static int32 paths of the elementwise ops.

A float GEMM is exact while every partial sum stays within 2^24 (float32) or
2^53 (float64); the plan is chosen from precisions alone.  Edge inputs are
all +-(2^(p-1) - 1), so the sums reach the bound itself.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cvmvm
from cvmvm.vm.api import single_op_model
from cvmvm.vm.disasm import listing
from isa.attrs import parse_attrs
from isa.errors import Rejected
from isa.ops import elemwise, nn
from isa.reference import nn as reference
from isa.types import TensorType, precision_bound

INT32_MAX = (1 << 31) - 1


def conv_attrs(**kw):
    return parse_attrs(nn.Conv2DAttrs, kw, fill_defaults=True)


def dense_attrs(units: int, use_bias: bool = False):
    return parse_attrs(nn.DenseAttrs, dict(units=units, use_bias=use_bias), fill_defaults=True)


def edge_dense(k: int, p: int, signs: str = "same") -> tuple[np.ndarray, np.ndarray, int]:
    """x (1, K), w (1, K) at +-(2^(p-1) - 1), and the exact x . w as a Python int."""
    m = precision_bound(p)
    x = np.full((1, k), m, dtype=np.int64)
    w = np.full((1, k), m, dtype=np.int64)
    if signs == "alternate":
        w[0, 1::2] = -m
    exact = sum(int(a) * int(b) for a, b in zip(x[0], w[0]))
    return x.astype(np.int32), w.astype(np.int32), exact


# -- which path the plan picks -------------------------------------------------

@pytest.mark.parametrize("k, path, chunks, chunk", [
    (1, "f32", 1, 1),
    (1040, "f32", 1, 1040),     # 1040 * 127^2 = 16774160 <= 2^24
    (1041, "f32", 2, 521),      # 1041 * 127^2 = 16790289 > 2^24: two balanced chunks
    (1152, "f32", 2, 576),      # perf's 128-channel 3x3 convolutions
    (2080, "f32", 2, 1040),
    (2081, "f32", 3, 694),
    (4608, "f32", 5, 922),      # perf-large's 512-channel 3x3 convolutions
])
def test_int8_operands_take_float32_chunks_within_2_24(k, path, chunks, chunk):
    plan = nn.gemm_plan(k, 8, 8)
    assert (plan.path, plan.chunks, plan.chunk) == (path, chunks, chunk)
    assert plan.chunk * 127 * 127 <= 1 << 24
    assert plan.bound == k * 127 * 127


def test_plan_reads_like_its_choice():
    assert str(nn.gemm_plan(1152, 8, 8)) == "gemm f32 K=1152 chunks=2 bound=2^24.1"
    assert str(nn.gemm_plan(5, 12, 12)) == "gemm f64 K=5 bound=2^24.3"
    assert str(nn.gemm_plan(3, 27, 27)) == "gemm i64 K=3 bound=2^53.6"
    assert str(nn.gemm_plan(7, 1, 8)) == "gemm f32 K=7 chunks=1 bound=0"


def test_float32_chunks_too_narrow_to_pay_give_float64():
    # A float32 chunk holds 2^24 // (max|x| max|w|) terms: 4 for 2047^2, 129 for
    # 127 * 1023, 258 for 127 * 511; below MIN_F32_CHUNK only an unchunked K takes float32.
    assert nn.gemm_plan(4, 12, 12).path == "f32"
    assert nn.gemm_plan(5, 12, 12).path == "f64"
    assert nn.gemm_plan(129, 8, 11).path == "f32"
    assert nn.gemm_plan(130, 8, 11).path == "f64"
    plan = nn.gemm_plan(10_000, 8, 10)
    assert (plan.path, plan.chunks, plan.chunk) == ("f32", 39, 257)


@pytest.mark.parametrize("k, path", [(1, "f64"), (2, "f64"), (3, "i64")])
def test_float64_edge_is_2_53(k, path):
    # (2^26 - 1)^2 > 2^24, so no float32; 2 (2^26 - 1)^2 <= 2^53 < 3 (2^26 - 1)^2.
    assert nn.gemm_plan(k, 27, 27).path == path


def test_bias_decides_the_output_width_not_the_path():
    plan = nn.gemm_plan(1040, 8, 8, bias_precision=32)
    assert plan.path == "f32" and plan.out_bound == 1040 * 127 * 127 + INT32_MAX
    assert plan.out_dtype == np.dtype(np.int64)
    # A verified bias has precision <= 31 (the output's max(p, p_bias) + 1 <= 32): int32 always.
    assert nn.gemm_plan(1040, 8, 8, bias_precision=31).out_dtype == np.dtype(np.int32)


@pytest.mark.parametrize("k, p, path", [
    (1, 14, "f32"),     # one product 8191^2 > 2^24
    (3, 27, "f64"),     # 3 (2^26 - 1)^2 > 2^53
    (1, 32, "f64"),
    (3, 32, "i64"),     # 3 (2^31 - 1)^2 > 2^63
    (3, 32, None),
    (1, 8, "f16"),
])
def test_a_path_that_would_round_or_overflow_is_refused(k, p, path):
    with pytest.raises(Rejected):
        nn.gemm_plan(k, p, p, path=path)


def test_int64_edge_is_2_63():
    assert nn.gemm_plan(2, 32, 32).path == "i64"          # 2 (2^31 - 1)^2 < 2^63
    x, w, exact = edge_dense(2, 32)
    assert int(nn.dense_kernel(dense_attrs(1), x, w, plan=nn.gemm_plan(2, 32, 32))[0][0, 0]) == exact


# -- the kernels at the edges ---------------------------------------------------

@pytest.mark.parametrize("k, p", [(1040, 8), (1041, 8), (4, 12), (5, 12), (2, 27), (3, 27)])
@pytest.mark.parametrize("signs", ["same", "alternate"])
def test_dense_kernel_is_exact_at_each_edge(k, p, signs):
    x, w, exact = edge_dense(k, p, signs)
    plan = nn.gemm_plan(k, p, p)
    (y,) = nn.dense_kernel(dense_attrs(1), x, w, plan=plan)
    assert int(y[0, 0]) == exact
    assert y.dtype == plan.out_dtype


@pytest.mark.parametrize("k, chunks", [(1040, 1), (1041, 2)])
def test_verified_dense_at_the_float32_edge(k, chunks):
    x, w, exact = edge_dense(k, 8)
    model, feeds = single_op_model("dense", [x, w, np.array([-1], dtype=np.int32)], dict(units=1))
    step = model.program.steps[0]
    assert (step.plan.path, step.plan.chunks) == ("f32", chunks)
    assert f"[{step.plan}]" in listing(model.program)[-2]
    assert int(model.run(feeds).outputs[0][0, 0]) == exact - 1


@pytest.mark.parametrize("c, kernel, chunks", [(65, (4, 4), 1), (347, (3, 1), 2)])
def test_verified_conv2d_at_the_float32_edge(c, kernel, chunks):
    # C * KH * KW = 1040 and 1041; every output window is full, so each sums K products of 127 * -127.
    x = np.full((1, c, 5, 4), 127, dtype=np.int32)
    w = np.full((2, c, *kernel), -127, dtype=np.int32)
    w[1] = 127
    model, feeds = single_op_model("conv2d", [x, w], dict(channels=2, kernel_size=kernel, use_bias=False))
    plan = model.program.steps[0].plan.gemm
    assert (plan.path, plan.k, plan.chunks) == ("f32", c * kernel[0] * kernel[1], chunks)
    (y,) = model.run(feeds).outputs
    k = c * kernel[0] * kernel[1]
    assert set(y[0, 0].reshape(-1).tolist()) == {-k * 127 * 127}
    assert set(y[0, 1].reshape(-1).tolist()) == {k * 127 * 127}


@pytest.mark.parametrize("pb, folds", [(12, True), (13, False)])
def test_a_bias_folds_into_the_gemm_only_within_its_exact_range(pb, folds):
    """1040 * 127^2 + 2047 <= 2^24 < 1040 * 127^2 + 4095, which is odd: a float32 add would round it."""
    x, w, exact = edge_dense(1040, 8)
    bias = precision_bound(pb)
    plan = nn.gemm_plan(1040, 8, 8, pb)
    assert (plan.path, plan.chunks, plan.folds_bias) == ("f32", 1, folds)
    if not folds:   # outside the VM, on purpose
        assert int(np.float32(exact) + np.float32(bias)) != exact + bias
    attrs = dense_attrs(1, use_bias=True)
    b = np.array([bias], dtype=np.int32)
    bound = nn.dense_bind(attrs, plan, None, w.astype(np.int32), b)
    assert (bound.bias is not None) == folds
    assert int(nn.dense_kernel(attrs, x.astype(np.int32), w.astype(np.int32), b, plan=bound)[0][0, 0]) == exact + bias


def test_float32_would_round_where_the_plan_chunks():
    """1041 * 127^2 = 16790289 is odd and above 2^24: no float32 holds it, so one
    float32 GEMM must be wrong, whatever order BLAS adds in."""
    x, w, exact = edge_dense(1041, 8)
    single = np.matmul(x.astype(np.float32), w.astype(np.float32).T)   # outside the VM, on purpose
    assert int(single[0, 0]) != exact
    plan = nn.gemm_plan(1041, 8, 8)
    assert plan.chunks > 1
    assert int(nn.dense_kernel(dense_attrs(1), x, w, plan=plan)[0][0, 0]) == exact
    # The same instruction forced through one unchunked float32 GEMM goes wrong.
    unchunked = nn.GemmPlan("f32", 1041, 1041, plan.bound, plan.out_bound)
    assert int(nn.dense_kernel(dense_attrs(1), x, w, plan=unchunked)[0][0, 0]) != exact


def test_float64_would_round_where_the_plan_takes_int64():
    x, w, exact = edge_dense(3, 27)
    single = np.matmul(x.astype(np.float64), w.astype(np.float64).T)   # outside the VM, on purpose
    assert int(single[0, 0]) != exact
    assert nn.gemm_plan(3, 27, 27).path == "i64"
    assert int(nn.dense_kernel(dense_attrs(1), x, w, plan=nn.gemm_plan(3, 27, 27))[0][0, 0]) == exact


# -- every path on the same instruction ------------------------------------------

def forced_plans(k: int, px: int, pw: int, pb: int | None) -> list[nn.GemmPlan]:
    natural = nn.gemm_plan(k, px, pw, pb)
    plans = [nn.gemm_plan(k, px, pw, pb, path=p) for p in ("f32", "f64", "i64")]
    # Narrower float32 chunks than needed are exact too, and exercise the chunk sums.
    plans += [nn.GemmPlan("f32", k, c, natural.bound, natural.out_bound) for c in (1, 2, 7) if c < k]
    return [natural, *plans]


@st.composite
def conv_cases(draw):
    groups = draw(st.sampled_from([1, 2, 3]))
    c = groups * draw(st.integers(1, 3))
    oc = groups * draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    h = draw(st.integers(dh * (kh - 1) + 1, 7))
    w = draw(st.integers(dw * (kw - 1) + 1, 7))
    attrs = dict(channels=oc, kernel_size=(kh, kw), groups=groups,
                 strides=(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
                 padding=(draw(st.integers(0, 2)), draw(st.integers(0, 2))), dilation=(dh, dw),
                 use_bias=draw(st.booleans()))
    n = draw(st.integers(1, 2))
    return attrs, (n, c, h, w), (oc, c // groups, kh, kw), draw(st.integers(0, 2**32 - 1))


@settings(derandomize=True, max_examples=60, deadline=None)
@given(conv_cases(), st.sampled_from(["edge", "random"]))
def test_every_path_agrees_on_one_conv2d(case, fill):
    attrs, xs, ws, seed = case
    rng = np.random.default_rng(seed)
    if fill == "edge":
        x = np.where(rng.integers(0, 2, xs) == 1, 127, -127).astype(np.int32)
        w = np.where(rng.integers(0, 2, ws) == 1, 127, -127).astype(np.int32)
    else:
        x = rng.integers(-127, 128, xs, dtype=np.int64).astype(np.int32)
        w = rng.integers(-127, 128, ws, dtype=np.int64).astype(np.int32)
    b = rng.integers(1 - (1 << 20), 1 << 20, ws[0], dtype=np.int64).astype(np.int32) if attrs["use_bias"] else None
    a = conv_attrs(**attrs)
    (want,) = reference.conv2d(a, x, w, b)
    k = ws[1] * ws[2] * ws[3]
    args = (x, w) if b is None else (x, w, b)
    for gemm in forced_plans(k, 8, 8, 21 if b is not None else None):
        for small in (False, True):   # im2col's windows, and the small convolutions' gather
            plan = nn.conv_plan(a, xs, ws, gemm, small)
            # Unbound, bound (the gather index made), bound to the weights as a param, and to the
            # weights and the bias as params (a small one folds the bias into its GEMM when exact).
            with_bias = nn.conv2d_bind(a, plan, None, w, b)
            assert (with_bias.gemm.bias is not None) == (small and b is not None and gemm.folds_bias)
            for bound in (plan, nn.conv2d_bind(a, plan, None, None), nn.conv2d_bind(a, plan, None, w), with_bias):
                (y,) = nn.conv2d_kernel(a, *args, plan=bound)
                assert y.dtype == gemm.out_dtype
                assert np.array_equal(y, want), bound
            assert nn.conv2d_bind(a, plan, None, w).held_bytes == nn.conv2d_held(a, plan, False, True)
            assert nn.conv2d_bind(a, plan, None, None).held_bytes == nn.conv2d_held(a, plan, False, False)
            assert with_bias.held_bytes == nn.conv2d_held(a, plan, False, True, b is not None)


@settings(derandomize=True, max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 80), st.integers(1, 5), st.integers(1, 12), st.integers(1, 12),
       st.sampled_from([0, 1, 8, 25, 32]), st.integers(0, 2**32 - 1))
def test_every_path_agrees_on_one_dense(m, k, units, px, pw, pb, seed):
    rng = np.random.default_rng(seed)
    bx, bw = precision_bound(px), precision_bound(pw)
    x = rng.integers(-bx, bx + 1, (m, k), dtype=np.int64).astype(np.int32)
    w = rng.integers(-bw, bw + 1, (units, k), dtype=np.int64).astype(np.int32)
    b = None
    if pb:   # the bias at its precision's edges and between
        b = rng.integers(-precision_bound(pb), precision_bound(pb) + 1, units, dtype=np.int64).astype(np.int32)
        b[0] = precision_bound(pb)
    attrs = dense_attrs(units, use_bias=b is not None)
    args = (x, w) if b is None else (x, w, b)
    (want,) = reference.dense(attrs, *args)
    for plan in forced_plans(k, px, pw, pb or None):
        if plan.path == "f32" and plan.chunk * bx * bw > 1 << 24:
            continue
        bound = nn.dense_bind(attrs, plan, None, w)   # the weights as a param
        assert bound.held_bytes == nn.dense_held(attrs, plan, False, True)
        both = nn.dense_bind(attrs, plan, None, w, b)   # and the bias, folded into the GEMM when exact
        assert both.held_bytes == nn.dense_held(attrs, plan, False, True, b is not None)
        assert (both.bias is not None) == (b is not None and plan.folds_bias)
        for p in (plan, bound, both):
            (y,) = nn.dense_kernel(attrs, *args, plan=p)
            assert np.array_equal(y, want), p


# -- the static int32 paths of the other hot ops -----------------------------------

def shift_attrs(p: int, b: int):
    return parse_attrs(elemwise.RightShiftAttrs, dict(precision=p, shift_bit=b), fill_defaults=True)


@pytest.mark.parametrize("p_in, b, formula", [
    (31, 31, "add"),       # 2^30 - 1 + 2^30 = 2^31 - 1: the sum still fits int32
    (32, 1, "carry"),      # 2^31 - 1 + 1 does not, and T = X >> 0 + 1 would not either
    (31, 32, "shift"),     # 2^31 alone does not; T = X >> 31 + 1 does
    (30, 31, "add"),
    (1, 32, "shift"),
    (32, 32, "shift"),
    (8, 1, "add"),
    (31, 1, "add"),        # 2^30 - 1 + 1
    (32, 2, "shift"),      # T <= 2^30 - 1
    (32, 17, "shift"),     # perf's shifts after broadcast_mul (precision 32)
])
def test_right_shift_plan_at_its_edge(p_in, b, formula):
    plan = elemwise.right_shift_plan(shift_attrs(32, b), TensorType((4,), p_in))
    assert plan.formula == formula
    m = precision_bound(p_in)
    x = np.array(sorted({-m, min(-m + 1, m), max(m - 1, -m), m}), dtype=np.int32)
    for q in (1, 8, 31, 32):
        (y,) = cvmvm.run_op("cvm_right_shift", [x], dict(precision=q, shift_bit=b), precisions=[p_in])
        bound = precision_bound(q)
        want = [max(-bound, min(bound, ((int(v) >> (b - 1)) + 1) >> 1)) for v in x]
        assert y.tolist() == want


def test_right_shift_every_input_precision_and_shift_at_the_extremes():
    for p_in in range(1, 33):
        m = precision_bound(p_in)
        x = np.array(sorted({-m, -(m >> 1), -1 if m else 0, 0, 1 if m else 0, m >> 1, m}), dtype=np.int32)
        for b in range(1, 33):
            for q in (1, 2, 16, 31, 32):
                a = shift_attrs(q, b)
                (y,) = elemwise.right_shift_kernel(a, x, plan=elemwise.right_shift_plan(a, TensorType(x.shape, p_in)))
                bound = precision_bound(q)
                want = [max(-bound, min(bound, ((int(v) >> (b - 1)) + 1) >> 1)) for v in x]
                assert y.dtype == np.int32 and y.tolist() == want, (p_in, b, q)


@pytest.mark.parametrize("p_in, b, q", [(32, 18, 8), (32, 15, 8), (21, 9, 12), (24, 9, 15), (32, 1, 31),
                                        (32, 31, 1), (9, 1, 8), (32, 16, 16), (12, 4, 2)])
def test_right_shift_clip_first_at_its_edges(p_in, b, q):
    """Clipping first to [L, H], the widest input range that rounds into the precision, then adding
    the rounding bit: exact at L and H and one past each, and the sum never leaves int32."""
    a = shift_attrs(q, b)
    plan = elemwise.right_shift_plan(a, TensorType((1,), p_in))
    assert plan.formula == "clip-add" and str(plan) == "int32 add-round, clip first"
    m, bound = precision_bound(p_in), precision_bound(q)
    edges = {int(plan.low) + d for d in (-1, 0, 1)} | {int(plan.high) + d for d in (-1, 0, 1)} | {-m, 0, m}
    x = np.array(sorted(v for v in edges if -m <= v <= m), dtype=np.int32)
    (y,) = elemwise.right_shift_kernel(a, x, plan=plan)
    assert y.tolist() == [max(-bound, min(bound, ((int(v) >> (b - 1)) + 1) >> 1)) for v in x]
    assert int(plan.high) + int(plan.half) <= INT32_MAX


@pytest.mark.parametrize("p_in, b, q, clip", [
    (8, 1, 8, False),      # 127 -> 64: the clip cannot bind
    (22, 9, 13, True),     # (2^21 - 1 + 256) >> 9 = 4096 > 4095: perf's first shift must clip
    (22, 9, 14, False),
    (9, 1, 8, True),       # 255 -> 128 > 127
])
def test_right_shift_clips_only_when_the_range_can_exceed_it(p_in, b, q, clip):
    plan = elemwise.right_shift_plan(shift_attrs(q, b), TensorType((2,), p_in))
    assert plan.clip == clip
    m = precision_bound(p_in)
    (y,) = cvmvm.run_op("cvm_right_shift", [np.array([-m, m], dtype=np.int32)],
                        dict(precision=q, shift_bit=b), precisions=[p_in])
    bound = precision_bound(q)
    assert y.tolist() == [max(-bound, min(bound, ((v >> (b - 1)) + 1) >> 1)) for v in (-m, m)]


def test_int32_arithmetic_at_the_largest_verified_precisions():
    top31 = precision_bound(31)
    (y,) = cvmvm.run_op("elemwise_add", [np.array([top31, -top31]), np.array([top31, -top31])], precisions=[31, 31])
    assert y.tolist() == [2 * top31, -2 * top31]
    (y,) = cvmvm.run_op("elemwise_sub", [np.array([top31]), np.array([-top31])], precisions=[31, 31])
    assert y.tolist() == [2 * top31]
    (y,) = cvmvm.run_op("broadcast_mul", [np.array([[precision_bound(16)], [-precision_bound(16)]]),
                                          np.array([precision_bound(16)])], precisions=[16, 16])
    assert y.reshape(-1).tolist() == [precision_bound(16) ** 2, -precision_bound(16) ** 2]
    (y,) = cvmvm.run_op("broadcast_add", [np.array([[top31]]), np.array([top31])], precisions=[31, 31])
    assert y.tolist() == [[2 * top31]]
    # sum: p_in + bitlen(255) = 24 + 8 = 32, every term at the bound.
    x = np.full((255,), precision_bound(24), dtype=np.int32)
    (y,) = cvmvm.run_op("sum", [x], precisions=[24])
    assert y.tolist() == [255 * precision_bound(24)]
    (y,) = cvmvm.run_op("cvm_left_shift", [np.array([-precision_bound(8), precision_bound(8)])],
                        dict(precision=32, shift_bit=24), precisions=[8])
    assert y.tolist() == [-127 << 24, 127 << 24]
