"""Replaying inference transactions: re-execute each one and check its claimed receipt.

A transaction names a model (by hash, looked up in a Store), gives its inputs
and carries the receipt its executing node claims (docs/FORMAT.md section 7).
Each is reported ok, mismatch (the receipt fields that do not hold) or error
(the CvmError code that stopped it).

Transactions of one model run as a batch when the verified program allows it,
decided statically by ``batch_plan``: every tensor derived from the inputs must
keep axis 0 as an independent batch axis through row-wise ops, so that the
batched run's tensors are the one-by-one runs' tensors stacked along axis 0.
Each transaction's trace is then rebuilt from its own rows, and its hashes,
trace root and ops are exactly those of a one-by-one run.  Batches run in this
process, in worker processes (``workers``) or on Ray (``use_ray``); results
come back in transaction order whatever ran them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import multiprocessing
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from isa.errors import CvmError, InputError, MalformedError
from isa.ops.reduce import reduced_axes
from isa.ops.transform import permutation
from isa.types import MAX_DIM, MAX_SIZE, TensorType
from serializer import strict
from serializer.hashing import (HASH_SIZE, canonical_array, merkle_root, outputs_hash, tensor_hash, tensor_header,
                                trace_root)
from serializer.model import Input, Model as ModelIR
from serializer.strict import Reader, pack, tensor_to_wire
from cvmvm.tx import receipt as receipts
from cvmvm.vm.api import Model, load
from cvmvm.vm.execute import execute, prepare_input
from cvmvm.tx.receipt import Receipt
from cvmvm.tx.store import Store
from cvmvm.vm.trace import trace_layout
from cvmvm.vm.verify import MAX_OPS, Program, Step, verify

TXS_FORMAT = "cvmvm-txs"
TXS_VERSION = 1
TOP_KEYS = ("format", "version", "txs")
TX_KEYS = ("model", "inputs", "receipt")
TX_INPUT_KEYS = ("name", "dtype", "shape", "data")

MAX_TXS_BYTES = 1 << 32
DEFAULT_BATCH = 512
BATCH_BYTES = 1 << 28   # tensor bytes one batch may hold, summed over every batched tensor

_READER = Reader("txs")


# -- transactions and their file ---------------------------------------------------

# Transactions and outcomes cross process boundaries as plain tuples and bytes,
# which pickle several times faster than arrays and nested dataclasses.

def _receipt_state(r: Receipt) -> tuple[Any, ...]:
    signer = None if r.signer is None else (r.signer.public_key, r.signer.signature)
    return (r.model_hash, r.inputs, r.output_hash, r.trace_root, r.ops, signer)


def _receipt_from_state(state: tuple[Any, ...] | None) -> Receipt | None:
    if state is None:
        return None
    *fields, signer = state
    return Receipt(*fields, None if signer is None else receipts.Signer(*signer))


def _transaction(model_hash: bytes, inputs: tuple[tuple[str, str, tuple[int, ...], bytes], ...],
                 claimed: tuple[Any, ...]) -> Transaction:
    return Transaction(model_hash, tuple((n, np.frombuffer(data, dtype=np.dtype(dt)).reshape(shape))
                                         for n, dt, shape, data in inputs), _receipt_from_state(claimed))


@dataclass(frozen=True)
class Transaction:
    model_hash: bytes
    inputs: tuple[tuple[str, np.ndarray], ...]  # (name, value) as the transaction gives them
    receipt: Receipt                            # what the executing node claims

    def __reduce__(self) -> tuple[Any, ...]:
        return (_transaction, (self.model_hash, tuple((n, v.dtype.str, v.shape, v.tobytes()) for n, v in self.inputs),
                               _receipt_state(self.receipt)))


def _tx_wire(tx: Transaction) -> dict[str, Any]:
    return {"model": tx.model_hash,
            "inputs": [{"name": name, **tensor_to_wire(value)} for name, value in tx.inputs],
            "receipt": receipts.to_wire(tx.receipt)}


def _txs_wire(txs: Iterable[Transaction]) -> dict[str, Any]:
    return {"format": TXS_FORMAT, "version": TXS_VERSION, "txs": [_tx_wire(tx) for tx in txs]}


def encode_txs(txs: Iterable[Transaction]) -> bytes:
    return pack(_txs_wire(txs))


def _tx_from_wire(e: Any, where: str) -> Transaction:
    rd = _READER
    e = rd.map(e, TX_KEYS, where)
    inputs = []
    names: set[str] = set()
    for k, i in enumerate(rd.list(e["inputs"], f"{where}.inputs")):
        w = f"{where}.inputs[{k}]"
        i = rd.map(i, TX_INPUT_KEYS, w)
        name = rd.str(i["name"], f"{w}.name")
        if name in names:
            raise rd.fail(f"{w}: input {name!r} given twice")
        names.add(name)
        inputs.append((name, rd.tensor(i, w)))
    return Transaction(rd.bin(e["model"], f"{where}.model", HASH_SIZE), tuple(inputs),
                       receipts.from_wire(e["receipt"], rd))


def _txs_from_wire(top: Any) -> list[Transaction]:
    top = _READER.map(top, TOP_KEYS, "txs file")
    _READER.const(top["format"], TXS_FORMAT, "format")
    _READER.const(top["version"], TXS_VERSION, "version")
    return [_tx_from_wire(e, f"txs[{k}]") for k, e in enumerate(_READER.list(top["txs"], "txs"))]


def decode_txs(data: bytes) -> list[Transaction]:
    """A transaction file -> its transactions; strict and canonical, like a native model."""
    return strict.decode(data, _READER, MAX_TXS_BYTES, "transaction file", _txs_from_wire, _txs_wire)


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
                           None if self.actual is None else _receipt_state(self.actual)))

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
    return Outcome(index, status, fields, error, message, _receipt_from_state(actual))


def _failed(index: int, e: CvmError) -> Outcome:
    return Outcome(index, ERROR, error=e.code, message=e.message)


# -- static batching decision ---------------------------------------------------------

# Each rule: may this step run on inputs stacked along axis 0 (``flags`` marks the
# stacked ones; the others are constants, the same for every transaction) so that
# output row block i is the one-by-one output of transaction i?

def _any(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    return True


def _all_stacked(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    return all(flags)


def _data_only(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    return flags[0] and not any(flags[1:])


def _broadcast(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    # A stacked operand must own the output's axis 0; a constant one must not reach it.
    out = outs[0]
    return all((t.ndim == out.ndim and t.shape[0] == out.shape[0]) if f else (t.ndim < out.ndim or t.shape[0] == 1)
               for f, t in zip(flags, ins))


def _reduce(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    return 0 not in reduced_axes(a, ins[0].ndim)


def _repeat(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    return a.axis % ins[0].ndim != 0


def _tile(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    return len(a.reps) < ins[0].ndim or (len(a.reps) == ins[0].ndim and a.reps[0] == 1)


def _expand_dims(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    return a.num_newaxis == 0 or (a.axis + ins[0].ndim + 1 if a.axis < 0 else a.axis) >= 1


def _squeeze(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    if a.axis:
        return all(ax % ins[0].ndim != 0 for ax in a.axis)
    return ins[0].shape[0] != 1


def _transpose(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    return permutation(a, ins[0].ndim)[0] == 0


def _concatenate(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    return all(flags) and a.axis % ins[0].ndim != 0


def _take(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    data, indices = flags
    if data and not indices:       # gathers along a later axis of each row
        return a.axis is not None and a.axis % ins[0].ndim != 0
    if indices and not data:       # looks each index row up in a constant table
        return a.axis is None or a.axis % ins[0].ndim == 0
    return False


ROW_RULES: dict[str, Callable[..., bool]] = {
    **{name: _any for name in ("relu", "abs", "negative", "cvm_precision", "clip", "cvm_clip",
                               "cvm_right_shift", "cvm_left_shift", "flatten", "max_pool2d", "upsampling",
                               "reshape")},
    "elemwise_add": _all_stacked, "elemwise_sub": _all_stacked, "where": _all_stacked,
    **{name: _broadcast for name in ("broadcast_add", "broadcast_sub", "broadcast_mul", "broadcast_div",
                                     "broadcast_max", "broadcast_greater")},
    "conv2d": _data_only, "dense": _data_only, "cvm_lut": _data_only,
    "sum": _reduce, "max": _reduce, "repeat": _repeat, "tile": _tile, "expand_dims": _expand_dims,
    "squeeze": _squeeze, "transpose": _transpose, "concatenate": _concatenate, "take": _take,
}
# Not listed, so never stacked: strided_slice and slice_like (their attributes name
# absolute ranges of axis 0), get_valid_counts, non_max_suppression and max_pool.


def batch_plan(program: Program) -> tuple[bool, ...] | None:
    """Per tensor id, whether it is stacked (derived from the inputs), or None when
    some step cannot run stacked: the model then runs one transaction at a time."""
    stacked = [True] * len(program.model.inputs) + [False] * len(program.model.params)
    for step in program.steps:
        flags = [stacked[t] for t in step.inputs]
        if any(flags):
            rule = ROW_RULES.get(step.op.name)
            if rule is None or not rule(step.attrs, flags, [program.types[t] for t in step.inputs], step.out_types):
                return None
        stacked.extend([any(flags)] * len(step.outputs))
    return tuple(stacked)


def _stacked_attrs(step: Step, count: int) -> Any:
    # reshape names its output's axis 0 literally; 0 and the negative codes copy or infer it.
    if step.op.name == "reshape" and step.attrs.shape and step.attrs.shape[0] > 0:
        return dataclasses.replace(step.attrs, shape=(step.attrs.shape[0] * count, *step.attrs.shape[1:]))
    return step.attrs


def _scaled(t: TensorType, count: int) -> TensorType:
    return dataclasses.replace(t, shape=(t.shape[0] * count, *t.shape[1:]))


def stacked_program(program: Program, stacked: tuple[bool, ...], count: int) -> Program | None:
    """The program over ``count`` transactions' inputs stacked along axis 0, verified, or None
    if its inferred types are not exactly the one-by-one types (axis 0 scaled where stacked)."""
    m = program.model
    model = ModelIR(tuple(Input(i.name, _scaled(i.type, count)) for i in m.inputs), m.params,
                    tuple(dataclasses.replace(ins, attrs=_stacked_attrs(step, count), declared_shapes=None)
                          for ins, step in zip(m.instrs, program.steps)), m.outputs)
    try:
        big = verify(model)
    except CvmError:
        return None
    want = tuple(_scaled(t, count) if s else t for t, s in zip(program.types, stacked))
    return big if big.types == want else None


def batch_limit(program: Program, stacked: tuple[bool, ...], requested: int) -> int:
    """The most transactions one stacked run may hold: the ISA's dimension, size and
    ops limits, and a memory budget."""
    types = [t for t, s in zip(program.types, stacked) if s]
    if not types:
        return requested
    per_tx_bytes = sum(t.size * 8 for t in types)
    return max(1, min(requested, MAX_DIM // max(t.shape[0] for t in types), MAX_SIZE // max(t.size for t in types),
                      MAX_OPS // max(1, program.ops), BATCH_BYTES // per_tx_bytes))


# -- running one model's transactions ----------------------------------------------------

def _row_hashes(value: np.ndarray, t: TensorType, count: int) -> list[bytes]:
    """tensor_hash of each of ``count`` equal row blocks of ``value`` (each of type ``t``)."""
    data = memoryview(canonical_array(value, t.dtype)).cast("B")
    size = len(data) // count
    base = hashlib.sha256(tensor_header(t.dtype, t.shape))
    digests = []
    for i in range(count):
        h = base.copy()
        h.update(data[i * size:(i + 1) * size])
        digests.append(h.digest())
    return digests


def prepare_feeds(program: Program, inputs: tuple[tuple[str, np.ndarray], ...]) -> list[np.ndarray]:
    """The transaction's inputs checked and prepared as execution would (same errors)."""
    given = dict(inputs)
    expected = [i.name for i in program.model.inputs]
    unknown = [n for n in given if n not in set(expected)]
    if unknown:
        raise InputError("name", f"unknown input {unknown[0]!r}; the model takes {expected}")
    feeds = []
    for i in program.model.inputs:
        if i.name not in given:
            raise InputError("name", f"missing input {i.name!r}")
        feeds.append(prepare_input(i.name, i.type, given[i.name]))
    return feeds


