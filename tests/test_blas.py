"""BLAS threads (cvmvm.vm.blas): OpenBLAS's spin made short when cvmvm is imported first, else a
core left to a traced run's hashing process while it works; one in replay's batched runs, restored
after, and never a different result."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cvmvm.vm import api, batching, blas, hashworker
from cvmvm.tx import receipt, schedule
from cvmvm.tx.store import Store
from serializer.records import transactions
from tests.records import blas_libraries
from tests.test_receipt import build, instr, mlp_model, param
from serializer.model import Input
from isa.types import TensorType

REPO = Path(__file__).resolve().parent.parent


def big_model():
    """A dense layer over 64 KiB tensors: traced, its output is hashed by the hashing process."""
    w = np.arange(128 * 256, dtype=np.int32).reshape(128, 256) % 7 - 3
    return build([Input("x", TensorType((128, 256), 8))], [param("w", w)],
                 [instr("dense", (0, 1), 2, units=128, use_bias=False)], [2])


def blas_threads() -> int:
    return blas.controller().select(user_api="blas").info()[0]["num_threads"]


def needs_a_thread_pool() -> None:
    """Skip where numpy runs the reference BLAS (Debian's libblas3, as in the emulated arm64 root):
    one thread, no pool for cvmvm.vm.blas to limit.  Any other BLAS threadpoolctl does not see fails."""
    assert blas.controller() is not None, "the speed extra (threadpoolctl) is part of the test install"
    if not blas.controller().select(user_api="blas").info():
        loaded = blas_libraries()
        reference = [name for name in loaded if "/blas/libblas.so" in name]
        assert reference, f"threadpoolctl controls none of the BLAS libraries numpy loaded: {loaded}"
        pytest.skip(f"numpy runs the reference BLAS ({reference[0]}), single-threaded: no thread pool to limit")


def threads_during_run(model, trace: bool, monkeypatch) -> int:
    seen = []
    real = api.execute

    def spy(*args, **kwargs):
        seen.append(blas_threads())
        return real(*args, **kwargs)
    monkeypatch.setattr(api, "execute", spy)
    model.run({n: np.ones(t.shape, np.int32) for n, t in model.inputs.items()}, trace=trace)
    monkeypatch.undo()
    return seen[0]


def test_a_traced_run_beside_the_hashing_process_leaves_it_a_core(monkeypatch):
    """Where OpenBLAS's workers spin (numpy was loaded first, as in this process)."""
    needs_a_thread_pool()
    monkeypatch.setattr(blas, "SHORT", False)
    assert hashworker.start() is not None
    before = blas_threads()
    with blas.controller().limit(limits=os.cpu_count() + 1, user_api="blas"):
        assert threads_during_run(big_model(), True, monkeypatch) == blas.threads_beside_hashing()
        assert threads_during_run(big_model(), False, monkeypatch) == os.cpu_count() + 1   # untraced
        assert threads_during_run(mlp_model(), True, monkeypatch) == os.cpu_count() + 1    # all hashed inline
        assert blas_threads() == os.cpu_count() + 1
    assert blas_threads() == before


def test_a_traced_run_keeps_its_blas_threads_where_they_sleep_when_idle(monkeypatch):
    needs_a_thread_pool()
    monkeypatch.setattr(blas, "SHORT", True)
    assert hashworker.start() is not None
    with blas.controller().limit(limits=os.cpu_count() + 1, user_api="blas"):
        assert threads_during_run(big_model(), True, monkeypatch) == os.cpu_count() + 1


@pytest.mark.parametrize("short", [False, True])
def test_a_traced_run_never_raises_the_blas_threads(monkeypatch, short):
    """Inside replay's one thread a traced run beside the hashing process stays on one."""
    needs_a_thread_pool()
    monkeypatch.setattr(blas, "SHORT", short)
    assert hashworker.start() is not None
    with blas.controller().limit(limits=os.cpu_count() + 1, user_api="blas"):
        with blas.one_thread():
            assert threads_during_run(big_model(), True, monkeypatch) == 1
            assert blas_threads() == 1
        assert blas_threads() == os.cpu_count() + 1


def test_replay_runs_its_batches_on_one_blas_thread(monkeypatch, tmp_path):
    """Replay's parallelism is its worker processes: a batched run takes one BLAS thread, then
    the process has as many as before."""
    needs_a_thread_pool()
    model = mlp_model()
    store = Store(tmp_path / "store")
    store.add(model)
    x = np.array([[5, -100, 127, 7]], dtype=np.int32)
    r = receipt.make_receipt(model, model.run({"x": x}, trace=True))
    txs = [transactions.Transaction(model.model_hash, (("x", x),), r)] * 3
    seen = []
    real = batching.Batch.run_rows
    monkeypatch.setattr(batching.Batch, "run_rows", lambda *a, **k: (seen.append(blas_threads()), real(*a, **k))[1])
    with blas.controller().limit(limits=2, user_api="blas"):
        assert [o.status for o in schedule.replay(txs, store)] == ["ok"] * 3
        assert seen == [1] and blas_threads() == 2


@pytest.mark.parametrize("short", [False, True])
def test_without_threadpoolctl_only_the_timing_differs(monkeypatch, short):
    """Without threadpoolctl a traced run hashes beside BLAS only where its workers sleep when idle."""
    model = big_model()
    x = {"x": (np.arange(128 * 256, dtype=np.int32).reshape(128, 256) % 255) - 127}
    with_limit = model.run(x, trace=True)
    monkeypatch.setattr(blas, "SHORT", short)
    blas.controller.cache_clear()
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)
    try:
        assert blas.controller() is None and blas.alongside_possible() == short
        assert hashworker.start() is not None
        without = model.run(x, trace=True)
    finally:
        blas.controller.cache_clear()
    assert without.trace.root == with_limit.trace.root and without.output_hash == with_limit.output_hash


