"""Elementwise ops: unary maps, same-shape binary arithmetic, clips and shifts.

Every op keeps its input's shape.  The binary ones require identical shapes;
broadcasting is broadcast.py's business.

Kernels compute in int32 wherever the verified precisions prove no
intermediate can leave it (the output precision is checked to be at most 32);
where that depends on more than the op's own rule, the op's ``plan`` decides
it at verification.  Clips pass int32 bounds: numpy's vectorized int32 clip
runs several times faster than ``np.maximum``/``np.minimum`` or Python-int
bounds (and the method skips a wrapper that costs more than a small tensor's clip).

The normative definition of each op here is its reference kernel,
isa/reference/elemwise.py (named in its OpDef); the kernels below are the fast
ones, tested against it under hypothesis.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from isa.attrs import ANY_BOOL, BOOL, INT, INT32_MAX, attr, between
from isa.errors import InvalidError, require
from isa.reference import elemwise as reference
from isa.spec import OpDef, fixed, no_scratch, per_output, same_precision, same_shape, scratch_per_output, unit_cost
from isa.types import (MAX_PRECISION, MIN_PRECISION, Shape, TensorType, clip_to_precision, number_precision,
                       precision_bound)


@dataclass(frozen=True)
class NoAttrs:
    """The record of every op that takes no attribute (Cortex op_attrs "{}")."""


def identical_shapes(a: NoAttrs, x: TensorType, y: TensorType) -> tuple[Shape, ...]:
    require(x.shape == y.shape, f"operand shapes {x.shape} and {y.shape} must be identical")
    return (x.shape,)


def carry_precision(a: NoAttrs, x: TensorType, y: TensorType) -> tuple[int, ...]:
    """max(p0, p1) + 1: a sum or difference of two values needs one bit more than the wider."""
    return (max(x.precision, y.precision) + 1,)


# -- relu --------------------------------------------------------------------

# numpy's int32 clip is vectorized and np.maximum against a scalar is not, but
# np.maximum costs half as much per call: below this many elements it is the faster.
SMALL_ELEMWISE = 2048
_ZERO, _INT32_MAX = np.int32(0), np.int32(INT32_MAX)


def relu_plan(a: NoAttrs, x: TensorType) -> str:
    return "maximum" if x.size <= SMALL_ELEMWISE else "clip"


def relu_kernel(a: NoAttrs, x: np.ndarray, *, plan: str) -> tuple[np.ndarray, ...]:
    """Y = max(X, 0)."""
    return (np.maximum(x, _ZERO) if plan == "maximum" else x.clip(_ZERO, _INT32_MAX),)


RELU = OpDef("relu", NoAttrs, fixed("data"), ("output",),
             shape=same_shape, precision=same_precision, cost=unit_cost, kernel=relu_kernel, plan=relu_plan,
             reference=reference.relu,
             work=per_output(1), scratch=no_scratch, in_range="max(X, 0): an input value or 0")


# -- abs ---------------------------------------------------------------------

def abs_kernel(a: NoAttrs, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y = |X|; cannot overflow because INT32_MIN is outside every precision."""
    return (np.abs(x),)


ABS = OpDef("abs", NoAttrs, fixed("data"), ("output",),
            shape=same_shape, precision=same_precision, cost=unit_cost, kernel=abs_kernel, reference=reference.abs_,
            work=per_output(1), scratch=no_scratch, in_range="|X| of a value within a symmetric range")


# -- negative ----------------------------------------------------------------

