"""Reference kernels of the transform ops, written straight from cvm-formalization.md.

Each op is stated as its formula reads, as a ``Law``: the output shape, and for
every point k of the formula's index range the output cell it defines and that
cell's value: ``Y[d] = X[g(d)]`` ranges over the output, ``Y[f(d)] = X[d]`` over
the input.  Plain Python ints and loops; nothing shared with isa/ops/transform.py.
Each op's reference kernel (at the end) materializes its law; tests also
sample the laws directly on large shapes.  Normative: the fast kernels are
tested against them.
``Law.materialize`` builds the whole output (checking that the formula writes
every cell exactly once); ``Law.cell`` evaluates one point, so that large
shapes can be checked on a sample.  Where SEMANTICS.md or the Cortex runtime
decides an open point the comment says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

Index = tuple[int, ...]


def size_of(shape: Sequence[int]) -> int:
    s = 1
    for n in shape:
        s *= n
    return s


def unravel(k: int, shape: Sequence[int]) -> Index:
    """The k-th index tuple of a shape in row-major order."""
    d = []
    for n in reversed(shape):
        k, r = divmod(k, n)
        d.append(r)
    return tuple(reversed(d))


def flatten_index(d: Index, shape: Sequence[int]) -> int:
    """d_0 * prod(n_1..) + d_1 * prod(n_2..) + ... + d_{N-1}."""
    return sum(di * size_of(shape[i + 1:]) for i, di in enumerate(d))


def real_axis(axis: int, n: int) -> int:
    return axis + n if axis < 0 else axis


def clip(v: int, lo: int, hi: int) -> int:
    return lo if v < lo else hi if v > hi else v


@dataclass(frozen=True)
class Law:
    shape: tuple[int, ...]
    count: int  # points of the formula's index range
    cell: Callable[[int], tuple[Index, int]]  # point k -> (output index, value)

    def materialize(self) -> np.ndarray:
        y = np.zeros(self.shape, dtype=np.int64)
        written = set()
        for k in range(self.count):
            where, value = self.cell(k)
            assert where not in written, f"cell {where} written twice"
            written.add(where)
            y[where] = value
        assert len(written) == y.size, "some output cells were never written"
        return y


def gather(shape: Sequence[int], value_at: Callable[[Index], int]) -> Law:
    """Y[d] = value_at(d) for every output index d."""
    shape = tuple(shape)

    def cell(k: int) -> tuple[Index, int]:
        d = unravel(k, shape)
        return d, value_at(d)

    return Law(shape, size_of(shape), cell)


def scatter(shape: Sequence[int], x: np.ndarray, place: Callable[[Index], Index]) -> Law:
    """Y[place(d)] = X[d] for every input index d."""
    def cell(k: int) -> tuple[Index, int]:
        d = unravel(k, x.shape)
        return place(d), int(x[d])

    return Law(tuple(shape), x.size, cell)


# -- each op's law -----------------------------------------------------------

def repeat_law(x: np.ndarray, axis: int, repeats: int) -> Law:
    ax = real_axis(axis, x.ndim)
    shape = [n * repeats if i == ax else n for i, n in enumerate(x.shape)]
    return gather(shape, lambda d: int(x[d[:ax] + (d[ax] // repeats,) + d[ax + 1:]]))


def tile_law(x: np.ndarray, reps: Sequence[int]) -> Law:
    n, m = x.ndim, len(reps)
    k = max(m, n)
    sx = [x.shape[p - k + n] if p >= k - n else 1 for p in range(k)]
    sr = [reps[q - k + m] if q >= k - m else 1 for q in range(k)]
    shape = [sx[i] * sr[i] for i in range(k)]
    return gather(shape, lambda kk: int(x[tuple(kk[k - n + i] % x.shape[i] for i in range(n))]))


def flatten_law(x: np.ndarray) -> Law:
    # The runtime's 2-D form (n0, n1 * ... * n_{N-1}); the element order is flatten_index.
    rest = size_of(x.shape[1:])

    def place(d: Index) -> Index:
        f = flatten_index(d, x.shape)
        return (f // rest, f % rest)

    return scatter((x.shape[0], rest), x, place)


def concatenate_law(xs: Sequence[np.ndarray], axis: int) -> Law:
    ax = real_axis(axis, xs[0].ndim)
    shape = list(xs[0].shape)
    shape[ax] = sum(x.shape[ax] for x in xs)

    def cell(k: int) -> tuple[Index, int]:
        i = 0
        while k >= xs[i].size:
            k -= xs[i].size
            i += 1
        d = unravel(k, xs[i].shape)
        new_idx = sum(xs[j].shape[ax] for j in range(i)) + d[ax]
        return d[:ax] + (new_idx,) + d[ax + 1:], int(xs[i][d])

    return Law(tuple(shape), sum(x.size for x in xs), cell)


def expand_dims_law(x: np.ndarray, axis: int, num_newaxis: int) -> Law:
    # A negative axis counts from the end of the output (the runtime and the
    # reference vectors: axis + N + 1); the formalization's "axis + N" is a slip.
    n = x.ndim
    real = axis if axis >= 0 else axis + n + 1
    shape = x.shape[:real] + (1,) * num_newaxis + x.shape[real:]
    return scatter(shape, x, lambda d: d[:real] + (0,) * num_newaxis + d[real:])


def reshape_shape(src: Sequence[int], target: Sequence[int]) -> list[int]:
    """MXNet's reshape codes, consumed one at a time (the runtime's ReshapeInferShape,
    with the inferred -1 placed at its position in the output)."""
    out: list[int] = []
    at = 0
    infer = None
    codes = list(target)
    while codes:
        c = codes.pop(0)
        if c > 0:
            out.append(c)
            at += 1
        elif c == 0:
            out.append(src[at])
            at += 1
        elif c == -1:
            infer = len(out)
            out.append(1)
            at += 1
        elif c == -2:
            out += list(src[at:])
            at = len(src)
        elif c == -3:
            out.append(src[at] * src[at + 1])
            at += 2
        elif c == -4:
            whole = src[at]
            at += 1
            a, b = codes.pop(0), codes.pop(0)
            if a == -1:
                a = whole // b
            if b == -1:
                b = whole // a
            out += [a, b]
    if infer is not None:
        out[infer] = size_of(src) // size_of(out)
    return out


def reshape_law(x: np.ndarray, target: Sequence[int]) -> Law:
    m = reshape_shape(x.shape, target)
    # T = flatten(X), T[flatten_index(e)] = X[e]: so T[t] = X[unravel(t)].
    return gather(m, lambda d: int(x[unravel(flatten_index(d, m), x.shape)]))


def squeeze_law(x: np.ndarray, axes: Sequence[int]) -> Law:
    n = x.ndim
    real = {real_axis(a, n) for a in axes} if axes else {a for a in range(n) if x.shape[a] == 1}
    keep = [i for i in range(n) if i not in real]  # I: the increasing map onto the kept axes
    if not keep:  # SEMANTICS.md section 5: an empty result becomes (1,)
        return scatter((1,), x, lambda d: (0,))
    return scatter([x.shape[i] for i in keep], x, lambda d: tuple(d[i] for i in keep))


def transpose_law(x: np.ndarray, axes: Sequence[int]) -> Law:
    n = x.ndim
    real = [real_axis(a, n) for a in axes] if axes else [n - 1 - i for i in range(n)]
    shape = [x.shape[real[i]] for i in range(n)]
    return scatter(shape, x, lambda d: tuple(d[real[i]] for i in range(n)))


def strided_slice_law(x: np.ndarray, begin: Sequence[int], end: Sequence[int], stride: Sequence[int]) -> Law:
    # Clamping as SEMANTICS.md section 5 (and the runtime): [0, n] for a positive
    # stride, [-1, n-1] for a negative one; the formalization's e_range - 1 upper
    # bound would drop the last element of a positive-stride slice.
    b_vec, s_arr, lengths = [], [], []
    for i, n in enumerate(x.shape):
        b = begin[i] if i < len(begin) else 0
        e = end[i] if i < len(end) else n
        s = stride[i] if i < len(stride) else 1
        b = b + n if b < 0 else b
        e = e + n if e < 0 else e
        lo, hi = (-1, n - 1) if s < 0 else (0, n)
        b, e = clip(b, lo, hi), clip(e, lo, hi)
        b_vec.append(b)
        s_arr.append(s)
        lengths.append(-((b - e) // s))  # ceil((e - b) / s)
    return gather(lengths, lambda d: int(x[tuple(b_vec[j] + s_arr[j] * d[j] for j in range(x.ndim))]))


def take_law(x: np.ndarray, idx: np.ndarray, axis: int | None) -> Law:
    if axis is None:
        last = x.size - 1  # T = flatten(X); T[t] = X[unravel(t)]
        return gather(idx.shape, lambda d: int(x[unravel(clip(int(idx[d]), 0, last), x.shape)]))
    n, m = x.ndim, idx.ndim
    ra = real_axis(axis, n)
    shape = x.shape[:ra] + idx.shape + x.shape[ra + 1:]

    def value_at(d: Index) -> int:
        xidx = clip(int(idx[d[ra:ra + m]]), 0, x.shape[ra] - 1)
        return int(x[d[:ra] + (xidx,) + d[ra + m:]])

    return gather(shape, value_at)


def cvm_lut_law(idx: np.ndarray, table: np.ndarray) -> Law:
    return take_law(table, idx, None)


def slice_like_law(x: np.ndarray, like_shape: Sequence[int], axes: Sequence[int]) -> Law:
    n, m = x.ndim, len(like_shape)
    # No axes: every axis both inputs have (the runtime; the formalization's
    # {0..M-1} would run past the data when M > N).
    real = {real_axis(a, n) for a in axes} if axes else set(range(min(n, m)))
    shape = [like_shape[j] if j in real else x.shape[j] for j in range(n)]
    return gather(shape, lambda d: int(x[d]))


# -- the reference kernels ------------------------------------------------------

def repeat(a: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    return (repeat_law(x, a.axis, a.repeats).materialize(),)


def tile(a: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    return (tile_law(x, a.reps).materialize(),)


def flatten(a: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    return (flatten_law(x).materialize(),)


def concatenate(a: Any, *xs: np.ndarray) -> tuple[np.ndarray, ...]:
    return (concatenate_law(xs, a.axis).materialize(),)


def expand_dims(a: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    return (expand_dims_law(x, a.axis, a.num_newaxis).materialize(),)


def reshape(a: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    return (reshape_law(x, a.shape).materialize(),)


def squeeze(a: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    return (squeeze_law(x, a.axis).materialize(),)


def transpose(a: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    return (transpose_law(x, a.axes).materialize(),)


def strided_slice(a: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    return (strided_slice_law(x, a.begin, a.end, a.stride).materialize(),)


def take(a: Any, x: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, ...]:
    return (take_law(x, indices, a.axis).materialize(),)


def cvm_lut(a: Any, indices: np.ndarray, table: np.ndarray) -> tuple[np.ndarray, ...]:
    return (cvm_lut_law(indices, table).materialize(),)


def slice_like(a: Any, x: np.ndarray, like: np.ndarray) -> tuple[np.ndarray, ...]:
    return (slice_like_law(x, like.shape, a.axis).materialize(),)
