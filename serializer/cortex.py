"""The Cortex interchange format: graph JSON + params binary <-> Model.

The format is the Cortex runtime's (cvm-runtime, CvmRuntime::Load,
PrepareGraphWithVersion, LoadParams), described in
shared/cvm-reference/README.md.  Reading is strict where the runtime is lax:
exact key sets at every level, exact JSON types (a bool is not an int), every
count and length in the params binary checked against the bytes left before
anything is allocated.  Verification (shape and precision inference, cost)
is not done here: ``cvmvm.vm.verify`` does it on the Model this returns.

Error codes: bytes and structure that do not decode are ``malformed.graph_json``,
``malformed.params`` and ``malformed.attr``; a well-formed file that breaks a
rule is ``invalid.*`` (``graph`` for topology, names and storage, ``op``,
``attr``, ``shape``, ``precision``, ``dtype``, ``param``); sizes over the ISA
limits are ``limit.rank/dim/size``, files over the byte budgets ``limit.bytes``.

A model read here keeps its file layout (node order, func_name suffixes, raw
op_attrs strings, storage ids, declared precisions, params order and widths)
in a ``CortexLayout`` in ``Model.source``, so ``write_cortex`` reproduces the
same graph object and the same params bytes.  Any other model is written in
one canonical form (``write_cortex`` without a layout).
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from isa.attrs import BOOL, INT, INT32_MAX, INT32_MIN, INTS, OPT_INT, STR, attr_fields, parse_attrs
from isa.errors import InputError, InvalidError, LimitError, MalformedError
from isa.spec import OpDef
from isa.table import OP_BY_NAME
from isa.types import (DTYPES, INT32, MAX_PRECISION, MAX_RANK, MIN_PRECISION, Shape, TensorType, check_shape,
                       clip_to_precision, precision_bound, shape_size)
from serializer import limits
from serializer.model import Input, Instr, Model, Param

VERSIONS = ("cvm_1.0.0", "cvm_1.1.0")
CANONICAL_VERSION = "cvm_1.0.0"
DATA = "data"  # the one variable set at run time; every other variable comes from params

PARAMS_MAGIC = 0xF7E58D4F05049CB7
ARRAY_MAGIC = 0xDD5E40F096B4A13F
DEVICE_CPU = 1
TYPE_CODE_INT = 0
ARRAY_HEADER = "<QQiiiBBH"  # magic, reserved, device type, device id, ndim, type code, bits, lanes
UINT32_MAX = (1 << 32) - 1

# The runtime's whitelist of ops whose output may share a storage id with an
# input, verbatim.  It spells negative "nagetive", so negative is NOT
# whitelisted (reference case error/negative/graph-storage-reuse-negative-1).
STORAGE_REUSE_OPS = frozenset({
    "flatten", "relu", "expand_dims", "reshape", "squeeze", "abs", "cvm_precision", "elemwise_add",
    "elemwise_sub", "nagetive", "clip", "cvm_clip", "cvm_right_shift", "cvm_left_shift",
})

# Key sets, each in the order the writer emits (the order of the reference files).
TOP_KEYS = ("nodes", "arg_nodes", "node_row_ptr", "heads", "attrs", "version")
VARIABLE_KEYS = ("op", "name", "inputs")
OPERATOR_KEYS = ("op", "name", "attrs", "inputs")
NODE_ATTR_KEYS = ("flatten_data", "func_name", "num_inputs", "num_outputs")
GRAPH_ATTR_TAGS = {
    "op_attrs": "list_str", "dltype": "list_str", "precision": "list_int", "storage_id": "list_int",
    "shape": "list_shape", "device_index": "list_int", "dtype": "list_int",
}
VARIABLE_ATTR_KEYS = ("precision", "shape")

# The only string escapes the runtime's JSON reader knows (utils/json.h
# ReadString); it aborts on any other, \u and \/ included.
RUNTIME_ESCAPES = frozenset('rn\\t"')
_ESCAPE = re.compile(r"\\(.?)", re.S)
_WRITE_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_OP_SUFFIX = re.compile(r"_[0-9]*\Z")
_C_SPACE = " \t\n\v\f\r"  # C isspace() in the "C" locale


# -- the layout a Cortex file has beyond the Model ---------------------------

@dataclass(frozen=True)
class CortexNode:
    """One graph node as the file spells it, beyond what the Model holds."""

    variable: bool
    ref: int        # a variable's tensor id, or an operator's instruction index
    op_attrs: str   # the raw op_attrs JSON string
    func_name: str = ""      # operators only, a `_<digits>` suffix included
    num_inputs: str = ""     # operators only, kept verbatim (the runtime recomputes them)
    num_outputs: str = ""
    flatten_data: str = ""


@dataclass(frozen=True)
class CortexLayout:
    """Everything a Cortex file holds that the Model does not; stored in Model.source."""

    version: str
    nodes: tuple[CortexNode, ...]
    arg_nodes: tuple[int, ...]
    node_row_ptr: tuple[int, ...]
    precision: tuple[int, ...]          # per entry, as declared (operators may say -1)
    storage_id: tuple[int, ...]
    dltype: tuple[str, ...] | None      # None: the key is absent (allowed in cvm_1.1.0)
    device_index: bool                  # the (necessarily empty) key is present
    dtype: tuple[int, ...] | None       # ignored by the runtime, kept verbatim
    params: tuple[tuple[str, int], ...] | None  # params file order: (name, bits); None: no params file
    # The model this layout describes: (inputs, params, instrs, outputs).
    fits: tuple[Any, ...] = field(compare=False, repr=False)
    # 'data' given through the params file, before the runtime's clip.
    data_raw: np.ndarray | None = field(default=None, compare=False, repr=False)


# -- reading ------------------------------------------------------------------

def read_cortex(graph: Any, params: Any = None) -> Model:
    """Decode a Cortex model.

    ``graph``: a dict (parsed JSON), JSON text (a str starting with '{'),
    UTF-8 bytes, or a path.  ``params``: bytes, a path, or None (no params
    file).  Raises CvmError for anything the format does not allow.
    """
    doc = _load_json(_graph_bytes(graph), "graph_json", "graph JSON") if not isinstance(graph, dict) else graph
    blob = None if params is None else _source_bytes(params, limits.MAX_PARAMS_BYTES, "params")

    top = _object(doc, "graph", TOP_KEYS)
    version = _str(top["version"], "version")
    if version not in VERSIONS:
        raise MalformedError("graph_json", f"version {version!r} is not one of {', '.join(VERSIONS)}")
    nodes = [_node(raw, nid) for nid, raw in enumerate(_list(top["nodes"], "nodes"))]
    heads = [_entry(e, f"heads[{k}]") for k, e in enumerate(_list(top["heads"], "heads"))]
    arg_nodes = [_uint32(v, f"arg_nodes[{k}]") for k, v in enumerate(_list(top["arg_nodes"], "arg_nodes"))]
    row_ptr = [_uint32(v, f"node_row_ptr[{k}]") for k, v in enumerate(_list(top["node_row_ptr"], "node_row_ptr"))]
    attrs = _graph_attrs(top["attrs"], version)

    counts = [1 if n.op is None else len(n.op.outputs) for n in nodes]
    first_entry = [0]
    for c in counts:
        first_entry.append(first_entry[-1] + c)
    num_entries = first_entry[-1]
    variables = [nid for nid, n in enumerate(nodes) if n.op is None]
    if version == "cvm_1.0.0":
        if row_ptr != first_entry:
            raise InvalidError("graph", f"node_row_ptr {row_ptr} must be {first_entry} (cvm_1.0.0)")
        if arg_nodes != variables:
            raise InvalidError("graph", f"arg_nodes {arg_nodes} must be the variable nodes {variables} (cvm_1.0.0)")

    _check_counts(attrs, len(nodes), num_entries)
    _check_topology(nodes, heads, counts)
    _check_variable_names(nodes)
    shapes = [_shape(s, f"attrs.shape[{eid}]") for eid, s in enumerate(attrs["shape"])]
    dltypes = list(attrs["dltype"]) if "dltype" in attrs else [INT32] * num_entries
    for eid, dt in enumerate(dltypes):
        if dt not in DTYPES:
            raise InvalidError("dtype", f"attrs.dltype[{eid}] is {dt!r}; not one of {', '.join(DTYPES)}")
    _check_precisions(nodes, attrs["precision"], first_entry, dltypes)
    _check_storage(nodes, attrs["storage_id"], first_entry)

    records: list[Any] = []
    for nid, (node, text) in enumerate(zip(nodes, attrs["op_attrs"])):
        where = f"node {nid} ({node.name})"
        if node.op is None:
            _check_variable_attrs(text, shapes[first_entry[nid]], attrs["precision"][first_entry[nid]], where)
        else:
            records.append(_operator_attrs(node.op, text, where))

    arrays = None if blob is None else _read_params(blob)
    return _build_model(version, nodes, heads, attrs, arg_nodes, row_ptr, first_entry, shapes, dltypes, records,
                        arrays)


@dataclass(frozen=True)
class _Node:
    name: str
    op: OpDef | None                      # None: a variable
    inputs: tuple[tuple[int, int], ...]   # (node id, output index)
    attrs: dict[str, str]                 # the node's own "attrs" (operators only)


@dataclass(frozen=True)
class _Array:
    bits: int
    values: np.ndarray  # int32, read-only, in its declared shape


def _graph_bytes(graph: Any) -> bytes:
    if isinstance(graph, str) and graph.lstrip().startswith("{"):
        try:
            data = graph.encode("utf-8")
        except UnicodeEncodeError as e:
            raise MalformedError("graph_json", f"graph JSON text is not valid Unicode ({e.reason})") from None
        _check_size(len(data), limits.MAX_GRAPH_JSON_BYTES, "graph JSON")
        return data
    return _source_bytes(graph, limits.MAX_GRAPH_JSON_BYTES, "graph JSON")


def _source_bytes(source: Any, limit: int, what: str) -> bytes:
    """Bytes given directly, or read from a path, bounded by ``limit``."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    elif isinstance(source, (str, os.PathLike)):
        try:
            with open(source, "rb") as f:
                _check_size(os.fstat(f.fileno()).st_size, limit, f"{what} file {source}")
                data = f.read(limit + 1)
        except OSError as e:
            raise InputError("file", f"{what} file {source}: {e.strerror or e}") from None
    else:
        raise TypeError(f"{what}: expected bytes or a path, got {type(source).__name__}")
    _check_size(len(data), limit, what)
    return data


