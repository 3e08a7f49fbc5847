# Over 400 lines: a test file, one case per rule.
"""Transform ops: hand-computed cases, the formalization's shape grid, reference kernels
under hypothesis, and the must-be-rejected cases, all through cvmvm.run_op."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import cvmvm
from isa.reference import transform as ref
from isa.attrs import attr_fields
from isa.ops import transform
from isa.types import TensorType
from tests.opkit import family

SETTINGS = settings(derandomize=True, max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
MORE = settings(SETTINGS, max_examples=200)  # the ops with the most cases: slicing and reshape codes


def a32(values) -> np.ndarray:
    return np.array(values, dtype=np.int32)


def frozen(x: np.ndarray) -> np.ndarray:
    """A read-only copy: a kernel that writes into its input fails loudly."""
    y = np.array(x, dtype=np.int32)
    y.flags.writeable = False
    return y


def run(name: str, inputs, attrs=None, precisions=None) -> np.ndarray:
    inputs = [frozen(x) for x in inputs]
    before = [x.copy() for x in inputs]
    (y,) = cvmvm.run_op(name, inputs, attrs or {}, precisions)
    for x, b in zip(inputs, before):
        assert np.array_equal(x, b)
    assert y.dtype == np.int32 and y.flags.c_contiguous
    return y


def rejection(name: str, inputs, attrs=None, precisions=None) -> str:
    with pytest.raises(cvmvm.CvmError) as e:
        cvmvm.run_op(name, [frozen(x) for x in inputs], attrs or {}, precisions)
    return e.value.code


def data(shape, seed: int = 0, bound: int = 1000) -> np.ndarray:
    return np.random.default_rng(seed).integers(-bound, bound + 1, size=shape, dtype=np.int32)


def counting(shape) -> np.ndarray:
    """Distinct values, so that any misplaced element shows."""
    n = ref.size_of(shape)
    return (np.arange(n, dtype=np.int32) - n // 2).reshape(shape)


def assert_law(y: np.ndarray, law: ref.Law) -> None:
    assert y.shape == law.shape
    assert np.array_equal(y, law.materialize())


def assert_law_sampled(y: np.ndarray, law: ref.Law, seed: int, samples: int = 48) -> None:
    """The output shape, and the formula at its first and last point and a seeded sample."""
    assert y.shape == law.shape
    ks = {0, law.count - 1, *np.random.default_rng(seed).integers(0, law.count, size=samples).tolist()}
    for k in sorted(ks):
        where, value = law.cell(int(k))
        assert int(y[where]) == value, f"point {k}: Y{where}"


# -- the table ---------------------------------------------------------------

def test_op_order_and_names():
    assert [op.name for op in family(transform)] == [
        "repeat", "tile", "flatten", "concatenate", "expand_dims", "reshape", "squeeze", "transpose",
        "strided_slice", "take", "cvm_lut", "slice_like"]


def test_attribute_names_and_cortex_defaults():
    missing = dataclasses.MISSING
    fields = {op.name: {f.name: f.default for f in attr_fields(op.attrs)} for op in family(transform)}
    assert fields == {
        "repeat": {"repeats": missing, "axis": 0},
        "tile": {"reps": missing},
        "flatten": {},
        "concatenate": {"axis": 1},
        "expand_dims": {"axis": missing, "num_newaxis": 1},
        "reshape": {"shape": missing},
        "squeeze": {"axis": ()},
        "transpose": {"axes": ()},
        "strided_slice": {"begin": missing, "end": missing, "stride": ()},
        "take": {"axis": None},
        "cvm_lut": {"in_dim": missing},
        "slice_like": {"axis": ()},
    }


def test_arity():
    assert transform.CONCATENATE.inputs(transform.ConcatenateAttrs()) is None
    for op in family(transform):
        if op is not transform.CONCATENATE:
            names = op.inputs(None)
            assert len(names) == (2 if op.name in ("take", "cvm_lut", "slice_like") else 1)
        assert op.outputs == ("output",)


def test_cost_is_one_per_output_element():
    t = TensorType((2, 3), 8)
    for op in family(transform):
        assert op.cost(None, (t,), (t,)) == 1


# -- precision ---------------------------------------------------------------

def test_precision_rules():
    p5, p9, p30 = TensorType((2, 3), 5), TensorType((2, 3), 9), TensorType((6,), 30)
    assert transform.CONCATENATE.precision(transform.ConcatenateAttrs(0), p5, p30, p9) == (30,)
    assert transform.CVM_LUT.precision(transform.CvmLutAttrs(6), p30, p5) == (5,)
    assert transform.CVM_LUT.precision(transform.CvmLutAttrs(6), p5, p30) == (30,)
    for op in family(transform):
        if op not in (transform.CONCATENATE, transform.CVM_LUT):
            inputs = (p9, p5) if op.name in ("take", "slice_like") else (p9,)
            assert op.precision(None, *inputs) == (9,)


def test_cvm_lut_output_takes_the_table_precision():
    # Wide table values behind 4-bit indices: an output precision taken from the
    # indices would fail the executor's output check.
    table = a32([100000, -100000, 7, 0])
    y = run("cvm_lut", [a32([[0, 1], [5, -3]]), table], {"in_dim": 4}, precisions=[4, 18])
    assert y.tolist() == [[100000, -100000], [0, 100000]]


def test_concatenate_output_takes_the_widest_precision():
    y = run("concatenate", [a32([[1]]), a32([[1 << 20]])], {"axis": 0}, precisions=[2, 22])
    assert y.tolist() == [[1], [1 << 20]]


# -- hand-computed cases -----------------------------------------------------

X22 = [[1, 2], [3, 4]]
X34 = [[1, 4, 7, 10], [2, 5, 8, 11], [3, 6, 9, 12]]
X222 = [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]

HAND = [
    ("repeat", [X22], {"repeats": 2}, [[1, 2], [1, 2], [3, 4], [3, 4]]),
    ("repeat", [X22], {"repeats": 2, "axis": -1}, [[1, 1, 2, 2], [3, 3, 4, 4]]),
    ("repeat", [[5, 6]], {"repeats": 3, "axis": 0}, [5, 5, 5, 6, 6, 6]),
    ("repeat", [X22], {"repeats": 1, "axis": 1}, X22),
    ("tile", [[1, 2]], {"reps": (2, 2)}, [[1, 2, 1, 2], [1, 2, 1, 2]]),
    ("tile", [X22], {"reps": (3,)}, [[1, 2, 1, 2, 1, 2], [3, 4, 3, 4, 3, 4]]),
    ("tile", [X22], {"reps": (2, 1, 1)}, [X22, X22]),
    ("tile", [X22], {"reps": [2, 1]}, [[1, 2], [3, 4], [1, 2], [3, 4]]),
    ("flatten", [X222], {}, [[1, 2, 3, 4], [5, 6, 7, 8]]),
    ("flatten", [[5, 6]], {}, [[5], [6]]),
    ("flatten", [[[[9]]]], {}, [[9]]),
    ("concatenate", [[[1, 2]], [[3, 4], [5, 6]]], {"axis": 0}, [[1, 2], [3, 4], [5, 6]]),
    ("concatenate", [[[1], [2]], [[3, 4], [5, 6]]], {}, [[1, 3, 4], [2, 5, 6]]),
    ("concatenate", [[[1], [2]], [[3], [4]], [[5], [6]]], {"axis": -1}, [[1, 3, 5], [2, 4, 6]]),
    ("concatenate", [[7, 8]], {"axis": 0}, [7, 8]),
    ("expand_dims", [[1, 2, 3]], {"axis": 0}, [[1, 2, 3]]),
    ("expand_dims", [[1, 2, 3]], {"axis": -1}, [[1], [2], [3]]),
    ("expand_dims", [[1, 2, 3]], {"axis": 1, "num_newaxis": 2}, [[[1]], [[2]], [[3]]]),
    ("expand_dims", [[1, 2, 3]], {"axis": -2, "num_newaxis": 1}, [[1, 2, 3]]),
    ("reshape", [[[1, 2, 3], [4, 5, 6]]], {"shape": (3, -1)}, [[1, 2], [3, 4], [5, 6]]),
    ("reshape", [[[1, 2, 3], [4, 5, 6]]], {"shape": (-3,)}, [1, 2, 3, 4, 5, 6]),
    ("reshape", [[[1, 2, 3], [4, 5, 6]]], {"shape": (-4, 1, -1, -2)}, [[[1, 2, 3], [4, 5, 6]]]),
    ("reshape", [[1, 2, 3, 4]], {"shape": [2, 2]}, [[1, 2], [3, 4]]),
    ("squeeze", [[[[0], [1], [2]]]], {}, [0, 1, 2]),
    ("squeeze", [[[[0], [1], [2]]]], {"axis": (0,)}, [[0], [1], [2]]),
    ("squeeze", [[[[0], [1], [2]]]], {"axis": (0, 2)}, [0, 1, 2]),
    ("squeeze", [[[[0], [1], [2]]]], {"axis": (0, -3)}, [[0], [1], [2]]),  # one axis, named twice
    ("squeeze", [[[7]]], {}, [7]),
    ("squeeze", [[[7]]], {"axis": (-1, 0)}, [7]),
    ("transpose", [X22], {}, [[1, 3], [2, 4]]),
    ("transpose", [X222], {}, [[[1, 5], [3, 7]], [[2, 6], [4, 8]]]),
    ("transpose", [X222], {"axes": (1, 0, 2)}, [[[1, 2], [5, 6]], [[3, 4], [7, 8]]]),
    ("transpose", [X222], {"axes": (-2, -3, -1)}, [[[1, 2], [5, 6]], [[3, 4], [7, 8]]]),
    ("strided_slice", [X34], {"begin": (0, 1), "end": (2, 4), "stride": (1, 1)}, [[4, 7, 10], [5, 8, 11]]),
    ("strided_slice", [X222], {"begin": (0, 0), "end": (2, 2)}, X222),
    ("strided_slice", [[0, 1, 2, 3, 4, 5, 6]], {"begin": (-1,), "end": (-8,), "stride": (-2,)}, [6, 4, 2, 0]),
    ("strided_slice", [[0, 1, 2, 3, 4, 5, 6]], {"begin": (100,), "end": (-100,), "stride": (-3,)}, [6, 3, 0]),
    ("strided_slice", [[0, 1, 2, 3, 4, 5, 6]], {"begin": (-100,), "end": (100,), "stride": (3,)}, [0, 3, 6]),
    ("strided_slice", [X34], {"begin": (-1,), "end": (-100,), "stride": (-1, 2)}, [[3, 9], [2, 8], [1, 7]]),
    ("strided_slice", [X34], {"begin": (1, 0, 5), "end": (2, 4, 9), "stride": (1, 1, 1)}, [[2, 5, 8, 11]]),
    ("take", [X22, [3, 0, 2]], {}, [4, 1, 3]),
    ("take", [X22, [1, 0]], {"axis": 1}, [[2, 1], [4, 3]]),
    ("take", [X22, [[-1, 9]]], {"axis": None}, [[1, 4]]),
    ("take", [X22, [[-1, 9]]], {"axis": 0}, [[[1, 2], [3, 4]]]),
    ("take", [X22, [5]], {"axis": -2}, [[3, 4]]),
    ("cvm_lut", [[[0, 5], [-3, 2]], [10, 20, 30]], {"in_dim": 3}, [[10, 30], [10, 30]]),
    ("cvm_lut", [[1, 2, 3], [[10, 20], [30, 40]]], {"in_dim": 4}, [20, 30, 40]),
    ("slice_like", [X34, [[0, 0], [0, 0]]], {}, [[1, 4], [2, 5]]),
    ("slice_like", [X34, [[0, 0], [0, 0]]], {"axis": (1,)}, [[1, 4], [2, 5], [3, 6]]),
    ("slice_like", [X34, [[0, 0], [0, 0]]], {"axis": (-2,)}, [[1, 4, 7, 10], [2, 5, 8, 11]]),
    ("slice_like", [X34, [0]], {}, [[1, 4, 7, 10]]),
    ("slice_like", [[1, 2, 3], [[0, 0], [0, 0]]], {}, [1, 2]),
]


@pytest.mark.parametrize("name, inputs, attrs, expected", HAND, ids=[f"{c[0]}-{i}" for i, c in enumerate(HAND)])
def test_hand_computed(name, inputs, attrs, expected):
    y = run(name, [a32(x) for x in inputs], attrs)
    assert y.shape == np.array(expected).shape
    assert y.tolist() == expected


# Every example of the MXNet reshape documentation (the runtime's op description).
RESHAPE_DOC = [
    ((2, 3, 4), (4, 0, 2), (4, 3, 2)),
    ((2, 3, 4), (2, 0, 0), (2, 3, 4)),
    ((2, 3, 4), (6, 1, -1), (6, 1, 4)),
    ((2, 3, 4), (3, -1, 8), (3, 1, 8)),
    ((2, 3, 4), (-1,), (24,)),
    ((2, 3, 4), (-2,), (2, 3, 4)),
    ((2, 3, 4), (2, -2), (2, 3, 4)),
    ((2, 3, 4), (-2, 1, 1), (2, 3, 4, 1, 1)),
    ((2, 3, 4), (-3, 4), (6, 4)),
    ((2, 3, 4, 5), (-3, -3), (6, 20)),
    ((2, 3, 4), (0, -3), (2, 12)),
    ((2, 3, 4), (-3, -2), (6, 4)),
    ((2, 3, 4), (-4, 1, 2, -2), (1, 2, 3, 4)),
    ((2, 3, 4), (2, -4, -1, 3, -2), (2, 1, 3, 4)),
    # -1 after -2, -3 or -4: the size goes where the -1 stands in the output (MXNet);
    # the runtime indexes its output by the position in the codes instead.
    ((2, 3), (-2, -1), (2, 3, 1)),
    ((2, 3, 4), (-3, -1), (6, 4)),
    ((6, 4), (-4, 2, 3, -1), (2, 3, 4)),
]


@pytest.mark.parametrize("src, codes, expected", RESHAPE_DOC)
def test_reshape_documented_codes(src, codes, expected):
    x = counting(src)
    y = run("reshape", [x], {"shape": codes})
    assert y.shape == expected
    assert np.array_equal(y.reshape(-1), x.reshape(-1))
    assert tuple(ref.reshape_shape(src, codes)) == expected


# -- the formalization's test-parameter grid ---------------------------------

GRID = [(1, j, l, r) for j in range(1, 93, 13) for l in range(1, 87, 17) for r in range(1, 94, 23)]


def test_grid_is_the_formalizations():
    assert len(GRID) == 240
    assert {s[1] for s in GRID} == {1, 14, 27, 40, 53, 66, 79, 92}
    assert {s[2] for s in GRID} == {1, 18, 35, 52, 69, 86}
    assert {s[3] for s in GRID} == {1, 24, 47, 70, 93}


def grid_cases(op: str):
    """(inputs, attrs, law) per grid shape; parameters from the formalization where it gives them."""
    axes4 = (0, 1, 2, 3, -1, -2, -3, -4)
    for g, shape in enumerate(GRID):
        x = counting(shape)
        i, j, l, r = shape
        if op == "repeat":
            axis = axes4[g % 8]
            yield [x], {"repeats": 2, "axis": axis}, ref.repeat_law(x, axis, 2)
        elif op == "tile":
            yield [x], {"reps": (2, 2, 3)}, ref.tile_law(x, (2, 2, 3))
        elif op == "flatten":
            yield [x], {}, ref.flatten_law(x)
        elif op == "concatenate":
            axis = axes4[g % 8]
            other = data(shape, seed=g)
            yield [x, other], {"axis": axis}, ref.concatenate_law([x, other], axis)
        elif op == "expand_dims":
            yield [x], {"axis": 2}, ref.expand_dims_law(x, 2, 1)
        elif op == "reshape":
            yield [x], {"shape": (r, l, j, i)}, ref.reshape_law(x, (r, l, j, i))
        elif op == "squeeze":
            axes = () if g % 2 else (0,)
            yield [x], {"axis": axes}, ref.squeeze_law(x, axes)
        elif op == "transpose":
            axes = () if g % 2 else (0, 3, 1, 2)
            yield [x], {"axes": axes}, ref.transpose_law(x, axes)
        elif op == "strided_slice":
            attrs = {"begin": (0, 0, -1, 0), "end": (1, 100, -100, 100), "stride": (1, 2, -1, 3)}
            yield [x], attrs, ref.strided_slice_law(x, attrs["begin"], attrs["end"], attrs["stride"])
        elif op == "take":
            idx = a32([[-2, 0, 5], [50, 7, 1000000]])
            axis = (None, 0, 1, 2, 3, -1)[g % 6]
            yield [x, idx], {"axis": axis}, ref.take_law(x, idx, axis)
        elif op == "cvm_lut":
            table = np.arange(-127, 128, dtype=np.int32)
            idx = x % 300 - 20
            yield [idx, table], {"in_dim": 255}, ref.cvm_lut_law(idx, table)
        elif op == "slice_like":
            like = np.zeros((1, (j + 1) // 2, 1, 1), dtype=np.int32)
            yield [x, like], {"axis": (0, 1)}, ref.slice_like_law(x, like.shape, (0, 1))


@pytest.mark.parametrize("op", [op.name for op in family(transform)])
def test_formalization_grid(op):
    for g, (inputs, attrs, law) in enumerate(grid_cases(op)):
        (y,) = cvmvm.run_op(op, inputs, attrs)
        assert_law_sampled(y, law, seed=g)


# -- reference kernels under hypothesis --------------------------------------------

def shapes(min_rank: int = 1, max_rank: int = 6, max_dim: int = 3):
    return st.lists(st.integers(1, max_dim), min_size=min_rank, max_size=max_rank).map(tuple)


seeds = st.integers(0, 2**32 - 1)


@SETTINGS
@given(shapes(), st.data(), st.integers(1, 3), seeds)
def test_repeat_matches_reference(shape, draw, repeats, seed):
    axis = draw.draw(st.integers(-len(shape), len(shape) - 1))
    x = data(shape, seed)
    assert_law(run("repeat", [x], {"repeats": repeats, "axis": axis}), ref.repeat_law(x, axis, repeats))


@SETTINGS
@given(shapes(), st.lists(st.integers(1, 3), min_size=1, max_size=6), seeds)
def test_tile_matches_reference(shape, reps, seed):
    law = ref.tile_law(np.zeros(shape, dtype=np.int32), reps)
    assume(law.count <= 3000)
    x = data(shape, seed)
    assert_law(run("tile", [x], {"reps": tuple(reps)}), ref.tile_law(x, reps))


@SETTINGS
@given(shapes(), seeds)
def test_flatten_matches_reference(shape, seed):
    x = data(shape, seed)
    assert_law(run("flatten", [x]), ref.flatten_law(x))


@SETTINGS
@given(shapes(), st.data(), seeds)
def test_concatenate_matches_reference(shape, draw, seed):
    axis = draw.draw(st.integers(-len(shape), len(shape) - 1))
    sizes = draw.draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
    real = axis % len(shape)
    xs = [data(shape[:real] + (n,) + shape[real + 1:], seed + k) for k, n in enumerate(sizes)]
    precisions = draw.draw(st.lists(st.integers(11, 32), min_size=len(xs), max_size=len(xs)))
    assert_law(run("concatenate", xs, {"axis": axis}, precisions), ref.concatenate_law(xs, axis))


@SETTINGS
@given(shapes(max_rank=5), st.data(), seeds)
def test_expand_dims_matches_reference(shape, draw, seed):
    n = len(shape)
    axis = draw.draw(st.integers(-n - 1, n))
    num = draw.draw(st.integers(1, 6 - n))
    x = data(shape, seed)
    assert_law(run("expand_dims", [x], {"axis": axis, "num_newaxis": num}), ref.expand_dims_law(x, axis, num))


@st.composite
def reshape_codes(draw, src):
    """Codes that describe the source shape: every special value, each used as MXNet means it."""
    codes: list[int] = []
    s = 0
    inferred = False
    while s < len(src):
        d = src[s]
        choices = ["keep", "size", "rest"] + (["merge"] if s + 1 < len(src) else []) + ["split"]
        if not inferred:
            choices.append("infer")
        move = draw(st.sampled_from(choices))
        if move == "keep":
            codes.append(0)
        elif move == "size":
            codes.append(d)
        elif move == "infer":
            codes.append(-1)
            inferred = True
        elif move == "rest":
            codes.append(-2)
            s = len(src)
            break
        elif move == "merge":
            codes.append(-3)
            s += 1
        else:
            d1 = draw(st.sampled_from([f for f in range(1, d + 1) if d % f == 0]))
            d2 = d // d1
            hide = draw(st.sampled_from(["none", "left", "right"]))
            codes += [-4, -1 if hide == "left" else d1, -1 if hide == "right" else d2]
        s += 1
    codes += [1] * draw(st.integers(0, 2))  # sizes past the source's end add unit axes
    return tuple(codes)


@MORE
@given(shapes(max_rank=4, max_dim=6), st.data(), seeds)
def test_reshape_codes_match_reference(shape, draw, seed):
    codes = draw.draw(reshape_codes(shape))
    expected = ref.reshape_shape(shape, codes)
    assume(len(expected) <= 6)
    x = data(shape, seed)
    assert_law(run("reshape", [x], {"shape": codes}), ref.reshape_law(x, codes))


@st.composite
def factorizations(draw, total):
    """An explicit target shape of the same size, with at most one size replaced by -1."""
    dims = []
    rest = total
    while rest > 1 and len(dims) < 5:
        f = draw(st.sampled_from([f for f in range(2, rest + 1) if rest % f == 0]))
        dims.append(f)
        rest //= f
    dims = dims + [rest] if rest > 1 or not dims else dims
    dims = draw(st.permutations(dims + [1] * draw(st.integers(0, 6 - len(dims)))))
    if draw(st.booleans()):
        dims[draw(st.integers(0, len(dims) - 1))] = -1
    return tuple(dims)


@MORE
@given(shapes(max_rank=6, max_dim=4), st.data(), seeds)
def test_reshape_explicit_sizes_match_reference(shape, draw, seed):
    codes = draw.draw(factorizations(ref.size_of(shape)))
    x = data(shape, seed)
    assert_law(run("reshape", [x], {"shape": codes}), ref.reshape_law(x, codes))


@SETTINGS
@given(shapes(), st.data(), seeds)
def test_squeeze_matches_reference(shape, draw, seed):
    n = len(shape)
    units = [i for i, d in enumerate(shape) if d == 1]
    chosen = draw.draw(st.lists(st.sampled_from(units), max_size=min(n + 1, 6))) if units else []
    axes = tuple(i - n if draw.draw(st.booleans()) else i for i in chosen)
    x = data(shape, seed)
    assert_law(run("squeeze", [x], {"axis": axes}), ref.squeeze_law(x, axes))


@SETTINGS
@given(shapes(), st.data(), seeds)
def test_transpose_matches_reference(shape, draw, seed):
    n = len(shape)
    axes: tuple[int, ...] = ()
    if draw.draw(st.booleans()):
        perm = draw.draw(st.permutations(range(n)))
        axes = tuple(p - n if draw.draw(st.booleans()) else p for p in perm)
    x = data(shape, seed)
    assert_law(run("transpose", [x], {"axes": axes}), ref.transpose_law(x, axes))


@MORE
@given(shapes(max_dim=5), st.data(), seeds)
def test_strided_slice_matches_reference_or_rejects_an_empty_range(shape, draw, seed):
    n = len(shape)
    bound = 2 * max(shape) + 2
    begin = tuple(draw.draw(st.lists(st.integers(-bound, bound), max_size=n)))
    end = tuple(draw.draw(st.lists(st.integers(-bound, bound), max_size=n)))
    stride = tuple(draw.draw(st.lists(st.integers(-3, 3).filter(bool), max_size=n)))
    x = data(shape, seed)
    attrs = {"begin": begin, "end": end, "stride": stride}
    law = ref.strided_slice_law(x, begin, end, stride)
    if all(d >= 1 for d in law.shape):
        assert_law(run("strided_slice", [x], attrs), law)
    else:
        assert rejection("strided_slice", [x], attrs) == "invalid.shape"


@SETTINGS
@given(shapes(max_rank=4), st.data(), seeds)
def test_take_matches_reference(shape, draw, seed):
    n = len(shape)
    axis = draw.draw(st.none() | st.integers(-n, n - 1))
    room = 6 if axis is None else 7 - n
    idx_shape = draw.draw(shapes(max_rank=min(room, 3)))
    x = data(shape, seed)
    idx = data(idx_shape, seed + 1, bound=ref.size_of(shape) + 3)
    assert_law(run("take", [x, idx], {"axis": axis}), ref.take_law(x, idx, axis))


@SETTINGS
@given(shapes(max_rank=3), shapes(max_rank=3, max_dim=5), seeds)
def test_cvm_lut_matches_reference(idx_shape, table_shape, seed):
    table = data(table_shape, seed)
    idx = data(idx_shape, seed + 1, bound=table.size + 3)
    assert_law(run("cvm_lut", [idx, table], {"in_dim": table.size}), ref.cvm_lut_law(idx, table))


@SETTINGS
@given(shapes(max_dim=4), st.integers(1, 6), st.data(), seeds)
def test_slice_like_matches_reference(shape, like_rank, draw, seed):
    n = len(shape)
    common = min(n, like_rank)
    chosen = draw.draw(st.lists(st.integers(0, common - 1), max_size=common + 1))
    sliced = set(chosen) if chosen else set(range(common))
    like_shape = tuple(draw.draw(st.integers(1, shape[j])) if j in sliced else draw.draw(st.integers(1, 4))
                       for j in range(like_rank))
    axes = tuple(j - n if draw.draw(st.booleans()) else j for j in chosen)
    x = data(shape, seed)
    like = np.zeros(like_shape, dtype=np.int32)
    assert_law(run("slice_like", [x, like], {"axis": axes}), ref.slice_like_law(x, like_shape, axes))


# -- must be rejected ----------------------------------------------------------

def z(*shape):
    return np.zeros(shape, dtype=np.int32)


REJECT = [
    # repeat
    ("repeat", [z(2, 3)], {"repeats": 2, "axis": 2}, "invalid.shape"),
    ("repeat", [z(2, 3)], {"repeats": 2, "axis": -3}, "invalid.shape"),
    ("repeat", [z(2, 3)], {"repeats": 0}, "invalid.attr"),
    ("repeat", [z(2, 3)], {"repeats": -1}, "invalid.attr"),
    ("repeat", [z(2, 3)], {}, "invalid.attr"),
    ("repeat", [z(2, 3)], {"repeats": True}, "invalid.attr"),
    ("repeat", [z(2, 3)], {"repeats": 2, "axes": 0}, "invalid.attr"),
    ("repeat", [z(2, 3)], {"repeats": (1 << 23) + 1, "axis": 0}, "limit.dim"),
    # tile
    ("tile", [z(2, 3)], {"reps": (2, 0)}, "invalid.attr"),
    ("tile", [z(2, 3)], {"reps": ()}, "invalid.attr"),
    ("tile", [z(2, 3)], {"reps": (4096,)}, "invalid.attr"),
    ("tile", [z(2, 3)], {"reps": (1,) * 7}, "invalid.attr"),
    ("tile", [z(2, 3)], {}, "invalid.attr"),
    ("tile", [z(2, 3)], {"reps": 2}, "invalid.attr"),
    # flatten
    ("flatten", [z(2, 3)], {"axis": 1}, "invalid.attr"),
    ("flatten", [z(2, 3), z(2, 3)], {}, "invalid.arity"),
    # concatenate
    ("concatenate", [z(2, 3), z(2, 3)], {"axis": 2}, "invalid.shape"),
    ("concatenate", [z(2, 3), z(2, 3)], {"axis": -3}, "invalid.shape"),
    ("concatenate", [z(2, 3), z(3, 3)], {"axis": 1}, "invalid.shape"),
    ("concatenate", [z(2, 3), z(2, 3, 1)], {"axis": 0}, "invalid.shape"),
    ("concatenate", [z(2, 3, 1), z(2, 3)], {"axis": 0}, "invalid.shape"),
    ("concatenate", [], {"axis": 0}, "invalid.arity"),
    # expand_dims
    ("expand_dims", [z(2, 3)], {"axis": 3}, "invalid.shape"),
    ("expand_dims", [z(2, 3)], {"axis": -4}, "invalid.shape"),
    ("expand_dims", [z(2, 3)], {}, "invalid.attr"),
    ("expand_dims", [z(2, 3)], {"axis": 0, "num_newaxis": -1}, "invalid.attr"),
    ("expand_dims", [z(2, 3)], {"axis": 0, "num_newaxis": 0}, "invalid.attr"),   # the runtime's lower bound
    ("expand_dims", [z(2, 3)], {"axis": 0, "num_newaxis": 4096}, "invalid.attr"),
    ("expand_dims", [z(2, 3)], {"axis": 0, "num_newaxis": 5}, "limit.rank"),
    # reshape
    ("reshape", [z(2, 3)], {"shape": (4, 2)}, "invalid.shape"),
    ("reshape", [z(2, 3)], {"shape": (-1, -1)}, "invalid.attr"),
    ("reshape", [z(2, 3)], {"shape": (-1, 2, -1)}, "invalid.attr"),
    ("reshape", [z(2, 3)], {"shape": ()}, "invalid.attr"),
    ("reshape", [z(2, 3)], {"shape": (-5, 6)}, "invalid.attr"),
    ("reshape", [z(2, 3)], {"shape": (-4, 2)}, "invalid.attr"),
    ("reshape", [z(2, 3)], {"shape": (-4, -1, -1, 3)}, "invalid.attr"),
    ("reshape", [z(2, 3)], {"shape": (-4, 0, 2, 3)}, "invalid.attr"),
    ("reshape", [z(2, 3)], {"shape": (-4, -2, 1, 3)}, "invalid.attr"),
    ("reshape", [z(2, 3)], {}, "invalid.attr"),
    ("reshape", [z(2, 3)], {"shape": (0, 0, 0)}, "invalid.shape"),
    ("reshape", [z(2, 3)], {"shape": (0, -3)}, "invalid.shape"),
    ("reshape", [z(6, 1)], {"shape": (-4, 4, -1, -2)}, "invalid.shape"),
    ("reshape", [z(6, 1)], {"shape": (-4, 2, 2, -2)}, "invalid.shape"),
    ("reshape", [z(6, 5)], {"shape": (-4, 2, 4, -1)}, "invalid.shape"),  # sizes agree, the split does not
    ("reshape", [z(2, 3)], {"shape": (4, -1)}, "invalid.shape"),
    ("reshape", [z(2, 3)], {"shape": (7, -1)}, "invalid.shape"),
    ("reshape", [z(2, 3)], {"shape": (-2, -2, 1, -1, 1, 1, 1)}, "limit.rank"),
    # squeeze
    ("squeeze", [z(2, 1, 3)], {"axis": (0,)}, "invalid.shape"),
    ("squeeze", [z(2, 1, 3)], {"axis": (1, 2)}, "invalid.shape"),
    ("squeeze", [z(2, 1, 3)], {"axis": (3,)}, "invalid.shape"),
    ("squeeze", [z(2, 1, 3)], {"axis": (-4,)}, "invalid.shape"),
    ("squeeze", [z(2, 1, 3)], {"axis": 1}, "invalid.attr"),
    # transpose
    ("transpose", [z(2, 3, 4)], {"axes": (0, 0, 2)}, "invalid.shape"),
    ("transpose", [z(2, 3, 4)], {"axes": (0, -3, 2)}, "invalid.shape"),
    ("transpose", [z(2, 3, 4)], {"axes": (1, 0)}, "invalid.shape"),
    ("transpose", [z(2, 3, 4)], {"axes": (0, 1, 2, 3)}, "invalid.shape"),
    ("transpose", [z(2, 3, 4)], {"axes": (0, 1, 3)}, "invalid.shape"),
    ("transpose", [z(2, 3, 4)], {"axes": (0, 1, -4)}, "invalid.shape"),
    # strided_slice
    ("strided_slice", [z(4, 5)], {"begin": (0, 0), "end": (2, 2), "stride": (1, 0)}, "invalid.attr"),
    ("strided_slice", [z(4, 5)], {"begin": (3, 0), "end": (1, 2)}, "invalid.shape"),
    ("strided_slice", [z(4, 5)], {"begin": (2,), "end": (2,)}, "invalid.shape"),
    ("strided_slice", [z(4, 5)], {"begin": (1,), "end": (3,), "stride": (-1,)}, "invalid.shape"),
    ("strided_slice", [z(4, 5)], {"begin": (4,), "end": (9,)}, "invalid.shape"),
    ("strided_slice", [z(4, 5)], {"begin": (-9,), "end": (-5,), "stride": (-1,)}, "invalid.shape"),
    ("strided_slice", [z(4, 5)], {"begin": (0, 5), "end": (4, 9)}, "invalid.shape"),
    # A negative stride with the default begin 0 and end n clamps to 0 > n - 1: nothing.
    ("strided_slice", [z(4, 5)], {"begin": (), "end": (), "stride": (-1,)}, "invalid.shape"),
    ("strided_slice", [z(4, 5)], {"end": (2, 2)}, "invalid.attr"),
    ("strided_slice", [z(4, 5)], {"begin": (0, 0)}, "invalid.attr"),
    # take
    ("take", [z(2, 3), z(2)], {"axis": 2}, "invalid.shape"),
    ("take", [z(2, 3), z(2)], {"axis": -3}, "invalid.shape"),
    ("take", [z(2, 3)], {}, "invalid.arity"),
    ("take", [z(2, 3, 3, 3), z(1, 1, 1, 1)], {"axis": 0}, "limit.rank"),
    # cvm_lut
    ("cvm_lut", [z(2, 3), z(8)], {"in_dim": 7}, "invalid.shape"),
    ("cvm_lut", [z(2, 3), z(2, 4)], {"in_dim": 4}, "invalid.shape"),
    ("cvm_lut", [z(2, 3), z(8)], {"in_dim": 0}, "invalid.attr"),
    ("cvm_lut", [z(2, 3), z(8)], {}, "invalid.attr"),
    ("cvm_lut", [z(2, 3)], {"in_dim": 6}, "invalid.arity"),
    # slice_like
    ("slice_like", [z(2, 3), z(3, 3)], {}, "invalid.shape"),
    ("slice_like", [z(2, 3), z(1, 4)], {"axis": (1,)}, "invalid.shape"),
    ("slice_like", [z(2, 3), z(1, 1)], {"axis": (2,)}, "invalid.shape"),
    ("slice_like", [z(2, 3), z(1, 1)], {"axis": (-3,)}, "invalid.shape"),
    ("slice_like", [z(2, 3, 4), z(1, 1)], {"axis": (2,)}, "invalid.shape"),
    ("slice_like", [z(2, 3, 4), z(1, 1)], {"axis": (-1,)}, "invalid.shape"),
    ("slice_like", [z(2, 3), z(1, 1, 1)], {"axis": (2,)}, "invalid.shape"),
]


@pytest.mark.parametrize("name, inputs, attrs, code", REJECT, ids=[f"{c[0]}-{i}" for i, c in enumerate(REJECT)])
def test_rejected(name, inputs, attrs, code):
    assert rejection(name, inputs, attrs) == code


@pytest.mark.parametrize("op", [op.name for op in family(transform)])
def test_non_int32_input_is_rejected(op):
    inputs = {"take": 2, "cvm_lut": 2, "slice_like": 2}.get(op, 1)
    attrs = {"repeat": {"repeats": 1}, "tile": {"reps": (1,)}, "expand_dims": {"axis": 0},
             "reshape": {"shape": (-1,)}, "strided_slice": {"begin": (), "end": ()},
             "cvm_lut": {"in_dim": 4}}.get(op, {})
    floats = [np.zeros((2, 2), dtype=np.float32)] + [np.zeros((2, 2), dtype=np.int32)] * (inputs - 1)
    with pytest.raises(cvmvm.CvmError) as e:
        cvmvm.run_op(op, floats, attrs)
    assert e.value.code == "invalid.dtype"
