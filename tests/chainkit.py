"""Shared by the chain tests: runs committed as format 3 (honest, or with one element
changed and every root recomputed consistently), their element proofs, and the verifier
contract deployed in py-evm through titanoboa (the `chain` extra)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Callable

import numpy as np

from isa.types import precision_bound
from serializer.hashing import outputs_hash, tensor_commitment
from serializer.records.stepproof import StepProof, calldata_proof
from cvmvm.vm.api import single_op_model
from cvmvm.vm.execute import execute
from cvmvm.vm.trace import make_trace, program_layout
from cvmvm.vm.verify import Program
from cvmvm.tx.stepproof import make_proof
from tests.test_models import generate

ARTIFACT = Path(__file__).resolve().parent.parent / "cvmvm" / "tx" / "solidity" / "artifact.json"
VERIFY = bytes.fromhex("6efef009")   # verify(bytes,bytes32,bytes32,bytes32)
VERIFY_OUTPUTS = bytes.fromhex("57a2dc42")   # verifyOutputs(bytes,bytes32,bytes32,bytes32,bytes32)
ERROR = bytes.fromhex("08c379a0")    # Error(string)
PRECISIONS = (1, 2, 7, 8, 9, 15, 16, 17, 24, 31, 32)


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
    def executed(cls, program: Program, feeds: dict[str, np.ndarray]) -> "Run":
        env: dict[int, np.ndarray] = {}
        execute(program, feeds, env.__setitem__)
        return cls(program, [env[t] for t in range(len(program.types))])

    @classmethod
    def of_fixture(cls, name: str) -> "Run":
        return cls.executed(generate.load_fixture_model(name).program, {"data": generate.load_fixture_inputs(name)[0]})

    @classmethod
    def of_op(cls, op: str, inputs: list[np.ndarray], attrs: dict[str, Any], precisions: list[int]) -> "Run":
        """The run of single_op_model's one-instruction program (its CvmError outside the op's rules)."""
        model, feeds = single_op_model(op, inputs, attrs, precisions)
        return cls.executed(model.program, feeds)

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
    def output_hash(self) -> bytes:
        """The hash of the run's outputs (FORMAT.md section 10.2): what a commitment claims."""
        return outputs_hash([self.trace.commitments[t] for t in self.program.model.outputs])

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


def extreme_values(rnd: random.Random, shape: tuple[int, ...], precision: int) -> np.ndarray:
    """Values of a precision, half of them at its extremes (+-bound, +-(bound-1), 0, +-1)."""
    bound = precision_bound(precision)
    edges = sorted({-bound, -bound + 1 if bound else 0, -1 if bound else 0, 0, 1 if bound else 0,
                    bound - 1 if bound else 0, bound})
    size = int(np.prod(shape))
    flat = [rnd.choice(edges) if rnd.random() < 0.5 else rnd.randint(-bound, bound) for _ in range(size)]
    return np.array(flat, dtype=np.int64).reshape(shape)


