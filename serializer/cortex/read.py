# About 400 lines: the structure rules, the graph rules and the Model they build, read in one pass.
"""Reading a Cortex graph JSON (+ params binary) into a Model.

The structure rules (exact key sets and JSON types: ``malformed.graph_json``),
the graph rules (counts, topology, names, precisions, storage: ``invalid.*``,
``limit.*``), and building the Model, with the file's layout captured in a
``CortexLayout`` so ``write_cortex`` can reproduce it.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from isa.attrs import INT32_MAX
from isa.errors import CvmError, InvalidError, LimitError, MalformedError, UsageError, shown
from isa.spec import OpDef
from isa.table import OP_BY_NAME
from isa.types import (DTYPES, INT32, MAX_PRECISION, MIN_PRECISION, Shape, TensorType, check_shape,
                       clip_to_precision, precision_bound)
from serializer import limits
from serializer.strict import MAX_ITEMS, JsonWalk, Span, StrictJson, acyclic
from serializer.cortex.attr_text import check_variable_attrs, read_operator_attrs
from serializer.cortex.json_text import check_escapes
from serializer.cortex.layout import (DATA, GRAPH_ATTR_TAGS, NODE_ATTR_KEYS, OPERATOR_KEYS, TOP_KEYS, VARIABLE_KEYS,
                                      VERSIONS, CortexLayout, CortexNode)
from serializer.cortex.params import ParamArray, read_params
from serializer.model import Input, Instr, Model, Param

UINT32_MAX = (1 << 32) - 1
# A model has at most MAX_ITEMS inputs, params and instructions, a node each.
MAX_NODES = 3 * MAX_ITEMS
# Graph JSON text is read a piece at a time (_Text): the small arrays and objects parsed whole (an
# entry: three numbers; a shape: six; a node's attrs: four short strings) have at most this many
# characters, room for any spacing a writer gives them.
MAX_PIECE_CHARS = 1 << 16
# An array or object of at most this many characters is parsed whole (json's C parser, where
# walking it takes many calls in Python; what it builds is bounded alike); a longer one is walked.
_WALK_CHARS = MAX_PIECE_CHARS
# The levels of a graph JSON's arrays and objects located in one pass, with the most there may be
# at each: the top level's (5 keys hold them); nodes, heads and the graph attrs' [tag, list] pairs;
# each node's inputs and attrs, and each pair's list.  Deeper, the entries or shapes of one list
# longer than MAX_PIECE_CHARS are located when it is read: at most as many as any list holds.
_LEVELS = {2: len(TOP_KEYS), 3: MAX_NODES + MAX_ITEMS + len(GRAPH_ATTR_TAGS), 4: 2 * MAX_NODES + len(GRAPH_ATTR_TAGS)}
_DEEPER = 2 * MAX_NODES + 1
_OP_SUFFIX = re.compile(r"_[0-9]*\Z")

# The runtime's whitelist of ops whose output may share a storage id with an
# input, verbatim.  It spells negative "nagetive", so negative is NOT
# whitelisted (reference case error/negative/graph-storage-reuse-negative-1).
STORAGE_REUSE_OPS = frozenset({
    "flatten", "relu", "expand_dims", "reshape", "squeeze", "abs", "cvm_precision", "elemwise_add",
    "elemwise_sub", "nagetive", "clip", "cvm_clip", "cvm_right_shift", "cvm_left_shift",
})


def read_cortex(graph: Any, params: Any = None) -> Model:
    """Decode a Cortex model.

    ``graph``: a dict (parsed JSON), JSON text (a str), or UTF-8 bytes; text is read a piece at
    a time (``_Text``).  ``params``: bytes or None (no params file).  Raises CvmError for
    anything the format does not allow.  (cvmvm.load_cortex also takes paths.)
    """
    return graph_model(read_graph(graph), params)


def graph_model(g: Graph, params: Any = None) -> Model:
    """The Model of a checked graph and its params file (bytes, or None)."""
    blob = None if params is None else _source_bytes(params, limits.MAX_PARAMS_BYTES, "params")
    with acyclic():
        return _build_model(g, None if blob is None else read_params(blob))


@dataclass(frozen=True)
class Graph:
    """A graph JSON, every rule checked that needs no params file."""

    version: str
    nodes: list[_Node]
    heads: list[tuple[int, int]]
    arg_nodes: list[int]
    row_ptr: list[int]
    attrs: dict[str, list[Any]]
    first_entry: list[int]   # each node's first entry id, and the entry count last
    shapes: list[Shape]
    dltypes: list[str]
    records: list[Any]       # each operator's attribute record


def read_graph(graph: Any) -> Graph:
    """A graph JSON (as ``read_cortex`` takes it), checked: its structure, then the graph rules."""
    if isinstance(graph, dict):
        with acyclic():
            return _read_graph(_Parsed(graph))
    src = _Text(_graph_text(graph))
    try:
        with acyclic():
            return _read_graph(src)
    except (InvalidError, LimitError):
        # Text that is no JSON is malformed, however far into it that shows: as parsed whole.
        src.walk.check(_WALK_CHARS)
        raise


def _read_graph(src: _Parsed | _Text) -> Graph:
    top = src.object(src.top(), "graph", TOP_KEYS)
    version = _str(top["version"], "version")
    if version not in VERSIONS:
        raise MalformedError("graph_json", f"version {shown(version)} is not one of {', '.join(VERSIONS)}")
    nodes = [_node(src, raw, nid) for nid, raw in _at_most(
        src.array(top["nodes"], "nodes", MAX_NODES + 1), MAX_NODES,
        lambda: LimitError("items", f"nodes: more than {MAX_NODES} (a model has at most {MAX_ITEMS} inputs, "
                                    "params and instructions)"))]
    heads = [_entry(src.whole(e, f"heads[{k}]"), f"heads[{k}]") for k, e in _at_most(
        src.array(top["heads"], "heads", MAX_ITEMS + 1), MAX_ITEMS,
        lambda: LimitError("items", f"heads: more than {MAX_ITEMS} outputs"))]
    # Node ids, and rows of entries: never more than the nodes (and one).
    arg_nodes = [_uint32(v, f"arg_nodes[{k}]") for k, v in _at_most(
        src.array(top["arg_nodes"], "arg_nodes", len(nodes) + 1), len(nodes),
        lambda: InvalidError("graph", f"arg_nodes lists more ids than the graph's {len(nodes)} nodes"))]
    row_ptr = [_uint32(v, f"node_row_ptr[{k}]") for k, v in _at_most(
        src.array(top["node_row_ptr"], "node_row_ptr", len(nodes) + 2), len(nodes) + 1,
        lambda: InvalidError("graph", f"node_row_ptr has more items than the graph's {len(nodes)} nodes and one"))]

    counts = [1 if n.op is None else len(n.op.outputs) for n in nodes]
    first_entry = [0]
    for c in counts:
        first_entry.append(first_entry[-1] + c)
    num_entries = first_entry[-1]
    attrs = _graph_attrs(src, top["attrs"], version, len(nodes), num_entries)
    variables = [nid for nid, n in enumerate(nodes) if n.op is None]
    if version == "cvm_1.0.0":
        _check_same(row_ptr, first_entry, "node_row_ptr", "the running count of the nodes' outputs")
        _check_same(arg_nodes, variables, "arg_nodes", "the variable nodes' ids")

    _check_counts(attrs, len(nodes), num_entries)
    _check_topology(nodes, heads, counts)
    _check_variable_names(nodes)
    shapes = [_shape(s, f"attrs.shape[{eid}]") for eid, s in enumerate(attrs["shape"])]
    dltypes = list(attrs["dltype"]) if "dltype" in attrs else [INT32] * num_entries
    for eid, dt in enumerate(dltypes):
        if dt not in DTYPES:
            raise InvalidError("dtype", f"attrs.dltype[{eid}] is {shown(dt)}; not one of {', '.join(DTYPES)}")
    _check_precisions(nodes, attrs["precision"], first_entry, dltypes)
    _check_storage(nodes, attrs["storage_id"], first_entry)

    records: list[Any] = []
    for nid, (node, text) in enumerate(zip(nodes, attrs["op_attrs"])):
        where = f"node {nid} ({node.name})"
        if node.op is None:
            check_variable_attrs(text, shapes[first_entry[nid]], attrs["precision"][first_entry[nid]], where)
        else:
            records.append(read_operator_attrs(node.op, text, where))
    return Graph(version, nodes, heads, arg_nodes, row_ptr, attrs, first_entry, shapes, dltypes, records)


@dataclass(frozen=True, slots=True)
class _Node:
    name: str
    op: OpDef | None                      # None: a variable
    inputs: tuple[tuple[int, int], ...]   # (node id, output index)
    attrs: dict[str, str]                 # the node's own "attrs" (operators only)


def _graph_text(graph: Any) -> str:
    if isinstance(graph, str):
        try:
            size = len(graph.encode("utf-8"))
        except UnicodeEncodeError as e:
            raise MalformedError("graph_json", f"graph JSON text is not valid Unicode ({e.reason})") from None
        _check_size(size, limits.MAX_GRAPH_JSON_BYTES, "graph JSON")
        return check_escapes(graph, "graph_json", "graph JSON")
    data = _source_bytes(graph, limits.MAX_GRAPH_JSON_BYTES, "graph JSON")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedError("graph_json", f"graph JSON is not UTF-8 ({e.reason} at byte {e.start})") from None
    return check_escapes(text, "graph_json", "graph JSON")


def _source_bytes(source: Any, limit: int, what: str) -> bytes:
    """Bytes given directly, bounded by ``limit`` (files are read by cvmvm.files, above this layer:
    cvmvm.load_cortex takes paths)."""
    if not isinstance(source, (bytes, bytearray, memoryview)):
        raise UsageError("argument", f"{what}: expected bytes, got {type(source).__name__} "
                                     "(cvmvm.load_cortex reads paths)")
    try:
        view = memoryview(source)
        # nbytes, not len: a view of many dimensions or wide items holds more bytes than it has rows.
        _check_size(view.nbytes, limit, what)
        return source if type(source) is bytes else view.tobytes()   # bytes are immutable: no copy needed
    except ValueError:   # a released memoryview
        raise UsageError("argument", f"{what}: a released memoryview") from None


def _check_size(size: int, limit: int, what: str) -> None:
    if size > limit:
        raise LimitError("bytes", f"{what}: {size} bytes exceed the limit of {limit}")


# -- the two ways a graph comes: parsed, or text read a piece at a time ----------

class _Parsed:
    """A graph given parsed (a dict): its values are read as they are."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    def top(self) -> Any:
        return self.doc

    def object(self, value: Any, where: str, required: Sequence[str], optional: Sequence[str] = ()) -> dict[str, Any]:
        return _object(value, where, required, optional)

    def array(self, value: Any, where: str, most: int = 0) -> Iterator[Any]:
        return iter(_list(value, where))

    def whole(self, value: Any, where: str) -> Any:
        return value


