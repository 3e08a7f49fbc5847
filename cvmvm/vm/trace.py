"""Traces (docs/FORMAT.md sections 3-4): every tensor of a run committed, under a trace
root that binds the program root and the input commitment.

``program_layout`` is what a program fixes, computed once per program: each
tensor's position, the params' commitments, the program records, their tree and
the program root.  A ``Tracer`` observes a run and commits each tensor once, as
it is produced.

Hashing is most of a traced run's extra cost.  A large tensor's body (its
chunks are 4096 bytes) is cut into blocks of ``BLOCK_CHUNKS`` chunks; the root
of each block is computed by one of two hashing threads (hashlib releases the
GIL on a chunk, so both cores hash while the next kernel runs), and the block
roots fold into the chunk root: in an RFC 6962 tree the nodes at height m are
exactly the roots of consecutive 2^m-leaf blocks.  Each commitment is stored under its tensor id, so the order in
which the threads finish changes nothing.  The threads never keep a tensor (or
its committed body) past its last use: verification's memory bound counts a
tensor only while it is live, so a tensor about to be freed is waited for
(one that dies at once included).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
import functools
from dataclasses import dataclass, field
from typing import Any, Sequence, cast

import numpy as np

from isa.errors import InternalError
from isa.types import TensorType
from serializer.hashing import (CHUNK_SIZE, INPUT, INSTR, KIND_NAMES, PARAM, Committer, TraceEntry, audit_path,
                                chunk_leaves, chunk_root, input_commitment, leaf_hash, program_root, trace_root,
                                tree_levels, tree_root)
from serializer.records.program import head_record, input_record, instr_record, param_record
from serializer.records.trace import entry_to_json, trace_doc
from cvmvm.vm.verify import Program


@dataclass(frozen=True)
class ProgramLayout:
    """What a program fixes about its traces and its program root (FORMAT.md sections 3-4)."""

    positions: tuple[tuple[int, int, int], ...]  # (kind, index, output) by tensor id
    labels: tuple[tuple[str | None, str], ...]   # (producing op, or None for a variable; name), by tensor id
    params: tuple[bytes, ...]                    # the params' commitments
    counts: tuple[int, int, int, int, int]       # I, P, N, H, T
    records: tuple[bytes, ...]                   # inputs, params, instructions, heads
    levels: list[list[bytes]]                    # the records' tree
    dying: dict[int, frozenset[int]]             # the tensors execution frees once this one is made
    committers: tuple[Committer, ...]            # by tensor id (one per type)

    @functools.cached_property
    def root(self) -> bytes:
        return program_root(self.counts, self.levels[-1][0])

    def path(self, leaf: int) -> list[bytes]:
        return audit_path(self.levels, leaf)

    def instruction_leaf(self, step: int) -> int:
        return self.counts[0] + self.counts[1] + step


def _layout(program: Program) -> ProgramLayout:
    model = program.model
    types = program.types
    n_in = len(model.inputs)
    positions = [(INPUT, k, 0) for k in range(n_in)] + [(PARAM, k, 0) for k in range(len(model.params))]
    labels: list[tuple[str | None, str]] = [(None, v.name) for v in model.inputs]
    labels += [(None, p.name) for p in model.params]
    for step in program.steps:
        positions += [(INSTR, step.index, j) for j in range(len(step.outputs))]
        labels += [(step.op.name, step.name)] * len(step.outputs)
    by_type: dict[TensorType, Committer] = {}
    committers = tuple(by_type[t] if t in by_type else by_type.setdefault(t, Committer(t)) for t in types)
    params = tuple(committers[n_in + k](p.value) for k, p in enumerate(model.params))
    records = [input_record(k, v.type) for k, v in enumerate(model.inputs)]
    records += [param_record(n_in + j, c) for j, c in enumerate(params)]
    by_id = {n_in + j: c for j, c in enumerate(params)}
    records += [instr_record(s.index, s.op.name, [(t, types[t]) for t in s.inputs], [(t, types[t]) for t in s.outputs],
                             s.attrs, by_id) for s in program.steps]
    records += [head_record(h, t) for h, t in enumerate(model.outputs)]
    counts = (n_in, len(model.params), len(program.steps), len(model.outputs), len(types))
    # The last output of step i is the tensor after which execution frees free_after[i].
    dying = {s.outputs[-1]: frozenset(program.free_after[s.index]) for s in program.steps}
    return ProgramLayout(tuple(positions), tuple(labels), params, counts, tuple(records),
                         tree_levels([leaf_hash(r) for r in records]), dying, committers)


# By id(program), dropped when the program is.
_layouts: dict[int, ProgramLayout] = {}
_layouts_lock = threading.Lock()


def program_layout(program: Program) -> ProgramLayout:
    """The program's layout; its params are committed on the first call only."""
    key = id(program)
    with _layouts_lock:
        layout = _layouts.get(key)
    if layout is None:
        layout = _layout(program)
        with _layouts_lock:
            if key not in _layouts:
                _layouts[key] = layout
                weakref.finalize(program, _layouts.pop, key, None)
    return layout


@dataclass(frozen=True)
class Entry(TraceEntry):
    """A trace entry with what it is about: the op that produced the tensor (None for an input
    or a param), its name (the variable's, or the instruction's), dtype and shape."""

    op: str | None
    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def commitment_hex(self) -> str:
        return self.commitment.hex()

    def __repr__(self) -> str:
        what = KIND_NAMES[self.kind] if self.op is None else f"{self.op} (instruction {self.index})"
        prec = "" if self.precision is None else f" p{self.precision}"
        return (f"<trace entry: tensor {self.tensor} {self.name}, {what}, {self.dtype}{list(self.shape)}{prec}, "
                f"commitment {self.commitment_hex}>")


