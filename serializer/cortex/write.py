"""Writing a Model as a Cortex graph JSON object (and its text) and a params binary.

A model read by ``read_cortex`` is written back in its own layout, byte for
byte; any other model in one canonical form.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from isa.errors import InvalidError
from isa.table import OP_BY_NAME
from isa.types import INT32, Shape, TensorType, clip_to_precision
from serializer.cortex.attr_text import operator_attrs_text, variable_attrs_text
from serializer.cortex.json_text import json_text
from serializer.cortex.layout import (CANONICAL_VERSION, DATA, GRAPH_ATTR_TAGS, NODE_ATTR_KEYS, OPERATOR_KEYS,
                                      TOP_KEYS, CortexLayout, CortexNode)
from serializer.cortex.params import write_params
from serializer.model import Input, Instr, Model, Param


def write_cortex(model: Model, types: Sequence[TensorType] | None = None) -> tuple[dict[str, Any], bytes | None]:
    """A Model -> (graph JSON object, params bytes).

    A model read by ``read_cortex`` comes back as the same graph object and
    the same params bytes (None if it was read without a params file).  Any
    other model is written in the canonical form: variables first (the input,
    then the params), then the instructions; every attribute explicit;
    storage ids 0..n-1; precision -1 for operator entries; version cvm_1.0.0;
    a param stored as int8 when every value is in [-127, 127].  Operator
    output shapes come from ``Instr.declared_shapes`` or, when a model does
    not declare them, from ``types`` (the verified type of every tensor id).
    """
    layout = model.source if isinstance(model.source, CortexLayout) else _canonical_layout(model, types)
    if layout.fits != (model.inputs, model.params, model.instrs, model.outputs):
        raise ValueError("the model's CortexLayout describes another model (was the model changed after loading?)")
    return _graph_object(model, layout, types), _params_bytes(model, layout)


def graph_to_json_bytes(graph: dict[str, Any]) -> bytes:
    """A graph object as UTF-8 bytes: keys in the reference files' order, one line, only escapes the runtime reads."""
    ordered = _in_order(graph, TOP_KEYS, "graph")
    ordered["nodes"] = [{**_in_order(n, OPERATOR_KEYS, "node"),
                         **({"attrs": _in_order(n["attrs"], NODE_ATTR_KEYS, "node attrs")} if "attrs" in n else {})}
                        for n in graph["nodes"]]
    ordered["attrs"] = _in_order(graph["attrs"], tuple(GRAPH_ATTR_TAGS), "graph attrs")
    return json_text(ordered).encode("utf-8")


def _in_order(obj: dict[str, Any], order: Sequence[str], what: str) -> dict[str, Any]:
    unknown = [k for k in obj if k not in order]
    if unknown:
        raise ValueError(f"{what}: key {unknown[0]!r} is not part of a Cortex graph")
    return {k: obj[k] for k in order if k in obj}


def _canonical_layout(model: Model, types: Sequence[TensorType] | None) -> CortexLayout:
    if len(model.inputs) > 1 or any(i.name != DATA for i in model.inputs):
        raise InvalidError("graph", f"a Cortex model has at most one input, named {DATA!r}; this one has "
                                    f"{[i.name for i in model.inputs]}")
    variables: tuple[Input | Param, ...] = (*model.inputs, *model.params)
    for p in model.params:
        if p.type.dtype != INT32:
            raise InvalidError("dtype", f"param {p.name!r} is {p.type.dtype}; Cortex params are int8/int32")
    for v in model.inputs:
        if v.type.dtype == INT32 and v.type.precision is None:
            raise InvalidError("precision", f"input {v.name!r} is raw int32; a Cortex int32 variable has a precision")
    out_dtypes: list[str] = []
    for instr in model.instrs:
        where = f"instruction {instr.op} {instr.name!r}"
        if instr.declared_dtypes is not None:
            out_dtypes.extend(instr.declared_dtypes)
        elif types is not None:
            out_dtypes.extend(types[t].dtype for t in instr.outputs)
        elif OP_BY_NAME[instr.op].dtypes is None:  # an int32-only op: known without verification
            out_dtypes.extend([INT32] * len(instr.outputs))
        else:
            raise ValueError(f"{where} declares no output dtypes; pass the verified tensor types")
    nodes = [CortexNode(True, k, variable_attrs_text(v.type)) for k, v in enumerate(variables)]
    nodes += [CortexNode(False, k, operator_attrs_text(instr.attrs), instr.op, str(len(instr.inputs)),
                         str(len(instr.outputs)), "0")
              for k, instr in enumerate(model.instrs)]
    row_ptr = [0]
    for node in nodes:
        row_ptr.append(row_ptr[-1] + (1 if node.variable else len(model.instrs[node.ref].outputs)))
    entries = row_ptr[-1]
    return CortexLayout(
        version=CANONICAL_VERSION,
        nodes=tuple(nodes),
        arg_nodes=tuple(range(len(variables))),
        node_row_ptr=tuple(row_ptr),
        precision=tuple(-1 if v.type.precision is None else v.type.precision for v in variables)
        + (-1,) * (entries - len(variables)),
        storage_id=tuple(range(entries)),
        dltype=tuple(v.type.dtype for v in variables) + tuple(out_dtypes),
        device_index=False,
        dtype=None,
        params=tuple((p.name, 8 if _fits_int8(p.value) else 32) for p in model.params),
        fits=(model.inputs, model.params, model.instrs, model.outputs),
    )


