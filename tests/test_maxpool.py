# Over 400 lines: a test file, one case per rule.
"""max_pool, MaxPool with indices (spec/MAXPOOL.md): reference vectors, hand tables,
static rules, must-be-rejected configurations, and the kernel against the reference kernel."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cvmvm
from cvmvm.vm.verify import verify
from isa.attrs import parse_attrs
from isa.errors import CvmError, Rejected
from isa.ops.pool import MAX_POOL, MaxPoolAttrs, _floor_sum, first_empty_window, max_pool_geometry
from isa.table import OP_BY_NAME
from isa.types import TensorType
from serializer.model import Input, Instr, Model
from isa.reference import pool as reference
from tests.reference import decode_array, maxpool_cases

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


def attrs_for(r: int, **over):
    """Every attribute explicit (no defaults exist): a 1-tap, stride-1, unpadded pool of rank r."""
    a = dict(kernel_shape=[1] * r, strides=[1] * r, dilations=[1] * r, pads=[0] * (2 * r),
             auto_pad="NOTSET", ceil_mode=0, storage_order=0, index_axis=0, index_dtype="int64")
    a.update(over)
    return a


def run(x: np.ndarray, attrs) -> tuple[np.ndarray, np.ndarray]:
    y, indices = cvmvm.run_op("max_pool", [x], attrs)
    return y, indices


def code_of(x: np.ndarray, attrs) -> str:
    with pytest.raises(CvmError) as e:
        cvmvm.run_op("max_pool", [x], attrs)
    return e.value.code


def verify_single(x: TensorType, attrs) -> int:
    """Verify one max_pool over an input of any TensorType (run_op cannot express every dtype); return its ops."""
    record = parse_attrs(MaxPoolAttrs, attrs, fill_defaults=False)
    model = Model(inputs=(Input("x", x),), params=(), instrs=(Instr("max_pool", record, (0,), (1, 2)),),
                  outputs=(1, 2))
    return verify(model).ops


def raw(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()


def test_in_the_op_table():
    assert OP_BY_NAME["max_pool"] is MAX_POOL
    assert MAX_POOL.outputs == ("Y", "Indices")


# -- reference vectors (fixtures/reference/maxpool) ---------------------------

CASES = maxpool_cases()


OK = [c for c in CASES if c["expect"]["status"] == "ok"]
INVALID = [c for c in CASES if c["expect"]["status"] == "invalid"]


def check_expected(case, y: np.ndarray, indices: np.ndarray) -> None:
    for got, want in ((y, case["expect"]["y"]), (indices, case["expect"]["indices"])):
        assert str(got.dtype) == want["dtype"]
        assert list(got.shape) == want["shape"]
        assert hashlib.sha256(raw(got)).hexdigest() == want["sha256"], case["id"]


def test_reference_counts():
    assert len(CASES) == 274 and len(OK) == 232 and len(INVALID) == 42


@pytest.mark.parametrize("case", OK, ids=lambda c: c["id"])
def test_reference_ok(case):
    x = decode_array(case["x"]["b64"], case["x"]["dtype"], case["x"]["shape"])
    check_expected(case, *run(x, case["attrs"]))


def test_int32_min_input_is_a_raw_int32_tensor():
    """INT32_MIN fits no CVM precision; run_op types such an input raw int32 (no precision),
    which max_pool selects from and every arithmetic op refuses."""
    x = np.full((1, 1, 3), INT32_MIN, dtype=np.int32)
    x[0, 0, 1] = 5
    y, i = run(x, attrs_for(1, kernel_shape=[2]))
    assert y.tolist() == [[[5, 5]]] and i.tolist() == [[[1, 1]]]
    with pytest.raises(CvmError) as e:
        cvmvm.run_op("relu", [x])
    assert e.value.code == "invalid.dtype"


def expected_code(reason: str) -> str:
    """The VM's code for each kind of reference rejection (fixture reasons are data, not our messages)."""
    if reason.startswith(("storage_order", "kernel_shape entries", "strides entries", "dilations entries",
                          "pads entries", "auto_pad '", "ceil_mode", "index_dtype", "X rank")):
        return "invalid.attr"  # the attribute's own domain (rank 2 / 6 come with 0 / 4 kernel entries)
    if reason == "every axis must be >= 1":
        return "limit.dim"  # the verifier's check of every tensor, before any op rule
    if reason.startswith("dtype"):
        return "invalid.dtype"
    return "invalid.shape"


