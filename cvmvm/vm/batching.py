"""Batching: when many inputs of one program may run as one, and that batched traced run.

A program may run many inputs stacked along axis 0 when every tensor derived
from the inputs keeps axis 0 as an independent batch axis through row-wise
ops: the batched run's tensors are then the one-by-one runs' tensors stacked
along axis 0.  ``batch_plan`` decides it statically, from the verified program
alone (ROW_RULES: one equivalence rule per op), and ``stacked_program``
re-verifies the program at the stacked shapes and checks that every inferred
type is the one-by-one type scaled.

``Batch.run`` runs a list of prepared feeds that way and gives, per item,
exactly what a one-by-one traced run commits to (every tensor commitment, the
output hash, the trace root, the ops, and on request the outputs themselves):
each item's commitments are those of its own rows.  Where the program cannot run stacked, or a stacked run fails, the
items run one at a time, so each gets its own result or its own error.
``Model.run_batch`` (api.py) and replay are built on it.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

import numpy as np

from isa.errors import CvmError, InternalError
from isa.ops.reduce import reduced_axes
from isa.ops.transform import permutation
from isa.types import MAX_DIM, MAX_OPS, MAX_SIZE, TensorType
from serializer.hashing import (BulkCommitter, Committer, input_commitment, inputs_head, outputs_hash, outputs_head,
                                tensor_body, trace_head, trace_root, tree_roots)
from serializer import sha
from serializer.model import Input, Model as ModelIR
from cvmvm.vm.execute import execute, prepare_inputs
from cvmvm.vm.trace import Tracer, program_layout
from cvmvm.vm.verify import Program, Step, verify

BATCH_BYTES = 1 << 28   # tensor bytes one batch may hold, summed over every batched tensor
# A process commits stacked runs' items through the compiled hasher (serializer.sha) once it has
# compiled it (Model.compile, or a compiled model's traced run), or once its stacked runs have
# committed this many items: compiling takes some 3.5-4 s, once, and saves 30-48 us an item of a
# small model (a replayed digits transaction: 65 us through hashlib, 35 compiled, 17 where
# serializer.sha_lanes hashes sixteen items at once), so by then the items have cost about what
# compiling costs (83,000 to 117,000 items), the ski-rental bound native.WARM_RUNS keeps too.
HASH_WARM_ITEMS = 100_000
_committed = [0]   # items committed by this process's stacked runs (a race only moves when it compiles)


# -- the static decision -----------------------------------------------------------

# Each rule: may this step run on inputs stacked along axis 0 (``flags`` marks the
# stacked ones; the others are constants, the same for every item) so that
# output row block i is the one-by-one output of item i?

def _any(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    return True


def _all_stacked(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    return all(flags)


def _data_only(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    return flags[0] and not any(flags[1:])


def _broadcast(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    # A stacked operand must own the output's axis 0; a constant one must not reach it.
    out = outs[0]
    return all((t.ndim == out.ndim and t.shape[0] == out.shape[0]) if f else (t.ndim < out.ndim or t.shape[0] == 1)
               for f, t in zip(flags, ins))


def _reduce(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    return 0 not in reduced_axes(a, ins[0].ndim)


def _repeat(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    return a.axis % ins[0].ndim != 0


def _tile(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    return len(a.reps) < ins[0].ndim or (len(a.reps) == ins[0].ndim and a.reps[0] == 1)


def _expand_dims(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    return a.num_newaxis == 0 or (a.axis + ins[0].ndim + 1 if a.axis < 0 else a.axis) >= 1


def _squeeze(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    if a.axis:
        return all(ax % ins[0].ndim != 0 for ax in a.axis)
    return ins[0].shape[0] != 1


def _transpose(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    return permutation(a, ins[0].ndim)[0] == 0


def _concatenate(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    return all(flags) and a.axis % ins[0].ndim != 0


def _take(a: Any, flags: Sequence[bool], ins: Sequence[TensorType], outs: Sequence[TensorType]) -> bool:
    data, indices = flags
    if data and not indices:       # gathers along a later axis of each row
        return a.axis is not None and a.axis % ins[0].ndim != 0
    if indices and not data:       # looks each index row up in a constant table
        return a.axis is None or a.axis % ins[0].ndim == 0
    return False


ROW_RULES: dict[str, Callable[..., bool]] = {
    **{name: _any for name in ("relu", "abs", "negative", "cvm_precision", "clip", "cvm_clip",
                               "cvm_right_shift", "cvm_left_shift", "flatten", "max_pool2d", "upsampling",
                               "reshape")},
    "elemwise_add": _all_stacked, "elemwise_sub": _all_stacked, "where": _all_stacked,
    **{name: _broadcast for name in ("broadcast_add", "broadcast_sub", "broadcast_mul", "broadcast_div",
                                     "broadcast_max", "broadcast_greater")},
    "conv2d": _data_only, "dense": _data_only, "cvm_lut": _data_only,
    "sum": _reduce, "max": _reduce, "repeat": _repeat, "tile": _tile, "expand_dims": _expand_dims,
    "squeeze": _squeeze, "transpose": _transpose, "concatenate": _concatenate, "take": _take,
}
# Not listed, so never stacked: strided_slice and slice_like (their attributes name
# absolute ranges of axis 0), get_valid_counts, non_max_suppression and max_pool.


def batch_plan(program: Program) -> tuple[bool, ...] | None:
    """Per tensor id, whether it is stacked (derived from the inputs), or None when
    some step cannot run stacked: the model then runs one item at a time."""
    stacked = [True] * len(program.model.inputs) + [False] * len(program.model.params)
    for step in program.steps:
        flags = [stacked[t] for t in step.inputs]
        if any(flags):
            rule = ROW_RULES.get(step.op.name)
            if rule is None or not rule(step.attrs, flags, [program.types[t] for t in step.inputs], step.out_types):
                return None
        stacked.extend([any(flags)] * len(step.outputs))
    return tuple(stacked)


def _stacked_attrs(step: Step, count: int) -> Any:
    # reshape names its output's axis 0 literally; 0 and the negative codes copy or infer it.
    if step.op.name == "reshape" and step.attrs.shape and step.attrs.shape[0] > 0:
        return dataclasses.replace(step.attrs, shape=(step.attrs.shape[0] * count, *step.attrs.shape[1:]))
    return step.attrs


def _scaled(t: TensorType, count: int) -> TensorType:
    return dataclasses.replace(t, shape=(t.shape[0] * count, *t.shape[1:]))


def stacked_program(program: Program, stacked: tuple[bool, ...], count: int) -> Program | None:
    """The program over ``count`` items' inputs stacked along axis 0, verified, or None
    if its inferred types are not exactly the one-by-one types (axis 0 scaled where stacked)."""
    m = program.model
    model = ModelIR(tuple(Input(i.name, _scaled(i.type, count)) for i in m.inputs), m.params,
                    tuple(dataclasses.replace(ins, attrs=_stacked_attrs(step, count), declared_shapes=None)
                          for ins, step in zip(m.instrs, program.steps)), m.outputs)
    try:
        # The batch must fit the model's memory limit; its work is count runs' worth, each within the limit.
        big = verify(model, dataclasses.replace(program.limits, work=None))
    except CvmError:
        return None
    want = tuple(_scaled(t, count) if s else t for t, s in zip(program.types, stacked))
    return big if big.types == want else None


def batch_limit(program: Program, stacked: tuple[bool, ...], requested: int) -> int:
    """The most items one stacked run may hold: the ISA's dimension, size and
    ops limits, and a memory budget."""
    types = [t for t, s in zip(program.types, stacked) if s]
    if not types:
        return requested
    per_tx_bytes = sum(t.size * 8 for t in types)
    return max(1, min(requested, MAX_DIM // max(t.shape[0] for t in types), MAX_SIZE // max(t.size for t in types),
                      MAX_OPS // max(1, program.ops), BATCH_BYTES // per_tx_bytes))


# -- the batched traced run ------------------------------------------------------------

class Verified(Protocol):
    """What a batched run needs of a model (``cvmvm.vm.api.Model`` is one)."""

    @property
    def program(self) -> Program: ...



@dataclass(frozen=True)
class TracedRun:
    """What one traced run commits to, as Model.run(..., trace=True) computes it."""

    commitments: tuple[bytes, ...]  # every tensor's commitment, by tensor id (the inputs' first, in input order)
    output_hash: bytes
    trace_root: bytes
    ops: int
    outputs: tuple[np.ndarray, ...] | None = None  # the outputs in head order, when asked for


@dataclass(frozen=True)
class Runs:
    """What ``count`` traced runs commit to, run by run as the rows of arrays (uint8): every
    tensor's commitment by tensor id (count, tensors, 32), the output hashes and the trace roots
    (count, 32).  A run that failed has its error in ``errors`` and zeros in its rows."""

    commitments: np.ndarray
    output_hashes: np.ndarray
    trace_roots: np.ndarray
    ops: int
    errors: dict[int, CvmError]
    outputs: list[tuple[np.ndarray, ...] | None]   # each run's outputs, when asked for (else Nones)

    @property
    def count(self) -> int:
        return len(self.outputs)

    def item(self, i: int) -> TracedRun | CvmError:
        """Run i as one traced run gives it, or its error."""
        if i in self.errors:
            return self.errors[i]
        return TracedRun(tuple(bytes(c) for c in self.commitments[i]), self.output_hashes[i].tobytes(),
                         self.trace_roots[i].tobytes(), self.ops, self.outputs[i])


def _digests(runs: Sequence[TracedRun | CvmError], tensors: int, ops: int) -> Runs:
    """``runs`` as the rows of arrays."""
    count = len(runs)
    commitments = np.zeros((count, tensors, 32), dtype=np.uint8)
    outputs_ = np.zeros((count, 32), dtype=np.uint8)
    roots = np.zeros((count, 32), dtype=np.uint8)
    errors: dict[int, CvmError] = {}
    for i, run in enumerate(runs):
        if isinstance(run, CvmError):
            errors[i] = run
            continue
        commitments[i] = np.frombuffer(b"".join(run.commitments), dtype=np.uint8).reshape(tensors, 32)
        outputs_[i] = np.frombuffer(run.output_hash, dtype=np.uint8)
        roots[i] = np.frombuffer(run.trace_root, dtype=np.uint8)
    return Runs(commitments, outputs_, roots, ops, errors,
                [None if isinstance(r, CvmError) else r.outputs for r in runs])


def _joined(parts: Sequence[Runs]) -> Runs:
    """Runs of several batches, one after another."""
    if len(parts) == 1:
        return parts[0]
    errors: dict[int, CvmError] = {}
    start = 0
    for part in parts:
        errors.update({start + i: e for i, e in part.errors.items()})
        start += part.count
    return Runs(np.concatenate([p.commitments for p in parts]), np.concatenate([p.output_hashes for p in parts]),
                np.concatenate([p.trace_roots for p in parts]), parts[0].ops, errors,
                [o for p in parts for o in p.outputs])


def _row_commitments(value: np.ndarray, committer: Committer, count: int) -> list[bytes]:
    """The commitment of each of ``count`` equal row blocks of ``value`` (each of the committer's
    type).  Stacking along axis 0 keeps each item's committed body contiguous, in either order."""
    t = committer.type
    return committer.rows(tensor_body(value, dataclasses.replace(t, shape=(t.shape[0] * count, *t.shape[1:]))), count)


