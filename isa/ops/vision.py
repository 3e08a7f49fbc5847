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
from isa.spec import OpDef, fixed, int32_only, unit_cost
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
                         reference=reference.get_valid_counts)


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


# |coordinate| < 2^27 keeps every area and 100 * overlap below 2^63; larger
# coordinates (precision 28..32) are computed on Python integers.
INT64_SAFE_COORD = 1 << 27


def iou_percent(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one box [x1, y1, x2, y2] with each of ``boxes``, in whole percent, exact.

    As the formal device: area = (x2 - x1) * (y2 - y1), unclamped, and
    trunc(100 * overlap / union), or 0 when union <= 0 (overlap >= 0, so this
    also covers the device's "area sum <= 0" case).  ``box`` and ``boxes``
    share a dtype: int64, or object (Python ints).
    """
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    width = np.maximum(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0)
    height = np.maximum(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0)
    overlap = width * height
    union = area + areas - overlap
    positive = union > 0
    return np.where(positive, (overlap * 100) // np.where(positive, union, 1), 0)


def nms_keep(a: NonMaxSuppressionAttrs, rows: np.ndarray, valid_count: int) -> np.ndarray:
    """Indices into ``rows`` of the boxes one batch keeps, in output order.

    The first T = clip(valid_count, 0, N) rows are candidates, stably sorted by
    score, descending; the first top_k of them are visited in that order; a
    visited box with id >= 0 is kept unless a kept box (of the same id, or any
    with force_suppress) overlaps it by >= iou_threshold percent; at most
    max_output_size boxes are kept.
    """
    t = max(min(rows.shape[0], valid_count), 0)
    order = np.argsort(-rows[:t, SCORE].astype(np.int64), kind="stable")
    if a.top_k >= 0:
        order = order[:a.top_k]
    limit = t if a.max_output_size < 0 else min(t, a.max_output_size)
    candidates = rows[order]
    coords = candidates[:, COORDS].astype(np.int64)
    if coords.size and int(np.abs(coords).max()) >= INT64_SAFE_COORD:
        coords = coords.astype(object)
    ids = candidates[:, ID]
    kept = np.zeros(len(order), dtype=np.int64)  # positions in ``order``
    n_kept = 0
    # Each decision depends on the boxes kept before it: the loop is inherent.
    for p in range(len(order)):
        if n_kept >= limit:
            break
        if ids[p] < 0:
            continue
        previous = kept[:n_kept]
        rivals = previous if a.force_suppress else previous[ids[previous] == ids[p]]
        if not (iou_percent(coords[p], coords[rivals]) >= a.iou_threshold).any():
            kept[n_kept] = p
            n_kept += 1
    return order[kept[:n_kept]]


def nms_kernel(a: NonMaxSuppressionAttrs, x: np.ndarray, valid_count: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y[b] = the kept boxes of batch b (nms_keep), then rows of -1."""
    y = np.full(x.shape, -1, dtype=np.int32)
    for b in range(x.shape[0]):
        keep = nms_keep(a, x[b], int(valid_count[b]))
        y[b, :len(keep)] = x[b, keep]
    return (y,)


NON_MAX_SUPPRESSION = OpDef("non_max_suppression", NonMaxSuppressionAttrs, fixed("data", "valid_count"),
                            ("output",), shape=nms_shape, precision=nms_precision, cost=nms_cost,
                            kernel=nms_kernel, reference=reference.non_max_suppression)

