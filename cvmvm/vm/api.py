"""The public Python interface: load a model, verify it, run it (once, or many input sets batched)."""

from __future__ import annotations

import json
import os
from collections import abc
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, Union

import numpy as np

from isa.attrs import parse_attrs
from isa.errors import CvmError, InputError, InvalidError, LimitError, MalformedError, UsageError, shown
from isa.table import OP_BY_NAME
from isa.types import (INT32, MAX_DIM, MAX_PRECISION, MIN_PRECISION, TensorType, bitlen, check_shape, precision_bound,
                       vm_dtype)
from serializer import cortex, kinds, native
from serializer.hashing import Committer, model_hash, outputs_hash
from serializer.limits import MAX_GRAPH_JSON_BYTES, MAX_PARAMS_BYTES
from serializer.strict import MAX_JSON_DEPTH
from cvmvm import files
from cvmvm.vm.batching import Batch
from cvmvm.vm.execute import Clipping, TensorObserver, compile_native, execute, peak_bytes, prepare_inputs
from cvmvm.vm.trace import Trace, Tracer, make_trace, program_layout, tensor_name
from cvmvm.vm.verify import (DEFAULT_MEMORY_LIMIT, DEFAULT_WORK_LIMIT, Limits, Program, check_limit, kept_memory,
                              verify, verify_instruction)

# A file: its path, or its bytes.
Source = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]
# One run's inputs: input name -> array.
Feeds = Mapping[str, np.ndarray]


@dataclass(frozen=True, eq=False)
class Result:
    """One run: the outputs, what they commit to, what the run cost, and what it clipped."""

    outputs: list[np.ndarray]            # in head order (Model.output_names)
    ops: int
    output_commitments: tuple[bytes, ...]  # each output's tensor commitment (FORMAT.md section 2)
    output_hash: bytes                   # the hash of them all, in head order (section 5)
    peak_bytes: int                      # the most tensor bytes alive at once
    trace: Trace | None = None           # run(..., trace=True): every tensor's commitment, under a trace root
    output_scales: tuple[float | None, ...] = ()   # FORMAT.md 1.6; () for a model without scales
    clipping: tuple[Clipping, ...] = ()  # each int32 input that had values outside its precision
    tensors: tuple[np.ndarray, ...] | None = None  # run(..., keep=True): every tensor, by tensor id

    def dequantized(self) -> list[np.ndarray]:
        """The outputs as float64 values, q * scale (one IEEE multiplication each); an output without a
        scale is returned as it is."""
        scales = self.output_scales or (None,) * len(self.outputs)
        return [v if s is None else v.astype(np.float64) * np.float64(s) for v, s in zip(self.outputs, scales)]

    @property
    def output_hash_hex(self) -> str:
        return self.output_hash.hex()

    @property
    def clipped(self) -> int:
        """How many input values were outside their precision and clipped."""
        return sum(c.count for c in self.clipping)


def _type_text(t: TensorType) -> str:
    return f"{t.dtype}{list(t.shape)}" + ("" if t.precision is None else f" p{t.precision}")


def _check_feeds(inputs: object, where: str) -> None:
    # A dict first: typing's Mapping costs a microsecond a call through its __instancecheck__.
    if type(inputs) is not dict and not isinstance(inputs, abc.Mapping):
        hint = " (inputs are named: {'data': x}, not [x])" if isinstance(inputs, (list, tuple)) else ""
        raise UsageError("argument", f"{where}: expected a mapping of input name to numpy array, "
                                     f"got {type(inputs).__name__}{hint}")
    for name in inputs:
        if not isinstance(name, str):
            raise UsageError("argument", f"{where}: input names are strings, got {name!r}")


