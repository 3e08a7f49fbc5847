"""Replay throughput against the batched traced VM rate, measured in one run.

    python bench/replay.py [--count 20000] [--workers 1 2] [--ray] [--batch 512] [--repeat 3]

Generates digits transactions (``cvmvm tx demo``: signed and unsigned) into a
temporary directory, then measures, best of --repeat:

- the batched traced VM rate: ``Batch(model, batch).run(feeds)`` over the same
  inputs, every hash computed (the ceiling replay is held against);
- replay of the unsigned and the signed file, in this process and with worker
  processes (pool start-up included), and on a local Ray (start-up excluded),
  read from the file record by record as ``cvmvm replay`` does.

Prints transactions per second, the ratios the targets name, and for in-process runs the CPU time
per transaction (which a machine loaded by other jobs changes much less than the rates); asserts
nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent


def _records(path: Path, transactions, limit: int) -> list:
    with open(path, "rb") as f:
        out = []
        for r in transactions.iter_records(f, str(path)):
            if len(out) == limit:
                break
            out.append(r)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description="replay throughput")
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ray", action="store_true", help="also time Ray (a local instance, --workers' max CPUs)")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO))
    from serializer.records import transactions
    from cvmvm.cli.demo import demo_model_and_images
    from cvmvm.tx import receipt, schedule, txtools
    from cvmvm.tx.store import Store
    from cvmvm.vm.batching import Batch

    cpu: dict[str, float] = {}  # this process's CPU seconds of the best run, by label

    def best(f, label: str = "") -> float:
        times = []
        for _ in range(args.repeat):
            start, start_cpu = time.perf_counter(), time.process_time()
            f()
            times.append(time.perf_counter() - start)
            if times[-1] == min(times):
                cpu[label] = time.process_time() - start_cpu
        return min(times)

    model, images = demo_model_and_images()
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {}
        for kind in ("unsigned", "signed"):
            start = time.perf_counter()
            dirs[kind] = Path(tmp) / kind
            txtools.generate(model, images, dirs[kind], args.count, signed=kind == "signed")
            print(f"generated {args.count} {kind} transactions in {time.perf_counter() - start:.2f} s")
        with open(dirs["unsigned"] / "txs.cvmtx", "rb") as f:
            feeds = [[tx.inputs[0][1]] for tx in map(transactions.transaction,
                                                    (r.body for r in transactions.iter_records(f, "txs")))
                     if tx.inputs[0][1].shape == model.inputs["data"].shape and tx.inputs[0][1].dtype == np.int32]
        batch = Batch(model, args.batch)
        vm = len(feeds) / best(lambda: batch.run(feeds), "vm")
        print(f"{'batched traced VM':<30} {vm:10,.0f} runs/s   (the ceiling; {1e6 * cpu['vm'] / len(feeds):.1f} us "
              f"of CPU per run)")
        claims = [transactions.decode_tx(r.body)[2] for r in _records(dirs["signed"] / "txs.cvmtx", transactions, 2000)]
        sig = len(claims) / best(lambda: [receipt.signature_valid(c) for c in claims])
        print(f"{'Ed25519 verification':<30} {sig:10,.0f} /s on one core (signed replay's ceiling per worker)")

        rates: dict[str, float] = {}
        sig_rate = [sig]

        def timed(label: str, kind: str, **kw) -> None:
            store = Store(dirs[kind] / "store")
            signer = (dirs[kind] / "signer.pub").read_bytes() if kind == "signed" else None
            opts = schedule.Options(batch_size=args.batch, signer=signer, **kw)

            def run() -> None:
                for _ in schedule.replay_file(dirs[kind] / "txs.cvmtx", store, opts):
                    pass

            rates[label] = args.count / best(run, label)
            own = (f"; {1e6 * cpu[label] / args.count:.1f} us of this process's CPU per tx"
                   if kw.get("workers", 1) == 1 and kw.get("ray") is None else "")
            print(f"{label:<30} {rates[label]:10,.0f} tx/s   ({rates[label] / vm:.2f} x the VM rate{own})")

        for workers in args.workers:
            timed(f"unsigned, workers={workers}", "unsigned", workers=workers)
            timed(f"signed,   workers={workers}", "signed", workers=workers)
        if args.ray:
            import ray
            ray.init(address="local", num_cpus=max(args.workers), include_dashboard=False, logging_level="ERROR")
            try:
                timed("unsigned, ray", "unsigned", ray="")
                timed("signed,   ray", "signed", ray="")
            finally:
                ray.shutdown()

    print()
    sig = sig_rate[0]
    unsigned = rates.get("unsigned, workers=1")
    if unsigned:
        print(f"unsigned in-process / batched traced VM: {unsigned / vm:.2f}  (target >= 0.46: 60,000 of 131,000)")
    signed2 = rates.get("signed,   workers=2")
    if signed2:
        print(f"signed with 2 workers / (2 x Ed25519 verifications per second on one core): {signed2 / (2 * sig):.2f}  "
              f"(target >= 0.83: 15,000 of 2 x 9,100)")
    for kind in ("unsigned", "signed"):
        pool = rates.get(f"{kind + ',':<9} workers={max(args.workers)}")
        ray_rate = rates.get(f"{kind + ',':<9} ray")
        if pool and ray_rate:
            print(f"{kind} process pool / Ray: {pool / ray_rate:.2f}  (target <= 1.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
