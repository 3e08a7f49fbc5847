"""Helpers the per-op test files share: run one op or its reference kernel, catch its error code, verify one instruction."""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable

import numpy as np
import pytest

import cvmvm
from isa.attrs import parse_attrs
from isa.spec import OpDef
from isa.table import OP_BY_NAME, OPS
from isa.types import TensorType
from serializer.model import Input, Instr, Model
from cvmvm.vm.verify import Program, verify


def family(module: ModuleType) -> tuple[OpDef, ...]:
    """The ops a module of isa/ops declares, in op-table order."""
    declared = {id(v) for v in vars(module).values() if isinstance(v, OpDef)}
    return tuple(op for op in OPS if id(op) in declared)


def arr(values, shape=None) -> np.ndarray:
    a = np.array(values, dtype=np.int32)
    return a if shape is None else a.reshape(shape)


def run(name: str, inputs, attrs=None, precisions=None) -> list[np.ndarray]:
    """run_op with every input made an int32 array."""
    return cvmvm.run_op(name, [np.asarray(v, dtype=np.int32) for v in inputs], attrs or {}, precisions)


def run1(name: str, inputs, attrs=None, precisions=None) -> np.ndarray:
    (out,) = cvmvm.run_op(name, inputs, attrs or {}, precisions)
    return out


def reference(name: str, inputs, attrs=None) -> tuple[np.ndarray, ...]:
    """The op's reference kernel (isa/reference/), called as the VM calls its kernel: the
    attribute record (Cortex defaults filled in), then the arrays."""
    op = OP_BY_NAME[name]
    return op.reference(parse_attrs(op.attrs, dict(attrs or {}), fill_defaults=True), *inputs)


def reference1(name: str, inputs, attrs=None) -> np.ndarray:
    (out,) = reference(name, inputs, attrs)
    return out


def rejected(name: str, inputs, attrs=None, precisions=None) -> str:
    """The error code run_op raises."""
    with pytest.raises(cvmvm.CvmError) as e:
        cvmvm.run_op(name, inputs, attrs or {}, precisions)
    return e.value.code


def rejects(code: str, fn: Callable[..., Any], *args: Any) -> None:
    with pytest.raises(cvmvm.CvmError) as e:
        fn(*args)
    assert e.value.code == code


def program(name: str, types: list[TensorType], attrs: dict) -> Program:
    """Verify one instruction over typed inputs (no values): its output types and ops."""
    op = OP_BY_NAME[name]
    record = parse_attrs(op.attrs, attrs, fill_defaults=True)
    n = len(types)
    outs = tuple(range(n, n + len(op.outputs)))
    return verify(Model(tuple(Input(f"in{k}", t) for k, t in enumerate(types)), (),
                        (Instr(name, record, tuple(range(n)), outs),), outs))
