# Over 400 lines: twelve complete op blocks of one family, each read top to bottom.
"""Transform ops: they move, copy or select values and never compute new ones.

So every kernel is exact in int32 and every output keeps its source's precision
(input 0, except concatenate: the widest input, and cvm_lut: the table).  Shape
rules follow the Cortex runtime (src/cvm/top/tensor/transform.cc) with
SEMANTICS.md section 5 deciding.  The helpers a rule and its kernel share
(expanded_shape, squeezed_shape, ...) are pure arithmetic: the rule states its
checks before calling them, and reshape's codes, whose checks are interleaved
with their parsing, are parsed once at verification into a plan.  Shape
arithmetic is on Python ints, where ``//`` of non-negative operands is exact.

The normative definition of each op here is its reference kernel,
isa/reference/transform.py (named in its OpDef); the kernels below are the fast
ones, tested against it under hypothesis.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from isa.attrs import ANY_INT32, INT, INT32_MAX, INTS, OPT_INT, Domain, attr, between, each
from isa.errors import require
from isa.ops.elemwise import NoAttrs
from isa.reference import transform as reference
from isa.spec import OpDef, fixed, no_scratch, no_work, normalize_axis, same_precision, strided_passes, unit_cost
from isa.types import MAX_RANK, Shape, TensorType, shape_size

MAX_ATTR = 4096  # the formalization's max_attr: tile reps and num_newaxis stay below it
ANY_INT64 = between(-(1 << 63), (1 << 63) - 1)  # strided_slice bounds are int64 in Cortex


# -- repeat ------------------------------------------------------------------

@dataclass(frozen=True)
class RepeatAttrs:
    repeats: int = attr(INT, between(1, INT32_MAX))  # no default: required in Cortex too
    axis: int = attr(INT, ANY_INT32, 0)


def repeat_shape(a: RepeatAttrs, x: TensorType) -> tuple[Shape, ...]:
    axis = normalize_axis(a.axis, x.ndim, "repeat axis")
    return (x.shape[:axis] + (x.shape[axis] * a.repeats,) + x.shape[axis + 1:],)


def repeat_kernel(a: RepeatAttrs, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y[.., d, ..] = X[.., floor(d / repeats), ..] along axis."""
    return (np.repeat(x, a.repeats, axis=a.axis),)


REPEAT = OpDef("repeat", RepeatAttrs, fixed("data"), ("output",),
               shape=repeat_shape, precision=same_precision, cost=unit_cost, kernel=repeat_kernel,
               reference=reference.repeat,
               work=strided_passes(2), scratch=no_scratch, in_range="selects input values")


# -- tile --------------------------------------------------------------------

@dataclass(frozen=True)
class TileAttrs:
    # Cortex's default (0,) fails its own range check, so reps is required in effect.
    reps: tuple[int, ...] = attr(INTS, each(between(1, MAX_ATTR - 1), min_len=1))


def tile_shape(a: TileAttrs, x: TensorType) -> tuple[Shape, ...]:
    k = max(x.ndim, len(a.reps))
    dims = (1,) * (k - x.ndim) + x.shape
    reps = (1,) * (k - len(a.reps)) + a.reps
    return (tuple(d * r for d, r in zip(dims, reps)),)