def prepare_feeds(program: Program, inputs: Mapping[str, object] | Iterable[tuple[str, object]]) -> list[np.ndarray]:
    """The item's inputs checked and prepared as execution would (same errors), in input order."""
    return prepare_inputs(program, inputs)


class Batch:
    """Runs lists of prepared feeds of one model, stacked where its program allows;
    caches the stacked program of each batch size it meets."""

    def __init__(self, model: Verified, batch_size: int) -> None:
        self.model = model
        self.plan = batch_plan(model.program)
        self.limit = 1 if self.plan is None else batch_limit(model.program, self.plan, batch_size)
        self._stacked: dict[int, Program | None] = {}
        self._rows: RowBodies | None = None

    def run(self, feeds: Sequence[Sequence[np.ndarray]], outputs: bool = False) -> list[TracedRun | CvmError]:
        """Each run's commitments (with its outputs when ``outputs``), or the error that stopped it;
        ``feeds`` are prepared inputs (``prepare_feeds``) in the model's input order, one list per run."""
        if not feeds:
            return []
        runs = self.run_rows([np.concatenate([f[k] for f in feeds]) for k in range(len(feeds[0]))], len(feeds), outputs)
        return [runs.item(i) for i in range(runs.count)]

    def run_rows(self, columns: Sequence[np.ndarray], count: int, outputs: bool = False) -> Runs:
        """``run`` of ``count`` runs given as columns (per input, every run's prepared value stacked
        along axis 0: run i owns rows [i*r, (i+1)*r) of an input with r rows), as arrays."""
        program = self.model.program
        rows = [t.type.shape[0] for t in program.model.inputs]
        parts: list[Runs] = []
        for start in range(0, count, self.limit):
            n = min(self.limit, count - start)
            part = [c[start * r:(start + n) * r] for c, r in zip(columns, rows)]
            if self.plan is not None and n > 1:
                if n not in self._stacked:
                    self._stacked[n] = stacked_program(program, self.plan, n)
                big = self._stacked[n]
                if big is not None:
                    try:
                        if self._rows is None:
                            self._rows = RowBodies(program, self.plan)
                        parts.append(_run_stacked(self.model, self.plan, big, part, n, outputs, self._rows))
                        continue
                    except CvmError:
                        pass  # rerun one at a time below, so each item gets its own error
            parts.append(_digests([_run_one(self.model, [c[i * r:(i + 1) * r] for c, r in zip(part, rows)], outputs)
                                   for i in range(n)], len(program.types), program.ops))
        return _joined(parts) if parts else _digests([], len(program.types), program.ops)


