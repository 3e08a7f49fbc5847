"""Strict decoding of cvmvm's canonical msgpack records (docs/FORMAT.md section 1.1).

The native model format, receipts, transaction files and step proofs share one
discipline: one msgpack value, bounded before it is unpacked (``scan``), maps
with exactly the listed keys in order, exact types, and decode -> re-encode
reproducing the bytes (``decode``).  Each record has its own error reason, so
a receipt that does not decode is ``malformed.receipt``, a transaction file
``malformed.txs``, a model ``malformed.native``.
"""

from __future__ import annotations

import builtins
import gc
import json
import re
import struct
import threading
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, TypeVar

import msgpack
import numpy as np

from isa.attrs import INTS, attr_fields, parse_attrs, well_typed
from isa.errors import CvmError, InvalidError, LimitError, MalformedError
from isa.types import DTYPES, INT32, WIRE_DTYPES, MAX_PRECISION, MIN_PRECISION, TensorType, check_shape, shape_size, vm_dtype

MAX_ITEMS = 1 << 20       # items in any msgpack array
MAX_KEYS = 64             # entries in any msgpack map
MAX_NAME = 1 << 10        # bytes in any msgpack str
# Bytes of Python objects an unpacked value may hold per byte of its msgpack outside bins' payloads
# (scan).  cvmvm's records need 13-19; a stream of empty maps would need 72.
OBJECT_BYTES_PER_BYTE = 32
MAX_JSON_DIGITS = 20      # digits in a JSON integer: every valid one has fewer (2^64 has 20)
# Nesting of JSON arrays and objects: every file cvmvm reads nests a few levels.  Checked before
# json.loads, whose C parser recurses once per level: Python's recursion limit bounds it only
# while nobody raised that limit (py-evm, imported by the chain tests, sets it to 100,000, and a
# nesting that deep overflows the C stack).
MAX_JSON_DEPTH = 100
_DEPTH_STEP = 1 << 18     # characters json_layout looks at in one numpy pass (at most about 10 MiB of temporaries)

Record = TypeVar("Record")


