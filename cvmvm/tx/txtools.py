"""Making transaction files: from real runs (``cvmvm tx add``), from versions 1
to 3 (``cvmvm tx convert``), and generated (``cvmvm tx demo N OUT``).

Every file is written to a temporary name and renamed: a reader sees the old
file or the new one, never a mix.  A transaction carries its inputs as the
program reads them (the model's dtype, int32 values within precision), so
``add`` stores the prepared inputs, not the caller's arrays.

tx demo N OUT writes OUT/store/ (a model store holding the model), OUT/txs.cvmtx (the
transactions), OUT/expected.json (which transactions are bad, how, and what
replay must report for them) and, when signed, OUT/signer.pub (the raw public
key every receipt is signed with).

Everything is deterministic: transaction i uses image i mod len(images) with
one value changed (position and value from SHAKE-256 of i), so nearly every
run is distinct; the signing key is SHAKE-256 of a label; transaction i is bad
when i mod 32 == 7, its kind cycling through KINDS.  A bad receipt is
re-signed after it is altered, so it fails in exactly one field.  The file is
written as it is generated: memory does not grow with N.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TypeVar

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from isa.errors import CvmError, MalformedError, UsageError
from isa.types import precision_bound
from serializer.records import transactions
from serializer.records.receipt import Receipt
from cvmvm import files
from cvmvm.vm.api import Model
from cvmvm.vm.execute import Clipping, prepare_inputs
from cvmvm.tx import receipt
from cvmvm.tx.replay import Replayer
from cvmvm.tx.schedule import open_txs
from cvmvm.tx.store import Store

BAD_EVERY, BAD_AT = 32, 7
KINDS = ("output_hash", "trace_root", "ops", "signature", "unknown_model", "malformed_input")
UNSIGNED_KINDS = tuple(k for k in KINDS if k != "signature")
UNKNOWN_MODEL = hashlib.sha256(b"cvmvm/make_txs/unknown model").digest()
STEP = 4096  # transactions run (and written) at a time
# Told how many more transactions are done: the command line's progress bar.  Told in steps of
# STEP, so that the bar costs nothing next to the records.
Advance = Callable[[int], None]
T = TypeVar("T")


def _counted(items: Iterable[T], advance: Advance | None) -> Iterator[T]:
    """``items``, telling ``advance`` of every STEP of them done, and of the rest at the end."""
    if advance is None:
        yield from items
        return
    done = 0
    for item in items:
        yield item
        done += 1
        if done == STEP:
            advance(done)
            done = 0
    if done:
        advance(done)
MAX_DEMO = 10_000_000   # demo transactions in one file: some 6 GB (a million is 601 MB)


def shake(label: str, n: int) -> bytes:
    return hashlib.shake_256(f"cvmvm/make_txs/{label}".encode()).digest(n)


def signing_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(shake("signing key", 32))


def bad_kind(i: int, signed: bool = True) -> str | None:
    kinds = KINDS if signed else UNSIGNED_KINDS
    return kinds[(i // BAD_EVERY) % len(kinds)] if i % BAD_EVERY == BAD_AT else None


def image(images: np.ndarray, i: int, bound: int) -> np.ndarray:
    x = np.array(images[i % len(images)], dtype=np.int32)
    pos, value = shake(f"pixel {i}", 2)
    x.reshape(-1)[pos % x.size] = value % (bound + 1)
    return x


def _flip(digest: bytes) -> bytes:
    return bytes([digest[0] ^ 0xFF]) + digest[1:]


def _transaction(i: int, x: np.ndarray, r: receipt.Receipt, model_hash: bytes, name: str,
                 key: Ed25519PrivateKey | None) -> tuple[transactions.Transaction, dict[str, Any] | None]:
    kind = bad_kind(i, key is not None)
    tx_model, tx_input = model_hash, x
    expect: dict[str, Any] | None = None
    if kind == "output_hash":
        r = dataclasses.replace(r, output_hash=_flip(r.output_hash))
    elif kind == "trace_root":
        r = dataclasses.replace(r, trace_root=_flip(r.trace_root))
    elif kind == "ops":
        r = dataclasses.replace(r, ops=r.ops + 1)
    if key is not None:
        r = receipt.sign(r, key)
    if kind == "signature":
        assert r.signer is not None
        r = dataclasses.replace(r, signer=dataclasses.replace(r.signer, signature=_flip(r.signer.signature)))
    if kind in ("output_hash", "trace_root", "ops", "signature"):
        expect = {"status": "mismatch", "fields": [kind]}
    elif kind == "unknown_model":
        tx_model, expect = UNKNOWN_MODEL, {"status": "error", "error": "input.unknown_model"}
    elif kind == "malformed_input":
        if (i // BAD_EVERY // len(KINDS)) % 2 == 0:
            tx_input, expect = x[..., :-1].copy(), {"status": "error", "error": "input.shape"}
        else:
            tx_input, expect = x.astype(np.float32), {"status": "error", "error": "input.dtype"}
    tx = transactions.Transaction(tx_model, ((name, tx_input),), r)
    return tx, (None if kind is None or expect is None else {"index": i, "kind": kind, **expect})


def generate(model: Model, images: np.ndarray, out: Path, count: int, signed: bool = True,
             advance: Advance | None = None) -> dict[str, Any]:
    """Write the store, the transactions, the expectations (and the public key when signed);
    return the expectations.  Every output is checked before anything is generated; the
    transaction file is streamed as a unit of its own, then the key and the expectations are
    written as one (docs/FORMAT.md section 11)."""
    files.make_directory(out, "OUT")
    last = files.Outputs()
    expectations = last.file(out / "expected.json", "the expectations")
    public = last.file(out / "signer.pub", "the public key") if signed else None
    files.Outputs().file(out / "txs.cvmtx", "the transaction file")
    files.Outputs().directory(out / "store", "the store", r"[0-9a-f]{64}\.cvm")
    model_hash = Store(out / "store").add(model)
    key = signing_key() if signed else None
    (name, t), = model.inputs.items()
    bound = precision_bound(t.precision or 8)
    runner = Replayer(lambda h: model)
    bad = []
    with files.output_stream(out / "txs.cvmtx", "the transaction file") as f:
        writer = transactions.TxWriter(f)
        for start in range(0, count, STEP):
            xs = [image(images, i, bound) for i in range(start, min(count, start + STEP))]
            for i, (x, r) in enumerate(zip(xs, runner.execute(model_hash, [[x] for x in xs])), start):
                if isinstance(r, Exception):
                    raise r
                tx, expect = _transaction(i, x, r, model_hash, name, key)
                writer.add(tx)
                if expect is not None:
                    bad.append(expect)
            if advance is not None:
                advance(len(xs))
        writer.close()
    if key is not None and public is not None:
        last.put(public, key.public_key().public_bytes_raw())
    expected = {"count": count, "model_hash": model_hash.hex(), "signed": signed, "bad": bad}
    last.put(expectations, (json.dumps(expected, indent=1, sort_keys=True) + "\n").encode())
    last.commit()
    return expected


# -- tx add, tx convert ----------------------------------------------------------------

def transaction_for(model: Model, inputs: dict[str, np.ndarray], claim: Receipt | None = None
                    ) -> tuple[transactions.Transaction, Receipt, list[Clipping]]:
    """A transaction of one real run: the inputs as the program read them, and ``claim`` (default:
    the run's own unsigned receipt) as its receipt; also the run's receipt and what was clipped."""
    transactions.check_input_count(len(model.program.model.inputs))   # before a run it could not record
    result = model.run(inputs, trace=True)
    actual = receipt.make_receipt(model, result)
    prepared = prepare_inputs(model.program, inputs)
    names = [i.name for i in model.program.model.inputs]
    tx = transactions.Transaction(model.model_hash, tuple(zip(names, prepared)), actual if claim is None else claim)
    return tx, actual, list(result.clipping)


def append(path: Path, bodies: list[bytes], advance: Advance | None = None) -> int:
    """Write ``path`` with its transactions (if it exists) followed by ``bodies``; return the count.
    The old file is opened under the directory's lock (files.output_stream): opened before it, two
    concurrent appends each copied the same old file, and one's transaction was lost."""
    with files.output_stream(path, "TXS") as out:
        old = open_txs(path) if path.exists() else None
        try:
            writer = transactions.TxWriter(out)
            if old is not None:
                for r in _counted(transactions.iter_records(old, str(path)), advance):
                    writer.add_record(r.body)
            for body in _counted(bodies, advance):
                writer.add_record(body)
            writer.close()
            return writer.count
        finally:
            if old is not None:
                old.close()


def convert(source: Path, target: Path, advance: Advance | None = None) -> int:
    """A version 1, 2 or 3 file -> a file of this version; return the count.

    The framing is converted; each record is carried over byte for byte, and
    only when this cvmvm reads it.  A transaction of an older commitment format
    (every record of a file made before this format) is not: its model hash,
    input commitments, output hash and trace root are that format's, and its
    signature signs those, so no claim of this format can be made of it.  If any
    record is not carried over, nothing is written and the error says which and
    why.
    """
    what = f"transaction file {source}"
    with open_txs(source) as f:
        version = transactions.file_version(f.read(transactions.HEADER_SIZE), what)
        if version == transactions.TXS_VERSION:
            raise UsageError("argument", f"{source} is already a version {version} transaction file")
        records: Iterator[transactions.Record]
        if version == 1:
            records = (transactions.Record(k, 0, body) for k, body in
                       enumerate(transactions.decode_v1(files.read_bytes(source, "transaction file",
                                                                         transactions.MAX_V1_BYTES))))
        else:
            records = transactions.frames(f, what)
        old: dict[int, int] = {}   # record index -> its receipt's commitment format
        with files.output_stream(target, "NEW", reads=[source]) as out:
            writer = transactions.TxWriter(out)
            for r in _counted(records, advance):
                fmt = transactions.old_receipt(r.body)
                if fmt is not None:
                    old[r.index] = fmt
                    continue
                try:
                    transactions.decode_tx(r.body)
                except CvmError as e:
                    raise type(e)(e.reason, f"{what}: transaction {r.index}: {e.message}") from None
                writer.add_record(r.body)
            if old:
                shown = ", ".join(map(str, list(old)[:10])) + (", ..." if len(old) > 10 else "")
                formats = " and ".join(map(str, sorted(set(old.values()))))
                raise MalformedError("txs_version", f"{what}: {len(old)} of {writer.count + len(old)} "
                                                    f"transactions ({shown}) carry receipts of commitment format "
                                                    f"{formats}, which cannot be carried over: their hashes and "
                                                    f"signatures are that format's.  Nothing was written; make the "
                                                    f"claims again (`cvmvm run --receipt`, `cvmvm tx add`)")
            writer.close()
    return writer.count
