"""The whole error hierarchy of cvmvm.

Failure is part of the specification: every rejection carries a stable code
``<family>.<reason>`` that tests and callers match on; messages are for humans
and may change.  One family per phase, as in the WebAssembly reference
interpreter: bytes and structure (malformed), ISA rules (invalid), runtime
inputs (input), budgets (limit), and VM bugs (internal).
"""

from __future__ import annotations


class CvmError(Exception):
    """Base of every error cvmvm raises on purpose."""

    family = "internal"

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message

    @property
    def code(self) -> str:
        return f"{self.family}.{self.reason}"

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class MalformedError(CvmError):
    """Bytes or structure that do not decode: bad JSON, truncated blobs, non-canonical msgpack."""

    family = "malformed"


class InvalidError(CvmError):
    """Well-formed, but breaks an ISA rule: attribute domain, shape, precision, arity, dtype."""

    family = "invalid"


class InputError(CvmError):
    """A runtime input that does not fit the verified program: name, dtype, shape."""

    family = "input"


class LimitError(CvmError):
    """A budget exceeded: rank, dimension, size, ops, or bytes read."""

    family = "limit"


class InternalError(CvmError):
    """Cannot happen for a verified program; if raised, the VM has a bug."""

    family = "internal"


FAMILIES: tuple[type[CvmError], ...] = (MalformedError, InvalidError, InputError, LimitError, InternalError)


class Rejected(Exception):
    """Raised by ISA rules through ``require``; the phase that called the rule
    turns it into the right CvmError family (attribute, shape, precision ...)."""


def require(condition: bool, message: str) -> None:
    """State a static rule: ``require(s >= 1, "strides=(0, 2) must be >= 1")``.

    Not ``assert``: ``python -O`` strips asserts, and acceptance may never depend
    on interpreter flags.
    """
    if not condition:
        raise Rejected(message)
