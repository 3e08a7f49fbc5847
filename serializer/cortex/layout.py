"""What every Cortex graph file shares, for reading and writing: versions, key sets, and the
layout records that keep a file's form beyond the Model (``CortexLayout`` in ``Model.source``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

VERSIONS = ("cvm_1.0.0", "cvm_1.1.0")
CANONICAL_VERSION = "cvm_1.0.0"
DATA = "data"  # the one variable set at run time; every other variable comes from params

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
