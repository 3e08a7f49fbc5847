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

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import as_strided

from isa.attrs import ANY_BOOL, BOOL, INT, INT32_MAX, INT32_MIN, INTS, STR, attr, between, each, one_of
from isa.errors import require
from isa.reference import nn as reference
from isa.spec import NUMPY_CALL, OpDef, ceil_div, fixed, same_precision, unit_cost
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
I64_EXACT = (1 << 63) - 1
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
    # The constant operand, when the op's weights are a param: in the operand dtype and the
    # layout the op's GEMM reads, made once at verification (the op's bind rule).
    weights: np.ndarray | None = field(default=None, compare=False, repr=False)
    # The bias, when it is a param and ``folds_bias``: in the operand dtype, shaped to broadcast
    # onto the GEMM's result, added before the cast (one pass fewer than adding it after).
    bias: np.ndarray | None = field(default=None, compare=False, repr=False)
    # Derived from the fields above, once: kernels read them on every call.
    chunks: int = field(init=False, compare=False)
    operand_dtype: np.dtype = field(init=False, compare=False)
    out_dtype: np.dtype = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "chunks", -(-self.k // self.chunk))
        object.__setattr__(self, "operand_dtype", OPERAND_DTYPES[self.path])
        object.__setattr__(self, "out_dtype", np.dtype(np.int32) if self.out_bound <= INT32_MAX
                           else np.dtype(np.int64))

    @property
    def held_bytes(self) -> int:
        """What the plan holds for the program's life: the weights and the bias in the operand dtype."""
        return sum(0 if a is None else a.nbytes for a in (self.weights, self.bias))

    @property
    def folds_bias(self) -> bool:
        """Whether a bias can be added to the GEMM's result before its cast, exactly: one GEMM (no
        chunks), and every result, bias included, within what the operand dtype holds exactly."""
        return self.chunks == 1 and self.out_bound <= {"f32": F32_EXACT, "f64": F64_EXACT, "i64": I64_EXACT}[self.path]

    def bound_to(self, weights: np.ndarray, bias: np.ndarray | None = None) -> GemmPlan:
        """This plan with its constant operand (already laid out for the op's GEMM) in the operand dtype,
        and a constant bias (shaped to broadcast onto the GEMM's result) when it ``folds_bias``."""
        held = _held(weights, self.operand_dtype)
        folded = _held(bias, self.operand_dtype) if bias is not None and self.folds_bias else None
        return GemmPlan(self.path, self.k, self.chunk, self.bound, self.out_bound, held, folded)

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


def _held(value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    held = np.ascontiguousarray(value, dtype=dtype)
    held.flags.writeable = False
    return held


def exact_gemm(plan: GemmPlan, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b (matmul broadcasting, K = a's last axis), plus the plan's bias when it holds one, as
    plan.out_dtype integers, exactly.

    ``a`` and ``b`` are already in the plan's operand dtype.
    """
    if plan.chunks == 1:
        # Every sum, the bias's too (folds_bias), is an integer the float holds exactly, so the
        # cast is exact too.
        result = np.matmul(a, b)
        if plan.bias is not None:
            np.add(result, plan.bias, out=result)
        return result.astype(plan.out_dtype, copy=False)
    acc = None
    for k0 in range(0, plan.k, plan.chunk):
        # Each chunk's sums are integers the float holds exactly, so the cast is exact too.
        part = np.matmul(a[..., k0:k0 + plan.chunk], b[..., k0:k0 + plan.chunk, :]).astype(plan.out_dtype, copy=False)
        if acc is None:
            acc = part
        else:
            acc += part
        del part  # not alive beside the next chunk's (gemm_result_bytes)
    return acc


# Work of the exact GEMMs: units per 1000 multiply-adds by path (BLAS on two
# threads for the float paths; numpy's own loop for int64), units per BLAS call
# (one per matrix of a batched matmul, per chunk), and units per element of
# each pass over the operands and results (casts, chunk sums, bias).
GEMM_UNITS_PER_KMAC = {"f32": 60, "f64": 120, "i64": 1500}
GEMM_CALL = 2000


def gemm_work(plan: GemmPlan, macs: int, matrices: int) -> int:
    """``macs`` multiply-adds in ``matrices`` matrix products per chunk."""
    return ceil_div(macs * GEMM_UNITS_PER_KMAC[plan.path], 1000) + plan.chunks * matrices * GEMM_CALL


def gemm_result_bytes(plan: GemmPlan, elements: int) -> int:
    """A chunk's float result, its integer cast, and the sum of the chunks so far."""
    return elements * (plan.operand_dtype.itemsize + 2 * plan.out_dtype.itemsize)


def require_within(plan: GemmPlan, precision: int) -> GemmPlan:
    """The static proof that a GEMM op's kernel cannot leave its output precision (OpDef.in_range):
    its path is exact and its results are bounded by out_bound, so out_bound must fit the precision
    (the precision rule, an independent computation, guarantees it; this checks it)."""
    require(plan.out_bound <= precision_bound(precision),
            f"the GEMM's bound {plan.out_bound} exceeds the output precision {precision}")
    return plan


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


def conv2d_gemm(x: TensorType, w: TensorType, b: TensorType | None = None) -> GemmPlan:
    return gemm_plan(w.size // w.shape[0], x.precision, w.precision, None if b is None else b.precision)


# -- conv2d: tiled im2col ---------------------------------------------------------

# im2col is cut into tiles of at most this many bytes of patches (one sample,
# group and output position at the least: K values), so that its scratch never
# grows with the output.
CONV_TILE_BYTES = 1 << 26


@dataclass(frozen=True)
class ConvTiling:
    """How conv2d's im2col is cut, from shapes and the GEMM operand size alone.

    A tile is ``nt`` samples x ``gt`` groups x a block of output positions:
    ``th`` whole output rows, or (th = 1) ``tw`` columns of one row.  Windows
    are read through a strided view of the band of input rows and columns a
    tile spans, padded with zeros where they reach padding; ``gather`` reads
    them element by element instead, when that band would be mostly padding
    (a 1x1 input padded by 4095 on each side spans 8191^2 cells for 9 outputs).
    """

    nt: int
    gt: int
    th: int
    tw: int
    gather: bool

    def band(self, a: Conv2DAttrs, kh: int, kw: int) -> tuple[int, int]:
        """Input rows and columns (padding included) one full tile's windows span."""
        (sh, sw), (dh, dw) = a.strides, a.dilation
        return (self.th - 1) * sh + (kh - 1) * dh + 1, (self.tw - 1) * sw + (kw - 1) * dw + 1

    def counts(self, n: int, groups: int, oh: int, ow: int) -> tuple[int, int, int, int]:
        """Tiles along samples, groups, output rows and output columns."""
        return -(-n // self.nt), -(-groups // self.gt), -(-oh // self.th), -(-ow // self.tw)


def conv2d_tiling(a: Conv2DAttrs, x: Shape, w: Shape, itemsize: int) -> ConvTiling:
    n, c, h, width = x
    oc, ic, kh, kw = w
    oh, ow = conv2d_extent(a, h, width)
    positions = max(1, CONV_TILE_BYTES // itemsize // (ic * kh * kw))  # of one sample and group
    nt = gt = 1
    if positions >= oh * ow:
        th, tw = oh, ow
        gt = min(a.groups, positions // (oh * ow))
        if gt == a.groups:
            nt = min(n, positions // (oh * ow * a.groups))
    elif positions >= ow:
        th, tw = positions // ow, ow
    else:
        th, tw = 1, positions
    tiling = ConvTiling(nt, gt, th, tw, False)
    bh, bw = tiling.band(a, kh, kw)
    padded = a.padding != (0, 0)
    return ConvTiling(nt, gt, th, tw, padded and bh * bw > 4 * kh * kw * th * tw)


def _conv2d_windows(a: Conv2DAttrs, x: np.ndarray, rows: range, cols: range, kernel: tuple[int, int],
                    ic: int, dtype: np.dtype) -> np.ndarray:
    """The tile's patches (nt, groups, IC*KH*KW, rows*cols) in ``dtype``, read as strided windows over
    the band of input the tile spans (zero padding copied only where the band reaches it).

    Row (i*KH + r)*KW + s of group g holds input channel g*IC + i at kernel
    offset (r, s) for every output position of the tile: the weight's
    (IC, KH, KW) order on one side and NCHW on the other.
    """
    nt, ct, h, width = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, a.strides, a.padding, a.dilation
    r0, r1 = rows.start * sh - ph, (rows.stop - 1) * sh - ph + (kh - 1) * dh + 1
    c0, c1 = cols.start * sw - pw, (cols.stop - 1) * sw - pw + (kw - 1) * dw + 1
    if r0 >= 0 and c0 >= 0 and r1 <= h and c1 <= width:
        band = x[:, :, r0:r1, c0:c1]
    else:
        band = np.zeros((nt, ct, r1 - r0, c1 - c0), dtype=dtype)
        lo_r, hi_r, lo_c, hi_c = max(r0, 0), min(r1, h), max(c0, 0), min(c1, width)
        if lo_r < hi_r and lo_c < hi_c:
            band[:, :, lo_r - r0:hi_r - r0, lo_c - c0:hi_c - c0] = x[:, :, lo_r:hi_r, lo_c:hi_c]
    sn, sc, sy, sx = band.strides
    windows = as_strided(band, (nt, ct // ic, ic, kh, kw, len(rows), len(cols)),
                         (sn, sc * ic, sc, sy * dh, sx * dw, sy * sh, sx * sw), writeable=False)
    return np.array(windows, dtype=dtype, order="C").reshape(nt, ct // ic, ic * kh * kw, len(rows) * len(cols))


def _conv2d_gathered(a: Conv2DAttrs, x: np.ndarray, rows: range, cols: range, kernel: tuple[int, int],
                     ic: int, dtype: np.dtype) -> np.ndarray:
    """The same patches as _conv2d_windows, each element read by index (padding taps set to 0)."""
    nt, ct, h, width = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, a.strides, a.padding, a.dilation
    ih = (np.arange(rows.start, rows.stop, dtype=np.int64) * sh - ph)[None, :] + \
        (np.arange(kh, dtype=np.int64) * dh)[:, None]                                      # (KH, rows)
    iw = (np.arange(cols.start, cols.stop, dtype=np.int64) * sw - pw)[None, :] + \
        (np.arange(kw, dtype=np.int64) * dw)[:, None]                                      # (KW, cols)
    real = ((ih >= 0) & (ih < h))[:, None, :, None] & ((iw >= 0) & (iw < width))[None, :, None, :]
    patches = x[:, :, np.clip(ih, 0, h - 1)[:, None, :, None], np.clip(iw, 0, width - 1)[None, :, None, :]]
    patches[:, :, ~real] = 0                                                     # (nt, ct, KH, KW, rows, cols)
    return patches.astype(dtype).reshape(nt, ct // ic, ic * kh * kw, len(rows) * len(cols))


# -- conv2d: small convolutions, one gather ---------------------------------------

# A convolution whose patches and padded input each hold at most this many
# elements reads its patches with one gather from a zero-padded copy of its
# input, through an index of their positions built at verification: a few numpy
# calls in all, where the strided windows of im2col cost a dozen, which is most
# of a small convolution's time.  The index stays with the program (8 bytes per
# patch element, held_bytes), so it is kept small.
SMALL_CONV = 1 << 15


def conv2d_small(a: Conv2DAttrs, x: Shape, w: Shape) -> bool:
    n, c, h, width = x
    oc, ic, kh, kw = w
    oh, ow = conv2d_extent(a, h, width)
    (ph, pw) = a.padding
    return n * c * kh * kw * oh * ow <= SMALL_CONV and n * c * (h + 2 * ph) * (width + 2 * pw) <= SMALL_CONV


def conv2d_gather_index(a: Conv2DAttrs, x: Shape, w: Shape) -> np.ndarray:
    """(N, G, IC*KH*KW, OH*OW): the flat position in the zero-padded input (N, C, H + 2PH, W + 2PW)
    of every patch element, in _conv2d_windows' order."""
    n, c, h, width = x
    oc, ic, kh, kw = w
    oh, ow = conv2d_extent(a, h, width)
    (sh, sw), (ph, pw), (dh, dw) = a.strides, a.padding, a.dilation
    hp, wp = h + 2 * ph, width + 2 * pw
    axes = [np.arange(size, dtype=np.intp) for size in (n, c, kh, kw, oh, ow)]
    sn, sc, sr, ss, sp, sq = (ax.reshape([-1 if i == k else 1 for i in range(6)]) for k, ax in enumerate(axes))
    index = ((sn * c + sc) * hp + sp * sh + sr * dh) * wp + sq * sw + ss * dw   # (N, C, KH, KW, OH, OW)
    return np.ascontiguousarray(index.reshape(n, a.groups, ic * kh * kw, oh * ow))


@dataclass(frozen=True)
class ConvPlan:
    """How one conv2d runs: its exact GEMM, its im2col tiles, whether it is small (conv2d_small),
    and what conv2d_bind derives once: a small one's gather index, the weights in the GEMM's dtype
    when they are a param.  Without them the kernel gathers nothing and casts the weights."""

    gemm: GemmPlan
    tiling: ConvTiling
    data: Shape                 # the input's shape
    weight: Shape               # the weights' shape
    out: Shape                  # the output's shape
    grouped: Shape              # the weights as (G, OC/G, K)
    small: bool
    # A small one's zero-padded input: its shape, and where the input sits in it (None: no padding).
    # Derived from the attributes and ``data``; not compared (slices do not hash before Python 3.12).
    padded: tuple[Shape, tuple[slice, ...]] | None = field(default=None, compare=False, repr=False)
    gather: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def held_bytes(self) -> int:
        """What the plan holds for the program's life: the gather index, the weights in the GEMM's dtype."""
        return (0 if self.gather is None else self.gather.nbytes) + self.gemm.held_bytes

    def __str__(self) -> str:
        return f"{self.gemm}{' gather' if self.small else ''}"


def conv_plan(a: Conv2DAttrs, x: Shape, w: Shape, gemm: GemmPlan, small: bool | None = None) -> ConvPlan:
    """The plan of a conv2d over these shapes on this GEMM path; ``small`` forces the gather on or
    off (tests compare the formulations), by default conv2d_small decides."""
    small = conv2d_small(a, x, w) if small is None else small
    (ph, pw), (n, c, h, width) = a.padding, x
    padded = ((n, c, h + 2 * ph, width + 2 * pw), (slice(None), slice(None), slice(ph, ph + h), slice(pw, pw + width)))
    return ConvPlan(gemm, conv2d_tiling(a, x, w, gemm.operand_dtype.itemsize), x, w,
                    (x[0], w[0], *conv2d_extent(a, x[2], x[3])), (a.groups, w[0] // a.groups, w[1] * w[2] * w[3]),
                    small, padded if small and (ph or pw) else None)


def conv2d_plan(a: Conv2DAttrs, x: TensorType, w: TensorType, b: TensorType | None = None) -> ConvPlan:
    return conv_plan(a, x.shape, w.shape, require_within(conv2d_gemm(x, w, b), *conv2d_precision(a, x, w, b)))


def _conv2d_folds_bias(plan: ConvPlan, w: bool, b: bool) -> bool:
    """A small one whose weights and bias are params adds the bias inside its one GEMM."""
    return plan.small and w and b and plan.gemm.folds_bias


def conv2d_held(a: Conv2DAttrs, plan: ConvPlan, x: bool, w: bool, b: bool = False) -> int:
    """What conv2d_bind will hold, given which inputs are params: the gather index of a small one
    (8 bytes per patch element), weights that are a param in the GEMM's dtype, and a bias it folds."""
    n, c = plan.data[:2]
    oc, ic, kh, kw = plan.weight
    index = 8 * n * c * kh * kw * plan.out[2] * plan.out[3] if plan.small else 0
    e = plan.gemm.operand_dtype.itemsize
    return index + (oc * ic * kh * kw * e if w else 0) + (oc * e if _conv2d_folds_bias(plan, w, b) else 0)


def conv2d_bind(a: Conv2DAttrs, plan: ConvPlan, x: np.ndarray | None, w: np.ndarray | None,
                b: np.ndarray | None = None) -> ConvPlan:
    """A small one's gather index, weights that are a param cast to the GEMM's dtype once, and a
    small one's bias, when a param too, in the GEMM's dtype as (G, OC/G, 1).  A small one of one
    image and one group holds them as plain matrices (K, OH*OW), (OC, K) and (OC, 1): a 2-D GEMM
    costs less than a batched one of one matrix, and gives the same sums."""
    grouped = plan.grouped
    gather = conv2d_gather_index(a, plan.data, plan.weight) if plan.small else None
    if gather is not None and plan.data[0] * a.groups == 1:
        gather, grouped = gather.reshape(gather.shape[2:]), grouped[1:]
    if w is None:
        gemm = plan.gemm
    else:
        folded = b.reshape(*grouped[:-1], 1) if b is not None and _conv2d_folds_bias(plan, True, True) else None
        gemm = plan.gemm.bound_to(w.reshape(grouped), folded)
    return dataclasses.replace(plan, gemm=gemm, gather=gather)


def _conv2d_small(a: Conv2DAttrs, x: np.ndarray, w: np.ndarray, plan: ConvPlan,
                  gather: np.ndarray) -> np.ndarray:
    """The whole convolution as one GEMM over patches gathered from a zero-padded copy of x
    in the GEMM's operand dtype (the copy is the cast)."""
    dtype = plan.gemm.operand_dtype
    if plan.padded is not None:
        shape, interior = plan.padded
        padded = np.zeros(shape, dtype=dtype)
        padded[interior] = x
    else:
        padded = x.astype(dtype)
    weights = w.reshape(plan.grouped).astype(dtype) if plan.gemm.weights is None else plan.gemm.weights
    # (N, G, OC/G, OH*OW) is NCHW with channel o = g*OC/G + j.
    return exact_gemm(plan.gemm, weights, padded.reshape(-1).take(gather)).reshape(plan.out)


CONV_WINDOW = 2    # units per im2col element read through strided windows (with the cast)
CONV_GATHER = 8    # per element gathered by index
CONV_TILE = 20 * NUMPY_CALL  # a tile's Python, slicing and index arithmetic


def conv2d_work(a: Conv2DAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    """The GEMMs, im2col (every element once, plus the padded bands it is read from; or one gather
    and the padded copy for a small convolution), the passes over the output (chunk casts and
    sums, tile copies, bias), the weights' cast, and each tile's overhead."""
    x, w = inputs[0], inputs[1]
    n, c, h, width = x.shape
    oc, ic, kh, kw = w.shape
    oh, ow = outputs[0].shape[2:]
    plan = conv2d_gemm(*inputs)
    k = ic * kh * kw
    patches = n * c * kh * kw * oh * ow
    bias = len(inputs) == 3
    if conv2d_small(a, x.shape, w.shape):
        ph, pw = a.padding
        padded = n * c * (h + 2 * ph) * (width + 2 * pw)
        return (gemm_work(plan, outputs[0].size * k, n * a.groups) + patches * CONV_GATHER + padded
                + outputs[0].size * (2 * plan.chunks + bias) + 2 * w.size + CONV_TILE)
    t = conv2d_tiling(a, x.shape, w.shape, plan.operand_dtype.itemsize)
    counts = t.counts(n, a.groups, oh, ow)
    tiles = counts[0] * counts[1] * counts[2] * counts[3]
    bh, bw = t.band(a, kh, kw)
    bands = tiles * t.nt * t.gt * ic * bh * bw if a.padding != (0, 0) and not t.gather else 0
    passes = 2 * plan.chunks + (tiles > 1) + bias
    return (gemm_work(plan, outputs[0].size * k, tiles * t.nt * t.gt)
            + patches * (CONV_GATHER if t.gather else CONV_WINDOW) + bands
            + outputs[0].size * passes + 2 * w.size + tiles * CONV_TILE)


def conv2d_scratch(a: Conv2DAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    """The weights in the GEMM's dtype, one tile's patches (with the int32 gather or the padded
    band they come from; a small convolution: all its patches and the padded input) and GEMM
    results, and an int64 output beside its int32 copy."""
    x, w = inputs[0], inputs[1]
    n, c, h, width = x.shape
    oc, ic, kh, kw = w.shape
    plan = conv2d_gemm(*inputs)
    e = plan.operand_dtype.itemsize
    wide = 8 * outputs[0].size if plan.out_dtype.itemsize == 8 else 0
    if conv2d_small(a, x.shape, w.shape):
        ph, pw = a.padding
        padded = n * c * (h + 2 * ph) * (width + 2 * pw)
        patches = n * c * kh * kw * outputs[0].shape[2] * outputs[0].shape[3]
        return (w.size + patches + padded) * e + gemm_result_bytes(plan, outputs[0].size) + wide
    t = conv2d_tiling(a, x.shape, w.shape, e)
    bh, bw = t.band(a, kh, kw)
    tile = t.nt * t.gt * ic * kh * kw * t.th * t.tw
    # Gathered: the int32 gather, numpy's index grid and the padding mask (KH, KW, rows, columns).
    source = tile * 4 + 9 * kh * kw * t.th * t.tw if t.gather else t.nt * t.gt * ic * bh * bw * e
    return (w.size * e + tile * e + source + gemm_result_bytes(plan, t.nt * t.gt * (oc // a.groups) * t.th * t.tw)
            + wide)


def conv2d_kernel(a: Conv2DAttrs, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
                  plan: ConvPlan) -> tuple[np.ndarray, ...]:
    """Y[n,o,p,q] = sum_{i,r,s} pad0(X)[n, g*IC + i, p*SH + r*DH - PH, q*SW + s*DW - PW] * W[o,i,r,s] (+ B[o]),
    with IC = C/groups and g = o // (OC/groups), the group of output channel o, by the GEMM path of ``plan``,
    in one gather (a small convolution) or one tile of im2col at a time (conv2d_tiling): every output is
    one exact sum, whatever the tile.
    """
    if plan.gather is not None:
        y = _conv2d_small(a, x, w, plan, plan.gather)
        if b is not None and plan.gemm.bias is None:
            y += b[:, None, None]
        return (y,)
    n, c, h, width = x.shape
    oc, ic, kh, kw = w.shape
    groups = a.groups
    oh, ow = conv2d_extent(a, h, width)
    dtype = plan.gemm.operand_dtype
    t = plan.tiling
    # (G, OC/G, K)
    weights = w.reshape(plan.grouped).astype(dtype) if plan.gemm.weights is None else plan.gemm.weights
    # (N, G, OC/G, OH*OW) is NCHW with channel o = g*OC/G + j.
    if t.counts(n, groups, oh, ow) == (1, 1, 1, 1):
        patches_of = _conv2d_gathered if t.gather else _conv2d_windows
        y = exact_gemm(plan.gemm, weights, patches_of(a, x, range(oh), range(ow), (kh, kw), ic, dtype))
        y = y.reshape(n, oc, oh, ow)
    else:
        patches_of = _conv2d_gathered if t.gather else _conv2d_windows
        out = np.empty((n, groups, oc // groups, oh, ow), dtype=plan.gemm.out_dtype)
        for n0 in range(0, n, t.nt):
            for g0 in range(0, groups, t.gt):
                part = x[n0:n0 + t.nt, g0 * ic:(g0 + t.gt) * ic]
                for o0 in range(0, oh, t.th):
                    rows = range(o0, min(o0 + t.th, oh))
                    for q0 in range(0, ow, t.tw):
                        cols = range(q0, min(q0 + t.tw, ow))
                        tile = exact_gemm(plan.gemm, weights[g0:g0 + t.gt],
                                          patches_of(a, part, rows, cols, (kh, kw), ic, dtype))
                        out[n0:n0 + t.nt, g0:g0 + t.gt, :, o0:rows.stop, q0:cols.stop] = \
                            tile.reshape(*tile.shape[:3], len(rows), len(cols))
                        del tile  # one tile's results at a time (conv2d_scratch)
        y = out.reshape(n, oc, oh, ow)
    if b is not None:
        y += b[:, None, None]
    return (y,)


CONV2D = OpDef("conv2d", Conv2DAttrs, _use_bias_inputs, ("output",),
               shape=conv2d_shape, precision=conv2d_precision, cost=conv2d_cost, kernel=conv2d_kernel,
               plan=conv2d_plan, held=conv2d_held, bind=conv2d_bind, reference=reference.conv2d,
               work=conv2d_work, scratch=conv2d_scratch,
               in_range="an exact GEMM bounded by the plan's out_bound, checked within the precision (require_within)")


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
    plan = gemm_plan(x.shape[1], x.precision, w.precision, None if b is None else b.precision)
    return require_within(plan, *dense_precision(a, x, w, b))


def dense_work(a: DenseAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    (m, k), units = inputs[0].shape, a.units
    plan = dense_plan(a, *inputs)
    return gemm_work(plan, m * units * k, 1) + 2 * (m + units) * k + outputs[0].size * (2 * plan.chunks + 1)


def dense_scratch(a: DenseAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    """Both operands in the GEMM's dtype, the GEMM results, and an int64 output beside its int32 copy."""
    (m, k), units = inputs[0].shape, a.units
    plan = dense_plan(a, *inputs)
    wide = 8 * outputs[0].size if plan.out_dtype.itemsize == 8 else 0
    return (m + units) * k * plan.operand_dtype.itemsize + gemm_result_bytes(plan, outputs[0].size) + wide


def dense_held(a: DenseAttrs, plan: GemmPlan, x: bool, w: bool, b: bool = False) -> int:
    """What dense_bind will hold: weights that are a param, in the GEMM's dtype, and with them a
    bias that is a param when the GEMM folds it."""
    e = plan.operand_dtype.itemsize
    return (a.units * plan.k * e + (a.units * e if b and plan.folds_bias else 0)) if w else 0


def dense_bind(a: DenseAttrs, plan: GemmPlan, x: np.ndarray | None, w: np.ndarray | None,
               b: np.ndarray | None = None) -> GemmPlan:
    """Weights that are a param are cast to the GEMM's dtype and transposed once, not on every run;
    a bias that is a param too is added inside the GEMM when it folds it."""
    return plan if w is None else plan.bound_to(w.T, b)


def dense_kernel(a: DenseAttrs, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
                 plan: GemmPlan) -> tuple[np.ndarray, ...]:
    """Y = X W^T (+ B), by the GEMM path of ``plan``."""
    dtype = plan.operand_dtype
    y = exact_gemm(plan, x.astype(dtype), w.astype(dtype).T if plan.weights is None else plan.weights)
    if b is not None and plan.bias is None:
        y += b
    return (y,)


DENSE = OpDef("dense", DenseAttrs, _use_bias_inputs, ("output",),
              shape=dense_shape, precision=dense_precision, cost=dense_cost, kernel=dense_kernel,
              plan=dense_plan, held=dense_held, bind=dense_bind, reference=reference.dense,
              work=dense_work, scratch=dense_scratch,
              in_range="an exact GEMM bounded by the plan's out_bound, checked within the precision (require_within)")


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


def pool_compaction(size: int, k: int, s: int, p: int, out: int) -> tuple[int, int, bool]:
    """How max_pool2d reads one axis: (stride, length, gathered) of the compact axis its windows use.

    Window o's taps r in [0, k) sit at compact position o*s' + r with s' = min(s, k):
    the input coordinates themselves (minus the padding) when windows overlap or
    touch, or, when the stride skips input between windows (s > k), only the
    k cells of each window side by side.  The compact axis is gathered from the
    input (padding cells INT32_MIN) unless it is a plain slice of the input.
    """
    step = min(s, k)
    length = (out - 1) * step + k
    return step, length, s > k or p > 0 or length > size


def _pool_coordinates(size: int, k: int, s: int, p: int, out: int) -> np.ndarray:
    """The input coordinate of each compact position (pool_compaction), negative or >= size in padding."""
    step, length, _ = pool_compaction(size, k, s, p, out)
    m = np.arange(length, dtype=np.int64)
    return m - p if step == s else (m // k) * s + m % k - p


def _compact_size(a: MaxPool2DAttrs, x: Shape, y: Shape) -> tuple[int, int, bool]:
    """(compact rows, compact columns, whether the compact input is gathered) of max_pool2d over x -> y."""
    (kh, kw), (sh, sw) = a.pool_size, a.strides
    ph, pw = pool_padding(a)
    _, rows, gather_rows = pool_compaction(x[2], kh, sh, ph, y[2])
    _, cols, gather_cols = pool_compaction(x[3], kw, sw, pw, y[3])
    return rows, cols, gather_rows or gather_cols


# A max_pool2d whose windows hold at most this many cells in all (output size x
# kernel volume), over an input padded to at most this many, gathers every window's
# cells with one take through an index built at verification (held by its plan),
# and reduces them in one call: two or four numpy calls where the separable passes
# cost a copy and a call per window row and column.
SMALL_POOL = 1 << 15


def _pool_extent(a: MaxPool2DAttrs, x: Shape) -> tuple[int, int]:
    (kh, kw), (sh, sw) = a.pool_size, a.strides
    ph, pw = pool_padding(a)
    return pool_extent(x[2], kh, sh, ph, a.ceil_mode), pool_extent(x[3], kw, sw, pw, a.ceil_mode)


def _pool_padded(a: MaxPool2DAttrs, x: Shape) -> tuple[int, int]:
    """Rows and columns of the input padded on every side a window reaches (ceil_mode's last
    window may reach past the padding)."""
    oh, ow = _pool_extent(a, x)
    return tuple(p + max(size + p, (o - 1) * s - p + k)
                 for size, k, s, p, o in zip(x[2:], a.pool_size, a.strides, pool_padding(a), (oh, ow)))  # type: ignore


def max_pool2d_small(a: MaxPool2DAttrs, x: Shape) -> bool:
    oh, ow = _pool_extent(a, x)
    hp, wp = _pool_padded(a, x)
    return (x[0] * x[1] * oh * ow * a.pool_size[0] * a.pool_size[1] <= SMALL_POOL
            and x[0] * x[1] * hp * wp <= SMALL_POOL)


def max_pool2d_gather_index(a: MaxPool2DAttrs, x: Shape) -> np.ndarray:
    """(KH*KW, N, C, OH, OW): every window cell's flat position in the padded input (_pool_padded)."""
    n, c = x[:2]
    (kh, kw), (sh, sw) = a.pool_size, a.strides
    oh, ow = _pool_extent(a, x)
    hp, wp = _pool_padded(a, x)
    axes = [np.arange(size, dtype=np.intp) for size in (kh, kw, n * c, oh, ow)]
    r, q, nc, p, o = (ax.reshape([-1 if i == k else 1 for i in range(5)]) for k, ax in enumerate(axes))
    index = (nc * hp + p * sh + r) * wp + o * sw + q                                 # (KH, KW, N*C, OH, OW)
    return np.ascontiguousarray(index.reshape(kh * kw, n, c, oh, ow))


@dataclass(frozen=True)
class PoolPlan:
    """How one max_pool2d runs: each axis' compaction (pool_compaction: step, length, gathered),
    whether it is small (max_pool2d_small), and a small one's gather index, made by
    max_pool2d_bind; without it the kernel takes the separable passes."""

    data: Shape               # the input's shape
    rows: tuple[int, int, bool]
    cols: tuple[int, int, bool]
    padded: tuple[int, int]   # rows and columns of the padded input a small one gathers from
    small: bool
    gather: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def held_bytes(self) -> int:
        """What the plan holds for the program's life: the gather index."""
        return 0 if self.gather is None else self.gather.nbytes

    def __str__(self) -> str:
        return "gather" if self.small else "separable"


def pool_plan(a: MaxPool2DAttrs, x: Shape, small: bool | None = None) -> PoolPlan:
    """max_pool2d's plan over this input shape; ``small`` forces the gather on or off (tests compare
    the formulations), by default max_pool2d_small decides."""
    (kh, kw), (sh, sw) = a.pool_size, a.strides
    ph, pw = pool_padding(a)
    oh, ow = _pool_extent(a, x)
    return PoolPlan(x, pool_compaction(x[2], kh, sh, ph, oh), pool_compaction(x[3], kw, sw, pw, ow),
                    _pool_padded(a, x), max_pool2d_small(a, x) if small is None else small)


def max_pool2d_plan(a: MaxPool2DAttrs, x: TensorType) -> PoolPlan:
    return pool_plan(a, x.shape)


def max_pool2d_held(a: MaxPool2DAttrs, plan: PoolPlan, x: bool) -> int:
    """What max_pool2d_bind will hold: a small one's gather index, 8 bytes per window cell."""
    n, c = plan.data[:2]
    oh, ow = _pool_extent(a, plan.data)
    return 8 * n * c * oh * ow * a.pool_size[0] * a.pool_size[1] if plan.small else 0


def max_pool2d_bind(a: MaxPool2DAttrs, plan: PoolPlan, x: np.ndarray | None) -> PoolPlan:
    """A small one's gather index."""
    return dataclasses.replace(plan, gather=max_pool2d_gather_index(a, plan.data)) if plan.small else plan


def max_pool2d_work(a: MaxPool2DAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    """The gather of the compact input (when one), one pass per window row over the compact columns,
    one per window column over the output, and a numpy call per pass; a small one: the padded
    copy, the gather of every window cell and its reduction, and four numpy calls."""
    n, c, oh, ow = outputs[0].shape
    kh, kw = a.pool_size
    if max_pool2d_small(a, inputs[0].shape):
        hp, wp = _pool_padded(a, inputs[0].shape)
        return n * c * hp * wp + 6 * outputs[0].size * kh * kw + 4 * NUMPY_CALL
    rows, cols, gathered = _compact_size(a, inputs[0].shape, outputs[0].shape)
    passes = n * c * oh * (kh * cols + kw * ow)
    return (4 * n * c * rows * cols if gathered else 0) + passes + (kh + kw + 8) * NUMPY_CALL


def max_pool2d_scratch(a: MaxPool2DAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    """The compact input and numpy's grid of its (row, column) indices (when gathered), and the row
    maxima (N, C, OH, compact columns); a small one: the padded input and every window cell."""
    n, c, oh, ow = outputs[0].shape
    if max_pool2d_small(a, inputs[0].shape):
        hp, wp = _pool_padded(a, inputs[0].shape)
        return 4 * (n * c * hp * wp + outputs[0].size * a.pool_size[0] * a.pool_size[1])
    rows, cols, gathered = _compact_size(a, inputs[0].shape, outputs[0].shape)
    return ((4 * n * c + 8) * rows * cols if gathered else 0) + 4 * n * c * oh * cols


def max_pool2d_kernel(a: MaxPool2DAttrs, x: np.ndarray, *, plan: PoolPlan) -> tuple[np.ndarray, ...]:
    """Y[n,c,p,q] = max of pad(X) over rows [p*SH - PH, +KH) and columns [q*SW - PW, +KW);
    padding cells are INT32_MIN, so they never win (every window holds a real cell).

    A small one: every window's cells gathered from the padded input at once, then reduced.
    Otherwise on the compact input (pool_compaction: only the cells windows touch, whatever the
    strides), separably: one whole-tensor maximum per window row, then per window column.
    """
    h, w = x.shape[2:]
    if plan.gather is not None:
        if plan.padded == (h, w):
            padded = x
        else:
            ph, pw = pool_padding(a)
            padded = np.full((*x.shape[:2], *plan.padded), INT32_MIN, dtype=np.int32)
            padded[:, :, ph:ph + h, pw:pw + w] = x
        return (np.maximum.reduce(padded.reshape(-1).take(plan.gather), axis=0),)
    (kh, kw), (sh, sw) = a.pool_size, a.strides
    ph, pw = pool_padding(a)
    (step_h, rows, gather_rows), (step_w, cols, gather_cols) = plan.rows, plan.cols
    oh = pool_extent(h, kh, sh, ph, a.ceil_mode)
    ow = pool_extent(w, kw, sw, pw, a.ceil_mode)
    compact = x[:, :, :rows, :cols]
    if gather_rows or gather_cols:
        ri = _pool_coordinates(h, kh, sh, ph, oh) if gather_rows else np.arange(rows, dtype=np.int64)
        ci = _pool_coordinates(w, kw, sw, pw, ow) if gather_cols else np.arange(cols, dtype=np.int64)
        compact = x[:, :, np.clip(ri, 0, h - 1)[:, None], np.clip(ci, 0, w - 1)[None, :]]
        compact[:, :, (ri < 0) | (ri >= h), :] = INT32_MIN
        compact[:, :, :, (ci < 0) | (ci >= w)] = INT32_MIN
    last_h, last_w = (oh - 1) * step_h + 1, (ow - 1) * step_w + 1
    maxima = compact[:, :, 0:last_h:step_h].copy()
    for r in range(1, kh):
        np.maximum(maxima, compact[:, :, r:r + last_h:step_h], out=maxima)
    y = maxima[:, :, :, 0:last_w:step_w].copy()
    for s in range(1, kw):
        np.maximum(y, maxima[:, :, :, s:s + last_w:step_w], out=y)
    return (y,)


MAX_POOL2D = OpDef("max_pool2d", MaxPool2DAttrs, fixed("data"), ("output",),
                   shape=max_pool2d_shape, precision=same_precision, cost=max_pool2d_cost,
                   kernel=max_pool2d_kernel, plan=max_pool2d_plan, held=max_pool2d_held,
                   bind=max_pool2d_bind, reference=reference.max_pool2d,
                   work=max_pool2d_work, scratch=max_pool2d_scratch,
                   in_range="selects input values (padding never wins)")


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


def upsampling_work(a: UpSamplingAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    return 2 * outputs[0].size


def upsampling_scratch(a: UpSamplingAttrs, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    """The input with its columns repeated: 1/scale of the output."""
    return 4 * outputs[0].size // a.scale


def upsampling_kernel(a: UpSamplingAttrs, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y[n,c,h,w] = X[n,c,h // scale,w // scale] (nearest neighbour): columns repeated, then whole rows."""
    return (np.repeat(np.repeat(x, a.scale, axis=3), a.scale, axis=2),)


UPSAMPLING = OpDef("upsampling", UpSamplingAttrs, fixed("data"), ("output",),
                   shape=upsampling_shape, precision=same_precision, cost=unit_cost, kernel=upsampling_kernel,
                   reference=reference.upsampling,
                   work=upsampling_work, scratch=upsampling_scratch, in_range="selects input values")

