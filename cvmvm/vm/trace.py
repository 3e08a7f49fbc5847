"""Traces: a hash of every tensor a run produces, committed by a Merkle root.

Tensor ids are visited in order (inputs, params, then each instruction's
outputs), so the leaf list of a trace is fixed by the program alone; only the
tensor hashes depend on the data.

Hashing is a large share of a traced run, and hashlib releases the GIL on
large buffers: a background thread hashes one tensor while the next kernel
runs.  Each digest is stored under its tensor id, so the order in which they
finish changes nothing.  The thread never keeps a tensor alive past its last
use: verification's memory bound counts a tensor only while it is live, so a
tensor about to be freed is waited for, and one that dies at once is hashed
at once.
"""

from __future__ import annotations

import hashlib
import os
import threading
import weakref
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from isa.errors import InternalError
from serializer import native
from serializer.hashing import (INPUT, INSTR, KIND_NAMES, PARAM, TraceEntry, leaf_prefix, merkle_root, node_digest,
                                tensor_hash, trace_root)
from serializer.model import Input, Param
from serializer.records.trace import entry_to_json, trace_doc
from cvmvm.vm.verify import Program

@dataclass(frozen=True)
class TraceLayout:
    """What every leaf of a program's trace commits to besides the tensor hash (FORMAT.md section 3),
    and what each tensor is called."""

    positions: tuple[tuple[int, int, int], ...]  # (kind, index, output) by tensor id
    nodes: tuple[bytes, ...]                     # node digest of each tensor's producer, by tensor id
    prefixes: tuple[bytes, ...]                  # leaf preimage up to the tensor hash, by tensor id
    labels: tuple[tuple[str | None, str], ...]   # (producing op, or None for a variable; name), by tensor id

    def leaf(self, tensor: int, digest: bytes) -> bytes:
        """Tensor ``tensor``'s trace leaf, given its hash."""
        return self.leaves(tensor, (digest,))[0]

    def leaves(self, tensor: int, digests: Iterable[bytes]) -> list[bytes]:
        """Tensor ``tensor``'s trace leaf in each of several runs, given its hash in each."""
        prefix = self.prefixes[tensor]
        return [hashlib.sha256(prefix + d).digest() for d in digests]


def _layout(program: Program) -> TraceLayout:
    model = program.model
    positions: list[tuple[int, int, int]] = []
    nodes: list[bytes] = []
    labels: list[tuple[str | None, str]] = []
    variables: tuple[tuple[int, tuple[Input | Param, ...]], ...] = ((INPUT, model.inputs), (PARAM, model.params))
    for kind, of_kind in variables:
        for k, v in enumerate(of_kind):
            positions.append((kind, k, 0))
            nodes.append(node_digest(native.variable_descriptor(v.type)))
            labels.append((None, v.name))
    for step in program.steps:
        node = node_digest(native.instr_descriptor(step.op.name, step.inputs, step.outputs, step.attrs))
        for j in range(len(step.outputs)):
            positions.append((INSTR, step.index, j))
            nodes.append(node)
            labels.append((step.op.name, step.name))
    prefixes = tuple(leaf_prefix(t, *pos, program.types[t].precision, node)
                     for t, (pos, node) in enumerate(zip(positions, nodes)))
    return TraceLayout(tuple(positions), tuple(nodes), prefixes, tuple(labels))


@dataclass
class _PerProgram:
    """What is fixed by a program, so computed once, not once per run: its trace
    layout, the digests of its read-only params, and which tensors die once each
    tensor is made (the last output of step i: free_after[i])."""

    layout: TraceLayout | None
    params: list[bytes | None]
    dying: dict[int, frozenset[int]]


# By id(program), dropped when the program is.
_per_program: dict[int, _PerProgram] = {}


def _cached(program: Program) -> _PerProgram:
    key = id(program)
    entry = _per_program.get(key)
    if entry is None:
        dying = {s.outputs[-1]: frozenset(program.free_after[s.index]) for s in program.steps}
        entry = _per_program[key] = _PerProgram(None, [None] * len(program.model.params), dying)
        weakref.finalize(program, _per_program.pop, key, None)
    return entry


def trace_layout(program: Program) -> TraceLayout:
    entry = _cached(program)
    if entry.layout is None:
        entry.layout = _layout(program)
    return entry.layout


@dataclass(frozen=True)
class Entry(TraceEntry):
    """A trace entry with what it is about: the op that produced the tensor (None for an input
    or a param), its name (the variable's, or the instruction's), dtype and shape."""

    op: str | None
    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def hash_hex(self) -> str:
        return self.digest.hex()

    def __repr__(self) -> str:
        what = KIND_NAMES[self.kind] if self.op is None else f"{self.op} (instruction {self.index})"
        prec = "" if self.precision is None else f" p{self.precision}"
        return (f"<trace entry: tensor {self.tensor} {self.name}, {what}, {self.dtype}{list(self.shape)}{prec}, "
                f"hash {self.hash_hex}>")


