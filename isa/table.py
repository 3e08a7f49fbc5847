"""The one explicit op table of the ISA.  An op's code is its index here."""

from __future__ import annotations

from isa.ops import broadcast, elemwise, nn, pool, reduce, transform, vision
from isa.spec import OpDef

ISA_VERSION = 1

OPS: tuple[OpDef, ...] = (
    *elemwise.OPS, *broadcast.OPS, *reduce.OPS, *nn.OPS, *transform.OPS, *vision.OPS, *pool.OPS,
)

OP_BY_NAME: dict[str, OpDef] = {op.name: op for op in OPS}
OPCODE: dict[str, int] = {op.name: i for i, op in enumerate(OPS)}
