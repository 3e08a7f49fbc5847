# Over 400 lines: a test file, one case per rule.
"""conv2d, dense, max_pool2d, upsampling: hand cases, the formalization's grids,
reference kernels under hypothesis, precision/cost rules and every rejection."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cvmvm.vm.verify import Program
from isa.attrs import parse_attrs
from isa.ops import nn
from isa.types import TensorType
from tests.opkit import family, program, reference1, rejects, run

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
# The formalization's 4-D test grid (Relu, MaxPooling, Upsampling): (1, j, l, r).
GRID_J = (1, 14, 27, 40, 53, 66, 79, 92)
GRID_L = (1, 18, 35, 52, 69, 86)
GRID_R = (1, 24, 47, 70, 93)




def T(*shape: int, p: int = 8) -> TensorType:
    return TensorType(tuple(shape), p)



def ints(rng: np.random.Generator, shape, precision: int) -> np.ndarray:
    bound = (1 << (precision - 1)) - 1
    return rng.integers(-bound, bound + 1, size=shape, dtype=np.int64).astype(np.int32)


def test_module_lists_its_ops_in_order():
    assert family(nn) == (nn.CONV2D, nn.DENSE, nn.MAX_POOL2D, nn.UPSAMPLING)
    assert [op.name for op in family(nn)] == ["conv2d", "dense", "max_pool2d", "upsampling"]


# -- conv2d: hand-computed -----------------------------------------------------

X3 = [[[[1, 2, 3], [4, 5, 6], [7, 8, 9]]]]


def test_conv2d_valid_no_bias():
    (y,) = run("conv2d", [X3, [[[[1, 0], [0, -1]]]]], dict(channels=1, kernel_size=(2, 2), use_bias=False))
    assert y.tolist() == [[[[-4, -4], [-4, -4]]]]


def test_conv2d_zero_padding_and_bias():
    (y,) = run("conv2d", [X3, [[[[1, 0], [0, -1]]]], [10]],
               dict(channels=1, kernel_size=(2, 2), padding=(1, 1)))
    assert y.tolist() == [[[[9, 8, 7, 10], [6, 6, 6, 13], [3, 6, 6, 16], [10, 17, 18, 19]]]]


def test_conv2d_stride_and_dilation():
    x = np.arange(25, dtype=np.int32).reshape(1, 1, 5, 5)
    (y,) = run("conv2d", [x, np.ones((1, 1, 2, 2))],
               dict(channels=1, kernel_size=(2, 2), strides=(2, 2), dilation=(2, 2), use_bias=False))
    assert y.tolist() == [[[[24, 32], [64, 72]]]]


def test_conv2d_depthwise():
    x = np.stack([np.ones((2, 2)), 2 * np.ones((2, 2))])[None]
    (y,) = run("conv2d", [x, [[[[3]]], [[[-1]]]]], dict(channels=2, kernel_size=(1, 1), groups=2, use_bias=False))
    assert y.tolist() == [[[[3, 3], [3, 3]], [[-2, -2], [-2, -2]]]]


def test_conv2d_groups_with_channel_multiplier():
    # Output channel o reads group o // (OC/groups): o = 0, 1 -> input 0; o = 2, 3 -> input 1.
    (y,) = run("conv2d", [[[[[5]], [[7]]]], np.arange(1, 5).reshape(4, 1, 1, 1)],
               dict(channels=4, kernel_size=(1, 1), groups=2, use_bias=False))
    assert y.reshape(-1).tolist() == [5, 10, 21, 28]


def test_conv2d_extremes_are_exact():
    x = np.full((1, 64, 3, 3), -127)
    w = np.full((2, 64, 3, 3), 127)
    w[1] = -127
    (y,) = run("conv2d", [x, w, [INT32_MAX >> 8, -(INT32_MAX >> 8)]],
               dict(channels=2, kernel_size=(3, 3)), precisions=[8, 8, 24])
    assert y.reshape(-1).tolist() == [-127 * 127 * 576 + (INT32_MAX >> 8), 127 * 127 * 576 - (INT32_MAX >> 8)]


def test_conv2d_does_not_write_its_inputs():
    rng = np.random.default_rng(1)
    x, w, b = ints(rng, (1, 4, 5, 5), 8), ints(rng, (4, 2, 3, 3), 8), ints(rng, (4,), 16)
    frozen = [a.copy() for a in (x, w, b)]
    for a in (x, w, b):
        a.flags.writeable = False
    attrs = parse_attrs(nn.Conv2DAttrs, dict(channels=4, kernel_size=(3, 3), groups=2, padding=(1, 1)),
                        fill_defaults=True)
    plan = nn.conv2d_plan(attrs, *(TensorType(v.shape, p) for v, p in ((x, 8), (w, 8), (b, 16))))
    nn.conv2d_kernel(attrs, x, w, b, plan=plan)
    assert all(np.array_equal(a, f) for a, f in zip((x, w, b), frozen))


# -- dense: hand-computed ------------------------------------------------------

def test_dense_with_bias():
    (y,) = run("dense", [[[1, 2, 3]], [[1, 0, -1], [2, 2, 2]], [10, -10]], dict(units=2))
    assert y.tolist() == [[8, 2]]


def test_dense_without_bias_several_rows():
    (y,) = run("dense", [[[1, 2], [-3, 4]], [[5, 6]]], dict(units=1, use_bias=False))
    assert y.tolist() == [[17], [9]]


# -- max_pool2d: hand-computed -------------------------------------------------

def test_max_pool2d_padding_never_wins_on_negative_input():
    x = -np.arange(1, 10).reshape(1, 1, 3, 3)
    (y,) = run("max_pool2d", [x], dict(pool_size=(2, 2), padding=(1, 1)))
    assert y.tolist() == [[[[-1, -1, -2, -3], [-1, -1, -2, -3], [-4, -4, -5, -6], [-7, -7, -8, -9]]]]


def test_max_pool2d_int32_extremes_with_padding():
    x = np.full((1, 1, 2, 2), -INT32_MAX)
    x[0, 0, 1, 1] = INT32_MAX
    (y,) = run("max_pool2d", [x], dict(pool_size=(2, 2), padding=(1,), strides=(2, 2)))
    assert y.tolist() == [[[[-INT32_MAX, -INT32_MAX], [-INT32_MAX, INT32_MAX]]]]


def test_max_pool2d_one_padding_value_means_both_axes():
    x = np.arange(6).reshape(1, 1, 2, 3)
    (one,) = run("max_pool2d", [x], dict(pool_size=(2, 2), padding=(1,)))
    (two,) = run("max_pool2d", [x], dict(pool_size=(2, 2), padding=(1, 1)))
    assert one.shape == (1, 1, 3, 4)
    assert np.array_equal(one, two)


def test_max_pool2d_ceil_mode_adds_the_partial_window():
    x = [[[[1, 2, 3, 4, 5]]]]
    (floor,) = run("max_pool2d", [x], dict(pool_size=(1, 2), strides=(1, 2)))
    (ceil,) = run("max_pool2d", [x], dict(pool_size=(1, 2), strides=(1, 2), ceil_mode=True))
    assert floor.tolist() == [[[[2, 4]]]]
    assert ceil.tolist() == [[[[2, 4, 5]]]]


def test_max_pool2d_default_strides_are_one():
    (y,) = run("max_pool2d", [[[[[1, 5, 2], [0, 3, 9]]]]], dict(pool_size=(2, 2)))
    assert y.tolist() == [[[[5, 9]]]]


# -- upsampling: hand-computed -------------------------------------------------

def test_upsampling_nearest():
    (y,) = run("upsampling", [[[[[1, 2], [3, 4]]]]], dict(scale=2))
    assert y.tolist() == [[[[1, 1, 2, 2], [1, 1, 2, 2], [3, 3, 4, 4], [3, 3, 4, 4]]]]


def test_upsampling_scale_one_is_identity():
    x = np.arange(-6, 6).reshape(1, 2, 2, 3)
    (y,) = run("upsampling", [x], dict(scale=1))
    assert np.array_equal(y, x)


# -- the formalization's test grids --------------------------------------------

@pytest.mark.parametrize("i,j,k", list(itertools.product((1, 14, 27), (1, 12, 23), (1, 18))))
def test_dense_formalization_grid(i, j, k):
    rng = np.random.default_rng(1000 * i + 10 * j + k)
    x, w = ints(rng, (i, j), 8), ints(rng, (k, j), 8)
    (y,) = run("dense", [x, w], dict(units=k, use_bias=False))
    assert np.array_equal(y, reference1("dense", [x, w], dict(units=k, use_bias=False)))


def _conv_grid_sample(seed: int, count: int) -> list[tuple]:
    """A seeded sample of the 4-D grid, kept to shapes a Python loop convolves quickly."""
    rng = np.random.default_rng(seed)
    shapes = [(1, j, l, r) for j in GRID_J for l in GRID_L for r in GRID_R if j * l * r <= 12000]
    picks = rng.choice(len(shapes), size=count, replace=False)
    cases = []
    for n in picks:
        shape = shapes[int(n)]
        kernel = tuple(int(min(k, d)) for k, d in zip(rng.choice([1, 3], size=2), shape[2:]))
        groups = int(rng.choice([1, shape[1]]))
        cases.append((shape, kernel, groups, bool(rng.integers(2)), int(rng.integers(1, 3))))
    return cases


@pytest.mark.parametrize("shape,kernel,groups,use_bias,stride", _conv_grid_sample(seed=7, count=8))
def test_conv2d_formalization_grid_sample(shape, kernel, groups, use_bias, stride):
    rng = np.random.default_rng(sum(shape) + sum(kernel) + groups)
    c = shape[1]
    oc = 2 * groups if groups > 1 else 2
    x, w, b = ints(rng, shape, 8), ints(rng, (oc, c // groups, *kernel), 8), ints(rng, (oc,), 20)
    pad = (kernel[0] // 2, kernel[1] // 2)
    attrs = dict(channels=oc, kernel_size=kernel, padding=pad, strides=(stride, stride), groups=groups,
                 use_bias=use_bias)
    inputs = [x, w, b] if use_bias else [x, w]
    (y,) = run("conv2d", inputs, attrs)
    assert np.array_equal(y, reference1("conv2d", inputs, attrs))


GRID_4D = list(itertools.product(GRID_J, GRID_L, GRID_R))


def test_max_pool2d_formalization_grid():
    """pool_size (1, 2), default strides and padding: Y = max of horizontal neighbours.
    The grid's r = 1 column has pool_size > W + 2 * padding and must be rejected."""
    rng = np.random.default_rng(11)
    for j, l, r in GRID_4D:
        x = rng.integers(INT32_MIN + 1, INT32_MAX, size=(1, j, l, r), dtype=np.int64).astype(np.int32)
        if r == 1:
            rejects("invalid.shape", run, "max_pool2d", [x], dict(pool_size=(1, 2)))
            continue
        (y,) = run("max_pool2d", [x], dict(pool_size=(1, 2)))
        assert np.array_equal(y, np.maximum(x[..., :-1], x[..., 1:])), (j, l, r)