def _check_size(size: int, limit: int, what: str) -> None:
    if size > limit:
        raise LimitError("bytes", f"{what}: {size} bytes exceed the limit of {limit}")


def _load_json(data: bytes, reason: str, what: str) -> Any:
    """Strict JSON: UTF-8, no duplicate keys, no NaN/Infinity, only the runtime's string escapes."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedError(reason, f"{what} is not UTF-8 ({e.reason} at byte {e.start})") from None
    return _parse_json(text, reason, what)


def _parse_json(text: str, reason: str, what: str) -> Any:
    for m in _ESCAPE.finditer(text):
        if m.group(1) not in RUNTIME_ESCAPES:
            raise MalformedError(reason, f"{what}: string escape {m.group(0)!r} at offset {m.start()} is not "
                                         "one the Cortex runtime reads (\\r \\n \\t \\\\ \\\")")

    def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for key, value in pairs:
            if key in obj:
                raise MalformedError(reason, f"{what}: key {key!r} appears twice in one object")
            obj[key] = value
        return obj

    def no_constant(name: str) -> Any:
        raise MalformedError(reason, f"{what}: {name} is not a JSON value")

    try:
        return json.loads(text, object_pairs_hook=unique_keys, parse_constant=no_constant)
    except (ValueError, RecursionError) as e:
        raise MalformedError(reason, f"{what} does not parse: {e}") from None


# -- structure: keys and JSON types (malformed.graph_json) -------------------

def _object(value: Any, where: str, required: Sequence[str], optional: Sequence[str] = ()) -> dict[str, Any]:
    if type(value) is not dict:
        raise MalformedError("graph_json", f"{where} must be a JSON object, got {type(value).__name__}")
    for key in value:
        if key not in required and key not in optional:
            raise MalformedError("graph_json", f"{where}: unknown key {key!r}")
    for key in required:
        if key not in value:
            raise MalformedError("graph_json", f"{where}: missing key {key!r}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if type(value) is not list:
        raise MalformedError("graph_json", f"{where} must be a JSON array, got {type(value).__name__}")
    return value


def _str(value: Any, where: str) -> str:
    if type(value) is not str:
        raise MalformedError("graph_json", f"{where} must be a string, got {type(value).__name__}")
    return value


def _int(value: Any, where: str) -> int:
    if type(value) is not int:  # not isinstance: True is an int to isinstance
        raise MalformedError("graph_json", f"{where} must be an integer, got {value!r}")
    return value


def _uint32(value: Any, where: str) -> int:
    v = _int(value, where)
    if not 0 <= v <= UINT32_MAX:
        raise MalformedError("graph_json", f"{where}={v} must be in [0, 2^32 - 1]")
    return v


def _entry(value: Any, where: str) -> tuple[int, int]:
    """A node entry [node id, output index, version]; version is always 0 in Cortex graphs."""
    items = _list(value, where)
    if len(items) != 3:
        raise MalformedError("graph_json", f"{where} must be [node id, output index, version], got {items!r}")
    nid, idx, version = (_int(v, where) for v in items)
    if nid < 0 or idx < 0:
        raise InvalidError("graph", f"{where}={items} refers to a negative node or output")
    if version != 0:
        raise InvalidError("graph", f"{where}={items}: entry version must be 0")
    return nid, idx


def _node(raw: Any, nid: int) -> _Node:
    where = f"nodes[{nid}]"
    kind = _object(raw, where, ("op",), OPERATOR_KEYS)["op"]
    if kind == "null":
        _object(raw, where, VARIABLE_KEYS)
    elif kind == "cvm_op":
        _object(raw, where, OPERATOR_KEYS)
    else:
        raise MalformedError("graph_json", f"{where}.op must be \"null\" or \"cvm_op\", got {kind!r}")
    name = _str(raw["name"], f"{where}.name")
    inputs = tuple(_entry(e, f"{where}.inputs[{k}]") for k, e in enumerate(_list(raw["inputs"], f"{where}.inputs")))
    if kind == "null":
        if inputs:
            raise InvalidError("graph", f"{where} ({name}) is a variable but lists inputs")
        return _Node(name, None, (), {})
    node_attrs = _object(raw["attrs"], f"{where}.attrs", NODE_ATTR_KEYS)
    for key in NODE_ATTR_KEYS:
        _str(node_attrs[key], f"{where}.attrs.{key}")
    func_name = node_attrs["func_name"]
    op = OP_BY_NAME.get(op_name(func_name))
    if op is None:
        raise InvalidError("op", f"{where} ({name}): unknown op {func_name!r}")
    return _Node(name, op, inputs, node_attrs)


def op_name(func_name: str) -> str:
    """The op a func_name names: a trailing `_<digits>` is dropped (relu_17 -> relu), as the runtime does."""
    return _OP_SUFFIX.sub("", func_name, count=1)


def _graph_attrs(raw: Any, version: str) -> dict[str, list[Any]]:
    required = ["shape", "precision", "op_attrs", "storage_id"]
    if version == "cvm_1.0.0":
        required.append("dltype")
    obj = _object(raw, "attrs", required, tuple(GRAPH_ATTR_TAGS))
    out: dict[str, list[Any]] = {}
    for key, value in obj.items():
        where = f"attrs.{key}"
        pair = _list(value, where)
        if len(pair) != 2 or pair[0] != GRAPH_ATTR_TAGS[key]:
            raise MalformedError("graph_json", f"{where} must be [\"{GRAPH_ATTR_TAGS[key]}\", [...]]")
        items = _list(pair[1], f"{where}[1]")
        if key == "shape":
            for k, s in enumerate(items):
                for d in _list(s, f"{where}[{k}]"):
                    _int(d, f"{where}[{k}]")
        elif GRAPH_ATTR_TAGS[key] == "list_int":
            for k, v in enumerate(items):
                _int(v, f"{where}[{k}]")
        else:
            for k, v in enumerate(items):
                _str(v, f"{where}[{k}]")
        out[key] = items
    return out


# -- graph rules (invalid.*, limit.*) -----------------------------------------

def _check_counts(attrs: dict[str, list[Any]], num_nodes: int, num_entries: int) -> None:
    for key in ("shape", "precision", "storage_id", "dltype"):
        if key in attrs and len(attrs[key]) != num_entries:
            raise InvalidError("graph", f"attrs.{key} has {len(attrs[key])} entries; the graph has {num_entries}")
    if len(attrs["op_attrs"]) != num_nodes:
        raise InvalidError("graph", f"attrs.op_attrs has {len(attrs['op_attrs'])} entries; "
                                    f"the graph has {num_nodes} nodes")
    if attrs.get("device_index"):
        raise InvalidError("graph", "attrs.device_index must be empty")


def _check_topology(nodes: list[_Node], heads: list[tuple[int, int]], counts: list[int]) -> None:
    for nid, node in enumerate(nodes):
        for src, idx in node.inputs:
            if src >= nid:
                raise InvalidError("graph", f"node {nid} ({node.name}) reads node {src}: nodes must be in "
                                            "topological order")
            if idx >= counts[src]:
                raise InvalidError("graph", f"node {nid} ({node.name}) reads output {idx} of node {src}, "
                                            f"which has {counts[src]}")
    if not heads:
        raise InvalidError("graph", "heads is empty: the graph has no output")
    for k, (src, idx) in enumerate(heads):
        if src >= len(nodes) or idx >= counts[src]:
            raise InvalidError("graph", f"heads[{k}] = ({src}, {idx}) is not an entry of the graph")


def _check_variable_names(nodes: list[_Node]) -> None:
    seen: set[str] = set()
    for nid, node in enumerate(nodes):
        if node.op is None:
            if node.name in seen:
                raise InvalidError("graph", f"node {nid}: variable name {node.name!r} is used twice")
            seen.add(node.name)


def _shape(dims: list[int], where: str) -> Shape:
    check_shape(dims, where)
    return tuple(dims)


def _check_precisions(nodes: list[_Node], precision: list[int], first_entry: list[int], dltypes: list[str]) -> None:
    for nid, node in enumerate(nodes):
        for eid in range(first_entry[nid], first_entry[nid + 1]):
            p = precision[eid]
            if node.op is None and dltypes[eid] != INT32:
                # max_pool's other dtypes carry no precision (MAXPOOL.md)
                if p != -1:
                    raise InvalidError("precision", f"variable {node.name!r}: a {dltypes[eid]} variable has no "
                                                    f"precision (-1), got {p}")
            elif node.op is None and not MIN_PRECISION <= p <= MAX_PRECISION:
                raise InvalidError("precision", f"variable {node.name!r}: precision {p} must be in [1, 32]")
            if node.op is not None and p != -1 and not MIN_PRECISION <= p <= MAX_PRECISION:
                raise InvalidError("precision", f"node {nid} ({node.name}): declared precision {p} must be -1 "
                                                "or in [1, 32]")


def _check_storage(nodes: list[_Node], storage: list[int], first_entry: list[int]) -> None:
    for eid, sid in enumerate(storage):
        if not 0 <= sid <= INT32_MAX:
            raise InvalidError("graph", f"attrs.storage_id[{eid}]={sid} must be in [0, 2^31 - 1]")
    for nid, node in enumerate(nodes):
        if node.op is None or node.op.name in STORAGE_REUSE_OPS:
            continue
        used = {storage[first_entry[src] + idx] for src, idx in node.inputs}
        for eid in range(first_entry[nid], first_entry[nid + 1]):
            if storage[eid] in used:
                raise InvalidError("graph", f"node {nid} ({node.name}): {node.op.name} may not write storage "
                                            f"{storage[eid]}, which one of its inputs uses")


# -- op_attrs strings ---------------------------------------------------------

def _attr_object(text: str, where: str) -> dict[str, str]:
    """One op_attrs entry: a JSON object whose values are all strings."""
    obj = _parse_json(text, "attr", f"{where} op_attrs")
    if type(obj) is not dict:
        raise MalformedError("attr", f"{where}: op_attrs must be a JSON object, got {text!r}")
    for key, value in obj.items():
        if type(value) is not str:
            raise MalformedError("attr", f"{where}: op_attrs value of {key!r} must be a string, got {value!r}")
    return obj


def _operator_attrs(op: OpDef, text: str, where: str) -> Any:
    raw = _attr_object(text, where)
    kinds = {f.name: f.kind for f in attr_fields(op.attrs)}
    typed = {key: decode_attr(kinds[key], value, f"{where} attribute {key}") if key in kinds else value
             for key, value in raw.items()}
    try:
        return parse_attrs(op.attrs, typed, fill_defaults=True)
    except InvalidError as e:
        raise InvalidError("attr", f"{where}: {e.message}") from None


def _check_variable_attrs(text: str, shape: Shape, precision: int, where: str) -> None:
    """A variable's op_attrs are informational, but what they say must agree with attrs."""
    raw = _attr_object(text, where)
    for key in raw:
        if key not in VARIABLE_ATTR_KEYS:
            raise InvalidError("attr", f"{where}: a variable's op_attrs may hold only precision and shape, "
                                       f"not {key!r}")
    if "shape" in raw and decode_attr(INTS, raw["shape"], f"{where} shape") != shape:
        raise InvalidError("shape", f"{where}: op_attrs shape {raw['shape']!r} differs from attrs.shape {shape}")
    if "precision" in raw and decode_attr(INT, raw["precision"], f"{where} precision") != precision:
        raise InvalidError("precision", f"{where}: op_attrs precision {raw['precision']!r} differs from "
                                        f"attrs.precision {precision}")


