"""The OpDef record: one op of the instruction set, declared top to bottom.

Every rule sees only static facts (attribute record and input TensorTypes) and
states what is wrong with ``require``.  Beside the cost rule (Cortex's ops,
what chains charge) each op declares its resource rules: ``work``, what its
kernel really spends in work units, and ``scratch``, the bytes its kernel
holds beyond its inputs and outputs (docs/RESOURCES.md).  The kernel sees the
attribute record and the input arrays and contains no validation: it runs only
inside a checked program.  The reference kernel (isa/reference/) has the same calling
convention without the plan, and is the op's normative definition: the fast
kernel must agree with it on every verified input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from isa.errors import require
from isa.types import INT32, Shape, TensorType

ShapeRule = Callable[..., tuple[Shape, ...]]          # (attrs, *inputs: TensorType) -> one shape per output
PrecisionRule = Callable[..., tuple[int | None, ...]]  # (attrs, *inputs: TensorType) -> one precision per output
DtypeRule = Callable[..., tuple[str, ...]]            # (attrs, *inputs: TensorType) -> one dtype per output
CostRule = Callable[[Any, tuple[TensorType, ...], tuple[TensorType, ...]], int]  # base ops per element of output 0
# (attrs, inputs, outputs) -> work units of the kernel alone, and -> its scratch bytes
WorkRule = Callable[[Any, tuple[TensorType, ...], tuple[TensorType, ...]], int]
ScratchRule = Callable[[Any, tuple[TensorType, ...], tuple[TensorType, ...]], int]
Kernel = Callable[..., tuple[np.ndarray, ...]]         # (attrs, *arrays) -> one array per output
InputNames = Callable[[Any], "tuple[str, ...] | None"]  # None: variadic, at least one input


@dataclass(frozen=True)
class OpDef:
    name: str
    attrs: type
    inputs: InputNames
    outputs: tuple[str, ...]
    shape: ShapeRule
    precision: PrecisionRule
    cost: CostRule
    kernel: Kernel
    dtypes: DtypeRule | None = None  # None: int32 in, int32 out (every arithmetic op)
    # Optional static plan chosen at verification (e.g. the exact GEMM path);
    # when present the kernel is called as kernel(attrs, *arrays, plan=plan).
    plan: Callable[..., Any] | None = None
    # Optional, with a plan: what the plan derives once per program and holds for its life (a
    # gather index, weights that are a param in the GEMM's dtype).  held(attrs, plan, *params) ->
    # bytes, params[k] whether input k is a param: static, counted in the program's memory and
    # checked against its limit; then bind(attrs, plan, *values) -> plan, values[k] input k's value
    # when it is a param, else None, makes it, once the program is verified.  A plan that holds
    # arrays says how many bytes (``held_bytes``), and tests check that against ``held``.
    held: Callable[..., int] | None = None
    bind: Callable[..., Any] | None = None
    # The readable loop kernel written from the formalization (isa/reference/): required.
    reference: Kernel = field(kw_only=True)
    # The kernel's real work and scratch memory, from static facts only: required.
    work: WorkRule = field(kw_only=True)
    scratch: ScratchRule = field(kw_only=True)
    # Why the kernel cannot leave its outputs' verified precisions (it selects input values,
    # or clips to the precision last), or None: the executor then checks every value of
    # every int32 output (one min/max pass).  Either way it confirms shape and dtype.
    in_range: str | None = field(default=None, kw_only=True)


def fixed(*names: str) -> InputNames:
    """Input names that do not depend on attributes."""
    return lambda a: names


def int32_only(a: Any, *inputs: TensorType) -> tuple[str, ...]:
    """The default dtype rule: every input an int32 CVM tensor (with a precision), one int32 output.

    A raw int32 tensor (no precision, the full int32 range including INT32_MIN)
    exists only for max_pool, which selects and never computes.
    """
    for i, t in enumerate(inputs):
        require(t.dtype == INT32, f"input {i} has dtype {t.dtype}; this op takes int32 only")
        require(t.precision is not None, f"input {i} is raw int32 without a precision; this op takes CVM tensors only")
    return (INT32,)


def unit_cost(a: Any, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    """Base cost 1 per output element (SEMANTICS.md section 3)."""
    return 1


# Work units (docs/RESOURCES.md): about half a nanosecond of CPU for the median
# op on the calibration machine, at most about one for the slowest op at its
# worst shape; bench/work.py measures every rule against its kernel.
# NUMPY_CALL is one numpy call on a small array, Python included: a kernel that
# loops in Python pays it per iteration.
NUMPY_CALL = 1000
# numpy loops over strided or broadcast operands one row of the last axis at a
# time (longer when axes coalesce); each row costs about this beyond its elements.
NUMPY_ROW = 20


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def per_output(units: int) -> WorkRule:
    """Work of a kernel that makes ``units`` passes over its output elements."""
    def work(a: Any, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
        return units * sum(t.size for t in outputs)
    return work


def strided_passes(passes: int) -> WorkRule:
    """Work of a kernel that makes ``passes`` strided passes over output 0: its elements and its rows."""
    def work(a: Any, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
        out = outputs[0]
        return passes * (out.size + NUMPY_ROW * (out.size // out.shape[-1]))
    return work


def no_work(a: Any, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    """A kernel that returns a view: no element is touched (hashing it is the executor's work)."""
    return 0


def scratch_per_output(nbytes: int) -> ScratchRule:
    """Scratch of a kernel that holds ``nbytes`` per output element besides its outputs."""
    def scratch(a: Any, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
        return nbytes * sum(t.size for t in outputs)
    return scratch


def no_scratch(a: Any, inputs: tuple[TensorType, ...], outputs: tuple[TensorType, ...]) -> int:
    """A kernel that allocates nothing but its outputs."""
    return 0


def same_shape(a: Any, x: TensorType, *rest: TensorType) -> tuple[Shape, ...]:
    return (x.shape,)


def same_precision(a: Any, x: TensorType, *rest: TensorType) -> tuple[int | None, ...]:
    return (x.precision,)


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    """Map axis in [-ndim, ndim) to [0, ndim), or reject."""
    require(-ndim <= axis < ndim, f"{what}={axis} must be in [{-ndim}, {ndim - 1}]")
    return axis + ndim if axis < 0 else axis
