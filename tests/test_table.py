"""The op table: every OpDef of isa/ops exactly once, op codes pinned (they are on the wire)."""

from __future__ import annotations

import dataclasses

from isa.attrs import attr_fields
from isa.ops import broadcast, elemwise, nn, pool, reduce, transform, vision
from isa.spec import OpDef
from isa.table import ISA_VERSION, OP_BY_NAME, OPCODE, OPS

PINNED = ("relu abs negative cvm_precision elemwise_add elemwise_sub clip cvm_clip cvm_right_shift cvm_left_shift "
          "broadcast_add broadcast_sub broadcast_mul broadcast_div broadcast_max broadcast_greater where sum max "
          "conv2d dense max_pool2d upsampling repeat tile flatten concatenate expand_dims reshape squeeze transpose "
          "strided_slice take cvm_lut slice_like get_valid_counts non_max_suppression max_pool").split()


def test_op_codes_are_pinned():
    assert ISA_VERSION == 2
    assert [op.name for op in OPS] == PINNED
    assert OPCODE == {name: i for i, name in enumerate(PINNED)}


def test_every_declared_op_is_in_the_table_once():
    declared = [v for m in (elemwise, broadcast, reduce, nn, transform, vision, pool)
                for k, v in vars(m).items() if isinstance(v, OpDef) and k.isupper() and k != "OPS"]
    assert sorted(op.name for op in declared) == sorted(PINNED)
    assert len(set(map(id, OPS))) == len(OPS) == len(OP_BY_NAME)


def test_every_op_is_complete():
    for op in OPS:
        assert dataclasses.is_dataclass(op.attrs) and op.attrs.__dataclass_params__.frozen, op.name
        for f in attr_fields(op.attrs):
            assert f.domain.describe, (op.name, f.name)
        assert op.outputs and all(callable(r) for r in (op.inputs, op.shape, op.precision, op.cost, op.kernel))


def test_every_op_names_its_reference_kernel():
    """Each op's block names its reference kernel: the function named after the op (a trailing _
    where the name is a Python builtin) in the isa/reference module of the op's family."""
    families = {"elemwise": elemwise, "broadcast": broadcast, "reduce": reduce, "nn": nn, "transform": transform,
                "vision": vision, "pool": pool}
    for family, module in families.items():
        for op in (v for v in vars(module).values() if isinstance(v, OpDef)):
            assert op.reference.__module__ == f"isa.reference.{family}", op.name
            assert op.reference.__name__.rstrip("_") == op.name, op.name