def decode_attr(kind: str, text: str, where: str) -> Any:
    """An attribute string -> its typed value, accepting what the runtime's parameter parser accepts.

    INT: C++ ``istream >> int`` (spaces, an optional sign, digits, trailing
    spaces).  BOOL: true/false/1/0 in any case, nothing else.  INTS: a Tuple
    ("(1, 2)", "[1, 2]", "(1,)", "()", or one bare integer).  OPT_INT: "None"
    or an integer (an "L" suffix allowed).  STR: the string itself.
    Integers outside int32 do not parse.
    """
    value: Any = None
    if kind == STR:
        return text
    if kind == BOOL:
        value = {"true": True, "false": False, "1": True, "0": False}.get(text.lower()) if text.isascii() else None
    elif kind == INT:
        value = _whole(text, _scan_int(text, 0))
    elif kind == OPT_INT:
        if text.startswith("None") and _only_space(text, 4):
            return None
        scanned = _scan_int(text, 0)
        if scanned is not None and scanned[1] < len(text) and text[scanned[1]] == "L":
            scanned = (scanned[0], scanned[1] + 1)
        value = _whole(text, scanned)
    elif kind == INTS:
        value = _whole(text, _scan_tuple(text))
    if value is None:
        raise MalformedError("attr", f"{where}={text!r} is not a valid {kind}")
    return value


