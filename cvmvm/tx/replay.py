"""Replaying transactions: re-execute each one and check its claimed receipt.

A transaction names a model (by hash, looked up in a store), carries its
inputs and the receipt its executing node claims (docs/FORMAT.md section 8).
Each gets one Outcome: ok, mismatch (the receipt fields that do not hold) or
error (the CvmError code that stopped it).

``Replayer.run`` takes a chunk of one model's records (raw bytes, as framed in
the file) and returns their outcomes; it is all a worker does, in this
process, a worker process or a Ray task.  Per chunk it decodes each record,
checks the claim's signature first (a forged claim is never executed), checks
the inputs against the model, then runs every valid transaction of the chunk
as one batched traced run (cvmvm.vm.batching gives, per transaction, exactly
the commitments, trace root and ops of a one-by-one run) and compares.  Scheduling
and reporting are cvmvm.tx.schedule and cvmvm.tx.results.

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
from cvmvm.vm.batching import Batch, TracedRun
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


class Replayer:
    """Replays chunks of records; caches each model's batched runner (and a model that
    failed to load, which then fails again at once).  With ``compile``, compiles the hasher
    first (serializer.sha: some 3 s with the ``speed`` extra, nothing without it), which
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
        ready: list[tuple[int, bytes, Receipt, tuple[TxInput, ...]]] = []  # (position, tx id, claim, inputs)
        decode = self._decoders.get(model_hash) or self._decoders.setdefault(model_hash, transactions.Decoder())
        sha256, signer = hashlib.sha256, self.signer
        for k, (index, offset, body) in enumerate(items):
            tx = sha256(body).digest()
            try:
                _, given, claimed = decode(body)
            except CvmError as e:
                outcomes[k] = failed(index, offset, tx, e)
                continue
            # A receipt's signature and signer hold before its transaction costs any computation.
            if claimed.signer is not None or signer is not None:
                bad = receipts.unauthenticated(claimed, signer)
                if bad:
                    outcomes[k] = Outcome(index, offset, tx, MISMATCH, bad)
                    continue
            ready.append((k, tx, claimed, given))
        if not ready:
            return outcomes  # type: ignore[return-value]
        try:
            batch = self.batch(model_hash)
        except CvmError as e:
            for k, tx, _, _ in ready:
                outcomes[k] = failed(items[k][0], items[k][1], tx, e, model_hash)
            return outcomes  # type: ignore[return-value]
        inputs = batch.model.program.model.inputs
        expected = [(i.name, i.type.dtype, i.type.shape) for i in inputs]
        fitting = []
        for entry in ready:
            given = entry[3]
            # Every input as the model takes it (the common case, at once), else the error that says how not.
            if len(given) != len(expected) or any(g[:3] != e for g, e in zip(given, expected)):
                try:
                    _check_inputs(expected, given)
                except CvmError as e:
                    outcomes[entry[0]] = failed(items[entry[0]][0], items[entry[0]][1], entry[1], e)
                    continue
            fitting.append(entry)
        ready = self._check_precision(fitting, inputs, items, outcomes)
        if ready:
            columns = [self._column(j, inp.type.dtype, [r[3][j].data for r in ready], len(ready), inp.type.shape)
                       for j, inp in enumerate(inputs)]
            # One BLAS thread: replay's parallelism is its workers (cvmvm.vm.blas).
            with one_blas_thread():
                runs = batch.run_rows(columns, len(ready))
            names = [i.name for i in inputs]
            root = self._program_root(model_hash)
            for (k, tx, claimed, _), got in zip(ready, runs):
                index, offset, _ = items[k]
                if isinstance(got, CvmError):
                    outcomes[k] = failed(index, offset, tx, got)
                elif (claimed.output_hash == got.output_hash and claimed.trace_root == got.trace_root
                      and claimed.ops == got.ops and claimed.model_hash == model_hash
                      and claimed.program_root == root and claimed.inputs == tuple(zip(names, got.commitments))):
                    # Every recomputed field holds (the common case, compared at once).
                    outcomes[k] = Outcome(index, offset, tx, OK, (), None, "", got.output_hash, got.trace_root,
                                          got.ops, None)
                else:
                    outcomes[k] = self._compare(index, offset, tx, claimed, model_hash, names, got)
        return outcomes  # type: ignore[return-value]

    @staticmethod
    def _column(j: int, dtype: str, datas: list[bytes], count: int, shape: tuple[int, ...]) -> np.ndarray:
        wire = DTYPES[dtype].newbyteorder("<")
        value = np.frombuffer(b"".join(datas), dtype=wire).astype(DTYPES[dtype], copy=False)
        return value.reshape((count * shape[0],) + shape[1:])

    @staticmethod
    def _check_precision(ready: list, inputs: Sequence, items: Sequence[Item],
                         outcomes: list[Outcome | None]) -> list:
        """Refuse int32 values outside their input's precision (nothing is clipped), all rows at once."""
        for j, inp in enumerate(inputs):
            if inp.type.dtype != INT32 or inp.type.precision is None or not ready:
                continue
            bound = precision_bound(inp.type.precision)
            rows = np.frombuffer(b"".join(r[3][j].data for r in ready), dtype="<i4").reshape(len(ready), -1)
            low, high = rows.min(axis=1), rows.max(axis=1)
            bad = np.flatnonzero((low < -bound) | (high > bound))
            for b in bad.tolist():
                k, tx = ready[b][0], ready[b][1]
                index, offset, _ = items[k]
                value = int(low[b]) if low[b] < -bound else int(high[b])
                outcomes[k] = failed(index, offset, tx, InputError(
                    "value", f"input {inp.name}: value {value} is outside precision {inp.type.precision} "
                             f"([-{bound}, {bound}]); a transaction carries its inputs as the program reads them"))
            if len(bad):
                drop = set(bad.tolist())
                ready = [r for b, r in enumerate(ready) if b not in drop]
        return ready

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
