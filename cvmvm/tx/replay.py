"""Replaying transactions: re-execute each one and check its claimed receipt.

A transaction names a model (by hash, looked up in a store), carries its
inputs and the receipt its executing node claims (docs/FORMAT.md section 8).
Each gets one Outcome: ok, mismatch (the receipt fields that do not hold) or
error (the CvmError code that stopped it).

``Replayer.run`` takes a chunk of one model's records (raw bytes, as framed in
the file) and returns their outcomes; it is all a worker does, in this
process, a worker process or a Ray task.  Per chunk it cuts the records into
groups of records alike (``transactions.Decoder``: one array of bytes, a column
per bin, where a record differs from its group's template only in its bins'
payloads), checks each claim's signature first (a forged claim is never
executed), checks a group's inputs against the model once (its template's) and
their values' precision all at once, then runs every valid transaction of the
chunk as one batched traced run (cvmvm.vm.batching gives, per transaction,
exactly the commitments, trace root and ops of a one-by-one run) and compares
each group's claimed bins with the recomputed digests as arrays; a record that
does not hold is then compared field by field, to name what does not.
Scheduling and reporting are cvmvm.tx.schedule and cvmvm.tx.results.

A transaction carries its inputs exactly as the program reads them: the
model's dtype, and int32 values within the declared precision, in the model's
input order.  Nothing is clipped or converted, so the receipt's input commitments
commit to the bytes the transaction carries, and no two transaction byte
strings share a receipt (FORMAT.md section 8).
"""

from __future__ import annotations

import hashlib
from typing import Callable, NamedTuple, Sequence

import numpy as np

from isa.errors import CvmError, InputError
from isa.types import DTYPES, INT32, precision_bound
from serializer.records import transactions
from serializer.records.receipt import Receipt
from serializer.records.transactions import TxInput
from serializer import sha
from cvmvm.vm.api import Model
from cvmvm.vm.batching import Batch, Runs, TracedRun
from cvmvm.vm.blas import one_thread as one_blas_thread
from cvmvm.vm.trace import program_layout
from cvmvm.tx import receipt as receipts

DEFAULT_BATCH = 512

OK, MISMATCH, ERROR = "ok", "mismatch", "error"


class Outcome(NamedTuple):
    """One transaction's result (a tuple: it crosses process boundaries as a plain one, ``tuple(o)``)."""

    index: int  # type: ignore[assignment]  # position in the file, from 0 (shadows tuple.index, unused)
    offset: int                      # byte offset of its frame
    tx: bytes                        # its id: SHA-256 of its record
    status: str                      # OK, MISMATCH or ERROR
    fields: tuple[str, ...] = ()     # the receipt fields that do not hold (MISMATCH)
    error: str | None = None         # the error code (ERROR)
    message: str = ""
    output_hash: bytes | None = None  # what the re-execution computed, when it ran
    trace_root: bytes | None = None
    ops: int | None = None
    model: bytes | None = None       # set when the error is the model's (not in the store, ...), not the transaction's


def failed(index: int, offset: int, tx: bytes, e: CvmError, model: bytes | None = None) -> Outcome:
    return Outcome(index, offset, tx, ERROR, error=e.code, message=e.message, model=model)


# A record to replay: (index, byte offset, record bytes).
Item = tuple[int, int, bytes]


def _check_inputs(expected: Sequence[tuple[str, str, tuple[int, ...]]], given: tuple[TxInput, ...]) -> None:
    """Names in the model's order, then each input's shape and dtype, exactly."""
    names = [n for n, _, _ in expected]
    if [i.name for i in given] != names:
        got = [i.name for i in given]
        unknown = [n for n in got if n not in names]
        if unknown:
            raise InputError("name", f"unknown input {unknown[0]!r}; the model takes {names}")
        missing = [n for n in names if n not in got]
        if missing:
            raise InputError("name", f"missing input {missing[0]!r}")
        raise InputError("name", f"inputs {got} must be given in the model's order {names}")
    for (name, dtype, shape), i in zip(expected, given):
        if i.shape != shape:
            raise InputError("shape", f"input {name}: shape {i.shape} must be {shape}")
        if i.dtype != dtype:
            raise InputError("dtype", f"input {name}: dtype {i.dtype} must be {dtype}: a transaction carries "
                                      f"its inputs exactly as the program reads them")


def _column(payloads: np.ndarray, dtype: str, count: int, shape: tuple[int, ...]) -> np.ndarray:
    """An input's values for a batched run, from its payloads (one row of little-endian bytes a run)."""
    wire = DTYPES[dtype].newbyteorder("<")
    value = np.ascontiguousarray(payloads).view(wire).astype(DTYPES[dtype], copy=False)
    return value.reshape((count * shape[0],) + shape[1:])