def tile_scratch(a: TileAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    """np.tile repeats one axis at a time: the last two of its growing copies coexist."""
    return 4 * outputs[0].size


def tile_kernel(a: TileAttrs, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y[k] = X[k_{K-N+i} mod n_i ...]: both shapes right-aligned, padded with 1s."""
    return (np.tile(x, a.reps),)


TILE = OpDef("tile", TileAttrs, fixed("data"), ("output",),
             shape=tile_shape, precision=same_precision, cost=unit_cost, kernel=tile_kernel, reference=reference.tile,
             work=strided_passes(3), scratch=tile_scratch, in_range="selects input values")


# -- flatten -----------------------------------------------------------------

def flattened_shape(shape: Shape) -> Shape:
    """(n0, n1 * ... * n_{N-1}), as the runtime does; a 1-D input becomes (n0, 1)."""
    return (shape[0], shape_size(shape[1:]))


def flatten_shape(a: NoAttrs, x: TensorType) -> tuple[Shape, ...]:
    return (flattened_shape(x.shape),)


def flatten_kernel(a: NoAttrs, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Row-major order is kept: Y[d0, flatten_index(d1..)] = X[d0, d1, ..]."""
    return (x.reshape(flattened_shape(x.shape)),)


FLATTEN = OpDef("flatten", NoAttrs, fixed("data"), ("output",),
                shape=flatten_shape, precision=same_precision, cost=unit_cost, kernel=flatten_kernel,
                reference=reference.flatten,
                work=no_work, scratch=no_scratch, in_range="selects input values")


# -- concatenate -------------------------------------------------------------

@dataclass(frozen=True)
class ConcatenateAttrs:
    axis: int = attr(INT, ANY_INT32, 1)


def concatenate_inputs(a: ConcatenateAttrs) -> None:
    """Variadic: one or more inputs."""
    return None


def concatenate_shape(a: ConcatenateAttrs, *xs: TensorType) -> tuple[Shape, ...]:
    first = xs[0]
    axis = normalize_axis(a.axis, first.ndim, "concatenate axis")
    for i, x in enumerate(xs[1:], start=1):
        require(x.ndim == first.ndim, f"input {i} has shape {x.shape}; input 0 has rank {first.ndim}")
        for j, (m, n) in enumerate(zip(x.shape, first.shape)):
            require(j == axis or m == n,
                    f"input {i} shape {x.shape} differs from input 0 shape {first.shape} on axis {j} "
                    f"(only axis {axis} may differ)")
    total = sum(x.shape[axis] for x in xs)
    return (first.shape[:axis] + (total,) + first.shape[axis + 1:],)


def concatenate_precision(a: ConcatenateAttrs, *xs: TensorType) -> tuple[int, ...]:
    return (max(x.precision for x in xs),)


def concatenate_work(a: ConcatenateAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    """One strided pass over the output, and numpy's handling of each input."""
    return strided_passes(1)(a, inputs, outputs) + 200 * len(inputs)


def concatenate_kernel(a: ConcatenateAttrs, *xs: np.ndarray) -> tuple[np.ndarray, ...]:
    """Input i fills positions [sum of earlier sizes, + its size) along axis."""
    return (np.concatenate(xs, axis=a.axis),)


CONCATENATE = OpDef("concatenate", ConcatenateAttrs, concatenate_inputs, ("output",),
                    shape=concatenate_shape, precision=concatenate_precision, cost=unit_cost,
                    kernel=concatenate_kernel, reference=reference.concatenate,
                    work=concatenate_work, scratch=no_scratch, in_range="selects input values")


# -- expand_dims -------------------------------------------------------------

@dataclass(frozen=True)
class ExpandDimsAttrs:
    axis: int = attr(INT, ANY_INT32)  # no default: required in Cortex too
    # At least 1, as every version of the runtime's ExpandDimsParam declares (set_lower_bound(1)):
    # the runtime refuses 0 when it parses the graph, on both devices; the formalization's 0 is not
    # what the chain runs (docs/PARITY.md).
    num_newaxis: int = attr(INT, between(1, MAX_ATTR - 1), 1)


def expanded_shape(a: ExpandDimsAttrs, shape: Shape) -> Shape:
    # A negative axis counts from the end of the output, as in the runtime and
    # the reference vectors: -1 appends.  (The formalization's "axis + N" is a slip.)
    pos = a.axis + len(shape) + 1 if a.axis < 0 else a.axis
    return shape[:pos] + (1,) * a.num_newaxis + shape[pos:]


def expand_dims_shape(a: ExpandDimsAttrs, x: TensorType) -> tuple[Shape, ...]:
    require(-x.ndim - 1 <= a.axis <= x.ndim, f"expand_dims axis={a.axis} must be in [{-x.ndim - 1}, {x.ndim}]")
    return (expanded_shape(a, x.shape),)


def expand_dims_kernel(a: ExpandDimsAttrs, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """num_newaxis axes of size 1 inserted before input axis real_axis."""
    return (x.reshape(expanded_shape(a, x.shape)),)


EXPAND_DIMS = OpDef("expand_dims", ExpandDimsAttrs, fixed("data"), ("output",),
                    shape=expand_dims_shape, precision=same_precision, cost=unit_cost,
                    kernel=expand_dims_kernel, reference=reference.expand_dims,
                    work=no_work, scratch=no_scratch, in_range="selects input values")


# -- reshape -----------------------------------------------------------------

RESHAPE_MAX_CODES = 3 * MAX_RANK  # a -4 spends three entries on two axes


def _reshape_codes(target: tuple[int, ...]) -> bool:
    if not 1 <= len(target) <= RESHAPE_MAX_CODES:
        return False
    inferred = 0
    i = 0
    while i < len(target):
        code = target[i]
        if code < -4:
            return False
        if code == -1:
            inferred += 1
        if code == -4:
            if i + 2 >= len(target):
                return False
            d1, d2 = target[i + 1], target[i + 2]
            if not (d1 == -1 or d1 >= 1) or not (d2 == -1 or d2 >= 1) or d1 == d2 == -1:
                return False
            i += 2
        i += 1
    return inferred <= 1


RESHAPE_CODES = Domain(
    f"1 to {RESHAPE_MAX_CODES} entries, each a size >= 1 or an MXNet code 0, -1 (at most once), -2, -3, "
    "-4 (followed by two sizes, each >= 1 or -1, not both -1)", _reshape_codes)


@dataclass(frozen=True)
class ReshapeAttrs:
    shape: tuple[int, ...] = attr(INTS, RESHAPE_CODES)  # the formalization's target_shape


def reshape_target(target: tuple[int, ...], src: Shape) -> Shape:
    """The output shape of MXNet's reshape codes: a size >= 1 is taken as is; 0 copies
    the next source axis; -1 is inferred from the total size; -2 copies every remaining
    source axis; -3 merges the next two source axes; -4 splits the next source axis
    into the two sizes that follow it.  A size >= 1 and -1 also step over one source axis."""
    out: list[int] = []
    inferred = None
    s = 0  # next source axis
    i = 0
    while i < len(target):
        code = target[i]
        if code > 0:
            out.append(code)
            s += 1
        elif code == 0:
            require(s < len(src), f"shape={target}: entry {i} (0) copies source axis {s}, but {src} has {len(src)}")
            out.append(src[s])
            s += 1
        elif code == -1:
            # The runtime records the position in target, not in the output, and so
            # misplaces the inferred size after a -2, -3 or -4; MXNet's meaning is kept.
            inferred = len(out)
            out.append(1)
            s += 1
        elif code == -2:
            out.extend(src[s:])
            s = len(src)
        elif code == -3:
            require(s + 1 < len(src), f"shape={target}: entry {i} (-3) merges source axes {s} and {s + 1}, "
                                      f"but {src} has {len(src)}")
            out.append(src[s] * src[s + 1])
            s += 2
        else:
            require(s < len(src), f"shape={target}: entry {i} (-4) splits source axis {s}, but {src} has {len(src)}")
            d0 = src[s]
            s += 1
            d1, d2 = target[i + 1], target[i + 2]
            d1 = d0 // d2 if d1 == -1 else d1
            d2 = d0 // d1 if d2 == -1 else d2
            require(d1 * d2 == d0, f"shape={target}: entry {i} (-4) splits source size {d0} into {d1} x {d2}")
            out.extend((d1, d2))
            i += 2
        i += 1
    size = shape_size(src)
    if inferred is not None:
        out[inferred] = size // shape_size(tuple(out))
    require(shape_size(tuple(out)) == size,
            f"shape={target} gives {tuple(out)} of {shape_size(tuple(out))} elements; the input {src} has {size}")
    return tuple(out)


def reshape_shape(a: ReshapeAttrs, x: TensorType) -> tuple[Shape, ...]:
    return (reshape_target(a.shape, x.shape),)


def reshape_plan(a: ReshapeAttrs, x: TensorType) -> Shape:
    """The output shape, fixed at verification so that the kernel need not parse the codes."""
    return reshape_target(a.shape, x.shape)


def reshape_kernel(a: ReshapeAttrs, x: np.ndarray, *, plan: Shape) -> tuple[np.ndarray, ...]:
    """Y[d] = flatten(X)[flatten_index(d)]: row-major order is kept."""
    return (x.reshape(plan),)


RESHAPE = OpDef("reshape", ReshapeAttrs, fixed("data"), ("output",),
                shape=reshape_shape, precision=same_precision, cost=unit_cost, kernel=reshape_kernel,
                plan=reshape_plan, reference=reference.reshape,
                work=no_work, scratch=no_scratch, in_range="selects input values")


# -- squeeze -----------------------------------------------------------------

@dataclass(frozen=True)
class SqueezeAttrs:
    axis: tuple[int, ...] = attr(INTS, each(ANY_INT32), ())


def squeezed_shape(a: SqueezeAttrs, shape: Shape) -> Shape:
    # Repeated axes are one axis: the runtime and the formalization both take the set.
    if a.axis:
        dropped = {ax + len(shape) if ax < 0 else ax for ax in a.axis}
        kept = tuple(d for i, d in enumerate(shape) if i not in dropped)
    else:
        kept = tuple(d for d in shape if d != 1)
    return kept or (1,)


def squeeze_shape(a: SqueezeAttrs, x: TensorType) -> tuple[Shape, ...]:
    for ax in a.axis:
        i = normalize_axis(ax, x.ndim, "squeeze axis")
        require(x.shape[i] == 1, f"squeeze axis={ax} has size {x.shape[i]} in {x.shape}; it must be 1")
    return (squeezed_shape(a, x.shape),)


def squeeze_kernel(a: SqueezeAttrs, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Size-1 axes removed; row-major order is kept."""
    return (x.reshape(squeezed_shape(a, x.shape)),)


SQUEEZE = OpDef("squeeze", SqueezeAttrs, fixed("data"), ("output",),
                shape=squeeze_shape, precision=same_precision, cost=unit_cost, kernel=squeeze_kernel,
                reference=reference.squeeze,
                work=no_work, scratch=no_scratch, in_range="selects input values")


# -- transpose ---------------------------------------------------------------

@dataclass(frozen=True)
class TransposeAttrs:
    axes: tuple[int, ...] = attr(INTS, each(ANY_INT32), ())  # (): reverse the axes


def permutation(a: TransposeAttrs, ndim: int) -> tuple[int, ...]:
    if not a.axes:
        return tuple(range(ndim - 1, -1, -1))
    return tuple(ax + ndim if ax < 0 else ax for ax in a.axes)


def transpose_shape(a: TransposeAttrs, x: TensorType) -> tuple[Shape, ...]:
    if a.axes:
        require(len(a.axes) == x.ndim, f"transpose axes={a.axes} must have {x.ndim} entries for shape {x.shape}")
        for ax in a.axes:
            normalize_axis(ax, x.ndim, "transpose axis")
        perm = permutation(a, x.ndim)
        require(len(set(perm)) == x.ndim, f"transpose axes={a.axes} is not a permutation of {x.ndim} axes")
    return (tuple(x.shape[i] for i in permutation(a, x.ndim)),)


def transpose_kernel(a: TransposeAttrs, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y[d_{axes_0}, .., d_{axes_{N-1}}] = X[d_0, .., d_{N-1}]."""
    return (np.ascontiguousarray(np.transpose(x, permutation(a, x.ndim))),)


TRANSPOSE = OpDef("transpose", TransposeAttrs, fixed("data"), ("output",),
                  shape=transpose_shape, precision=same_precision, cost=unit_cost, kernel=transpose_kernel,
                  reference=reference.transpose,
                  work=strided_passes(5), scratch=no_scratch, in_range="selects input values")


# -- strided_slice -----------------------------------------------------------

@dataclass(frozen=True)
class StridedSliceAttrs:
    begin: tuple[int, ...] = attr(INTS, each(ANY_INT64))  # no default: required in Cortex too
    end: tuple[int, ...] = attr(INTS, each(ANY_INT64))
    stride: tuple[int, ...] = attr(INTS, each(Domain("a nonzero int64", lambda v: v != 0 and ANY_INT64(v))), ())


def slice_ranges(a: StridedSliceAttrs, shape: Shape) -> tuple[tuple[int, int, int], ...]:
    """(begin, end, stride) per axis, SEMANTICS.md section 5: missing entries are 0, n, 1;
    negative bounds get +n; then both are clamped to [0, n] for a positive stride and
    [-1, n-1] for a negative one.  Entries beyond the rank are ignored, as in the runtime."""
    ranges = []
    for i, n in enumerate(shape):
        b = a.begin[i] if i < len(a.begin) else 0
        e = a.end[i] if i < len(a.end) else n
        s = a.stride[i] if i < len(a.stride) else 1
        b = b + n if b < 0 else b
        e = e + n if e < 0 else e
        lo, hi = (-1, n - 1) if s < 0 else (0, n)
        ranges.append((min(max(b, lo), hi), min(max(e, lo), hi), s))
    return tuple(ranges)


def slice_length(begin: int, end: int, stride: int) -> int:
    """ceil(|end - begin| / |stride|)."""
    return (abs(end - begin) + abs(stride) - 1) // abs(stride)


def strided_slice_shape(a: StridedSliceAttrs, x: TensorType) -> tuple[Shape, ...]:
    ranges = slice_ranges(a, x.shape)
    for i, (b, e, s) in enumerate(ranges):
        require(e < b if s < 0 else b < e,
                f"strided_slice axis {i} of {x.shape}: begin={b}, end={e} (after wrapping and clamping) "
                f"select nothing with stride={s}")
    return (tuple(slice_length(b, e, s) for b, e, s in ranges),)


def strided_slice_kernel(a: StridedSliceAttrs, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y[d] = X[b_0 + s_0 d_0, .., b_{N-1} + s_{N-1} d_{N-1}]: one strided view, copied.

    Python's slice b:e:s picks the same slice_length(b, e, s) elements; a
    negative stride's end -1 (clamped: "through index 0") is written None.
    """
    view = tuple(slice(b, None if e < 0 else e, s) for b, e, s in slice_ranges(a, x.shape))
    return (np.ascontiguousarray(x[view]),)


STRIDED_SLICE = OpDef("strided_slice", StridedSliceAttrs, fixed("data"), ("output",),
                      shape=strided_slice_shape, precision=same_precision, cost=unit_cost,
                      kernel=strided_slice_kernel, reference=reference.strided_slice,
                      work=strided_passes(2), scratch=no_scratch, in_range="selects input values")


# -- take --------------------------------------------------------------------

@dataclass(frozen=True)
class TakeAttrs:
    axis: int | None = attr(OPT_INT, ANY_INT32, None)  # None: index the flattened data


def take_shape(a: TakeAttrs, x: TensorType, indices: TensorType) -> tuple[Shape, ...]:
    if a.axis is None:
        return (indices.shape,)
    axis = normalize_axis(a.axis, x.ndim, "take axis")
    return (x.shape[:axis] + indices.shape + x.shape[axis + 1:],)


def take_work(a: TakeAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    """The indices clipped, then one gather per output element."""
    return inputs[1].size + 4 * outputs[0].size


def take_scratch(a: TakeAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    """The clipped indices, as numpy's index type (8 bytes on a 64-bit host)."""
    return 8 * inputs[1].size


def take_kernel(a: TakeAttrs, x: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, ...]:
    """Indices are clipped to [0, n-1], never wrapped (SEMANTICS.md section 5).  They are clipped in
    numpy's index type, in place: indexing with int32 converts them to it again, a third copy."""
    n = x.size if a.axis is None else x.shape[a.axis]
    at = indices.astype(np.intp)
    np.clip(at, 0, n - 1, out=at)
    return (x.reshape(-1)[at],) if a.axis is None else (np.take(x, at, axis=a.axis),)


TAKE = OpDef("take", TakeAttrs, fixed("data", "indices"), ("output",),
             shape=take_shape, precision=same_precision, cost=unit_cost, kernel=take_kernel, reference=reference.take,
             work=take_work, scratch=take_scratch, in_range="selects input values")


# -- cvm_lut -----------------------------------------------------------------

@dataclass(frozen=True)
class CvmLutAttrs:
    in_dim: int = attr(INT, between(1, INT32_MAX))  # the table's size; no default in Cortex


def cvm_lut_shape(a: CvmLutAttrs, indices: TensorType, table: TensorType) -> tuple[Shape, ...]:
    require(table.size == a.in_dim, f"cvm_lut in_dim={a.in_dim} must equal the table size {table.size}")
    return (indices.shape,)


def cvm_lut_precision(a: CvmLutAttrs, indices: TensorType, table: TensorType) -> tuple[int, ...]:
    return (table.precision,)


def cvm_lut_work(a: CvmLutAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    return take_work(TakeAttrs(None), (inputs[1], inputs[0]), outputs)


def cvm_lut_scratch(a: CvmLutAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    return take_scratch(TakeAttrs(None), (inputs[1], inputs[0]), outputs)


def cvm_lut_kernel(a: CvmLutAttrs, indices: np.ndarray, table: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y = take(table, indices, axis=None)."""
    return take_kernel(TakeAttrs(None), table, indices)


CVM_LUT = OpDef("cvm_lut", CvmLutAttrs, fixed("indices", "table"), ("output",),
                shape=cvm_lut_shape, precision=cvm_lut_precision, cost=unit_cost, kernel=cvm_lut_kernel,
                reference=reference.cvm_lut,
                work=cvm_lut_work, scratch=cvm_lut_scratch, in_range="selects table values")


# -- slice_like --------------------------------------------------------------

@dataclass(frozen=True)
class SliceLikeAttrs:
    axis: tuple[int, ...] = attr(INTS, each(ANY_INT32), ())  # (): every axis both inputs have


def sliced_axes(a: SliceLikeAttrs, ndim: int, like_ndim: int) -> tuple[int, ...]:
    if a.axis:
        return tuple(ax + ndim if ax < 0 else ax for ax in a.axis)
    return tuple(range(min(ndim, like_ndim)))


def slice_like_shape(a: SliceLikeAttrs, x: TensorType, like: TensorType) -> tuple[Shape, ...]:
    for ax in a.axis:
        j = normalize_axis(ax, x.ndim, "slice_like axis")
        require(j < like.ndim, f"slice_like axis={ax} is axis {j}, but shape_like {like.shape} has {like.ndim}")
    out = list(x.shape)
    for j in sliced_axes(a, x.ndim, like.ndim):
        require(like.shape[j] <= x.shape[j],
                f"slice_like axis {j}: shape_like size {like.shape[j]} exceeds the data size {x.shape[j]}")
        out[j] = like.shape[j]
    return (tuple(out),)


def slice_like_kernel(a: SliceLikeAttrs, x: np.ndarray, like: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y[d] = X[d], d_j in [0, m_j) on the sliced axes."""
    window = [slice(None)] * x.ndim
    for j in sliced_axes(a, x.ndim, like.ndim):
        window[j] = slice(0, like.shape[j])
    return (np.ascontiguousarray(x[tuple(window)]),)


SLICE_LIKE = OpDef("slice_like", SliceLikeAttrs, fixed("data", "shape_like"), ("output",),
                   shape=slice_like_shape, precision=same_precision, cost=unit_cost, kernel=slice_like_kernel,
                   reference=reference.slice_like,
                   work=strided_passes(1), scratch=no_scratch, in_range="selects input values")

