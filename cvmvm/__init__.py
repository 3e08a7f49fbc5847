"""cvmvm: a deterministic integer virtual machine for the Cortex VM instruction set."""

from isa.errors import CvmError, InputError, InternalError, InvalidError, LimitError, MalformedError
from cvmvm.api import Limits, Model, Result, load, load_cortex, run_op

__all__ = ["CvmError", "MalformedError", "InvalidError", "InputError", "LimitError", "InternalError",
           "Limits", "Model", "Result", "load", "load_cortex", "run_op"]
