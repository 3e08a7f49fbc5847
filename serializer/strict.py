"""Strict decoding shared by cvmvm's canonical msgpack records.

Receipts, transaction files and step proofs follow the native model format's
rules (docs/FORMAT.md section 1.1): one msgpack value, bounded before it is
unpacked (``native.scan``), maps with exactly the listed keys in order, exact
types, and decode -> re-encode reproducing the bytes.  Each record has its own
error reason, so a receipt that does not decode is ``malformed.receipt``, a
transaction file ``malformed.txs``, never ``malformed.native``.
"""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

from isa.attrs import BOOL, INT, INTS, OPT_INT, attr_fields, parse_attrs
from isa.errors import CvmError, LimitError, MalformedError
from isa.types import DTYPES, INT32, MAX_DIM, MAX_PRECISION, MAX_RANK, MAX_SIZE, MIN_PRECISION, TensorType, shape_size
from serializer import native

TENSOR_KEYS = ("dtype", "shape", "data")


class Reader:
    """Typed checks on an unpacked value; every failure is ``malformed.<reason>``."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def fail(self, message: str) -> MalformedError:
        return MalformedError(self.reason, message)

    def map(self, value: Any, keys: tuple[str, ...], where: str) -> dict[str, Any]:
        if type(value) is not dict:
            raise self.fail(f"{where}: expected a map")
        if tuple(value) != keys:
            raise self.fail(f"{where}: keys {list(value)} must be exactly {list(keys)} in that order")
        return value

    def int(self, value: Any, where: str, lo: int, hi: int) -> int:
        if type(value) is not int or not lo <= value <= hi:
            raise self.fail(f"{where}: expected an integer in [{lo}, {hi}], got {value!r}")
        return value

    def str(self, value: Any, where: str) -> str:
        if type(value) is not str:
            raise self.fail(f"{where}: expected a string, got {value!r}")
        return value

    def list(self, value: Any, where: str, max_len: int | None = None) -> list[Any]:
        if type(value) is not list:
            raise self.fail(f"{where}: expected an array")
        if max_len is not None and len(value) > max_len:
            raise self.fail(f"{where}: {len(value)} items exceed {max_len}")
        return value

    def bin(self, value: Any, where: str, size: int | None = None) -> bytes:
        if type(value) is not bytes:
            raise self.fail(f"{where}: expected bin")
        if size is not None and len(value) != size:
            raise self.fail(f"{where}: {len(value)} bytes, expected {size}")
        return value

    def const(self, value: Any, expected: str | int, where: str) -> None:
        """A fixed format name or version (type checked too: 1 is not True)."""
        if type(value) is not type(expected) or value != expected:
            raise self.fail(f"{where} is {value!r}, expected {expected!r}")

    def shape(self, value: Any, where: str) -> tuple[int, ...]:
        dims = self.list(value, where)
        if not 1 <= len(dims) <= MAX_RANK:
            raise LimitError("rank", f"{where}: rank {len(dims)} must be in [1, {MAX_RANK}]")
        shape = tuple(self.int(d, where, 1, MAX_DIM) for d in dims)
        if shape_size(shape) > MAX_SIZE:
            raise LimitError("size", f"{where}: {shape_size(shape)} elements exceed 2^30")
        return shape

    def dtype(self, value: Any, where: str) -> str:
        if type(value) is not str or value not in DTYPES:
            raise self.fail(f"{where}: dtype {value!r} is not one of {list(DTYPES)}")
        return value

    def tensor_type(self, e: dict[str, Any], where: str) -> TensorType:
        """dtype, shape and precision keys of ``e``: a precision in [1, 32] for int32, nil otherwise."""
        dtype = self.dtype(e["dtype"], f"{where}.dtype")
        shape = self.shape(e["shape"], f"{where}.shape")
        if dtype == INT32:
            return TensorType(shape, self.int(e["precision"], f"{where}.precision", MIN_PRECISION, MAX_PRECISION), dtype)
        if e["precision"] is not None:
            raise self.fail(f"{where}: dtype {dtype} carries no precision (nil), got {e['precision']!r}")
        return TensorType(shape, None, dtype)

    def array(self, dtype: str, shape: tuple[int, ...], data: Any, where: str) -> np.ndarray:
        """Row-major little-endian bytes -> a read-only array, length checked first."""
        wire = DTYPES[dtype].newbyteorder("<")
        data = self.bin(data, where, shape_size(shape) * wire.itemsize)
        value = np.frombuffer(data, dtype=wire).reshape(shape).astype(DTYPES[dtype], copy=False)
        value.setflags(write=False)
        return value

    def attrs(self, record: type, raw: Any, where: str) -> Any:
        """Every attribute of ``record``, in declared order, each of its kind; parse_attrs
        then checks the domains (invalid.attr)."""
        specs = attr_fields(record)
        raw = self.map(raw, tuple(s.name for s in specs), where)
        for s in specs:
            if not _of_kind(s.kind, raw[s.name]):
                raise self.fail(f"{where}: attribute {s.name}={raw[s.name]!r} is not of kind {s.kind}")
        return parse_attrs(record, raw, fill_defaults=False)

    def tensor(self, value: Any, where: str) -> np.ndarray:
        """A ``{"dtype", "shape", "data"}`` map (tensor_to_wire) -> array."""
        e = self.map(value, TENSOR_KEYS, where)
        dtype = self.dtype(e["dtype"], f"{where}.dtype")
        return self.array(dtype, self.shape(e["shape"], f"{where}.shape"), e["data"], f"{where}.data")


def _of_kind(kind: str, v: Any) -> bool:
    if kind == INT:
        return type(v) is int
    if kind == BOOL:
        return type(v) is bool
    if kind == INTS:
        return type(v) is list and all(type(x) is int for x in v)
    if kind == OPT_INT:
        return v is None or type(v) is int
    return type(v) is str


def attrs_to_wire(record: Any) -> dict[str, Any]:
    """Every attribute in declared order; ints tuples as arrays (the native wire form)."""
    return {f.name: (list(v) if f.kind == INTS else v)
            for f in attr_fields(type(record)) for v in (getattr(record, f.name),)}


def vm_dtype(value: np.ndarray) -> str:
    """The VM dtype of a numpy array (byte order aside)."""
    for name, dt in DTYPES.items():
        if value.dtype.newbyteorder("<") == dt.newbyteorder("<"):
            return name
    raise ValueError(f"no VM dtype for numpy dtype {value.dtype}")


def tensor_data(value: np.ndarray, dtype: str) -> bytes:
    """Row-major little-endian bytes of ``value`` in ``dtype`` (the bytes its tensor hash covers)."""
    return np.ascontiguousarray(value, dtype=DTYPES[dtype].newbyteorder("<")).tobytes()


def tensor_to_wire(value: np.ndarray, dtype: str) -> dict[str, Any]:
    return {"dtype": dtype, "shape": [int(d) for d in value.shape], "data": tensor_data(value, dtype)}


def unpack(data: bytes, reader: Reader) -> Any:
    """One bounded msgpack value with no duplicate keys, floats or extension types."""
    data = bytes(data)
    try:
        native.scan(data)
    except MalformedError as e:
        raise reader.fail(e.message) from None

    def pairs(items: list[tuple[Any, Any]]) -> dict[Any, Any]:
        d = dict(items)
        if len(d) != len(items):
            raise reader.fail(f"duplicate key in map {[k for k, _ in items]}")
        return d

    try:
        return msgpack.unpackb(
            data, raw=False, use_list=True, strict_map_key=True, object_pairs_hook=pairs,
            max_str_len=native.MAX_NAME, max_bin_len=len(data), max_array_len=native.MAX_ITEMS,
            max_map_len=native.MAX_KEYS, max_ext_len=0)
    except CvmError:
        raise
    except (ValueError, msgpack.UnpackException, TypeError) as e:
        raise reader.fail(f"not valid msgpack: {e}") from None


def pack(wire: Any) -> bytes:
    # Shortest headers and integers, dicts in insertion order: FORMAT.md section 1.1.
    return msgpack.packb(wire, use_bin_type=True)


def require_canonical(data: bytes, wire: Any, what: str) -> None:
    """The decoded value must re-encode to exactly the bytes it came from."""
    if pack(wire) != bytes(data):
        raise MalformedError("noncanonical", f"the bytes decode, but are not the canonical encoding of the {what}")