def _only_space(text: str, i: int) -> bool:
    return all(c in _C_SPACE for c in text[i:])


def _whole(text: str, scanned: tuple[Any, int] | None) -> Any:
    """The scanned value if only spaces follow it (dmlc's FieldEntry check), else None."""
    if scanned is None or not _only_space(text, scanned[1]):
        return None
    return scanned[0]


def _scan_int(text: str, i: int) -> tuple[int, int] | None:
    """``istream >> int`` from position i: (value, end), or None."""
    n = len(text)
    while i < n and text[i] in _C_SPACE:
        i += 1
    start = i
    if i < n and text[i] in "+-":
        i += 1
    digits = i
    while i < n and "0" <= text[i] <= "9":
        i += 1
    if i == digits:
        return None
    value = int(text[start:i])
    return (value, i) if INT32_MIN <= value <= INT32_MAX else None


def _scan_tuple(text: str) -> tuple[tuple[int, ...], int] | None:
    """The runtime's ``operator>>(istream, Tuple)`` (include/cvm/tuple.h), step by step."""
    n, i = len(text), 0
    while True:
        if i < n and (text[i] == "-" or "0" <= text[i] <= "9"):
            one = _scan_int(text, i)
            return None if one is None else ((one[0],), one[1])
        if i >= n:
            return None
        ch, i = text[i], i + 1
        if ch in "([":
            break
        if ch not in _C_SPACE:
            return None
    while i < n and text[i] in _C_SPACE:
        i += 1
    if i < n and text[i] in ")]":
        return (), i + 1
    values: list[int] = []
    while True:
        scanned = _scan_int(text, i)
        if scanned is None:
            return None
        values.append(scanned[0])
        i = scanned[1]
        while i < n and text[i] in _C_SPACE:
            i += 1
        if i >= n:
            return None
        ch, i = text[i], i + 1
        if ch == "L":
            if i >= n:
                return None
            ch, i = text[i], i + 1
        if ch == ",":
            while i < n and text[i] in _C_SPACE:
                i += 1
            if i < n and text[i] in ")]":
                return tuple(values), i + 1
        elif ch in ")]":
            return tuple(values), i
        else:
            return None


