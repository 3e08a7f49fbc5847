"""Readable listings of programs and of the ISA table."""

from __future__ import annotations

import dataclasses
from typing import Any

from isa.attrs import attr_fields, attrs_to_dict
from isa.table import OPS
from isa.types import TensorType
from cvmvm.vm.verify import Program


def _t(t: TensorType) -> str:
    dims = "x".join(map(str, t.shape))
    return f"{t.dtype}[{dims}]" + (f"p{t.precision}" if t.precision is not None else "")


def _v(v: Any) -> str:
    if isinstance(v, tuple):
        return "(" + ",".join(map(str, v)) + ")"
    return str(v)


def listing(program: Program) -> list[str]:
    """One line per variable and per instruction: ids, op, attributes, types, cost, plan."""
    model = program.model
    rows = [f"; ops {program.ops}  instructions {len(program.steps)}  tensors {len(program.types)}"]
    for k, inp in enumerate(model.inputs):
        rows.append(f"%{k:<4} = input  {inp.name} : {_t(inp.type)}")
    for k, p in enumerate(model.params, start=len(model.inputs)):
        rows.append(f"%{k:<4} = param  {p.name} : {_t(p.type)}")
    for step in program.steps:
        outs = ", ".join(f"%{t}" for t in step.outputs)
        ins = ", ".join(f"%{t}" for t in step.inputs)
        attrs = " ".join(f"{k}={_v(v)}" for k, v in attrs_to_dict(step.attrs).items())
        types = ", ".join(_t(t) for t in step.out_types)
        plan = f"  [{step.plan}]" if step.plan is not None else ""
        rows.append(f"{outs} = {step.index:>4}: {step.op.name}({ins}) {attrs} : {types}  ; ops {step.cost}{plan}")
    rows.append("return " + ", ".join(f"%{t}" for t in model.outputs))
    return rows


def _input_names(op: Any, specs: Any) -> tuple[str, ...] | None:
    """Input names under the Cortex defaults (e.g. conv2d without bias); None when variadic.

    Required attributes stay unset: no op's input list depends on one.
    """
    record = object.__new__(op.attrs)
    for s in specs:
        if s.default is not dataclasses.MISSING:
            object.__setattr__(record, s.name, s.default)
    return op.inputs(record)


def op_table() -> list[dict[str, Any]]:
    """The ISA table as data: code, name, inputs, outputs, attributes with kind, domain, default."""
    table = []
    for code, op in enumerate(OPS):
        specs = attr_fields(op.attrs)
        names = _input_names(op, specs)
        table.append({
            "code": code, "name": op.name,
            "inputs": list(names) if names is not None else ["*"],
            "outputs": list(op.outputs),
            "attrs": [{"name": s.name, "kind": s.kind, "domain": s.domain.describe,
                       "default": None if s.default is dataclasses.MISSING else
                       (list(s.default) if isinstance(s.default, tuple) else s.default)} for s in specs],
        })
    return table
