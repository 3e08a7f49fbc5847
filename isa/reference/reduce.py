"""Reference kernels of sum and max, from the formalization's four reduce cases.

T is ``axis`` with negatives + N; R = U - T with exclude, else T.  Case 1
(exclude, M = N): Y = X.  Case 2 (not exclude, M = 0): everything is reduced
into K = 1 (or N with keepdims) zero indices.  Case 3 (no keepdims): Y is
indexed by the kept axes I(0) < ... in order, each entry reducing X over every
index of the axes J(0) < ... in R.  Case 4 (keepdims): case 3's result put back
with a 0 index on each axis of R.  A result with no axis left has the
runtime's shape (1,).

Normative: the fast kernels (isa/ops/reduce.py) are tested against them.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np


def _reduce(op: str, x: np.ndarray, axis: tuple[int, ...] = (), keepdims: bool = False,
           exclude: bool = False) -> np.ndarray:
    n = x.ndim
    t = [i if i >= 0 else i + n for i in axis]
    assert len(set(t)) == len(t) and all(0 <= i < n for i in t)
    u = list(range(n))
    if exclude and len(t) == n:                                   # case 1
        return x.astype(np.int64)
    if not exclude and not t:                                     # case 2
        r = u
    else:
        r = [i for i in u if i not in t] if exclude else sorted(t)
    kept = [i for i in u if i not in r]                           # I(0) < I(1) < ...

    def fold(values: list[int]) -> int:
        if op == "sum":
            return sum(values)
        return max(values)                                        # the true max: no start value

    m_shape = tuple(x.shape[i] for i in kept)
    m = np.zeros(m_shape or (1,), dtype=np.int64)
    for d_kept in itertools.product(*(range(x.shape[i]) for i in kept)):
        values = []
        for d_red in itertools.product(*(range(x.shape[j]) for j in r)):   # J(0) < J(1) < ...
            d = [0] * n
            for i, v in zip(kept, d_kept):
                d[i] = v
            for j, v in zip(r, d_red):
                d[j] = v
            values.append(int(x[tuple(d)]))
        m[d_kept if kept else (0,)] = fold(values)
    if not keepdims:                                              # case 3 (and case 2 with K = 1)
        return m
    y = np.zeros(tuple(1 if i in r else x.shape[i] for i in u), dtype=np.int64)   # case 4
    for d_kept in itertools.product(*(range(x.shape[i]) for i in kept)):
        d = [0] * n
        for i, v in zip(kept, d_kept):
            d[i] = v
        y[tuple(d)] = m[d_kept if kept else (0,)]
    return y


def sum_(a: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Attributes axis, keepdims, exclude."""
    return (_reduce("sum", x, a.axis, a.keepdims, a.exclude),)


def max_(a: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Attributes axis, keepdims, exclude."""
    return (_reduce("max", x, a.axis, a.keepdims, a.exclude),)