def negative_kernel(a: NoAttrs, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y = -X; the precision range is symmetric, so -X stays inside it."""
    return (np.negative(x),)


NEGATIVE = OpDef("negative", NoAttrs, fixed("data"), ("output",),
                 shape=same_shape, precision=same_precision, cost=unit_cost, kernel=negative_kernel,
                 reference=reference.negative,
                 work=per_output(1), scratch=no_scratch, in_range="-X of a value within a symmetric range")


# -- cvm_precision -----------------------------------------------------------

def cvm_precision_precision(a: NoAttrs, x: TensorType) -> tuple[int, ...]:
    return (6,)                                # results are at most 31, which 6 bits hold


# 2^0 .. 2^30: the number of these <= |x| is bitlen(|x|), for every |x| < 2^31.
_POWERS_OF_TWO = np.array([1 << k for k in range(31)], dtype=np.int64)


def cvm_precision_kernel(a: NoAttrs, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y = bitlen(|X|), and 1 where X = 0: the bits the magnitude needs."""
    bits = np.searchsorted(_POWERS_OF_TWO, np.abs(x.astype(np.int64)), side="right")
    return (np.maximum(bits, 1).astype(np.int32),)


CVM_PRECISION = OpDef("cvm_precision", NoAttrs, fixed("data"), ("output",),
                      shape=same_shape, precision=cvm_precision_precision, cost=unit_cost,
                      # a binary search per element, on int64 copies
                      work=per_output(40), scratch=scratch_per_output(16),
                      kernel=cvm_precision_kernel, reference=reference.cvm_precision,
                      in_range="searchsorted over 31 powers of two: 1 to 31")


# -- elemwise_add ------------------------------------------------------------

def elemwise_add_kernel(a: NoAttrs, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y = A + B; in int32, since max(p0, p1) + 1 <= 32 bounds |A + B| by 2^31 - 2."""
    return (np.add(x, y),)


ELEMWISE_ADD = OpDef("elemwise_add", NoAttrs, fixed("lhs", "rhs"), ("output",),
                     shape=identical_shapes, precision=carry_precision, cost=unit_cost,
                     kernel=elemwise_add_kernel, reference=reference.elemwise_add,
                     work=per_output(1), scratch=no_scratch)


# -- elemwise_sub ------------------------------------------------------------

def elemwise_sub_kernel(a: NoAttrs, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y = A - B; in int32 for the same reason as elemwise_add."""
    return (np.subtract(x, y),)


ELEMWISE_SUB = OpDef("elemwise_sub", NoAttrs, fixed("lhs", "rhs"), ("output",),
                     shape=identical_shapes, precision=carry_precision, cost=unit_cost,
                     kernel=elemwise_sub_kernel, reference=reference.elemwise_sub,
                     work=per_output(1), scratch=no_scratch)


# -- clip --------------------------------------------------------------------

@dataclass(frozen=True)
class ClipAttrs:
    a_min: int = attr(INT, between(-INT32_MAX, INT32_MAX))      # required, as in Cortex
    a_max: int = attr(INT, between(-INT32_MAX, INT32_MAX))

    def __post_init__(self) -> None:
        # A relation between two attributes: still an attribute error, whatever the inputs.
        if not self.a_min < self.a_max:
            raise InvalidError("attr", f"clip a_min={self.a_min} must be less than a_max={self.a_max}")


def clip_precision(a: ClipAttrs, x: TensorType) -> tuple[int, ...]:
    """The runtime's number_precision of the wider bound (off by one at 2^k - 1, kept: SEMANTICS.md section 2)."""
    return (number_precision(max(abs(a.a_min), abs(a.a_max))),)


def clip_kernel(a: ClipAttrs, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y = a_max where X >= a_max, a_min where X <= a_min, else X."""
    return (x.clip(np.int32(a.a_min), np.int32(a.a_max)),)


CLIP = OpDef("clip", ClipAttrs, fixed("data"), ("output",),
             shape=same_shape, precision=clip_precision, cost=unit_cost, kernel=clip_kernel, reference=reference.clip,
             work=per_output(1), scratch=no_scratch, in_range="clips to [a_min, a_max] last")


# -- cvm_clip ----------------------------------------------------------------

@dataclass(frozen=True)
class CvmClipAttrs:
    precision: int = attr(INT, between(MIN_PRECISION, MAX_PRECISION))     # required, as in Cortex
    # Kept and ignored, as by both Cortex devices: the CVM is signed throughout (docs/PARITY.md).
    is_sign: bool = attr(BOOL, ANY_BOOL, True)


def cvm_clip_precision(a: CvmClipAttrs, x: TensorType) -> tuple[int, ...]:
    return (a.precision,)


def cvm_clip_kernel(a: CvmClipAttrs, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y = clip(X, -(2^(p-1) - 1), 2^(p-1) - 1)."""
    bound = precision_bound(a.precision)
    return (x.clip(np.int32(-bound), np.int32(bound)),)


CVM_CLIP = OpDef("cvm_clip", CvmClipAttrs, fixed("data"), ("output",),
                 shape=same_shape, precision=cvm_clip_precision, cost=unit_cost, kernel=cvm_clip_kernel,
                 reference=reference.cvm_clip,
                 work=per_output(1), scratch=no_scratch, in_range="clips to the precision last")


# -- cvm_right_shift ---------------------------------------------------------

@dataclass(frozen=True)
class RightShiftAttrs:
    precision: int = attr(INT, between(MIN_PRECISION, MAX_PRECISION))     # required, as in Cortex
    shift_bit: int = attr(INT, between(1, 32))
    # Kept and ignored, as by both Cortex devices: the CVM is signed throughout (docs/PARITY.md).
    is_sign: bool = attr(BOOL, ANY_BOOL, True)


def right_shift_precision(a: RightShiftAttrs, x: TensorType) -> tuple[int, ...]:
    return (a.precision,)                      # the clip fixes the width


@dataclass(frozen=True)
class RightShiftPlan:
    """How cvm_right_shift runs in int32, from the input precision alone, with its int32 constants."""

    formula: str  # "add", "shift", "carry" or "clip-add" (right_shift_kernel)
    clip: bool    # the rounded range can exceed the output precision
    shift: np.int32
    half: np.int32   # the add formulas' 2^(b-1); the shift formula's b - 1
    low: np.int32    # where the clip binds: the output precision's range, or clip-add's input range
    high: np.int32

    def __str__(self) -> str:
        if self.formula == "clip-add":
            return "int32 add-round, clip first"
        return f"int32 {self.formula}-round, {'clip' if self.clip else 'no clip'}"


def right_shift_plan(a: RightShiftAttrs, x: TensorType) -> RightShiftPlan:
    top = precision_bound(x.precision)
    b = a.shift_bit
    half = 1 << (b - 1)
    bound = precision_bound(a.precision)
    # Rounding is monotone, so the extreme inputs give the extreme outputs.
    clip = (top + half) >> b > bound or (half - top) >> b < -bound
    if clip and a.precision + b <= 32:
        # Clipping X to [L, H], the widest range that rounds into [-bound, bound], gives the same
        # result (rounding is monotone), and X + 2^(b-1) then fits: (bound + 1) 2^b <= 2^31.
        return RightShiftPlan("clip-add", True, np.int32(b), np.int32(half), np.int32(-bound * (1 << b) - half),
                              np.int32(bound * (1 << b) + half - 1))
    if top + half <= INT32_MAX:
        formula, second = "add", half
    elif b >= 2:
        formula, second = "shift", b - 1
    else:
        formula, second = "carry", 1
    return RightShiftPlan(formula, clip, np.int32(b), np.int32(second), np.int32(-bound), np.int32(bound))


def right_shift_scratch(a: RightShiftAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    """The carry formula holds X's low bits beside the output."""
    return 4 * outputs[0].size if right_shift_plan(a, inputs[0]).formula == "carry" else 0


_ONE = np.int32(1)


def right_shift_kernel(a: RightShiftAttrs, x: np.ndarray, *, plan: RightShiftPlan) -> tuple[np.ndarray, ...]:
    """Y = clip(((X >> (b-1)) + 1) >> 1): divide by 2^b, round half toward +inf.

    ``>>`` here is numpy's right_shift on int32, an arithmetic shift: it copies the
    sign bit, so X >> k = floor(X / 2^k) for negative X too (C leaves the sign fill
    implementation-defined; every compiler numpy supports fills with the sign, and
    tests/test_ops_elemwise.py pins it on every platform the tests run on).
    The same floor three ways, all in int32 and none able to overflow:
    (X + 2^(b-1)) >> b when that sum fits ("add"); else, for b >= 2, the
    definition itself, since T = X >> (b-1) is at most 2^30 - 1 and T + 1 fits
    ("shift"); else (b = 1 on precision 32) X >> 1 plus X's low bit ("carry"),
    so X = 2^31 - 1 rounds to 2^30 instead of wrapping.  b >= 31 and p + b >= 32
    round and clip like every other case (SEMANTICS.md section 4).  When the
    clip binds and p + b <= 32, it comes first instead, on the input ("clip-add":
    right_shift_plan), and the add formula always fits after it.
    """
    if plan.formula == "clip-add":
        y = x.clip(plan.low, plan.high)
        np.add(y, plan.half, out=y)
        np.right_shift(y, plan.shift, out=y)
        return (y,)
    if plan.formula == "add":
        y = np.add(x, plan.half)
        np.right_shift(y, plan.shift, out=y)
    elif plan.formula == "shift":
        y = np.right_shift(x, plan.half)
        np.add(y, _ONE, out=y)
        np.right_shift(y, _ONE, out=y)
    else:
        y = np.right_shift(x, _ONE)
        np.add(y, np.bitwise_and(x, _ONE), out=y)
    if plan.clip:
        y.clip(plan.low, plan.high, out=y)
    return (y,)


CVM_RIGHT_SHIFT = OpDef("cvm_right_shift", RightShiftAttrs, fixed("data"), ("output",),
                        shape=same_shape, precision=right_shift_precision, cost=unit_cost,
                        work=per_output(2), scratch=right_shift_scratch,
                        kernel=right_shift_kernel, plan=right_shift_plan, reference=reference.cvm_right_shift,
                        in_range="clips to the precision last, or the plan proved the rounded range inside it")


# -- cvm_left_shift ----------------------------------------------------------

@dataclass(frozen=True)
class LeftShiftAttrs:
    precision: int = attr(INT, between(MIN_PRECISION, MAX_PRECISION))     # required, as in Cortex
    shift_bit: int = attr(INT, between(1, 32))
    # Kept and ignored, as by both Cortex devices: the CVM is signed throughout (docs/PARITY.md).
    is_sign: bool = attr(BOOL, ANY_BOOL, True)


def left_shift_precision(a: LeftShiftAttrs, x: TensorType) -> tuple[int, ...]:
    require(x.precision + a.shift_bit <= MAX_PRECISION,
            f"input precision {x.precision} + shift_bit {a.shift_bit} must be <= {MAX_PRECISION}")
    return (a.precision,)


def left_shift_kernel(a: LeftShiftAttrs, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y = clip(X * 2^b), a multiply and not ``<<``: C (and numpy, which compiles to it) leaves a
    left shift of a negative value undefined.  The factor is int64, since 2^31 is not an int32;
    p_in + b <= 32 bounds the product below 2^31 anyway."""
    y = np.multiply(x, np.int64(1 << a.shift_bit), dtype=np.int64)
    return (clip_to_precision(y, a.precision),)


CVM_LEFT_SHIFT = OpDef("cvm_left_shift", LeftShiftAttrs, fixed("data"), ("output",),
                       shape=same_shape, precision=left_shift_precision, cost=unit_cost,
                       kernel=left_shift_kernel, reference=reference.cvm_left_shift,
                       work=per_output(3), scratch=scratch_per_output(16),   # the int64 product and its clip
                       in_range="clips to the precision last")

