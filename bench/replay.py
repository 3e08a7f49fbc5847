"""Replay throughput against its ceilings, measured in one run.

    python bench/replay.py [--count 20000] [--workers 1 2] [--ray] [--ray-data] [--batch 512] [--repeat 3] [--compile]

Generates digits transactions (``cvmvm tx demo``: signed and unsigned) into a
temporary directory, then measures, best of --repeat:

- the batched traced VM rate: ``Batch(model, batch).run_rows`` over the same
  inputs, every hash computed, on one BLAS thread as replay runs it (the
  ceiling replay is held against);
- Ed25519 on one core: OpenSSL's verification alone (key loaded, message made),
  a verification as replay makes it (FORMAT.md section 7's rule, through
  libsodium when PyNaCl is installed), and making a receipt's signing message;
- a record's decode as replay decodes it (``transactions.Decoder.cut`` of
  --batch records at a time: records alike cut as one array into a column per
  bin) and in full (``decode_tx``), and its id (SHA-256);
- replay of the unsigned and the signed file, in this process and with worker
  processes (pool start-up included), and on a local Ray (start-up excluded),
  read from the file record by record as ``cvmvm replay`` does;
- with --ray-data, the same replay through Ray Data on the same local Ray:
  the records as rows of Arrow blocks of --batch rows, ``map_batches`` over a
  pool of one actor per CPU, each keeping a ``Replayer`` and the models it
  loaded (the per-actor model cache issue 16 suggests), outcomes put back in
  transaction order: the alternative to ``cvmvm replay --ray``'s tasks
  (pool start-up included, as a replay pays it; the file is read whole first,
  which a real replay could not afford).  Needs ``pip install 'ray[data]'``.

With --compile, this process and every replay's workers compile the SHA-256
hasher first (``cvmvm replay --compile``): each replay then pays some 4 s of
compiling per worker in its start-up, and the rate after its first outcomes is
the one a long replay approaches.  Without it everything hashes through
hashlib (a worker compiles after cvmvm.vm.batching.HASH_WARM_ITEMS
transactions, more than a worker of this bench replays; this process is held
to hashlib too).  Transactions are generated in another process, which leaves
this one's state alone.

Prints transactions per second (also after each replay's first outcomes, and over the second
half of its outcomes: the rate a long replay runs at, once no worker is still compiling), the
ratios the targets name, and the CPU time
per transaction: this process's (the driver's, with workers), and the worker
processes' (on Linux, from the forkserver's reaped children's times; not for
Ray).  A machine loaded by other jobs changes CPU times much less than rates.
Then where a signed transaction's CPU goes with the most workers, and the rate
two cores would give at those costs.  Asserts nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent


def _generate(directory: Path, count: int, signed: bool) -> None:
    sys.path.insert(0, str(REPO))
    from cvmvm.cli.demo import demo_model_and_images
    from cvmvm.tx import txtools
    model, images = demo_model_and_images()
    txtools.generate(model, images, directory, count, signed=signed)


def _records(path: Path, transactions, limit: int) -> list:
    with open(path, "rb") as f:
        out = []
        for r in transactions.iter_records(f, str(path)):
            if len(out) == limit:
                break
            out.append(r)
    return out


def _workers_cpu() -> float | None:
    """CPU seconds of the worker processes reaped so far: they are the forkserver's children."""
    try:
        from multiprocessing import forkserver
        pid = forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]
        if not pid:
            return 0.0
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # cutime + cstime
    except (OSError, AttributeError, ValueError, IndexError):
        return None


class _ReplayActor:
    """--ray-data's map_batches callable: one per actor, keeping its Replayer (and models)."""

    def __init__(self, repo: str, store_root: str, batch_size: int, signer: bytes | None) -> None:
        import functools
        sys.path.insert(0, repo)
        from serializer.records import transactions
        from cvmvm.tx.replay import Replayer
        from cvmvm.tx.store import Store
        from cvmvm.vm.verify import Limits
        self.record_model = transactions.record_model
        self.replayer = Replayer(functools.partial(Store(store_root).get, limits=Limits()), batch_size, signer)

    def __call__(self, batch: dict) -> dict:
        by_model: dict = {}
        for i, o, b in zip(batch["index"].tolist(), batch["offset"].tolist(), batch["body"]):
            by_model.setdefault(self.record_model(bytes(b)), []).append((i, o, bytes(b)))
        out = [o for model, items in by_model.items() for o in self.replayer.run(model, items)]
        out.sort(key=lambda o: o.index)
        return {"index": np.array([o.index for o in out], dtype=np.int64),
                "status": np.array([o.status for o in out], dtype=object),
                "trace_root": np.array([o.trace_root or b"" for o in out], dtype=object)}


