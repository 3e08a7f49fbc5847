"""Static tensor facts and the integer helpers every op shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from isa.errors import LimitError

Shape = tuple[int, ...]

INT32 = "int32"

# Every dtype a cvmvm tensor may have, as the VM computes with it: numpy's native byte order,
# which is what every kernel produces on the machine it runs on (">i4" on s390x, "<i4" on x86_64).
# Only int32 carries a precision; the others exist for max_pool (MAXPOOL.md).
DTYPES: dict[str, np.dtype] = {
    "int8": np.dtype(np.int8),
    "uint8": np.dtype(np.uint8),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "float16": np.dtype(np.float16),
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
}

# The same dtypes as bytes: every format and every hash is little-endian, whatever the host.
# Decoders read these and convert to DTYPES; encoders convert to these.
WIRE_DTYPES: dict[str, np.dtype] = {name: dt.newbyteorder("<") for name, dt in DTYPES.items()}

# The VM dtype of each numpy dtype, byte order aside.
_VM_DTYPES: dict[np.dtype, str] = {dt: name for name, dt in WIRE_DTYPES.items()}


def vm_dtype(dtype: np.dtype) -> str | None:
    """The VM dtype name of a numpy dtype (either byte order), or None when the VM has none.

    The one way to compare dtypes: ``value.dtype == np.dtype("<i4")`` is false on a
    big-endian host for the very arrays the VM computes.
    """
    return _VM_DTYPES.get(np.dtype(dtype).newbyteorder("<"))


MAX_RANK = 6
MAX_DIM = 1 << 24
MAX_SIZE = 1 << 30
MAX_OPS = 1 << 40   # a program's total cost (verification), and a receipt's ops field
MIN_PRECISION = 1
MAX_PRECISION = 32


@dataclass(frozen=True)
class TensorType:
    """What verification knows about a tensor before any value exists."""

    shape: Shape
    # int32 CVM tensors: in [1, 32].  None: other dtypes, and raw int32 (the
    # full range, INT32_MIN included), which only max_pool accepts.
    precision: int | None
    dtype: str = INT32

    @property
    def size(self) -> int:
        return shape_size(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)


def check_shape(shape: Sequence[int], where: str) -> None:
    """The ISA's limits on every tensor: rank in [1, 6], dims in [1, 2^24], at most 2^30 elements."""
    if not 1 <= len(shape) <= MAX_RANK:
        raise LimitError("rank", f"{where}: rank {len(shape)} must be in [1, {MAX_RANK}]")
    for d in shape:
        if not 1 <= d <= MAX_DIM:
            raise LimitError("dim", f"{where}: dimension {d} of shape {tuple(shape)} must be in [1, 2^24]")
    if shape_size(shape) > MAX_SIZE:
        raise LimitError("size", f"{where}: {shape_size(shape)} elements in shape {tuple(shape)} exceed 2^30")


def shape_size(shape: Sequence[int]) -> int:
    """Number of elements, as an unbounded Python int."""
    n = 1
    for d in shape:
        n *= d
    return n


def bitlen(n: int) -> int:
    """Bits needed for |n|: Python's int.bit_length (1 -> 1, 4 -> 3, 8 -> 4)."""
    return int(n).bit_length()


def number_precision(n: int) -> int:
    """The Cortex runtime's GetNumberPrecision: bitlen(n + 1) + 1 (127 -> 9, off by one at 2^k - 1, kept on purpose)."""
    return bitlen(int(n) + 1) + 1


def precision_bound(precision: int) -> int:
    """Largest |v| a tensor of this precision may hold: 2^(p-1) - 1."""
    return (1 << (precision - 1)) - 1


def clip_to_precision(x: np.ndarray, precision: int) -> np.ndarray:
    """Clip to +-(2^(p-1) - 1) and return int32; input may be int32 or int64."""
    bound = precision_bound(precision)
    return np.clip(x, -bound, bound).astype(np.int32)


def div_trunc(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C division, broadcasting: truncates toward zero, and x / 0 = 0.

    numpy's ``//`` floors, so the quotient is taken on magnitudes and the sign
    put back, in the operands' common integer dtype: no operand may be that
    dtype's minimum, whose magnitude it cannot hold (no CVM int32 value is
    INT32_MIN).  Every intermediate is that dtype or bool, so an int32
    division holds 4-byte temporaries, not 8.
    """
    zero = b == 0
    q = np.floor_divide(np.abs(a), np.abs(np.where(zero, b.dtype.type(1), b)))
    np.negative(q, out=q, where=(a < 0) != (b < 0))
    np.copyto(q, 0, where=zero)
    return q


def round_half_away(x: np.ndarray | float) -> np.ndarray:
    """The nearest integer to each finite float64, halves away from zero, exactly (as float64).

    x - trunc(x) is exact in IEEE arithmetic (below 1 it is x itself, above 1
    Sterbenz's lemma applies, and from 2^52 on x is an integer), so the
    comparison with 0.5 decides on the true fraction; numpy's ``round`` rounds
    halves to even and ``floor(x + 0.5)`` rounds 0.49999999999999994 up.
    """
    x = np.asarray(x, dtype=np.float64)
    whole = np.trunc(x)
    up = np.abs(x - whole) >= 0.5
    return whole + np.where(up, np.sign(x), 0.0)


def quantize_float(x: np.ndarray, scale: float, precision: int) -> np.ndarray:
    """A finite float array -> int32 CVM values at ``scale`` (docs/FORMAT.md 1.6).

    q = clip(round_half_away(x / scale), -(2^(p-1) - 1), 2^(p-1) - 1), with x
    converted to float64 exactly and divided in IEEE float64: the same bytes on
    every platform.  Clipping before rounding as well keeps the rounding in
    range and changes nothing, since rounding is monotone.
    """
    bound = precision_bound(precision)
    with np.errstate(over="ignore"):    # a quotient past float64's range is infinite, and clipped
        ratio = np.asarray(x, dtype=np.float64) / np.float64(scale)
    rounded = round_half_away(np.clip(ratio, -bound - 1.0, bound + 1.0))
    return np.clip(rounded, -bound, bound).astype(np.int32)