def _run_one(model: Verified, feeds: Sequence[np.ndarray], outputs: bool) -> TracedRun | CvmError:
    program = model.program
    names = [i.name for i in program.model.inputs]
    tracer = Tracer(program)
    try:
        with tracer.running():
            values, _ = execute(program, dict(zip(names, feeds)), tracer)
    except CvmError as e:
        return e
    trace = tracer.trace()
    commitments = trace.commitments
    return TracedRun(commitments, outputs_hash([commitments[t] for t in program.model.outputs]), trace.root,
                     program.ops, tuple(values) if outputs else None)


def _rows(value: np.ndarray, stacked: bool, count: int) -> list[np.ndarray]:
    """Each item's part of a stacked run's tensor: its row block, or the whole constant, an array of
    its own for each item as ``run`` gives it (a param, read-only, is shared: nobody can write it)."""
    if stacked:
        return np.split(value, count)
    return [value] * count if not value.flags.writeable else [value] + [value.copy() for _ in range(count - 1)]


class RowBodies:
    """A stacked run's per-item bodies for the compiled hasher (serializer.sha.Hasher): every
    stacked tensor of every item written item-major into one buffer as the run produces it, then
    committed by one compiled call, each item's trace tree folded by another."""

    def __init__(self, program: Program, plan: tuple[bool, ...]) -> None:
        first_param, params = len(program.model.inputs), len(program.model.params)
        self.stacked = [t for t, s in enumerate(plan) if s]
        self.shared = [t for t, s in enumerate(plan) if not s]
        assert not any(first_param <= t < first_param + params for t in self.stacked)  # params are constants
        self.bulk = BulkCommitter([program.types[t] for t in self.stacked])
        # Each item's digests from its row of commitments (32 bytes by tensor id), one compiled call
        # each: the inputs' commitment and the output hash, then the trace root from a row of
        # [input commitment | u32le tensors | trace tree root].
        width = len(program.types)
        heads = program.model.outputs
        self.inputs = (np.array([(32 * t, 32) for t in range(first_param)], dtype=np.int64).reshape(-1, 2),
                       inputs_head(first_param))
        self.outputs = np.array([(32 * t, 32) for t in heads], dtype=np.int64).reshape(-1, 2), outputs_head(len(heads))
        self.tensors = np.frombuffer(struct.pack("<I", width), dtype=np.uint8)
        self.root = np.array([(0, 68)], dtype=np.int64), trace_head(program_layout(program).root)