class _Text:
    """A graph given as JSON text, read a piece at a time (strict.JsonWalk), so that what parsing
    builds at once is one string or number, or arrays and objects of at most MAX_PIECE_CHARS
    characters, whatever the file holds: a longer array is read a run of items at a time (an item
    at a time where they are no arrays or objects), up to the most items it may have, and a longer
    object a member at a time.  It is accepted exactly when the whole text parsed would be
    (tests/test_cortex_format.py reads every case both ways)."""

    def __init__(self, text: str) -> None:
        self.walk = JsonWalk(text, StrictJson("graph_json"), "graph JSON", _LEVELS, _DEEPER)

    def top(self) -> Any:
        span = self.walk.first("the graph")
        return span if span is not None else self.walk.json.document(self.walk.text, "graph JSON")

    def object(self, value: Any, where: str, required: Sequence[str], optional: Sequence[str] = ()) -> dict[str, Any]:
        if type(value) is Span and not value.array:   # any other value: _object names it
            small = self._small(value, where)
            value = self.walk.members(value, where) if small is None else small
        return _object(value, where, required, optional)

    def array(self, value: Any, where: str, most: int = 0) -> Iterator[Any]:
        """The items of an array (``most``, if given: the most the caller reads), read a run of
        them at a time if it is long, unless it holds at most ``most`` numbers and strings and no
        bracket: then parsing it whole builds no more than its items."""
        if type(value) is Span and value.array:   # any other value: _list names it
            text = self.walk.text
            small = self._small(value, where)
            if small is None and text.count(",", value.start, value.end) < most \
                    and text.count("[", value.start + 1, value.end) + text.count("{", value.start + 1, value.end) == 0:
                small = self.walk.parse(value, where)
            return self.walk.items(value, where, most or None, _WALK_CHARS) if small is None else iter(small)
        return iter(_list(value, where))

    def _small(self, span: Span, where: str) -> Any:
        """``span`` parsed whole if it is short enough (one call of json's C parser, where walking
        it would take many in Python), else None."""
        return self.walk.parse(span, where) if span.end - span.start <= _WALK_CHARS else None

    def whole(self, value: Any, where: str) -> Any:
        if type(value) is not Span:
            return value
        if value.end - value.start > MAX_PIECE_CHARS:
            raise LimitError("bytes", f"graph JSON: {where} has {value.end - value.start} characters; an entry, a "
                                      f"shape or a node's attrs has at most {MAX_PIECE_CHARS}")
        return self.walk.parse(value, where)


