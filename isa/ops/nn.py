"""nn ops of the CVM instruction set: conv2d, dense, max_pool2d, upsampling.

conv2d and dense are exact integer GEMMs run in floating point.  A float
format holds every integer up to 2^24 (float32) or 2^53 (float64) exactly, so
a GEMM whose every partial sum stays within that never rounds, whatever order
BLAS adds in (blocking, threads, FMA): each partial sum is a sum of some of the
K products, bounded by K * max|x| * max|w|.  That bound comes from the verified
precisions alone, so the path (``GemmPlan``) is chosen at verification and
never depends on the data.

The normative definition of each op here is its reference kernel,
isa/reference/nn.py (named in its OpDef); the kernels below are the fast
ones, tested against it under hypothesis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from isa.attrs import ANY_BOOL, BOOL, INT, INT32_MAX, INT32_MIN, INTS, STR, attr, between, each, one_of
from isa.errors import require
from isa.reference import nn as reference
from isa.spec import OpDef, fixed, same_precision, unit_cost
from isa.types import MAX_DIM, Shape, TensorType, bitlen, precision_bound

# The formalization's attribute range [min_attr, max_attr): strides, dilation,
# padding and scale lie below max_attr.
MAX_ATTR = 4096
POSITIVE_ATTR = between(1, MAX_ATTR - 1)
NON_NEGATIVE_ATTR = between(0, MAX_ATTR - 1)
MAX_INPUT_PRECISION = 8  # conv2d and dense multiply int8 by int8


# -- exact GEMM ----------------------------------------------------------------

F32_EXACT = 1 << 24  # every integer of magnitude <= 2^24 is a float32, and 2^24 + 1 is not
F64_EXACT = 1 << 53
# Each float32 chunk costs its own passes over the output (cast, add); when a
# chunk can hold fewer terms than this, they cost more than float32 saves over
# float64.
MIN_F32_CHUNK = 256
OPERAND_DTYPES: dict[str, np.dtype] = {"f32": np.dtype(np.float32), "f64": np.dtype(np.float64),
                                       "i64": np.dtype(np.int64)}


@dataclass(frozen=True)
class GemmPlan:
    """How one exact GEMM of K terms per output runs.

    ``f32``: float32 GEMMs over consecutive chunks of K, each chunk's partial
    sums within 2^24, the chunk results added in integers; ``f64``: one
    float64 GEMM, partial sums within 2^53; ``i64``: int64, the fallback.
    """

    path: str        # "f32", "f64" or "i64"
    k: int           # terms per output
    chunk: int       # terms per GEMM: k except for a chunked f32
    bound: int       # K * max|x| * max|w|: bounds every partial sum
    out_bound: int   # bound + max|bias|: bounds every result

    @property
    def chunks(self) -> int:
        return -(-self.k // self.chunk)

    @property
    def operand_dtype(self) -> np.dtype:
        return OPERAND_DTYPES[self.path]

    @property
    def out_dtype(self) -> np.dtype:
        return np.dtype(np.int32) if self.out_bound <= INT32_MAX else np.dtype(np.int64)

    def __str__(self) -> str:
        bound = f"2^{math.log2(self.bound):.1f}" if self.bound else "0"
        chunks = f" chunks={self.chunks}" if self.path == "f32" else ""
        return f"gemm {self.path} K={self.k}{chunks} bound={bound}"


def gemm_plan(k: int, x_precision: int, w_precision: int, bias_precision: int | None = None,
              path: str | None = None) -> GemmPlan:
    """The fastest exact path for K terms of |x| <= 2^(px-1) - 1 times |w| <= 2^(pw-1) - 1.

    ``path`` forces a path (tests compare them on one instruction); it still
    gets the chunking that keeps it exact, and a path that cannot be exact is
    refused.
    """
    product = precision_bound(x_precision) * precision_bound(w_precision)
    bound = k * product
    out_bound = bound + (0 if bias_precision is None else precision_bound(bias_precision))
    if product <= F32_EXACT:
        widest = F32_EXACT // product if product else k
        count = -(-k // widest)
        chunk = -(-k // count)                  # balanced chunks, each <= widest
        if path == "f32" or (path is None and (count == 1 or widest >= MIN_F32_CHUNK)):
            return GemmPlan("f32", k, chunk, bound, out_bound)
    if path == "f64" or (path is None and bound <= F64_EXACT):
        require(bound <= F64_EXACT, f"a float64 GEMM of bound {bound} > 2^53 would round")
        return GemmPlan("f64", k, k, bound, out_bound)
    require(path in (None, "i64"), f"a {path} GEMM of {k} terms with products up to {product} would round")
    require(out_bound < 1 << 63, f"an int64 GEMM of bound {out_bound} would overflow")
    return GemmPlan("i64", k, k, bound, out_bound)


def exact_gemm(plan: GemmPlan, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b (matmul broadcasting, K = a's last axis) as plan.out_dtype integers, exactly.

    ``a`` and ``b`` are already in the plan's operand dtype.
    """
    acc = None
    for k0 in range(0, plan.k, plan.chunk):
        # Each chunk's sums are integers the float holds exactly, so the cast is exact too.
        part = np.matmul(a[..., k0:k0 + plan.chunk], b[..., k0:k0 + plan.chunk, :]).astype(plan.out_dtype, copy=False)
        if acc is None:
            acc = part
        else:
            acc += part
    return acc