class Reader:
    """Typed checks on an unpacked value; every structural fault is ``malformed.<reason>``.

    (Its methods int, str and list shadow the builtins inside the class: annotations after
    them name the builtins through ``builtins``.)

    A well-typed value outside its domain (an unknown dtype, a dim or a
    precision out of range) is a structural fault of a record, but the model
    format gives it the code verification gives the same fault
    (``invalid.dtype``, ``limit.dim``, ``invalid.precision``; FORMAT.md 1.4):
    ``verifier_codes`` selects that.
    """

    def __init__(self, reason: str, verifier_codes: bool = False) -> None:
        self.reason = reason
        self.verifier_codes = verifier_codes

    def fail(self, message: str) -> MalformedError:
        return MalformedError(self.reason, message)

    def out_of_domain(self, error: CvmError) -> CvmError:
        return error if self.verifier_codes else self.fail(error.message)

    def map(self, value: Any, keys: tuple[str, ...], where: str) -> dict[str, Any]:
        if type(value) is not dict:
            raise self.fail(f"{where}: expected a map")
        if tuple(value) != keys:
            raise self.fail(f"{where}: keys {list(value)} must be exactly {list(keys)} in that order")
        return value

    def int(self, value: Any, where: builtins.str, lo: builtins.int | None = None,
            hi: builtins.int | None = None) -> builtins.int:
        """An integer (a bool is not one), in [lo, hi] when given."""
        if type(value) is not int:
            raise self.fail(f"{where}: expected an integer, got {value!r}")
        if lo is not None and hi is not None and not lo <= value <= hi:
            raise self.fail(f"{where}: {value} is not in [{lo}, {hi}]")
        return value

    def str(self, value: Any, where: builtins.str) -> builtins.str:
        if type(value) is not str:
            raise self.fail(f"{where}: expected a string, got {value!r}")
        return value

    def list(self, value: Any, where: builtins.str, max_len: builtins.int | None = None) -> builtins.list[Any]:
        if type(value) is not list:
            raise self.fail(f"{where}: expected an array")
        if max_len is not None and len(value) > max_len:
            raise self.fail(f"{where}: {len(value)} items exceed {max_len}")
        return value

    def bin(self, value: Any, where: builtins.str, size: builtins.int | None = None) -> bytes:
        if type(value) is not bytes:
            raise self.fail(f"{where}: expected bin")
        if size is not None and len(value) != size:
            raise self.fail(f"{where}: {len(value)} bytes, expected {size}")
        return value

    def version(self, top: Any, name: builtins.str, expected: builtins.int, what: builtins.str) -> None:
        """A record of its format but another version is refused by name, before its keys are
        read (they may differ between versions)."""
        if type(top) is dict and top.get("format") == name and "version" in top and top["version"] != expected:
            raise self.fail(f"{what} of version {top['version']!r}; this cvmvm reads version {expected}")

    def const(self, value: Any, expected: builtins.str | builtins.int, where: builtins.str) -> None:
        """A fixed format name or version (type checked too: 1 is not True)."""
        if type(value) is not type(expected) or value != expected:
            raise self.fail(f"{where} is {value!r}, expected {expected!r}")

    def shape(self, value: Any, where: builtins.str) -> tuple[builtins.int, ...]:
        shape = tuple(self.int(d, where) for d in self.list(value, where))
        try:
            check_shape(shape, where)
        except LimitError as e:
            # Rank and size are limits in every format; a dim is a value out of its domain.
            if e.reason != "dim":
                raise
            raise self.out_of_domain(e) from None
        return shape

    def dtype(self, value: Any, where: builtins.str) -> builtins.str:
        if self.str(value, where) not in DTYPES:
            raise self.out_of_domain(InvalidError("dtype", f"{where}: dtype {value!r} is not one of {list(DTYPES)}"))
        return value

    def tensor_type(self, e: dict[builtins.str, Any], where: builtins.str) -> TensorType:
        """The dtype, shape and precision keys of ``e``: a precision in [1, 32] or nil for int32
        (nil: a raw int32 tensor, INT32_MIN included, which only max_pool accepts), nil otherwise."""
        dtype = self.dtype(e["dtype"], f"{where}.dtype")
        shape = self.shape(e["shape"], f"{where}.shape")
        precision = e["precision"]
        if precision is not None:
            self.int(precision, f"{where}.precision")
            if dtype != INT32:
                raise self.out_of_domain(InvalidError(
                    "precision", f"{where}: dtype {dtype} carries no precision (nil), got {precision}"))
            if not MIN_PRECISION <= precision <= MAX_PRECISION:
                raise self.out_of_domain(InvalidError(
                    "precision", f"{where}: precision {precision} of an int32 tensor must be in [1, 32]"))
        return TensorType(shape, precision, dtype)

    def array(self, dtype: builtins.str, shape: tuple[builtins.int, ...], data: Any, where: builtins.str,
              storage: builtins.str | None = None) -> np.ndarray:
        """Row-major little-endian bytes of ``storage`` (default: ``dtype``) -> a read-only array
        of ``dtype``; the length is checked before any array is built."""
        wire = WIRE_DTYPES[storage or dtype]
        data = self.bin(data, where, shape_size(shape) * wire.itemsize)
        value = np.frombuffer(data, dtype=wire).reshape(shape).astype(DTYPES[dtype], copy=False)
        value.setflags(write=False)
        return value

    def tensor(self, e: dict[builtins.str, Any], where: builtins.str) -> np.ndarray:
        """The dtype, shape and data keys of ``e`` (tensor_to_wire) -> array."""
        dtype = self.dtype(e["dtype"], f"{where}.dtype")
        return self.array(dtype, self.shape(e["shape"], f"{where}.shape"), e["data"], f"{where}.data")

    def attrs(self, record: type, raw: Any, where: builtins.str) -> Any:
        """Every attribute of ``record``, in declared order, each of its kind; parse_attrs
        then checks the domains (invalid.attr)."""
        specs = attr_fields(record)
        raw = self.map(raw, tuple(s.name for s in specs), where)
        for s in specs:
            if not well_typed(s.kind, raw[s.name], list):
                raise self.fail(f"{where}: attribute {s.name}={raw[s.name]!r} is not of kind {s.kind}")
        return parse_attrs(record, raw, fill_defaults=False)


# -- encoding ----------------------------------------------------------------------

def attrs_to_wire(record: Any) -> dict[str, Any]:
    """Every attribute in declared order; ints tuples as arrays (the native wire form)."""
    return {f.name: (list(v) if f.kind == INTS else v)
            for f in attr_fields(type(record)) for v in (getattr(record, f.name),)}


def tensor_data(value: np.ndarray, dtype: str) -> bytes:
    """Row-major little-endian bytes of ``value`` in ``dtype`` (the bytes its tensor hash covers)."""
    return np.ascontiguousarray(value, dtype=WIRE_DTYPES[dtype]).tobytes()


def tensor_to_wire(value: np.ndarray) -> dict[str, Any]:
    """The dtype, shape and data keys of a tensor on the wire; the array must be of a VM dtype."""
    dtype = vm_dtype(value.dtype)
    if dtype is None:
        raise ValueError(f"no VM dtype for numpy dtype {value.dtype}")
    return {"dtype": dtype, "shape": [int(d) for d in value.shape], "data": tensor_data(value, dtype)}


def pack(wire: Any) -> bytes:
    # msgpack-python writes every integer, str, bin, array and map header in its
    # shortest form and dicts in insertion order: exactly FORMAT.md section 1.1.
    return msgpack.packb(wire, use_bin_type=True)


# -- decoding: the token scan ----------------------------------------------------------

