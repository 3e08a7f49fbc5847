"""Reference kernels of the nn ops (conv2d, dense, max_pool2d, upsampling): loops written
straight from cvm-formalization.md, on Python ints.

Slow on purpose: no numpy arithmetic, one formula per output element, so that a
mistake in the fast kernels (isa/ops/nn.py: im2col, chunked float GEMMs,
separable pooling) cannot be repeated here.  Normative: the fast kernels are
tested against them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

INT32_MIN = -(1 << 31)


def conv2d(a: Any, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Y[n,i,p,q] = sum_j sum_{ki,kj} pad(p' + ki*DH, q' + kj*DW) * W[i, j, ki, kj] (+ B[i]).

    The formalization's two cases (groups = 1, groups = C) are the grouped
    convolution with output channel i reading input channels
    [g*IC, (g+1)*IC), g = i // (OC/groups).
    """
    n_, c, h, wd = x.shape
    oc, ic, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw), groups = a.strides, a.padding, a.dilation, a.groups
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    per_group = oc // groups
    y = np.zeros((n_, oc, oh, ow), dtype=np.int64)
    for n in range(n_):
        for i in range(oc):
            first = (i // per_group) * ic
            for p in range(oh):
                for q in range(ow):
                    total = 0 if b is None else int(b[i])
                    for j in range(ic):
                        for ki in range(kh):
                            for kj in range(kw):
                                r = p * sh - ph + ki * dh
                                s = q * sw - pw + kj * dw
                                if 0 <= r < h and 0 <= s < wd:
                                    total += int(x[n, first + j, r, s]) * int(w[i, j, ki, kj])
                    y[n, i, p, q] = total
    return (y,)


def dense(a: Any, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Y = X W^T (+ B)."""
    m_, k_ = x.shape
    n_ = w.shape[0]
    y = np.zeros((m_, n_), dtype=np.int64)
    for m in range(m_):
        for n in range(n_):
            total = 0 if b is None else int(b[n])
            for k in range(k_):
                total += int(x[m, k]) * int(w[n, k])
            y[m, n] = total
    return (y,)


def max_pool2d(a: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y[n,i,p,q] = max{pad(n, i, p', q') : p' in [p*SH - PH, +PSH), q' in [q*SW - PW, +PSW)},
    with pad = INT32_MIN outside the input (SEMANTICS.md section 4).  One padding value pads both axes."""
    n_, c, h, wd = x.shape
    padding = a.padding if len(a.padding) == 2 else a.padding * 2
    (kh, kw), (sh, sw), (ph, pw), ceil_mode = a.pool_size, a.strides, padding, a.ceil_mode

    def extent(size: int, k: int, s: int, p: int) -> int:
        span = size + 2 * p - k
        return -(-span // s) + 1 if ceil_mode else span // s + 1

    oh, ow = extent(h, kh, sh, ph), extent(wd, kw, sw, pw)
    y = np.zeros((n_, c, oh, ow), dtype=np.int64)
    for n in range(n_):
        for i in range(c):
            for p in range(oh):
                for q in range(ow):
                    best = INT32_MIN
                    for r in range(p * sh - ph, p * sh - ph + kh):
                        for s in range(q * sw - pw, q * sw - pw + kw):
                            value = int(x[n, i, r, s]) if 0 <= r < h and 0 <= s < wd else INT32_MIN
                            best = max(best, value)
                    y[n, i, p, q] = best
    return (y,)


def upsampling(a: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y[n,i,h,w] = X[n,i,floor(h/scale),floor(w/scale)]."""
    n_, c, h, wd = x.shape
    scale = a.scale
    y = np.zeros((n_, c, h * scale, wd * scale), dtype=np.int64)
    for n in range(n_):
        for i in range(c):
            for r in range(h * scale):
                for s in range(wd * scale):
                    y[n, i, r, s] = int(x[n, i, r // scale, s // scale])
    return (y,)
