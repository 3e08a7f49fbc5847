"""The model as both formats decode it, before verification.

Tensor ids are dense and positional: inputs take [0, I), params [I, I + P),
then each instruction's outputs take the next ids in program order.  A Model
is only a structure; ``cvmvm.vm.verify`` decides whether it is a valid program.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np

from isa.types import Shape, TensorType


@dataclass(frozen=True)
class Input:
    """A value supplied at run time (the Cortex ``data`` variable)."""

    name: str
    type: TensorType


@dataclass(frozen=True)
class Param:
    """A constant of the model; ``value`` has ``type.dtype`` and ``type.shape``, read-only."""

    name: str
    type: TensorType
    value: np.ndarray = field(compare=False, repr=False)


@dataclass(frozen=True)
class Instr:
    """One instruction: an op of the ISA table applied to earlier tensors."""

    op: str
    attrs: Any  # the op's attribute record (isa.attrs)
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    name: str = ""
    # Shapes the source format declares for the outputs (Cortex's attrs.shape);
    # verification requires inference to reproduce them.  None: not declared.
    declared_shapes: tuple[Shape, ...] | None = None
    # Likewise the declared output dtypes (Cortex's attrs.dltype).
    declared_dtypes: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Scales:
    """The float meaning of inputs and outputs: a value q stands for q * scale (FORMAT.md 1.6).

    One entry per input and per output head, None where there is no scale.
    A model where every entry would be None has no Scales at all.
    """

    inputs: tuple[float | None, ...]
    outputs: tuple[float | None, ...]


@dataclass(frozen=True)
class Model:
    inputs: tuple[Input, ...]
    params: tuple[Param, ...]
    instrs: tuple[Instr, ...]
    outputs: tuple[int, ...]
    scales: Scales | None = None
    # Format-specific layout kept so that a loaded model re-exports to the same
    # bytes (e.g. Cortex node order, names, storage ids); never hashed.
    source: Any = field(default=None, compare=False, repr=False)

    @property
    def input_scales(self) -> tuple[float | None, ...]:
        return self.scales.inputs if self.scales is not None else (None,) * len(self.inputs)

    @property
    def output_scales(self) -> tuple[float | None, ...]:
        return self.scales.outputs if self.scales is not None else (None,) * len(self.outputs)

    @property
    def num_variables(self) -> int:
        return len(self.inputs) + len(self.params)

    @property
    def num_tensors(self) -> int:
        return self.num_variables + sum(len(i.outputs) for i in self.instrs)


def with_scales(model: Model, inputs: Sequence[float | None], outputs: Sequence[float | None]) -> Model:
    """The model with these input and output scales (none at all when every one is None)."""
    scales = Scales(tuple(inputs), tuple(outputs))
    none = all(s is None for s in (*scales.inputs, *scales.outputs))
    return replace(model, scales=None if none else scales)