@pytest.mark.parametrize("case", INVALID, ids=lambda c: c["id"])
def test_reference_invalid(case):
    x = case["x"]
    code = expected_code(case["expect"]["reason"])
    if x["dtype"] not in ("int8", "uint8", "int32", "float16", "float32", "float64"):
        # run_op maps every wider integer array to int32, so the dtype goes in through a typed model.
        with pytest.raises(CvmError) as e:
            verify_single(TensorType(tuple(x["shape"]), None, x["dtype"]), case["attrs"])
        assert e.value.code == code
        return
    value = decode_array(x["b64"], x["dtype"], x["shape"])
    assert code_of(value, case["attrs"]) == code


# -- hand-computed tables -----------------------------------------------------

def test_openvino_example_1_corrected():
    x = np.array([[[[-1, 2, 3], [4, 5, -6], [-7, 8, 9]]]], dtype=np.float32)
    y, i = run(x, attrs_for(2, kernel_shape=[2, 2], pads=[1, 1, 1, 1]))
    assert y.tolist() == [[[[-1, 2, 3, 3], [4, 5, 5, 3], [4, 8, 9, 9], [-7, 8, 9, 9]]]]
    assert i.tolist() == [[[[0, 1, 2, 2], [3, 4, 4, 2], [3, 7, 8, 8], [6, 7, 8, 8]]]]
    assert i.dtype == np.int64


def test_openvino_example_4_two_channels_same_upper():
    x = np.array([[[[-1, 2, 3], [4, 5, -6], [-7, 8, 9]], [[2, -1, 5], [6, -7, 1], [8, 2, -3]]]], dtype=np.int8)
    y, i = run(x, attrs_for(2, kernel_shape=[2, 2], auto_pad="SAME_UPPER"))
    assert y.dtype == np.int8
    assert y.tolist() == [[[[5, 5, 3], [8, 9, 9], [8, 9, 9]], [[6, 5, 5], [8, 2, 1], [8, 2, -3]]]]
    assert i.tolist() == [[[[4, 4, 2], [7, 8, 8], [7, 8, 8]], [[12, 11, 11], [15, 16, 14], [15, 16, 17]]]]


def test_nan_counts_as_minus_infinity_and_y_is_never_nan():
    nan, inf = np.nan, np.inf
    x = np.array([[[nan, 1, nan, nan, -inf, nan]]], dtype=np.float64)
    y, i = run(x, attrs_for(1, kernel_shape=[2]))
    assert y.tolist() == [[[1, 1, -inf, -inf, -inf]]]
    assert i.tolist() == [[[1, 1, 2, 3, 4]]]  # all-NaN/-inf window: the first real tap, Y = -inf


def test_signed_zeros_tie_and_the_first_keeps_its_sign():
    x = np.array([[[-0.0, 0.0, 0.0, -0.0]]], dtype=np.float32)
    y, i = run(x, attrs_for(1, kernel_shape=[2]))
    assert np.signbit(y).tolist() == [[[True, False, False]]]
    assert i.tolist() == [[[0, 1, 2]]]


def test_nan_payload_never_reaches_y():
    x = np.array([0x7E01, 0xFE01, 0x3C00], dtype=np.uint16).view(np.float16).reshape(1, 1, 3)
    y, i = run(x, attrs_for(1, kernel_shape=[2]))
    assert raw(y) == raw(np.array([[[-np.inf, 1.0]]], dtype=np.float16))
    assert i.tolist() == [[[0, 2]]]


