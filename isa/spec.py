"""The OpDef record: one op of the instruction set, declared top to bottom.

Every rule sees only static facts (attribute record and input TensorTypes) and
states what is wrong with ``require``.  The kernel sees the attribute record
and the input arrays and contains no validation: it runs only inside a checked
program.  The reference kernel (isa/reference/) has the same calling
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
    # The readable loop kernel written from the formalization (isa/reference/): required.
    reference: Kernel = field(kw_only=True)


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


def same_shape(a: Any, x: TensorType, *rest: TensorType) -> tuple[Shape, ...]:
    return (x.shape,)


def same_precision(a: Any, x: TensorType, *rest: TensorType) -> tuple[int | None, ...]:
    return (x.precision,)


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    """Map axis in [-ndim, ndim) to [0, ndim), or reject."""
    require(-ndim <= axis < ndim, f"{what}={axis} must be in [{-ndim}, {ndim - 1}]")
    return axis + ndim if axis < 0 else axis
