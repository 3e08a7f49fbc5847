"""The transaction file (docs/FORMAT.md section 8): a stream of transactions, each a model
hash, its inputs and a claimed receipt.

A file is read record by record: a 12-byte header, then one frame per
transaction (a u32le length and that many bytes of one canonical msgpack
map), then an end frame (length 0) with the count.  A reader holds one
record and at most a MiB read ahead, every record is bounded before it is read, and a
record that does not decode is that transaction's fault alone: the frames
around it still delimit the others.

Version 4 is version 2's framing around records of commitment format 3 (their
model hashes and receipts); version 3 held records of format 2, version 2 of
format 1.  Versions 1 (one msgpack map holding every transaction), 2 and 3 are
only read for ``cvmvm tx convert``, which carries a record over only when this
cvmvm reads it: a receipt of an older commitment format (``old_receipt``)
never is.
"""

from __future__ import annotations

import hashlib
import io
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterable, Iterator, NamedTuple, Sequence

import msgpack
import numpy as np

from isa.errors import CvmError, LimitError, MalformedError
from isa.types import DTYPES, check_shape, shape_size
from serializer import strict
from serializer.hashing import HASH_SIZE
from serializer.records import receipt
from serializer.records.receipt import Receipt
from serializer.strict import Reader, pack, tensor_to_wire

TXS_FORMAT = "cvmvm-txs"
TXS_VERSION = 4
FRAMED_VERSIONS = (2, 3, 4)  # the versions with this framing
# The commitment format of each older version's records (a receipt of version n is of format n).
OLD_FORMATS = {1: 1, 2: 1, 3: 2}
MAGIC = b"cvmvmtx\x00"
HEADER = MAGIC + struct.pack("<I", TXS_VERSION)
HEADER_SIZE = len(HEADER)
END_SIZE = 4 + 8                 # the end frame: u32le 0, u64le count
MAX_RECORD_BYTES = 1 << 26       # one transaction's record
MAX_TX_INPUTS = 64               # inputs of one transaction (a model may have more: it is no transaction's)

TX_KEYS = ("model", "inputs", "receipt")
TX_INPUT_KEYS = ("name", "dtype", "shape", "data")
# Every canonical record starts with these bytes: a 3-entry map, "model", a 32-byte bin.
MODEL_PREFIX = b"\x83\xa5model\xc4\x20"
_MODEL_AT = len(MODEL_PREFIX)

# Version 1: one map {"format", "version": 1, "txs": [tx, ...]}, read whole (convert only).
V1_KEYS = ("format", "version", "txs")
V1_PREFIX = b"\x83\xa6format\xa9cvm"  # its first 12 bytes
MAX_V1_BYTES = 1 << 32

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_READER = Reader("txs")


# -- the record ---------------------------------------------------------------------

class TxInput(NamedTuple):
    """One input as the transaction carries it: its bytes are the little-endian values."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    data: bytes

    def array(self) -> np.ndarray:
        value = np.frombuffer(self.data, dtype=DTYPES[self.dtype].newbyteorder("<")).reshape(self.shape)
        return value.astype(DTYPES[self.dtype], copy=False)


@dataclass(frozen=True)
class Transaction:
    model_hash: bytes
    inputs: tuple[tuple[str, np.ndarray], ...]  # (name, value), in the model's input order
    receipt: Receipt                            # what the executing node claims


def _input_wire(name: str, value: np.ndarray) -> dict[str, Any]:
    return {"name": name, **tensor_to_wire(value)}


def check_input_count(count: int) -> None:
    """A record readers accept carries at most MAX_TX_INPUTS inputs: refuse to write any other."""
    if count > MAX_TX_INPUTS:
        raise LimitError("items", f"a transaction carries at most {MAX_TX_INPUTS} inputs (FORMAT.md section 8); "
                                  f"this one has {count}")


def encode_tx(tx: Transaction) -> bytes:
    """One transaction's record (the bytes of its frame)."""
    check_input_count(len(tx.inputs))
    return pack({"model": tx.model_hash, "inputs": [_input_wire(n, v) for n, v in tx.inputs],
                 "receipt": receipt.to_wire(tx.receipt)})


def record_model(body: bytes) -> bytes | None:
    """The model hash a record names, read from its fixed prefix; None when the record
    cannot be canonical (it then fails to decode with the reason)."""
    if body[:_MODEL_AT] != MODEL_PREFIX or len(body) < _MODEL_AT + HASH_SIZE:
        return None
    return body[_MODEL_AT:_MODEL_AT + HASH_SIZE]