def _type_name(value: Any) -> str:
    """The JSON value's Python type, for messages: a Span is named by what parsing it would give."""
    return (value.parsed_type if type(value) is Span else type(value)).__name__


def _at_most(items: Iterator[Any], most: int, fault: Callable[[], CvmError]) -> Iterator[tuple[int, Any]]:
    """The items, numbered; ``fault()`` is raised at the one after the ``most``-th, before it is
    read (made only then: a node's inputs are counted so, a million times in a large graph)."""
    for k, item in enumerate(items):
        if k == most:
            raise fault()
        yield k, item


# -- structure: keys and JSON types (malformed.graph_json) -------------------

def _object(value: Any, where: str, required: Sequence[str], optional: Sequence[str] = ()) -> dict[str, Any]:
    if type(value) is not dict:
        raise MalformedError("graph_json", f"{where} must be a JSON object, got {_type_name(value)}")
    for key in value:
        if key not in required and key not in optional:
            raise MalformedError("graph_json", f"{where}: unknown key {key!r}")
    for key in required:
        if key not in value:
            raise MalformedError("graph_json", f"{where}: missing key {key!r}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if type(value) is not list:
        raise MalformedError("graph_json", f"{where} must be a JSON array, got {_type_name(value)}")
    return value


def _str(value: Any, where: str) -> str:
    if type(value) is not str:
        raise MalformedError("graph_json", f"{where} must be a string, got {_type_name(value)}")
    return value


def _int(value: Any, where: str) -> int:
    if type(value) is not int:  # not isinstance: True is an int to isinstance
        got = _type_name(value) if isinstance(value, (Span, list, dict)) else shown(value)
        raise MalformedError("graph_json", f"{where} must be an integer, got {got}")
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
        raise MalformedError("graph_json", f"{where} must be [node id, output index, version], got {shown(items)}")
    nid, idx, version = (_int(v, where) for v in items)
    if nid < 0 or idx < 0:
        raise InvalidError("graph", f"{where}={items} refers to a negative node or output")
    if version != 0:
        raise InvalidError("graph", f"{where}={items}: entry version must be 0")
    return nid, idx


def _node(src: _Parsed | _Text, value: Any, nid: int) -> _Node:
    where = f"nodes[{nid}]"
    raw = src.object(value, where, ("op",), OPERATOR_KEYS)
    kind = raw["op"]
    if kind == "null":
        _object(raw, where, VARIABLE_KEYS)
    elif kind == "cvm_op":
        _object(raw, where, OPERATOR_KEYS)
    else:
        raise MalformedError("graph_json", f"{where}.op must be \"null\" or \"cvm_op\", got {shown(kind)}")
    name = _str(raw["name"], f"{where}.name")
    listed = src.array(raw["inputs"], f"{where}.inputs", MAX_ITEMS + 1)
    # An instruction reads at most MAX_ITEMS tensors (the verifier's limit, checked here before
    # they are read).
    too_many = lambda: LimitError("items", f"{where}.inputs: more than {MAX_ITEMS} inputs")  # noqa: E731
    inputs = tuple(_entry(src.whole(e, f"{where}.inputs[{k}]"), f"{where}.inputs[{k}]") for k, e in
                   _at_most(listed, MAX_ITEMS, too_many))
    if kind == "null":
        if inputs:
            raise InvalidError("graph", f"{where} ({name}) is a variable but lists inputs")
        return _Node(name, None, (), {})
    node_attrs = _object(src.whole(raw["attrs"], f"{where}.attrs"), f"{where}.attrs", NODE_ATTR_KEYS)
    for key in NODE_ATTR_KEYS:
        _str(node_attrs[key], f"{where}.attrs.{key}")
    func_name = node_attrs["func_name"]
    op = OP_BY_NAME.get(op_name(func_name))
    if op is None:
        raise InvalidError("op", f"{where} ({name}): unknown op {shown(func_name)}")
    return _Node(name, op, inputs, node_attrs)


def op_name(func_name: str) -> str:
    """The op a func_name names: a trailing `_<digits>` is dropped (relu_17 -> relu), as the runtime does."""
    return _OP_SUFFIX.sub("", func_name, count=1)


def _graph_attrs(src: _Parsed | _Text, value: Any, version: str, num_nodes: int,
                 num_entries: int) -> dict[str, list[Any]]:
    """The graph attribute lists, each read up to one item more than the graph may have
    (_check_counts says which have another count)."""
    required = ["shape", "precision", "op_attrs", "storage_id"]
    if version == "cvm_1.0.0":
        required.append("dltype")
    obj = src.object(value, "attrs", required, tuple(GRAPH_ATTR_TAGS))
    out: dict[str, list[Any]] = {}
    for key, tagged in obj.items():
        where = f"attrs.{key}"
        pair = list(itertools.islice(src.array(tagged, where), 3))
        if len(pair) != 2 or pair[0] != GRAPH_ATTR_TAGS[key]:
            raise MalformedError("graph_json", f"{where} must be [\"{GRAPH_ATTR_TAGS[key]}\", [...]]")
        most = num_nodes if key == "op_attrs" else 0 if key == "device_index" else num_entries
        items = list(itertools.islice(src.array(pair[1], f"{where}[1]", most + 1), most + 1))
        if key == "shape":
            items = [src.whole(s, f"{where}[{k}]") for k, s in enumerate(items)]
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
            raise InvalidError("graph", f"attrs.{key} has {_count(attrs[key], num_entries)} entries; "
                                        f"the graph has {num_entries}")
    if len(attrs["op_attrs"]) != num_nodes:
        raise InvalidError("graph", f"attrs.op_attrs has {_count(attrs['op_attrs'], num_nodes)} entries; "
                                    f"the graph has {num_nodes} nodes")
    if attrs.get("device_index"):
        raise InvalidError("graph", "attrs.device_index must be empty")
    if len(attrs.get("dtype", ())) > num_entries:
        raise InvalidError("graph", f"attrs.dtype has more than {num_entries} entries; the graph has {num_entries}")


def _count(items: list[Any], most: int) -> str:
    """How many items a list read up to one more than ``most`` has."""
    return f"more than {most}" if len(items) > most else f"{len(items)}"


def _check_same(given: list[int], expected: list[int], key: str, what: str) -> None:
    """cvm_1.0.0's redundant lists: each must be what the nodes imply (named at the first difference,
    not printed whole: a graph may have a million nodes)."""
    if given != expected:
        k = next((k for k, (g, e) in enumerate(zip(given, expected)) if g != e), None)
        differs = (f"{key}[{k}] is {given[k]}, where it must be {expected[k]}" if k is not None else
                   f"it has {len(given)} items, where it must have {len(expected)}")
        raise InvalidError("graph", f"{key} must be {what} (cvm_1.0.0): {differs}")


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
    shape = tuple(dims)
    check_shape(shape, where)
    return shape


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


# -- the Model ----------------------------------------------------------------

def _build_model(g: Graph, arrays: dict[str, ParamArray] | None) -> Model:
    nodes, attrs, first_entry, shapes, dltypes = g.nodes, g.attrs, g.first_entry, g.shapes, g.dltypes
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
                raise InvalidError("graph", f"variable {node.name!r} has no value: no params file was given"
                                            if arrays is None else
                                            f"variable {node.name!r} is not given by the params file")
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
            value = clip_to_precision(array.values, precision[first_entry[nid]])
            value.flags.writeable = False
        else:
            bound = precision_bound(precision[first_entry[nid]])
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
        instrs.append(Instr(node.op.name, g.records[len(instrs)],
                            tuple(tensor_of_node[src] + idx for src, idx in node.inputs),
                            tuple(range(next_id, next_id + count)), node.name,
                            tuple(shapes[first_entry[nid]:first_entry[nid + 1]]),
                            tuple(dltypes[first_entry[nid]:first_entry[nid + 1]])))
        layout_nodes.append(CortexNode(False, len(instrs) - 1, text, node.attrs["func_name"],
                                       node.attrs["num_inputs"], node.attrs["num_outputs"],
                                       node.attrs["flatten_data"]))
        next_id += count
    outputs = tuple(tensor_of_node[src] + idx for src, idx in g.heads)

    model_inputs, model_params, model_instrs = tuple(inputs), tuple(params), tuple(instrs)
    layout = CortexLayout(
        version=g.version,
        nodes=tuple(layout_nodes),
        arg_nodes=tuple(g.arg_nodes),
        node_row_ptr=tuple(g.row_ptr),
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