@pytest.mark.parametrize("value, short", [(None, False), ("", False), ("0", False), ("1", True), ("4", True),
                                          ("14", True), (" 14 ", True), ("15", False), ("28", False),
                                          ("-3", False), ("14abc", False), ("1e3", False)])
def test_which_openblas_spin_timeouts_are_short(value, short):
    """OPENBLAS_THREAD_TIMEOUT is 2^N cycles: 0 means OpenBLAS's default (2^28), 1 to 3 mean 4;
    anything cvmvm cannot read is taken as long (only timing depends on it)."""
    assert blas.spin_is_short(value) == short


@pytest.mark.parametrize("first, preset, spin, threads", [
    ("cvmvm", None, str(blas.SHORT_SPIN), "kept"),   # cvmvm sets a short spin: BLAS keeps its threads
    ("numpy", None, None, "held"),                   # too late to set: a core is left to the hashing process
    ("cvmvm", "28", "28", "held"),                   # the host's own setting stands
    ("numpy", "4", "4", "kept"),                     # and counts whatever the order
])
def test_the_spin_and_the_limit_follow_the_import_order(first, preset, spin, threads):
    needs_a_thread_pool()
    imports = "import numpy\nimport cvmvm\n" if first == "numpy" else "import cvmvm\nimport numpy\n"
    code = imports + (
        "import os, numpy as np\n"
        "from cvmvm.vm import api, blas, hashworker\n"
        "from tests.test_blas import big_model, blas_threads\n"
        "assert hashworker.start() is not None\n"
        "seen = []\n"
        "real = api.execute\n"
        "api.execute = lambda *a, **k: (seen.append(blas_threads()), real(*a, **k))[1]\n"
        "with blas.controller().limit(limits=os.cpu_count() + 1, user_api='blas'):\n"
        "    big_model().run({'x': np.ones((128, 256), np.int32)}, trace=True)\n"
        "print({os.cpu_count() + 1: 'kept', blas.threads_beside_hashing(): 'held'}.get(seen[0], seen[0]),\n"
        "      os.environ.get('OPENBLAS_THREAD_TIMEOUT'))\n")
    env = {"PATH": "/usr/bin:/bin", **({} if preset is None else {blas.SPIN: preset})}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=120)
    assert proc.stdout.split() == [threads, str(spin)], proc.stderr
