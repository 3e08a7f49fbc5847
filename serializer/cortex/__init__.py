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

Modules: json_text.py (strict JSON with the runtime's escapes, and the
writer's JSON text), attr_text.py (the op_attrs grammar: parser and writer
side by side), params.py (the params binary, read and write), layout.py
(versions, key sets, CortexLayout), read.py (structure and graph rules,
building the Model with its layout), write.py (graph object, graph text,
params bytes).  This package re-exports what callers use.

May import isa, serializer (limits, model), numpy; never cvmvm.
"""

from serializer.cortex.attr_text import attr_text, decode_attr
from serializer.cortex.json_text import json_text
from serializer.cortex.layout import (CANONICAL_VERSION, DATA, NODE_ATTR_KEYS, OPERATOR_KEYS, TOP_KEYS, VARIABLE_KEYS,
                                      VERSIONS, CortexLayout, CortexNode)
from serializer.cortex.read import Graph, graph_model, op_name, read_cortex, read_graph
from serializer.cortex.write import graph_to_json_bytes, write_cortex

__all__ = ["read_cortex", "read_graph", "graph_model", "Graph", "write_cortex", "graph_to_json_bytes", "CortexLayout",
           "CortexNode", "decode_attr", "attr_text", "json_text", "op_name", "VERSIONS", "CANONICAL_VERSION", "DATA", "TOP_KEYS",
           "VARIABLE_KEYS", "OPERATOR_KEYS", "NODE_ATTR_KEYS"]