def _hasher() -> sha.Hasher | None:
    """The compiled hasher once this process compiled it, or once its stacked runs have committed
    HASH_WARM_ITEMS items (then compiled now); else None: hashlib commits each item."""
    fast = sha.compiled_hasher()
    if fast is None and _committed[0] >= HASH_WARM_ITEMS:
        fast = sha.hasher()
    return fast


def _run_stacked(model: Verified, plan: tuple[bool, ...], big: Program, columns: Sequence[np.ndarray],
                 count: int, outputs: bool, rows: RowBodies) -> Runs:
    program = model.program
    stacked_inputs = {i.name: c for i, c in zip(program.model.inputs, columns)}
    # By tensor id: one commitment per item (stacked), or one shared by every item (a constant).
    commitments: list[Any] = [None] * len(program.types)
    first_param = len(program.model.inputs)
    layout = program_layout(program)
    params = layout.params
    fast = _hasher()
    _committed[0] += count
    dests: dict[int, np.ndarray] = {}
    if fast is not None:
        buffer = np.empty(count * rows.bulk.size, dtype=np.uint8)
        dests = dict(zip(rows.stacked, rows.bulk.row_dests(buffer, count)))

    def observe(t: int, value: np.ndarray) -> None:
        if first_param <= t < first_param + len(params):
            commitments[t] = [params[t - first_param]] * count
        elif t in dests:
            dest = dests[t]
            np.copyto(dest, value.reshape(dest.shape), casting="unsafe")   # exact: within its lanes' precision
            commitments[t] = dest
        elif plan[t]:
            commitments[t] = _row_commitments(value, layout.committers[t], count)
        else:
            commitments[t] = [layout.committers[t](value)] * count

    values, _ = execute(big, stacked_inputs, observe)
    heads = program.model.outputs
    per_item: list[tuple[np.ndarray, ...] | None] = [None] * count
    if outputs:
        stacked_rows = [_rows(v, plan[t], count) for t, v in zip(heads, values)]
        per_item = [tuple(r[i] for r in stacked_rows) for i in range(count)]
    if fast is not None:
        return _finish(fast, rows, commitments, buffer, count, program.ops, per_item)
    results: list[TracedRun | CvmError] = []
    for own, tree, own_outputs in zip(zip(*commitments), tree_roots(commitments), per_item):
        root = trace_root(layout.root, input_commitment(own[:first_param]), len(own), tree)
        results.append(TracedRun(own, outputs_hash([own[t] for t in heads]), root, program.ops, own_outputs))
    return _digests(results, len(program.types), program.ops)