def main() -> int:
    parser = argparse.ArgumentParser(description="replay throughput")
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--compile", action="store_true",
                        help="compile the hasher first, here and in every worker (replay --compile; the speed extra)")
    parser.add_argument("--ray", action="store_true", help="also time Ray (a local instance, --workers' max CPUs)")
    parser.add_argument("--ray-data", action="store_true",
                        help="also time Ray, and Ray Data's map_batches over an actor pool (needs ray[data])")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO))
    from serializer.records import transactions
    from cvmvm.cli.demo import demo_model_and_images
    from cvmvm.tx import ed25519, receipt, schedule
    from cvmvm.tx.store import Store
    from serializer import sha
    from cvmvm.vm import batching
    from cvmvm.vm.batching import Batch
    from cvmvm.vm.blas import one_thread

    cpu: dict[str, float] = {}          # this process's CPU seconds of the best run, by label
    child_cpu: dict[str, float] = {}    # the worker processes' CPU seconds of the best run

    def best(f, label: str = "") -> float:
        times = []
        for _ in range(args.repeat):
            before = _workers_cpu()
            start, start_cpu = time.perf_counter(), time.process_time()
            f()
            times.append(time.perf_counter() - start)
            after = _workers_cpu()
            if times[-1] == min(times):
                cpu[label] = time.process_time() - start_cpu
                if before is not None and after is not None:
                    child_cpu[label] = after - before
        return min(times)

    def us(seconds: float, n: int) -> float:
        return 1e6 * seconds / n

    model, images = demo_model_and_images()
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {}
        for kind in ("unsigned", "signed"):
            start = time.perf_counter()
            dirs[kind] = Path(tmp) / kind
            # In another process: generating runs the VM, and would leave this process's state (its
            # compiled hasher, after batching.HASH_WARM_ITEMS items) other than what is measured.
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as gen:
                gen.submit(_generate, dirs[kind], args.count, kind == "signed").result()
            print(f"generated {args.count} {kind} transactions in {time.perf_counter() - start:.2f} s")
        with open(dirs["unsigned"] / "txs.cvmtx", "rb") as f:
            feeds = [tx.inputs[0][1] for tx in map(transactions.transaction,
                                                   (r.body for r in transactions.iter_records(f, "txs")))
                     if tx.inputs[0][1].shape == model.inputs["data"].shape and tx.inputs[0][1].dtype == np.int32]
        column = np.concatenate(feeds)
        batch = Batch(model, args.batch)
        if not args.compile:
            # hashlib throughout in this process too, as in a replay's workers below HASH_WARM_ITEMS
            # transactions each (the ceiling's runs alone would pass it, and compile the hasher).
            batching.HASH_WARM_ITEMS = sys.maxsize
        else:
            start = time.perf_counter()
            print(f"hasher {'compiled' if sha.hasher() else 'NOT compiled (no numba)'} in "
                  f"{time.perf_counter() - start:.2f} s")

        def vm_run() -> None:
            with one_thread():
                batch.run_rows([column], len(feeds))

        vm = len(feeds) / best(vm_run, "vm")
        vm_us = us(cpu["vm"], len(feeds))
        print(f"{'batched traced VM':<30} {vm:10,.0f} runs/s   (the ceiling; {vm_us:.1f} us of CPU a run, "
              f"one BLAS thread)")

        records = _records(dirs["signed"] / "txs.cvmtx", transactions, 2000)
        bodies = [r.body for r in records]
        claims = [transactions.decode_tx(b)[2] for b in bodies]
        good = [c for c in claims if receipt.signature_valid(c)]
        messages = [c.signing_message() for c in good]

        def verify_openssl() -> None:   # OpenSSL's verification alone, as cvmvm calls it (keys loaded once)
            for c, m in zip(good, messages):
                ed25519.openssl(c.signer.public_key, c.signer.signature, m)

        def verify() -> None:   # as replay checks a signature: FORMAT.md section 7's rule, the library it chose
            for c, m in zip(good, messages):
                ed25519.valid(c.signer.public_key, c.signer.signature, m)

        openssl = len(good) / best(verify_openssl, "openssl")
        openssl_us = us(cpu["openssl"], len(good))
        sig = len(good) / best(verify, "ed25519")
        sig_us = us(cpu["ed25519"], len(good))
        best(lambda: [c.signing_message() for c in claims], "message")
        message_us = us(cpu["message"], len(claims))
        best(lambda: [transactions.decode_tx(b) for b in bodies], "decode in full")
        full_us = us(cpu["decode in full"], len(bodies))

        def decode() -> None:   # as replay decodes a model's records: chunks, alike records cut as one array
            decoder = transactions.Decoder()
            for start in range(0, len(bodies), args.batch):
                decoder.cut(bodies[start:start + args.batch])

        best(decode, "decode")
        decode_us = us(cpu["decode"], len(bodies))
        best(lambda: [hashlib.sha256(b).digest() for b in bodies], "id")
        id_us = us(cpu["id"], len(bodies))
        print(f"{'Ed25519, bare OpenSSL':<30} {openssl:10,.0f} /s on one core ({openssl_us:.1f} us)")
        print(f"{'Ed25519 as replay checks it':<30} {sig:10,.0f} /s on one core ({sig_us:.1f} us; "
              f"{ed25519.backend()[0]} by FORMAT.md section 7's rule; a receipt's signing message {message_us:.1f} us)")
        print(f"{'record decode, id':<30} {decode_us:10.1f} us, {id_us:.1f} us   (decode as replay does, "
              f"chunks cut by transactions.Decoder; {full_us:.1f} us each in full)")

        rates: dict[str, float] = {}
        steady: dict[str, float] = {}   # the rate after a replay's first outcomes: start-up (a pool, compiling) left out
        second: dict[str, float] = {}   # the rate over its second half: the ramp (workers still compiling) left out too

        def timed(label: str, kind: str, **kw) -> None:
            store = Store(dirs[kind] / "store")
            signer = (dirs[kind] / "signer.pub").read_bytes() if kind == "signed" else None
            opts = schedule.Options(batch_size=args.batch, signer=signer, compile=args.compile, **kw)

            # Each run's seconds, seconds to its first outcomes and how many, and seconds to half
            # its outcomes and how many.
            runs: list[tuple[float, float, int, float, int]] = []

            def run() -> None:
                start = time.perf_counter()
                first, count, half, done, halfway = 0.0, 0, 0.0, 0, 0
                for burst in schedule.replay_file(dirs[kind] / "txs.cvmtx", store, opts):
                    if not done:
                        first, count = time.perf_counter() - start, len(burst)
                    done += len(burst)
                    if not half and 2 * done >= args.count:
                        half, halfway = time.perf_counter() - start, done
                runs.append((time.perf_counter() - start, first, count, half, halfway))

            rates[label] = args.count / best(run, label)
            whole, first, count, half, halfway = min(runs)
            steady[label] = (args.count - count) / (whole - first)
            second[label] = (args.count - halfway) / (whole - half) if whole > half else float("nan")
            own = us(cpu[label], args.count)
            if kw.get("workers", 1) == 1 and kw.get("ray") is None:
                where = f"{own:.1f} us of CPU per tx"
            elif kw.get("ray") is None and label in child_cpu:
                where = (f"{own + us(child_cpu[label], args.count):.1f} us of CPU per tx: workers "
                         f"{us(child_cpu[label], args.count):.1f}, driver {own:.1f}")
            else:
                where = f"driver {own:.1f} us of CPU per tx"
            print(f"{label:<30} {rates[label]:10,.0f} tx/s   ({rates[label] / vm:.2f} x the VM rate; {where}; "
                  f"{steady[label]:,.0f} tx/s after its first outcomes at {first:.2f} s, "
                  f"{second[label]:,.0f} over its second half)")

        def ray_data(kind: str, cpus: int) -> None:
            try:
                import pyarrow as pa
                import ray.data
            except ImportError as e:
                print(f"{kind + ', ray data':<30} not timed: {e} (pip install 'ray[data]')")
                return
            context = ray.data.DataContext.get_current()
            context.enable_progress_bars = False
            signer = (dirs[kind] / "signer.pub").read_bytes() if kind == "signed" else None
            expected = [(o.index, o.status, o.trace_root or b"")
                        for burst in schedule.replay_file(dirs[kind] / "txs.cvmtx", Store(dirs[kind] / "store"),
                                                          schedule.Options(batch_size=args.batch, signer=signer))
                        for o in burst]
            got: list = []
            runs: list[tuple[float, float, int]] = []   # each run's seconds, seconds to its first outcomes, how many

            def run() -> None:
                start = time.perf_counter()
                records = _records(dirs[kind] / "txs.cvmtx", transactions, args.count)
                table = pa.table({"index": pa.array([r.index for r in records], pa.int64()),
                                  "offset": pa.array([r.offset for r in records], pa.int64()),
                                  "body": pa.array([r.body for r in records], pa.binary())})
                blocks = [table.slice(k, args.batch) for k in range(0, table.num_rows, args.batch)]
                ds = ray.data.from_arrow(blocks).map_batches(
                    _ReplayActor, fn_constructor_args=(str(REPO), str(dirs[kind] / "store"), args.batch, signer),
                    batch_size=args.batch, compute=ray.data.ActorPoolStrategy(size=cpus), batch_format="numpy")
                got.clear()
                first, count = 0.0, 0
                for b in ds.iter_batches(batch_size=None, batch_format="numpy"):
                    if not got:
                        first, count = time.perf_counter() - start, len(b["index"])
                    got.extend(zip(b["index"].tolist(), b["status"].tolist(), b["trace_root"].tolist()))
                runs.append((time.perf_counter() - start, first, count))

            label = f"{kind + ',':<9} ray data"
            rates[label] = args.count / best(run, label)
            same = sorted(got) == expected
            whole, first, count = min(runs)
            after = (args.count - count) / (whole - first)
            print(f"{label:<30} {rates[label]:10,.0f} tx/s   ({rates[label] / vm:.2f} x the VM rate; its first "
                  f"outcomes after {first:.2f} s (the file read, the actors started), then "
                  f"{after:,.0f} tx/s; outcomes {'identical to' if same else 'DIFFERENT from'} the in-process "
                  f"replay's)")

        for workers in args.workers:
            timed(f"unsigned, workers={workers}", "unsigned", workers=workers)
            timed(f"signed,   workers={workers}", "signed", workers=workers)
        if args.ray or args.ray_data:
            import ray
            ray.init(address="local", num_cpus=max(args.workers), include_dashboard=False, logging_level="ERROR")
            try:
                timed("unsigned, ray", "unsigned", ray="")
                timed("signed,   ray", "signed", ray="")
                if args.ray_data:
                    for kind in ("unsigned", "signed"):
                        ray_data(kind, max(args.workers))
            finally:
                ray.shutdown()

    print()
    unsigned = rates.get("unsigned, workers=1")
    if unsigned:
        print(f"unsigned in-process / batched traced VM: {unsigned / vm:.2f}  (target >= 0.46: 60,000 of 131,000)")
    unsigned2 = rates.get("unsigned, workers=2")
    if unsigned2:
        print(f"unsigned with 2 workers: {unsigned2:,.0f} tx/s, {steady['unsigned, workers=2']:,.0f} after its first "
              f"outcomes, {second['unsigned, workers=2']:,.0f} over its second half  (target >= 60,000)")
    signed2 = rates.get("signed,   workers=2")
    if signed2:
        print(f"signed with 2 workers: {signed2:,.0f} tx/s, {steady['signed,   workers=2']:,.0f} after its first "
              f"outcomes, {second['signed,   workers=2']:,.0f} over its second half  (target >= 15,000)")
        print(f"signed with 2 workers after its first outcomes / (2 x bare OpenSSL Ed25519 verifications per "
              f"second on one core): {steady['signed,   workers=2'] / (2 * openssl):.2f}  "
              f"(target >= 0.83: 15,000 of 2 x 9,100)")
    for kind in ("unsigned", "signed"):
        pool = rates.get(f"{kind + ',':<9} workers={max(args.workers)}")
        ray_rate = rates.get(f"{kind + ',':<9} ray")
        if pool and ray_rate:
            print(f"{kind} process pool / Ray: {pool / ray_rate:.2f}  (target <= 1.5)")
        data_rate = rates.get(f"{kind + ',':<9} ray data")
        if ray_rate and data_rate:
            print(f"{kind} Ray tasks / Ray Data: {ray_rate / data_rate:.2f}")
    label = f"signed,   workers={max(args.workers)}"
    if max(args.workers) > 1 and label in child_cpu:
        workers_us, driver_us = us(child_cpu[label], args.count), us(cpu[label], args.count)
        total = workers_us + driver_us
        rest = workers_us - sig_us - message_us - vm_us - decode_us - id_us
        print(f"\na signed transaction with {max(args.workers)} workers, {total:.1f} us of CPU: Ed25519 {sig_us:.1f}, "
              f"its message {message_us:.1f}, VM {vm_us:.1f}, decode {decode_us:.1f}, id {id_us:.1f}, the rest of "
              f"the workers' {rest:.1f} (input checks, comparison, outcomes, transport, start-up), driver "
              f"{driver_us:.1f}")
        cores = os.cpu_count() or 1
        print(f"on {cores} cores: {cores * 1e6 / total:,.0f} tx/s at that CPU per transaction, "
              f"{cores * 1e6 / (sig_us + vm_us):,.0f} tx/s for Ed25519 and the VM alone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