def tensor_name(program: Program, tensor: int) -> str:
    """A tensor's name: its variable's, its instruction's, or ``name:j`` for output j of an
    instruction with several outputs."""
    layout = program_layout(program)
    name = layout.labels[tensor][1]
    kind, index, output = layout.positions[tensor]
    return f"{name}:{output}" if kind == INSTR and len(program.steps[index].outputs) > 1 else name


@dataclass(frozen=True)
class Trace:
    """A run's trace: every tensor's commitment (the trace tree's leaves), the input commitment
    and the trace root.  Its entries and tree levels are made when first asked for: most runs
    need only the root."""

    commitments: tuple[bytes, ...]    # by tensor id
    inputs: bytes                     # the input commitment
    root: bytes                       # the trace root
    program: Program = field(compare=False, repr=False)

    @functools.cached_property
    def entries(self) -> tuple[Entry, ...]:
        """By tensor id."""
        layout = program_layout(self.program)
        types = self.program.types
        return tuple(Entry(*layout.positions[t], t, types[t].precision, c, *layout.labels[t], types[t].dtype,
                           types[t].shape) for t, c in enumerate(self.commitments))

    @functools.cached_property
    def levels(self) -> list[list[bytes]]:
        """The trace tree over the commitments."""
        return tree_levels(self.commitments)

    def path(self, tensor: int) -> list[bytes]:
        return audit_path(self.levels, tensor)


def make_trace(program: Program, commitments: Sequence[bytes | None], root: bytes | None = None) -> Trace:
    """The trace of a run whose tensors have these commitments (by tensor id).  ``root``: its
    trace root, when the caller computed it already (a batched run computes every item's at once)."""
    layout = program_layout(program)
    if len(commitments) != len(program.types) or None in commitments:
        missing = len(program.types) - sum(c is not None for c in commitments)
        raise InternalError("trace", f"{missing} tensors of the run were never committed")
    known = cast("tuple[bytes, ...]", tuple(commitments))
    inputs = input_commitment(known[:layout.counts[0]])
    if root is None:
        root = trace_root(layout.root, inputs, len(known), tree_root(known))
    return Trace(known, inputs, root, program)


# A hashing task: the root of this many chunks (1 MiB).  A power of two, so that
# block roots are nodes of the tensor's chunk tree.
BLOCK_CHUNKS = 256
BLOCK_BYTES = BLOCK_CHUNKS * CHUNK_SIZE
# Below this size a tensor is committed at once: handing it to a thread costs more.
BACKGROUND_MIN_BYTES = 1 << 16
# When the threads are behind by this much, the executing thread commits the next
# tensor itself: all three share the hashing, and the memory held for it stays bounded.
MAX_BACKLOG_BYTES = 1 << 23

_pool_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None


def _hashers() -> ThreadPoolExecutor:
    """The two hashing threads of this process (a forked child starts its own)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(max_workers=2, thread_name_prefix="cvmvm-hash"))
        return _pool[1]


def _block_root(body: memoryview) -> bytes:
    # A block is part of a body of more than BACKGROUND_MIN_BYTES: its chunks are large ones.
    return tree_root(chunk_leaves(body, CHUNK_SIZE))




class Tracer:
    """An execution observer that commits each tensor once, as it is produced."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.layout = layout = program_layout(program)
        self._commitments: list[bytes | None] = [None] * len(program.types)
        self._pending: deque[tuple[int, int, list[Future[bytes]]]] = deque()  # (tensor, bytes, block roots)
        self._backlog = 0
        self._first_param = len(program.model.inputs)
        self._params = tuple(p.value for p in program.model.params)
        self._committers = layout.committers
        self._dying = layout.dying

    def __call__(self, tensor: int, value: np.ndarray) -> None:
        k = tensor - self._first_param
        if 0 <= k < len(self._params) and value is self._params[k] and not value.flags.writeable:
            self._commitments[tensor] = self.layout.params[k]
            return
        committer = self._committers[tensor]
        if not self._pending and committer.length <= CHUNK_SIZE:
            # Most tensors of a small model: one chunk, nothing in flight to wait for.
            self._commitments[tensor] = committer(value)
            return
        while self._pending and all(f.done() for f in self._pending[0][2]):
            self._collect()
        body = committer.body(value)
        size = len(body)
        if size < BACKGROUND_MIN_BYTES or (self._backlog and self._backlog + size > MAX_BACKLOG_BYTES):
            self._commitments[tensor] = committer.of_root(chunk_root(body))
        else:
            pool = _hashers()
            blocks = [pool.submit(_block_root, body[i:i + BLOCK_BYTES]) for i in range(0, size, BLOCK_BYTES)]
            self._pending.append((tensor, size, blocks))
            self._backlog += size
        # Execution frees these as soon as this call returns (this one too, when nothing reads it).
        dying = self._dying.get(tensor)
        while dying and any(p[0] in dying for p in self._pending):
            self._collect()

    def _collect(self) -> None:
        tensor, size, blocks = self._pending.popleft()
        self._commitments[tensor] = self._committers[tensor].of_root(tree_root([f.result() for f in blocks]))
        self._backlog -= size

    @property
    def commitments(self) -> list[bytes]:
        """Every tensor's commitment so far, by tensor id (waits for the hashing threads)."""
        while self._pending:
            self._collect()
        return self._commitments  # type: ignore[return-value]

    def trace(self) -> Trace:
        return make_trace(self.program, self.commitments)


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
    return trace_doc(model_hash, program_layout(program).root, trace.inputs, trace.root, model.outputs, rows)
