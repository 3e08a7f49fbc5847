"""BLAS threads while a traced run hashes on its own thread.

A traced run hashes large tensors on two threads while the next kernel runs
(cvmvm.vm.trace).  After every multi-threaded GEMM, OpenBLAS's worker
threads spin on their cores for a long while (some 0.1 s by default), exactly
where the hashing thread wants to run: a traced perf run on 2 cores then takes
~40 ms instead of ~26.  OpenBLAS reads its spin timeout only when it loads, so
setting OPENBLAS_THREAD_TIMEOUT when cvmvm is imported helped only when cvmvm
was imported before numpy.  Instead, while a traced run hashes in the
background, its GEMMs run on one BLAS thread, set at run time through
threadpoolctl (the ``speed`` extra) whatever the import order, and restored
after.  Without threadpoolctl only the timing differs: no result depends on
the BLAS thread count (tests/test_determinism.py).  The limit is process-wide
while it lasts, so an untraced run in another Python thread of the process
meanwhile runs its GEMMs on one thread too (timing only, again).

Replay's batched runs take one BLAS thread too (``one_thread``): its
parallelism is its worker processes, one per core, and a second BLAS thread
per worker made the batched digits run no faster but doubled its CPU (the
spinning thread), and between two batches it spun on the core the other
worker, or this worker's signature checks, needed.
"""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from serializer.hashing import body_length
from cvmvm.vm.trace import BACKGROUND_MIN_BYTES
from cvmvm.vm.verify import Program


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


def hashing_alongside(program: Program) -> AbstractContextManager[Any]:
    """One BLAS thread while a traced run of ``program`` executes, when some tensor of it is
    large enough to be hashed on the background thread (else nothing competes with BLAS)."""
    ctl = controller()
    hashes_alongside = program.runtime.get("hashes_alongside")   # once per program, not per run
    if hashes_alongside is None:
        hashes_alongside = program.runtime["hashes_alongside"] = any(
            body_length(t) >= BACKGROUND_MIN_BYTES for t in program.types)
    if ctl is None or not hashes_alongside:
        return nullcontext()
    return one_thread()