# Header byte -> (bytes of the big-endian length or count after it, what it heads).
_SIZED: dict[int, tuple[int, str]] = {
    0xc4: (1, "bin"), 0xc5: (2, "bin"), 0xc6: (4, "bin"),
    0xd9: (1, "str"), 0xda: (2, "str"), 0xdb: (4, "str"),
    0xdc: (2, "array"), 0xdd: (4, "array"), 0xde: (2, "map"), 0xdf: (4, "map"),
}
# Header byte -> payload bytes of a sized integer.
_FIXED: dict[int, int] = {0xcc: 1, 0xcd: 2, 0xce: 4, 0xcf: 8, 0xd0: 1, 0xd1: 2, 0xd2: 4, 0xd3: 8}
_LENGTH = {1: struct.Struct(">B"), 2: struct.Struct(">H"), 4: struct.Struct(">I")}
_CACHED_INTS = (0xcc, 0xd0)   # uint8, int8: CPython shares every int in [-5, 256]


def scan(data: bytes, reader: Reader, bins: list[tuple[int, int]] | None = None) -> int:
    """Check the token stream before unpacking: one complete value, no floats or
    extension types, every count and length within its bound and within the
    bytes that remain.  A container's items take at least one byte each, so
    the lists msgpack preallocates never hold more slots than the data has
    bytes, whatever the headers claim.  ``bins``, when given, gets each bin's
    payload as (start, end), in stream order.

    The objects unpacking would build are costed too, each at CPython's size
    for it or more (a reference 8 bytes, an int outside the cached ones 32, a
    str 49 + its bytes, or 80 + 4 per byte when not ASCII, a bin 33 beside its
    payload, an array 56, a map 64 + 40 a key; the empty str and bin and
    one-byte ones are shared), and refused beyond OBJECT_BYTES_PER_BYTE per
    byte of the data outside bins' payloads: a one-byte empty map is 72 bytes
    of objects, so without this a record would cost 72 times its size.
    Returns those bytes of objects.
    """
    end = len(data)
    pos = 0
    pending = 1  # values still to read
    objects = 0  # bytes of the objects unpacking builds, but for bins' payloads
    payloads = 0
    while pending:
        if pos >= end:
            raise reader.fail(f"truncated: {pending} more values expected at byte {pos}")
        start = pos
        b = data[pos]
        pos += 1
        pending -= 1
        objects += 8
        if b <= 0x7f or b >= 0xe0 or b in (0xc0, 0xc2, 0xc3):
            continue
        if b in _FIXED:
            if pos + _FIXED[b] > end:
                raise reader.fail(f"truncated: the integer at byte {start} needs {_FIXED[b]} more bytes; "
                                  f"the data ends at byte {end}")
            pos += _FIXED[b]
            objects += 0 if b in _CACHED_INTS else 32
            continue
        if 0x80 <= b <= 0x8f:
            kind, n = "map", b & 0x0f
        elif 0x90 <= b <= 0x9f:
            kind, n = "array", b & 0x0f
        elif 0xa0 <= b <= 0xbf:
            kind, n = "str", b & 0x1f
        elif b in _SIZED:
            width, kind = _SIZED[b]
            if pos + width > end:
                raise reader.fail(f"truncated header at byte {pos - 1}")
            (n,) = _LENGTH[width].unpack_from(data, pos)
            pos += width
        elif b in (0xca, 0xcb):
            raise reader.fail(f"float at byte {pos - 1}: the format has no floats")
        elif b == 0xc1:
            raise reader.fail(f"reserved byte 0xc1 at byte {pos - 1}")
        else:
            raise reader.fail(f"extension type at byte {pos - 1}: the format has none")
        if kind == "array":
            if n > MAX_ITEMS:
                raise reader.fail(f"array of {n} items exceeds {MAX_ITEMS}")
            pending += n
            objects += 56
        elif kind == "map":
            if n > MAX_KEYS:
                raise reader.fail(f"map of {n} keys exceeds {MAX_KEYS}")
            pending += 2 * n
            objects += 64 + 40 * n
        else:
            if kind == "str" and n > MAX_NAME:
                raise reader.fail(f"string of {n} bytes exceeds {MAX_NAME}")
            if pos + n > end:
                raise reader.fail(f"truncated: the {kind} at byte {start} holds {n} bytes, but only {end - pos} "
                                  f"follow before the data ends at byte {end}")
            if kind == "bin":
                payloads += n
                objects += 33 if n > 1 else 0
                if bins is not None:
                    bins.append((pos, pos + n))
            elif n > 1:
                objects += 49 + n if data[pos:pos + n].isascii() else 80 + 4 * n
            pos += n
        if pos + pending > end:
            raise reader.fail(f"truncated: {pending} more values expected after byte {pos} of {end}")
    if pos != end:
        raise reader.fail(f"{end - pos} trailing bytes after the value")
    if objects > OBJECT_BYTES_PER_BYTE * (end - payloads):
        raise reader.fail(f"its {end - payloads} bytes outside bins would unpack into {objects} bytes of objects, "
                          f"more than {OBJECT_BYTES_PER_BYTE} a byte: no record is made of so many small values")
    return objects


