"""Reference kernel of max_pool, written straight from spec/MAXPOOL.md: one output position at a time.

Slow and obvious on purpose.  Normative: the fast kernel (isa/ops/pool.py) is
tested against it.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any

import numpy as np


class NoOutput(Exception):
    """MAXPOOL.md calls the configuration invalid: an output size < 1 or a window with no real tap."""


def output_geometry(spatial: tuple[int, ...], a: Any) -> list[tuple[int, int]]:
    """(pads_begin, O) per spatial axis: the "Output size" section, with exact fractions."""
    r = len(spatial)
    result = []
    for i, size in enumerate(spatial):
        k, s, d = a.kernel_shape[i], a.strides[i], a.dilations[i]
        ek = d * (k - 1) + 1
        if a.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = math.ceil(Fraction(size, s))
            total = max(0, (out - 1) * s + ek - size)
            begin = math.floor(Fraction(total, 2))
            if a.auto_pad == "SAME_LOWER":
                begin = total - begin
        else:
            begin, end = a.pads[i], a.pads[r + i]  # VALID: both 0
            if a.ceil_mode == 1:
                out = math.ceil(Fraction(size + begin + end - ek, s)) + 1
                if (out - 1) * s >= size + begin:
                    out -= 1
            else:
                out = math.floor(Fraction(size + begin + end - ek, s)) + 1
        if out < 1:
            raise NoOutput(f"axis {i}: output size {out}")
        result.append((begin, out))
    return result


def max_pool(a: Any, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rules 1-7 of "Values and indices", per output position and tap."""
    n, c, *spatial = x.shape
    geometry = output_geometry(tuple(spatial), a)
    out_shape = (n, c, *(o for _, o in geometry))
    y = np.empty(out_shape, dtype=x.dtype)
    indices = np.empty(out_shape, dtype=np.dtype(a.index_dtype))
    axis = a.index_axis % x.ndim
    modulus = math.prod(x.shape[axis:])
    is_float = x.dtype.kind == "f"

    def key(v: Any) -> Any:
        if is_float:
            f = float(v)
            return -math.inf if math.isnan(f) else f
        return int(v)

    for b, ch, *o in itertools.product(range(n), range(c), *(range(out) for _, out in geometry)):
        winner = None
        for j in itertools.product(*(range(k) for k in a.kernel_shape)):  # row-major window order
            p = [o[i] * a.strides[i] - geometry[i][0] + j[i] * a.dilations[i]
                 for i in range(len(spatial))]
            if not all(0 <= p[i] < spatial[i] for i in range(len(spatial))):
                continue  # padding never competes
            where = (b, ch, *p)
            if winner is None or key(x[where]) > key(x[winner]):
                winner = where
        if winner is None:
            raise NoOutput(f"window at {o} has no real tap")
        flat = 0
        for coord, dim in zip(winner, x.shape):
            flat = flat * dim + coord
        position = (b, ch, *o)
        y[position] = x.dtype.type(-math.inf) if key(x[winner]) == -math.inf and is_float else x[winner]
        indices[position] = flat % modulus
    return y, indices
