"""vision ops of the CVM instruction set: get_valid_counts, non_max_suppression.

Rows are boxes [id, score, x1, y1, x2, y2, ...]; a row of -1 is "no box".
Both ops follow the formalization (= the Cortex runtime's formal device),
never the CPU device's quirks (SEMANTICS.md section 4), and never write into
their inputs.

The normative definition of each op here is its reference kernel,
isa/reference/vision.py (named in its OpDef); the kernels below are the fast
ones, tested against it under hypothesis.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from isa.attrs import ANY_BOOL, ANY_INT32, BOOL, INT, INT32_MAX, attr, between, one_of
from isa.errors import require
from isa.reference import vision as reference
from isa.spec import NUMPY_CALL, OpDef, fixed, int32_only, unit_cost
from isa.types import INT32, Shape, TensorType, number_precision

SCORE = 1
ID = 0
COORDS = slice(2, 6)
NMS_ROW = 6  # [id, score, x1, y1, x2, y2]


def _with_minus_one(p: int) -> int:
    """Precision of an output holding input values or -1 (the runtime forgets the -1: p=1 holds only 0)."""
    return max(p, 2)


# -- get_valid_counts ----------------------------------------------------------

@dataclass(frozen=True)
class GetValidCountsAttrs:
    score_threshold: int = attr(INT, ANY_INT32, 0)


def get_valid_counts_dtypes(a: GetValidCountsAttrs, x: TensorType) -> tuple[str, ...]:
    int32_only(a, x)
    return (INT32, INT32)


def get_valid_counts_shape(a: GetValidCountsAttrs, x: TensorType) -> tuple[Shape, ...]:
    require(x.ndim == 3, f"get_valid_counts data shape {x.shape} must be 3-D (B, N, K)")
    require(2 <= x.shape[2] < 32, f"get_valid_counts row length K={x.shape[2]} must be in [2, 31]")
    return ((x.shape[0],), x.shape)


def get_valid_counts_precision(a: GetValidCountsAttrs, x: TensorType) -> tuple[int, ...]:
    # The count is at most N; the runtime sizes it for N * K, which we keep (it decides acceptance).
    return (number_precision(x.shape[1] * x.shape[2]), _with_minus_one(x.precision))


def get_valid_counts_work(a: GetValidCountsAttrs, inputs: tuple[TensorType, ...],
                          outputs: tuple[TensorType, ...]) -> int:
    """A stable sort of the validity of every row (one numpy sort per batch), then the rows gathered
    and the tail masked."""
    b, n, k = inputs[0].shape
    return 30 * b * n + 400 * b + 2 * outputs[1].size


def get_valid_counts_scratch(a: GetValidCountsAttrs, inputs: tuple[TensorType, ...],
                             outputs: tuple[TensorType, ...]) -> int:
    """Per row: validity and its negation, the sort order (int64), the tail mask; the int64 counts."""
    b, n, k = inputs[0].shape
    return 19 * b * n + 8 * n + 8 * b


def get_valid_counts_kernel(a: GetValidCountsAttrs, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """valid_count[b] = #{n : X[b,n,1] > threshold}; Y[b] = those rows in input order, then rows of -1."""
    valid = x[:, :, SCORE] > a.score_threshold
    count = valid.sum(axis=1, dtype=np.int64)
    order = np.argsort(~valid, axis=1, kind="stable")  # valid rows first, each side in input order
    y = np.take_along_axis(x, order[:, :, None], axis=1)
    y[np.arange(x.shape[1], dtype=np.int64)[None, :] >= count[:, None]] = -1
    return (count, y)


# The runtime's GetOps special-cases "get_valid_count" (sic), a name no op
# has, so the base cost stays 1.
GET_VALID_COUNTS = OpDef("get_valid_counts", GetValidCountsAttrs, fixed("data"), ("valid_count", "output"),
                         shape=get_valid_counts_shape, precision=get_valid_counts_precision,
                         cost=unit_cost, kernel=get_valid_counts_kernel, dtypes=get_valid_counts_dtypes,
                         reference=reference.get_valid_counts,
                         work=get_valid_counts_work, scratch=get_valid_counts_scratch)


# -- non_max_suppression -------------------------------------------------------

@dataclass(frozen=True)
class NonMaxSuppressionAttrs:
    # An integer percent; > 100 never suppresses.  No usable runtime default
    # (its 0.5 truncates to 0, which it rejects), so it is required.
    iou_threshold: int = attr(INT, between(1, INT32_MAX))
    max_output_size: int = attr(INT, ANY_INT32, -1)        # < 0: no limit
    force_suppress: bool = attr(BOOL, ANY_BOOL, False)     # suppress across ids
    top_k: int = attr(INT, ANY_INT32, -1)                  # < 0: no limit
    coord_start: int = attr(INT, one_of(2), 2)
    score_index: int = attr(INT, one_of(1), 1)
    id_index: int = attr(INT, one_of(0), 0)
    return_indices: bool = attr(BOOL, one_of(False), False)
    invalid_to_bottom: bool = attr(BOOL, one_of(True), True)


def nms_shape(a: NonMaxSuppressionAttrs, x: TensorType, valid_count: TensorType) -> tuple[Shape, ...]:
    require(x.ndim == 3 and x.shape[2] == NMS_ROW,
            f"non_max_suppression data shape {x.shape} must be (B, N, {NMS_ROW})")
    require(valid_count.shape == (x.shape[0],),
            f"non_max_suppression valid_count shape {valid_count.shape} must be ({x.shape[0]},)")
    return (x.shape,)


def nms_precision(a: NonMaxSuppressionAttrs, x: TensorType, valid_count: TensorType) -> tuple[int, ...]:
    return (_with_minus_one(x.precision),)


