"""BLAS threads while a traced run's hashing process works alongside it.

A traced run hands its large tensors to a hashing process (cvmvm.vm.hashworker)
while the next kernels run.  After every multi-threaded GEMM, OpenBLAS's worker
threads spin on their cores for a long while (some 0.1 s by default), exactly
where the hashing process wants to run: on 2 cores a traced perf run took 0.4 s
instead of 23 ms.  OpenBLAS reads its spin timeout only when it loads, so
setting OPENBLAS_THREAD_TIMEOUT when cvmvm is imported helped only when cvmvm
was imported before numpy.  Instead, while the hashing process works, GEMMs run
on one thread fewer than the machine has cores, set at run time through
threadpoolctl (the ``speed`` extra) whatever the import order, and restored
after; without threadpoolctl a traced run hashes inline (cvmvm.vm.trace).  No
result depends on the BLAS thread count (tests/test_determinism.py).  The limit
is process-wide while it lasts, so an untraced run in another Python thread of
the process meanwhile runs its GEMMs on fewer threads too (timing only, again).
The limit cannot quiet threads already spinning after an earlier multi-threaded
GEMM (an untraced run's): a traced run within about 0.1 s of one shares the
hashing process's core with them and takes up to twice as long.  OpenBLAS has
no call that stops them, and ending its thread pool (blas_thread_shutdown_)
while another thread of the process may be inside a GEMM could crash it.

Replay's batched runs take one BLAS thread (``one_thread``): its parallelism is
its worker processes, one per core, and a second BLAS thread per worker made
the batched digits run no faster but doubled its CPU (the spinning thread), and
between two batches it spun on the core the other worker, or this worker's
signature checks, needed.
"""

from __future__ import annotations

import functools
import os
from contextlib import AbstractContextManager, nullcontext
from typing import Any


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


def hashing_alongside(active: bool) -> AbstractContextManager[Any]:
    """BLAS limited to ``threads_beside_hashing`` (or fewer, as already) while a traced run's hashing process works
    (``active``: the run's Tracer has a worker, which it has only when this limit can be set)."""
    ctl = controller()
    if not active or ctl is None:
        return nullcontext()
    # Never more threads than now: inside replay's one_thread a traced run stays on one.
    now = [lib["num_threads"] for lib in ctl.select(user_api="blas").info()]
    return ctl.limit(limits=min([threads_beside_hashing(), *now]), user_api="blas")
