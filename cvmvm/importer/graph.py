"""An ONNX model as the importer sees it: nodes in order, constants as numpy, input shapes.

``parse`` decodes and checks the protobuf (structure only: which ops are
supported is the lowering's business); ``drop_tail`` removes a classifier's
output tail (Softmax, LogSoftmax, ArgMax and scikit-learn's label plumbing) so
the model ends in its logits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from isa.errors import InvalidError, MalformedError

MAX_ONNX_BYTES = 1 << 31  # protobuf's own limit for one message

# ONNX TensorProto element types the importer handles (as inputs or constants).
FLOAT_TYPES: dict[int, str] = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.DOUBLE: "float64",
               onnx.TensorProto.FLOAT16: "float16"}
STANDARD_DOMAINS = ("", "ai.onnx")
# Element types a constant (initializer or Constant value) may have: real numbers numpy computes
# with natively, and bfloat16 (widened on load).  Complex values would lose their imaginary part
# without a word; the 2- to 8-bit formats arrive as opaque ml_dtypes types that the NaN checks and
# the float evaluator do not treat as floats.
_T = onnx.TensorProto
CONSTANT_TYPES = frozenset({_T.FLOAT, _T.DOUBLE, _T.FLOAT16, _T.BFLOAT16, _T.INT8, _T.INT16, _T.INT32, _T.INT64,
                            _T.UINT8, _T.UINT16, _T.UINT32, _T.UINT64, _T.BOOL})


@dataclass(frozen=True)
class Node:
    index: int
    name: str
    op: str
    domain: str
    inputs: tuple[str, ...]    # "" for an omitted optional input
    outputs: tuple[str, ...]
    attrs: dict[str, Any] = field(compare=False)  # decoded: int, float, str, lists, np.ndarray for tensors

    @property
    def label(self) -> str:
        """How every message names the node: its name, else its position, and its op."""
        return f"node {self.name!r} ({self.op})" if self.name else f"node #{self.index} ({self.op})"


@dataclass(frozen=True)
class GraphInput:
    name: str
    dtype: str                       # numpy name of the element type
    dims: tuple[int | None, ...]     # None: dynamic (dim_param or unknown)


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]
    constants: dict[str, np.ndarray]   # initializers, as stored
    inputs: tuple[GraphInput, ...]
    outputs: tuple[str, ...]
    opset: int                         # of the default domain

    def producers(self) -> dict[str, Node]:
        return {t: n for n in self.nodes for t in n.outputs if t}

    def consumers(self) -> dict[str, list[Node]]:
        use: dict[str, list[Node]] = {}
        for n in self.nodes:
            for t in n.inputs:
                if t:
                    use.setdefault(t, []).append(n)
        return use


def _attr_value(a: onnx.AttributeProto, at: str) -> Any:
    value = onnx.helper.get_attribute_value(a)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, onnx.TensorProto):
        return _constant(value, f"{at}: tensor attribute {a.name!r}")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8", errors="replace") for v in value]
    return value


def parse(data: bytes, where: str = "model") -> Graph:
    """Decode an ONNX ModelProto; refuse what is not a well-formed, self-contained graph."""
    if len(data) > MAX_ONNX_BYTES:
        raise MalformedError("onnx", f"{where}: {len(data)} bytes exceed protobuf's 2 GiB")
    try:
        proto = onnx.load_model_from_string(data)
    except Exception as e:  # protobuf's DecodeError and friends: the bytes are not a ModelProto
        raise MalformedError("onnx", f"{where}: not an ONNX model ({type(e).__name__}: {e})") from None
    if not proto.HasField("graph") or not proto.graph.node:
        raise MalformedError("onnx", f"{where}: no graph, or a graph without nodes")
    try:
        onnx.checker.check_model(proto)
    except Exception as e:  # ValidationError, and what the checker meets first (a string that is not UTF-8)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise MalformedError("onnx", f"{where}: {first}") from None
    g = proto.graph
    opset = next((o.version for o in proto.opset_import if o.domain in STANDARD_DOMAINS), 0)
    constants: dict[str, np.ndarray] = {}
    for t in g.initializer:
        name = _text(t.name, f"{where}: an initializer name")
        if t.data_location == onnx.TensorProto.EXTERNAL:
            raise MalformedError("onnx", f"{where}: initializer {name!r} keeps its data in an external file")
        constants[name] = _constant(t, f"{where}: initializer {name!r}")
    inputs = tuple(_graph_input(v) for v in g.input if _text(v.name, f"{where}: an input name") not in constants)
    defined = set(constants) | {i.name for i in inputs}
    nodes = []
    for k, n in enumerate(g.node):
        at = f"{where}: node #{k}"
        try:
            attrs = {_text(a.name, at): _attr_value(a, at) for a in n.attribute}
        except ValueError as e:
            raise MalformedError("onnx", f"{at}: {e}") from None
        node = Node(k, _text(n.name, at), _text(n.op_type, at), _text(n.domain, at),
                    tuple(_text(t, at) for t in n.input), tuple(_text(t, at) for t in n.output), attrs)
        for t in node.inputs:
            if t and t not in defined:
                raise MalformedError("onnx", f"{node.label} reads {t!r}, which no earlier node, input or "
                                             f"initializer defines")
        for t in node.outputs:
            if t in defined:
                raise MalformedError("onnx", f"{node.label} redefines tensor {t!r}")
            if t:
                defined.add(t)
        nodes.append(node)
    outputs = tuple(_text(o.name, f"{where}: an output name") for o in g.output)
    if not outputs:
        # Lowered as is, it would be a verified program that computes nothing and returns nothing.
        raise MalformedError("onnx", f"{where}: the graph declares no outputs")
    for t in outputs:
        if t not in defined:
            raise MalformedError("onnx", f"{where}: graph output {t!r} is defined nowhere")
    return Graph(tuple(nodes), constants, inputs, outputs, opset)


def _constant(t: onnx.TensorProto, where: str) -> np.ndarray:
    if t.data_type not in CONSTANT_TYPES:
        kind = onnx.TensorProto.DataType.Name(t.data_type) if t.data_type in onnx.TensorProto.DataType.values() \
            else f"element type {t.data_type}"
        raise InvalidError("dtype", f"{where} is {kind}; constants must be real numbers (float, integer or bool)")
    try:
        value = numpy_helper.to_array(t)
    except Exception as e:  # data of the wrong length for its dims
        raise MalformedError("onnx", f"{where}: {type(e).__name__}: {e}") from None
    # numpy knows bfloat16 only as an opaque ml_dtypes type, which the NaN checks (float kinds) would
    # pass over; float32 holds every bfloat16 value exactly.
    return value.astype(np.float32) if t.data_type == onnx.TensorProto.BFLOAT16 else value


def _text(value: str | bytes, where: str) -> str:
    """A protobuf string field: the checker passes some that are not UTF-8, which then arrive as bytes."""
    if isinstance(value, str):
        return value
    raise MalformedError("onnx", f"{where}: a name or string that is not UTF-8 ({bytes(value)[:32]!r})")


def _graph_input(v: onnx.ValueInfoProto) -> GraphInput:
    tt = v.type.tensor_type
    if not v.type.HasField("tensor_type") or tt.elem_type not in FLOAT_TYPES:
        kind = onnx.TensorProto.DataType.Name(tt.elem_type) if v.type.HasField("tensor_type") else "a non-tensor"
        raise InvalidError("onnx_input", f"input {v.name!r} is {kind}; the importer takes float inputs only")
    if not tt.HasField("shape"):
        return GraphInput(v.name, FLOAT_TYPES[tt.elem_type], ())
    dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim)
    return GraphInput(v.name, FLOAT_TYPES[tt.elem_type], dims)


# -- the classifier tail -----------------------------------------------------------

# Ops a tail may consist of; it starts at a Softmax, LogSoftmax or ArgMax.
TAIL_OPS = ("Softmax", "LogSoftmax", "ArgMax", "Identity", "Cast", "Reshape", "Flatten",
            "ArrayFeatureExtractor", "ZipMap")
TAIL_HEADS = ("Softmax", "LogSoftmax", "ArgMax")


@dataclass(frozen=True)
class Tail:
    dropped: tuple[Node, ...]
    classes: np.ndarray | None   # a label table the tail indexed with the argmax, if any


def drop_tail(graph: Graph) -> tuple[Graph, Tail]:
    """Remove the nodes after the logits; the logits become the outputs.

    A node belongs to the tail when its op is a tail op, everything reading
    its outputs is in the tail too (or is a graph output), and it is a head
    or reads a tail node's output.  The new outputs are the tensors the tail
    read from the rest of the graph, in the order the old outputs reach them.
    """
    consumers = graph.consumers()
    droppable: set[int] = set()
    for n in reversed(graph.nodes):
        if n.op in TAIL_OPS and all(c.index in droppable for t in n.outputs for c in consumers.get(t, [])):
            droppable.add(n.index)
    producers = graph.producers()
    tail: set[int] = set()
    for n in graph.nodes:
        if n.index in droppable and (n.op in TAIL_HEADS or any(
                t in producers and producers[t].index in tail for t in n.inputs)):
            tail.add(n.index)
    if not tail:
        return graph, Tail((), None)
    # A depth-first walk back from the outputs, first visits in the order the recursion would make
    # them: an explicit stack, since a tail may be longer than Python's recursion limit, and a visited
    # set, since tail nodes may read a tensor twice (2^N paths through N of them).
    new_outputs: list[str] = []
    seen: set[str] = set()
    stack = list(reversed(graph.outputs))
    while stack:
        t = stack.pop()
        if t in seen or t in graph.constants:
            continue
        seen.add(t)
        p = producers.get(t)
        if p is not None and p.index in tail:
            stack.extend(s for s in reversed(p.inputs) if s)
        else:
            new_outputs.append(t)
    dropped = tuple(n for n in graph.nodes if n.index in tail)
    classes = None
    for n in dropped:
        if n.op == "ArrayFeatureExtractor" and n.inputs[0] in graph.constants:
            classes = graph.constants[n.inputs[0]]
    kept = tuple(n for n in graph.nodes if n.index not in tail)
    return Graph(kept, graph.constants, graph.inputs, tuple(new_outputs), graph.opset), Tail(dropped, classes)
