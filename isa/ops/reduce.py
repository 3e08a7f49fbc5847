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

from isa.attrs import ANY_BOOL, ANY_INT32, BOOL, INTS, STR, attr, each, one_of
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
    # The runtime's output dtype attribute; the CVM computes in int32 only.
    dtype: str = attr(STR, one_of("int32"), "int32")


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
    total = np.sum(x, axis=reduced_axes(a, x.ndim), dtype=np.int32, keepdims=True)
    return (total.reshape(reduced_shape(a, x.shape)),)


SUM = OpDef("sum", ReduceAttrs, fixed("data"), ("output",),
            shape=reduce_shape, precision=sum_precision, cost=sum_cost, kernel=sum_kernel, reference=reference.sum_)


# -- max ---------------------------------------------------------------------

def max_kernel(a: ReduceAttrs, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y = the max over R of X: the true maximum, also of all-negative data (SEMANTICS.md section 4)."""
    top = np.max(x, axis=reduced_axes(a, x.ndim), keepdims=True)
    return (top.reshape(reduced_shape(a, x.shape)),)


MAX = OpDef("max", ReduceAttrs, fixed("data"), ("output",),
            shape=reduce_shape, precision=same_precision, cost=unit_cost, kernel=max_kernel, reference=reference.max_)