class Replayer:
    """Runs chunks of one model's transactions; caches models, plans and stacked programs."""

    def __init__(self, fetch: Callable[[bytes], Model], batch_size: int = DEFAULT_BATCH,
                 signer: bytes | None = None) -> None:
        self.fetch = fetch
        self.batch_size = batch_size
        self.signer = signer
        self._models: dict[bytes, tuple[Model, tuple[bool, ...] | None] | CvmError] = {}
        self._stacked: dict[tuple[bytes, int], Program | None] = {}

    def model(self, model_hash: bytes) -> tuple[Model, tuple[bool, ...] | None]:
        """The model and its batch plan; a model that failed to load fails again at once."""
        if model_hash not in self._models:
            try:
                model = self.fetch(model_hash)
                self._models[model_hash] = (model, batch_plan(model.program))
            except CvmError as e:
                self._models[model_hash] = e
        got = self._models[model_hash]
        if isinstance(got, CvmError):
            raise got
        return got

    def limit(self, model_hash: bytes) -> int:
        model, plan = self.model(model_hash)
        return 1 if plan is None else batch_limit(model.program, plan, self.batch_size)

    def run(self, model_hash: bytes, chunk: Sequence[tuple[int, Transaction]]) -> list[Outcome]:
        try:
            model, plan = self.model(model_hash)
        except CvmError as e:
            return [_failed(i, e) for i, _ in chunk]
        outcomes: dict[int, Outcome] = {}
        ready = []
        for i, tx in chunk:
            try:
                ready.append((i, tx.receipt, prepare_feeds(model.program, tx.inputs)))
            except CvmError as e:
                outcomes[i] = _failed(i, e)
        actual = self.execute(model_hash, [f for _, _, f in ready])
        for (i, claimed, _), got in zip(ready, actual):
            if isinstance(got, CvmError):
                outcomes[i] = _failed(i, got)
                continue
            bad = receipts.mismatches(claimed, got, self.signer)
            outcomes[i] = Outcome(i, MISMATCH if bad else OK, bad, actual=got)
        return [outcomes[i] for i, _ in chunk]

    def execute(self, model_hash: bytes, feeds: list[list[np.ndarray]]) -> list[Receipt | CvmError]:
        """The receipt (unsigned) of each run, or the error that stopped it; ``feeds`` are
        prepared inputs in the model's input order, one list per run."""
        model, plan = self.model(model_hash)
        start = 0
        results: list[Receipt | CvmError] = []
        step = self.limit(model_hash)
        while start < len(feeds):
            part = feeds[start:start + step]
            start += len(part)
            if plan is not None and len(part) > 1:
                key = (model_hash, len(part))
                if key not in self._stacked:
                    self._stacked[key] = stacked_program(model.program, plan, len(part))
                if self._stacked[key] is not None:
                    try:
                        results += _run_stacked(model, plan, self._stacked[key], part)
                        continue
                    except CvmError:
                        pass  # rerun one at a time below, so each transaction gets its own error
            results += [_run_one(model, f) for f in part]
        return results