def _finish(fast: sha.Hasher, rows: RowBodies, commitments: list[Any], buffer: np.ndarray, count: int, ops: int,
            per_item: list[tuple[np.ndarray, ...] | None]) -> Runs:
    """Every item's digests from compiled calls over every item at once: the stacked tensors'
    commitments from the bodies in ``buffer``, the constants' from ``commitments``, then the digests
    (RowBodies), the same bytes as the per-item loop through hashlib."""
    if any(c is None for c in commitments):
        raise InternalError("hash", "a stacked run observed not every tensor")
    width = len(commitments)
    levels = np.empty((count, width, 32), dtype=np.uint8)
    levels[:, rows.stacked] = fast.commit_rows(rows.bulk.plan, buffer, rows.bulk.size, count)
    levels[:, rows.shared] = np.frombuffer(b"".join(commitments[t][0] for t in rows.shared),
                                           dtype=np.uint8).reshape(-1, 32)
    by_row = levels.reshape(count, -1)
    inputs = fast.gather(by_row, *rows.inputs)
    outputs = fast.gather(by_row, *rows.outputs)
    trees = fast.tree_roots(levels.copy())   # folds its argument in place
    seals = np.concatenate([inputs, np.broadcast_to(rows.tensors, (count, 4)), trees], axis=1)
    return Runs(levels, outputs, fast.gather(seals, *rows.root), ops, {}, per_item)