# -- the params binary --------------------------------------------------------

class _Cursor:
    """Bounded reads: every length is checked against the bytes left before it is used."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    @property
    def left(self) -> int:
        return len(self.data) - self.pos

    def take(self, size: int, what: str) -> int:
        if size > self.left:
            raise MalformedError("params", f"truncated: {what} needs {size} bytes at offset {self.pos}, "
                                           f"{self.left} left")
        start = self.pos
        self.pos += size
        return start

    def unpack(self, fmt: str, what: str) -> tuple[Any, ...]:
        return struct.unpack_from(fmt, self.data, self.take(struct.calcsize(fmt), what))


def _read_params(blob: bytes) -> dict[str, _Array]:
    """name -> array, in file order."""
    cur = _Cursor(blob)
    magic, reserved = cur.unpack("<QQ", "the file header")
    if magic != PARAMS_MAGIC:
        raise MalformedError("params", f"file magic {magic:#018x} is not {PARAMS_MAGIC:#018x}")
    if reserved != 0:
        raise MalformedError("params", f"reserved word {reserved} must be 0")
    (count,) = cur.unpack("<Q", "the name count")
    if count > cur.left // 8:  # every name takes at least its 8-byte length
        raise MalformedError("params", f"name count {count} exceeds what the {cur.left} bytes left can hold")
    names: list[str] = []
    for k in range(count):
        (length,) = cur.unpack("<Q", f"the length of name {k}")
        start = cur.take(length, f"name {k}")
        try:
            names.append(blob[start:start + length].decode("utf-8"))
        except UnicodeDecodeError:
            raise MalformedError("params", f"name {k} is not UTF-8") from None
    (num_arrays,) = cur.unpack("<Q", "the array count")
    if num_arrays != count:
        raise MalformedError("params", f"{num_arrays} arrays for {count} names")
    arrays: dict[str, _Array] = {}
    for name in names:
        if name in arrays:
            raise MalformedError("params", f"param {name!r} is given twice")
        arrays[name] = _read_array(cur, name)
    if cur.left:
        raise MalformedError("params", f"{cur.left} trailing bytes after the last array")
    return arrays


def _read_array(cur: _Cursor, name: str) -> _Array:
    what = f"array {name!r}"
    magic, reserved, device, device_id, ndim, code, bits, lanes = cur.unpack(ARRAY_HEADER, f"the {what} header")
    if magic != ARRAY_MAGIC:
        raise MalformedError("params", f"{what}: magic {magic:#018x} is not {ARRAY_MAGIC:#018x}")
    if reserved != 0:
        raise MalformedError("params", f"{what}: reserved word {reserved} must be 0")
    if device != DEVICE_CPU or device_id != 0:
        raise MalformedError("params", f"{what}: device ({device}, {device_id}) must be the CPU (1, 0)")
    if code != TYPE_CODE_INT or bits not in (8, 32) or lanes != 1:
        raise MalformedError("params", f"{what}: type (code {code}, {bits} bits, {lanes} lanes) must be "
                                       "int8 or int32")
    if not 1 <= ndim <= MAX_RANK:
        raise MalformedError("params", f"{what}: ndim {ndim} must be in [1, {MAX_RANK}]")
    shape = cur.unpack(f"<{ndim}q", f"the {what} shape")
    if any(d < 1 for d in shape):
        raise MalformedError("params", f"{what}: shape {shape} has a dimension < 1")
    (nbytes,) = cur.unpack("<q", f"the {what} byte size")
    count = shape_size(shape)
    if nbytes != count * bits // 8:
        raise MalformedError("params", f"{what}: byte size {nbytes} must be {count} x {bits // 8}")
    start = cur.take(nbytes, f"the {what} data")
    raw = np.frombuffer(cur.data, dtype=np.dtype("i1") if bits == 8 else np.dtype("<i4"), count=count, offset=start)
    # int8 is sign-extended; little-endian int32 is already the native int32 on the hosts we run on (no copy).
    values = raw.astype(np.int32, copy=False).reshape(shape)
    values.flags.writeable = False
    return _Array(bits, values)


# -- the Model ----------------------------------------------------------------

def _build_model(version: str, nodes: list[_Node], heads: list[tuple[int, int]], attrs: dict[str, list[Any]],
                 arg_nodes: list[int], row_ptr: list[int], first_entry: list[int], shapes: list[Shape],
                 dltypes: list[str], records: list[Any], arrays: dict[str, _Array] | None) -> Model:
    given = arrays or {}
    var_names = {n.name for n in nodes if n.op is None}
    for name in given:
        if name not in var_names:
            raise InvalidError("graph", f"the params file gives {name!r}, which is not a variable of the graph")
    precision = attrs["precision"]

    inputs: list[Input] = []
    params: list[Param] = []
    input_nids: list[int] = []
    param_nids: list[int] = []
    data_raw = None
    for nid, node in enumerate(nodes):
        if node.op is not None:
            continue
        dtype = dltypes[first_entry[nid]]
        t = TensorType(shapes[first_entry[nid]], precision[first_entry[nid]] if dtype == INT32 else None, dtype)
        if node.name not in given:
            if node.name != DATA:
                raise InvalidError("graph", f"variable {node.name!r} is not given by the params file")
            inputs.append(Input(node.name, t))
            input_nids.append(nid)
            continue
        array = given[node.name]
        if dtype != INT32:
            raise InvalidError("dtype", f"param {node.name!r} is declared {dtype}; Cortex params are int8/int32")
        if array.values.shape != t.shape:
            raise InvalidError("shape", f"param {node.name!r}: the params file gives shape {array.values.shape}, "
                                        f"the graph declares {t.shape}")
        if node.name == DATA:
            # The runtime loads 'data' from a params file like set_input: clipped, not checked.
            data_raw = array.values
            value = clip_to_precision(array.values, t.precision)
            value.flags.writeable = False
        else:
            bound = precision_bound(t.precision)
            lo, hi = int(array.values.min()), int(array.values.max())
            if lo < -bound or hi > bound:
                raise InvalidError("param", f"param {node.name!r}: value {lo if lo < -bound else hi} is outside "
                                            f"precision {t.precision} (+-{bound})")
            value = array.values
        params.append(Param(node.name, t, value))
        param_nids.append(nid)

    tensor_of_node = {nid: k for k, nid in enumerate(input_nids + param_nids)}  # inputs, then params
    next_id = len(inputs) + len(params)
    instrs: list[Instr] = []
    layout_nodes: list[CortexNode] = []
    for nid, (node, text) in enumerate(zip(nodes, attrs["op_attrs"])):
        if node.op is None:
            layout_nodes.append(CortexNode(True, tensor_of_node[nid], text))
            continue
        tensor_of_node[nid] = next_id
        count = len(node.op.outputs)
        instrs.append(Instr(node.op.name, records[len(instrs)],
                            tuple(tensor_of_node[src] + idx for src, idx in node.inputs),
                            tuple(range(next_id, next_id + count)), node.name,
                            tuple(shapes[first_entry[nid]:first_entry[nid + 1]]),
                            tuple(dltypes[first_entry[nid]:first_entry[nid + 1]])))
        layout_nodes.append(CortexNode(False, len(instrs) - 1, text, node.attrs["func_name"],
                                       node.attrs["num_inputs"], node.attrs["num_outputs"],
                                       node.attrs["flatten_data"]))
        next_id += count
    outputs = tuple(tensor_of_node[src] + idx for src, idx in heads)

    model_inputs, model_params, model_instrs = tuple(inputs), tuple(params), tuple(instrs)
    layout = CortexLayout(
        version=version,
        nodes=tuple(layout_nodes),
        arg_nodes=tuple(arg_nodes),
        node_row_ptr=tuple(row_ptr),
        precision=tuple(precision),
        storage_id=tuple(attrs["storage_id"]),
        dltype=tuple(attrs["dltype"]) if "dltype" in attrs else None,
        device_index="device_index" in attrs,
        dtype=tuple(attrs["dtype"]) if "dtype" in attrs else None,
        params=None if arrays is None else tuple((name, a.bits) for name, a in arrays.items()),
        fits=(model_inputs, model_params, model_instrs, outputs),
        data_raw=data_raw,
    )
    return Model(model_inputs, model_params, model_instrs, outputs, source=layout)


# -- writing ------------------------------------------------------------------

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


def json_text(value: Any) -> str:
    """JSON the Cortex runtime reads back: ", " and ": " separators, keys in the given order, no \\u escapes."""
    if type(value) is dict:
        return "{" + ", ".join(f"{_json_string(k)}: {json_text(v)}" for k, v in value.items()) + "}"
    if type(value) in (list, tuple):
        return "[" + ", ".join(json_text(v) for v in value) + "]"
    if type(value) is str:
        return _json_string(value)
    if type(value) is int:
        return str(value)
    raise TypeError(f"a Cortex graph holds no {type(value).__name__} ({value!r})")


def _json_string(s: str) -> str:
    for c in s:
        if c < " " and c not in _WRITE_ESCAPES:
            raise InvalidError("graph", f"string {s!r} holds control character {c!r}, which Cortex JSON cannot carry")
    return '"' + "".join(_WRITE_ESCAPES.get(c, c) for c in s) + '"'


def _in_order(obj: dict[str, Any], order: Sequence[str], what: str) -> dict[str, Any]:
    unknown = [k for k in obj if k not in order]
    if unknown:
        raise ValueError(f"{what}: key {unknown[0]!r} is not part of a Cortex graph")
    return {k: obj[k] for k in order if k in obj}


def attr_text(kind: str, value: Any) -> str:
    """A typed attribute value as the runtime's parser reads it back."""
    if kind == BOOL:
        return "True" if value else "False"
    if kind == INTS:
        return "(" + ", ".join(str(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if kind == OPT_INT and value is None:
        return "None"
    return value if kind == STR else str(value)


def _canonical_layout(model: Model, types: Sequence[TensorType] | None) -> CortexLayout:
    if len(model.inputs) > 1 or any(i.name != DATA for i in model.inputs):
        raise InvalidError("graph", f"a Cortex model has at most one input, named {DATA!r}; this one has "
                                    f"{[i.name for i in model.inputs]}")
    variables = (*model.inputs, *model.params)
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
    nodes = [CortexNode(True, k, _variable_attrs(v.type)) for k, v in enumerate(variables)]
    nodes += [CortexNode(False, k, json_text({f.name: attr_text(f.kind, getattr(instr.attrs, f.name))
                                              for f in attr_fields(type(instr.attrs))}),
                         instr.op, str(len(instr.inputs)), str(len(instr.outputs)), "0")
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


def _variable_attrs(t: TensorType) -> str:
    """A variable's informational op_attrs; a dtype without precision (max_pool's) states only its shape."""
    shape = attr_text(INTS, t.shape)
    return json_text({"shape": shape} if t.precision is None else {"precision": str(t.precision), "shape": shape})


def _fits_int8(value: np.ndarray) -> bool:
    """Stored as int8 when every value is in [-127, 127] (-128 is outside every precision)."""
    return value.size == 0 or (int(value.min()) >= -127 and int(value.max()) <= 127)


def _graph_object(model: Model, layout: CortexLayout, types: Sequence[TensorType] | None) -> dict[str, Any]:
    variables = (*model.inputs, *model.params)
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
    parts = [struct.pack("<QQQ", PARAMS_MAGIC, 0, len(layout.params))]
    for name, _ in layout.params:
        encoded = name.encode("utf-8")
        parts.append(struct.pack("<Q", len(encoded)) + encoded)
    parts.append(struct.pack("<Q", len(layout.params)))
    for name, bits in layout.params:
        param = by_name[name]
        value = param.value
        raw = layout.data_raw
        if name == DATA and raw is not None and np.array_equal(clip_to_precision(raw, param.type.precision), value):
            value = raw  # the file held 'data' before the runtime's clip
        parts.append(_array_bytes(name, np.asarray(value), bits))
    return b"".join(parts)


def _array_bytes(name: str, value: np.ndarray, bits: int) -> bytes:
    if bits == 8:
        if value.size and (int(value.min()) < -128 or int(value.max()) > 127):
            raise ValueError(f"param {name!r}: the layout stores it as int8, but its values do not fit")
        data = value.astype(np.dtype("i1")).tobytes()
    else:
        data = value.astype(np.dtype("<i4")).tobytes()
    return (struct.pack(ARRAY_HEADER, ARRAY_MAGIC, 0, DEVICE_CPU, 0, value.ndim, TYPE_CODE_INT, bits, 1)
            + struct.pack(f"<{value.ndim}q", *value.shape) + struct.pack("<q", len(data)) + data)