def _run_one(model: Model, feeds: list[np.ndarray]) -> Receipt | CvmError:
    names = [i.name for i in model.program.model.inputs]
    try:
        return receipts.make_receipt(model, model.run(dict(zip(names, feeds)), trace=True))
    except CvmError as e:
        return e


def _run_stacked(model: Model, plan: tuple[bool, ...], big: Program, feeds: list[list[np.ndarray]]) -> list[Receipt]:
    program = model.program
    count = len(feeds)
    names = [i.name for i in program.model.inputs]
    stacked_inputs = {n: np.concatenate([f[k] for f in feeds]) for k, n in enumerate(names)}
    prefixes = trace_layout(program).prefixes
    # leaves[t] is one leaf shared by every transaction (a constant) or one per transaction.
    leaves: list[Any] = [None] * len(program.types)
    digests: list[Any] = [None] * len(program.types)

    def observe(t: int, value: np.ndarray) -> None:
        if plan[t]:
            digests[t] = _row_hashes(value, program.types[t], count)
            leaves[t] = [hashlib.sha256(prefixes[t] + d).digest() for d in digests[t]]
        else:
            digests[t] = tensor_hash(value, program.types[t].dtype)
            leaves[t] = hashlib.sha256(prefixes[t] + digests[t]).digest()

    execute(big, stacked_inputs, observe)
    n_in = len(names)
    model_hash = model.model_hash
    results = []
    for i in range(count):
        root = trace_root(model_hash, len(leaves), merkle_root([lv[i] if plan[t] else lv for t, lv in enumerate(leaves)]))
        out = outputs_hash([digests[t][i] if plan[t] else digests[t] for t in program.model.outputs])
        ins = tuple((names[k], digests[k][i]) for k in range(n_in))
        results.append(Receipt(model_hash, ins, out, root, program.ops))
    return results


