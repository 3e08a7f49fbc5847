"""The CVM program under construction: inputs, params and instructions, typed by the ISA's own rules
as they are added, numbered only at the end (inputs, then params, then instruction outputs, as the
native format requires)."""

from __future__ import annotations

from typing import Any

import numpy as np

from isa.attrs import parse_attrs
from isa.errors import InvalidError, Rejected
from isa.spec import int32_only
from isa.table import OP_BY_NAME
from isa.types import MAX_PRECISION, TensorType
from serializer.model import Input, Instr, Model, Param
from cvmvm.importer.quant import min_precision


class Builder:
    """Collects inputs, params and instructions; numbers tensor ids only at the end (inputs,
    then params, then instruction outputs, as the native format requires)."""

    def __init__(self) -> None:
        self.kinds: list[tuple[str, int]] = []   # per ref: ("input"|"param"|"out", index)
        self.types: list[TensorType] = []
        self.inputs: list[Input] = []
        self.params: list[Param] = []
        self.instrs: list[tuple[str, Any, tuple[int, ...], str, tuple[int, ...]]] = []
        self.names: set[str] = set()
        self.ids: dict[int, int] = {}   # ref -> tensor id, once finished

    def _new(self, kind: str, index: int, t: TensorType) -> int:
        self.kinds.append((kind, index))
        self.types.append(t)
        return len(self.types) - 1

    def input(self, name: str, shape: tuple[int, ...], precision: int) -> int:
        t = TensorType(shape, precision)
        self.names.add(name)
        self.inputs.append(Input(name, t))
        return self._new("input", len(self.inputs) - 1, t)

    def param(self, name: str, value: np.ndarray) -> int:
        value = np.ascontiguousarray(value, dtype=np.int32)
        unique, k = name, 1
        while unique in self.names:
            k += 1
            unique = f"{name}.{k}"
        self.names.add(unique)
        t = TensorType(tuple(int(d) for d in value.shape), min_precision(value))
        value.setflags(write=False)
        self.params.append(Param(unique, t, value))
        return self._new("param", len(self.params) - 1, t)

    def emit(self, where: str, op_name: str, attrs: dict[str, Any], inputs: list[int], name: str) -> list[int]:
        """Append one instruction; its output types come from the ISA's own rules."""
        op = OP_BY_NAME[op_name]
        record = parse_attrs(op.attrs, attrs, fill_defaults=True)
        ins = [self.types[r] for r in inputs]
        try:
            dtypes = (op.dtypes or int32_only)(record, *ins)
            shapes = op.shape(record, *ins)
            precisions = op.precision(record, *ins)
        except Rejected as e:
            raise InvalidError("precision", f"{where}: {op_name}: {e}") from None
        outs = []
        for s, p, d in zip(shapes, precisions, dtypes):
            if p is not None and p > MAX_PRECISION:
                raise InvalidError("precision", f"{where}: {op_name} would need precision {p} > {MAX_PRECISION}")
            outs.append(self._new("out", len(self.instrs), TensorType(tuple(s), p, d)))
        self.instrs.append((op_name, record, tuple(inputs), name, tuple(outs)))
        return outs

    def finish(self, outputs: list[int]) -> Model:
        ids: dict[int, int] = {}
        for r, (kind, index) in enumerate(self.kinds):
            if kind == "input":
                ids[r] = index
            elif kind == "param":
                ids[r] = len(self.inputs) + index
        next_id = len(self.inputs) + len(self.params)
        instrs = []
        for op_name, record, ins, name, outs in self.instrs:
            for r in outs:
                ids[r] = next_id
                next_id += 1
            instrs.append(Instr(op_name, record, tuple(ids[r] for r in ins), tuple(ids[r] for r in outs), name))
        self.ids = ids
        return Model(tuple(self.inputs), tuple(self.params), tuple(instrs), tuple(ids[r] for r in outputs))