@pytest.mark.parametrize("dtype,low", [(np.int8, -128), (np.uint8, 0), (np.int32, -INT32_MAX)])
def test_lowest_value_at_borders_beats_padding(dtype, low):
    x = np.array([[[low, low]]], dtype=dtype)
    y, i = run(x, attrs_for(1, kernel_shape=[3], pads=[1, 1]))
    assert y.tolist() == [[[low, low]]] and y.dtype == dtype
    assert i.tolist() == [[[0, 0]]]


def test_all_lowest_int8_window_points_to_its_first_real_tap():
    x = np.full((1, 1, 3, 3), -128, dtype=np.int8)
    y, i = run(x, attrs_for(2, kernel_shape=[2, 2], pads=[1, 1, 1, 1]))
    assert (y == -128).all()
    assert i.tolist() == [[[[0, 0, 1, 2], [0, 0, 1, 2], [3, 3, 4, 5], [6, 6, 7, 8]]]]


@pytest.mark.parametrize("axis,modulus", [(0, 24), (1, 12), (2, 4), (3, 2), (-1, 2), (-2, 4), (-3, 12), (-4, 24)])
def test_index_axis_takes_the_flat_index_modulo_the_trailing_volume(axis, modulus):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2)
    for index_dtype in ("int64", "int32"):
        y, i = run(x, attrs_for(2, index_axis=axis, index_dtype=index_dtype))
        assert i.dtype == np.dtype(index_dtype)
        assert i.ravel().tolist() == [k % modulus for k in range(24)]
        assert raw(y) == raw(x)


def test_dilated_3d_window_with_ties():
    x = np.zeros((1, 2, 3, 3, 3), dtype=np.uint8)
    x[0, 1, 2, 2, 2] = 7
    y, i = run(x, attrs_for(3, kernel_shape=[2, 2, 2], dilations=[2, 2, 2]))
    assert y.shape == (1, 2, 1, 1, 1) and y.ravel().tolist() == [0, 7]
    assert i.ravel().tolist() == [0, 27 + 26]


def test_int32_y_keeps_the_input_precision():
    x = np.array([[[3, -9, 100]]], dtype=np.int32)
    y, i = cvmvm.run_op("max_pool", [x], attrs_for(1, kernel_shape=[2], index_dtype="int32"), precisions=[9])
    assert y.dtype == np.int32 and y.tolist() == [[[3, 100]]]
    assert i.dtype == np.int32 and i.tolist() == [[[0, 2]]]


def test_kernel_leaves_its_input_alone():
    x = np.array([[[np.nan, 2.0, -0.0]]], dtype=np.float32)
    x.setflags(write=False)
    before = raw(x)
    MAX_POOL.kernel(parse_attrs(MaxPoolAttrs, attrs_for(1, kernel_shape=[2], pads=[1, 1]), fill_defaults=False), x)
    assert raw(x) == before


# -- static rules -------------------------------------------------------------

def record(r: int, **over) -> MaxPoolAttrs:
    return record_of(attrs_for(r, **over))


def record_of(attrs) -> MaxPoolAttrs:
    return parse_attrs(MaxPoolAttrs, attrs, fill_defaults=False)