# -- scheduling: in process, worker processes, Ray -----------------------------------------

Task = tuple[bytes, list[tuple[int, Transaction]]]

# Each worker process (local or Ray) keeps one Replayer per setting, and with it
# the models it loaded, their plans and stacked programs, across tasks.
_replayers: dict[tuple[str | None, int, bytes | None], Replayer] = {}
# Ray workers get models as bytes (from the object store), not from a store directory.
_ray_blobs: dict[bytes, bytes] = {}


def _ray_fetch(model_hash: bytes) -> Model:
    data = _ray_blobs[model_hash]
    got = hashlib.sha256(data).digest()
    if got != model_hash:
        raise MalformedError("store_hash", f"model bytes hash to {got.hex()}, not {model_hash.hex()}")
    return load(data)


def _cached_replayer(store_root: str | None, batch_size: int, signer: bytes | None) -> Replayer:
    key = (store_root, batch_size, signer)
    if key not in _replayers:
        _replayers[key] = Replayer(_ray_fetch if store_root is None else Store(store_root).get, batch_size, signer)
    return _replayers[key]


def _worker_task(job: tuple[str, int, bytes | None, Task]) -> list[Outcome]:
    store_root, batch_size, signer, task = job
    return _cached_replayer(store_root, batch_size, signer).run(*task)