def _fail(message: str) -> MalformedError:
    return MalformedError("txs", message)


def _input_from_wire(wire: Any, k: int) -> TxInput:
    if type(wire) is not dict or tuple(wire) != TX_INPUT_KEYS:
        raise _fail(f"inputs[{k}]: expected a map with keys {list(TX_INPUT_KEYS)} in that order")
    name, dtype, shape, data = wire["name"], wire["dtype"], wire["shape"], wire["data"]
    if type(name) is not str or type(dtype) is not str or type(data) is not bytes:
        raise _fail(f"inputs[{k}]: name and dtype must be str, data bin")
    if dtype not in DTYPES:
        raise _fail(f"inputs[{k}].dtype: {dtype!r} is not one of {list(DTYPES)}")
    if type(shape) is not list or not all(type(d) is int for d in shape):
        raise _fail(f"inputs[{k}].shape: expected an array of integers")
    shape = tuple(shape)
    try:
        check_shape(shape, f"inputs[{k}].shape")
    except LimitError as e:
        if e.reason != "dim":
            raise
        raise _fail(e.message) from None
    size = shape_size(shape) * DTYPES[dtype].itemsize
    if len(data) != size:
        raise _fail(f"inputs[{k}].data: {len(data)} bytes, expected {size}")
    return TxInput(name, dtype, shape, data)


def decode_tx(body: bytes) -> tuple[bytes, tuple[TxInput, ...], Receipt]:
    """A record -> (model hash, inputs as carried, claimed receipt); strict and canonical.

    The record is bounded by its frame and scanned (strict.scan: the objects it
    unpacks into are at most OBJECT_BYTES_PER_BYTE times its bytes outside
    bins), and msgpack's own limits are set tight (a transaction has a few
    short arrays and small maps).  A duplicate key needs no check of its own:
    the map it leaves behind is shorter than the one in the record, so the
    canonical comparison at the end refuses it.
    """
    strict.scan(body, _READER)
    try:
        top = msgpack.unpackb(body, raw=False, use_list=True, strict_map_key=True, ext_hook=_no_ext,
                              max_str_len=strict.MAX_NAME, max_bin_len=len(body), max_array_len=MAX_TX_INPUTS,
                              max_map_len=16, max_ext_len=0)
    except CvmError:
        raise
    except (ValueError, msgpack.UnpackException, TypeError) as e:
        raise _fail(f"not valid msgpack: {type(e).__name__} {e}") from None
    if type(top) is not dict or tuple(top) != TX_KEYS:
        raise _fail(f"expected a map with keys {list(TX_KEYS)} in that order")
    model, raw_inputs = top["model"], top["inputs"]
    if type(model) is not bytes or len(model) != HASH_SIZE:
        raise _fail(f"model: expected bin({HASH_SIZE})")
    if type(raw_inputs) is not list:
        raise _fail("inputs: expected an array")
    inputs = tuple([_input_from_wire(e, k) for k, e in enumerate(raw_inputs)])
    if len(inputs) > 1 and len({i.name for i in inputs}) != len(inputs):
        raise _fail(f"input names {[i.name for i in inputs]} are not unique")
    claimed = receipt.from_wire(top["receipt"], _READER)
    # Every field was type-checked above, so re-packing what was unpacked gives the
    # canonical bytes exactly when the record is canonical.
    if pack(top) != body:
        raise MalformedError("noncanonical", "the record decodes, but is not the canonical encoding")
    return model, inputs, claimed


Decoded = tuple[bytes, tuple[TxInput, ...], Receipt]


class Alike(NamedTuple):
    """Records of one shape, cut by ``Decoder.cut``: which of the records given they are, and
    each bin's payloads as a column (row i is record ``rows[i]``'s)."""

    template: Decoded               # one of them, decoded: the others differ from it only in their payloads
    rows: list[int]                 # positions in the list cut, ascending
    columns: list[np.ndarray]       # per bin, in ``_payloads``' order: uint8 (len(rows), the bin's length)

    def decoded(self, i: int) -> Decoded:
        """Row i's record as ``decode_tx`` decodes it."""
        return _with_payloads(self.template, tuple([c[i].tobytes() for c in self.columns]))


class _Template(NamedTuple):
    decoded: Decoded
    size: int
    spans: list[tuple[int, int]]    # each bin's payload
    fixed: np.ndarray               # every other position
    literal: np.ndarray             # the template's bytes there


