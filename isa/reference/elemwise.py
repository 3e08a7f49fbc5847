"""Reference kernels of the elementwise ops: relu, abs, negative, cvm_precision,
elemwise_add/sub, clip, cvm_clip, cvm_right_shift, cvm_left_shift.

Written from the formalization's formulas with Python's unbounded ints, one
element at a time.  Slow on purpose: they are the normative definition the
fast kernels (isa/ops/elemwise.py) are tested against.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np


def _map(x: np.ndarray, f: Callable[[int], int]) -> np.ndarray:
    out = np.zeros(x.shape, dtype=np.int64)
    for idx in np.ndindex(*x.shape):
        out[idx] = f(int(x[idx]))
    return out


def _map2(x: np.ndarray, y: np.ndarray, f: Callable[[int, int], int]) -> np.ndarray:
    out = np.zeros(x.shape, dtype=np.int64)
    for idx in np.ndindex(*x.shape):
        out[idx] = f(int(x[idx]), int(y[idx]))
    return out


def _clip(v: int, lo: int, hi: int) -> int:
    if v >= hi:
        return hi
    if v <= lo:
        return lo
    return v


def _alpha(precision: int) -> int:
    return 2 ** (precision - 1) - 1


def relu(a: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    return (_map(x, lambda v: v if v > 0 else 0),)


def abs_(a: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    return (_map(x, lambda v: v if v >= 0 else -v),)


def negative(a: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    return (_map(x, lambda v: -v),)


def cvm_precision(a: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """The least p >= 1 with |x| < 2^p (bitlen(|x|), and 1 for 0)."""
    def bits(v: int) -> int:
        p = 1
        while 2 ** p <= abs(v):
            p += 1
        return p
    return (_map(x, bits),)


def elemwise_add(a: Any, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    return (_map2(x, y, lambda u, v: u + v),)


def elemwise_sub(a: Any, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    return (_map2(x, y, lambda u, v: u - v),)


def clip(a: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Attributes a_min, a_max."""
    return (_map(x, lambda v: _clip(v, a.a_min, a.a_max)),)


def cvm_clip(a: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Attribute precision: clip to [-(2^(p-1) - 1), 2^(p-1) - 1]."""
    alpha = _alpha(a.precision)
    return (_map(x, lambda v: _clip(v, -alpha, alpha)),)


def cvm_right_shift(a: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Attributes precision, shift_bit b: T = floor((floor(X / 2^(b-1)) + 1) / 2), then clip."""
    alpha = _alpha(a.precision)
    return (_map(x, lambda v: _clip((v // 2 ** (a.shift_bit - 1) + 1) // 2, -alpha, alpha)),)


def cvm_left_shift(a: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Attributes precision, shift_bit b: T = X * 2^b, then clip."""
    alpha = _alpha(a.precision)
    return (_map(x, lambda v: _clip(v * 2 ** a.shift_bit, -alpha, alpha)),)