class Model:
    """A verified program, ready to run any number of times."""

    def __init__(self, program: Program, canonical: bytes | None = None) -> None:
        self.program = program
        self._canonical = canonical
        self._hash: bytes | None = None
        self._batch: Batch | None = None
        self._peak: int | None = None
        self._output_committers = tuple(Committer(t) for t in program.output_types)

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {_type_text(t)}" for n, t in self.inputs.items())
        outs = ", ".join(f"{n}: {_type_text(t)}" for n, t in zip(self.output_names, self.output_types))
        return (f"<cvmvm.Model {self.model_hash_hex[:16]}: {len(self.program.steps)} instructions, ops {self.ops}; "
                f"inputs {ins}; outputs {outs}>")

    @property
    def canonical_bytes(self) -> bytes:
        """The model in the native format: the bytes that ``model_hash`` commits to."""
        if self._canonical is None:
            self._canonical = native.encode(self.program.model)
        return self._canonical

    @property
    def program_root(self) -> bytes:
        """The root over the program's records (FORMAT.md section 3); its params are committed once."""
        return program_layout(self.program).root

    @property
    def model_hash(self) -> bytes:
        # Hashed once, not once per run (perf-large is 11 MB).
        if self._hash is None:
            self._hash = model_hash(self.program_root, self.canonical_bytes)
        return self._hash

    @property
    def model_hash_hex(self) -> str:
        return self.model_hash.hex()

    @property
    def ops(self) -> int:
        return self.program.ops

    @property
    def work(self) -> int:
        """Work units one run takes (docs/RESOURCES.md): what the VM really spends, unlike ``ops``."""
        return self.program.work

    @property
    def memory_bytes(self) -> int:
        """Peak bytes of one run: live tensors plus the running kernel's outputs and scratch."""
        return self.program.memory_bytes

    @property
    def limits(self) -> Limits:
        """The limits the model was verified under."""
        return self.program.limits

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

    @property
    def output_names(self) -> tuple[str, ...]:
        """Each output's name, in head order: its instruction's (``name:j`` for output j of an
        instruction with several), or its variable's."""
        return tuple(tensor_name(self.program, t) for t in self.program.model.outputs)

    def _result_scales(self) -> tuple[float | None, ...]:
        return self.output_scales if self.program.model.scales is not None else ()

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model in the native format (atomically: a complete file or none)."""
        if not isinstance(path, (str, os.PathLike)):
            raise UsageError("argument", f"save: expected a path, got {type(path).__name__}")
        files.write_file(path, self.canonical_bytes, "model")

    def run(self, inputs: Feeds, trace: bool = False, keep: bool = False) -> Result:
        """Run once.  ``trace``: commit every tensor into a trace (FORMAT.md section 4).  ``keep``: keep
        every tensor (``Result.tensors``, by tensor id: inputs, params, then each instruction's
        outputs, as ``cvmvm disasm`` numbers them).

        An input with a float scale also takes a float array, quantized as FORMAT.md 1.6 defines.
        """
        _check_flags(trace=trace, keep=keep)
        _check_feeds(inputs, "inputs")
        limit = self.program.limits.memory
        if keep and limit is not None and kept_memory(self.program) > limit:
            raise LimitError("memory", f"keeping every tensor needs {kept_memory(self.program)} bytes of memory, "
                                       f"over the memory limit of {limit}")
        tracer = Tracer(self.program) if trace else None
        kept: list[np.ndarray] = []
        observe: TensorObserver | None = tracer
        if keep:
            def observe(t: int, value: np.ndarray) -> None:
                if tracer is not None:
                    tracer(t, value)
                kept.append(value)  # tensors arrive in id order
        clipped: list[Clipping] = []
        with tracer.running() if tracer is not None else nullcontext():
            outputs, peak = execute(self.program, inputs, observe, clipped)
        if tracer is not None:
            commitments = tuple(tracer.commitments[t] for t in self.program.model.outputs)
        else:
            commitments = tuple(commit(v) for commit, v in zip(self._output_committers, outputs))
        return Result(outputs, self.program.ops, commitments, outputs_hash(commitments), peak,
                      tracer.trace() if tracer is not None else None, self._result_scales(), tuple(clipped),
                      tuple(kept) if keep else None)

    def compile(self) -> bool:
        """Make every later run one call of a compiled loop, now rather than after many runs, and
        say whether it will be: a model of small tensors and the loop's ops, with numba installed
        (the ``speed`` extra).  Results are the same either way; it takes seconds, once per process
        (docs/DESIGN.md, cvmvm/vm/native.py)."""
        return compile_native(self.program)

    def run_batch(self, feeds: Sequence[Feeds], trace: bool = False) -> list[Result]:
        """Run many input sets; item k's Result is field for field what ``run(feeds[k], trace=trace)``
        gives.  They run stacked along axis 0 where the program allows it (cvmvm.vm.batching),
        one at a time where it does not.  A bad item raises its error, naming the item."""
        _check_flags(trace=trace)
        if isinstance(feeds, (Mapping, str, bytes)) or not isinstance(feeds, Sequence):
            raise UsageError("argument", f"feeds: expected a list of mappings of input name to numpy array, "
                                         f"got {type(feeds).__name__}")
        prepared: list[list[np.ndarray]] = []
        clippings: list[tuple[Clipping, ...]] = []
        for k, feed in enumerate(feeds):
            _check_feeds(feed, f"feeds[{k}]")
            clipped: list[Clipping] = []
            try:
                prepared.append(prepare_inputs(self.program, feed, clipped))
            except CvmError as e:
                raise type(e)(e.reason, f"feeds[{k}]: {e.message}") from None
            clippings.append(tuple(clipped))
        if self._batch is None:
            self._batch = Batch(self, MAX_DIM)  # as many per stacked run as the ISA and memory allow
        if self._peak is None:
            self._peak = peak_bytes(self.program)
        heads = self.program.model.outputs
        peak = self._peak
        results = []
        for k, (run, clipping) in enumerate(zip(self._batch.run(prepared, outputs=True), clippings)):
            if isinstance(run, CvmError):
                raise type(run)(run.reason, f"feeds[{k}]: {run.message}")
            results.append(Result(list(run.outputs or ()), run.ops, tuple(run.commitments[t] for t in heads),
                                  run.output_hash, peak, make_trace(self.program, run.commitments, run.trace_root) if trace else None,
                                  self._result_scales(), clipping))
        return results


def model_limit(head: bytes) -> tuple[int, str]:
    """The byte limit of a model file that begins with ``head``, and what to call it
    (``files.read_by_head``): a native model's for a msgpack map, else a Cortex graph JSON's,
    the only other kind a model file can be."""
    return (native.MAX_MODEL_BYTES, "model") if kinds.msgpack_map(head) else (MAX_GRAPH_JSON_BYTES, "graph JSON")


def _read(source: object, what: str) -> tuple[bytes, str]:
    """A file's bytes, from its path or given directly, and how to name it in messages."""
    if what == "params":
        return files.given_bytes(source, what, lambda head: (MAX_PARAMS_BYTES, what))
    return files.given_bytes(source, what, model_limit)


