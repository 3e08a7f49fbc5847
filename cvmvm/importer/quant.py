"""The quantizer's arithmetic: scales, weights, and integer rescaling plans.

A quantized tensor holds integers q whose float meaning is q * scale, one
scale per tensor (symmetric, zero point 0).  Weights take one scale per output
channel.  Every change of scale in the program is an integer multiply followed
by ``cvm_right_shift`` (round half up, then clip):

    y = clip(round((sum_i x_i * m_i + o) / 2^s2))          (``plan_rescale``)

optionally after a pre-shift of a single wide operand (an accumulator), so that
every intermediate provably fits the 32-bit precision rules.  All of it is
float64 arithmetic on calibration statistics, in a fixed order, with exact
rounding: the same statistics give the same integers on every platform.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from isa.errors import InvalidError
from isa.types import MAX_PRECISION, bitlen, precision_bound, round_half_away

MAX_SHIFT = 32  # cvm_right_shift's shift_bit domain is [1, 32]


def activation_scale(peak: float, precision: int) -> float:
    """The scale that maps the calibrated max |x| onto the largest value of ``precision``.

    An all-zero tensor gets scale 1: any scale represents it exactly.
    """
    return float(peak) / precision_bound(precision) if peak > 0 else 1.0


def quantize_weights(w: np.ndarray, precision: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel (axis 0) symmetric quantization: (int32 values, float64 scale per channel).

    A channel of zeros takes the largest scale of the others (1 if all are
    zero), so that its bias stays representable at the common accumulator
    precision.
    """
    w = np.asarray(w, dtype=np.float64)
    peak = np.max(np.abs(w.reshape(w.shape[0], -1)), axis=1)
    bound = precision_bound(precision)
    scale = peak / bound
    fallback = float(scale.max()) if peak.any() else 1.0
    scale = np.where(peak > 0, scale, fallback)
    per_channel = scale.reshape((-1,) + (1,) * (w.ndim - 1))
    q = np.clip(round_half_away(w / per_channel), -bound, bound)
    return q.astype(np.int32), scale


def quantize_values(x: np.ndarray, scale: np.ndarray | float) -> np.ndarray | None:
    """round_half_away(x / scale) as int64, or None when some value needs more than 31 bits."""
    q = round_half_away(np.asarray(x, dtype=np.float64) / scale)
    if q.size and not float(np.max(np.abs(q))) < 2.0 ** (MAX_PRECISION - 1):
        return None
    return q.astype(np.int64)


def min_precision(values: np.ndarray) -> int:
    """The smallest CVM precision holding every value (bitlen(max |v|) + 1)."""
    return bitlen(int(np.max(np.abs(values)))) + 1 if np.asarray(values).size else 1


# -- rescaling -------------------------------------------------------------------


@dataclass(frozen=True)
class Term:
    """One integer operand of a rescale: x * ratio in output units."""

    precision: int        # the operand's static precision
    ratio: np.ndarray     # float64, broadcastable to the result: the real multiplier to output units


@dataclass(frozen=True)
class Rescale:
    """How to compute clip(round(sum_i x_i * ratio_i + offset)) in integers.

    Steps: a ``pre_shift`` > 0 is a cvm_right_shift of the single operand to
    ``pre_precision`` (a pre-shift of 0 with ``pre_precision`` below the
    operand's is a cvm_clip), then a broadcast_mul by each multiplier (skipped
    where it is all ones), broadcast_adds of the products and the offset, and
    a final cvm_right_shift by ``shift`` to ``precision``.
    """

    pre_shift: int
    pre_precision: int
    multipliers: tuple[np.ndarray, ...]   # int64, one per term
    offset: np.ndarray | None             # int64, in units of 2^-shift output steps
    shift: int
    precision: int
    error: float                          # bound on |result - exact|, in output steps, unsaturated


def _sum_precision(precisions: list[int], offset_precision: int | None) -> int:
    """The ISA's precision of a chain of broadcast_adds (max + 1 per add)."""
    p = precisions[0]
    for q in precisions[1:]:
        p = max(p, q) + 1
    if offset_precision is not None:
        p = max(p, offset_precision) + 1
    return p


def _shifted_precision(precision: int, shift: int) -> int:
    """Precision of cvm_right_shift's exact result on an operand of ``precision``, before clipping."""
    top = (precision_bound(precision) + (1 << (shift - 1))) >> shift
    return bitlen(top) + 1