def _ray_task(model_bytes: bytes, task: Task, batch_size: int, signer: bytes | None) -> list[Outcome]:
    """One chunk on a Ray worker; the model is re-hashed before use, as a store read would."""
    _ray_blobs.setdefault(task[0], model_bytes)
    return _cached_replayer(None, batch_size, signer).run(*task)


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
           progress: Progress | None = None) -> list[Outcome]:
    """Replay every transaction; one Outcome each, in transaction order."""
    total = len(txs)
    done = 0

    def finished(outcomes: list[Outcome]) -> list[Outcome]:
        nonlocal done
        done += len(outcomes)
        if progress is not None:
            progress(done, total)
        return outcomes

    if use_ray:
        results = _replay_ray(txs, store, max(1, workers), batch_size, signer, finished)
    elif workers > 1:
        # Enough chunks to keep every worker busy, each still a large batch.
        tasks = _tasks(txs, lambda h, n: min(batch_size, -(-n // (2 * workers))))
        results = []
        context = multiprocessing.get_context("forkserver" if "forkserver" in multiprocessing.get_all_start_methods()
                                              else "spawn")
        jobs = [(str(store.root), batch_size, signer, task) for task in tasks]
        with context.Pool(workers) as pool:
            for outcomes in pool.imap_unordered(_worker_task, jobs):
                results += finished(outcomes)
    else:
        local = Replayer(store.get, batch_size, signer)
        results = []
        for task in _tasks(txs, lambda h, n: batch_size):
            results += finished(local.run(*task))
    results.sort(key=lambda o: o.index)
    return results


def _replay_ray(txs: Sequence[Transaction], store: Store, workers: int, batch_size: int,
                signer: bytes | None, finished: Callable[[list[Outcome]], list[Outcome]]) -> list[Outcome]:
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
        futures.append(remote.remote(refs[model_hash], (model_hash, chunk), batch_size, signer))
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