def _nesting(value: object) -> int:
    """How deep dicts and lists nest in ``value``, up to MAX_JSON_DEPTH + 1, without recursion:
    json.dumps recurses once per level, bounded only by a recursion limit another library in the
    process may have raised past the C stack (strict.MAX_JSON_DEPTH)."""
    deepest = 0
    todo: list[tuple[object, int]] = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, (dict, list, tuple)):
            if depth > MAX_JSON_DEPTH:
                return depth
            deepest = max(deepest, depth)
            todo.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def _check_flags(**flags: object) -> None:
    """Flags are bools: a numpy array has no truth value, and "no" would be true."""
    for name, value in flags.items():
        if type(value) is not bool:
            raise UsageError("argument", f"{name}: expected True or False, got {shown(value)}")


def _limits(ops_limit: object, memory_limit: object, work_limit: object) -> Limits:
    for name, value in (("ops_limit", ops_limit), ("memory_limit", memory_limit), ("work_limit", work_limit)):
        check_limit(name, value)   # named as the caller passed it, before Limits checks it as its field
    return Limits(ops_limit, memory_limit, work_limit)  # type: ignore[arg-type]


def load(source: Source, params: Source | None = None, *, ops_limit: int | None = None,
         memory_limit: int | None = DEFAULT_MEMORY_LIMIT, work_limit: int | None = DEFAULT_WORK_LIMIT) -> Model:
    """Load and verify a model: a native model, or a Cortex graph JSON with its params, told apart
    by content.  ``source`` and ``params`` are paths or the files' bytes (bytes, bytearray,
    memoryview); ``params`` only for a Cortex graph that has params.

    A model whose run would exceed a limit is refused (limit.ops, limit.memory,
    limit.work: docs/RESOURCES.md) before anything runs; None lifts a limit.
    """
    limits = _limits(ops_limit, memory_limit, work_limit)
    data, where = _read(source, "model")
    kind = kinds.expect(data, kinds.MODEL, where, "a model (a native model or a Cortex graph JSON)")
    if kind == kinds.NATIVE or (kind is None and data.lstrip()[:1] != b"{"):
        if params is not None and kind is None:
            native.decode(data)   # bytes that are no model are malformed as one, with params or without
        if params is not None:
            raise UsageError("conflict", f"{where}: params go with a Cortex graph JSON; this is a native model")
        return Model(verify(native.decode(data), limits), canonical=data)
    blob = None
    if params is not None:
        blob, params_where = _read(params, "params")
        kinds.expect(blob, (kinds.CORTEX_PARAMS,), params_where)
    return Model(verify(cortex.read_cortex(data, blob), limits))


