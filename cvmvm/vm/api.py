"""The public Python interface: load, verify, run."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from isa.attrs import parse_attrs
from isa.errors import InputError, InvalidError
from isa.table import OP_BY_NAME
from isa.types import INT32, TensorType, bitlen, vm_dtype
from serializer import cortex, native
from serializer.hashing import outputs_hash, tensor_hash
from cvmvm import files
from cvmvm.vm.execute import execute
from cvmvm.vm.trace import Trace, Tracer
from cvmvm.vm.verify import Limits, Program, verify, verify_instruction


@dataclass(frozen=True)
class Result:
    outputs: list[np.ndarray]
    ops: int
    output_hashes: tuple[bytes, ...]
    output_hash: bytes
    peak_bytes: int
    trace: Trace | None = None
    output_scales: tuple[float | None, ...] = ()   # FORMAT.md 1.6; () for a model without scales

    def dequantized(self) -> list[np.ndarray]:
        """The outputs as float64 values, q * scale (one IEEE multiplication each); an output without a
        scale is returned as it is."""
        scales = self.output_scales or (None,) * len(self.outputs)
        return [v if s is None else v.astype(np.float64) * np.float64(s) for v, s in zip(self.outputs, scales)]


class Model:
    """A verified program, ready to run any number of times."""

    def __init__(self, program: Program, canonical: bytes | None = None) -> None:
        self.program = program
        self._canonical = canonical
        self._hash: bytes | None = None

    @property
    def canonical_bytes(self) -> bytes:
        """The model in the native format: the bytes that ``model_hash`` commits to."""
        if self._canonical is None:
            self._canonical = native.encode(self.program.model)
        return self._canonical

    @property
    def model_hash(self) -> bytes:
        # Every traced run commits to it: hashed once, not once per run (perf-large is 11 MB).
        if self._hash is None:
            self._hash = hashlib.sha256(self.canonical_bytes).digest()
        return self._hash

    @property
    def ops(self) -> int:
        return self.program.ops

    @property
    def gas(self) -> int:
        """The Cortex chain's gas: ops / 20000, truncated."""
        return self.program.ops // 20000

    @property
    def inputs(self) -> dict[str, TensorType]:
        return {i.name: i.type for i in self.program.model.inputs}

    @property
    def output_types(self) -> tuple[TensorType, ...]:
        return self.program.output_types

    @property
    def input_scales(self) -> dict[str, float | None]:
        """Each input's float scale (FORMAT.md 1.6): Model.run quantizes a float array for a scaled input."""
        m = self.program.model
        return {i.name: s for i, s in zip(m.inputs, m.input_scales)}

    @property
    def output_scales(self) -> tuple[float | None, ...]:
        return self.program.model.output_scales

    def run(self, inputs: Mapping[str, np.ndarray], trace: bool = False) -> Result:
        """Run once; with ``trace`` every tensor is hashed into a Merkle-committed trace.

        An input with a float scale also takes a float array, quantized as FORMAT.md 1.6 defines.
        """
        tracer = Tracer(self.program, self.model_hash) if trace else None
        outputs, peak = execute(self.program, inputs, tracer)
        if tracer is not None:
            digests = tuple(tracer.digests[t] for t in self.program.model.outputs)
        else:
            digests = tuple(tensor_hash(v, t.dtype) for v, t in zip(outputs, self.program.output_types))
        return Result(outputs, self.program.ops, digests, outputs_hash(digests), peak,
                      tracer.trace() if tracer is not None else None,
                      self.output_scales if self.program.model.scales is not None else ())


def load(source: str | os.PathLike[str] | bytes, *, ops_limit: int | None = None) -> Model:
    """Load and verify a native (canonical msgpack) model from a path or bytes."""
    data = source if isinstance(source, bytes) else files.read_bytes(source, "model")
    return Model(verify(native.decode(data), Limits(ops=ops_limit)), canonical=data)


def load_cortex(graph: Any, params: Any = None, *, ops_limit: int | None = None) -> Model:
    """Load and verify a Cortex model (graph: path, str, bytes or dict; params: path, bytes or None)."""
    return Model(verify(cortex.read_cortex(graph, params), Limits(ops=ops_limit)))


def _run_op_type(k: int, value: np.ndarray, precision: int | None) -> TensorType:
    if not isinstance(value, np.ndarray):
        raise InputError("dtype", f"input {k}: expected a numpy array, got {type(value).__name__}")
    shape = tuple(int(d) for d in value.shape)
    if value.dtype.kind == "i" and value.dtype.itemsize in (4, 8):
        lo, hi = (int(value.min()), int(value.max())) if value.size else (0, 0)
        if lo < -(1 << 31) or hi > (1 << 31) - 1:
            raise InputError("value", f"input {k}: values [{lo}, {hi}] do not fit int32")
        if precision is None and lo != -(1 << 31):
            precision = bitlen(max(-lo, hi)) + 1
        # INT32_MIN without a given precision: a raw int32 tensor (max_pool only).
        return TensorType(shape, precision, INT32)
    name = vm_dtype(value.dtype)
    if name is None:
        raise InputError("dtype", f"input {k}: unsupported dtype {value.dtype}")
    return TensorType(shape, None, name)


def single_op_model(name: str, inputs: Sequence[np.ndarray], attrs: Mapping[str, Any] | None = None,
                    precisions: Sequence[int | None] | None = None) -> tuple[Model, dict[str, np.ndarray]]:
    """A verified one-instruction model over ``inputs`` (named in0, in1, ...), and its feeds."""
    op = OP_BY_NAME.get(name)
    if op is None:
        raise InvalidError("op", f"unknown op {name!r}")
    if precisions is not None and len(precisions) != len(inputs):
        raise InputError("precision", f"{len(precisions)} precisions for {len(inputs)} inputs")
    record = parse_attrs(op.attrs, dict(attrs or {}), fill_defaults=True)
    types = [_run_op_type(k, v, None if precisions is None else precisions[k]) for k, v in enumerate(inputs)]
    program = verify_instruction(op, record, list(zip(types, inputs)))
    # _run_op_type types an int64 array int32 when its values fit; the program reads int32.
    feeds = {f"in{k}": np.asarray(v, dtype=np.int32) if t.dtype == INT32 else v
             for k, (t, v) in enumerate(zip(types, inputs))}
    return Model(program), feeds


def run_op(name: str, inputs: Sequence[np.ndarray], attrs: Mapping[str, Any] | None = None,
           precisions: Sequence[int | None] | None = None) -> list[np.ndarray]:
    """Verify and run one op, exactly as inside a model.

    Attributes are typed Python values; missing ones take the Cortex runtime's
    defaults.  ``precisions`` gives each int32 input's precision (default: the
    smallest that holds its values); unlike a model's ``data``, values outside
    it are an error, not clipped.
    """
    model, feeds = single_op_model(name, inputs, attrs, precisions)
    return execute(model.program, feeds)[0]


__all__ = ["Model", "Result", "Limits", "load", "load_cortex", "run_op", "single_op_model"]