# -- decoding: the whole -----------------------------------------------------------------

def unpack(data: bytes, reader: Reader) -> Any:
    """One scanned msgpack value, with no duplicate keys or extension types."""
    scan(data, reader)

    def pairs(items: list[tuple[Any, Any]]) -> dict[Any, Any]:
        # msgpack-python keeps the last of duplicate keys; the formats allow none.
        d = dict(items)
        if len(d) != len(items):
            raise reader.fail(f"duplicate key in map {[k for k, _ in items]}")
        return d

    def reject_ext(code: int, payload: bytes) -> Any:
        raise reader.fail(f"msgpack extension type {code} is not allowed")

    try:
        # The limits repeat the scan's, so that msgpack itself never allocates past them.
        return msgpack.unpackb(
            data, raw=False, use_list=True, strict_map_key=True, object_pairs_hook=pairs, ext_hook=reject_ext,
            max_str_len=MAX_NAME, max_bin_len=len(data), max_array_len=MAX_ITEMS, max_map_len=MAX_KEYS,
            max_ext_len=0)
    except CvmError:
        raise
    except (ValueError, msgpack.UnpackException, TypeError) as e:
        # Invalid UTF-8, a non-str map key, nesting deeper than msgpack's stack.
        raise reader.fail(f"not valid msgpack: {type(e).__name__} {e}") from None
    except MemoryError:
        # The scan bounds the objects by the data's size; a process with less memory than that still
        # gets an answer, not a crash.
        raise LimitError("memory", f"{len(data)} bytes of msgpack do not fit in memory unpacked") from None


def decode(data: bytes, reader: Reader, max_bytes: int, what: str,
           from_wire: Callable[[Any], Record], to_wire: Callable[[Record], Any]) -> Record:
    """Bytes -> the record ``from_wire`` builds; at most ``max_bytes``, and nothing but the
    canonical encoding of a well-formed record is accepted."""
    data = bytes(data)
    if len(data) > max_bytes:
        raise LimitError("bytes", f"{what} of {len(data)} bytes exceeds {max_bytes}")
    record = from_wire(unpack(data, reader))
    if pack(to_wire(record)) != data:
        raise MalformedError("noncanonical", f"the bytes decode, but are not the canonical encoding of the {what}")
    return record


# -- strict JSON ---------------------------------------------------------------------------

@dataclass(frozen=True)
class JsonLayout:
    """What one linear scan of JSON text shows of its arrays and objects (brackets inside
    strings not counted): enough to bound what parsing it, or a part of it, can build."""

    deepest: int     # the deepest nesting
    lowest: int      # below 0: a bracket closes what none opened, which no JSON text does
    first_end: int   # the position after the first top-level array or object; -1 if none closes
    # For each level asked for, the character positions of the opening and the closing bracket of
    # each array or object that nests that deep inside the text's first top-level value, in order:
    # at most the level's cap of them; ``counts`` tells how many there are.
    spans: dict[int, tuple[np.ndarray, np.ndarray]]
    counts: dict[int, int]
    # With ``cut``: positions of the commas that separate the first value's own items or members,
    # the first and the last in each stretch of ``cut`` characters.
    cuts: list[int]


