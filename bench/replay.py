"""Replay throughput: transactions per second, batched, every hash computed.

    python bench/replay.py [--count 10000] [--workers 1 2] [--ray]

Generates the digits transactions of scripts/make_txs.py into a temporary
directory, then times ``cvmvm.tx.replay.replay`` over them: signed receipts (an
Ed25519 verification each) and the same transactions with unsigned receipts,
in this process and with worker processes (pool start-up included).  Prints
numbers; asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _make_txs():
    spec = importlib.util.spec_from_file_location("make_txs", REPO / "scripts" / "make_txs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description="replay throughput")
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--ray", action="store_true", help="also time Ray (a local instance)")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO))
    from serializer.records import transactions
    from cvmvm.tx import replay
    from cvmvm.tx.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        start = time.perf_counter()
        expected = _make_txs().generate(out, args.count)
        print(f"generated {args.count} transactions ({len(expected['bad'])} bad) in {time.perf_counter() - start:.2f} s")
        data = (out / "txs.cvmtx").read_bytes()
        start = time.perf_counter()
        signed = transactions.decode_txs(data)
        took = time.perf_counter() - start
        print(f"decode {len(data) / 1e6:.1f} MB: {took:.3f} s, {len(signed) / took:,.0f} tx/s")
        unsigned = [dataclasses.replace(tx, receipt=dataclasses.replace(tx.receipt, signer=None)) for tx in signed]
        store = Store(out / "store")

        def timed(label: str, txs: list, **kw) -> None:
            start = time.perf_counter()
            outcomes = replay.replay(txs, store, batch_size=args.batch, **kw)
            took = time.perf_counter() - start
            s = replay.summary(outcomes)
            print(f"{label:<28} {took:7.3f} s  {len(txs) / took:9,.0f} tx/s   "
                  f"(ok {s['ok']}, mismatch {s['mismatch']}, error {s['error']})")

        for workers in args.workers:
            timed(f"signed,   workers={workers}", signed, workers=workers)
            timed(f"unsigned, workers={workers}", unsigned, workers=workers)
        if args.ray:
            import ray
            ray.init(num_cpus=max(args.workers), include_dashboard=False)
            timed("signed,   ray (warm-up)", signed, use_ray=True)
            timed("signed,   ray", signed, use_ray=True)
            timed("unsigned, ray", unsigned, use_ray=True)
            ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
