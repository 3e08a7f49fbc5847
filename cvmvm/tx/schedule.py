"""Scheduling a replay: read the transaction file record by record, group records of
one model into chunks, run the chunks (in this process, in worker processes or on
Ray), and give the outcomes back in transaction order, as they complete.

Memory is bounded whatever the file's length: a chunk closes at the batch size;
a chunk still open when the reader is ``window`` records past its first record
is sent as it is (so a rare model does not hold back the in-order stream); at
most about two chunks per worker (per CPU on Ray) are in flight; the reading
waits for them.  Completed outcomes wait only for earlier ones still in
flight.  A model is fetched once: a model that is not in the store, or does
not load, is the error of each of its transactions without a second try.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import logging
import multiprocessing
import os
import queue
import select
import signal
import socket
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

from isa.errors import CvmError, InternalError, IOFailure, MalformedError, UsageError
from serializer import kinds
from serializer.records import transactions
from serializer.records.transactions import Record
from cvmvm import files
from cvmvm.vm.api import Model
from cvmvm.vm.verify import Limits
from cvmvm.tx.replay import DEFAULT_BATCH, Item, Outcome, Replayer, failed
from cvmvm.tx.store import Store, checked_model

CHUNK_BYTES = 1 << 25   # record bytes in one chunk, whatever the batch size
READ_BUFFER = 1 << 20
RESUMED_BURST = 4096    # outcomes read back from a results file, handed on at a time
MAX_WORKERS = 1024      # worker processes one replay starts: far more than cores, far fewer than a C int


@dataclass(frozen=True)
class Options:
    workers: int = 1                  # 1: this process; more: worker processes
    ray: str | None = None            # None: no Ray; "": RAY_ADDRESS's cluster, else a new local one; else an address
    batch_size: int = DEFAULT_BATCH   # most transactions in one batched run
    signer: bytes | None = None       # every receipt must be signed by this key
    limits: Limits = Limits()         # every model is verified under these (memory, work, ops)
    compile: bool = False             # each worker compiles the hasher first (Replayer's ``compile``)

    def __post_init__(self) -> None:
        if type(self.workers) is not int or not 1 <= self.workers <= MAX_WORKERS:
            raise UsageError("argument", f"workers={self.workers!r}: expected an integer in [1, {MAX_WORKERS}]")


# -- executors: run chunks, give back completed ones ----------------------------------

class Local:
    """Runs each chunk at once, in this process."""

    parallel = 1

    def __init__(self, store: Store, opts: Options) -> None:
        self.replayer = Replayer(functools.partial(store.get, limits=opts.limits), opts.batch_size, opts.signer,
                                 opts.compile)
        self.done: list[list[Outcome]] = []

    @property
    def inflight(self) -> int:
        return len(self.done)

    def submit(self, model: bytes, items: list[Item]) -> None:
        self.done.append(self.replayer.run(model, items))

    def collect(self, block: bool) -> list[list[Outcome]]:
        done, self.done = self.done, []
        return done

    def close(self) -> None:
        pass

    abort = close


# Worker processes keep one Replayer (and with it every model they loaded).
_worker: Replayer | None = None


def _worker_init(driver: int, store_root: str, batch_size: int, signer: bytes | None, limits: Limits,
                 compile: bool) -> None:
    global _worker
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle: it ends the pool
    threading.Thread(target=_end_with, args=(driver,), daemon=True, name="cvmvm-driver-watch").start()
    _worker = Replayer(functools.partial(Store(store_root).get, limits=limits), batch_size, signer, compile)


def _end_with(driver: int) -> None:
    """Ends this worker when the driver is gone (kill -9, the OOM killer, SIGTERM).  The pool cannot
    tell it: each worker holds both ends of the pool's queue itself, so it never reads an end of
    input, and workers of a killed driver waited for work for ever."""
    try:
        gone = os.pidfd_open(driver)   # Linux 5.3 and later: readable once the process has exited
    except ProcessLookupError:
        os._exit(1)
    except (AttributeError, OSError):
        while True:   # elsewhere: asked once a second
            time.sleep(1.0)
            try:
                os.kill(driver, 0)
            except ProcessLookupError:
                os._exit(1)
            except OSError:
                pass
    select.select([gone], [], [])
    os._exit(1)


def _worker_chunk(model: bytes, items: list[Item]) -> list[tuple[Any, ...]]:
    # Plain tuples: a NamedTuple pickles through a Python call per object, four times slower.
    assert _worker is not None
    return [tuple(o) for o in _worker.run(model, items)]


class Pool:
    """Worker processes (forkserver: nothing of the driver's state is inherited).

    A ProcessPoolExecutor, not a multiprocessing.Pool: a worker killed mid-chunk (the
    kernel's OOM killer, kill -9) breaks the executor and fails every pending chunk,
    where a multiprocessing.Pool replaces the worker and waits forever for its chunk."""

    def __init__(self, store: Store, opts: Options) -> None:
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
        if context.get_start_method() == "forkserver":
            # Workers fork from a server that imported the VM once, instead of each importing it.
            context.set_forkserver_preload(["cvmvm.tx.schedule"])
        self.parallel = opts.workers
        self.pool = ProcessPoolExecutor(opts.workers, mp_context=context, initializer=_worker_init,
                                        initargs=(os.getpid(), str(store.root), opts.batch_size, opts.signer, opts.limits,
                                                  opts.compile))
        self.results: queue.SimpleQueue[Future[list[tuple[Any, ...]]]] = queue.SimpleQueue()
        self.inflight = 0

    def submit(self, model: bytes, items: list[Item]) -> None:
        self.inflight += 1
        self.pool.submit(_worker_chunk, model, items).add_done_callback(self.results.put)

    def collect(self, block: bool) -> list[list[Outcome]]:
        done = []
        while self.inflight and (block or not self.results.empty()):
            got = self.results.get()
            self.inflight -= 1
            failure = got.exception()
            if isinstance(failure, BrokenProcessPool):
                raise InternalError("worker", "a replay worker process died (killed by a signal: out of memory, "
                                              "kill -9); every outcome before it is reported, and --resume "
                                              "continues from there") from None
            if failure is not None:
                raise failure
            done.append([Outcome._make(o) for o in got.result()])
            block = False
        return done

    def close(self) -> None:
        self.pool.shutdown(wait=True)

    def abort(self) -> None:
        # Workers ignore SIGINT; each ends after the chunk it holds (a fraction of a second).
        self.pool.shutdown(wait=True, cancel_futures=True)


# Ray workers get a stored model file's bytes through the object store (or the error reading it
# gave), with its path in the store, and check them exactly as Store.get does in a worker process.
_ray_replayers: dict[tuple[int, bytes | None, Limits], Replayer] = {}
_ray_models: dict[bytes, tuple[bytes | CvmError, str]] = {}


def _ray_fetch(model_hash: bytes, limits: Limits) -> Model:
    data, where = _ray_models.pop(model_hash)
    if isinstance(data, CvmError):
        raise data
    return checked_model(data, model_hash, where, limits)


def _ray_chunk(stored: tuple[bytes | CvmError, str], model: bytes, items: list[Item], batch_size: int,
               signer: bytes | None, limits: Limits, compile: bool) -> list[tuple[Any, ...]]:
    key = (batch_size, signer, limits)
    if key not in _ray_replayers:
        _ray_replayers[key] = Replayer(functools.partial(_ray_fetch, limits=limits), batch_size, signer, compile)
    replayer = _ray_replayers[key]
    if not replayer.loaded(model):
        data, where = stored
        _ray_models[model] = (data if isinstance(data, CvmError) else bytes(data), where)
    return [tuple(o) for o in replayer.run(model, items)]  # plain tuples, as _worker_chunk


def ray_missing() -> CvmError:
    return UsageError("missing_extra", "--ray needs Ray: install the extra with `pip install 'cvmvm[ray]'`")


RAY_PROBE_SECONDS = 10.0
RAY_CONNECT_ATTEMPTS = "2"


def _probe_ray(address: str) -> None:
    """A host:port where nothing answers fails here in seconds: Ray itself tries for about 14 minutes
    (20 attempts of some 41 s each, Ray 2.60) before it gives up."""
    host, colon, port = address.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError("ray_cluster", f"--ray {address[:200]!r}: not HOST:PORT (a cluster's GCS address)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_PROBE_SECONDS).close()
    except (OSError, UnicodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise UsageError("ray_cluster", f"--ray {address[:200]}: nothing answers there ({reason})") from None


def _ray_init(ray: Any, address: str) -> None:
    """Ray's own start-up, every failure of it one ``usage.ray_cluster``; an address where something
    answers that is not a Ray cluster is given RAY_CONNECT_ATTEMPTS attempts, not Ray's twenty."""
    joining = address not in ("local", "auto") and not address.startswith("ray://")
    if joining:
        _probe_ray(address)
    override = "RAY_gcs_server_port_wait_time_s"
    before = os.environ.get(override)
    if joining and before is None:
        os.environ[override] = RAY_CONNECT_ATTEMPTS
    try:
        with _native_stderr_held() if joining else contextlib.nullcontext():
            try:
                ray.init(address=address, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
            except BaseException:
                ray.shutdown()
                raise
    except Exception as e:
        text = str(e).strip().splitlines()
        raise UsageError("ray_cluster", f"--ray {address[:200]}: Ray could not start or join a cluster there "
                                        f"({type(e).__name__}: {text[0][:300] if text else ''})") from None
    finally:
        if joining and before is None:
            os.environ.pop(override, None)


RAY_HELD_STDERR_BYTES = 1 << 16


@contextlib.contextmanager
def _native_stderr_held() -> Iterator[None]:
    """While Ray tries an address, its C++ client writes warnings straight to file descriptor 2
    (six lines for an address where something answers that is not a Ray cluster), past Python's
    logging: they are held in a temporary file meanwhile.  Dropped when it fails, since the one-line
    error says what failed; written to stderr when it succeeds (the first RAY_HELD_STDERR_BYTES)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        joined = False
        try:
            yield
            joined = True
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        if joined:
            held.seek(0)
            sys.stderr.write(held.read(RAY_HELD_STDERR_BYTES).decode("utf-8", "replace"))


class Ray:
    """Tasks on a Ray cluster: each model put once in the object store (so it reaches each
    node once), at most two tasks per CPU in flight, completed tasks taken with ray.wait.
    A task lost with its node is retried by Ray on another node."""

    def __init__(self, store: Store, opts: Options) -> None:
        try:
            import ray
        except ImportError:
            raise ray_missing() from None
        self.ray = ray
        self._printer: tuple[Any, Any] | None = None
        self.started = not ray.is_initialized()
        if self.started:
            terminate = signal.getsignal(signal.SIGTERM)
            # Never an unnamed cluster that merely runs on this machine: the one asked for, else a new one.
            _ray_init(ray, opts.ray or os.environ.get("RAY_ADDRESS") or "local")
            # ray.init sets SIGTERM handlers of its own (sys.exit(15), or a teardown and exit 1): a handler
            # the host had set (the command line's, which ends a replay as Ctrl-C does, shutting this
            # Ray down) is put back.
            if callable(terminate) and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, terminate)
            self._errors_to_stderr()
        self.parallel = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.store = store
        self.opts = opts
        self.remote = ray.remote(max_retries=5, retry_exceptions=False)(_ray_chunk)
        self.models: dict[bytes, Any] = {}
        self.futures: list[Any] = []

    @property
    def inflight(self) -> int:
        return len(self.futures)

    def submit(self, model: bytes, items: list[Item]) -> None:
        # Read here, checked in the task: a model that cannot be read is each transaction's error
        # only after its record decoded and its signature held, and the checks come in the order of
        # a worker process's Store.get (the limits before the hash), as FORMAT.md section 8 says.
        if model not in self.models:
            data: bytes | CvmError
            try:
                data = self.store.read_file(model)
            except CvmError as e:
                data = e
            self.models[model] = self.ray.put((data, str(self.store.path(model))))
        ref = self.models[model]
        self.futures.append(self.remote.remote(ref, model, items, self.opts.batch_size, self.opts.signer,
                                               self.opts.limits, self.opts.compile))

    def collect(self, block: bool) -> list[list[Outcome]]:
        if not self.futures:
            return []
        ready, self.futures = self.ray.wait(self.futures, num_returns=1, timeout=None if block else 0)
        if ready and self.futures:
            more, self.futures = self.ray.wait(self.futures, num_returns=len(self.futures), timeout=0)
            ready += more
        return [self._get(ref) for ref in ready]

    def _get(self, ref: Any) -> list[Outcome]:
        try:
            return [Outcome._make(o) for o in self.ray.get(ref)]
        except self.ray.exceptions.RayError as e:
            cause = getattr(e, "cause", None)
            text = f"{type(cause).__name__}: {cause}" if cause is not None else str(e).splitlines()[0]
            if isinstance(cause, ImportError) or "ModuleNotFoundError" in str(e):
                raise UsageError("ray_worker", f"a Ray worker cannot import cvmvm ({text}): install the same "
                                        f"cvmvm on every node of the cluster") from None
            raise InternalError("ray", f"a Ray task failed: {text}") from None

    def _errors_to_stderr(self) -> None:
        """Ray's driver prints the cluster's error messages ("A worker died or was killed ...",
        after which Ray retries the task) on stdout, from a thread of its own, log_to_driver or not:
        in the middle of the replay's report, where `--json` then did not parse.  They go to stderr,
        for the Ray this replay started (until it shuts down), through the one function that thread
        prints with (Ray 2.x); where a Ray has no such function, nothing is changed."""
        module = getattr(getattr(self.ray, "_private", None), "worker", None)
        printer = getattr(module, "print_to_stdstream", None)
        if module is None or printer is None:
            return

        def to_stderr(data: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            return printer(dict(data, is_err=True), *args, **kwargs)
        module.print_to_stdstream = to_stderr
        self._printer = (module, printer)

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()
            if self._printer is not None:
                module, printer = self._printer
                module.print_to_stdstream = printer
                self._printer = None

    def abort(self) -> None:
        # No ray.cancel: cancelling a task as it completes failed a check inside Ray 2.60's driver,
        # which then exited with status 1 (2 Ctrl-C of 10 on a loaded machine).  Shutting down a
        # cluster this replay started ends its tasks; on a cluster it joined, the tasks in flight
        # (two per CPU at most) finish and their results are dropped.
        self.futures = []
        self.close()


def executor(store: Store, opts: Options) -> Local | Pool | Ray:
    if opts.ray is not None:
        return Ray(store, opts)
    if opts.workers > 1:
        return Pool(store, opts)
    return Local(store, opts)


# -- the stream --------------------------------------------------------------------------

def open_txs(path: str | os.PathLike[str]) -> Any:
    """The transaction file, a regular file (never a fifo or device), read through a buffer; a
    file of another kind (a receipt, a model) is ``malformed.kind``, named as what it is."""
    f, _ = files.open_regular(path, "transaction file")
    buffered = io.BufferedReader(f, READ_BUFFER)
    try:
        kinds.expect(buffered.peek(64)[:64], (kinds.TXS,), str(path))
    except BaseException:
        buffered.close()
        raise
    return buffered


def count_hint(path: str | os.PathLike[str]) -> int | None:
    """The count the end frame states, when the file ends in one (for a progress bar only:
    the reader checks the real count).  A path that is no regular file is refused as
    ``open_txs`` refuses it, before it is opened: the open of a fifo waits for a writer."""
    f, size = files.open_regular(path, "transaction file")
    with f:
        if size < transactions.HEADER_SIZE + transactions.END_SIZE:
            return None
        try:
            f.seek(size - transactions.END_SIZE)
            tail = f.read(transactions.END_SIZE)
        except OSError:
            return None
    if tail[:4] != b"\0\0\0\0":
        return None
    count = int.from_bytes(tail[4:], "little")
    return count if count <= size // 5 else None


def check_store(store: Store) -> None:
    if not store.root.is_dir():
        raise IOFailure("not_found" if not store.root.exists() else "not_regular",
                        f"store {store.root} is not a directory")


def replay_records(records: Iterable[Record], store: Store, opts: Options = Options(),
                   previous: Iterator[Outcome] | None = None,
                   total: int | None = None) -> Iterator[list[Outcome]]:
    """Replay every record; yield outcomes in transaction order, in bursts as they complete.

    ``previous`` gives the outcomes of a run being resumed, in order: their records are
    checked to be the same transactions (by id) and not run again.  A fault of the file
    itself (its framing) is raised after every outcome before it was yielded.
    """
    ex = executor(store, opts)
    try:
        yield from _drive(records, ex, opts, previous, total)
    except BaseException:
        ex.abort()
        raise
    ex.close()


def _drive(records: Iterable[Record], ex: Local | Pool | Ray, opts: Options,
           previous: Iterator[Outcome] | None, total: int | None) -> Iterator[list[Outcome]]:
    chunk = opts.batch_size
    if total is not None and ex.parallel > 1:
        chunk = max(1, min(chunk, -(-total // (2 * ex.parallel))))  # keep every worker busy on a short file
    window = 4 * chunk * ex.parallel
    limit = 2 * ex.parallel
    pending: dict[bytes, list[Item]] = {}   # open chunks, oldest first
    pending_bytes: dict[bytes, int] = {}
    waiting: dict[int, Outcome] = {}        # completed, not yet yielded
    next_out = 0

    def send(model: bytes) -> None:
        items = pending.pop(model)
        pending_bytes.pop(model)
        ex.submit(model, items)

    def take(block: bool) -> list[Outcome]:
        nonlocal next_out
        for outcomes in ex.collect(block):
            for o in outcomes:
                waiting[o.index] = o
        burst = []
        while next_out in waiting:
            burst.append(waiting.pop(next_out))
            next_out += 1
        return burst

    faults: list[CvmError] = []

    def framed() -> Iterator[Record]:
        # A fault of the framing ends the records; it is raised once every outcome before it is out.
        try:
            yield from records
        except CvmError as e:
            faults.append(e)

    resumed: list[Outcome] = []   # outcomes the results file holds, handed on in bursts as they are read

    for r in framed():
        if previous is not None:
            o = next(previous, None)
            if o is not None:
                if (o.index, o.offset, o.tx) != (r.index, r.offset, hashlib.sha256(r.body).digest()):
                    raise MalformedError("results", f"the results file's transaction {o.index} (at byte {o.offset}) "
                                                    f"is not transaction {r.index} of this transaction file")
                resumed.append(o)
                next_out = r.index + 1
                if len(resumed) >= RESUMED_BURST:
                    yield resumed
                    resumed = []
                continue
            previous = None
            if resumed:
                yield resumed
                resumed = []
        model = transactions.record_model(r.body)
        sent = False
        if model is None:
            waiting[r.index] = _undecodable(r)
            sent = True
        else:
            items = pending.setdefault(model, [])
            items.append((r.index, r.offset, r.body))
            pending_bytes[model] = pending_bytes.get(model, 0) + len(r.body)
            if len(items) >= chunk or pending_bytes[model] >= CHUNK_BYTES:
                send(model)
                sent = True
        while pending and next(iter(pending.values()))[0][0] < r.index - window:
            send(next(iter(pending)))
            sent = True
        if sent:  # completions are looked for when a chunk leaves: often enough, and cheap per record
            while ex.inflight >= limit:
                burst = take(True)
                if burst:
                    yield burst
            burst = take(False)
            if burst:
                yield burst
    if previous is not None and next(previous, None) is not None:
        raise MalformedError("results", "the results file lists more transactions than the transaction file holds")
    if resumed:
        yield resumed
    for model in list(pending):
        send(model)
    while ex.inflight or waiting:
        burst = take(True)
        if burst:
            yield burst
        elif not ex.inflight:
            raise InternalError("replay", f"transaction {next_out} was never replayed")
    if faults:
        raise faults[0]


def _undecodable(r: Record) -> Outcome:
    try:
        transactions.decode_tx(r.body)
    except CvmError as e:
        return failed(r.index, r.offset, hashlib.sha256(r.body).digest(), e)
    raise InternalError("replay", f"transaction {r.index} decodes without its canonical prefix")


def replay_file(path: str | os.PathLike[str], store: Store, opts: Options = Options(),
                previous: Iterator[Outcome] | None = None) -> Iterator[list[Outcome]]:
    """``replay_records`` over a transaction file, read record by record."""
    check_store(store)
    with open_txs(path) as f:
        yield from replay_records(transactions.iter_records(f, str(path)), store, opts, previous, count_hint(path))


def replay(txs: Sequence[transactions.Transaction], store: Store, *, workers: int = 1, use_ray: bool = False,
           batch_size: int = DEFAULT_BATCH, signer: bytes | None = None,
           progress: Callable[[int, int], None] | None = None, limits: Limits = Limits(),
           compile: bool = False) -> list[Outcome]:
    """Replay transactions held in memory; one Outcome each, in order (tools and tests)."""
    data = transactions.encode_txs(txs)
    opts = Options(workers, "" if use_ray else None, batch_size, signer, limits, compile)
    out: list[Outcome] = []
    for burst in replay_records(transactions.iter_records(io.BytesIO(data), "transactions"), store, opts,
                                total=len(txs)):
        out += burst
        if progress is not None:
            progress(len(out), len(txs))
    return out

