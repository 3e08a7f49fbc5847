"""Traces (docs/FORMAT.md sections 3-4): every tensor of a run committed, under a trace
root that binds the program root and the input commitment.

``program_layout`` is what a program fixes, computed once per program: each
tensor's position, the params' commitments, the program records, their tree and
the program root.  A ``Tracer`` observes a run and commits each tensor once, as
it is produced.

Hashing is most of a traced run's extra cost.  A large tensor's body is
copied into a buffer shared with a hashing process (cvmvm.vm.hashworker), cut
into blocks of whole chunks whose roots the process computes while the next
kernels run; the block roots fold into the chunk root (in an RFC 6962 tree the
nodes at height m are exactly the roots of consecutive 2^m-leaf blocks).  Each
commitment is stored under its tensor id, so when the process answers changes
nothing, and the tensor itself may be freed as soon as it is copied.
"""

from __future__ import annotations

import functools
import threading
import weakref
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Sequence, cast

import numpy as np

from isa.errors import InternalError, UsageError, shown
from isa.types import TensorType
from serializer.hashing import (INPUT, INSTR, KIND_NAMES, PARAM, Bodies, BulkCommitter, Committer, TraceEntry,
                                audit_path, body_length, input_commitment, leaf_hash, program_root, trace_root,
                                tree_levels, tree_root)
from serializer import sha
from serializer.records.program import head_record, input_record, instr_record, param_record
from serializer.records.trace import entry_to_json, trace_doc
from cvmvm.vm import blas, hashworker, native
from cvmvm.vm.hashworker import Block
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
    committers: tuple[Committer, ...]            # by tensor id (one per type)
    small: tuple[int, ...]                       # the tensors committed together (BulkCommitter), by id
    bulk: BulkCommitter
    _spare: list[tuple[list[np.ndarray | None], Bodies]] = field(default_factory=list, compare=False, repr=False)

    def take_bodies(self) -> tuple[list[np.ndarray | None], Bodies]:
        """Buffers for one run's small bodies, and where each goes by tensor id (None: not a small one)."""
        try:
            return self._spare.pop()   # atomic: concurrent runs never share buffers
        except IndexError:
            bodies = self.bulk.bodies()
            by_id: list[np.ndarray | None] = [None] * self.counts[4]
            for t, dest in zip(self.small, bodies.dests):
                by_id[t] = dest
            return by_id, bodies

    def give_bodies(self, spare: tuple[list[np.ndarray | None], Bodies]) -> None:
        if len(self._spare) < SPARE_BODIES:
            self._spare.append(spare)

    @functools.cached_property
    def root(self) -> bytes:
        return program_root(self.counts, self.levels[-1][0])

    def path(self, leaf: int) -> list[bytes]:
        return audit_path(self.levels, leaf)

    def instruction_leaf(self, step: int) -> int:
        return self.counts[0] + self.counts[1] + step


# Below this size a tensor is committed at once: handing it to the hashing process costs more.
BACKGROUND_MIN_BYTES = 1 << 16
# A traced run writes its inputs' and instructions' bodies smaller than that into one buffer and
# commits them together (BulkCommitter), up to this many bytes in tensor order; the rest one by one.
SMALL_BODIES_BYTES = 1 << 18
SPARE_BODIES = 4   # buffers a program keeps for its next runs (its concurrent runs need one each)


def _small_tensors(program: Program) -> tuple[int, ...]:
    first_param, params = len(program.model.inputs), len(program.model.params)
    small, total = [], 0
    for t, ty in enumerate(program.types):
        length = body_length(ty)
        if not first_param <= t < first_param + params and length < BACKGROUND_MIN_BYTES \
                and total + length <= SMALL_BODIES_BYTES:
            small.append(t)
            total += length
    return tuple(small)


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
    small = _small_tensors(program)
    return ProgramLayout(tuple(positions), tuple(labels), params, counts, tuple(records),
                         tree_levels([leaf_hash(r) for r in records]), committers, small,
                         BulkCommitter([types[t] for t in small]))


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
        """Tensor ``tensor``'s trace path: its leaf's siblings from the bottom up."""
        if isinstance(tensor, bool) or not isinstance(tensor, (int, np.integer)) \
                or not 0 <= tensor < len(self.commitments):
            raise UsageError("argument", f"trace.path({shown(tensor)}): a tensor id in "
                                         f"[0, {len(self.commitments) - 1}]")
        return audit_path(self.levels, int(tensor))


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
        fast = sha.hasher() if program.runtime.get("native") else None
        tree = tree_root(known) if fast is None else fast.tree_root(known)
        root = trace_root(layout.root, inputs, len(known), tree)
    return Trace(known, inputs, root, program)


def hashes_alongside(program: Program) -> bool:
    """Whether a traced run of ``program`` has a tensor large enough for the hashing process."""
    decided = program.runtime.get("hashes_alongside")   # once per program, not per run
    if decided is None:
        decided = program.runtime["hashes_alongside"] = any(
            body_length(t) >= BACKGROUND_MIN_BYTES for t in program.types)
    return cast(bool, decided)


