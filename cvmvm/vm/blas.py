"""BLAS threads while a traced run's hashing process works alongside it.

A traced run hands its large tensors to a hashing process (cvmvm.vm.hashworker)
while the next kernels run.  After every multi-threaded GEMM, OpenBLAS's worker
threads spin on their cores for a long while (2^28 cycles, some 0.1 s, by
default), exactly where the hashing process wants to run: on 2 cores a traced
perf run took 0.4 s instead of 23 ms.  OpenBLAS reads that timeout
(OPENBLAS_THREAD_TIMEOUT, 2^N cycles) from the environment once, when numpy
loads it, and has no call that changes it later.  So:

- Imported before numpy (as the ``cvmvm`` command always is), cvmvm sets
  OPENBLAS_THREAD_TIMEOUT to SHORT_SPIN unless it is set already: idle workers
  then sleep within microseconds, and a traced run keeps every BLAS thread,
  the scheduler giving the hashing process whatever the GEMMs leave.  perf-large
  traced took 1.31-1.40x untraced so, against 1.8x with a core held back
  (docs/BENCHMARKS.md, 2026-11-29, 17:30-18:00); untraced runs took as long
  as with the default spin, within the machine's noise (3%), on a sixth less
  CPU.
- Imported after numpy, with no short setting when it loaded (``SHORT`` is
  false), the workers spin, and while the hashing process works GEMMs run on
  one thread fewer than the machine has cores, set at run time through
  threadpoolctl (the ``speed`` extra) and restored after.  That limit cannot
  quiet threads already spinning after an earlier multi-threaded GEMM (an
  untraced run's): a traced run within about 0.1 s of one shares the hashing
  process's core with them and takes up to twice as long.  OpenBLAS has no call
  that stops them, and ending its thread pool (blas_thread_shutdown_) while
  another thread of the process may be inside a GEMM could crash it.

With a long spin and no threadpoolctl, a traced run hashes inline
(cvmvm.vm.trace: ``alongside_possible``).  No result
depends on the BLAS thread count or its spin (tests/test_determinism.py),
only timing.  The limit is process-wide while it lasts, so an untraced run in
another Python thread of the process meanwhile runs its GEMMs on fewer threads
too (timing only, again).

Replay's batched runs take one BLAS thread (``one_thread``): its parallelism is
its worker processes, one per core, and a second BLAS thread per worker made
the batched digits run no faster but doubled its CPU (the spinning thread), and
between two batches it spun on the core the other worker, or this worker's
signature checks, needed.
"""

from __future__ import annotations

import functools
import os
import sys
from contextlib import AbstractContextManager, nullcontext
from typing import Any

SPIN = "OPENBLAS_THREAD_TIMEOUT"
SHORT_SPIN = 14   # 2^14 cycles, a few microseconds: 4 (OpenBLAS's least) measured the same
# cvmvm/__init__.py imports this module before anything that imports numpy.
if "numpy" not in sys.modules:
    os.environ.setdefault(SPIN, str(SHORT_SPIN))


def spin_is_short(value: str | None) -> bool:
    """Whether OpenBLAS, loaded with ``value`` for OPENBLAS_THREAD_TIMEOUT, lets its idle workers
    sleep within SHORT_SPIN's time (it takes 0 for its default, and 1 to 3 as 4)."""
    return value is not None and value.strip().isdigit() and 1 <= int(value) <= SHORT_SPIN


# What OpenBLAS read, unless a host changed the environment between loading numpy and importing
# cvmvm (then only timing suffers).
SHORT = spin_is_short(os.environ.get(SPIN))


@functools.lru_cache(maxsize=None)
def controller() -> Any:
    """threadpoolctl's controller of the BLAS libraries loaded (numpy's), or None without the extra."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    return ThreadpoolController()


def one_thread() -> AbstractContextManager[Any]:
    """One BLAS thread while it lasts, then as before (nothing without threadpoolctl)."""
    ctl = controller()
    return nullcontext() if ctl is None else ctl.limit(limits=1, user_api="blas")


def threads_beside_hashing() -> int:
    """BLAS threads while the hashing process works: a core is left to it."""
    return max(1, (os.cpu_count() or 1) - 1)


def alongside_possible() -> bool:
    """Whether a hashing process can work beside BLAS: its workers sleep when idle, or they can be
    held to ``threads_beside_hashing`` while it works."""
    return SHORT or controller() is not None


def hashing_alongside(active: bool) -> AbstractContextManager[Any]:
    """BLAS limited to ``threads_beside_hashing`` (or fewer, as already) while a traced run's hashing process works
    (``active``: the run's Tracer has a worker, which it has only when ``alongside_possible``), unless
    the workers' spin is short: then they leave the hashing process its time by themselves."""
    ctl = controller()
    if not active or ctl is None or SHORT:
        return nullcontext()
    # Never more threads than now: inside replay's one_thread a traced run stays on one.
    now = [lib["num_threads"] for lib in ctl.select(user_api="blas").info()]
    return ctl.limit(limits=min([threads_beside_hashing(), *now]), user_api="blas")
