"""cvmvm: a deterministic integer virtual machine for the Cortex VM instruction set.

files.py (bounded reads, output files committed as one unit), vm/ (verification,
execution, traces, batching, the Python API re-exported here), tx/ (receipts,
store, replay, step proofs, trace diffs), cli/ (the ``cvmvm`` command).  Layers
point one way: files <- vm <- tx <- cli, all above isa and serializer.

The API below loads on first use, not with the package: numpy and the ISA take
about half a second to import, and the ``cvmvm`` command (cvmvm.cli.launch)
answers Ctrl-C and SIGTERM from its first moment, before they are loaded.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"  # the one place the package version is written; pyproject.toml reads it

# First: OpenBLAS's spin is set before numpy loads it (cvmvm.vm.blas says why).
from cvmvm.vm import blas as _blas  # noqa: E402,F401

if TYPE_CHECKING:
    from isa.errors import (CvmError, InputError, InternalError, InvalidError, IOFailure, LimitError,
                            MalformedError, UsageError)
    from cvmvm.vm.api import Clipping, Limits, Model, Result, load, load_cortex, run_op

_API = {**dict.fromkeys(("CvmError", "UsageError", "MalformedError", "InvalidError", "InputError", "LimitError",
                         "InternalError", "IOFailure"), "isa.errors"),
        **dict.fromkeys(("Clipping", "Limits", "Model", "Result", "load", "load_cortex", "run_op"), "cvmvm.vm.api")}


def __getattr__(name: str) -> Any:
    if name not in _API:
        # An AttributeError also lets ``from cvmvm import files`` fall through to the submodule.
        raise AttributeError(f"module 'cvmvm' has no attribute {name!r}")
    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})


def versions() -> dict[str, Any]:
    """The package version, the ISA version and every file format's version."""
    from serializer import kinds
    return {"cvmvm": __version__, **kinds.versions()}


__all__ = ["__version__", "versions", *_API]