class Decoder:
    """``decode_tx`` for records alike (a replay's chunk of one model's transactions): the same
    result or the same error for every record, most of them read as one array without msgpack.

    Two records of one model differ mostly in their bins' payloads: the inputs' data, the
    commitments, the roots, the signature.  A record of the same length as one ``decode_tx``
    accepted (the template), byte for byte equal to it outside the template's bin payloads, has
    the same msgpack tokens (a bin's header fixes its payload's length, so every payload sits at
    the same offsets), decodes to the same structure with its own payloads, is canonical as the
    template is, and passes every check ``decode_tx`` makes: none reads a payload's bytes.  Such
    records are matched all at once (their bytes as the rows of one array, compared with the
    template's outside the payloads) and cut into columns, one per bin; any other is decoded in
    full, and becomes the template for those left.
    """

    def __init__(self) -> None:
        self._template: _Template | None = None

    def cut(self, bodies: Sequence[bytes]) -> tuple[list[Alike], list[tuple[int, CvmError]]]:
        """Every record in one group of records alike, or with the error ``decode_tx`` raises on it."""
        groups: list[Alike] = []
        errors: list[tuple[int, CvmError]] = []
        left = list(range(len(bodies)))
        # Rows compared against templates, at most a few times the records: records all unlike
        # each other are decoded one by one, as they would be without templates.
        budget = 4 * len(bodies)
        fresh = self._template is not None
        while left:
            if fresh and budget > 0:
                fresh = False
                t = self._template
                assert t is not None
                same = [k for k in left if len(bodies[k]) == t.size]
                budget -= len(same)
                if same:
                    block = np.frombuffer(b"".join([bodies[k] for k in same]), dtype=np.uint8).reshape(len(same), t.size)
                    hit = (block[:, t.fixed] == t.literal).all(axis=1)
                    rows = [k for k, h in zip(same, hit.tolist()) if h]
                    if rows:
                        block = block[hit]
                        groups.append(Alike(t.decoded, rows, [block[:, a:b] for a, b in t.spans]))
                        taken = set(rows)
                        left = [k for k in left if k not in taken]
                continue
            k = left.pop(0)
            try:
                decoded = decode_tx(bodies[k])
            except CvmError as e:
                errors.append((k, e))
                continue
            template = _template(bodies[k], decoded) if budget > 0 else None
            if template is None:
                groups.append(Alike(decoded, [k], [np.frombuffer(p, dtype=np.uint8).reshape(1, -1)
                                                   for p in _payloads(decoded)]))
            else:
                self._template = template
                left.insert(0, k)   # the template's own record is the first row it cuts
                fresh = True
        return groups, errors


def _template(body: bytes, decoded: Decoded) -> _Template | None:
    """The template of records like ``body``, which decoded to ``decoded``; None where its bins are not
    the fields ``_payloads`` names, as they always are (a record that holds them otherwise is never
    cut by a wrong map)."""
    spans: list[tuple[int, int]] = []
    strict.scan(body, _READER, spans)   # passed once already: decode_tx scans every record it decodes
    if [body[a:b] for a, b in spans] != _payloads(decoded):
        return None
    fixed = np.ones(len(body), dtype=bool)
    for a, b in spans:
        fixed[a:b] = False
    where = np.flatnonzero(fixed)
    return _Template(decoded, len(body), spans, where, np.frombuffer(body, dtype=np.uint8)[where])


def _payloads(decoded: Decoded) -> list[bytes]:
    """Every bin of a record, in the order its canonical encoding holds them (FORMAT.md section 8)."""
    model, inputs, r = decoded
    signer = [] if r.signer is None else [r.signer.public_key, r.signer.signature]
    return [model, *(i.data for i in inputs), r.model_hash, r.program_root, *(c for _, c in r.inputs),
            r.output_hash, r.trace_root, *signer]


def _with_payloads(template: Decoded, payloads: tuple[bytes, ...]) -> Decoded:
    """``template`` with its bins replaced by ``payloads`` (in ``_payloads``' order)."""
    _, inputs, r = template
    n, m = len(inputs), len(r.inputs)
    given = tuple([TxInput(i.name, i.dtype, i.shape, data) for i, data in zip(inputs, payloads[1:1 + n])])
    k = 3 + n + m
    claimed = tuple([(name, c) for (name, _), c in zip(r.inputs, payloads[3 + n:k])])
    signer = None if r.signer is None else receipt.Signer(payloads[k + 2], payloads[k + 3])
    return payloads[0], given, Receipt(payloads[1 + n], payloads[2 + n], claimed, payloads[k], payloads[k + 1],
                                       r.ops, signer)


