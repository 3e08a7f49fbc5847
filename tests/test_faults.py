"""Fault tests: kill -9 at random moments of `store add` and of `run --trace --receipt
--save-outputs`, 100 rounds each, and concurrent replays on one store.

Each round forks this (warm) process and runs the command's own main() in the child, then sends
it SIGKILL at a moment drawn uniformly over a full run's duration (measured first, in the same
way, and kept current by the runs that finish), so the kills fall in loading, running, writing and committing alike.  After every kill:
nothing partial or corrupt under a final name, and the run's outputs all old or all new once the
next command that writes there has finished what the killed one left (cvmvm.files).
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from cvmvm import files
from cvmvm.cli.main import main
from tests.test_receipt import KEY, column_sum_model, mlp_model, pair_model, reshape_model

ROUNDS = 100
REPO = Path(__file__).resolve().parent.parent


def _child(argv: list[str], dying_at: float | None = None) -> tuple[int, float]:
    """Run main(argv) in a forked child; SIGKILL it ``dying_at`` seconds in (None: let it finish).
    Returns its exit status (-9 when killed) and how long it ran."""
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            code = main(argv)
        finally:
            os._exit(code)
    if dying_at is not None:
        # Waiting in small steps, not one sleep: a run that ends first reports its own duration.
        deadline = start + dying_at
        while (now := time.perf_counter()) < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status), now - start
            time.sleep(min(deadline - now, 0.001))
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), time.perf_counter() - start


def _duration(argv: list[str], before=lambda: None) -> float:
    times = []
    for _ in range(3):
        before()
        code, took = _child(argv)
        assert code == 0, argv
        times.append(took)
    return sorted(times)[1]


class _Moments:
    """Kill moments drawn uniformly over a command's run time.  A busy machine stretches and
    shrinks runs while the test goes on, so each run that finished before its kill updates the
    estimate: a duration measured in a slow moment cannot leave too few runs killed."""

    def __init__(self, full: float, seed: int) -> None:
        self.durations = [full]
        self.rng = random.Random(seed)

    def run(self, argv: list[str]) -> int:
        """``argv`` in a child killed at a drawn moment; its exit status (-9 when killed)."""
        code, took = _child(argv, self.rng.uniform(0, 1.2 * statistics.median(self.durations[-5:])))
        if code == 0:
            self.durations.append(took)
        return code


def _own_temps(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if files.is_own_temp(p.name))


CORRUPT = b"a corrupt copy that store add must replace"


def test_kill_9_during_store_add(tmp_path):
    models = [m() for m in (mlp_model, pair_model, column_sum_model, reshape_model)]
    sources = []
    for k, model in enumerate(models):
        (tmp_path / f"m{k}.cvm").write_bytes(model.canonical_bytes)
        sources.append(model)
    store = tmp_path / "store"
    first = store / (models[0].model_hash.hex() + ".cvm")
    whole = {m.model_hash.hex() + ".cvm": m.canonical_bytes for m in models}   # each name's whole file
    moments = _Moments(_duration(["store", "add", str(store), str(tmp_path / "m0.cvm")],
                                 lambda: first.unlink(missing_ok=True)), 12)
    killed = 0
    for r in range(3 * ROUNDS):   # until ROUNDS kills of a command still running (a busy machine stretches runs)
        if killed == ROUNDS:
            break
        k = r % len(models)
        target = store / (models[k].model_hash.hex() + ".cvm")
        if r % 2:
            target.write_bytes(CORRUPT)
        else:
            target.unlink(missing_ok=True)
        code = moments.run(["store", "add", str(store), str(tmp_path / f"m{k}.cvm")])
        killed += code == -signal.SIGKILL
        for p in store.iterdir():
            if files.is_own_temp(p.name):
                continue
            data = p.read_bytes()
            # under a final name: the old file as it was, or the whole new one
            assert data == CORRUPT or data == whole[p.name], (r, p.name)
    assert killed == ROUNDS
    # The next add finishes nothing half done and removes every stale temporary file of ours.
    for k in range(len(models)):
        assert main(["store", "add", str(store), str(tmp_path / f"m{k}.cvm")]) == 0
    assert _own_temps(store) == []
    assert main(["store", "list", str(store)]) == 0


def _outputs(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and not files.is_own_temp(p.name)}


def test_kill_9_during_run_with_every_output(tmp_path):
    """Outputs over two directories; two inputs whose runs differ in every output file."""
    (tmp_path / "m.cvm").write_bytes(mlp_model().canonical_bytes)
    (tmp_path / "key").write_bytes(bytes(range(32)))
    out = tmp_path / "out"
    (out / "t").mkdir(parents=True)
    (out / "r").mkdir()
    for name, x in (("a", [[5, -100, 120, 7]]), ("b", [[6, 99, -3, 7]])):
        np.save(tmp_path / f"{name}.npy", np.array(x, dtype=np.int32))

    def argv(which: str) -> list[str]:
        return ["run", str(tmp_path / "m.cvm"), "--input", f"x={tmp_path / which}.npy",
                "--trace", str(out / "t" / "trace.json"), "--receipt", str(out / "r" / "receipt.bin"),
                "--sign", str(tmp_path / "key"), "--save-outputs", str(out / "o")]

    states = {}
    for which in ("a", "b"):
        assert main(argv(which)) == 0
        states[which] = _outputs(out)
    assert states["a"].keys() == states["b"].keys() and len(states["a"]) == 3
    assert all(states["a"][k] != states["b"][k] for k in states["a"])
    moments = _Moments(_duration(argv("b")), 7)
    now = "b"
    outcomes = {"killed": 0, "all old": 0, "all new": 0, "finished by the next command": 0}
    for r in range(3 * ROUNDS):   # until ROUNDS kills of a command still running
        if outcomes["killed"] == ROUNDS:
            break
        new = "a" if now == "b" else "b"
        code = moments.run(argv(new))
        outcomes["killed"] += code == -signal.SIGKILL
        seen = _outputs(out)
        for name, data in seen.items():   # every final name: a whole old or a whole new file
            assert data in (states[now].get(name), states[new].get(name)), (r, name)
        mixed = seen not in (states[now], states[new])
        for d in (out / "t", out / "r", out / "o"):
            files.recover(d)
        after = _outputs(out)
        assert after in (states[now], states[new]), (r, sorted(after))
        if mixed:
            outcomes["finished by the next command"] += 1
        now = new if after == states[new] else now
        outcomes["all new" if now == new else "all old"] += 1
        for d in (out / "t", out / "r", out / "o"):
            assert _own_temps(d) == [], r
    assert outcomes["killed"] == ROUNDS and outcomes["all old"] and outcomes["all new"], outcomes


def test_four_concurrent_replays_on_one_store(tmp_path):
    import dataclasses
    from cvmvm.tx import receipt
    from cvmvm.tx.store import Store
    from cvmvm.tx.txtools import transaction_for
    from serializer.records import transactions
    store = Store(tmp_path / "store")
    txs = []
    rng = np.random.default_rng(3)
    for model in (mlp_model(), pair_model()):
        store.add(model)
        for k in range(40):
            inputs = {n: rng.integers(-60, 60, t.shape).astype(np.int32) for n, t in model.inputs.items()}
            tx, actual, _ = transaction_for(model, inputs)
            r = receipt.sign(actual, KEY)
            if k % 9 == 4:
                r = dataclasses.replace(r, ops=r.ops + 1)   # its signature no longer holds
            txs.append(dataclasses.replace(tx, receipt=r))
    (tmp_path / "txs").write_bytes(transactions.encode_txs(txs))
    argv = [sys.executable, "-m", "cvmvm", "replay", str(tmp_path / "txs"), "--store", str(store.root), "--json"]
    alone = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert alone.returncode == 1
    expected = json.loads(alone.stdout)
    assert expected["summary"]["ok"] == 72 and expected["summary"]["total"] == 80
    # Four at once, while the store's models are added again (an intact copy is kept as it is).
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
             for _ in range(4)]
    for model in (mlp_model(), pair_model()):
        store.add(model)
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 1 and json.loads(out) == expected, err
    assert _own_temps(store.root) == []
