"""cvmvm: a deterministic integer virtual machine for the Cortex VM instruction set.

files.py (bounded reads, output files committed as one unit), vm/ (verification,
execution, traces, batching, the Python API re-exported here), tx/ (receipts,
store, replay, step proofs, trace diffs), cli/ (the ``cvmvm`` command).  Layers
point one way: files <- vm <- tx <- cli, all above isa and serializer.
"""

from typing import Any

__version__ = "0.1.0"  # the one place the package version is written; pyproject.toml reads it

# First: OpenBLAS's spin is set before numpy loads it (cvmvm.vm.blas says why).
from cvmvm.vm import blas as _blas  # noqa: E402,F401
from isa.errors import (CvmError, InputError, InternalError, InvalidError, IOFailure, LimitError,  # noqa: E402
                        MalformedError, UsageError)
from serializer import kinds  # noqa: E402
from cvmvm.vm.api import Clipping, Limits, Model, Result, load, load_cortex, run_op  # noqa: E402


def versions() -> dict[str, Any]:
    """The package version, the ISA version and every file format's version."""
    return {"cvmvm": __version__, **kinds.versions()}


__all__ = ["__version__", "versions", "CvmError", "UsageError", "MalformedError", "InvalidError", "InputError",
           "LimitError", "InternalError", "IOFailure", "Clipping", "Limits", "Model", "Result", "load",
           "load_cortex", "run_op"]
