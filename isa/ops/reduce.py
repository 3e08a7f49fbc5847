"""Reductions over a set of axes: sum and max.

The formalization's reduce: ``axis`` names the set T (negatives count from the
end, no axis twice); R, the axes actually reduced, is U - T with ``exclude``,
else T, and all of U when T is empty and ``exclude`` is false.  ``keepdims``
leaves each reduced axis as size 1; otherwise they are dropped, and a result
with no axis left has shape (1,).

The normative definition of each op here is its reference kernel,
isa/reference/reduce.py (named in its OpDef); the kernels below are the fast
ones, tested against it under hypothesis.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from isa.attrs import ANY_BOOL, ANY_INT32, BOOL, INTS, RUNTIME_DTYPE_NAMES, STR, attr, each, one_of
from isa.errors import require
from isa.reference import reduce as reference
from isa.spec import OpDef, fixed, normalize_axis, same_precision, unit_cost
from isa.types import MAX_RANK, Shape, TensorType, bitlen, shape_size


@dataclass(frozen=True)
class ReduceAttrs:
    # Entries are checked against the input's rank in the shape rule.
    axis: tuple[int, ...] = attr(INTS, each(ANY_INT32, 0, MAX_RANK), ())
    keepdims: bool = attr(BOOL, ANY_BOOL, False)
    exclude: bool = attr(BOOL, ANY_BOOL, False)
    # The runtime's "target data type": any name of its dtype enum parses, and both
    # devices compute int32 whatever it says; kept and ignored (docs/PARITY.md).
    dtype: str = attr(STR, one_of(*RUNTIME_DTYPE_NAMES), "int32")


def reduced_axes(a: ReduceAttrs, ndim: int) -> tuple[int, ...]:
    """R, sorted, for an ``axis`` the shape rule has accepted."""
    given = {i + ndim if i < 0 else i for i in a.axis}
    if a.exclude:
        return tuple(i for i in range(ndim) if i not in given)
    return tuple(sorted(given)) if given else tuple(range(ndim))


def reduced_shape(a: ReduceAttrs, shape: Shape) -> Shape:
    r = reduced_axes(a, len(shape))
    if a.keepdims:
        return tuple(1 if i in r else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in r) or (1,)


def reduce_shape(a: ReduceAttrs, x: TensorType) -> tuple[Shape, ...]:
    normalized = [normalize_axis(i, x.ndim) for i in a.axis]
    require(len(set(normalized)) == len(normalized), f"axis={a.axis} names an axis of rank {x.ndim} twice")
    return (reduced_shape(a, x.shape),)


# -- how both reductions run ------------------------------------------------------
#
# numpy reduces a matrix in one C loop per outer row, ~30 ns each: reducing the
# last axis of (2^22, 2) costs 11 ns per element, two interleaved axes 20.  So
# the kernels see X as a matrix of reduced x kept elements (or kept x
# reduced), reduce whichever is a view with few outer rows, or else copy X into
# the one with fewer outer rows.  Integer sums and maxima do not depend on order.

REDUCE_ROW = 60   # work units per outer row of the matrix
REDUCE_COPY = 6   # per element of a transposing copy (its strides may defeat the cache)


@dataclass(frozen=True)
class ReduceLayout:
    order: tuple[int, ...]     # X's axes, permuted: reduced ones first (axis 0) or last (axis 1)
    matrix: tuple[int, int]    # (reduced, kept) or (kept, reduced) elements
    axis: int                  # the matrix axis reduced
    copy: bool                 # the permuted X is copied into the matrix (no view of it exists)

    def work(self) -> int:
        rows, cols = self.matrix
        return rows * cols * (1 + (REDUCE_COPY if self.copy else 0)) + REDUCE_ROW * rows


def reduce_layout(a: ReduceAttrs, shape: Shape) -> ReduceLayout:
    r = reduced_axes(a, len(shape))
    kept = tuple(i for i in range(len(shape)) if i not in r)
    terms = shape_size(tuple(shape[i] for i in r))
    outs = shape_size(shape) // terms
    candidates = []
    for order, matrix, axis in ((r + kept, (terms, outs), 0), (kept + r, (outs, terms), 1)):
        moved = [i for i in order if shape[i] != 1]
        candidates.append(ReduceLayout(order, matrix, axis, moved != sorted(moved)))
    # The cheapest by the cost model, ties to the first listed: it decides the
    # kernel, so it is a static choice, never the data's.
    return min(candidates, key=ReduceLayout.work)


def reduce_work(a: ReduceAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    return reduce_layout(a, inputs[0].shape).work()


def reduce_scratch(a: ReduceAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    return 4 * inputs[0].size if reduce_layout(a, inputs[0].shape).copy else 0


def reduce_matrix(a: ReduceAttrs, x: np.ndarray) -> tuple[np.ndarray, int]:
    """X as its layout's matrix, and the axis to reduce."""
    layout = reduce_layout(a, x.shape)
    moved = np.transpose(x, layout.order)
    if layout.copy:
        moved = np.ascontiguousarray(moved)
    return moved.reshape(layout.matrix), layout.axis


# -- sum ---------------------------------------------------------------------

def sum_precision(a: ReduceAttrs, x: TensorType) -> tuple[int, ...]:
    """p_in + bitlen(k), k = in.size / out.size terms per output: |sum| <= k (2^(p-1) - 1) < 2^(p-1+bitlen(k))."""
    terms = x.size // shape_size(reduced_shape(a, x.shape))
    return (x.precision + bitlen(terms),)


def sum_cost(a: ReduceAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    return inputs[0].size // outputs[0].size   # one addition per term (SEMANTICS.md section 3)


def sum_kernel(a: ReduceAttrs, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y = the sum over R of X, in int32: p_in + bitlen(k) <= 32 bounds every partial sum below 2^31
    (and integer addition does not depend on order)."""
    matrix, axis = reduce_matrix(a, x)
    return (np.add.reduce(matrix, axis=axis, dtype=np.int32).reshape(reduced_shape(a, x.shape)),)


SUM = OpDef("sum", ReduceAttrs, fixed("data"), ("output",),
            shape=reduce_shape, precision=sum_precision, cost=sum_cost, kernel=sum_kernel, reference=reference.sum_,
            work=reduce_work, scratch=reduce_scratch)


# -- max ---------------------------------------------------------------------

def max_kernel(a: ReduceAttrs, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y = the max over R of X: the true maximum, also of all-negative data (SEMANTICS.md section 4)."""
    matrix, axis = reduce_matrix(a, x)
    return (np.maximum.reduce(matrix, axis=axis).reshape(reduced_shape(a, x.shape)),)


MAX = OpDef("max", ReduceAttrs, fixed("data"), ("output",),
            shape=reduce_shape, precision=same_precision, cost=unit_cost, kernel=max_kernel, reference=reference.max_,
            work=reduce_work, scratch=reduce_scratch, in_range="selects input values")

