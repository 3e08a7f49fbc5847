"""The contract computes exactly what cvmvm computes: for every covered op, random
instances at the extremes of each precision, the contract's value of every probed
element (CvmStep.values, after full authentication) equals the VM's kernel output, the
op's reference kernel (isa/reference) and cvmvm.tx.element's value.  Over 10,000
elements in all."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

boa = pytest.importorskip("boa")
from eth_abi import decode, encode  # noqa: E402

from isa.errors import CvmError  # noqa: E402
from isa.table import OP_BY_NAME  # noqa: E402
from serializer.hashing import chunk_count  # noqa: E402
from serializer.records.stepproof import Operand, calldata_proof  # noqa: E402
from cvmvm.tx import element  # noqa: E402
from cvmvm.tx.stepproof import chunks_of  # noqa: E402
from tests.chainkit import Run, deploy, instance  # noqa: E402

ELEMENTS_PER_CALL = 160


def selector(signature: str) -> bytes:
    from eth_utils import function_signature_to_4byte_selector
    return function_signature_to_4byte_selector(signature)


@pytest.fixture(scope="module")
def contract_values():
    address = deploy(boa, "CvmStep")
    sig = selector("values(bytes,bytes32,bytes32,bytes32,uint32[])")

    def call(proof: bytes, roots: tuple[bytes, bytes, bytes], elements: list[int]) -> list[int]:
        data = sig + encode(["bytes", "bytes32", "bytes32", "bytes32", "uint32[]"], [proof, *roots, elements])
        c = boa.env.execute_code(to_address=address, data=data, gas=1 << 30)
        assert not c.is_error, decode(["string"], c.output[4:])[0] if len(c.output) > 4 else c.error
        return list(decode(["int256[]"], c.output)[0])

    return call


def whole_proof(run: Run) -> bytes:
    """An element proof of element 0 carrying every chunk of every operand (all of them model
    inputs of the one-instruction program: no inclusion paths)."""
    p = run.proof(0, 0)
    types = run.program.types
    operands = tuple(Operand(b"", chunks_of(run.values[t], types[t], range(chunk_count(types[t]))), ())
                     for t in run.program.steps[0].inputs)
    return calldata_proof(dataclasses.replace(p, operands=operands))


def test_contract_equals_the_kernels_on_10000_elements(contract_values):
    rnd = random.Random(20240517)
    total = 0
    per_op = {op: 0 for op in element.COVERED}
    while total < 10_000 or min(per_op.values()) < 60:
        op = min(per_op, key=per_op.get) if min(per_op.values()) < 60 else rnd.choice(sorted(element.COVERED))
        inputs, attrs, precisions = instance(rnd, op)
        try:
            run = Run.of_op(op, inputs, attrs, precisions)
        except CvmError:
            continue                           # outside the op's rules (e.g. an output over 32 bits)
        program, values = run.program, run.values
        out_type = program.types[-1]
        expected = values[-1].reshape(-1)
        proof, roots = whole_proof(run), run.roots
        s = program.steps[0]
        (reference,) = OP_BY_NAME[op].reference(s.attrs, *(values[t] for t in s.inputs))
        reference = np.asarray(reference).reshape(-1)
        elements = list(range(out_type.size))
        rnd.shuffle(elements)
        elements = elements[:ELEMENTS_PER_CALL]
        got = contract_values(proof, roots, elements)
        ins = [program.types[t] for t in s.inputs]
        for e, g in zip(elements, got):
            reads = element.footprint(op, s.attrs, ins, out_type, e)
            mine = element.value(op, s.attrs, [values[t].reshape(-1)[r] for t, r in zip(s.inputs, reads)])
            assert g == int(expected[e]) == int(reference[e]) == mine, (op, attrs, precisions, e, g, int(expected[e]),
                                                                        int(reference[e]), mine)
        total += len(elements)
        per_op[op] += len(elements)
    assert total >= 10_000
