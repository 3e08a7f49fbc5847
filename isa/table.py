"""The one explicit op table of the ISA.

An op's code is its index here; codes are part of the native format (the
`isa` version in every model file), so an op is only ever appended, and any
other change to this table, to an op's attribute list, or to the values an
attribute accepts, bumps ISA_VERSION.
"""

from __future__ import annotations

from isa.ops.broadcast import (BROADCAST_ADD, BROADCAST_DIV, BROADCAST_GREATER, BROADCAST_MAX, BROADCAST_MUL,
                               BROADCAST_SUB, WHERE)
from isa.ops.elemwise import (ABS, CLIP, CVM_CLIP, CVM_LEFT_SHIFT, CVM_PRECISION, CVM_RIGHT_SHIFT, ELEMWISE_ADD,
                              ELEMWISE_SUB, NEGATIVE, RELU)
from isa.ops.nn import CONV2D, DENSE, MAX_POOL2D, UPSAMPLING
from isa.ops.pool import MAX_POOL
from isa.ops.reduce import MAX, SUM
from isa.ops.transform import (CONCATENATE, CVM_LUT, EXPAND_DIMS, FLATTEN, REPEAT, RESHAPE, SLICE_LIKE, SQUEEZE,
                               STRIDED_SLICE, TAKE, TILE, TRANSPOSE)
from isa.ops.vision import GET_VALID_COUNTS, NON_MAX_SUPPRESSION
from isa.spec import OpDef

# 2: is_sign false (cvm_clip, cvm_right_shift, cvm_left_shift) and every runtime dtype name on sum/max
# are accepted, as the Cortex runtime accepts them (docs/PARITY.md).
ISA_VERSION = 2

OPS: tuple[OpDef, ...] = (
    RELU,                 # 0
    ABS,                  # 1
    NEGATIVE,             # 2
    CVM_PRECISION,        # 3
    ELEMWISE_ADD,         # 4
    ELEMWISE_SUB,         # 5
    CLIP,                 # 6
    CVM_CLIP,             # 7
    CVM_RIGHT_SHIFT,      # 8
    CVM_LEFT_SHIFT,       # 9
    BROADCAST_ADD,        # 10
    BROADCAST_SUB,        # 11
    BROADCAST_MUL,        # 12
    BROADCAST_DIV,        # 13
    BROADCAST_MAX,        # 14
    BROADCAST_GREATER,    # 15
    WHERE,                # 16
    SUM,                  # 17
    MAX,                  # 18
    CONV2D,               # 19
    DENSE,                # 20
    MAX_POOL2D,           # 21
    UPSAMPLING,           # 22
    REPEAT,               # 23
    TILE,                 # 24
    FLATTEN,              # 25
    CONCATENATE,          # 26
    EXPAND_DIMS,          # 27
    RESHAPE,              # 28
    SQUEEZE,              # 29
    TRANSPOSE,            # 30
    STRIDED_SLICE,        # 31
    TAKE,                 # 32
    CVM_LUT,              # 33
    SLICE_LIKE,           # 34
    GET_VALID_COUNTS,     # 35
    NON_MAX_SUPPRESSION,  # 36
    MAX_POOL,             # 37
)

OP_BY_NAME: dict[str, OpDef] = {op.name: op for op in OPS}
OPCODE: dict[str, int] = {op.name: i for i, op in enumerate(OPS)}
