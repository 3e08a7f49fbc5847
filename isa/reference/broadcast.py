"""Reference kernels of the broadcast ops and where, from the formalization's index
formulas: extend both shapes to K axes with leading 1s, and read A at
a_i = min(d_i, SA_i - 1), B at b_i = min(d_i, SB_i - 1).

Normative: the fast kernels (isa/ops/broadcast.py) are tested against them.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np


def _c_div(a: int, b: int) -> int:
    """C division: the quotient truncated toward zero; x / 0 = 0."""
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _broadcast(f: Callable[[int, int], int], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """BROADCAST_OP(A, B) for the shapes the shape rule accepted."""
    k = max(a.ndim, b.ndim)
    sa = (1,) * (k - a.ndim) + a.shape
    sb = (1,) * (k - b.ndim) + b.shape
    assert all(m == n or m == 1 or n == 1 for m, n in zip(sa, sb))
    out_shape = tuple(max(m, n) for m, n in zip(sa, sb))
    av, bv = a.reshape(sa), b.reshape(sb)
    out = np.zeros(out_shape, dtype=np.int64)
    for d in np.ndindex(*out_shape):
        ai = tuple(min(di, s - 1) for di, s in zip(d, sa))
        bi = tuple(min(di, s - 1) for di, s in zip(d, sb))
        out[d] = f(int(av[ai]), int(bv[bi]))
    return out


def broadcast_add(a: Any, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    return (_broadcast(lambda u, v: u + v, x, y),)


def broadcast_sub(a: Any, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    return (_broadcast(lambda u, v: u - v, x, y),)


def broadcast_mul(a: Any, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    return (_broadcast(lambda u, v: u * v, x, y),)


def broadcast_div(a: Any, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    return (_broadcast(_c_div, x, y),)


def broadcast_max(a: Any, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    return (_broadcast(lambda u, v: u if u >= v else v, x, y),)


def broadcast_greater(a: Any, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    return (_broadcast(lambda u, v: 1 if u > v else 0, x, y),)


def where(a: Any, cond: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y[d] = X[d] if the condition for d is nonzero else Y[d]; a 1-D condition is indexed by d_0."""
    out = np.zeros(x.shape, dtype=np.int64)
    for d in np.ndindex(*x.shape):
        c = int(cond[d]) if cond.shape == x.shape else int(cond[d[0]])
        out[d] = int(x[d]) if c != 0 else int(y[d])
    return (out,)