def _no_ext(code: int, payload: bytes) -> Any:
    raise _fail(f"msgpack extension type {code} is not allowed")


def transaction(body: bytes) -> Transaction:
    """A record -> a Transaction with numpy inputs (for tools and tests; replay reads TxInput)."""
    model, inputs, claimed = decode_tx(body)
    return Transaction(model, tuple((i.name, i.array()) for i in inputs), claimed)


def tx_id(body: bytes) -> bytes:
    """A transaction's id: the SHA-256 of its record."""
    return hashlib.sha256(body).digest()


# -- the stream ----------------------------------------------------------------------

def frame(body: bytes) -> bytes:
    if not 0 < len(body) <= MAX_RECORD_BYTES:
        raise LimitError("bytes", f"a transaction record of {len(body)} bytes is not in [1, {MAX_RECORD_BYTES}]")
    return _U32.pack(len(body)) + body


def end_frame(count: int) -> bytes:
    return _U32.pack(0) + _U64.pack(count)


def encode_txs(txs: Iterable[Transaction]) -> bytes:
    """A whole file in memory (tests and small files; TxWriter streams)."""
    parts = [HEADER]
    for tx in txs:
        parts.append(frame(encode_tx(tx)))
    parts.append(end_frame(len(parts) - 1))
    return b"".join(parts)


class TxWriter:
    """Writes a file to a binary stream: header, frames, end frame on close."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.count = 0
        out.write(HEADER)

    def add_record(self, body: bytes) -> None:
        self.out.write(frame(body))
        self.count += 1

    def add(self, tx: Transaction) -> None:
        self.add_record(encode_tx(tx))

    def close(self) -> None:
        self.out.write(end_frame(self.count))


class Record(NamedTuple):
    index: int     # type: ignore[assignment]  # position in the file, from 0 (shadows tuple.index, unused)
    offset: int    # byte offset of its frame
    body: bytes


def header_version(head: bytes) -> int | None:
    """The version a framed file's first bytes name (None: no header)."""
    if head[:len(MAGIC)] == MAGIC and len(head) >= HEADER_SIZE:
        return int(_U32.unpack_from(head, len(MAGIC))[0])
    return None


def check_header(head: bytes, what: str) -> None:
    """The first bytes of a file: this version's header, else an error naming what the file is."""
    if header_version(head) != TXS_VERSION:
        raise _header_error(head, what)


def _header_error(head: bytes, what: str) -> MalformedError:
    version = header_version(head)
    old = None
    if version is None and head and head.startswith(V1_PREFIX[:len(head)]):
        old, fmt = "version 1 (one msgpack map)", OLD_FORMATS[1]
    elif version in FRAMED_VERSIONS and version in OLD_FORMATS:
        old, fmt = f"version {version}", OLD_FORMATS[version]
    if old is not None:
        return MalformedError("txs_version", f"{what}: a {old} transaction file, of commitment format "
                                             f"{fmt}; this cvmvm reads version {TXS_VERSION} "
                                             f"(format {receipt.RECEIPT_VERSION}): `cvmvm tx convert OLD NEW` "
                                             f"carries over what it can (never a receipt of an older format)")
    if version is not None:
        return MalformedError("txs_version", f"{what}: transaction file version {version}; this cvmvm "
                                             f"reads version {TXS_VERSION}")
    return MalformedError("txs", f"{what}: not a cvmvm transaction file (no {MAGIC[:7].decode()} header)")


def iter_records(f: BinaryIO, what: str) -> Iterator[Record]:
    """Each record of a stream, checking the framing as it goes.

    The header is checked at once.  A fault in the framing (a length past its
    bound, a file that ends inside a frame or before its end frame, a wrong
    count, bytes after the end) raises ``malformed.txs`` naming the byte offset,
    after every record before it was yielded: the frames after it are not
    known, so it cannot be skipped.
    """
    check_header(f.read(HEADER_SIZE), what)
    return frames(f, what)


READ_AHEAD = 1 << 20   # bytes read at a time: a frame's length and many small records per read


def _read(f: BinaryIO, n: int) -> bytes:
    """``n`` bytes, fewer only where the stream ends (a pipe's read may give less than asked)."""
    data = f.read(n)
    while len(data) < n:
        more = f.read(n - len(data))
        if not more:
            break
        data += more
    return data


