"""Shared by the chain tests: runs committed as format 3 (honest, or with one element
changed and every root recomputed consistently), their element proofs, and the verifier
contract deployed in py-evm through titanoboa (the `chain` extra)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np

from serializer.hashing import tensor_commitment
from serializer.records.stepproof import StepProof, calldata_proof
from cvmvm.vm.execute import execute
from cvmvm.vm.trace import make_trace, program_layout
from cvmvm.vm.verify import Program
from cvmvm.tx.stepproof import make_proof
from tests.test_models import generate

ARTIFACT = Path(__file__).resolve().parent.parent / "cvmvm" / "tx" / "solidity" / "artifact.json"
VERIFY = bytes.fromhex("6efef009")   # verify(bytes,bytes32,bytes32,bytes32)
VERIFY_OUTPUTS = bytes.fromhex("57a2dc42")   # verifyOutputs(bytes,bytes32,bytes32,bytes32,bytes32)
ERROR = bytes.fromhex("08c379a0")    # Error(string)


class Run:
    """Every tensor of one run, committed, and its trace."""

    def __init__(self, program: Program, values: list[np.ndarray], commitments: list[bytes] | None = None) -> None:
        self.program = program
        self.values = values
        if commitments is None:
            commitments = [tensor_commitment(v, program.types[t]) for t, v in enumerate(values)]
        self.trace = make_trace(program, commitments)
        self.program_root = program_layout(program).root

    @classmethod
    def of_fixture(cls, name: str) -> "Run":
        model = generate.load_fixture_model(name)
        env: dict[int, np.ndarray] = {}
        execute(model.program, {"data": generate.load_fixture_inputs(name)[0]}, env.__setitem__)
        return cls(model.program, [env[t] for t in range(len(model.program.types))])

    def changed(self, step: int, index: int) -> "Run":
        """The same run with element ``index`` of instruction ``step``'s output off by one."""
        t = self.program.steps[step].outputs[0]
        values = list(self.values)
        values[t] = values[t].copy()
        flat = values[t].reshape(-1)
        flat[index] += 1 if flat[index] < 0 else -1
        commitments = list(self.trace.commitments)
        commitments[t] = tensor_commitment(values[t], self.program.types[t])
        return Run(self.program, values, commitments)

    def proof(self, step: int, index: int | None) -> StepProof:
        return make_proof(self.program, self.trace, dict(enumerate(self.values)), step, index)

    def calldata(self, step: int, index: int) -> bytes:
        return calldata_proof(self.proof(step, index))

    @property
    def roots(self) -> tuple[bytes, bytes, bytes]:
        """What verify() takes besides the proof: program root, input commitment, trace root."""
        return self.program_root, self.trace.inputs, self.trace.root


def artifact() -> dict:
    return json.loads(ARTIFACT.read_text())


def deploy(boa, name: str) -> object:
    address, _ = boa.env.deploy_code(bytecode=bytes.fromhex(artifact()["contracts"][name]["bytecode"]))
    return address


def reason(output: bytes) -> str:
    from eth_abi import decode
    assert output[:4] == ERROR, output.hex()
    return decode(["string"], output[4:])[0]


def verifier(boa) -> Callable[[bytes, tuple[bytes, bytes, bytes]], str | None]:
    """CvmStep.verify in py-evm: None when the proof refutes, else the revert reason."""
    from eth_abi import encode
    address = deploy(boa, "CvmStep")

    def call(proof: bytes, roots: tuple[bytes, bytes, bytes]) -> str | None:
        data = VERIFY + encode(["bytes", "bytes32", "bytes32", "bytes32"], [proof, *roots])
        c = boa.env.execute_code(to_address=address, data=data, gas=30_000_000)
        return reason(c.output) if c.is_error else None

    return call


def outputs_verifier(boa) -> Callable[[bytes, tuple[bytes, bytes, bytes], bytes], str | None]:
    """CvmStep.verifyOutputs in py-evm: None when the outputs proof refutes the output hash, else
    the revert reason."""
    from eth_abi import encode
    address = deploy(boa, "CvmStep")

    def call(proof: bytes, roots: tuple[bytes, bytes, bytes], output_hash: bytes) -> str | None:
        data = VERIFY_OUTPUTS + encode(["bytes", "bytes32", "bytes32", "bytes32", "bytes32"],
                                       [proof, *roots, output_hash])
        c = boa.env.execute_code(to_address=address, data=data, gas=30_000_000)
        return reason(c.output) if c.is_error else None

    return call
