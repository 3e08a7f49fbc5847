"""The Cortex params binary (cvm-runtime LoadParams): named int8/int32 arrays, read and written.

Reading bounds every count and length by the bytes left before anything is
allocated.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from isa.errors import MalformedError
from isa.types import DTYPES, INT32, MAX_RANK, WIRE_DTYPES, shape_size

PARAMS_MAGIC = 0xF7E58D4F05049CB7
ARRAY_MAGIC = 0xDD5E40F096B4A13F
DEVICE_CPU = 1
TYPE_CODE_INT = 0
ARRAY_HEADER = "<QQiiiBBH"  # magic, reserved, device type, device id, ndim, type code, bits, lanes


@dataclass(frozen=True)
class ParamArray:
    bits: int
    values: np.ndarray  # int32, read-only, in its declared shape


class _Cursor:
    """Bounded reads: every length is checked against the bytes left before it is used."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    @property
    def left(self) -> int:
        return len(self.data) - self.pos

    def take(self, size: int, what: str) -> int:
        if size > self.left:
            raise MalformedError("params", f"truncated: {what} needs {size} bytes at offset {self.pos}, "
                                           f"{self.left} left")
        start = self.pos
        self.pos += size
        return start

    def unpack(self, fmt: str, what: str) -> tuple[Any, ...]:
        return struct.unpack_from(fmt, self.data, self.take(struct.calcsize(fmt), what))


def read_params(blob: bytes) -> dict[str, ParamArray]:
    """name -> array, in file order."""
    cur = _Cursor(blob)
    magic, reserved = cur.unpack("<QQ", "the file header")
    if magic != PARAMS_MAGIC:
        raise MalformedError("params", f"file magic {magic:#018x} is not {PARAMS_MAGIC:#018x}")
    if reserved != 0:
        raise MalformedError("params", f"reserved word {reserved} must be 0")
    (count,) = cur.unpack("<Q", "the name count")
    if count > cur.left // 8:  # every name takes at least its 8-byte length
        raise MalformedError("params", f"name count {count} exceeds what the {cur.left} bytes left can hold")
    names: list[str] = []
    for k in range(count):
        (length,) = cur.unpack("<Q", f"the length of name {k}")
        start = cur.take(length, f"name {k}")
        try:
            names.append(blob[start:start + length].decode("utf-8"))
        except UnicodeDecodeError:
            raise MalformedError("params", f"name {k} is not UTF-8") from None
    (num_arrays,) = cur.unpack("<Q", "the array count")
    if num_arrays != count:
        raise MalformedError("params", f"{num_arrays} arrays for {count} names")
    arrays: dict[str, ParamArray] = {}
    for name in names:
        if name in arrays:
            raise MalformedError("params", f"param {name!r} is given twice")
        arrays[name] = _read_array(cur, name)
    if cur.left:
        raise MalformedError("params", f"{cur.left} trailing bytes after the last array")
    return arrays


def _read_array(cur: _Cursor, name: str) -> ParamArray:
    what = f"array {name!r}"
    magic, reserved, device, device_id, ndim, code, bits, lanes = cur.unpack(ARRAY_HEADER, f"the {what} header")
    if magic != ARRAY_MAGIC:
        raise MalformedError("params", f"{what}: magic {magic:#018x} is not {ARRAY_MAGIC:#018x}")
    if reserved != 0:
        raise MalformedError("params", f"{what}: reserved word {reserved} must be 0")
    if device != DEVICE_CPU or device_id != 0:
        raise MalformedError("params", f"{what}: device ({device}, {device_id}) must be the CPU (1, 0)")
    if code != TYPE_CODE_INT or bits not in (8, 32) or lanes != 1:
        raise MalformedError("params", f"{what}: type (code {code}, {bits} bits, {lanes} lanes) must be "
                                       "int8 or int32")
    if not 1 <= ndim <= MAX_RANK:
        raise MalformedError("params", f"{what}: ndim {ndim} must be in [1, {MAX_RANK}]")
    shape = cur.unpack(f"<{ndim}q", f"the {what} shape")
    if any(d < 1 for d in shape):
        raise MalformedError("params", f"{what}: shape {shape} has a dimension < 1")
    (nbytes,) = cur.unpack("<q", f"the {what} byte size")
    count = shape_size(shape)
    if nbytes != count * bits // 8:
        raise MalformedError("params", f"{what}: byte size {nbytes} must be {count} x {bits // 8}")
    start = cur.take(nbytes, f"the {what} data")
    wire = WIRE_DTYPES["int8"] if bits == 8 else WIRE_DTYPES[INT32]   # the file is little-endian
    raw = np.frombuffer(cur.data, dtype=wire, count=count, offset=start)
    # To the VM's int32: int8 sign-extends; little-endian int32 is byte-swapped on a
    # big-endian host and taken without a copy on a little-endian one.
    values = raw.astype(DTYPES[INT32], copy=False).reshape(shape)
    values.flags.writeable = False
    return ParamArray(bits, values)


def write_params(arrays: Sequence[tuple[str, np.ndarray, int]]) -> bytes:
    """(name, int32 values, stored bits) in file order -> the params binary."""
    parts = [struct.pack("<QQQ", PARAMS_MAGIC, 0, len(arrays))]
    for name, _, _ in arrays:
        encoded = name.encode("utf-8")
        parts.append(struct.pack("<Q", len(encoded)) + encoded)
    parts.append(struct.pack("<Q", len(arrays)))
    parts += [_array_bytes(name, value, bits) for name, value, bits in arrays]
    return b"".join(parts)


def _array_bytes(name: str, value: np.ndarray, bits: int) -> bytes:
    if bits == 8:
        if value.size and (int(value.min()) < -128 or int(value.max()) > 127):
            raise ValueError(f"param {name!r}: the layout stores it as int8, but its values do not fit")
        data = value.astype(WIRE_DTYPES["int8"]).tobytes()
    else:
        data = value.astype(WIRE_DTYPES[INT32]).tobytes()
    return (struct.pack(ARRAY_HEADER, ARRAY_MAGIC, 0, DEVICE_CPU, 0, value.ndim, TYPE_CODE_INT, bits, 1)
            + struct.pack(f"<{value.ndim}q", *value.shape) + struct.pack("<q", len(data)) + data)