def json_layout(text: str, caps: dict[int, int] | None = None, cut: int = 0) -> JsonLayout:
    """The layout of JSON text, in one pass of bounded numpy steps, without recursion or parsing.

    A quote opens or closes a string unless an odd run of backslashes precedes it.  Outside
    strings JSON has no backslash, so on any text json.loads reads, the layout is exact up to
    where it stops reading.  (A regular expression over strings retried from every quote of an
    unclosed one, quadratic in the text.)  Positions count characters, as ``str`` indexes do."""
    depth = deepest = lowest = 0
    first_end = -1
    inside = False       # within a string where the previous step ended
    odd_run = False      # the previous step ended in an odd run of backslashes
    caps = caps or {}
    position = np.int32 if len(text) < 1 << 31 else np.int64
    # At one level, each array or object but the last is closed before the next opens.
    most = (len(text) + 1) // 2
    spans = {level: (np.empty(min(cap, most), position), np.empty(min(cap, most), position))
             for level, cap in caps.items()}
    counts = dict.fromkeys(caps, 0)
    cuts: list[int] = []
    closed = dict.fromkeys(caps, 0)   # closing brackets seen at each level
    for i in range(0, len(text), _DEPTH_STEP):
        chunk = text[i:i + _DEPTH_STEP]
        # Code points (one byte each when all are ASCII), so that positions are str indexes.
        part = np.frombuffer(chunk.encode("ascii"), np.uint8) if chunk.isascii() else \
            np.frombuffer(chunk.encode("utf-32-le", "surrogatepass"), "<u4")
        # Only backslashes, quotes, brackets and commas make the layout: each step works on where
        # those few are, not on every character.
        quotes = np.flatnonzero(part == ord('"'))
        escaped, odd_run = _escaped(np.flatnonzero(part == ord("\\")), len(part), odd_run)
        if len(escaped):
            quotes = quotes[~np.isin(quotes, escaped, assume_unique=True)]
        brackets = np.flatnonzero((part == ord("[")) | (part == ord("{")) | (part == ord("]")) | (part == ord("}")))
        # Outside strings: after an even count of quotes (and the string the step began in).
        brackets = brackets[(np.searchsorted(quotes, brackets) + inside) % 2 == 0]
        kind = part[brackets]
        opening = (kind == ord("[")) | (kind == ord("{"))
        after = np.cumsum(np.where(opening, np.int64(1), np.int64(-1))) + depth   # the level after each
        if len(after):
            deepest, lowest = max(deepest, int(after.max())), min(lowest, int(after.min()))
        if first_end < 0:
            ends = np.flatnonzero(~opening & (after == 0))
            upto = int(ends[0]) if len(ends) else len(brackets)   # the brackets before the first value's end
            first_end = i + int(brackets[upto]) + 1 if len(ends) else -1
            for level, (opens, closes) in spans.items():
                for seen, found, into in ((counts, opening[:upto] & (after[:upto] == level), opens),
                                          (closed, ~opening[:upto] & (after[:upto] == level - 1), closes)):
                    at_level = brackets[:upto][found][:max(len(into) - seen[level], 0)]
                    into[seen[level]:seen[level] + len(at_level)] = at_level + i
                    seen[level] += int(np.count_nonzero(found))
            if cut:
                end = int(brackets[upto]) if len(ends) else len(part)
                commas = np.flatnonzero(part[:end] == ord(","))
                commas = commas[(np.searchsorted(quotes, commas) + inside) % 2 == 0]
                # A comma's level is the level after the last bracket before it.
                before = np.concatenate([np.array([depth], np.int64), after[:upto]])
                levels = before[np.searchsorted(brackets[:upto], commas)]
                commas = commas[levels == 1] + i
                _add_cuts(cuts, commas, cut)
        depth = int(after[-1]) if len(after) else depth
        inside = bool((len(quotes) + inside) % 2)
    return JsonLayout(deepest, lowest, first_end, {
        level: (opens[:counts[level]], closes[:closed[level]]) for level, (opens, closes) in spans.items()}, counts,
        cuts)


def _escaped(slashes: np.ndarray, size: int, odd_run: bool) -> tuple[np.ndarray, bool]:
    """Where the characters that follow an odd run of backslashes are, among ``size`` whose
    backslashes are at ``slashes`` (``odd_run``: an odd run ended just before the first); and
    whether the last character ends an odd run."""
    if not len(slashes):
        return np.zeros(int(odd_run), np.intp), False
    apart = np.flatnonzero(np.diff(slashes) != 1)
    begins = np.concatenate([slashes[:1], slashes[apart + 1]])
    ends = np.concatenate([slashes[apart], slashes[-1:]])
    lengths = ends - begins + 1
    if odd_run and begins[0] == 0:
        lengths[0] += 1
    escaped = ends[lengths % 2 == 1] + 1
    if odd_run and begins[0] != 0:
        escaped = np.concatenate([np.zeros(1, np.intp), escaped])
    return escaped, bool(ends[-1] == size - 1 and lengths[-1] % 2)


