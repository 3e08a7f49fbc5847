"""pool ops: max_pool, MaxPool with indices (spec/MAXPOOL.md).

max_pool only selects, it never computes, so it is exact in every dtype it
takes, floats included.  The CVM's int32 max_pool2d is a different op (nn).

The normative definition of each op here is its reference kernel,
isa/reference/pool.py (named in its OpDef); the kernels below are the fast
ones, tested against it under hypothesis.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from isa.attrs import ANY_INT32, INT, INT32_MAX, INTS, STR, attr, between, each, one_of
from isa.errors import require
from isa.reference import pool as reference
from isa.spec import NUMPY_CALL, OpDef, fixed, normalize_axis
from isa.types import DTYPES, INT32, Shape, TensorType, bitlen, shape_size

# -- max_pool ----------------------------------------------------------------

AUTO_PADS = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")
VALUE_DTYPES = ("int8", "uint8", "int32", "float16", "float32", "float64")
INDEX_DTYPES = ("int64", "int32")


@dataclass(frozen=True)
class MaxPoolAttrs:
    # SONNX R2: every attribute is explicit in a model, so none has a default.
    kernel_shape: tuple[int, ...] = attr(INTS, each(between(1, INT32_MAX), 1, 3))
    strides: tuple[int, ...] = attr(INTS, each(between(1, INT32_MAX), 1, 3))
    dilations: tuple[int, ...] = attr(INTS, each(between(1, INT32_MAX), 1, 3))
    pads: tuple[int, ...] = attr(INTS, each(between(0, INT32_MAX), 2, 6))  # all begins, then all ends
    auto_pad: str = attr(STR, one_of(*AUTO_PADS))
    ceil_mode: int = attr(INT, one_of(0, 1))
    storage_order: int = attr(INT, one_of(0))  # 1 (column-major indices) is refused, SONNX R5
    index_axis: int = attr(INT, ANY_INT32)
    index_dtype: str = attr(STR, one_of(*INDEX_DTYPES))


def max_pool_geometry(a: MaxPoolAttrs, spatial: Shape) -> tuple[tuple[int, int], ...]:
    """(pads_begin, output size) per spatial axis, by MAXPOOL.md "Output size".

    The formulas say floor and ceil, so Python's floor division on exact ints
    is the intended rounding here (not the CVM's truncating division); a
    negative numerator must round down for O < 1 to be caught.
    """
    r = len(spatial)
    axes = []
    for i, size in enumerate(spatial):
        s = a.strides[i]
        extent = a.dilations[i] * (a.kernel_shape[i] - 1) + 1
        if a.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = -(-size // s)
            total = max(0, (out - 1) * s + extent - size)
            begin = total // 2 if a.auto_pad == "SAME_UPPER" else total - total // 2
        else:
            begin = a.pads[i]
            span = size + begin + a.pads[r + i] - extent
            if a.ceil_mode:
                out = -(-span // s) + 1
                if (out - 1) * s >= size + begin:  # that window would start inside the end padding
                    out -= 1
            else:
                out = span // s + 1
        axes.append((begin, out))
    return tuple(axes)


def _floor_sum(n: int, m: int, a: int, b: int) -> int:
    """sum(floor((a*i + b) / m) for i in range(n)), exact, in O(log) steps (Euclid-like reduction)."""
    total = 0
    while n > 0:
        qa, a = divmod(a, m)
        qb, b = divmod(b, m)
        total += qa * (n * (n - 1) // 2) + qb * n
        top = a * n + b
        if top < m:
            break
        n, b = divmod(top, m)
        m, a = a, m
    return total


def first_empty_window(size: int, k: int, s: int, d: int, begin: int, out: int) -> int | None:
    """The first output position on one axis whose taps all miss [0, size), or None.

    Window o has taps a + j*d with a = o*s - begin.  Positions can number in
    the billions for a hostile model, so this decides without visiting them:
    - a + (k-1)*d < 0 puts the whole window in the begin padding; a grows with o, so if any window is, window 0 is;
    - otherwise a window with a < 0 reaches 0, and its first tap >= 0 is a mod d: real iff a mod d < size
      (always when d <= size; else counted with floor sums, since [x mod d < size] =
      floor(x / d) - floor((x - size) / d) when size <= d);
    - a window with a >= 0 is real iff a < size.
    """
    if (k - 1) * d < begin:
        return 0
    first_past_end = -(-(begin + size) // s)

    def real_count(m: int) -> int:
        return _floor_sum(m, d, s, -begin) - _floor_sum(m, d, s, -begin - size)

    before_zero = min(out, -(-begin // s))
    if size < d and real_count(before_zero) < before_zero:
        lo, hi = 0, before_zero  # real_count(lo) == lo, real_count(hi) < hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if real_count(mid) < mid:
                hi = mid
            else:
                lo = mid
        return lo
    return first_past_end if first_past_end < out else None


def max_pool_dtypes(a: MaxPoolAttrs, x: TensorType) -> tuple[str, ...]:
    require(x.dtype in VALUE_DTYPES, f"X has dtype {x.dtype}; max_pool takes {', '.join(VALUE_DTYPES)}")
    return (x.dtype, a.index_dtype)


def _index_limit(a: MaxPoolAttrs, shape: Shape) -> int:
    """Indices are flat row-major positions over the axes from index_axis on, modulo this."""
    return shape_size(shape[normalize_axis(a.index_axis, len(shape), "index_axis"):])


def max_pool_shape(a: MaxPoolAttrs, x: TensorType) -> tuple[Shape, ...]:
    require(3 <= x.ndim <= 5, f"X has rank {x.ndim}; max_pool takes N, C and 1 to 3 spatial axes")
    r = x.ndim - 2
    for name in ("kernel_shape", "strides", "dilations"):
        n = len(getattr(a, name))
        require(n == r, f"{name} has {n} entries; X has {r} spatial axes")
    require(len(a.pads) == 2 * r, f"pads has {len(a.pads)} entries; X has {r} spatial axes, so {2 * r}")
    require(min(x.shape) >= 1, f"X shape {x.shape}: every axis must be >= 1")
    require(a.auto_pad == "NOTSET" or not any(a.pads),
            f"pads={a.pads} must be all zero with auto_pad={a.auto_pad}")
    require(not (a.auto_pad == "VALID" and a.ceil_mode), "auto_pad=VALID with ceil_mode=1 is refused")
    limit = _index_limit(a, x.shape)
    require(a.index_dtype != INT32 or limit <= INT32_MAX,
            f"int32 indices cannot hold positions up to {limit} (index_axis={a.index_axis})")
    geometry = max_pool_geometry(a, x.shape[2:])
    for i, ((begin, out), size) in enumerate(zip(geometry, x.shape[2:])):
        require(out >= 1, f"spatial axis {i}: output size {out} < 1")
        empty = first_empty_window(size, a.kernel_shape[i], a.strides[i], a.dilations[i], begin, out)
        require(empty is None, f"spatial axis {i}: output position {empty} has a window with no real tap")
    y = (*x.shape[:2], *(out for _, out in geometry))
    return (y, y)


def max_pool_precision(a: MaxPoolAttrs, x: TensorType) -> tuple[int | None, ...]:
    # Every int32 tensor carries a precision, int32 Indices too: the tightest
    # one holding the largest index.  int64 Indices and non-int32 Y carry none.
    index_precision = bitlen(_index_limit(a, x.shape) - 1) + 1 if a.index_dtype == INT32 else None
    return (x.precision, index_precision)


def max_pool_cost(a: MaxPoolAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    """Base = kernel volume, as for max_pool2d (SEMANTICS.md section 3)."""
    return math.prod(a.kernel_shape)


def real_taps(size: int, k: int, s: int, d: int, begin: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    """Per output position on one axis: the input coordinate of its first real tap, and its number
    of real taps.  A window's real taps are consecutive taps (tap j sits at o*s - begin + j*d), so they
    are first + t*d for t < count; the shape rule guarantees count >= 1."""
    start = np.arange(out, dtype=np.int64) * s - begin                      # tap 0 of each window
    first = np.where(start < 0, (-start + (d - 1)) // d, 0)                # first tap at coordinate >= 0
    last = np.minimum(k - 1, (size - 1 - start) // d)                       # last tap below size
    return start + first * d, last - first + 1


def most_real_taps(size: int, k: int, d: int) -> int:
    """At most this many taps of a window on one axis are real: k, and the window's
    taps d apart that fit in the input."""
    return min(k, (size - 1) // d + 1)


# Per tap loop iteration, per window: the tap's position and mask, the gather,
# the comparison, two masked copies.
MAX_POOL_TAP = 12
MAX_POOL_CALL = 12 * NUMPY_CALL


def max_pool_work(a: MaxPoolAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    """The tap loop runs over the taps real in some window (most_real_taps per axis), every
    window at once; then the winners' values and indices."""
    x, windows = inputs[0], outputs[0].size
    taps = math.prod(most_real_taps(size, k, d) for size, k, d in zip(x.shape[2:], a.kernel_shape, a.dilations))
    keys = 2 * x.size if x.dtype.startswith("float") else 0
    return taps * (MAX_POOL_TAP * windows + MAX_POOL_CALL) + keys + 8 * windows


def max_pool_scratch(a: MaxPoolAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    """Keys (floats with NaN as -inf), the best key, position, candidate and mask per window, one
    tap's positions, and the int64 flat indices before their cast."""
    x, windows = inputs[0], outputs[0].size
    item = DTYPES[x.dtype].itemsize
    keys = (item + 1) * x.size if x.dtype.startswith("float") else 0
    spatial = windows // (x.shape[0] * x.shape[1])
    return keys + windows * (2 * item + 8 + 1 + 16) + spatial * (16 + 1)


def max_pool_kernel(a: MaxPoolAttrs, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y, Indices: per window, the first real tap (row-major window order) with the maximal key.

    key(v) = -inf for NaN, else v; padding taps never compete.  Y gathers X at
    the winner (bit for bit, so -0.0 stays -0.0), except that a window whose
    real taps are all NaN or -inf gives -inf.  The loop is over the t-th real
    taps of the windows (real_taps), every window at once: a window's taps in
    row-major order are its real taps in t order, and t = 0 is real for every
    window, so the loop starts from it and visits only taps some window has.
    """
    n, c, *spatial = x.shape
    geometry = max_pool_geometry(a, tuple(spatial))
    out = tuple(o for _, o in geometry)
    planes = n * c
    flat = x.reshape(planes, shape_size(spatial))
    is_float = x.dtype.kind == "f"
    keys = np.where(np.isnan(flat), x.dtype.type(-np.inf), flat) if is_float else flat

    axes = []  # per axis: first real coordinate, real tap count, flat step, grid shape
    step = shape_size(spatial)
    for i, (size, (begin, o)) in enumerate(zip(spatial, geometry)):
        step //= size
        grid = [1] * len(out)
        grid[i] = o
        first, count = real_taps(size, a.kernel_shape[i], a.strides[i], a.dilations[i], begin, o)
        axes.append((first, count, step, tuple(grid), a.dilations[i], size))

    best_key = best_pos = None
    for number, combo in enumerate(itertools.product(*(range(int(ax[1].max())) for ax in axes))):
        pos = np.zeros(out, dtype=np.int64)
        real = None
        for t, (first, count, step, axis_grid, d, size) in zip(combo, axes):
            coord = np.minimum(first + t * d, size - 1)  # clamped where the tap is not real: masked below
            pos = pos + (coord * step).reshape(axis_grid)
            if t and not (count > t).all():
                mask = (count > t).reshape(axis_grid)
                real = mask if real is None else real & mask
        pos = pos.reshape(-1)
        candidate = np.take(keys, pos, axis=1)
        if number == 0:
            best_key, best_pos = candidate, np.broadcast_to(pos, (planes, pos.size)).copy()
            continue
        better = candidate > best_key  # strict: an equal later tap never displaces the first
        if real is not None:
            better &= np.broadcast_to(real, out).reshape(-1)
        np.copyto(best_key, candidate, where=better)
        np.copyto(best_pos, pos, where=better)

    y = np.take_along_axis(flat, best_pos, axis=1)
    if is_float:
        y = np.where(np.isnan(y), x.dtype.type(-np.inf), y)
    # Flat index in X is plane * plane_size + position; both are >= 0, so % is a plain remainder.
    plane_start = np.arange(planes, dtype=np.int64).reshape(planes, 1) * flat.shape[1]
    indices = (plane_start + best_pos) % np.int64(_index_limit(a, x.shape))
    return (y.reshape(n, c, *out), indices.astype(DTYPES[a.index_dtype]).reshape(n, c, *out))


MAX_POOL = OpDef("max_pool", MaxPoolAttrs, fixed("X"), ("Y", "Indices"),
                 shape=max_pool_shape, precision=max_pool_precision, cost=max_pool_cost,
                 kernel=max_pool_kernel, dtypes=max_pool_dtypes, reference=reference.max_pool,
                 work=max_pool_work, scratch=max_pool_scratch)
