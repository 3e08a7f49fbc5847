"""Replaying inference transactions: re-execute each one and check its claimed receipt.

A transaction names a model (by hash, looked up in a Store), gives its inputs
and carries the receipt its executing node claims (docs/FORMAT.md section 7).
Each is reported ok, mismatch (the receipt fields that do not hold) or error
(the CvmError code that stopped it).

Transactions of one model run as one batched traced run when the verified
program allows it (cvmvm.vm.batching decides it and gives, per transaction,
exactly the hashes, trace root and ops of a one-by-one run); this module only
schedules chunks, builds the receipts, compares them with the claims and
reports.  Chunks run in this process, in worker processes (``workers``) or on
Ray (``use_ray``); results come back in transaction order whatever ran them.
"""

from __future__ import annotations

import functools
import hashlib
import multiprocessing
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from isa.errors import CvmError, MalformedError
from serializer.records.receipt import Receipt, receipt_from_state, receipt_state
from serializer.records.transactions import Transaction
from cvmvm.vm.api import Model, load
from cvmvm.vm.batching import Batch, prepare_feeds
from cvmvm.vm.verify import Limits
from cvmvm.tx import receipt as receipts
from cvmvm.tx.store import Store

DEFAULT_BATCH = 512


# -- outcomes -------------------------------------------------------------------------

OK, MISMATCH, ERROR = "ok", "mismatch", "error"


@dataclass(frozen=True)
class Outcome:
    index: int
    status: str                      # OK, MISMATCH or ERROR
    fields: tuple[str, ...] = ()     # the receipt fields that do not hold (MISMATCH)
    error: str | None = None         # the error code (ERROR)
    message: str = ""
    actual: Receipt | None = None    # the re-execution's receipt, when it ran

    def __reduce__(self) -> tuple[Any, ...]:
        return (_outcome, (self.index, self.status, self.fields, self.error, self.message,
                           None if self.actual is None else receipt_state(self.actual)))

    def to_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {"index": self.index, "status": self.status}
        if self.status == MISMATCH:
            row["fields"] = list(self.fields)
        if self.status == ERROR:
            row.update(error=self.error, message=self.message)
        if self.actual is not None:
            row.update(output_hash=self.actual.output_hash.hex(), trace_root=self.actual.trace_root.hex(),
                       ops=self.actual.ops)
        return row


def _outcome(index: int, status: str, fields: tuple[str, ...], error: str | None, message: str,
             actual: tuple[Any, ...] | None) -> Outcome:
    return Outcome(index, status, fields, error, message, receipt_from_state(actual))


def _failed(index: int, e: CvmError) -> Outcome:
    return Outcome(index, ERROR, error=e.code, message=e.message)


# -- running one model's transactions ----------------------------------------------------

class Replayer:
    """Runs chunks of one model's transactions; caches models and their batched runners."""

    def __init__(self, fetch: Callable[[bytes], Model], batch_size: int = DEFAULT_BATCH,
                 signer: bytes | None = None) -> None:
        self.fetch = fetch
        self.batch_size = batch_size
        self.signer = signer
        self._models: dict[bytes, Batch | CvmError] = {}

    def batch(self, model_hash: bytes) -> Batch:
        """The model's batched runner; a model that failed to load fails again at once."""
        if model_hash not in self._models:
            try:
                self._models[model_hash] = Batch(self.fetch(model_hash), self.batch_size)
            except CvmError as e:
                self._models[model_hash] = e
        got = self._models[model_hash]
        if isinstance(got, CvmError):
            raise got
        return got

    def run(self, model_hash: bytes, chunk: Sequence[tuple[int, Transaction]]) -> list[Outcome]:
        outcomes: dict[int, Outcome] = {}
        authentic = []
        for i, tx in chunk:
            # A receipt's signature and signer hold before its transaction costs any computation.
            bad = receipts.unauthenticated(tx.receipt, self.signer)
            if bad:
                outcomes[i] = Outcome(i, MISMATCH, bad)
            else:
                authentic.append((i, tx))
        ready = []
        if authentic:
            try:
                program = self.batch(model_hash).model.program
            except CvmError as e:
                return [outcomes.get(i) or _failed(i, e) for i, _ in chunk]
            for i, tx in authentic:
                try:
                    ready.append((i, tx.receipt, prepare_feeds(program, tx.inputs)))
                except CvmError as e:
                    outcomes[i] = _failed(i, e)
        actual = self.execute(model_hash, [f for _, _, f in ready]) if ready else []
        for (i, claimed, _), got in zip(ready, actual):
            if isinstance(got, CvmError):
                outcomes[i] = _failed(i, got)
                continue
            bad = receipts.recomputed_mismatches(claimed, got)
            outcomes[i] = Outcome(i, MISMATCH if bad else OK, bad, actual=got)
        return [outcomes[i] for i, _ in chunk]

    def execute(self, model_hash: bytes, feeds: list[list[np.ndarray]]) -> list[Receipt | CvmError]:
        """The receipt (unsigned) of each run, or the error that stopped it; ``feeds`` are
        prepared inputs in the model's input order, one list per run."""
        batch = self.batch(model_hash)
        names = [i.name for i in batch.model.program.model.inputs]
        return [got if isinstance(got, CvmError) else
                Receipt(model_hash, tuple(zip(names, got.digests)), got.output_hash, got.trace_root, got.ops)
                for got in batch.run(feeds)]