def frames(f: BinaryIO, what: str) -> Iterator[Record]:
    offset = HEADER_SIZE   # the file offset of buf[at]
    index = 0
    buf, at = b"", 0
    while True:
        if len(buf) - at < 4:
            buf, at = buf[at:] + _read(f, READ_AHEAD), 0
            if len(buf) < 4:
                raise _fail(f"{what}: truncated at byte {offset + len(buf)}: the file ends after {index} "
                            f"transactions, before its end frame")
        (n,) = _U32.unpack_from(buf, at)
        if n == 0:
            tail = buf[at + 4:]
            if len(tail) < 9:
                tail += _read(f, 9 - len(tail))
            if len(tail) < 8:
                raise _fail(f"{what}: truncated at byte {offset + 4 + len(tail)}, inside the end frame")
            (count,) = _U64.unpack_from(tail)
            if count != index:
                raise _fail(f"{what}: the end frame at byte {offset} counts {count} transactions; "
                            f"the file holds {index}")
            if len(tail) > 8:
                raise _fail(f"{what}: bytes after the end frame, from byte {offset + END_SIZE}")
            return
        if n > MAX_RECORD_BYTES:
            raise _fail(f"{what}: transaction {index} at byte {offset}: a record of {n} bytes exceeds "
                        f"{MAX_RECORD_BYTES}")
        end = at + 4 + n
        if end <= len(buf):
            body, at = buf[at + 4:end], end
        else:   # the record runs past what was read: the rest of it, and no more
            body = buf[at + 4:]
            body += _read(f, n - len(body))
            buf, at = b"", 0
            if len(body) < n:
                raise _fail(f"{what}: truncated at byte {offset + 4 + len(body)}, inside transaction {index} "
                            f"(its record of {n} bytes starts at byte {offset})")
        yield Record(index, offset, body)
        offset += 4 + n
        index += 1


def decode_txs(data: bytes) -> list[Transaction]:
    """A whole file in memory -> its transactions; any fault rejects the file."""
    out = []
    for r in iter_records(io.BytesIO(data), "transaction file"):
        try:
            out.append(transaction(r.body))
        except CvmError as e:
            raise type(e)(e.reason, f"transaction {r.index} at byte {r.offset}: {e.message}") from None
    return out


# -- versions 1 to 3 (cvmvm tx convert) -------------------------------------------------

def _v1_from_wire(top: Any) -> list[bytes]:
    top = _READER.map(top, V1_KEYS, "txs file")
    _READER.const(top["format"], TXS_FORMAT, "format")
    _READER.const(top["version"], 1, "version")
    return [pack(e) for e in _READER.list(top["txs"], "txs")]


def decode_v1(data: bytes) -> list[bytes]:
    """A version-1 file -> its transactions' records (not yet decoded: see ``old_records``)."""
    if len(data) > MAX_V1_BYTES:
        raise LimitError("bytes", f"a version 1 transaction file of {len(data)} bytes exceeds {MAX_V1_BYTES}")
    top = strict.unpack(bytes(data), _READER)
    bodies = _v1_from_wire(top)
    if pack(top) != bytes(data):
        raise MalformedError("noncanonical", "the version 1 file decodes, but is not canonical")
    return bodies


def file_version(head: bytes, what: str) -> int:
    """The version of a transaction file from its first HEADER_SIZE bytes: one of
    FRAMED_VERSIONS for a framed header (another is refused as ``check_header`` refuses it), else 1 (``decode_v1``
    then says what is wrong with a file that is not one).  After a framed header, ``frames``
    reads the records."""
    version = header_version(head)
    if version is None:
        return 1
    if version not in FRAMED_VERSIONS:
        raise _header_error(head, what)
    return version


def old_receipt(body: bytes) -> int | None:
    """The commitment format of a record's receipt when it is older than this cvmvm's (a receipt
    of version n is of format n), else None.  (Such a record never decodes here: its model hash
    and every hash of its receipt are that format's, and its signature signs them.)"""
    try:
        top = msgpack.unpackb(body, raw=False, strict_map_key=True, max_str_len=strict.MAX_NAME,
                              max_bin_len=len(body), max_array_len=MAX_TX_INPUTS, max_map_len=16, max_ext_len=0)
    except (ValueError, msgpack.UnpackException, TypeError):
        return None
    claim = top.get("receipt") if type(top) is dict else None
    if type(claim) is not dict or claim.get("format") != receipt.RECEIPT_FORMAT:
        return None
    version = claim.get("version")
    return version if type(version) is int and 1 <= version < receipt.RECEIPT_VERSION else None