@pytest.mark.parametrize("size,k,s,d,pads,auto_pad,ceil,expect", [
    (5, 2, 2, 1, (0, 0), "NOTSET", 0, (0, 2)),
    (5, 2, 2, 1, (0, 0), "NOTSET", 1, (0, 3)),        # ceil keeps the partial window at 4
    (3, 1, 2, 1, (0, 1), "NOTSET", 1, (0, 2)),        # ceil would start a window in the end padding: dropped
    (6, 3, 2, 1, (1, 1), "NOTSET", 1, (1, 4)),
    (3, 2, 2, 1, (1, 0), "NOTSET", 1, (1, 2)),
    (7, 3, 1, 1, (0, 0), "VALID", 0, (0, 5)),         # OpenVINO example 2
    (3, 2, 2, 1, (0, 0), "VALID", 0, (0, 1)),         # OpenVINO example 5 with floor
    (10, 3, 1, 3, (0, 0), "VALID", 0, (0, 4)),
    (3, 2, 1, 1, (0, 0), "SAME_UPPER", 0, (0, 3)),    # total 1: the odd pad goes to the end
    (3, 2, 1, 1, (0, 0), "SAME_LOWER", 0, (1, 3)),    # ... or to the beginning
    (5, 2, 1, 2, (0, 0), "SAME_UPPER", 0, (1, 5)),    # dilation counts: total 2
    (5, 3, 2, 1, (0, 0), "SAME_LOWER", 1, (1, 3)),    # ceil_mode does not change SAME
    (6, 1, 3, 1, (0, 0), "SAME_UPPER", 0, (0, 2)),    # negative total clamps to 0
    (7, 4, 3, 1, (0, 0), "SAME_LOWER", 0, (2, 3)),    # total 3
    (1000, 60, 10, 10, (10, 10), "NOTSET", 0, (10, 43)),
])
def test_output_geometry(size, k, s, d, pads, auto_pad, ceil, expect):
    a = record(1, kernel_shape=[k], strides=[s], dilations=[d], pads=list(pads), auto_pad=auto_pad, ceil_mode=ceil)
    assert max_pool_geometry(a, (size,)) == (expect,)
    assert reference.output_geometry((size,), a) == [expect]


@pytest.mark.parametrize("dtype", ["int8", "uint8", "float16", "float32", "float64"])
@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
def test_dtype_and_precision_rules(dtype, index_dtype):
    a = record(2, index_axis=2, index_dtype=index_dtype)
    x = TensorType((2, 3, 5, 7), None, dtype)
    assert MAX_POOL.dtypes(a, x) == (dtype, index_dtype)
    # int32 Indices are a CVM int32 tensor: the tightest precision holding index 34 (bitlen 6, plus sign).
    assert MAX_POOL.precision(a, x) == (None, 7 if index_dtype == "int32" else None)
    assert MAX_POOL.shape(a, x) == ((2, 3, 5, 7), (2, 3, 5, 7))


def test_int32_input_precision_passes_to_y():
    a = record(1, index_dtype="int32")
    assert MAX_POOL.precision(a, TensorType((1, 1, 1), 12)) == (12, 1)  # one element: index 0 only


@pytest.mark.parametrize("dtype", ["int64", "int16", "bool"])
def test_dtype_rule_refuses_other_dtypes(dtype):
    with pytest.raises(Rejected):
        MAX_POOL.dtypes(record(1), TensorType((1, 1, 4), None, dtype))


def test_int64_input_is_invalid_dtype_in_a_model():
    with pytest.raises(CvmError) as e:
        verify_single(TensorType((1, 1, 4), None, "int64"), attrs_for(1))
    assert e.value.code == "invalid.dtype"


def test_int32_indices_bound():
    """prod(shape[index_axis:]) <= 2^31 - 1 for int32 indices (unreachable under the 2^30 size limit)."""
    a32, a64 = record(1, index_dtype="int32"), record(1)
    fits, over = TensorType((1, 1, INT32_MAX), None, "uint8"), TensorType((2, 1, 1 << 30), None, "uint8")
    assert MAX_POOL.precision(a32, fits) == (None, 32)
    MAX_POOL.shape(a32, fits)
    MAX_POOL.shape(a64, over)
    with pytest.raises(Rejected):
        MAX_POOL.shape(a32, over)
    MAX_POOL.shape(record(1, index_dtype="int32", index_axis=1), over)  # within one batch it fits


def test_cost_is_kernel_volume():
    # variable 5 * 600; op: base 6 * size(Y) + 5 * (size(Y) + size(Indices)), Y = (2, 3, 9, 10)
    x = TensorType((2, 3, 10, 10), None, "float32")
    ops = verify_single(x, attrs_for(2, kernel_shape=[2, 3], pads=[0, 1, 0, 1]))
    assert ops == 5 * 600 + 6 * 540 + 5 * 2 * 540