def nms_cost(a: NonMaxSuppressionAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    return inputs[0].shape[0] * 20  # the batch, as the runtime counts it


@dataclass(frozen=True)
class NmsPlan:
    """How the pairwise overlap tests run, from the input precision alone.

    A box suppresses another when trunc(100 * overlap / union) >= threshold,
    that is (union > 0, overlap >= 0) when 100 * overlap >= threshold * union;
    a threshold above 100 never suppresses (overlap > 0 makes both areas
    positive, so overlap <= union), so min(threshold, 101) decides the same.
    |coordinate| <= 2^26 - 1 (precision <= 27) keeps every area below 2^54 and
    101 * union below 2^62: int64.  Wider coordinates use Python integers.
    """

    wide: bool

    def __str__(self) -> str:
        return "IoU on Python ints" if self.wide else "IoU in int64"


INT64_MAX_PRECISION = 27


def nms_plan(a: NonMaxSuppressionAttrs, x: TensorType, valid_count: TensorType) -> NmsPlan:
    return NmsPlan(x.precision > INT64_MAX_PRECISION)


def nms_comparisons(a: NonMaxSuppressionAttrs, n: int) -> int:
    """The most overlap tests one batch makes: each kept box against every later candidate,
    with at most top_k candidates and max_output_size kept."""
    candidates = n if a.top_k < 0 else min(n, a.top_k)
    kept = candidates if a.max_output_size < 0 else min(candidates, a.max_output_size)
    return kept * candidates - kept * (kept + 1) // 2


# Per overlap test: about 16 numpy passes over int64 (Python ints: ~40x slower);
# per candidate: the Python loop's visit; per kept box: its numpy calls.
NMS_PAIR = {False: 8, True: 300}
NMS_CANDIDATE = 300
NMS_KEPT = 18 * NUMPY_CALL


def nms_work(a: NonMaxSuppressionAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    """Per batch: the stable sort, every overlap test a kept box can make, the loop's visits."""
    b, n, _ = inputs[0].shape
    plan = nms_plan(a, *inputs)
    kept = n if a.max_output_size < 0 else min(n, max(a.max_output_size, 0))
    per_batch = (NMS_PAIR[plan.wide] * nms_comparisons(a, n) + NMS_CANDIDATE * n + NMS_KEPT * kept
                 + 40 * n + 4 * NUMPY_CALL)
    return b * per_batch + outputs[0].size


def nms_scratch(a: NonMaxSuppressionAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    """One batch's sort order, candidate rows, coordinates, areas and ids, and the temporaries of
    one kept box's tests against the later candidates (Python ints: 8-byte pointers to 32-byte ints)."""
    n = inputs[0].shape[1]
    value = 40 if nms_plan(a, *inputs).wide else 8
    return n * (8 + 8 + 24 + 6 * value + 2) + n * 12 * value


def nms_keep(a: NonMaxSuppressionAttrs, rows: np.ndarray, valid_count: int, plan: NmsPlan) -> np.ndarray:
    """Indices into ``rows`` of the boxes one batch keeps, in output order.

    The first T = clip(valid_count, 0, N) rows are candidates, stably sorted by
    score, descending; the first top_k of them are visited in that order; a
    visited box with id >= 0 is kept unless a kept box (of the same id, or any
    with force_suppress) overlaps it by >= iou_threshold percent; at most
    max_output_size boxes are kept.  Each kept box marks, at once, the later
    candidates it suppresses (the overlap test is symmetric).
    """
    t = max(min(rows.shape[0], valid_count), 0)
    order = np.argsort(-rows[:t, SCORE].astype(np.int64), kind="stable")
    if a.top_k >= 0:
        order = order[:a.top_k]
    limit = t if a.max_output_size < 0 else min(t, a.max_output_size)
    candidates = rows[order]
    coords = candidates[:, COORDS].astype(object if plan.wide else np.int64).T.copy()
    x1, y1, x2, y2 = coords
    areas = (x2 - x1) * (y2 - y1)
    ids = candidates[:, ID]
    threshold = min(a.iou_threshold, 101)
    suppressed = np.zeros(len(order), dtype=bool)
    kept: list[int] = []
    for p in range(len(order)):
        if len(kept) >= limit:
            break
        if ids[p] < 0 or suppressed[p]:
            continue
        kept.append(p)
        later = slice(p + 1, len(order))
        width = np.maximum(np.minimum(x2[later], x2[p]) - np.maximum(x1[later], x1[p]), 0)
        height = np.maximum(np.minimum(y2[later], y2[p]) - np.maximum(y1[later], y1[p]), 0)
        overlap = width * height
        union = areas[later] + (areas[p] - overlap)
        hit = (union > 0) & (overlap * 100 >= union * threshold)
        if not a.force_suppress:
            hit &= ids[later] == ids[p]
        suppressed[later] |= hit
    return order[np.array(kept, dtype=np.int64)]


def nms_kernel(a: NonMaxSuppressionAttrs, x: np.ndarray, valid_count: np.ndarray, *,
               plan: NmsPlan) -> tuple[np.ndarray, ...]:
    """Y[b] = the kept boxes of batch b (nms_keep), then rows of -1."""
    y = np.full(x.shape, -1, dtype=np.int32)
    for b in range(x.shape[0]):
        keep = nms_keep(a, x[b], int(valid_count[b]), plan)
        y[b, :len(keep)] = x[b, keep]
    return (y,)


NON_MAX_SUPPRESSION = OpDef("non_max_suppression", NonMaxSuppressionAttrs, fixed("data", "valid_count"),
                            ("output",), shape=nms_shape, precision=nms_precision, cost=nms_cost,
                            kernel=nms_kernel, plan=nms_plan, reference=reference.non_max_suppression,
                            work=nms_work, scratch=nms_scratch)