# -- scheduling: in process, worker processes, Ray -----------------------------------------

Task = tuple[bytes, list[tuple[int, Transaction]]]

# Each worker process (local or Ray) keeps one Replayer per setting, and with it
# the models it loaded, their plans and stacked programs, across tasks.
_replayers: dict[tuple[str | None, int, bytes | None, Limits], Replayer] = {}
# Ray workers get models as bytes (from the object store), not from a store directory.
_ray_blobs: dict[bytes, bytes] = {}


def _ray_fetch(model_hash: bytes, limits: Limits) -> Model:
    data = _ray_blobs[model_hash]
    got = hashlib.sha256(data).digest()
    if got != model_hash:
        raise MalformedError("store_hash", f"model bytes hash to {got.hex()}, not {model_hash.hex()}")
    return load(data, ops_limit=limits.ops, memory_limit=limits.memory, work_limit=limits.work)


def _cached_replayer(store_root: str | None, batch_size: int, signer: bytes | None, limits: Limits) -> Replayer:
    key = (store_root, batch_size, signer, limits)
    if key not in _replayers:
        fetch = _ray_fetch if store_root is None else Store(store_root).get
        _replayers[key] = Replayer(functools.partial(fetch, limits=limits), batch_size, signer)
    return _replayers[key]


def _worker_task(job: tuple[str, int, bytes | None, Limits, Task]) -> list[Outcome]:
    store_root, batch_size, signer, limits, task = job
    return _cached_replayer(store_root, batch_size, signer, limits).run(*task)


def _ray_task(model_bytes: bytes, task: Task, batch_size: int, signer: bytes | None, limits: Limits) -> list[Outcome]:
    """One chunk on a Ray worker; the model is re-hashed before use, as a store read would."""
    _ray_blobs.setdefault(task[0], model_bytes)
    return _cached_replayer(None, batch_size, signer, limits).run(*task)


def _tasks(txs: Sequence[Transaction], chunk_size: Callable[[bytes, int], int]) -> list[Task]:
    """Group by model (first appearance order), then split each group into chunks."""
    groups: dict[bytes, list[tuple[int, Transaction]]] = {}
    for i, tx in enumerate(txs):
        groups.setdefault(tx.model_hash, []).append((i, tx))
    tasks = []
    for model_hash, members in groups.items():
        size = max(1, chunk_size(model_hash, len(members)))
        tasks += [(model_hash, members[k:k + size]) for k in range(0, len(members), size)]
    return tasks


Progress = Callable[[int, int], None]