def instance(rnd: random.Random, op: str) -> tuple[list[np.ndarray], dict[str, Any], list[int]]:
    """Random inputs, attributes and input precisions for one op."""
    p = rnd.choice(PRECISIONS)
    small = lambda: rnd.choice((1, 2, 3, 4, 5))  # noqa: E731
    if op in ("relu", "abs", "negative", "cvm_precision", "flatten"):
        shape = tuple(small() for _ in range(rnd.randint(1, 4)))
        return [extreme_values(rnd, shape, p)], {}, [p]
    if op == "clip":
        lo = rnd.randint(-(1 << 31) + 1, (1 << 31) - 2)
        return [extreme_values(rnd, (small(), small()), p)], {"a_min": lo, "a_max": rnd.randint(lo + 1, (1 << 31) - 1)}, [p]
    if op == "cvm_clip":
        return [extreme_values(rnd, (small(), small()), p)], {"precision": rnd.choice(PRECISIONS)}, [p]
    if op == "cvm_right_shift":
        return ([extreme_values(rnd, (small(), small()), p)],
                {"precision": rnd.choice(PRECISIONS), "shift_bit": rnd.randint(1, 32)}, [p])
    if op == "cvm_left_shift":
        p = rnd.randint(1, 31)
        return ([extreme_values(rnd, (small(), small()), p)],
                {"precision": rnd.choice(PRECISIONS), "shift_bit": rnd.randint(1, 32 - p)}, [p])
    if op in ("elemwise_add", "elemwise_sub"):
        shape = (small(), small(), small())
        q = min(rnd.choice(PRECISIONS), 31)
        return [extreme_values(rnd, shape, min(p, 31)), extreme_values(rnd, shape, q)], {}, [min(p, 31), q]
    if op.startswith("broadcast_"):
        out = tuple(small() for _ in range(rnd.randint(1, 4)))
        a = tuple(d if rnd.random() < 0.6 else 1 for d in out)
        b = tuple(d if rnd.random() < 0.6 else 1 for d in out)[rnd.randint(0, len(out) - 1):]
        pa, pb = (rnd.randint(1, 16), rnd.randint(1, 16)) if op == "broadcast_mul" else (min(p, 31), rnd.choice(PRECISIONS[:-1]))
        return [extreme_values(rnd, a, pa), extreme_values(rnd, b, pb)], {}, [pa, pb]
    if op in ("sum", "max"):
        shape = tuple(small() for _ in range(rnd.randint(1, 4)))
        axes = sorted(rnd.sample(range(len(shape)), rnd.randint(0, len(shape))))
        axes = [a - len(shape) if rnd.random() < 0.3 else a for a in axes]
        q = min(p, 24)
        return ([extreme_values(rnd, shape, q)],
                {"axis": tuple(axes), "keepdims": rnd.random() < 0.5, "exclude": rnd.random() < 0.3}, [q])
    if op == "conv2d":
        groups = rnd.choice((1, 1, 2))
        cin, cout = groups * rnd.randint(1, 3), groups * rnd.randint(1, 3)
        kh, kw = rnd.randint(1, 3), rnd.randint(1, 3)
        h, w = rnd.randint(kh, 7), rnd.randint(kw, 7)
        attrs = {"channels": cout, "kernel_size": (kh, kw), "strides": (rnd.randint(1, 2), rnd.randint(1, 2)),
                 "padding": (rnd.randint(0, 2), rnd.randint(0, 2)), "dilation": (rnd.randint(1, 2), rnd.randint(1, 2)),
                 "groups": groups, "use_bias": rnd.random() < 0.7}
        if (h + 2 * attrs["padding"][0] - attrs["dilation"][0] * (kh - 1) - 1 < 0
                or w + 2 * attrs["padding"][1] - attrs["dilation"][1] * (kw - 1) - 1 < 0):
            attrs["dilation"] = (1, 1)
        px, pw_, pb = rnd.randint(1, 8), rnd.randint(1, 8), rnd.randint(1, 16)
        inputs = [extreme_values(rnd, (1, cin, h, w), px), extreme_values(rnd, (cout, cin // groups, kh, kw), pw_)]
        precisions = [px, pw_]
        if attrs["use_bias"]:
            inputs.append(extreme_values(rnd, (cout,), pb))
            precisions.append(pb)
        return inputs, attrs, precisions
    if op == "dense":
        m, k, u = rnd.randint(1, 3), rnd.randint(1, 40), rnd.randint(1, 6)
        use_bias = rnd.random() < 0.7
        px, pw_, pb = rnd.randint(1, 8), rnd.randint(1, 8), rnd.randint(1, 20)
        inputs = [extreme_values(rnd, (m, k), px), extreme_values(rnd, (u, k), pw_)]
        precisions = [px, pw_]
        if use_bias:
            inputs.append(extreme_values(rnd, (u,), pb))
            precisions.append(pb)
        return inputs, {"units": u, "use_bias": use_bias}, precisions
    if op == "max_pool2d":
        kh, kw = rnd.randint(1, 3), rnd.randint(1, 3)
        pad = (rnd.randint(0, kh - 1), rnd.randint(0, kw - 1))
        attrs = {"pool_size": (kh, kw), "strides": (rnd.randint(1, 3), rnd.randint(1, 3)),
                 "padding": pad if rnd.random() < 0.7 else (min(pad),), "ceil_mode": rnd.random() < 0.5}
        return [extreme_values(rnd, (1, rnd.randint(1, 3), rnd.randint(kh, 6), rnd.randint(kw, 6)), p)], attrs, [p]
    if op == "reshape":
        shape = (small(), small(), small())
        return [extreme_values(rnd, shape, p)], {"shape": (shape[0], -1)}, [p]
    if op == "squeeze":
        return [extreme_values(rnd, (small(), 1, small()), p)], {"axis": (1,)}, [p]
    if op == "expand_dims":
        return [extreme_values(rnd, (small(), small()), p)], {"axis": rnd.randint(0, 2), "num_newaxis": rnd.randint(1, 2)}, [p]
    raise AssertionError(op)