def _add_cuts(cuts: list[int], commas: np.ndarray, cut: int) -> None:
    """The first and the last of ``commas`` in each stretch of ``cut`` characters, onto ``cuts``
    (the commas a step earlier found, which may have begun the stretch the first is in)."""
    if not len(commas):
        return
    change = commas[1:] // cut != commas[:-1] // cut
    firsts = commas[np.concatenate([[True], change])].tolist()
    lasts = commas[np.concatenate([change, [True]])].tolist()
    for f, la in zip(firsts, lasts):
        if cuts and cuts[-1] // cut == f // cut:   # a stretch the previous step began
            cuts[-1:] = [cuts[-1], la] if len(cuts) < 2 or cuts[-2] // cut != f // cut else [la]
        else:
            cuts += [f, la] if f != la else [f]


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON text (json_layout)."""
    return json_layout(text).deepest


class StrictJson:
    """JSON with no duplicate keys, no NaN/Infinity, and no integer token of more than
    MAX_JSON_DIGITS digits (``int()`` of a longer one depends on PYTHONINTMAXSTRDIGITS, so it
    is refused before); ``malformed.<reason>`` otherwise.  Nesting is not checked here: the
    callers bound it first (json_layout), once for all the parts of a text they parse."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.what = ""     # what the value being parsed is, for messages
        self._decoder = json.JSONDecoder(object_pairs_hook=self._unique_keys, parse_constant=self._no_constant,
                                         parse_int=self._bounded_int)

    def _unique_keys(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) != len(pairs):
            raise self.twice(next(k for k, n in Counter(k for k, _ in pairs).items() if n > 1), self.what)
        return obj

    def twice(self, key: str, what: str) -> MalformedError:
        """The error for an object in which ``key`` appears twice (for callers that walk an object
        themselves too)."""
        return MalformedError(self.reason, f"{what}: key {key[:40]!r} appears twice in one object")

    def _no_constant(self, name: str) -> Any:
        raise MalformedError(self.reason, f"{self.what}: {name} is not a JSON value")

    def _bounded_int(self, token: str) -> int:
        if len(token) - token.startswith("-") > MAX_JSON_DIGITS:
            raise MalformedError(self.reason, f"{self.what}: an integer of {len(token)} characters; none may "
                                              f"have more than {MAX_JSON_DIGITS} digits")
        return int(token)

    def value(self, text: str, what: str, start: int) -> tuple[Any, int]:
        """The JSON value that begins at ``text[start]``, and the position after it."""
        return self._parse(what, lambda: self._decoder.raw_decode(text, start))

    def document(self, text: str, what: str) -> Any:
        """``text`` as one JSON value, with nothing but whitespace around it."""
        return self._parse(what, lambda: self._decoder.decode(text))

    def _parse(self, what: str, parse: Callable[[], Any]) -> Any:
        self.what = what
        try:
            return parse()
        except RecursionError:
            raise MalformedError(self.reason, f"{what} is nested too deeply") from None
        except ValueError as e:
            raise MalformedError(self.reason, f"{what} does not parse: {e}") from None
        except MemoryError:
            # Parsed JSON holds at most about 40 bytes of objects per character at its peak (`[[]],`:
            # lists of 56 bytes for two characters each, measured), so the callers' limits on the text
            # bound it; a process with less memory than that still gets an answer, not a crash.
            raise LimitError("memory", f"{what}: its JSON does not fit in memory parsed") from None


@dataclass(frozen=True)
class Span:
    """An array or object of JSON text, located but not parsed: ``text[start:end]``, nested
    ``level`` deep (the text's first value is level 1)."""

    start: int
    end: int
    level: int
    array: bool     # an array, else an object

    @property
    def parsed_type(self) -> type:
        """What parsing it gives (for messages that name a value's type)."""
        return list if self.array else dict