def tensor_name(program: Program, tensor: int) -> str:
    """A tensor's name: its variable's, its instruction's, or ``name:j`` for output j of an
    instruction with several outputs."""
    layout = trace_layout(program)
    name = layout.labels[tensor][1]
    kind, index, output = layout.positions[tensor]
    return f"{name}:{output}" if kind == INSTR and len(program.steps[index].outputs) > 1 else name


@dataclass(frozen=True)
class Trace:
    entries: tuple[Entry, ...]
    tree: bytes   # Merkle root of the leaves: what inclusion proofs reach
    root: bytes   # the trace root: commits to the model hash, the leaf count and the tree

    @property
    def leaves(self) -> list[bytes]:
        return [e.leaf for e in self.entries]


# Below this size a tensor is hashed at once: handing it to the thread costs more.
BACKGROUND_MIN_BYTES = 1 << 16
# When the thread is already behind by this much, the executing thread hashes
# the next tensor itself: both share the hashing, and the memory held for it
# stays bounded.
MAX_BACKLOG_BYTES = 1 << 22

_hasher_lock = threading.Lock()
_hasher: tuple[int, ThreadPoolExecutor] | None = None


def _background() -> ThreadPoolExecutor:
    """The one hashing thread of this process (a forked child starts its own)."""
    global _hasher
    with _hasher_lock:
        if _hasher is None or _hasher[0] != os.getpid():
            _hasher = (os.getpid(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="cvmvm-hash"))
        return _hasher[1]


class Tracer:
    """An execution observer that hashes each tensor once, as it is produced."""

    def __init__(self, program: Program, model_hash: bytes) -> None:
        self.program = program
        self.model_hash = model_hash
        self._digests: list[bytes | None] = [None] * len(program.types)
        self._pending: deque[tuple[int, int, Future[bytes]]] = deque()  # (tensor, its bytes, its hash), in order
        self._backlog = 0
        self._first_param = len(program.model.inputs)
        cached = _cached(program)
        self._params = cached.params
        self._dying = cached.dying
        self._fresh_params: list[int] = []

    def __call__(self, tensor: int, value: np.ndarray) -> None:
        k = tensor - self._first_param
        constant = (0 <= k < len(self._params) and value is self.program.model.params[k].value
                    and not value.flags.writeable)
        if constant and self._params[k] is not None:
            self._digests[tensor] = self._params[k]
            return
        dtype = self.program.types[tensor].dtype
        # One thread works in order, so the finished ones are at the front.
        while self._pending and self._pending[0][2].done():
            self._collect()
        dying = self._dying.get(tensor, frozenset())
        if (value.nbytes < BACKGROUND_MIN_BYTES or tensor in dying
                or (self._backlog and self._backlog + value.nbytes > MAX_BACKLOG_BYTES)):
            self._digests[tensor] = tensor_hash(value, dtype)
        else:
            self._pending.append((tensor, value.nbytes, _background().submit(tensor_hash, value, dtype)))
            self._backlog += value.nbytes
        if constant:
            self._fresh_params.append(k)
        # Execution frees these as soon as this call returns.
        while dying and any(t in dying for t, _, _ in self._pending):
            self._collect()

    @property
    def digests(self) -> list[bytes | None]:
        """Every tensor's hash so far, by tensor id (waits for the background thread)."""
        while self._pending:
            self._collect()
        for k in self._fresh_params:
            self._params[k] = self._digests[self._first_param + k]
        self._fresh_params.clear()
        return self._digests

    def _collect(self) -> None:
        tensor, size, future = self._pending.popleft()
        self._digests[tensor] = future.result()
        self._backlog -= size

    def trace(self) -> Trace:
        return build_trace(self.program, self.model_hash, self.digests)


def build_trace(program: Program, model_hash: bytes, digests: Sequence[bytes | None]) -> Trace:
    """The trace of a run of ``program`` whose every tensor hashed to ``digests`` (by tensor id)."""
    layout = trace_layout(program)
    types = program.types
    known = [d for d in digests if d is not None]
    if len(known) != len(types):
        raise InternalError("trace", f"{len(types) - len(known)} tensors of the run were never hashed")
    entries = tuple(Entry(kind, index, out, t, types[t].precision, node, d, op, name, types[t].dtype, types[t].shape)
                    for t, ((kind, index, out), node, d, (op, name))
                    in enumerate(zip(layout.positions, layout.nodes, known, layout.labels)))
    tree = merkle_root([layout.leaf(t, d) for t, d in enumerate(known)])
    return Trace(entries, tree, trace_root(model_hash, len(entries), tree))


def trace_to_json(program: Program, trace: Trace, model_hash: bytes) -> dict[str, Any]:
    """A self-describing trace file (serializer.records.trace): enough to name the op at a
    disagreement without the model."""
    model = program.model
    rows = []
    for e in trace.entries:
        t = program.types[e.tensor]
        if e.kind == INSTR:
            step = program.steps[e.index]
            rows.append(entry_to_json(e, t, step.name, (step.op.name, step.inputs, step.attrs)))
        else:
            rows.append(entry_to_json(e, t, (model.inputs[e.index] if e.kind == INPUT else model.params[e.index]).name))
    return trace_doc(model_hash, trace.root, rows)