def test_upsampling_formalization_grid():
    rng = np.random.default_rng(12)
    for j, l, r in GRID_4D:
        x = rng.integers(-(1 << 20), 1 << 20, size=(1, j, l, r), dtype=np.int64).astype(np.int32)
        (y,) = run("upsampling", [x], dict(scale=2))
        rows = (np.arange(2 * l) // 2)[:, None]
        cols = (np.arange(2 * r) // 2)[None, :]
        assert np.array_equal(y, x[:, :, rows, cols]), (j, l, r)


# -- reference kernels against the kernels, under hypothesis -------------------------

@st.composite
def conv_cases(draw):
    kind = draw(st.sampled_from(["groups=1", "depthwise", "grouped"]))
    if kind == "groups=1":
        groups, c = 1, draw(st.integers(1, 3))
        oc = draw(st.integers(1, 3))
    elif kind == "depthwise":
        c = draw(st.integers(1, 4))
        groups, oc = c, c * draw(st.integers(1, 2))
    else:
        groups = draw(st.integers(2, 3))
        c = groups * draw(st.integers(2, 3))
        oc = groups * draw(st.integers(1, 2))
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    strides = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    hw = []
    for k, d, p in zip(kernel, dilation, padding):
        low = max(1, d * (k - 1) + 1 - 2 * p)
        hw.append(draw(st.integers(low, low + 5)))
    return dict(n=draw(st.integers(1, 2)), c=c, hw=tuple(hw), oc=oc, groups=groups, kernel=kernel,
                dilation=dilation, padding=padding, strides=strides, use_bias=draw(st.booleans()),
                p_data=draw(st.integers(1, 8)), p_weight=draw(st.integers(1, 8)), p_bias=draw(st.integers(1, 24)),
                seed=draw(st.integers(0, 2**32 - 1)))


@settings(derandomize=True, max_examples=120, deadline=None)
@given(conv_cases())
def test_conv2d_matches_reference(case):
    rng = np.random.default_rng(case["seed"])
    x = ints(rng, (case["n"], case["c"], *case["hw"]), case["p_data"])
    w = ints(rng, (case["oc"], case["c"] // case["groups"], *case["kernel"]), case["p_weight"])
    b = ints(rng, (case["oc"],), case["p_bias"])
    attrs = dict(channels=case["oc"], kernel_size=case["kernel"], strides=case["strides"],
                 padding=case["padding"], dilation=case["dilation"], groups=case["groups"],
                 use_bias=case["use_bias"])
    inputs = [x, w, b] if case["use_bias"] else [x, w]
    precisions = [case["p_data"], case["p_weight"], case["p_bias"]][:len(inputs)]
    (y,) = run("conv2d", inputs, attrs, precisions)
    assert np.array_equal(y, reference1("conv2d", inputs, attrs))


@settings(derandomize=True, max_examples=80, deadline=None)
@given(st.integers(1, 4), st.integers(1, 40), st.integers(1, 5), st.booleans(), st.integers(1, 8),
       st.integers(1, 8), st.integers(1, 24), st.integers(0, 2**32 - 1))
def test_dense_matches_reference(m, k, units, use_bias, p_x, p_w, p_b, seed):
    rng = np.random.default_rng(seed)
    x, w, b = ints(rng, (m, k), p_x), ints(rng, (units, k), p_w), ints(rng, (units,), p_b)
    inputs = [x, w, b] if use_bias else [x, w]
    attrs = dict(units=units, use_bias=use_bias)
    (y,) = run("dense", inputs, attrs, [p_x, p_w, p_b][:len(inputs)])
    assert np.array_equal(y, reference1("dense", inputs, attrs))


@st.composite
def pool_cases(draw):
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    padding = tuple(draw(st.integers(0, k - 1)) for k in kernel)
    one_value = padding[0] == padding[1] and draw(st.booleans())
    strides = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    hw = tuple(draw(st.integers(max(1, k - 2 * p), 9)) for k, p in zip(kernel, padding))
    return dict(shape=(draw(st.integers(1, 2)), draw(st.integers(1, 3)), *hw), kernel=kernel,
                padding=padding, wire_padding=padding[:1] if one_value else padding, strides=strides,
                ceil_mode=draw(st.booleans()), negative=draw(st.booleans()), seed=draw(st.integers(0, 2**32 - 1)))


@settings(derandomize=True, max_examples=150, deadline=None)
@given(pool_cases())
def test_max_pool2d_matches_reference(case):
    for size, k, s, p in zip(case["shape"][2:], case["kernel"], case["strides"], case["padding"]):
        o = nn.pool_extent(size, k, s, p, case["ceil_mode"])
        assume((o - 1) * s - p < size)  # else rejected; tested below
    rng = np.random.default_rng(case["seed"])
    high = 0 if case["negative"] else INT32_MAX
    x = rng.integers(INT32_MIN + 1, high, size=case["shape"], dtype=np.int64, endpoint=True).astype(np.int32)
    attrs = dict(pool_size=case["kernel"], strides=case["strides"], padding=case["wire_padding"],
                 ceil_mode=case["ceil_mode"])
    (y,) = run("max_pool2d", [x], attrs)
    want = reference1("max_pool2d", [x], attrs)
    assert np.array_equal(y, want)
    a = parse_attrs(nn.MaxPool2DAttrs, attrs, fill_defaults=True)
    for small in (False, True):   # the separable passes, and the small pools' gather
        plan = nn.max_pool2d_bind(a, nn.pool_plan(a, x.shape, small), None)
        assert plan.held_bytes == nn.max_pool2d_held(a, plan, False)
        (y,) = nn.max_pool2d_kernel(a, x, plan=plan)
        assert np.array_equal(y, want), small


@settings(derandomize=True, max_examples=40, deadline=None)
@given(st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 4), st.integers(1, 4)),
       st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_upsampling_matches_reference(shape, scale, seed):
    x = ints(np.random.default_rng(seed), shape, 32)
    (y,) = run("upsampling", [x], dict(scale=scale))
    assert np.array_equal(y, reference1("upsampling", [x], dict(scale=scale)))


# -- precision rules (SEMANTICS.md section 2) -----------------------------------

@pytest.mark.parametrize("c,kh,kw,bits", [(7, 1, 1, 3), (8, 1, 1, 4), (9, 1, 1, 4), (1, 3, 5, 4), (1, 4, 4, 5),
                                           (1, 1, 17, 5), (2, 3, 3, 5), (64, 3, 3, 10)])
def test_conv2d_precision_adds_bitlen_of_the_reduction(c, kh, kw, bits):
    prog = program("conv2d", [T(1, c, 20, 20), T(2, c, kh, kw, p=5)],
                   dict(channels=2, kernel_size=(kh, kw), use_bias=False))
    assert prog.output_types[0].precision == 8 + 5 + bits


@pytest.mark.parametrize("p_bias,want", [(1, 22), (21, 22), (22, 23), (25, 26)])
def test_conv2d_precision_with_bias(p_bias, want):
    # 8 + 8 + bitlen(2 * 3 * 3 = 18) = 21, then max(21, p_bias) + 1.
    prog = program("conv2d", [T(1, 2, 4, 4), T(3, 2, 3, 3), T(3, p=p_bias)], dict(channels=3, kernel_size=(3, 3)))
    assert prog.output_types[0].precision == want


def test_conv2d_grouped_precision_counts_one_group():
    prog = program("conv2d", [T(1, 8, 4, 4), T(8, 2, 3, 3)], dict(channels=8, kernel_size=(3, 3), groups=4,
                                                                  use_bias=False))
    assert prog.output_types[0].precision == 8 + 8 + 5  # bitlen(2 * 9 = 18)


@pytest.mark.parametrize("k,use_bias,p_bias,want", [(1204, True, 4, 28), (7, False, 1, 19), (8, False, 1, 20),
                                                    (255, False, 1, 24), (256, False, 1, 25), (3, True, 30, 31)])
def test_dense_precision(k, use_bias, p_bias, want):
    types = [T(5, k), T(3, k)] + ([T(3, p=p_bias)] if use_bias else [])
    prog = program("dense", types, dict(units=3, use_bias=use_bias))
    assert prog.output_types[0].precision == want


@pytest.mark.parametrize("name,attrs,shape", [("max_pool2d", dict(pool_size=(2, 2)), (1, 1, 4, 4)),
                                              ("upsampling", dict(scale=3), (1, 1, 2, 2))])
@pytest.mark.parametrize("p", [1, 8, 32])
def test_pool_and_upsampling_keep_the_input_precision(name, attrs, shape, p):
    assert program(name, [T(*shape, p=p)], attrs).output_types[0].precision == p


# -- cost (SEMANTICS.md section 3) ----------------------------------------------

def _op_cost(prog: Program) -> int:
    return prog.ops - 5 * sum(t.size for t in prog.input_types)


@pytest.mark.parametrize("use_bias", [False, True])
def test_conv2d_cost(use_bias):
    types = [T(1, 4, 6, 6), T(6, 2, 3, 3)] + ([T(6, p=16)] if use_bias else [])
    prog = program("conv2d", types, dict(channels=6, kernel_size=(3, 3), groups=2, use_bias=use_bias))
    out = 1 * 6 * 4 * 4
    assert _op_cost(prog) == (18 * 3 + use_bias) * out + 5 * out


@pytest.mark.parametrize("use_bias", [False, True])
def test_dense_cost(use_bias):
    types = [T(3, 10), T(4, 10)] + ([T(4, p=16)] if use_bias else [])
    prog = program("dense", types, dict(units=4, use_bias=use_bias))
    assert _op_cost(prog) == (10 * 3 + use_bias) * 12 + 5 * 12


def test_max_pool2d_and_upsampling_cost():
    pool = program("max_pool2d", [T(1, 2, 6, 6)], dict(pool_size=(2, 3), strides=(2, 3)))
    assert _op_cost(pool) == 6 * 2 * 3 * 2 + 5 * 12
    up = program("upsampling", [T(1, 2, 3, 3)], dict(scale=2))
    assert _op_cost(up) == 72 + 5 * 72


def test_reference_vector_ops_reproduced():
    """nn/conv2d/1x1x52x70-oc3-k5x5-s12-p11-d11-g1-bias: ops 431690."""
    prog = program("conv2d", [T(1, 1, 52, 70, p=1), T(3, 1, 5, 5, p=3), T(3, p=19)],
                   dict(channels=3, kernel_size=(5, 5), strides=(1, 2), padding=(1, 1)))
    assert prog.ops == 431690
    assert prog.output_types[0].shape == (1, 3, 50, 34)
    assert prog.output_types[0].precision == 20


# -- rejections ----------------------------------------------------------------

CONV = dict(channels=2, kernel_size=(3, 3), use_bias=False)
CONV_TYPES = [T(1, 2, 5, 5), T(2, 2, 3, 3)]

CONV_ATTR_ERRORS = [
    dict(strides=(0, 1)), dict(strides=(1, 4096)), dict(strides=(1,)), dict(strides=(1, 1, 1)),
    dict(dilation=(0, 1)), dict(dilation=(1, 4096)), dict(dilation=(2,)),
    dict(padding=(-1, 0)), dict(padding=(0, 4096)), dict(padding=(1,)), dict(padding=(1, 1, 1, 1)),
    dict(kernel_size=(3,)), dict(kernel_size=(0, 3)), dict(kernel_size=(3, 3, 1)),
    dict(channels=0), dict(groups=0), dict(groups=-2),
    dict(layout="NHWC"), dict(kernel_layout="HWIO"), dict(out_layout="NHWC"), dict(out_dtype="float32"),
    dict(use_bias=1), dict(groups=True), dict(strides=[1, 1.5]), dict(foo=1), dict(channels=None),
]


@pytest.mark.parametrize("bad", CONV_ATTR_ERRORS, ids=str)
def test_conv2d_attribute_domains(bad):
    rejects("invalid.attr", program, "conv2d", CONV_TYPES, {**CONV, **bad})


@pytest.mark.parametrize("missing", ["channels", "kernel_size"])
def test_conv2d_required_attributes(missing):
    attrs = {k: v for k, v in CONV.items() if k != missing}
    rejects("invalid.attr", program, "conv2d", CONV_TYPES, attrs)


def test_conv2d_accepts_every_explicit_default():
    prog = program("conv2d", CONV_TYPES, dict(CONV, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1,
                                              layout="NCHW", kernel_layout="OIHW", out_layout="NCHW",
                                              out_dtype="int32"))
    assert prog.output_types[0].shape == (1, 2, 3, 3)


@pytest.mark.parametrize("attrs,types", [
    (dict(CONV, groups=3), CONV_TYPES),                                          # groups does not divide C
    (dict(CONV, channels=3, groups=2), [T(1, 2, 5, 5), T(3, 1, 3, 3)]),          # nor channels
    (dict(CONV, channels=3), CONV_TYPES),                                        # channels != weight OC
    (CONV, [T(1, 2, 5, 5), T(2, 1, 3, 3)]),                                      # weight IC != C/groups
    (CONV, [T(1, 2, 5, 5), T(2, 2, 3, 2)]),                                      # weight != kernel_size
    (CONV, [T(1, 2, 5, 5), T(2, 2, 3)]),                                         # weight not 4-D
    (CONV, [T(2, 5, 5), T(2, 2, 3, 3)]),                                         # data not 4-D
    (dict(CONV, kernel_size=(7, 7)), [T(1, 2, 5, 5), T(2, 2, 7, 7)]),            # kernel > input
    (dict(CONV, dilation=(3, 1)), CONV_TYPES),                                   # dilated kernel 7 > 5
    (dict(CONV, dilation=(1, 2), padding=(0, 0)), [T(1, 2, 5, 4), T(2, 2, 3, 3)]),  # 5 > 4 on W
    (dict(CONV, use_bias=True), CONV_TYPES + [T(3)]),                            # bias != (channels,)
    (dict(CONV, use_bias=True), CONV_TYPES + [T(2, 1)]),
], ids=range(12))
def test_conv2d_shape_errors(attrs, types):
    rejects("invalid.shape", program, "conv2d", types, attrs)


def test_conv2d_kernel_exactly_fits_padded_input():
    prog = program("conv2d", [T(1, 2, 5, 5), T(2, 2, 7, 7)], dict(CONV, kernel_size=(7, 7), padding=(1, 1)))
    assert prog.output_types[0].shape == (1, 2, 1, 1)


def test_conv2d_arity_follows_use_bias():
    rejects("invalid.arity", program, "conv2d", CONV_TYPES, dict(CONV, use_bias=True))
    rejects("invalid.arity", program, "conv2d", CONV_TYPES + [T(2)], CONV)
    rejects("invalid.arity", program, "conv2d", CONV_TYPES, dict(channels=2, kernel_size=(3, 3)))  # default: bias


@pytest.mark.parametrize("p_data,p_weight", [(9, 8), (8, 9), (16, 16), (32, 1)])
def test_conv2d_rejects_inputs_over_8_bits(p_data, p_weight):
    rejects("invalid.precision", program, "conv2d", [T(1, 2, 5, 5, p=p_data), T(2, 2, 3, 3, p=p_weight)], CONV)


def test_conv2d_rejects_an_output_precision_over_32():
    rejects("invalid.precision", program, "conv2d", CONV_TYPES + [T(2, p=32)], dict(CONV, use_bias=True))


def test_conv2d_rejects_int8_weight_minus_128_at_run_op():
    rejects("input.value", run, "conv2d", [np.zeros((1, 1, 1, 1)), [[[[-128]]]]],
            dict(channels=1, kernel_size=(1, 1), use_bias=False), [8, 8])


@pytest.mark.parametrize("bad", [dict(units=0), dict(units=-1), dict(use_bias="true"), dict(units=2, bias=1)],
                         ids=str)
def test_dense_attribute_domains(bad):
    rejects("invalid.attr", program, "dense", [T(1, 3), T(2, 3)], {"units": 2, "use_bias": False, **bad})


def test_dense_requires_units():
    rejects("invalid.attr", program, "dense", [T(1, 3), T(2, 3)], dict(use_bias=False))


@pytest.mark.parametrize("types,units", [
    ([T(1, 3), T(3, 3)], 2),        # units != weight rows
    ([T(1, 3), T(2, 4)], 2),        # K mismatch
    ([T(1, 1, 3), T(2, 3)], 2),     # data not 2-D
    ([T(1, 3), T(2, 3, 1)], 2),     # weight not 2-D
    ([T(3), T(2, 3)], 2),
], ids=range(5))
def test_dense_shape_errors(types, units):
    rejects("invalid.shape", program, "dense", types, dict(units=units, use_bias=False))


def test_dense_bias_shape_error():
    rejects("invalid.shape", program, "dense", [T(1, 3), T(2, 3), T(3)], dict(units=2))


def test_dense_arity_follows_use_bias():
    rejects("invalid.arity", program, "dense", [T(1, 3), T(2, 3)], dict(units=2))
    rejects("invalid.arity", program, "dense", [T(1, 3), T(2, 3), T(2)], dict(units=2, use_bias=False))


@pytest.mark.parametrize("p_data,p_weight", [(9, 8), (8, 9), (16, 16)])
def test_dense_rejects_inputs_over_8_bits(p_data, p_weight):
    rejects("invalid.precision", program, "dense", [T(2, 4, p=p_data), T(3, 4, p=p_weight)],
            dict(units=3, use_bias=False))


def test_dense_rejects_an_output_precision_over_32():
    rejects("invalid.precision", program, "dense", [T(1, 3), T(2, 3), T(2, p=32)], dict(units=2))


def test_conv2d_and_dense_reject_other_dtypes():
    f32 = TensorType((1, 2, 5, 5), None, "float32")
    rejects("invalid.dtype", program, "conv2d", [f32, T(2, 2, 3, 3)], CONV)
    rejects("invalid.dtype", program, "dense", [T(1, 3), TensorType((2, 3), None, "int8")],
            dict(units=2, use_bias=False))


POOL = dict(pool_size=(2, 2))


@pytest.mark.parametrize("bad", [
    dict(pool_size=(2,)), dict(pool_size=(2, 2, 2)), dict(pool_size=(0, 2)), dict(pool_size=(-1, 2)),
    dict(strides=(0, 2)), dict(strides=(1, 4096)), dict(strides=(2,)),
    dict(padding=(0, 0, 0)), dict(padding=(0, 0, 0, 0)), dict(padding=()), dict(padding=(-1,)),
    dict(padding=(0, 4096)), dict(layout="NHWC"), dict(ceil_mode=1), dict(ceil_mode="true"), dict(pool=2),
], ids=str)
def test_max_pool2d_attribute_domains(bad):
    rejects("invalid.attr", program, "max_pool2d", [T(1, 1, 4, 4)], {**POOL, **bad})


def test_max_pool2d_requires_pool_size():
    rejects("invalid.attr", program, "max_pool2d", [T(1, 1, 4, 4)], {})


@pytest.mark.parametrize("attrs,shape", [
    (dict(pool_size=(2, 2), padding=(2, 2)), (1, 1, 4, 4)),     # padding == pool_size
    (dict(pool_size=(2, 2), padding=(0, 3)), (1, 1, 4, 4)),     # padding > pool_size, one axis
    (dict(pool_size=(2, 2), padding=(2,)), (1, 1, 4, 4)),
    (dict(pool_size=(5, 5)), (1, 1, 4, 4)),                     # pool > H + 2p
    (dict(pool_size=(2, 4), padding=(0, 1)), (1, 1, 4, 1)),     # pool > W + 2p
    (dict(pool_size=(2, 2)), (1, 4, 4)),                        # not 4-D
    (dict(pool_size=(2, 2)), (1, 1, 1, 4, 4)),
    # ceil_mode: H=1, k=2, p=1, s=2 -> O=2, the last window starts at 2 - 1 = 1 = H (padding only)
    (dict(pool_size=(2, 1), padding=(1, 0), strides=(2, 1), ceil_mode=True), (1, 1, 1, 1)),
], ids=range(8))
def test_max_pool2d_shape_errors(attrs, shape):
    rejects("invalid.shape", program, "max_pool2d", [T(*shape)], attrs)


def test_max_pool2d_ceil_mode_window_in_padding_is_rejected_floor_mode_is_not():
    # H=1, k=2, p=1, s=2: floor gives O=1; ceil gives O=2, whose last window starts at 2-1=1 >= H.
    attrs = dict(pool_size=(2, 1), padding=(1, 0), strides=(2, 1))
    assert program("max_pool2d", [T(1, 1, 1, 1)], attrs).output_types[0].shape == (1, 1, 1, 1)
    rejects("invalid.shape", program, "max_pool2d", [T(1, 1, 1, 1)], dict(attrs, ceil_mode=True))


def test_max_pool2d_ceil_mode_last_window_starting_inside_is_accepted():
    # W=18, k=3, s=3, p=(0, 1) as nn/max_pool2d/1x1x18x1-k3x3-s33-pad0_1-ceil.
    prog = program("max_pool2d", [T(1, 1, 18, 1, p=3)],
                   dict(pool_size=(3, 3), strides=(3, 3), padding=(0, 1), ceil_mode=True))
    assert prog.output_types[0].shape == (1, 1, 6, 1)


@pytest.mark.parametrize("bad", [dict(scale=0), dict(scale=4096), dict(scale=-1), dict(scale=(2,)),
                                 dict(method="BILINEAR"), dict(layout="NHWC"), dict(scale=2, size=3)], ids=str)
def test_upsampling_attribute_domains(bad):
    rejects("invalid.attr", program, "upsampling", [T(1, 1, 2, 2)], {"scale": 2, **bad})


def test_upsampling_requires_scale():
    rejects("invalid.attr", program, "upsampling", [T(1, 1, 2, 2)], {})


@pytest.mark.parametrize("shape", [(1, 2, 2), (2, 2), (1, 1, 1, 2, 2)])
def test_upsampling_needs_4d(shape):
    rejects("invalid.shape", program, "upsampling", [T(*shape)], dict(scale=2))


def test_upsampling_output_over_the_dimension_limit():
    rejects("limit.dim", program, "upsampling", [T(1, 1, 1, 1 << 13)], dict(scale=4095))


def test_upsampling_largest_scale_accepted():
    assert program("upsampling", [T(1, 1, 1, 1)], dict(scale=4095)).output_types[0].shape == (1, 1, 4095, 4095)


def test_pool_and_upsampling_reject_other_dtypes():
    for name, attrs in (("max_pool2d", POOL), ("upsampling", dict(scale=2))):
        rejects("invalid.dtype", program, name, [TensorType((1, 1, 4, 4), None, "float32")], attrs)
