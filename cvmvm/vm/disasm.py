"""Readable listings of programs and of the ISA table: text, JSON, and Graphviz DOT."""

from __future__ import annotations

import dataclasses
from typing import Any

from isa.attrs import attr_fields, attrs_to_dict
from isa.table import OPS
from isa.types import TensorType
from cvmvm.vm.trace import tensor_name
from cvmvm.vm.verify import Program


def _t(t: TensorType) -> str:
    dims = "x".join(map(str, t.shape))
    return f"{t.dtype}[{dims}]" + (f"p{t.precision}" if t.precision is not None else "")


def _v(v: Any) -> str:
    if isinstance(v, tuple):
        return "(" + ",".join(map(str, v)) + ")"
    return str(v)


def listing(program: Program) -> list[str]:
    """One line per variable and per instruction: ids, op, attributes, types, cost, work, plan."""
    model = program.model
    rows = [f"; ops {program.ops}  work {program.work}  memory {program.memory_bytes}  "
            f"instructions {len(program.steps)}  tensors {len(program.types)}"]
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
        rows.append(f"{outs} = {step.index:>4}: {step.op.name}({ins}) {attrs} : {types}  ; ops {step.cost} "
                    f"work {step.work}{plan}")
    rows.append("return " + ", ".join(f"%{t}" for t in model.outputs))
    return rows


def _type_json(t: TensorType) -> dict[str, Any]:
    return {"dtype": t.dtype, "shape": list(t.shape), "precision": t.precision}


def _attrs_json(record: Any) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in attrs_to_dict(record).items()}


def program_json(program: Program) -> dict[str, Any]:
    """The listing as data: every variable and instruction, with tensor ids, names, types, cost, work, plan."""
    model = program.model
    variables = [{"tensor": k, "kind": kind, "name": v.name, **_type_json(v.type)}
                 for k, (kind, v) in enumerate([("input", i) for i in model.inputs]
                                               + [("param", p) for p in model.params])]
    instructions = [{"index": step.index, "op": step.op.name, "name": step.name, "inputs": list(step.inputs),
                     "outputs": list(step.outputs), "attrs": _attrs_json(step.attrs),
                     "types": [_type_json(t) for t in step.out_types], "cost": step.cost,
                     "work": step.work, "plan": None if step.plan is None else str(step.plan)} for step in program.steps]
    return {"ops": program.ops, "work": program.work, "memory_bytes": program.memory_bytes,
            "tensors": len(program.types), "variables": variables,
            "instructions": instructions,
            "outputs": [{"tensor": t, "name": tensor_name(program, t)} for t in model.outputs]}


def _label(*lines: str) -> str:
    """A DOT string of ``lines``, quotes and backslashes escaped, lines joined by DOT's line break."""
    return '"' + "\\n".join(x.replace("\\", "\\\\").replace('"', '\\"') for x in lines) + '"'


def dot(program: Program) -> str:
    """The program as a Graphviz digraph: a node per variable and instruction, an edge per tensor
    read (labelled with its id and type), and the outputs."""
    model = program.model
    producer: dict[int, str] = {}
    lines = ["digraph cvmvm {", '  node [fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=8];']
    styles = {"input": 'shape=ellipse, style=filled, fillcolor="#dbe9f6"',
              "param": 'shape=note, style=filled, fillcolor="#eeeeee"'}
    for k, (kind, v) in enumerate([("input", i) for i in model.inputs] + [("param", p) for p in model.params]):
        producer[k] = f"t{k}"
        lines.append(f"  t{k} [label={_label(f'{kind} {v.name}', _t(v.type))}, {styles[kind]}];")

    def edge(t: int, to: str) -> str:
        return f"  {producer[t]} -> {to} [label={_label(f'%{t} {_t(program.types[t])}')}];"

    for step in program.steps:
        node = f"i{step.index}"
        lines.append(f"  {node} [label={_label(f'{step.index}: {step.op.name}', step.name, f'ops {step.cost}')}, "
                     "shape=box];")
        lines += [edge(t, node) for t in step.inputs]
        for t in step.outputs:
            producer[t] = node
    for k, t in enumerate(model.outputs):
        lines.append(f"  out{k} [label={_label(f'output {k}', tensor_name(program, t))}, shape=doubleoctagon];")
        lines.append(edge(t, f"out{k}"))
    lines.append("}")
    return "\n".join(lines)


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