def _fits_int8(value: np.ndarray) -> bool:
    """Stored as int8 when every value is in [-127, 127] (-128 is outside every precision)."""
    return value.size == 0 or (int(value.min()) >= -127 and int(value.max()) <= 127)


def _graph_object(model: Model, layout: CortexLayout, types: Sequence[TensorType] | None) -> dict[str, Any]:
    variables: tuple[Input | Param, ...] = (*model.inputs, *model.params)
    position: dict[int, tuple[int, int]] = {}  # tensor id -> (node id, output index)

    def entry(t: int, where: str) -> list[int]:
        if t not in position:
            raise InvalidError("graph", f"{where} reads tensor {t}, which is not defined before it")
        return [*position[t], 0]

    nodes: list[dict[str, Any]] = []
    shapes: list[list[int]] = []
    for nid, node in enumerate(layout.nodes):
        if node.variable:
            var = variables[node.ref]
            position[node.ref] = (nid, 0)
            nodes.append({"op": "null", "name": var.name, "inputs": []})
            shapes.append(list(var.type.shape))
            continue
        instr = model.instrs[node.ref]
        where = f"instruction {node.ref} ({instr.op} {instr.name!r})"
        ins = [entry(t, where) for t in instr.inputs]
        for k, t in enumerate(instr.outputs):
            position[t] = (nid, k)
        nodes.append({"op": "cvm_op", "name": instr.name,
                      "attrs": {"flatten_data": node.flatten_data, "func_name": node.func_name,
                                "num_inputs": node.num_inputs, "num_outputs": node.num_outputs},
                      "inputs": ins})
        shapes.extend(list(s) for s in _output_shapes(instr, types, where))
    attrs: dict[str, Any] = {"op_attrs": ["list_str", [n.op_attrs for n in layout.nodes]]}
    if layout.dltype is not None:
        attrs["dltype"] = ["list_str", list(layout.dltype)]
    attrs["precision"] = ["list_int", list(layout.precision)]
    attrs["storage_id"] = ["list_int", list(layout.storage_id)]
    attrs["shape"] = ["list_shape", shapes]
    if layout.device_index:
        attrs["device_index"] = ["list_int", []]
    if layout.dtype is not None:
        attrs["dtype"] = ["list_int", list(layout.dtype)]
    return {
        "nodes": nodes,
        "arg_nodes": list(layout.arg_nodes),
        "node_row_ptr": list(layout.node_row_ptr),
        "heads": [entry(t, f"output {k}") for k, t in enumerate(model.outputs)],
        "attrs": attrs,
        "version": layout.version,
    }


def _output_shapes(instr: Instr, types: Sequence[TensorType] | None, where: str) -> tuple[Shape, ...]:
    if instr.declared_shapes is not None:
        return instr.declared_shapes
    if types is None:
        raise ValueError(f"{where} declares no output shapes; pass the verified tensor types")
    return tuple(types[t].shape for t in instr.outputs)


def _params_bytes(model: Model, layout: CortexLayout) -> bytes | None:
    if layout.params is None:
        return None
    by_name = {p.name: p for p in model.params}
    arrays = []
    for name, bits in layout.params:
        param = by_name[name]
        value = param.value
        raw = layout.data_raw
        if (name == DATA and raw is not None and param.type.precision is not None
                and np.array_equal(clip_to_precision(raw, param.type.precision), value)):
            value = raw  # the file held 'data' before the runtime's clip
        arrays.append((name, np.asarray(value), bits))
    return write_params(arrays)