class JsonWalk:
    """JSON text read a piece at a time, so that what parsing builds at once is what its caller
    bounded, not the whole text: an object's members or an array's items in order, numbers,
    strings and literals parsed, arrays and objects located as Spans (by the layout's spans at the
    level they nest at), each parsed only when the caller asks.

    What is accepted is what json's parser accepts, piece by piece: the layout is exact on every
    text the parser reads up to where it stops.  Faults are ``malformed.<reason>``."""

    def __init__(self, text: str, json_: StrictJson, what: str, levels: dict[int, int], deeper: int = 0) -> None:
        """``levels``: the levels whose arrays and objects are located in one pass over the text,
        each with the most there may be at that level in the whole text (beyond it, the text is
        refused).  The values of an array or object deeper down are located when it is walked
        into, by a pass over it alone: at most ``deeper`` arrays and objects among them."""
        self.text, self.json, self.what = text, json_, what
        self.layout = json_layout(text, levels)
        self.caps = levels
        self.deeper = deeper
        check_depth(self.layout.deepest, json_.reason, what)
        if self.layout.lowest < 0:
            # No JSON text closes what it did not open (and on a file of JSON lines that do not,
            # the depth of each line is at most the file's).
            raise MalformedError(json_.reason, f"{what} does not parse: a bracket closes what none opened")

    def fault(self, pos: int, expected: str) -> MalformedError:
        return MalformedError(self.json.reason, f"{self.what} does not parse: expected {expected} at character {pos}")

    def first(self, where: str) -> Span | None:
        """The text's one value if it is an array or an object (None if it is neither), with
        nothing but whitespace after it."""
        pos = skip_space(self.text, 0)
        if not self.text.startswith(("[", "{"), pos):
            return None
        end = self.layout.first_end
        if end < 0:
            raise self.fault(len(self.text), f"the end of {where}, which begins at character {pos}")
        if skip_space(self.text, end) != len(self.text):
            raise self.fault(skip_space(self.text, end), "the end of the text")
        return Span(pos, end, 1, self.text.startswith("[", pos))

    def members(self, obj: Span, where: str) -> dict[str, Any]:
        """The members of the object ``obj``."""
        return dict(self.pairs(obj, where))

    def pairs(self, obj: Span, where: str) -> Iterator[tuple[str, Any]]:
        """The members of the object ``obj``, one at a time (no key twice)."""
        text = self.text
        keys: set[str] = set()
        values = _Values(self, obj)
        pos = skip_space(text, obj.start + 1)
        while not text.startswith("}", pos) or keys:
            if not text.startswith('"', pos):
                raise self.fault(pos, "a key")
            key, pos = self.json.value(text, where, pos)
            pos = skip_space(text, pos)
            if not text.startswith(":", pos):
                raise self.fault(pos, "':'")
            if key in keys:
                raise self.json.twice(key, where)
            keys.add(key)
            value, pos = values.value(skip_space(text, pos + 1), f"{where}.{key[:40]}")
            yield key, value
            after = self._after(pos, "}")
            if after is None:
                break
            pos = after

    def check(self, small: int) -> None:
        """Parse the whole text, keeping nothing and never more than about ``small`` characters
        at once (for a caller that met a fault before reading it all: text that is no JSON is
        refused as such, as a whole-text parse would refuse it)."""
        first = self.first(self.what)
        small = max(small, 1)
        if first is None:
            self.json.document(self.text, self.what)
        elif first.end - first.start <= small:
            self.parse(first, self.what)
        else:
            self._check(first, small)

    def _check(self, span: Span, small: int) -> None:
        """A long array or object, in pieces: between the first and the last of its own commas in
        each stretch of ``small`` characters, a piece holds a few items or members, or a single
        one, however long (whose array or object is checked the same way, alone).  Each piece is
        parsed as an array or object of its own, so every item, member and separator is parsed,
        and no key appears twice in the whole."""
        text = self.text
        layout = json_layout(text[span.start:span.end], cut=small)
        if layout.first_end != span.end - span.start:
            raise self.fault(span.start + max(layout.first_end, 0), "one array or object")
        if not text.startswith("]" if span.array else "}", span.end - 1):   # the layout counts [ and { alike
            raise self.fault(span.end - 1, "']'" if span.array else "'}'")
        edges = [span.start + 1, *(c + span.start for c in layout.cuts), span.end - 1]
        keys: set[str] = set()
        for a, b in zip(edges, edges[1:]):
            a += a != span.start + 1   # past the comma
            if skip_space(text, a) >= b:   # nothing: an empty array or object, unless a comma is next to it
                if len(edges) > 2:
                    raise self.fault(a, "a value")
                continue
            if b - a > 2 * small:
                self._check_one(a, b, span, keys, small)
                continue
            piece = self.json.document(("[" if span.array else "{") + text[a:b] + ("]" if span.array else "}"),
                                       f"{self.what} (characters {a} to {b}, parsed apart)")
            if not span.array:
                self._no_key_twice(piece, keys)

    def _check_one(self, a: int, b: int, span: Span, keys: set[str], small: int) -> None:
        """``text[a:b]``, one long item or member of ``span``."""
        text = self.text
        pos = skip_space(text, a)
        if not span.array:
            if not text.startswith('"', pos):
                raise self.fault(pos, "a key")
            key, pos = self.json.value(text, self.what, pos)
            self._no_key_twice([key], keys)
            pos = skip_space(text, pos)
            if not text.startswith(":", pos):
                raise self.fault(pos, "':'")
            pos = skip_space(text, pos + 1)
        end = pos + len(text[pos:b].rstrip(" \t\n\r"))
        if text.startswith(("[", "{"), pos):
            self._check(Span(pos, end, span.level + 1, text.startswith("[", pos)), small)
        else:
            # A string or a number alone: what it builds is about its own length.
            self.json.document(text[pos:end], f"{self.what} (characters {pos} to {end}, parsed apart)")

    def _no_key_twice(self, new: Iterable[str], keys: set[str]) -> None:
        for key in new:
            if key in keys:
                raise self.json.twice(key, self.what)
            keys.add(key)

    def items(self, array: Span, where: str, most: int | None = None, run: int = 0) -> Iterator[Any]:
        """The items of the array ``array``, one at a time; if given, ``most`` is the most the
        caller reads (it bounds what locating them deeper down takes).  With ``run``, items that
        are arrays or objects come parsed, a run of them at once, as many as ``run`` characters
        hold (one call of json's C parser, where locating each and parsing it takes several in
        Python); the rest come as they would without."""
        text = self.text
        values = _Values(self, array, most)
        pos = skip_space(text, array.start + 1)
        if text.startswith("]", pos):
            return
        k = 0
        while True:   # bounded by the array's length
            parsed = values.run(pos, run, f"{where}[{k}]") if run else None
            if parsed is None:
                item, pos = values.value(pos, f"{where}[{k}]")
                yield item
                k += 1
            else:
                pos = parsed[1]
                yield from parsed[0]
                k += len(parsed[0])
            after = self._after(pos, "]")
            if after is None:
                return
            pos = after

    def _after(self, pos: int, close: str) -> int | None:
        """Past an item or member ending at ``pos``: None at the closing bracket, else where the
        next one begins."""
        pos = skip_space(self.text, pos)
        if self.text.startswith(close, pos):
            return None
        if not self.text.startswith(",", pos):
            raise self.fault(pos, f"',' or '{close}'")
        return skip_space(self.text, pos + 1)

    def _children(self, within: Span, most: int | None) -> tuple[np.ndarray, np.ndarray, int, int, int]:
        """Where the arrays and objects a level deeper than ``within`` open and close, from the
        index of its first; positions are ``at`` before the text's (those of a pass over it alone
        when the layout did not locate that level); and the most that are located."""
        level = within.level + 1
        if level in self.layout.spans:
            opens, closes = self.layout.spans[level]
            return opens, closes, int(np.searchsorted(opens, within.start)), 0, self.caps[level]
        cap = self.deeper if most is None else min(most, self.deeper)
        opens, closes = json_layout(self.text[within.start:within.end], {2: cap}).spans[2]
        return opens, closes, 0, within.start, cap

    def parse(self, span: Span, where: str) -> Any:
        """The array or object ``span``, parsed whole (bound it first)."""
        return self.json.value(self.text, where, span.start)[0]