def load_cortex(graph: Any, params: Any = None, *, ops_limit: int | None = None,
                memory_limit: int | None = DEFAULT_MEMORY_LIMIT, work_limit: int | None = DEFAULT_WORK_LIMIT) -> Model:
    """Load and verify a Cortex model (graph: path, JSON text, bytes or dict; params: path, bytes or None);
    limits as for ``load``.  A dict is read as the JSON text it spells, as strictly as a file."""
    if isinstance(graph, dict):
        if _nesting(graph) > MAX_JSON_DEPTH:
            raise MalformedError("graph_json", f"graph: a dict nested more than {MAX_JSON_DEPTH} levels deep")
        try:
            graph = json.dumps(graph, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as e:
            # Values JSON has no form for, an integer past Python's digit limit, nesting past the
            # recursion limit: a file could not hold them either.
            raise MalformedError("graph_json", f"graph: a dict that is no JSON document ({type(e).__name__})") \
                from None
    if isinstance(graph, os.PathLike) or (isinstance(graph, str) and not graph.lstrip().startswith("{")):
        graph = files.read_bytes(graph, "graph JSON", MAX_GRAPH_JSON_BYTES)
    if isinstance(params, (str, os.PathLike)):
        params = files.read_bytes(params, "params", MAX_PARAMS_BYTES)
    return Model(verify(cortex.read_cortex(graph, params), _limits(ops_limit, memory_limit, work_limit)))


def _run_op_type(k: int, value: np.ndarray, precision: int | None, int32_only: bool) -> TensorType:
    """The type a run_op input stands for.  An int64 array stands for int32 values only where the op
    takes nothing but int32; for an op with its own dtype rule (max_pool) every array has its own
    dtype, so run_op refuses exactly what a model refuses."""
    if not isinstance(value, np.ndarray):
        raise InputError("dtype", f"input {k}: expected a numpy array, got {type(value).__name__}")
    shape = tuple(int(d) for d in value.shape)
    check_shape(shape, f"input {k}")   # before any pass over its values: a broadcast view may be huge
    if value.dtype.kind == "i" and (value.dtype.itemsize == 4 or (value.dtype.itemsize == 8 and int32_only)):
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


def value_type(value: np.ndarray, precision: int | None = None) -> TensorType:
    """The VM type of an array: an int32-valued integer array is int32 of ``precision`` (default:
    the smallest that holds its values; none when it holds INT32_MIN), any other VM dtype itself."""
    t = _run_op_type(0, value, precision, True)
    if t.precision is not None and not MIN_PRECISION <= t.precision <= MAX_PRECISION:
        raise InputError("precision", f"precision {t.precision} must be in [1, 32]")
    if t.precision is not None and value.size:
        bound = precision_bound(t.precision)
        if int(value.min()) < -bound or int(value.max()) > bound:
            raise InputError("value", f"values outside precision {t.precision} (+-{bound})")
    return t


def single_op_model(name: str, inputs: Sequence[np.ndarray], attrs: Mapping[str, Any] | None = None,
                    precisions: Sequence[int | None] | None = None,
                    limits: Limits = Limits()) -> tuple[Model, dict[str, np.ndarray]]:
    """A verified one-instruction model over ``inputs`` (named in0, in1, ...), and its feeds."""
    if not isinstance(name, str):
        raise UsageError("argument", f"op name: expected a str, got {type(name).__name__}")
    if not isinstance(inputs, (list, tuple)):
        raise UsageError("argument", f"inputs: expected a list of numpy arrays, got {type(inputs).__name__}")
    if attrs is not None and not isinstance(attrs, Mapping):
        raise UsageError("argument", f"attrs: expected a mapping of attribute name to value, "
                                     f"got {type(attrs).__name__}")
    if precisions is not None and not isinstance(precisions, (list, tuple)):
        raise UsageError("argument", f"precisions: expected a list, got {type(precisions).__name__}")
    if not isinstance(limits, Limits):
        raise UsageError("argument", f"limits: expected a cvmvm.Limits, got {type(limits).__name__}")
    op = OP_BY_NAME.get(name)
    if op is None:
        raise InvalidError("op", f"unknown op {name!r}")
    if precisions is not None and len(precisions) != len(inputs):
        raise InputError("precision", f"{len(precisions)} precisions for {len(inputs)} inputs")
    for p in precisions or ():
        if p is not None and type(p) is not int:
            raise UsageError("argument", f"precisions: expected integers or None, got {shown(p)}")
    record = parse_attrs(op.attrs, dict(attrs or {}), fill_defaults=True)
    types = [_run_op_type(k, v, None if precisions is None else precisions[k], op.dtypes is None)
             for k, v in enumerate(inputs)]
    program = verify_instruction(op, record, list(zip(types, inputs)), limits)
    # _run_op_type types an int64 array int32 when its values fit; the program reads int32.
    feeds = {f"in{k}": np.asarray(v, dtype=np.int32) if t.dtype == INT32 else v
             for k, (t, v) in enumerate(zip(types, inputs))}
    return Model(program), feeds


def run_op(name: str, inputs: Sequence[np.ndarray], attrs: Mapping[str, Any] | None = None,
           precisions: Sequence[int | None] | None = None, limits: Limits = Limits()) -> list[np.ndarray]:
    """Verify and run one op, exactly as inside a model.

    Attributes are typed Python values; missing ones take the Cortex runtime's
    defaults.  ``precisions`` gives each int32 input's precision (default: the
    smallest that holds its values); unlike a model's ``data``, values outside
    it are an error, not clipped.  ``limits`` as for a model (the default limits).
    """
    model, feeds = single_op_model(name, inputs, attrs, precisions, limits)
    return execute(model.program, feeds)[0]


__all__ = ["Model", "Result", "Clipping", "Limits", "load", "load_cortex", "run_op", "single_op_model", "value_type"]