def _require_int8_operands(what: str, x: TensorType, w: TensorType) -> None:
    require(x.precision <= MAX_INPUT_PRECISION,
            f"{what} data precision {x.precision} must be <= {MAX_INPUT_PRECISION}")
    require(w.precision <= MAX_INPUT_PRECISION,
            f"{what} weight precision {w.precision} must be <= {MAX_INPUT_PRECISION}")


def _with_bias(precision: int, bias: TensorType | None) -> int:
    return precision if bias is None else max(precision, bias.precision) + 1


def _use_bias_inputs(a: Conv2DAttrs | DenseAttrs) -> tuple[str, ...]:
    return ("data", "weight", "bias") if a.use_bias else ("data", "weight")


# -- conv2d --------------------------------------------------------------------

@dataclass(frozen=True)
class Conv2DAttrs:
    channels: int = attr(INT, between(1, MAX_DIM))
    kernel_size: tuple[int, ...] = attr(INTS, each(between(1, MAX_DIM), 2, 2))
    strides: tuple[int, ...] = attr(INTS, each(POSITIVE_ATTR, 2, 2), (1, 1))
    padding: tuple[int, ...] = attr(INTS, each(NON_NEGATIVE_ATTR, 2, 2), (0, 0))
    dilation: tuple[int, ...] = attr(INTS, each(POSITIVE_ATTR, 2, 2), (1, 1))
    groups: int = attr(INT, between(1, MAX_DIM), 1)
    layout: str = attr(STR, one_of("NCHW"), "NCHW")
    kernel_layout: str = attr(STR, one_of("OIHW"), "OIHW")
    out_layout: str = attr(STR, one_of("__undef__", "NCHW"), "__undef__")  # __undef__: same as layout
    out_dtype: str = attr(STR, one_of("same", "int32"), "same")
    use_bias: bool = attr(BOOL, ANY_BOOL, True)


