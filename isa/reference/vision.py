"""Reference kernels of get_valid_counts and non_max_suppression, written straight from
cvm-formalization.md (the NMS operator section), on Python ints and lists.

Normative: the fast kernels (isa/ops/vision.py) are tested against them.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def get_valid_counts(a: Any, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """valid_count[b] = card{q : X[b,q,1] > thr}; valid rows to the top in order; the rest -1.
    Attribute score_threshold (thr)."""
    score_threshold = a.score_threshold
    b_, n_, k_ = x.shape
    count = np.zeros(b_, dtype=np.int64)
    y = np.full((b_, n_, k_), -1, dtype=np.int64)
    for b in range(b_):
        idx = 0
        for n in range(n_):
            if int(x[b, n, 1]) > score_threshold:
                for k in range(k_):
                    y[b, idx, k] = int(x[b, n, k])
                idx += 1
        count[b] = idx
    return count, y


def overlap_ratio(p: list[int], q: list[int]) -> int:
    """IoU of two rows [id, score, x1, y1, x2, y2] in whole percent, the formal device's way:
    unclamped areas, 0 unless the area sum and the union are positive, truncated 100 * overlap / union."""
    x1, y1, x2, y2 = p[2:6]
    u1, v1, u2, v2 = q[2:6]
    total = (x2 - x1) * (y2 - y1) + (u2 - u1) * (v2 - v1)
    if total <= 0:
        return 0
    w = max(0, min(x2, u2) - max(x1, u1))
    h = max(0, min(y2, v2) - max(y1, v1))
    overlap = w * h
    union = total - overlap
    if union <= 0:
        return 0
    return overlap * 100 // union


def non_max_suppression(a: Any, x: np.ndarray, valid_count: np.ndarray) -> tuple[np.ndarray, ...]:
    """Attributes iou_threshold (whole percent), max_output_size, force_suppress, top_k; the
    others are fixed by their domains (rows [id, score, x1, y1, x2, y2], invalid rows to the bottom)."""
    iou_threshold, max_output_size = a.iou_threshold, a.max_output_size
    force_suppress, top_k = a.force_suppress, a.top_k
    b_, n_, k_ = x.shape
    y = np.full((b_, n_, k_), -1, dtype=np.int64)
    for b in range(b_):
        t = max(min(n_, int(valid_count[b])), 0)
        rows = [[int(v) for v in x[b, i]] for i in range(t)]
        # I: by score descending, ties by index ascending.
        index = sorted(range(t), key=lambda i: (-rows[i][1], i))
        r = [rows[i] for i in index]
        tk = t if top_k < 0 else top_k
        mos = t if max_output_size < 0 else max_output_size

        def iou(p: int, q: int) -> int:
            if force_suppress or r[p][0] == r[q][0]:
                return overlap_ratio(r[p], r[q])
            return 0

        u: list[int] = []
        for p in range(min(tk, t)):
            if r[p][0] >= 0 and all(iou(p, q) < iou_threshold for q in u):
                u.append(p)
        for n, p in enumerate(u[:min(t, mos, len(u))]):
            y[b, n] = r[p]
    return (y,)