class _Values:
    """The values of one array or object of a JsonWalk, read in order: each array or object
    among them is the next of the located spans a level deeper."""

    def __init__(self, walk: JsonWalk, within: Span, most: int | None = None) -> None:
        self.walk, self.level = walk, within.level + 1
        self.opens, self.closes, self.next, self.at, self.cap = walk._children(within, most)
        self.no_run_before = 0   # a run tried there did not parse: none is tried again within it

    def value(self, pos: int, where: str) -> tuple[Any, int]:
        """The value that begins at ``pos``, and the position after it."""
        text = self.walk.text
        if not text.startswith(("[", "{"), pos):
            return self.walk.json.value(text, where, pos)
        j = self.next
        if j == len(self.opens):
            raise MalformedError(self.walk.json.reason, f"{where}: more than {self.cap} arrays and objects "
                                                        f"nested {self.level} deep")
        if j == len(self.closes):
            raise self.walk.fault(len(text), f"the end of {where}, which begins at character {pos}")
        span = Span(pos, int(self.closes[j]) + self.at + 1, self.level, text.startswith("[", pos))
        self.next += 1
        return span, span.end

    def run(self, pos: int, chars: int, where: str) -> tuple[list[Any], int] | None:
        """The values from ``pos`` on that fit in ``chars`` characters, parsed at once, if they are
        two or more arrays and objects with nothing but separators between them, and the position
        after the last; else None.  Text that does not parse as such is then read a value at a
        time, which names its fault as it would have: no run is tried again within it, so each
        character is parsed in a run once at most."""
        j, at = self.next, self.at
        if pos < self.no_run_before or j >= len(self.closes) or int(self.opens[j]) + at != pos:
            return None
        # The last of them that closes within ``chars`` characters of pos.
        last = min(int(np.searchsorted(self.closes, pos - at + chars - 1, side="right")), len(self.opens)) - 1
        if last <= j:
            return None
        end = int(self.closes[last]) + at + 1
        try:
            values = self.walk.json.document("[" + self.walk.text[pos:end] + "]", where)
        except MalformedError:
            values = None
        if values is None or len(values) != last - j + 1:   # a fault, or values of another kind between
            self.no_run_before = end
            return None
        self.next = last + 1
        return values, end


_SPACE = re.compile(r"[ \t\n\r]*")   # JSON's whitespace


def skip_space(text: str, pos: int) -> int:
    """The position of the first character at or after ``pos`` that is no JSON whitespace."""
    space = _SPACE.match(text, pos)
    assert space is not None   # a run of none matches
    return space.end()


def check_depth(deepest: int, reason: str, what: str) -> None:
    if deepest > MAX_JSON_DEPTH:
        raise MalformedError(reason, f"{what} is nested more than {MAX_JSON_DEPTH} levels deep")


def parse_json(text: str, reason: str, what: str) -> Any:
    """Strict JSON (StrictJson), nested at most MAX_JSON_DEPTH levels deep."""
    # No text nests deeper than it has brackets: a results line, say, skips the scan.
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH:
        check_depth(json_depth(text), reason, what)
    # One parser per reason and thread, made once: making one costs as much as parsing a short line.
    parsers = _PARSERS.__dict__.setdefault("by_reason", {})
    if reason not in parsers:
        parsers[reason] = StrictJson(reason)
    return parsers[reason].document(text, what)


_PARSERS = threading.local()


@contextmanager
def acyclic() -> Iterator[None]:
    """Python's cycle collector paused while a reader builds what holds no cycle: a graph of a
    million nodes is millions of dicts, tuples and records, and the collector, run again and again
    as they pile up, took 8 of a 1.3-million-node graph's 13 s.  Reference counting still frees
    everything; the collector resumes as it was, on every way out."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