@given(n=st.integers(0, 60), m=st.integers(1, 30), a=st.integers(0, 80), b=st.integers(-200, 200))
@settings(derandomize=True, max_examples=300, deadline=None)
def test_floor_sum_against_the_sum(n, m, a, b):
    assert _floor_sum(n, m, a, b) == sum((a * i + b) // m for i in range(n))


def brute_first_empty(size, k, s, d, begin, out):
    for o in range(out):
        if not any(0 <= o * s - begin + j * d < size for j in range(k)):
            return o
    return None


@given(size=st.integers(1, 12), k=st.integers(1, 6), s=st.integers(1, 7), d=st.integers(1, 9),
       begin=st.integers(0, 40), out=st.integers(1, 40))
@settings(derandomize=True, max_examples=1500, deadline=None)
def test_first_empty_window_against_every_position(size, k, s, d, begin, out):
    assert first_empty_window(size, k, s, d, begin, out) == brute_first_empty(size, k, s, d, begin, out)


def test_first_empty_window_decides_billions_of_positions_at_once():
    # s = d = 2^30, one element: every window starting in the begin padding lands a tap on 0 exactly,
    # window 2^20 - 1 starts at 0, window 2^20 past the end.
    assert first_empty_window(1, 1 << 20, 1 << 30, 1 << 30, ((1 << 20) - 1) << 30, 1 << 21) == 1 << 20
    assert first_empty_window(1, 1 << 20, 1 << 30, 1 << 30, ((1 << 20) - 1) << 30, 1 << 20) is None
    # s = 1, d = 2^20, begin a multiple of d: window o's first real tap is o mod 2^20, real iff < size.
    k = 1 << 22
    assert first_empty_window(1000, k, 1, 1 << 20, (k - 1) << 20, 1 << 50) == 1000
    assert first_empty_window((1 << 20) - 1, k, 1, 1 << 20, (k - 1) << 20, 1 << 50) == (1 << 20) - 1
    # taps o - 2^30 and o: real iff o < size
    assert first_empty_window(1, 2, 1, 1 << 30, 1 << 30, 1 << 30) == 1
    assert first_empty_window(1 << 24, 2, 1, 1 << 30, 1 << 30, 1 << 30) == 1 << 24


# -- must be rejected ---------------------------------------------------------

X2 = np.zeros((1, 1, 3, 3), dtype=np.float32)
ATTR_REJECTS = [
    *[({k: v for k, v in attrs_for(2).items() if k != name}) for name in attrs_for(2)],  # no defaults: each missing
    attrs_for(2, kernel_shape=[0, 2]), attrs_for(2, kernel_shape=[2, 2, 2, 2]), attrs_for(2, kernel_shape=[]),
    attrs_for(2, kernel_shape=2), attrs_for(2, strides=[1, 0]), attrs_for(2, dilations=[0, 1]),
    attrs_for(2, dilations=[1, -1]), attrs_for(2, pads=[0, -1, 0, 0]), attrs_for(2, pads=[0] * 7),
    attrs_for(2, pads=[0, 0, 0, 0.5]), attrs_for(2, auto_pad="SAME"), attrs_for(2, auto_pad="same_upper"),
    attrs_for(2, auto_pad="EXPLICIT"), attrs_for(2, ceil_mode=2), attrs_for(2, ceil_mode=True),
    attrs_for(2, ceil_mode=-1), attrs_for(2, storage_order=1), attrs_for(2, index_dtype="i64"),
    attrs_for(2, index_dtype="uint32"), attrs_for(2, index_axis=1 << 31), attrs_for(2, index_axis="0"),
    {**attrs_for(2), "axis": 0}, {**attrs_for(2), "rounding_type": "floor"},
]


@pytest.mark.parametrize("attrs", ATTR_REJECTS)
def test_attribute_rejects(attrs):
    assert code_of(X2, attrs) == "invalid.attr"


SHAPE_REJECTS = [
    ((2, 3), attrs_for(1)),                                                   # rank 2
    ((1, 1, 2, 2, 2, 2), attrs_for(3)),                                       # rank 6
    ((1, 1, 3, 3), attrs_for(1)),                                             # r = 2, attributes for 1
    ((1, 1, 3, 3), attrs_for(2, kernel_shape=[1])),
    ((1, 1, 3, 3), attrs_for(2, strides=[1, 1, 1])),
    ((1, 1, 3, 3), attrs_for(2, dilations=[1])),
    ((1, 1, 3, 3), attrs_for(2, pads=[0, 0])),
    ((1, 1, 3, 3), attrs_for(2, pads=[0, 0, 0, 0, 0, 0])),
    ((1, 1, 3, 3), attrs_for(2, auto_pad="SAME_UPPER", pads=[0, 0, 0, 1])),
    ((1, 1, 3, 3), attrs_for(2, auto_pad="SAME_LOWER", pads=[1, 0, 0, 0])),
    ((1, 1, 3, 3), attrs_for(2, auto_pad="VALID", pads=[0, 1, 0, 0])),
    ((1, 1, 3, 3), attrs_for(2, auto_pad="VALID", ceil_mode=1)),
    ((1, 1, 3, 3), attrs_for(2, auto_pad="VALID", ceil_mode=1, kernel_shape=[3, 3])),
    ((1, 1, 3, 3), attrs_for(2, index_axis=4)),
    ((1, 1, 3, 3), attrs_for(2, index_axis=-5)),
    ((1, 1, 3, 3), attrs_for(2, kernel_shape=[4, 1])),                        # O = 0
    ((1, 1, 3), attrs_for(1, kernel_shape=[6], strides=[2], ceil_mode=1)),    # ceil, O = 0
    ((1, 1, 3), attrs_for(1, kernel_shape=[2], dilations=[3])),               # dilated extent 4 > 3
    ((1, 1, 2), attrs_for(1, kernel_shape=[4], auto_pad="VALID")),            # O = -1
    ((1, 1, 3, 3), attrs_for(2, kernel_shape=[2, 2], pads=[2, 0, 0, 0])),     # window 0 all begin padding
    ((1, 1, 3, 3), attrs_for(2, kernel_shape=[2, 2], pads=[0, 0, 0, 3])),     # last window all end padding
    ((1, 1, 2), attrs_for(1, kernel_shape=[2], dilations=[3], pads=[1, 1])),  # taps -1, 2 jump over X
    ((1, 1, 1), attrs_for(1, kernel_shape=[2], dilations=[3], auto_pad="SAME_UPPER")),
    ((1, 1, 1), attrs_for(1, kernel_shape=[2], dilations=[3], auto_pad="SAME_LOWER")),
    ((1, 1, 5), attrs_for(1, kernel_shape=[1], pads=[1, 0])),                 # k = 1: a pad is a padding-only window
    ((1, 1, 4), attrs_for(1, kernel_shape=[3], strides=[3], pads=[0, 8], ceil_mode=1)),  # ceil drops 3, not 2
]


@pytest.mark.parametrize("shape,attrs", SHAPE_REJECTS)
def test_shape_rejects(shape, attrs):
    assert code_of(np.zeros(shape, dtype=np.float32), attrs) == "invalid.shape"


def test_kernel_volume_over_the_base_cost_limit():
    # a valid geometry (window 0 reaches X at tap 2^29), but base cost 2^30 + 1 > 2^30
    x = np.zeros((1, 1, 3), dtype=np.uint8)
    assert code_of(x, attrs_for(1, kernel_shape=[(1 << 30) + 1], pads=[1 << 29, 1 << 29])) == "limit.ops"


# -- the kernel against the reference kernel ---------------------------------------

def _bits(dtype, words):
    return np.array(words, dtype={2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(dtype).itemsize]).view(dtype)


ALPHABETS = {
    "int8": np.array([-128, -127, -1, 0, 1, 5, 127], dtype=np.int8),
    "uint8": np.array([0, 1, 5, 200, 255], dtype=np.uint8),
    "int32": np.array([-INT32_MAX, -5, 0, 1, 5, 16777216, 16777217, INT32_MAX], dtype=np.int32),
    "float16": np.concatenate([np.array([0.0, -0.0, 1.0, -1.0, 2.5, np.inf, -np.inf, np.nan, 65504, -65504],
                                        dtype=np.float16), _bits(np.float16, [0x7E01, 0xFC01, 0x0001, 0x8001])]),
    "float32": np.concatenate([np.array([0.0, -0.0, 1.0, -1.0, 2.5, np.inf, -np.inf, np.nan], dtype=np.float32),
                               _bits(np.float32, [0x7FC00001, 0xFF800001, 0x00000001, 0xFF7FFFFF])]),
    "float64": np.concatenate([np.array([0.0, -0.0, 1.0, -1.0, 2.5, np.inf, -np.inf, np.nan], dtype=np.float64),
                               _bits(np.float64, [0x7FF8000000000001, 0xFFF0000000000001, 1])]),
}


@st.composite
def pools(draw):
    r = draw(st.integers(1, 3))
    dtype = draw(st.sampled_from(sorted(ALPHABETS)))
    spatial = [draw(st.integers(1, (7, 5, 4)[r - 1])) for _ in range(r)]
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 3)), *spatial)
    auto_pad = draw(st.sampled_from(["NOTSET", "NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"]))
    attrs = dict(
        kernel_shape=[draw(st.integers(1, 3)) for _ in range(r)],
        strides=[draw(st.integers(1, 3)) for _ in range(r)],
        dilations=[draw(st.integers(1, 3)) for _ in range(r)],
        pads=[draw(st.integers(0, 3)) for _ in range(2 * r)] if auto_pad == "NOTSET" else [0] * (2 * r),
        auto_pad=auto_pad,
        ceil_mode=draw(st.integers(0, 1)),
        storage_order=0,
        index_axis=draw(st.integers(-r - 2, r + 1)),
        index_dtype=draw(st.sampled_from(["int64", "int32"])),
    )
    alphabet = ALPHABETS[dtype]
    # a few distinct values per tensor make ties (and all-NaN / all-lowest windows) common
    palette = draw(st.lists(st.integers(0, len(alphabet) - 1), min_size=1, max_size=4))
    picks = draw(st.lists(st.sampled_from(palette), min_size=math.prod(shape), max_size=math.prod(shape)))
    return alphabet[np.array(picks, dtype=np.int64)].reshape(shape), attrs