class Tracer:
    """An execution observer that commits each tensor once: a small one's body is written into a
    buffer as it is produced and committed with the others at the end (BulkCommitter), a large one
    by the hashing process (cvmvm.vm.hashworker) from a copy of its body while execution goes on,
    any other at once.  Execution frees each tensor when it likes."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.layout = layout = program_layout(program)
        self._commitments: list[bytes | None] = [None] * len(program.types)
        self._pending: list[tuple[int, list[Block]]] = []   # (tensor, its blocks in the hashing process)
        self._first_param = len(program.model.inputs)
        self._params = tuple(p.value for p in program.model.params)
        self._committers = layout.committers
        self._bodies: tuple[list[np.ndarray | None], Bodies] | None = layout.take_bodies()
        self._dests = self._bodies[0]
        self._written: list[int] = []   # the small tensors whose bodies are in the buffers
        # Where BLAS's threads spin and cannot be held back (cvmvm.vm.blas), they would starve the process.
        self.worker = hashworker.worker() if hashes_alongside(program) and blas.alongside_possible() else None

    def __call__(self, tensor: int, value: np.ndarray) -> None:
        dest = self._dests[tensor]
        if dest is not None:
            np.copyto(dest, value, casting="unsafe")   # exact: the value is within its lanes' precision
            self._written.append(tensor)
            return
        k = tensor - self._first_param
        if 0 <= k < len(self._params) and value is self._params[k] and not value.flags.writeable:
            self._commitments[tensor] = self.layout.params[k]
            return
        committer = self._committers[tensor]
        if self.worker is not None and committer.length >= BACKGROUND_MIN_BYTES:
            write = functools.partial(committer.write_body, value, move=sha.compiled_channel_mover())
            blocks = self.worker.put(committer.length, committer.chunk, write)
            if blocks is not None:
                self._pending.append((tensor, blocks))
                return
        self._commitments[tensor] = committer(value)

    def observe_arena(self, layout: native.NativeProgram, arena: np.ndarray) -> None:
        """Every instruction output of a compiled run (cvmvm.vm.native) at once: the small ones'
        bodies written from the arena by one compiled call, any other as ``__call__`` takes it."""
        plan = native.lanes(self.program, layout, self.layout.small, self.layout.bulk.spans)
        write = native.lane_writer()
        if self._bodies is None or write is None:
            others: Sequence[int] = [step.outputs[0] for step in self.program.steps]
        else:
            write(arena, plan.rows, self._bodies[1].buffer)
            self._written.extend(plan.written)
            others = plan.others
        for t in others:
            self(t, native.tensor(layout, arena, t))

    def release(self) -> None:
        """Give the buffers back to the program's layout: the run failed, or its small tensors are
        committed.  A run that fails keeps nothing (its error's traceback may keep the tracer)."""
        if self._bodies is not None:
            self.layout.give_bodies(self._bodies)
            self._bodies = None
            self._dests = [None] * len(self._commitments)

    def __del__(self) -> None:
        if getattr(self, "_bodies", None) is not None:   # not when __init__ failed
            self.release()

    def running(self) -> AbstractContextManager[Any]:
        """Around the execution this tracer observes: BLAS holds back while the hashing process
        works (cvmvm.vm.blas); a run that raises gives its buffers back."""
        return _Running(self, blas.hashing_alongside(self.worker is not None))

    @property
    def commitments(self) -> list[bytes]:
        """Every tensor's commitment, by tensor id (waits for the hashing process)."""
        if self._bodies is not None:
            fast = sha.hasher() if self.program.runtime.get("native") else None
            bodies = self._bodies[1]
            small = self.layout.bulk.commit(bodies) if fast is None else fast.commit(self.layout.bulk.plan, bodies.buffer)
            written = set(self._written)
            # Only what was written: a run cut short leaves the rest for make_trace to name as missing.
            for t, c in zip(self.layout.small, small):
                if t in written:
                    self._commitments[t] = c
            self.release()
        if self._pending:
            # All at once, the newest first: what the hashing process has not reached, this one hashes.
            roots = iter(self.worker.roots([b for _, blocks in self._pending for b in blocks]))  # type: ignore[union-attr]
            for tensor, blocks in self._pending:
                root = tree_root([next(roots) for _ in blocks])
                self._commitments[tensor] = self._committers[tensor].of_root(root)
            self._pending.clear()
        return self._commitments  # type: ignore[return-value]

    def trace(self) -> Trace:
        return make_trace(self.program, self.commitments)


class _Running:
    """``Tracer.running``'s context: the BLAS limit, and the tracer's buffers given back if the run raises."""

    __slots__ = ("tracer", "blas")

    def __init__(self, tracer: Tracer, blas_limit: AbstractContextManager[Any]) -> None:
        self.tracer = tracer
        self.blas = blas_limit

    def __enter__(self) -> None:
        self.blas.__enter__()

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> Any:
        if kind is not None:
            self.tracer.release()
        return self.blas.__exit__(kind, value, traceback)


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
