"""nn ops of the CVM instruction set: conv2d, dense, max_pool2d, upsampling.

conv2d and dense are exact integer GEMMs.  Their inputs are at most 8 bits
(the precision rule requires it), so every product and every sum of a
verified program fits int64 many times over; ``exact_gemm`` is the one place
that multiplies, so a faster exact path can replace it without touching the
ops.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from isa.attrs import ANY_BOOL, BOOL, INT, INT32_MAX, INT32_MIN, INTS, STR, attr, between, each, one_of
from isa.errors import require
from isa.spec import OpDef, fixed, same_precision, unit_cost
from isa.types import MAX_DIM, Shape, TensorType, bitlen

# The formalization's attribute range [min_attr, max_attr): strides, dilation,
# padding and scale lie below max_attr.
MAX_ATTR = 4096
POSITIVE_ATTR = between(1, MAX_ATTR - 1)
NON_NEGATIVE_ATTR = between(0, MAX_ATTR - 1)
MAX_INPUT_PRECISION = 8  # conv2d and dense multiply int8 by int8


def exact_gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b (numpy matmul broadcasting) in int64: exact, no float anywhere."""
    # Casting up front: matmul's own dtype= casting is several times slower.
    return np.matmul(a.astype(np.int64, copy=False), b.astype(np.int64, copy=False))


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


def conv2d_patches(a: Conv2DAttrs, x: np.ndarray) -> np.ndarray:
    """im2col: (N, groups, OH*OW, C/groups*KH*KW), zero padding, int64.

    Row (n, g, p*OW + q) holds the receptive field of output (p, q) over the
    input channels of group g, in the weight's (C/groups, KH, KW) order.
    """
    n, c, _, _ = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = a.kernel_size, a.strides, a.padding, a.dilation
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    windows = sliding_window_view(padded, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
    windows = windows[:, :, ::sh, ::sw, ::dh, ::dw]  # (N, C, OH, OW, KH, KW), still a view
    oh, ow = windows.shape[2], windows.shape[3]
    grouped = windows.reshape(n, a.groups, c // a.groups, oh, ow, kh, kw).transpose(0, 1, 3, 4, 2, 5, 6)
    return np.ascontiguousarray(grouped, dtype=np.int64).reshape(n, a.groups, oh * ow, (c // a.groups) * kh * kw)


def conv2d_kernel(a: Conv2DAttrs, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Y[n,o,p,q] = sum_{i,r,s} pad0(X)[n, g*IC + i, p*SH + r*DH - PH, q*SW + s*DW - PW] * W[o,i,r,s] (+ B[o]),
    with IC = C/groups and g = o // (OC/groups), the group of output channel o."""
    n = x.shape[0]
    oc = w.shape[0]
    patches = conv2d_patches(a, x)                                    # (N, G, OH*OW, IC*KH*KW)
    weights = w.reshape(a.groups, oc // a.groups, -1).transpose(0, 2, 1)  # (G, IC*KH*KW, OC/G)
    y = exact_gemm(patches, weights)                                  # (N, G, OH*OW, OC/G)
    oh, ow = conv2d_extent(a, x.shape[2], x.shape[3])
    y = y.transpose(0, 1, 3, 2).reshape(n, oc, oh, ow)
    if b is not None:
        y += b.astype(np.int64)[None, :, None, None]
    return (y,)


CONV2D = OpDef("conv2d", Conv2DAttrs, _use_bias_inputs, ("output",),
               shape=conv2d_shape, precision=conv2d_precision, cost=conv2d_cost, kernel=conv2d_kernel)


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


def dense_kernel(a: DenseAttrs, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Y = X W^T (+ B)."""
    y = exact_gemm(x, w.T)
    if b is not None:
        y += b.astype(np.int64)
    return (y,)


DENSE = OpDef("dense", DenseAttrs, _use_bias_inputs, ("output",),
              shape=dense_shape, precision=dense_precision, cost=dense_cost, kernel=dense_kernel)


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
    padding cells are INT32_MIN, so they never win (every window holds a real cell)."""
    (kh, kw), (sh, sw) = a.pool_size, a.strides
    ph, pw = pool_padding(a)
    h, w = x.shape[2:]
    oh = pool_extent(h, kh, sh, ph, a.ceil_mode)
    ow = pool_extent(w, kw, sw, pw, a.ceil_mode)
    # ceil_mode's last window may reach past the symmetric padding.
    bottom = max(ph, (oh - 1) * sh + kh - h - ph)
    right = max(pw, (ow - 1) * sw + kw - w - pw)
    padded = np.pad(x, ((0, 0), (0, 0), (ph, bottom), (pw, right)), constant_values=INT32_MIN)
    windows = sliding_window_view(padded, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw][:, :, :oh, :ow]
    return (windows.max(axis=(4, 5)),)


MAX_POOL2D = OpDef("max_pool2d", MaxPool2DAttrs, fixed("data"), ("output",),
                   shape=max_pool2d_shape, precision=same_precision, cost=max_pool2d_cost,
                   kernel=max_pool2d_kernel)


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
                   shape=upsampling_shape, precision=same_precision, cost=unit_cost, kernel=upsampling_kernel)


OPS: tuple[OpDef, ...] = (CONV2D, DENSE, MAX_POOL2D, UPSAMPLING)