def plan_rescale(terms: list[Term], offset: np.ndarray | None, precision: int, where: str) -> Rescale:
    """The rescale with the smallest error bound whose every intermediate fits 32 bits.

    For each total shift s = s1 + s2, the multipliers are m = round(ratio * 2^s).
    A single operand may be pre-shifted by s1 (losing at most half a step of
    2^s1, i.e. m / 2^(s2+1) output steps) and clipped where the result saturates
    anyway (a clipped |x| >= V still gives |x*m + o| >= 2^(p-1+s2), i.e. the
    final clip): that is what lets a 26-bit accumulator meet a 15-bit
    multiplier.  The error bound adds the multipliers' rounding over each
    operand's reach, the offset's rounding, the pre-shift and the final
    rounding (1/2).  Ties go to the smaller shifts.
    """
    single = len(terms) == 1
    reach = [_reach(t, offset, precision, single) for t in terms]
    best: tuple[float, int, int, Rescale] | None = None
    for total in range(0, 2 * MAX_SHIFT):
        ms = [round_half_away(np.ldexp(t.ratio, total)) for t in terms]
        widest = max(float(np.max(np.abs(m))) for m in ms)
        if widest >= 2.0 ** (MAX_PRECISION - 1):
            break
        mult_error = sum(np.abs(np.ldexp(m, -total) - t.ratio) * r for m, t, r in zip(ms, terms, reach))
        for s2 in range(min(total, MAX_SHIFT), 0, -1):
            s1 = total - s2
            if s1 and (not single or s1 > MAX_SHIFT):
                continue
            plan = _candidate(terms, ms, offset, precision, s1, s2, mult_error)
            if plan is not None:
                key = (plan.error, total, s1)
                if best is None or key < best[:3]:
                    best = (*key, plan)
                break  # a smaller s2 only adds pre-shift error
    if best is None:
        raise InvalidError("precision", f"{where}: no multiplier and shift fit 32 bits "
                                        f"(ratios up to {max(float(np.max(np.abs(t.ratio))) for t in terms):.3g})")
    return best[3]


def _reach(t: Term, offset: np.ndarray | None, precision: int, single: bool) -> np.ndarray:
    """The largest |x| the multiplier error is counted over: the static bound, and for a single
    operand no more than where the result saturates anyway."""
    static = np.full(np.shape(t.ratio), float(precision_bound(t.precision)))
    if not single:
        return static
    edge = float(precision_bound(precision)) + 1.0 + (0.0 if offset is None else float(np.max(np.abs(offset))))
    with np.errstate(divide="ignore"):
        saturating = edge / np.abs(t.ratio)
    return np.minimum(static, saturating)


def _candidate(terms: list[Term], ms: list[np.ndarray], offset: np.ndarray | None, precision: int,
               s1: int, s2: int, mult_error: np.ndarray) -> Rescale | None:
    if precision - 1 + s2 > 61:
        return None
    o = None
    offset_error: np.ndarray | float = 0.0
    if offset is not None:
        scaled = round_half_away(np.ldexp(offset, s2))
        if float(np.max(np.abs(scaled))) >= 2.0 ** (MAX_PRECISION - 1):
            return None
        o = scaled.astype(np.int64)
        offset_error = np.abs(np.ldexp(scaled, -s2) - offset)
    m64 = [m.astype(np.int64) for m in ms]
    operand_precisions = [t.precision for t in terms]
    pre_precision = terms[0].precision
    pre_error: np.ndarray | float = 0.0
    if len(terms) == 1:
        exact = _shifted_precision(terms[0].precision, s1) if s1 else terms[0].precision
        needed = _saturating_precision(m64[0], o, precision, s2)
        pre_precision = min(exact, needed)
        operand_precisions = [pre_precision]
        if s1:
            pre_error = np.abs(np.ldexp(ms[0], -s2)) * 0.5
    products = [p if np.all(m == 1) else p + min_precision(m) for p, m in zip(operand_precisions, m64)]
    if max(products) > MAX_PRECISION:
        return None
    total = _sum_precision(products, None if o is None else min_precision(o))
    if total > MAX_PRECISION:
        return None
    error = float(np.max(mult_error + offset_error + pre_error)) + 0.5
    if not math.isfinite(error):
        return None
    return Rescale(s1, pre_precision, tuple(m64), o, s2, precision, error)


def _saturating_precision(m: np.ndarray, o: np.ndarray | None, precision: int, s2: int) -> int:
    """The smallest precision V-clip of the operand that cannot change the result.

    Where |x| >= V with V * |m| >= 2^(p-1+s2) + |o|, |x*m + o| >= 2^(p-1+s2), so
    the final shift gives at least 2^(p-1) in magnitude and clips to the
    bound: the same as without the pre-clip.  Multipliers of 0 ignore x.
    """
    mag = np.abs(m)
    live = mag[mag > 0]
    if not live.size:
        return 1
    # The offset's largest magnitude for every position: safe whatever shape it has.
    edge = (1 << (precision - 1 + s2)) + (0 if o is None else int(np.max(np.abs(o))))
    return bitlen(-(-edge // int(np.min(live)))) + 1