def replay(txs: Sequence[Transaction], store: Store, *, workers: int = 1, use_ray: bool = False,
           batch_size: int = DEFAULT_BATCH, signer: bytes | None = None,
           progress: Progress | None = None, limits: Limits = Limits()) -> list[Outcome]:
    """Replay every transaction; one Outcome each, in transaction order.  Every model is
    verified under ``limits``; a transaction whose receipt is not authentic is not run."""
    total = len(txs)
    done = 0

    def finished(outcomes: list[Outcome]) -> list[Outcome]:
        nonlocal done
        done += len(outcomes)
        if progress is not None:
            progress(done, total)
        return outcomes

    if use_ray:
        results = _replay_ray(txs, store, max(1, workers), batch_size, signer, limits, finished)
    elif workers > 1:
        # Enough chunks to keep every worker busy, each still a large batch.
        tasks = _tasks(txs, lambda h, n: min(batch_size, -(-n // (2 * workers))))
        results = []
        context = multiprocessing.get_context("forkserver" if "forkserver" in multiprocessing.get_all_start_methods()
                                              else "spawn")
        jobs = [(str(store.root), batch_size, signer, limits, task) for task in tasks]
        with context.Pool(workers) as pool:
            for outcomes in pool.imap_unordered(_worker_task, jobs):
                results += finished(outcomes)
    else:
        local = Replayer(functools.partial(store.get, limits=limits), batch_size, signer)
        results = []
        for task in _tasks(txs, lambda h, n: batch_size):
            results += finished(local.run(*task))
    results.sort(key=lambda o: o.index)
    return results


def _replay_ray(txs: Sequence[Transaction], store: Store, workers: int, batch_size: int, signer: bytes | None,
                limits: Limits, finished: Callable[[list[Outcome]], list[Outcome]]) -> list[Outcome]:
    import ray  # the optional extra: cvmvm[ray]

    if not ray.is_initialized():
        ray.init()  # joins the cluster named by RAY_ADDRESS, or starts a local one
    remote = ray.remote(_ray_task)
    cpus = max(workers, int(ray.cluster_resources().get("CPU", 1)))
    results: list[Outcome] = []
    refs: dict[bytes, Any] = {}
    futures = []
    for model_hash, chunk in _tasks(txs, lambda h, n: min(batch_size, -(-n // (2 * cpus)))):
        if model_hash not in refs:
            try:
                refs[model_hash] = ray.put(store.read(model_hash))
            except CvmError as e:
                refs[model_hash] = e
        if isinstance(refs[model_hash], CvmError):
            results += finished([_failed(i, refs[model_hash]) for i, _ in chunk])
            continue
        futures.append(remote.remote(refs[model_hash], (model_hash, chunk), batch_size, signer, limits))
    pending = list(futures)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        results += finished(ray.get(ready[0]))
    return results


# -- reporting ----------------------------------------------------------------------------

def summary(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    by_field: dict[str, int] = {}
    by_error: dict[str, int] = {}
    for o in outcomes:
        for f in o.fields:
            by_field[f] = by_field.get(f, 0) + 1
        if o.error is not None:
            by_error[o.error] = by_error.get(o.error, 0) + 1
    return {"total": len(outcomes), "ok": sum(o.status == OK for o in outcomes),
            "mismatch": sum(o.status == MISMATCH for o in outcomes),
            "error": sum(o.status == ERROR for o in outcomes),
            "mismatched_fields": dict(sorted(by_field.items())), "errors": dict(sorted(by_error.items()))}


def describe(o: Outcome) -> str:
    if o.status == OK:
        return f"tx {o.index}: ok"
    if o.status == MISMATCH:
        return f"tx {o.index}: mismatch {','.join(o.fields)}"
    return f"tx {o.index}: error {o.error}: {o.message}"


def iter_lines(outcomes: Sequence[Outcome], every: bool = False) -> Iterator[str]:
    """One line per transaction that did not hold (per transaction with ``every``), then the summary by kind."""
    yield from (describe(o) for o in outcomes if every or o.status != OK)
    s = summary(outcomes)
    yield (f"{s['total']} transactions: {s['ok']} ok, {s['mismatch']} mismatch, {s['error']} error")
    for kind, counts in (("mismatched", s["mismatched_fields"]), ("errors", s["errors"])):
        if counts:
            yield f"  {kind}: " + ", ".join(f"{k} {n}" for k, n in counts.items())