@given(pools())
@settings(derandomize=True, max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_kernel_matches_reference(case):
    x, attrs = case
    if attrs["auto_pad"] == "VALID" and attrs["ceil_mode"] == 1:
        assert code_of(x, attrs) == "invalid.shape"
        return
    try:
        want = reference.max_pool(record_of(attrs), x)
    except reference.NoOutput:
        assert code_of(x, attrs) == "invalid.shape"
        return
    y, indices = run(x, attrs)
    assert y.dtype == x.dtype and indices.dtype == np.dtype(attrs["index_dtype"])
    assert raw(y) == raw(want[0])
    assert raw(indices) == raw(want[1])


@pytest.mark.parametrize("case", [c for c in OK if math.prod(c["x"]["shape"]) <= 400], ids=lambda c: c["id"])
def test_reference_reproduces_the_small_reference_vectors(case):
    x = decode_array(case["x"]["b64"], case["x"]["dtype"], case["x"]["shape"])
    check_expected(case, *reference.max_pool(record_of(case["attrs"]), x))


@pytest.mark.parametrize("dtype", [np.int64, np.int16, np.uint32, np.bool_])
def test_run_op_refuses_what_a_model_refuses(dtype):
    # Defect: run_op typed an int64 X as int32 and max_pool accepted it.
    x = np.arange(8).astype(dtype).reshape(1, 2, 4)
    with pytest.raises(CvmError) as e:
        cvmvm.run_op("max_pool", [x], attrs_for(1))
    assert e.value.code in ("invalid.dtype", "input.dtype")
    if dtype is np.int64:
        assert e.value.code == "invalid.dtype"
        (y,) = cvmvm.run_op("relu", [x])   # an op that takes only int32 still reads int64 values as int32
        assert y.dtype == np.int32
