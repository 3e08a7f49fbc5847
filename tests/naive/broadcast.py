"""Loop kernels for the broadcast ops and where, from the formalization's index
formulas: extend both shapes to K axes with leading 1s, and read A at
a_i = min(d_i, SA_i - 1), B at b_i = min(d_i, SB_i - 1)."""

from __future__ import annotations

from typing import Callable

import numpy as np


def _c_div(a: int, b: int) -> int:
    """C division: the quotient truncated toward zero; x / 0 = 0."""
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


OPS: dict[str, Callable[[int, int], int]] = {
    "broadcast_add": lambda a, b: a + b,
    "broadcast_sub": lambda a, b: a - b,
    "broadcast_mul": lambda a, b: a * b,
    "broadcast_div": _c_div,
    "broadcast_max": lambda a, b: a if a >= b else b,
    "broadcast_greater": lambda a, b: 1 if a > b else 0,
}


def broadcast(name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """BROADCAST_OP(A, B); asserts the shapes broadcast (this is an oracle, not a validator)."""
    k = max(a.ndim, b.ndim)
    sa = (1,) * (k - a.ndim) + a.shape
    sb = (1,) * (k - b.ndim) + b.shape
    assert all(m == n or m == 1 or n == 1 for m, n in zip(sa, sb))
    out_shape = tuple(max(m, n) for m, n in zip(sa, sb))
    av, bv = a.reshape(sa), b.reshape(sb)
    f = OPS[name]
    out = np.zeros(out_shape, dtype=np.int64)
    for d in np.ndindex(*out_shape):
        ai = tuple(min(di, s - 1) for di, s in zip(d, sa))
        bi = tuple(min(di, s - 1) for di, s in zip(d, sb))
        out[d] = f(int(av[ai]), int(bv[bi]))
    return out


def where(cond: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Y[d] = X[d] if the condition for d is nonzero else Y[d]; a 1-D condition is indexed by d_0."""
    out = np.zeros(x.shape, dtype=np.int64)
    for d in np.ndindex(*x.shape):
        c = int(cond[d]) if cond.shape == x.shape else int(cond[d[0]])
        out[d] = int(x[d]) if c != 0 else int(y[d])
    return out
