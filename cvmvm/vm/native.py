"""A small program run by one compiled loop: the per-call path for tiny tensors (issue 14).

A run of a small model such as digits costs about 45 us through the numpy executor, and
most of that is numpy's and the interpreter's cost per call, about 1 us per kernel and
per step, not arithmetic.  When numba is installed (the ``speed`` extra), a program
whose every instruction is one of NATIVE_OPS and whose tensors all fit in
MAX_ARENA_ELEMENTS runs instead as one call of ``_loop``: a loop over the instructions,
encoded as rows of int64, over one int32 arena that holds every tensor.  Each value is
computed in int64, exactly as the reference kernels define it, and confirmed against
its instruction's verified precision before it is stored, as the executor confirms
every output (a value outside it stops the run: internal.precision), and as there,
not where the op's block proves it cannot leave it (``OpDef.in_range``).

A traced run of such a program writes its small tensors' bodies from the arena in one
compiled call (``Lanes``) and makes the SHA-256 calls that commit them and fold the
trace tree from compiled code, to libcrypto (``Hasher``).

Nothing here depends on numba being present: without it, or before a program has run
WARM_RUNS times in this process or been compiled (``Model.compile``), the numpy
executor runs it.  Both give the same bytes; tests/test_native.py checks the loop
against the reference kernels and the executor, and the lanes and hashes against
numpy's and hashlib's.  Everything is compiled in each process, never cached on disk:
numba's cache is pickles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence, cast

import numpy as np

from isa.types import INT32, MAX_RANK, precision_bound
from serializer.hashing import channel_last, lane_width
from serializer.sha import compile_function, compile_once, hasher
from cvmvm.vm.verify import Program

# A program runs here from its WARM_RUNS-th run in a process on, or once Model.compile asks.
# Compiling takes about 5 s and 190 MB of resident memory (numba and LLVM), once per process,
# and saves some 25 us a run of a small model that takes about 50: by the time runs have
# cost what the compilation costs (5 s / 50 us), compiling is worth it, as in ski rental.
# One-off runs (the CLI's) and short tests never pay for it.
WARM_RUNS = 100_000
# Every tensor of the program side by side, in int32 elements (256 KiB).  Past that the
# numpy kernels' BLAS and vector loops win over the loop's plain ones.
MAX_ARENA_ELEMENTS = 1 << 16

# Op codes of the loop; a row is [code, output offset, output size, bound, input offsets (3),
# then the op's own fields from FIELDS on].
RELU, CLIP, RIGHT_SHIFT, COPY, ADD, SUB, MUL, CONV2D, DENSE, MAX_POOL2D = range(10)
FIELDS = 7
ROW = FIELDS + 20
MAX_BROADCAST_DIMS = MAX_RANK   # a broadcast row's axes, the output's right-aligned

_ELEMENTWISE = {"relu": RELU, "cvm_clip": CLIP, "cvm_right_shift": RIGHT_SHIFT, "flatten": COPY, "reshape": COPY}
_BROADCAST = {"broadcast_add": ADD, "broadcast_sub": SUB, "broadcast_mul": MUL}
NATIVE_OPS = frozenset([*_ELEMENTWISE, *_BROADCAST, "conv2d", "dense", "max_pool2d"])
_WRITE_THROUGH = frozenset([*_ELEMENTWISE, "max_pool2d"])


@dataclass(frozen=True)
class NativeProgram:
    """A program laid out for the loop: its rows, the arena with the params in place, and where
    each tensor lives in it (by tensor id: start, end, shape)."""

    code: np.ndarray            # (instructions, ROW) int64
    template: np.ndarray        # the arena, params written, everything else zero
    places: tuple[tuple[int, int, tuple[int, ...]], ...]


def lay_out(program: Program) -> NativeProgram | None:
    """The program as the loop runs it, or None when an instruction or a tensor is not for it."""
    types = program.types
    if any(t.dtype != INT32 or t.precision is None for t in types):
        return None
    if sum(t.size for t in types) > MAX_ARENA_ELEMENTS:
        return None
    places, offset = [], 0
    for t in types:
        places.append((offset, offset + t.size, t.shape))
        offset += t.size
    rows = []
    for step in program.steps:
        if step.op.name not in NATIVE_OPS or len(step.outputs) != 1:
            return None
        if step.op.name in _WRITE_THROUGH and step.op.in_range is None:
            return None   # the loop writes these unconfirmed: only while their blocks prove the range
        rows.append(_row(step, [types[t] for t in step.inputs], places))
    template = np.zeros(max(offset, 1), dtype=np.int32)
    model = program.model
    for k, param in enumerate(model.params, start=len(model.inputs)):
        start, end, _ = places[k]
        template[start:end] = param.value.reshape(-1)
    return NativeProgram(np.array(rows, dtype=np.int64).reshape(len(rows), ROW), template, tuple(places))


def _row(step: Any, inputs: list[Any], places: list[tuple[int, int, tuple[int, ...]]]) -> list[int]:
    out_type = step.out_types[0]
    row = [0] * ROW
    row[1], row[2] = places[step.outputs[0]][0], out_type.size
    row[3] = precision_bound(out_type.precision) if step.op.in_range is None else -1   # -1: proved, not checked
    for k, t in enumerate(step.inputs):
        row[4 + k] = places[t][0]
    name, a, f = step.op.name, step.attrs, FIELDS
    if name in _ELEMENTWISE:
        row[0] = _ELEMENTWISE[name]
        if name == "cvm_clip":
            row[f] = precision_bound(a.precision)
        elif name == "cvm_right_shift":
            row[f], row[f + 1] = a.shift_bit, precision_bound(a.precision)
    elif name in _BROADCAST:
        row[0] = _BROADCAST[name]
        shape = out_type.shape
        ndim = len(shape)
        pad = MAX_BROADCAST_DIMS - ndim
        row[f:f + MAX_BROADCAST_DIMS] = (1,) * pad + shape
        for k, t in enumerate(inputs[:2]):
            # Each input's element strides over the output's axes, 0 where it broadcasts.
            aligned = (1,) * (ndim - t.ndim) + t.shape
            strides, stride = [0] * ndim, 1
            for axis in range(ndim - 1, -1, -1):
                strides[axis] = 0 if aligned[axis] == 1 else stride
                stride *= aligned[axis]
            start = f + MAX_BROADCAST_DIMS * (k + 1)
            row[start:start + MAX_BROADCAST_DIMS] = [0] * pad + strides
    elif name == "conv2d":
        row[0] = CONV2D
        n, c, h, w = inputs[0].shape
        oc, ic, kh, kw = inputs[1].shape
        oh, ow = out_type.shape[2:]
        row[f:f + 18] = (n, c, h, w, oc, ic, kh, kw, oh, ow, *a.strides, *a.padding, *a.dilation,
                         a.groups, len(inputs) == 3)
    elif name == "dense":
        row[0] = DENSE
        m, k = inputs[0].shape
        row[f:f + 4] = (m, k, a.units, len(inputs) == 3)
    else:
        row[0] = MAX_POOL2D
        n, c, h, w = inputs[0].shape
        oh, ow = out_type.shape[2:]
        ph, pw = a.padding[0], a.padding[-1]
        row[f:f + 12] = (n, c, h, w, oh, ow, *a.pool_size, *a.strides, ph, pw)
    return row


_INT32_MIN = -(1 << 31)


def _loop(code: np.ndarray, arena: np.ndarray) -> int:
    """Run every row over the arena; -1, or the index of the instruction whose value left its
    precision.  Values are computed in int64: |inputs| < 2^31 and the verified precisions keep
    every sum below 2^32, so none wraps."""
    f = FIELDS
    for i in range(code.shape[0]):
        op, out, size, bound = code[i, 0], code[i, 1], code[i, 2], code[i, 3]
        x, y, z = code[i, 4], code[i, 5], code[i, 6]
        # Ops whose block proves their values inside the precision (in_range) write straight into
        # the arena; the others compute int64 values, confirmed (bound >= 0) before they are stored.
        if op == RELU:
            for e in range(size):
                arena[out + e] = max(arena[x + e], 0)
            continue
        if op == CLIP:
            clip = code[i, f]
            for e in range(size):
                arena[out + e] = min(max(np.int64(arena[x + e]), -clip), clip)
            continue
        if op == RIGHT_SHIFT:
            # floor((floor(v / 2^(b-1)) + 1) / 2) = floor((v + 2^(b-1)) / 2^b), and >> floors.
            shift, clip = code[i, f], code[i, f + 1]
            half = np.int64(1) << (shift - 1)
            for e in range(size):
                arena[out + e] = min(max((np.int64(arena[x + e]) + half) >> shift, -clip), clip)
            continue
        if op == COPY:
            arena[out:out + size] = arena[x:x + size]
            continue
        if op == MAX_POOL2D:   # a tap outside the input is INT32_MIN and competes (SEMANTICS.md section 4)
            n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw = code[i, f:f + 12]
            e = out
            for plane in range(n * c):
                base = x + plane * h * w
                for p in range(oh):
                    for q in range(ow):
                        best = np.int64(_INT32_MIN)
                        for r in range(p * sh - ph, p * sh - ph + kh):
                            for s in range(q * sw - pw, q * sw - pw + kw):
                                if r >= 0 and r < h and s >= 0 and s < w:
                                    best = max(best, np.int64(arena[base + r * w + s]))
                        arena[e] = best
                        e += 1
            continue
        value = np.empty(size, dtype=np.int64)
        if op == ADD or op == SUB or op == MUL:
            d = code[i, f:f + 6]
            sx = code[i, f + 6:f + 12]
            sy = code[i, f + 12:f + 18]
            e = 0
            for i0 in range(d[0]):
                for i1 in range(d[1]):
                    for i2 in range(d[2]):
                        for i3 in range(d[3]):
                            px = x + i0 * sx[0] + i1 * sx[1] + i2 * sx[2] + i3 * sx[3]
                            py = y + i0 * sy[0] + i1 * sy[1] + i2 * sy[2] + i3 * sy[3]
                            for i4 in range(d[4]):
                                for i5 in range(d[5]):
                                    left = np.int64(arena[px + i4 * sx[4] + i5 * sx[5]])
                                    right = np.int64(arena[py + i4 * sy[4] + i5 * sy[5]])
                                    value[e] = left + right if op == ADD else left - right if op == SUB else left * right
                                    e += 1
        elif op == CONV2D:
            # Each window's taps gathered (im2col, 0 in the padding), then one dot per output.
            n, c, h, w, oc, ic, kh, kw, oh, ow = code[i, f:f + 10]
            sh, sw, ph, pw, dh, dw, groups, bias = code[i, f + 10:f + 18]
            per_group, taps, cells = oc // groups, ic * kh * kw, oh * ow
            col = np.empty(cells * taps, dtype=np.int64)
            for b in range(n):
                for g in range(groups):
                    for p in range(oh):
                        for q in range(ow):
                            t = (p * ow + q) * taps
                            for j in range(ic):
                                plane = x + (b * c + g * ic + j) * h * w
                                for ki in range(kh):
                                    r = p * sh - ph + ki * dh
                                    for kj in range(kw):
                                        s = q * sw - pw + kj * dw
                                        inside = r >= 0 and r < h and s >= 0 and s < w
                                        col[t] = arena[plane + r * w + s] if inside else 0
                                        t += 1
                    for o in range(g * per_group, (g + 1) * per_group):
                        first = np.int64(arena[z + o]) if bias else np.int64(0)
                        weights = y + o * taps
                        at = (b * oc + o) * cells
                        kernel = arena[weights:weights + taps]
                        for e in range(cells):
                            window = col[e * taps:(e + 1) * taps]
                            total = first
                            for k in range(taps):
                                total += window[k] * np.int64(kernel[k])
                            value[at + e] = total
        elif op == DENSE:
            m, k, units, bias = code[i, f:f + 4]
            for r in range(m):
                for u in range(units):
                    total = np.int64(arena[z + u]) if bias else np.int64(0)
                    row = arena[x + r * k:x + (r + 1) * k]
                    weights = arena[y + u * k:y + (u + 1) * k]
                    for j in range(k):
                        total += np.int64(row[j]) * np.int64(weights[j])
                    value[r * units + u] = total
        if bound >= 0 and (value.min() < -bound or value.max() > bound):
            return i
        arena[out:out + size] = value
    return -1


Loop = Callable[[np.ndarray, np.ndarray], int]
Ready = tuple[NativeProgram, Loop]

_compiled: list[Loop | None] = []   # empty until numba was looked for: then the loop, or None


def loop() -> Loop | None:
    """The compiled loop, compiled on first use; None without numba, with its JIT disabled (the
    loop would run as Python), or where it cannot compile the loop: the kernels then run one by
    one, which changes timing only."""
    return compile_once(_compiled, _compile)


def _compile() -> Loop | None:
    return compile_function(_loop, "int64(int64[:, ::1], int32[::1])")


def native_bytes(layout: NativeProgram) -> int:
    """The most memory a run takes: the arena, one instruction's int64 values and a convolution's
    gathered windows (the largest of each)."""
    values = int(layout.code[:, 2].max(initial=0))
    f = FIELDS
    windows = [int(r[f + 8] * r[f + 9] * r[f + 5] * r[f + 6] * r[f + 7]) for r in layout.code if r[0] == CONV2D]
    return 4 * layout.template.size + 8 * values + 8 * max(windows, default=0)


def prepare(program: Program) -> Ready | None:
    """The program and the loop, ready to run, or None when either is not to be had or a run
    would need more memory than verification bounded the program's run by (its memory_bytes,
    checked against the memory limit)."""
    layout = lay_out(program)
    if layout is None or native_bytes(layout) > program.memory_bytes:
        return None
    kernel = loop()
    if kernel is None:
        return None
    hasher()   # compiled now too: a traced run of the program writes and commits its small bodies with them
    lane_writer()
    return layout, kernel


def turn_off(program: Program) -> None:
    """Run this program through the numpy kernels from now on (a benchmark's comparison)."""
    program.runtime["native"] = False


def run(native: NativeProgram, kernel: Loop, inputs: list[np.ndarray]) -> tuple[np.ndarray, int]:
    """The arena after a run from the prepared inputs, and -1 or the failing instruction."""
    arena = native.template.copy()
    for (start, end, _), value in zip(native.places, inputs):
        arena[start:end] = value.reshape(-1)
    return arena, kernel(native.code, arena)


def tensor(native: NativeProgram, arena: np.ndarray, t: int) -> np.ndarray:
    start, end, shape = native.places[t]
    return arena[start:end].reshape(shape)


# -- a traced run's bodies ------------------------------------------------------------------
#
# A traced run writes each small tensor's body (its lanes, in the committed order) into one
# buffer (serializer.hashing.BulkCommitter); after the loop, one compiled call writes every
# instruction output's from the arena, instead of a numpy copy per tensor.

LANE_FIELDS = 8   # a row: arena start, size, body start, lane width, channel-last, C, H, W


class Lanes(NamedTuple):
    """Where a compiled program's instruction outputs go in a trace's buffer of small bodies:
    ``rows`` for those with a body there, by row; ``written`` their tensor ids; ``others`` the
    instruction outputs the tracer takes one by one (a large one: the hashing process)."""

    rows: np.ndarray          # (written, LANE_FIELDS) int64
    written: tuple[int, ...]
    others: tuple[int, ...]


def lanes(program: Program, layout: NativeProgram, small: Sequence[int], spans: Sequence[tuple[int, int]]) -> Lanes:
    """The program's Lanes for a trace whose small tensors ``small`` have their bodies at ``spans``
    (BulkCommitter.spans, in the same order); made once per program."""
    done = program.runtime.get("native_lanes")
    if done is None:
        body = dict(zip(small, spans))
        rows, written, others = [], [], []
        for step in program.steps:
            t = step.outputs[0]
            if t not in body:
                others.append(t)
                continue
            start, end, shape = layout.places[t]
            ty = program.types[t]
            width = lane_width(ty)
            c, h, w = (shape[1], shape[2], shape[3]) if channel_last(ty) else (0, 0, 0)
            rows.append((start, end - start, body[t][0], width, int(channel_last(ty)), c, h, w))
            written.append(t)
        done = program.runtime["native_lanes"] = Lanes(
            np.array(rows, dtype=np.int64).reshape(len(rows), LANE_FIELDS), tuple(written), tuple(others))
    return cast(Lanes, done)


def _write_lanes(arena: np.ndarray, rows: np.ndarray, buffer: np.ndarray) -> int:
    """Each row's tensor from the arena into its body: two's complement, little-endian lanes of its
    width (its values fit them: the loop confirmed their precision), channel-last for a rank-4
    tensor in 1-byte lanes ((N, C, H, W) element n, c, h, w at position ((n H + h) W + w) C + c)."""
    for r in range(rows.shape[0]):
        start, size, body, width, last = rows[r, 0], rows[r, 1], rows[r, 2], rows[r, 3], rows[r, 4]
        if last:
            c, h, w = rows[r, 5], rows[r, 6], rows[r, 7]
            e = start
            for n in range(size // (c * h * w)):
                for channel in range(c):
                    for y in range(h):
                        at = body + (n * h + y) * w * c + channel
                        for x in range(w):
                            buffer[at + x * c] = arena[e] & 0xFF
                            e += 1
        elif width == 1:
            for e in range(size):
                buffer[body + e] = arena[start + e] & 0xFF
        elif width == 2:
            for e in range(size):
                v = arena[start + e]
                buffer[body + 2 * e] = v & 0xFF
                buffer[body + 2 * e + 1] = (v >> 8) & 0xFF
        else:
            for e in range(size):
                v = arena[start + e]
                buffer[body + 4 * e] = v & 0xFF
                buffer[body + 4 * e + 1] = (v >> 8) & 0xFF
                buffer[body + 4 * e + 2] = (v >> 16) & 0xFF
                buffer[body + 4 * e + 3] = (v >> 24) & 0xFF
    return 0


_lane_writers: list[Callable[[np.ndarray, np.ndarray, np.ndarray], int] | None] = []


def lane_writer() -> Callable[[np.ndarray, np.ndarray, np.ndarray], int] | None:
    """``_write_lanes`` compiled, on first use; None where the loop is not to be had."""
    return compile_once(_lane_writers,
                        lambda: compile_function(_write_lanes, "int64(int32[::1], int64[:, ::1], uint8[::1])"))
