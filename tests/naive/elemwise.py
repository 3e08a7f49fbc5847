"""Loop kernels for the elementwise ops, written from the formalization's formulas
with Python's unbounded ints, one element at a time.  Slow on purpose: they are
the oracle the real kernels are compared with."""

from __future__ import annotations

from typing import Callable

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


def relu(x: np.ndarray) -> np.ndarray:
    return _map(x, lambda v: v if v > 0 else 0)


def abs_(x: np.ndarray) -> np.ndarray:
    return _map(x, lambda v: v if v >= 0 else -v)


def negative(x: np.ndarray) -> np.ndarray:
    return _map(x, lambda v: -v)


def cvm_precision(x: np.ndarray) -> np.ndarray:
    """The least p >= 1 with |x| < 2^p (bitlen(|x|), and 1 for 0)."""
    def bits(v: int) -> int:
        p = 1
        while 2 ** p <= abs(v):
            p += 1
        return p
    return _map(x, bits)


def elemwise_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _map2(a, b, lambda u, v: u + v)


def elemwise_sub(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _map2(a, b, lambda u, v: u - v)


def clip(x: np.ndarray, a_min: int, a_max: int) -> np.ndarray:
    return _map(x, lambda v: _clip(v, a_min, a_max))


def cvm_clip(x: np.ndarray, precision: int) -> np.ndarray:
    alpha = _alpha(precision)
    return _map(x, lambda v: _clip(v, -alpha, alpha))


def cvm_right_shift(x: np.ndarray, precision: int, shift_bit: int) -> np.ndarray:
    """T = floor((floor(X / 2^(b-1)) + 1) / 2), then clip."""
    alpha = _alpha(precision)
    return _map(x, lambda v: _clip((v // 2 ** (shift_bit - 1) + 1) // 2, -alpha, alpha))


def cvm_left_shift(x: np.ndarray, precision: int, shift_bit: int) -> np.ndarray:
    """T = X * 2^b, then clip."""
    alpha = _alpha(precision)
    return _map(x, lambda v: _clip(v * 2 ** shift_bit, -alpha, alpha))
