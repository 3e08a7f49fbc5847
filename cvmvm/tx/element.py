"""One output element of one instruction: what it reads and what it is.

The on-chain verifier re-executes a single output element of a disputed
instruction (docs/FORMAT.md section 9).  This module is its Python twin, for
the ops the contract covers (``COVERED``): ``footprint`` lists, per input, the
row-major indices of the input elements output element ``I`` reads, in the
order the contract reads them; ``value`` computes the element from exactly
those values.  Step proofs carry only the chunks holding a footprint, and
``cvmvm check-step`` evaluates an element proof with ``value``.

Both are written from the formalization, one formula per element on Python
ints, and are tested against the VM's kernels and the reference kernels: they
are a second statement of the same semantics, not a fast path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from isa.ops.nn import pool_padding
from isa.ops.reduce import reduced_axes
from isa.types import Shape, TensorType, precision_bound

INT32_MIN = -(1 << 31)

Reads = tuple[np.ndarray, ...]   # per input: int64 row-major indices, in read order


def _coords(index: int, shape: Shape) -> list[int]:
    """Row-major flat index -> coordinates."""
    out = []
    for d in reversed(shape):
        out.append(index % d)
        index //= d
    return out[::-1]


def _flat(coords: Sequence[int], shape: Shape) -> int:
    index = 0
    for c, d in zip(coords, shape):
        index = index * d + c
    return index


def _one(index: int) -> np.ndarray:
    return np.array([index], dtype=np.int64)


# -- unary maps and identities: output element I reads input element I --------------

def _same(a: Any, ins: Sequence[TensorType], out: TensorType, index: int) -> Reads:
    return tuple(_one(index) for _ in ins)


def _round_shift(x: int, b: int) -> int:
    """Divide by 2^b, rounding half toward +inf: ((x >> (b-1)) + 1) >> 1 (Python's >> floors)."""
    return ((x >> (b - 1)) + 1) >> 1


def _clip(x: int, precision: int) -> int:
    bound = precision_bound(precision)
    return max(-bound, min(bound, x))


def _bits(x: int) -> int:
    return max(1, abs(x).bit_length())


UNARY: dict[str, Callable[[Any, int], int]] = {
    "relu": lambda a, x: max(x, 0),
    "abs": lambda a, x: abs(x),
    "negative": lambda a, x: -x,
    "cvm_precision": lambda a, x: _bits(x),
    "clip": lambda a, x: max(a.a_min, min(a.a_max, x)),
    "cvm_clip": lambda a, x: _clip(x, a.precision),
    "cvm_right_shift": lambda a, x: _clip(_round_shift(x, a.shift_bit), a.precision),
    "cvm_left_shift": lambda a, x: _clip(x * (1 << a.shift_bit), a.precision),
    "flatten": lambda a, x: x,
    "reshape": lambda a, x: x,
    "squeeze": lambda a, x: x,
    "expand_dims": lambda a, x: x,
}


def _div(x: int, y: int) -> int:
    """C division: truncates toward zero, and x / 0 = 0."""
    if y == 0:
        return 0
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


BINARY: dict[str, Callable[[int, int], int]] = {
    "elemwise_add": lambda x, y: x + y,
    "elemwise_sub": lambda x, y: x - y,
    "broadcast_add": lambda x, y: x + y,
    "broadcast_sub": lambda x, y: x - y,
    "broadcast_mul": lambda x, y: x * y,
    "broadcast_div": _div,
    "broadcast_max": max,
    "broadcast_greater": lambda x, y: int(x > y),
}


def _broadcast(a: Any, ins: Sequence[TensorType], out: TensorType, index: int) -> Reads:
    """Right-aligned broadcasting: an input axis of size 1 always reads coordinate 0."""
    c = _coords(index, out.shape)
    reads = []
    for t in ins:
        mine = c[len(c) - t.ndim:]
        reads.append(_one(_flat([0 if d == 1 else k for k, d in zip(mine, t.shape)], t.shape)))
    return tuple(reads)


# -- reductions --------------------------------------------------------------------

def _reduce_reads(a: Any, ins: Sequence[TensorType], out: TensorType, index: int) -> Reads:
    """Every input element whose unreduced coordinates are those of output element I, row-major."""
    shape = ins[0].shape
    axes = reduced_axes(a, len(shape))
    kept = [k for k in range(len(shape)) if k not in axes]
    c = _coords(index, out.shape)
    fixed = [c[k] for k in kept] if a.keepdims else c[:len(kept)]
    grids = [np.arange(shape[k], dtype=np.int64) if k in axes else np.array([fixed[kept.index(k)]], dtype=np.int64)
             for k in range(len(shape))]
    mesh = np.meshgrid(*grids, indexing="ij")
    return (np.ravel_multi_index(tuple(m.ravel() for m in mesh), shape).astype(np.int64),)


# -- conv2d and dense --------------------------------------------------------------

def _conv2d_reads(a: Any, ins: Sequence[TensorType], out: TensorType, index: int) -> Reads:
    """Input window (taps inside the input only) and the weights they meet, in (ky, kx, channel)
    order: the order of a channel-last window, which is how both are committed (section 9)."""
    x, w = ins[0], ins[1]
    n, o, oy, ox = _coords(index, out.shape)
    _, c, h, wd = x.shape
    oc, icg, kh, kw = w.shape
    first = (o // (oc // a.groups)) * icg
    xs, ws = [], []
    for ky in range(kh):
        r = oy * a.strides[0] - a.padding[0] + ky * a.dilation[0]
        if not 0 <= r < h:
            continue
        for kx in range(kw):
            s = ox * a.strides[1] - a.padding[1] + kx * a.dilation[1]
            if not 0 <= s < wd:
                continue
            for j in range(icg):
                xs.append(((n * c + first + j) * h + r) * wd + s)
                ws.append(((o * icg + j) * kh + ky) * kw + kx)
    reads = [np.array(xs, dtype=np.int64), np.array(ws, dtype=np.int64)]
    if len(ins) == 3:
        reads.append(_one(o))
    return tuple(reads)


def _dense_reads(a: Any, ins: Sequence[TensorType], out: TensorType, index: int) -> Reads:
    m, u = _coords(index, out.shape)
    k = ins[0].shape[1]
    reads = [np.arange(m * k, (m + 1) * k, dtype=np.int64), np.arange(u * k, (u + 1) * k, dtype=np.int64)]
    if len(ins) == 3:
        reads.append(_one(u))
    return tuple(reads)


def _dot(a: Any, values: Sequence[np.ndarray]) -> int:
    total = sum(int(p) * int(q) for p, q in zip(values[0].tolist(), values[1].tolist()))
    return total + (int(values[2][0]) if len(values) == 3 else 0)


# -- max_pool2d --------------------------------------------------------------------

def _pool_reads(a: Any, ins: Sequence[TensorType], out: TensorType, index: int) -> Reads:
    """The window's taps inside the input; taps in the padding hold INT32_MIN, which never wins
    (a verified window always holds at least one input element)."""
    n, ch, oy, ox = _coords(index, out.shape)
    _, c, h, wd = ins[0].shape
    ph, pw = pool_padding(a)
    taps = [((n * c + ch) * h + r) * wd + s
            for r in range(oy * a.strides[0] - ph, oy * a.strides[0] - ph + a.pool_size[0]) if 0 <= r < h
            for s in range(ox * a.strides[1] - pw, ox * a.strides[1] - pw + a.pool_size[1]) if 0 <= s < wd]
    return (np.array(taps, dtype=np.int64),)


@dataclass(frozen=True)
class ElementRule:
    reads: Callable[[Any, Sequence[TensorType], TensorType, int], Reads]
    value: Callable[[Any, Sequence[np.ndarray]], int]


def _unary(name: str) -> ElementRule:
    f = UNARY[name]
    return ElementRule(_same, lambda a, v: f(a, int(v[0][0])))


def _binary(name: str, reads: Callable[..., Reads]) -> ElementRule:
    f = BINARY[name]
    return ElementRule(reads, lambda a, v: f(int(v[0][0]), int(v[1][0])))


COVERED: dict[str, ElementRule] = {
    **{name: _unary(name) for name in UNARY},
    **{name: _binary(name, _same if name.startswith("elemwise") else _broadcast) for name in BINARY},
    "sum": ElementRule(_reduce_reads, lambda a, v: int(v[0].astype(np.int64).sum())),
    "max": ElementRule(_reduce_reads, lambda a, v: int(v[0].max())),
    "conv2d": ElementRule(_conv2d_reads, _dot),
    "dense": ElementRule(_dense_reads, _dot),
    "max_pool2d": ElementRule(_pool_reads, lambda a, v: int(v[0].max()) if v[0].size else INT32_MIN),
}


def footprint(op: str, attrs: Any, ins: Sequence[TensorType], out: TensorType, index: int) -> Reads:
    """Per input, the row-major indices output element ``index`` reads, in read order."""
    return COVERED[op].reads(attrs, ins, out, index)


def value(op: str, attrs: Any, values: Sequence[np.ndarray]) -> int:
    """Output element from the values at its footprint (same order), as an exact integer."""
    return COVERED[op].value(attrs, values)
