"""cvmvm: a deterministic integer virtual machine for the Cortex VM instruction set.

files.py (bounded reads, atomic writes), vm/ (verification, execution,
traces, batching, the Python API re-exported here), tx/ (receipts, store,
replay, step proofs, trace diffs), cli/ (the ``cvmvm`` command).  Layers point
one way: files <- vm <- tx <- cli, all above isa and serializer.
"""

import os
from typing import Any

__version__ = "0.1.0"  # the one place the package version is written; pyproject.toml reads it

# After a GEMM, OpenBLAS's worker threads spin for a long while on their cores,
# exactly when the trace's hashing thread wants one: a traced run on 2 cores
# then takes ~40 ms instead of ~29 ms (bench/perf.py).  A short spin lets them
# sleep.  OpenBLAS reads this when it loads, so it only takes effect when cvmvm
# is imported before numpy; it changes timing only, never a value.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

from isa.errors import (CvmError, InputError, InternalError, InvalidError, LimitError, MalformedError,  # noqa: E402
                        UsageError)
from serializer import kinds  # noqa: E402
from cvmvm.vm.api import Clipping, Limits, Model, Result, load, load_cortex, run_op  # noqa: E402


def versions() -> dict[str, Any]:
    """The package version, the ISA version and every file format's version."""
    return {"cvmvm": __version__, **kinds.versions()}


__all__ = ["__version__", "versions", "CvmError", "UsageError", "MalformedError", "InvalidError", "InputError",
           "LimitError", "InternalError", "Clipping", "Limits", "Model", "Result", "load", "load_cortex", "run_op"]