def conv2d_shape(a: Conv2DAttrs, x: TensorType, w: TensorType, b: TensorType | None = None) -> tuple[Shape, ...]:
    require(x.ndim == 4, f"conv2d data shape {x.shape} must be 4-D (N, C, H, W)")
    n, c, h, width = x.shape
    require(c % a.groups == 0, f"groups={a.groups} must divide the {c} input channels")
    require(a.channels % a.groups == 0, f"groups={a.groups} must divide channels={a.channels}")
    kh, kw = a.kernel_size
    weight_shape = (a.channels, c // a.groups, kh, kw)
    require(w.shape == weight_shape, f"conv2d weight shape {w.shape} must be {weight_shape} "
                                     f"(channels, C/groups, kernel_size)")
    if b is not None:
        require(b.shape == (a.channels,), f"conv2d bias shape {b.shape} must be ({a.channels},)")
    for axis, size, k, p, d in zip("HW", (h, width), a.kernel_size, a.padding, a.dilation):
        dilated = d * (k - 1) + 1
        require(dilated <= size + 2 * p, f"dilated kernel {dilated} exceeds padded input {size + 2 * p} ({axis})")
    return ((n, a.channels, *conv2d_extent(a, h, width)),)


def conv2d_extent(a: Conv2DAttrs, h: int, w: int) -> tuple[int, int]:
    """(OH, OW): floor((size + 2p - dilated kernel) / s) + 1 per axis."""
    oh, ow = ((size + 2 * p - d * (k - 1) - 1) // s + 1
              for size, k, s, p, d in zip((h, w), a.kernel_size, a.strides, a.padding, a.dilation))
    return oh, ow


def conv2d_precision(a: Conv2DAttrs, x: TensorType, w: TensorType, b: TensorType | None = None) -> tuple[int, ...]:
    _require_int8_operands("conv2d", x, w)
    # One output sums C/groups * KH * KW products.
    return (_with_bias(x.precision + w.precision + bitlen(w.size // w.shape[0]), b),)


def conv2d_cost(a: Conv2DAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    w = inputs[1]
    return (w.size // w.shape[0]) * 3 + (1 if a.use_bias else 0)


def conv2d_plan(a: Conv2DAttrs, x: TensorType, w: TensorType, b: TensorType | None = None) -> GemmPlan:
    return gemm_plan(w.size // w.shape[0], x.precision, w.precision, None if b is None else b.precision)


def conv2d_patches(a: Conv2DAttrs, x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """im2col: (N, groups, C/groups*KH*KW, OH*OW) in ``dtype``, zero padding.

    Row (n, g, (i*KH + r)*KW + s) holds input channel g*C/groups + i at kernel
    offset (r, s) for every output position p*OW + q: the weight's
    (C/groups, KH, KW) order on one side and NCHW on the other, so
    W @ patches is the output without a transpose.
    """
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = a.kernel_size, a.strides, a.padding, a.dilation
    oh, ow = conv2d_extent(a, h, w)
    if ph or pw:
        padded = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=dtype)
        padded[:, :, ph:ph + h, pw:pw + w] = x
    else:
        padded = x.astype(dtype)
    sn, sc, sy, sx = padded.strides
    ic = c // a.groups
    windows = as_strided(padded, (n, a.groups, ic, kh, kw, oh, ow),
                         (sn, sc * ic, sc, sy * dh, sx * dw, sy * sh, sx * sw), writeable=False)
    return np.ascontiguousarray(windows).reshape(n, a.groups, ic * kh * kw, oh * ow)


def conv2d_kernel(a: Conv2DAttrs, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
                  plan: GemmPlan) -> tuple[np.ndarray, ...]:
    """Y[n,o,p,q] = sum_{i,r,s} pad0(X)[n, g*IC + i, p*SH + r*DH - PH, q*SW + s*DW - PW] * W[o,i,r,s] (+ B[o]),
    with IC = C/groups and g = o // (OC/groups), the group of output channel o, by the GEMM path of ``plan``.
    """
    n, oc = x.shape[0], w.shape[0]
    dtype = plan.operand_dtype
    patches = conv2d_patches(a, x, dtype)                              # (N, G, K, OH*OW)
    weights = w.reshape(a.groups, oc // a.groups, -1).astype(dtype)    # (G, OC/G, K)
    # (N, G, OC/G, OH*OW) is NCHW with channel o = g*OC/G + j.
    y = exact_gemm(plan, weights, patches).reshape(n, oc, *conv2d_extent(a, x.shape[2], x.shape[3]))
    if b is not None:
        y += b[:, None, None]
    return (y,)


CONV2D = OpDef("conv2d", Conv2DAttrs, _use_bias_inputs, ("output",),
               shape=conv2d_shape, precision=conv2d_precision, cost=conv2d_cost, kernel=conv2d_kernel,
               plan=conv2d_plan, reference=reference.conv2d)


# -- dense ---------------------------------------------------------------------

@dataclass(frozen=True)
class DenseAttrs:
    units: int = attr(INT, between(1, MAX_DIM))
    use_bias: bool = attr(BOOL, ANY_BOOL, True)


def dense_shape(a: DenseAttrs, x: TensorType, w: TensorType, b: TensorType | None = None) -> tuple[Shape, ...]:
    require(x.ndim == 2, f"dense data shape {x.shape} must be 2-D (M, K)")
    require(w.shape == (a.units, x.shape[1]),
            f"dense weight shape {w.shape} must be ({a.units}, {x.shape[1]}) (units, K)")
    if b is not None:
        require(b.shape == (a.units,), f"dense bias shape {b.shape} must be ({a.units},)")
    return ((x.shape[0], a.units),)


def dense_precision(a: DenseAttrs, x: TensorType, w: TensorType, b: TensorType | None = None) -> tuple[int, ...]:
    _require_int8_operands("dense", x, w)
    return (_with_bias(x.precision + w.precision + bitlen(x.shape[1]), b),)


def dense_cost(a: DenseAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    return inputs[0].shape[1] * 3 + (1 if a.use_bias else 0)


def dense_plan(a: DenseAttrs, x: TensorType, w: TensorType, b: TensorType | None = None) -> GemmPlan:
    return gemm_plan(x.shape[1], x.precision, w.precision, None if b is None else b.precision)


def dense_kernel(a: DenseAttrs, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
                 plan: GemmPlan) -> tuple[np.ndarray, ...]:
    """Y = X W^T (+ B), by the GEMM path of ``plan``."""
    dtype = plan.operand_dtype
    y = exact_gemm(plan, x.astype(dtype), w.astype(dtype).T)
    if b is not None:
        y += b
    return (y,)


DENSE = OpDef("dense", DenseAttrs, _use_bias_inputs, ("output",),
              shape=dense_shape, precision=dense_precision, cost=dense_cost, kernel=dense_kernel,
              plan=dense_plan, reference=reference.dense)


# -- max_pool2d ----------------------------------------------------------------

@dataclass(frozen=True)
class MaxPool2DAttrs:
    pool_size: tuple[int, ...] = attr(INTS, each(between(1, INT32_MAX), 2, 2))
    strides: tuple[int, ...] = attr(INTS, each(POSITIVE_ATTR, 2, 2), (1, 1))
    padding: tuple[int, ...] = attr(INTS, each(NON_NEGATIVE_ATTR, 1, 2), (0, 0))  # one value: both axes
    layout: str = attr(STR, one_of("NCHW"), "NCHW")
    ceil_mode: bool = attr(BOOL, ANY_BOOL, False)


def pool_padding(a: MaxPool2DAttrs) -> tuple[int, int]:
    return (a.padding[0], a.padding[-1])


def pool_extent(size: int, k: int, s: int, p: int, ceil_mode: bool) -> int:
    """Output length of one spatial axis; ceil_mode rounds the window count up."""
    span = size + 2 * p - k
    return (span + s - 1) // s + 1 if ceil_mode else span // s + 1


def max_pool2d_shape(a: MaxPool2DAttrs, x: TensorType) -> tuple[Shape, ...]:
    require(x.ndim == 4, f"max_pool2d data shape {x.shape} must be 4-D (N, C, H, W)")
    out = []
    for axis, size, k, s, p in zip("HW", x.shape[2:], a.pool_size, a.strides, pool_padding(a)):
        require(p < k, f"padding {p} must be < pool_size {k} ({axis})")
        require(k <= size + 2 * p, f"pool_size {k} exceeds padded input {size + 2 * p} ({axis})")
        o = pool_extent(size, k, s, p, a.ceil_mode)
        # Only ceil_mode can fail this: a window starting past the real input
        # would hold nothing but padding.
        require((o - 1) * s - p < size, f"ceil_mode: the last window starts at {(o - 1) * s - p}, "
                                        f"past the input's {size} ({axis})")
        out.append(o)
    return ((x.shape[0], x.shape[1], out[0], out[1]),)


def max_pool2d_cost(a: MaxPool2DAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    return a.pool_size[0] * a.pool_size[1]


def max_pool2d_kernel(a: MaxPool2DAttrs, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y[n,c,p,q] = max of pad(X) over rows [p*SH - PH, +KH) and columns [q*SW - PW, +KW);
    padding cells are INT32_MIN, so they never win (every window holds a real cell).

    Separably, one whole-tensor maximum per window row, then per window column.
    """
    (kh, kw), (sh, sw) = a.pool_size, a.strides
    ph, pw = pool_padding(a)
    h, w = x.shape[2:]
    oh = pool_extent(h, kh, sh, ph, a.ceil_mode)
    ow = pool_extent(w, kw, sw, pw, a.ceil_mode)
    # ceil_mode's last window may reach past the symmetric padding.
    bottom = max(ph, (oh - 1) * sh + kh - h - ph)
    right = max(pw, (ow - 1) * sw + kw - w - pw)
    padded = x
    if bottom or right:
        padded = np.full((*x.shape[:2], ph + h + bottom, pw + w + right), INT32_MIN, dtype=np.int32)
        padded[:, :, ph:ph + h, pw:pw + w] = x
    rows = padded[:, :, 0:(oh - 1) * sh + 1:sh].copy()
    for r in range(1, kh):
        np.maximum(rows, padded[:, :, r:r + (oh - 1) * sh + 1:sh], out=rows)
    y = rows[:, :, :, 0:(ow - 1) * sw + 1:sw].copy()
    for s in range(1, kw):
        np.maximum(y, rows[:, :, :, s:s + (ow - 1) * sw + 1:sw], out=y)
    return (y,)


MAX_POOL2D = OpDef("max_pool2d", MaxPool2DAttrs, fixed("data"), ("output",),
                   shape=max_pool2d_shape, precision=same_precision, cost=max_pool2d_cost,
                   kernel=max_pool2d_kernel, reference=reference.max_pool2d)


# -- upsampling ----------------------------------------------------------------

@dataclass(frozen=True)
class UpSamplingAttrs:
    scale: int = attr(INT, POSITIVE_ATTR)
    layout: str = attr(STR, one_of("NCHW"), "NCHW")
    method: str = attr(STR, one_of("NEAREST_NEIGHBOR"), "NEAREST_NEIGHBOR")


def upsampling_shape(a: UpSamplingAttrs, x: TensorType) -> tuple[Shape, ...]:
    require(x.ndim == 4, f"upsampling data shape {x.shape} must be 4-D (N, C, H, W)")
    n, c, h, w = x.shape
    return ((n, c, h * a.scale, w * a.scale),)


def upsampling_kernel(a: UpSamplingAttrs, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y[n,c,h,w] = X[n,c,h // scale,w // scale] (nearest neighbour)."""
    return (np.repeat(np.repeat(x, a.scale, axis=2), a.scale, axis=3),)


UPSAMPLING = OpDef("upsampling", UpSamplingAttrs, fixed("data"), ("output",),
                   shape=upsampling_shape, precision=same_precision, cost=unit_cost, kernel=upsampling_kernel,
                   reference=reference.upsampling)