class Replayer:
    """Replays chunks of records; caches each model's batched runner (and a model that
    failed to load, which then fails again at once).  With ``compile``, compiles the hasher
    first (serializer.sha: some 4 s with the ``speed`` extra, nothing without it), which
    a process otherwise does after cvmvm.vm.batching.HASH_WARM_ITEMS transactions: a long
    replay's workers save the wait."""

    def __init__(self, fetch: Callable[[bytes], Model], batch_size: int = DEFAULT_BATCH,
                 signer: bytes | None = None, compile: bool = False) -> None:
        if compile:
            sha.hasher()
        self.fetch = fetch
        self.batch_size = batch_size
        self.signer = signer
        self._models: dict[bytes, Batch | CvmError] = {}
        self._decoders: dict[bytes, transactions.Decoder] = {}   # by model: its records are alike

    def loaded(self, model_hash: bytes) -> bool:
        """Whether the model was fetched already (loaded, or failed to)."""
        return model_hash in self._models

    def batch(self, model_hash: bytes) -> Batch:
        if model_hash not in self._models:
            try:
                self._models[model_hash] = Batch(self.fetch(model_hash), self.batch_size)
            except CvmError as e:
                self._models[model_hash] = e
        got = self._models[model_hash]
        if isinstance(got, CvmError):
            raise got
        return got

    def run(self, model_hash: bytes, items: Sequence[Item]) -> list[Outcome]:
        """The outcome of each record (all naming ``model_hash``), in the order given."""
        outcomes: list[Outcome | None] = [None] * len(items)
        bodies = [body for _, _, body in items]
        sha256 = hashlib.sha256
        ids = [sha256(body).digest() for body in bodies]

        def fail(k: int, e: CvmError, model: bytes | None = None) -> None:
            outcomes[k] = failed(items[k][0], items[k][1], ids[k], e, model)

        decoder = self._decoders.get(model_hash) or self._decoders.setdefault(model_hash, transactions.Decoder())
        groups, errors = decoder.cut(bodies)
        for k, e in errors:
            fail(k, e)
        ready = [(g, self._authenticated(g, items, ids, outcomes)) for g in groups]
        ready = [(g, rows) for g, rows in ready if rows]
        if not ready:
            return outcomes  # type: ignore[return-value]
        try:
            batch = self.batch(model_hash)
        except CvmError as e:
            for g, rows in ready:
                for i in rows:
                    fail(g.rows[i], e, model_hash)
            return outcomes  # type: ignore[return-value]
        inputs = batch.model.program.model.inputs
        expected = [(i.name, i.type.dtype, i.type.shape) for i in inputs]
        runnable = []
        for g, rows in ready:
            # A group's inputs are its template's, but for their data.
            given = g.template[1]
            if len(given) != len(expected) or any(i[:3] != e for i, e in zip(given, expected)):
                try:
                    _check_inputs(expected, given)
                except CvmError as e:
                    for i in rows:
                        fail(g.rows[i], e)
                    continue
            rows = self._in_precision(g, rows, inputs, fail)
            if rows:
                runnable.append((g, rows))
        if not runnable:
            return outcomes  # type: ignore[return-value]
        count = sum(len(rows) for _, rows in runnable)
        columns = [_column(np.concatenate([g.columns[1 + j][rows] for g, rows in runnable]), inp.type.dtype,
                           count, inp.type.shape) for j, inp in enumerate(inputs)]
        # One BLAS thread: replay's parallelism is its workers (cvmvm.vm.blas).
        with one_blas_thread():
            runs = batch.run_rows(columns, count)
        names = [i.name for i in inputs]
        root = self._program_root(model_hash)
        start = 0
        for g, rows in runnable:
            self._compare_group(g, rows, runs, start, model_hash, root, names, items, ids, outcomes)
            start += len(rows)
        return outcomes  # type: ignore[return-value]

    def _authenticated(self, g: transactions.Alike, items: Sequence[Item], ids: list[bytes],
                       outcomes: list[Outcome | None]) -> list[int]:
        """The rows of ``g`` whose receipt's signature and signer hold (a mismatch for the others):
        checked before a transaction costs any computation."""
        if g.template[2].signer is None and self.signer is None:
            return list(range(len(g.rows)))
        rows = []
        for i, k in enumerate(g.rows):
            bad = receipts.unauthenticated(g.decoded(i)[2], self.signer)
            if bad:
                outcomes[k] = Outcome(items[k][0], items[k][1], ids[k], MISMATCH, bad)
            else:
                rows.append(i)
        return rows

    @staticmethod
    def _in_precision(g: transactions.Alike, rows: list[int], inputs: Sequence,
                      fail: Callable[[int, CvmError], None]) -> list[int]:
        """The rows whose int32 values are all within their input's precision (nothing is clipped);
        the others fail, every row checked at once."""
        for j, inp in enumerate(inputs):
            if inp.type.dtype != INT32 or inp.type.precision is None or not rows:
                continue
            bound = precision_bound(inp.type.precision)
            values = np.ascontiguousarray(g.columns[1 + j][rows]).view("<i4")
            low, high = values.min(axis=1), values.max(axis=1)
            bad = np.flatnonzero((low < -bound) | (high > bound)).tolist()
            for b in bad:
                value = int(low[b]) if low[b] < -bound else int(high[b])
                fail(g.rows[rows[b]], InputError(
                    "value", f"input {inp.name}: value {value} is outside precision {inp.type.precision} "
                             f"([-{bound}, {bound}]); a transaction carries its inputs as the program reads them"))
            if bad:
                drop = set(bad)
                rows = [r for b, r in enumerate(rows) if b not in drop]
        return rows

    def _compare_group(self, g: transactions.Alike, rows: list[int], runs: Runs, start: int, model_hash: bytes,
                       root: bytes, names: list[str], items: Sequence[Item], ids: list[bytes],
                       outcomes: list[Outcome | None]) -> None:
        """The outcome of each of the group's runs (``runs`` from ``start`` on): every recomputed
        field compared with its claim, the whole group at once."""
        claimed = g.template[2]
        n, m = len(g.template[1]), len(names)
        errors = runs.errors
        done = [i for i in range(len(rows)) if start + i not in errors] if errors else list(range(len(rows)))
        for i in range(len(rows)):
            if start + i in errors:
                k = g.rows[rows[i]]
                outcomes[k] = failed(items[k][0], items[k][1], ids[k], errors[start + i])
        if not done:
            return
        at = np.asarray([rows[i] for i in done], dtype=np.int64)
        mine = np.asarray(done, dtype=np.int64) + start
        outputs, roots = runs.output_hashes[mine], runs.trace_roots[mine]

        def claims(column: int, got: np.ndarray) -> np.ndarray:
            return (g.columns[column][at] == got).all(axis=1)

        # The fields the template fixes for every row (its input names, its ops), then the bins.
        if [name for name, _ in claimed.inputs] == names and claimed.ops == runs.ops:
            holds = claims(1 + n, np.frombuffer(model_hash, dtype=np.uint8)) & \
                claims(2 + n, np.frombuffer(root, dtype=np.uint8))
            for j in range(m):
                holds &= claims(3 + n + j, runs.commitments[mine, j])
            holds &= claims(3 + n + m, outputs) & claims(4 + n + m, roots)
        else:
            holds = np.zeros(len(done), dtype=bool)
        output_bytes, root_bytes = outputs.tobytes(), roots.tobytes()
        for e, (i, ok) in enumerate(zip(done, holds.tolist())):
            k = g.rows[rows[i]]
            index, offset, _ = items[k]
            if ok:
                outcomes[k] = Outcome(index, offset, ids[k], OK, (), None, "", output_bytes[32 * e:32 * e + 32],
                                      root_bytes[32 * e:32 * e + 32], runs.ops, None)
            else:
                got = runs.item(start + i)
                assert isinstance(got, TracedRun)
                outcomes[k] = self._compare(index, offset, ids[k], g.decoded(rows[i])[2], model_hash, names, got)

    def _compare(self, index: int, offset: int, tx: bytes, claimed: Receipt, model_hash: bytes,
                 names: list[str], got: TracedRun) -> Outcome:
        actual = Receipt(model_hash, self._program_root(model_hash), tuple(zip(names, got.commitments)),
                         got.output_hash, got.trace_root, got.ops)
        bad = receipts.recomputed_mismatches(claimed, actual)
        return Outcome(index, offset, tx, MISMATCH if bad else OK, bad,
                       output_hash=got.output_hash, trace_root=got.trace_root, ops=got.ops)

    def execute(self, model_hash: bytes, feeds: list[list[np.ndarray]]) -> list[Receipt | CvmError]:
        """The unsigned receipt of each run, or the error that stopped it; ``feeds`` are prepared
        inputs in the model's input order, one list per run (for tools that make transactions)."""
        batch = self.batch(model_hash)
        names = [i.name for i in batch.model.program.model.inputs]
        root = self._program_root(model_hash)
        return [got if isinstance(got, CvmError) else
                Receipt(model_hash, root, tuple(zip(names, got.commitments)), got.output_hash, got.trace_root, got.ops)
                for got in batch.run(feeds)]

    def _program_root(self, model_hash: bytes) -> bytes:
        return program_layout(self.batch(model_hash).model.program).root
