"""Broadcasting binary ops, and where.

Shapes broadcast as in the formalization: right-align both shapes, pad the
shorter with leading 1s; on every axis the sizes match or one of them is 1,
and the output takes the larger.  Kernels compute in int32: each output
precision is at most 32 (verification checks it), and each rule below proves
the result and every intermediate fit within it.

The normative definition of each op here is its reference kernel,
isa/reference/broadcast.py (named in its OpDef); the kernels below are the fast
ones, tested against it under hypothesis.
"""

from __future__ import annotations

import numpy as np

from isa.errors import require
from isa.ops.elemwise import NoAttrs, carry_precision
from isa.reference import broadcast as reference
from isa.spec import OpDef, ScratchRule, fixed, no_scratch, strided_passes, unit_cost
from isa.types import Shape, TensorType, div_trunc


def broadcast_shape(a: NoAttrs, x: TensorType, y: TensorType) -> tuple[Shape, ...]:
    k = max(x.ndim, y.ndim)
    sx = (1,) * (k - x.ndim) + x.shape
    sy = (1,) * (k - y.ndim) + y.shape
    for i, (m, n) in enumerate(zip(sx, sy)):
        require(m == n or m == 1 or n == 1,
                f"shapes {x.shape} and {y.shape} do not broadcast: aligned axis {i} has {m} vs {n}")
    return (tuple(max(m, n) for m, n in zip(sx, sy)),)


def broadcast_scratch(out_bytes: int, in_bytes: tuple[int, ...] = (0, 0)) -> ScratchRule:
    """Temporaries of ``out_bytes`` per output element and in_bytes[k] per element of input k."""
    def scratch(a: NoAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
        return out_bytes * outputs[0].size + sum(n * t.size for n, t in zip(in_bytes, inputs))
    return scratch


def wider_precision(a: NoAttrs, x: TensorType, y: TensorType) -> tuple[int, ...]:
    return (max(x.precision, y.precision),)


# -- broadcast_add -----------------------------------------------------------

def broadcast_add_kernel(a: NoAttrs, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y = A + B; max(p0, p1) + 1 <= 32 bounds |A + B| by 2^31 - 2."""
    return (np.add(x, y),)


BROADCAST_ADD = OpDef("broadcast_add", NoAttrs, fixed("lhs", "rhs"), ("output",),
                      shape=broadcast_shape, precision=carry_precision, cost=unit_cost,
                      kernel=broadcast_add_kernel, reference=reference.broadcast_add,
                      work=strided_passes(1), scratch=no_scratch)


# -- broadcast_sub -----------------------------------------------------------

def broadcast_sub_kernel(a: NoAttrs, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y = A - B, bounded as broadcast_add."""
    return (np.subtract(x, y),)


BROADCAST_SUB = OpDef("broadcast_sub", NoAttrs, fixed("lhs", "rhs"), ("output",),
                      shape=broadcast_shape, precision=carry_precision, cost=unit_cost,
                      kernel=broadcast_sub_kernel, reference=reference.broadcast_sub,
                      work=strided_passes(1), scratch=no_scratch)


# -- broadcast_mul -----------------------------------------------------------

def broadcast_mul_precision(a: NoAttrs, x: TensorType, y: TensorType) -> tuple[int, ...]:
    """p0 + p1: |a * b| <= (2^(p0-1) - 1)(2^(p1-1) - 1) < 2^(p0+p1-1) - 1."""
    return (x.precision + y.precision,)


def broadcast_mul_kernel(a: NoAttrs, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y = A * B; p0 + p1 <= 32 bounds |A * B| below 2^30."""
    return (np.multiply(x, y),)


BROADCAST_MUL = OpDef("broadcast_mul", NoAttrs, fixed("lhs", "rhs"), ("output",),
                      shape=broadcast_shape, precision=broadcast_mul_precision, cost=unit_cost,
                      kernel=broadcast_mul_kernel, reference=reference.broadcast_mul,
                      work=strided_passes(1), scratch=no_scratch)


# -- broadcast_div -----------------------------------------------------------

def broadcast_div_precision(a: NoAttrs, x: TensorType, y: TensorType) -> tuple[int, ...]:
    return (x.precision,)                      # |a / b| <= |a|, and a / 0 = 0


def broadcast_div_kernel(a: NoAttrs, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y = A / B truncated toward zero, and A / 0 = 0 (SEMANTICS.md section 1), in int32."""
    return (div_trunc(x, y),)


BROADCAST_DIV = OpDef("broadcast_div", NoAttrs, fixed("lhs", "rhs"), ("output",),
                      shape=broadcast_shape, precision=broadcast_div_precision, cost=unit_cost,
                      kernel=broadcast_div_kernel, reference=reference.broadcast_div,
                      work=strided_passes(8), scratch=broadcast_scratch(2, (5, 10)))


# -- broadcast_max -----------------------------------------------------------

def broadcast_max_kernel(a: NoAttrs, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y = max(A, B)."""
    return (np.maximum(x, y),)


BROADCAST_MAX = OpDef("broadcast_max", NoAttrs, fixed("lhs", "rhs"), ("output",),
                      shape=broadcast_shape, precision=wider_precision, cost=unit_cost,
                      kernel=broadcast_max_kernel, reference=reference.broadcast_max,
                      work=strided_passes(1), scratch=no_scratch, in_range="selects input values")


# -- broadcast_greater -------------------------------------------------------

def broadcast_greater_precision(a: NoAttrs, x: TensorType, y: TensorType) -> tuple[int, ...]:
    """FIX (SEMANTICS.md section 2): max(p0, 2), since the output 1 needs precision 2."""
    return (max(x.precision, 2),)


def broadcast_greater_kernel(a: NoAttrs, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y = 1 where A > B, else 0."""
    return ((x > y).astype(np.int32),)


BROADCAST_GREATER = OpDef("broadcast_greater", NoAttrs, fixed("lhs", "rhs"), ("output",),
                          shape=broadcast_shape, precision=broadcast_greater_precision, cost=unit_cost,
                          kernel=broadcast_greater_kernel, reference=reference.broadcast_greater,
                          work=strided_passes(2), scratch=broadcast_scratch(1),
                          in_range="0 or 1, which every precision from 2 holds")


# -- where -------------------------------------------------------------------

def where_shape(a: NoAttrs, cond: TensorType, x: TensorType, y: TensorType) -> tuple[Shape, ...]:
    require(x.shape == y.shape, f"x shape {x.shape} and y shape {y.shape} must be identical")
    require(cond.shape == x.shape or cond.shape == x.shape[:1],
            f"condition shape {cond.shape} must be {x.shape} or ({x.shape[0]},)")
    return (x.shape,)


def where_precision(a: NoAttrs, cond: TensorType, x: TensorType, y: TensorType) -> tuple[int, ...]:
    """FIX (SEMANTICS.md section 2): max(p_x, p_y); the runtime takes the condition's."""
    return (max(x.precision, y.precision),)


def where_kernel(a: NoAttrs, cond: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y = X where COND != 0, else Y; a 1-D COND of length X.shape[0] picks whole rows (SEMANTICS.md section 4)."""
    mask = cond.reshape(cond.shape + (1,) * (x.ndim - cond.ndim)) != 0
    return (np.where(mask, x, y),)


WHERE = OpDef("where", NoAttrs, fixed("condition", "x", "y"), ("output",),
              shape=where_shape, precision=where_precision, cost=unit_cost, kernel=where_kernel,
              reference=reference.where,
              work=strided_passes(2), scratch=broadcast_scratch(0, (1, 0, 0)), in_range="selects input values")

