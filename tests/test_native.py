"""The compiled loop (cvmvm.vm.native) against the reference kernels, the numpy executor and the
Cortex vectors; when a program runs there and when it does not; how it fails."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import cvmvm
from isa.errors import InternalError
from isa.types import TensorType, precision_bound
from serializer import hashing
from serializer import sha
from serializer.hashing import BulkCommitter, tree_root
from cvmvm.vm import native
from cvmvm.vm.api import Model, single_op_model
from cvmvm.vm.verify import verify
from cvmvm.vm.execute import execute, prepare_inputs
from tests.opkit import reference1, run1
from tests.reference import case_inputs, case_params, cvm_cases

from tests.fixture_script import generate

pytest.importorskip("numba")

ROOT = Path(__file__).resolve().parents[1]


def _loop():
    loop = native.loop()
    assert loop is not None, "numba is installed and its JIT is on"
    return loop


def natively(program, feeds) -> tuple[native.NativeProgram, np.ndarray]:
    """The arena after one run of ``program`` through the loop, which must take it."""
    ready = native.prepare(program)
    assert ready is not None, "the loop takes this program"
    layout, loop = ready
    arena, failed = native.run(layout, loop, prepare_inputs(program, feeds))
    assert failed == -1
    return layout, arena


def native_op(name: str, inputs, attrs=None, precisions=None) -> np.ndarray:
    model, feeds = single_op_model(name, [np.asarray(v, dtype=np.int32) for v in inputs], attrs or {}, precisions)
    layout, arena = natively(model.program, feeds)
    return native.tensor(layout, arena, model.program.model.outputs[0])


def agrees(name: str, inputs, attrs=None, precisions=None) -> np.ndarray:
    """The loop's output equals the reference kernel's and the numpy executor's, dtype int32."""
    inputs = [np.asarray(v, dtype=np.int32) for v in inputs]
    got = native_op(name, inputs, attrs, precisions)
    want = reference1(name, inputs, attrs)
    assert got.dtype == np.dtype(np.int32)
    assert got.shape == want.shape
    assert np.array_equal(got.astype(np.int64), want)
    assert np.array_equal(got, run1(name, inputs, attrs, precisions))
    return got


# -- hand-computed ---------------------------------------------------------------------

def test_right_shift_rounds_half_up():
    got = native_op("cvm_right_shift", [[-3, -2, -1, 0, 1, 2, 3]], {"precision": 8, "shift_bit": 1})
    assert got.tolist() == [-1, -1, 0, 0, 1, 1, 2]


def test_right_shift_clips_after_rounding():
    got = native_op("cvm_right_shift", [[-1000, 1000, 255]], {"precision": 4, "shift_bit": 4})
    assert got.tolist() == [-7, 7, 7]   # 1000 / 16 = 62.5 -> 63, clipped to 2^3 - 1


def test_right_shift_by_32_at_int32_extremes():
    got = native_op("cvm_right_shift", [[-(2**31 - 1), 2**31 - 1, 2**30]], {"precision": 32, "shift_bit": 32})
    assert got.tolist() == [0, 0, 0]
    got = native_op("cvm_right_shift", [[-(2**31 - 1), 2**31 - 1]], {"precision": 32, "shift_bit": 1})
    assert got.tolist() == [-(2**30 - 1), 2**30]


def test_conv2d_by_hand():
    x = np.arange(1, 10, dtype=np.int32).reshape(1, 1, 3, 3)
    w = np.ones((1, 1, 2, 2), dtype=np.int32)
    got = native_op("conv2d", [x, w, [10]], {"channels": 1, "kernel_size": (2, 2)})
    assert got.tolist() == [[[[22, 26], [34, 38]]]]    # 1+2+4+5+10, ...


def test_max_pool2d_padding_never_wins_over_a_real_tap():
    x = np.array([-5, -6, -7, -8], dtype=np.int32).reshape(1, 1, 2, 2)
    got = native_op("max_pool2d", [x], {"pool_size": (2, 2), "strides": (1, 1), "padding": (1,)})
    assert got.tolist() == [[[[-5, -5, -6], [-5, -5, -6], [-7, -7, -8]]]]


def test_broadcast_mul_by_hand():
    got = native_op("broadcast_mul", [np.arange(6).reshape(2, 3), [[2], [-3]]])
    assert got.tolist() == [[0, 2, 4], [-9, -12, -15]]


def test_dense_by_hand():
    got = native_op("dense", [[[1, 2, 3]], [[1, 0, -1], [2, 2, 2]], [5, -5]], {"units": 2})
    assert got.tolist() == [[3, 7]]


# -- properties against the reference kernels -----------------------------------------

def values(shape, precision: int):
    """Arrays of ``shape`` within ``precision``, the bounds themselves likely."""
    bound = precision_bound(precision)
    edges = sorted({-bound, -min(1, bound), 0, min(1, bound), bound})
    return hnp.arrays(np.int32, shape, elements=st.one_of(st.sampled_from(edges), st.integers(-bound, bound)))


@settings(max_examples=150, deadline=None)
@given(st.data(), hnp.array_shapes(min_dims=1, max_dims=4, max_side=5), st.integers(1, 32), st.integers(1, 32),
       st.integers(1, 32))
def test_right_shift_and_clip(data, shape, p_in, p_out, shift):
    x = data.draw(values(shape, p_in))
    agrees("cvm_right_shift", [x], {"precision": p_out, "shift_bit": shift}, [p_in])
    agrees("cvm_clip", [x], {"precision": p_out}, [p_in])
    agrees("relu", [x], None, [p_in])
    agrees("flatten", [x.reshape(1, -1)], None, [p_in])
    agrees("reshape", [x], {"shape": (-1,)}, [p_in])


@settings(max_examples=150, deadline=None)
@given(st.data(), hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=6, max_side=3),
       st.sampled_from(["broadcast_add", "broadcast_sub", "broadcast_mul"]), st.integers(1, 16), st.integers(1, 16))
def test_broadcast(data, shapes, name, p0, p1):
    x, y = data.draw(values(shapes.input_shapes[0], p0)), data.draw(values(shapes.input_shapes[1], p1))
    agrees(name, [x, y], None, [p0, p1])


@st.composite
def conv_cases(draw):
    groups = draw(st.integers(1, 3))
    ic, per_group = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    sh, sw, dh, dw = (draw(st.integers(1, 3)) for _ in range(4))
    ph, pw = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    h = draw(st.integers(max(1, dh * (kh - 1) + 1 - 2 * ph), 7))
    w = draw(st.integers(max(1, dw * (kw - 1) + 1 - 2 * pw), 7))
    n, px, pk, pb = draw(st.integers(1, 2)), draw(st.integers(1, 8)), draw(st.integers(1, 8)), draw(st.integers(1, 24))
    inputs = [draw(values((n, groups * ic, h, w), px)), draw(values((groups * per_group, ic, kh, kw), pk))]
    bias = draw(st.booleans())
    if bias:
        inputs.append(draw(values((groups * per_group,), pb)))
    attrs = {"channels": groups * per_group, "kernel_size": (kh, kw), "strides": (sh, sw), "padding": (ph, pw),
             "dilation": (dh, dw), "groups": groups, "use_bias": bias}
    return inputs, attrs, [px, pk, pb][:len(inputs)]


@settings(max_examples=150, deadline=None)
@given(conv_cases())
def test_conv2d(case):
    agrees("conv2d", *case)


@settings(max_examples=100, deadline=None)
@given(st.data(), st.integers(1, 3), st.integers(1, 40), st.integers(1, 5), st.booleans(),
       st.integers(1, 8), st.integers(1, 8), st.integers(1, 24))
def test_dense(data, m, k, units, bias, px, pw, pb):
    inputs = [data.draw(values((m, k), px)), data.draw(values((units, k), pw))]
    if bias:
        inputs.append(data.draw(values((units,), pb)))
    agrees("dense", inputs, {"units": units, "use_bias": bias}, [px, pw, pb][:len(inputs)])


@settings(max_examples=150, deadline=None)
@given(st.data(), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3),
       st.integers(0, 2), st.integers(0, 2), st.booleans(), st.integers(1, 32))
def test_max_pool2d(data, kh, kw, sh, sw, ph, pw, ceil_mode, precision):
    h, w = data.draw(st.integers(1, 7)), data.draw(st.integers(1, 7))
    x = data.draw(values((data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3)), h, w), precision))
    attrs = {"pool_size": (kh, kw), "strides": (sh, sw), "padding": (ph, pw), "ceil_mode": ceil_mode}
    try:
        cvmvm.run_op("max_pool2d", [x], attrs, [precision])
    except cvmvm.InvalidError:
        return   # a window past the input, or padding as wide as the window: refused by the verifier
    agrees("max_pool2d", [x], attrs, [precision])


# -- whole programs --------------------------------------------------------------------

@st.composite
def chains(draw):
    """A random model the loop takes, and an input: convolution stages (conv2d with or without
    bias, a right shift back to 8 bits, maybe relu, max_pool2d, a scale, a tensor added to
    itself), then flatten, dense and a right shift; an intermediate is an output too."""
    from tests.test_receipt import build, instr
    from serializer.model import Input, Param
    c, h, w = draw(st.integers(1, 3)), draw(st.integers(3, 8)), draw(st.integers(3, 8))
    x = draw(values((1, c, h, w), 8))
    params: list[np.ndarray] = []
    plan = []   # (op, inputs: "x", a param's index, or None for the previous output, attrs)

    def param(shape):
        params.append(draw(values(shape, 8)))
        return len(params) - 1

    current = "x"
    for _ in range(draw(st.integers(1, 3))):
        k, stride, pad = draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(0, 1))
        if h + 2 * pad < k or w + 2 * pad < k:
            break
        oc = draw(st.integers(1, 4))
        ins = [current, param((oc, c, k, k))] + ([param((oc,))] if draw(st.booleans()) else [])
        plan.append(("conv2d", ins, {"channels": oc, "kernel_size": (k, k), "strides": (stride, stride),
                                     "padding": (pad, pad), "use_bias": len(ins) == 3}))
        c, h, w = oc, (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        plan.append(("cvm_right_shift", [None], {"precision": 8, "shift_bit": draw(st.integers(1, 12))}))
        if draw(st.booleans()):
            plan.append(("relu", [None], {}))
        if draw(st.booleans()) and h >= 2 and w >= 2:
            plan.append(("max_pool2d", [None], {"pool_size": (2, 2), "strides": (2, 2)}))
            h, w = h // 2, w // 2
        if draw(st.booleans()):
            plan.append(("broadcast_mul", [None, param((1, c, 1, 1))], {}))
            plan.append(("cvm_right_shift", [None], {"precision": 8, "shift_bit": 7}))
        if draw(st.booleans()):
            plan.append(("broadcast_add", [None, None], {}))
            plan.append(("cvm_clip", [None], {"precision": 8}))
        current = None
    plan.append(("flatten", [current], {}))
    units = draw(st.integers(1, 5))
    plan.append(("dense", [None, param((units, c * h * w))], {"units": units, "use_bias": False}))
    plan.append(("cvm_right_shift", [None], {"precision": 8, "shift_bit": draw(st.integers(1, 16))}))

    first = 1 + len(params)   # tensor ids: the input, the params, then each instruction's output
    instrs = []
    for k, (op, ins, attrs) in enumerate(plan):
        ids = tuple(0 if i == "x" else first + k - 1 if i is None else 1 + i for i in ins)
        instrs.append(instr(op, ids, first + k, **attrs))
    for value in params:
        value.setflags(write=False)
    model = build([Input("x", TensorType((1, x.shape[1], x.shape[2], x.shape[3]), 8))],
                  [Param(f"p{k}", TensorType(v.shape, 8), v) for k, v in enumerate(params)], instrs,
                  [first + len(plan) - 1, first + draw(st.integers(0, len(plan) - 1))])
    return model, x


@settings(max_examples=120, deadline=None)
@given(chains())
def test_random_models_through_the_loop(case):
    """Every tensor, output and trace root of a random model the loop takes, against the kernels."""
    fast, x = case
    slow = Model(verify(fast.program.model))
    assert fast.compile()
    native.turn_off(slow.program)
    a, b = fast.run({"x": x}, trace=True, keep=True), slow.run({"x": x}, trace=True, keep=True)
    assert a.trace.root == b.trace.root and a.output_hash == b.output_hash
    assert all(np.array_equal(u, v) for u, v in zip(a.tensors, b.tensors))
    assert all(np.array_equal(u, v) for u, v in zip(a.outputs, b.outputs))
    # Traced alone, the tracer takes the arena whole (Tracer.observe_arena).
    assert fast.run({"x": x}, trace=True).trace.commitments == b.trace.commitments

CASES = [c for c in cvm_cases() if c["expect"]["cvmvm"]["status"] != "error"]


def test_cortex_vectors_through_the_loop():
    """Every Cortex reference case the loop takes, against its expected output hashes."""
    taken = 0
    for case in CASES:
        model = cvmvm.load_cortex(case["graph"], case_params(case))
        if native.lay_out(model.program) is None:
            continue
        taken += 1
        layout, arena = natively(model.program, case_inputs(case, model.inputs))
        for t, want in zip(model.program.model.outputs, case["expect"]["cvmvm"]["outputs"]):
            got = native.tensor(layout, arena, t)
            assert hashlib.sha256(got.astype("<i4").tobytes()).hexdigest() == want["sha256"], case["id"]
    assert taken == 247, taken   # of the 839: the rest use ops the loop does not have


def test_digits_every_image_every_tensor():
    fast, slow = generate.load_fixture_model("digits"), generate.load_fixture_model("digits")
    native.turn_off(slow.program)
    images = generate.load_fixture_inputs("digits")
    assert fast.compile() and not slow.compile()
    for x in images:
        a, b = fast.run({"data": x}, trace=True, keep=True), slow.run({"data": x}, trace=True, keep=True)
        assert a.trace.root == b.trace.root and a.output_hash == b.output_hash and a.peak_bytes == b.peak_bytes
        assert all(np.array_equal(u, v) and u.dtype == v.dtype for u, v in zip(a.tensors, b.tensors))
        assert np.array_equal(a.outputs[0], b.outputs[0])
        assert fast.run({"data": x}, trace=True).trace.commitments == b.trace.commitments
    want = np.load(ROOT / "fixtures" / "models" / "digits" / "expected_outputs.npy")
    assert np.array_equal(np.concatenate([fast.run({"data": x}).outputs[0] for x in images]), want)


def test_the_loop_takes_over_at_the_warm_run(monkeypatch):
    monkeypatch.setattr(native, "WARM_RUNS", 16)
    model = generate.load_fixture_model("digits")
    x = generate.load_fixture_inputs("digits")[0]
    first = model.run({"data": x}, trace=True)
    for _ in range(16 - 2):
        model.run({"data": x})
    assert "native" not in model.program.runtime
    again = model.run({"data": x}, trace=True)   # the 16th run, through the loop
    assert again.trace.root == first.trace.root and np.array_equal(again.outputs[0], first.outputs[0])
    assert model.program.runtime["native"]


def test_threads_share_a_compiled_model():
    """The loop and the hasher release the GIL: four threads running one compiled model at once each
    get every image's own outputs and trace root (each run has its own arena and bodies)."""
    from concurrent.futures import ThreadPoolExecutor
    model = generate.load_fixture_model("digits")
    images = generate.load_fixture_inputs("digits")[:60]
    want = [model.run({"data": x}, trace=True) for x in images]
    assert model.compile()

    def runs(offset):
        return [(k, model.run({"data": images[k]}, trace=True)) for k in range(offset, len(images), 4)]
    with ThreadPoolExecutor(4) as pool:
        done = [r for part in pool.map(runs, range(4)) for r in part]
    assert len(done) == len(images)
    for k, got in done:
        assert got.trace.root == want[k].trace.root and np.array_equal(got.outputs[0], want[k].outputs[0])


def test_an_output_is_the_callers_own():
    model = generate.load_fixture_model("digits")
    x = generate.load_fixture_inputs("digits")[0]
    assert model.compile()
    out = model.run({"data": x}).outputs[0]
    assert out.base is None and out.flags.writeable


def test_a_large_tensor_in_a_compiled_traced_run():
    """A body of 64 KiB or more is not among the small ones: the tracer takes it by itself (the
    hashing process, or at once)."""
    x = np.arange(-10_000, 10_000, dtype=np.int32) * 100_000
    fast, feeds = single_op_model("relu", [x], None, [32])
    slow, _ = single_op_model("relu", [x], None, [32])
    assert fast.compile()
    native.turn_off(slow.program)
    for _ in range(3):   # the second traced run with a large tensor starts the hashing process
        a, b = fast.run(feeds, trace=True), slow.run(feeds, trace=True)
        assert a.trace.commitments == b.trace.commitments and a.trace.root == b.trace.root


def test_one_run_never_imports_numba():
    code = ("import sys; from tests.fixture_script import generate; "
            "m = generate.load_fixture_model('digits'); m.run({'data': generate.load_fixture_inputs('digits')[0]}); "
            "print('numba' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False"


# -- a traced run's bodies and the compiled hasher ----------------------------------------------

@st.composite
def tensor_types(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=4, max_side=40).filter(lambda s: int(np.prod(s)) <= 5000))
    return TensorType(tuple(shape), draw(st.integers(1, 32)))


def filled_bodies(types, seed):
    """A BulkCommitter's bodies for ``types``, written by numpy from random values in each precision,
    and the values."""
    rng = np.random.default_rng(seed)
    bulk = BulkCommitter(types)
    bodies = bulk.bodies()
    values = []
    for dest, t in zip(bodies.dests, types):
        bound = precision_bound(t.precision)
        values.append(rng.integers(-bound, bound + 1, size=t.shape, dtype=np.int64).astype(np.int32))
        np.copyto(dest, values[-1], casting="unsafe")
    return bulk, bodies, values


@settings(max_examples=80, deadline=None)
@given(st.lists(tensor_types(), min_size=1, max_size=6), st.integers(0, 2**32 - 1))
def test_lanes_written_as_numpy_writes_them(types, seed):
    """Every lane width, channel-last or not, from an arena: the bytes numpy's copies give."""
    bulk, bodies, values = filled_bodies(types, seed)
    arena = np.concatenate([v.reshape(-1) for v in values])
    rows, start = [], 0
    for t, (body, _) in zip(types, bulk.spans):
        last = hashing.channel_last(t)
        rows.append((start, t.size, body, hashing.lane_width(t), int(last), *(t.shape[1:] if last else (0, 0, 0))))
        start += t.size
    buffer = np.zeros_like(bodies.buffer)
    native.lane_writer()(arena, np.array(rows, dtype=np.int64), buffer)
    assert buffer.tobytes() == bodies.buffer.tobytes()


def rows_of(types, count, seed):
    """``count`` items' bodies laid end to end, and each item's commitments through hashlib."""
    items = [filled_bodies(types, seed + k) for k in range(count)]
    bulk = items[0][0]
    rows = np.zeros(count * bulk.size, dtype=np.uint8)
    for k, dest in enumerate(bulk.row_dests(rows, count)):
        np.copyto(dest, np.stack([values[k] for _, _, values in items]), casting="unsafe")
    return bulk, rows, [bulk.commit(bodies) for _, bodies, _ in items]


def _hasher():
    h = sha.hasher()
    assert h is not None, "numba and libcrypto's SHA-256 are here"
    return h


@settings(max_examples=80, deadline=None)
@given(st.lists(tensor_types(), min_size=1, max_size=6), st.integers(0, 2**32 - 1))
def test_hasher_commits_as_the_bulk_committer(types, seed):
    """Bodies of every lane width, one chunk and many, channel-last or not, against hashlib's."""
    bulk, bodies, _ = filled_bodies(types, seed)
    assert _hasher().commit(bulk.plan, bodies.buffer) == bulk.commit(bodies)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.binary(min_size=32, max_size=32), min_size=1, max_size=70))
def test_hasher_tree_root(leaves):
    assert _hasher().tree_root(leaves) == tree_root(leaves)


def test_hasher_refuses_what_is_not_a_tree():
    for leaves in ([], [b"x" * 31], [b"x" * 32, b"y" * 33]):
        with pytest.raises(InternalError):
            _hasher().tree_root(leaves)
    good = np.zeros((2, 3, 32), dtype=np.uint8)
    for levels in (np.zeros((2, 0, 32), np.uint8), np.zeros((2, 3, 31), np.uint8), good.astype(np.int8),
                   good.transpose(1, 0, 2), np.zeros((2, 6, 32), np.uint8)[:, ::2]):
        with pytest.raises(InternalError):
            _hasher().tree_roots(levels)


@settings(max_examples=80, deadline=None)
@given(st.lists(tensor_types(), min_size=1, max_size=5), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_hasher_commits_rows_as_the_bulk_committer(types, count, seed):
    """``count`` items' bodies laid end to end (BulkCommitter.row_dests, as a stacked run writes them):
    each item's commitments are those of its own bodies, through hashlib."""
    bulk, rows, want = rows_of(types, count, seed)
    got = _hasher().commit_rows(bulk.plan, rows, bulk.size, count)
    assert got.shape == (count, len(types), 32)
    assert [[bytes(c) for c in item] for item in got] == want


_lanes: list = []


def _lane_hasher():
    """The compiled hasher with serializer.sha_lanes' sixteen lanes, on any CPU (the hasher itself
    takes them only where they are fast)."""
    if not _lanes:
        from serializer import sha_lanes
        _lanes.append(sha_lanes.compile_lanes(hashing.LEAF, hashing.INNER))
    assert _lanes[0] is not None, "llvmlite compiles the lanes"
    return _hasher()._replace(lanes=_lanes[0], streams=None)


_streams: list = []


def _stream_hasher():
    """The compiled hasher with serializer.sha_lanes' four SHA-NI streams for a body's chunks, and
    no lanes; skipped on a CPU without the SHA extensions."""
    from serializer import sha_lanes
    if not sha_lanes.sha_here():
        pytest.skip("this CPU has no SHA extensions")
    if not _streams:
        _streams.append(sha_lanes.compile_streams(hashing.LEAF))
    assert _streams[0] is not None, "llvmlite compiles the streams where the CPU has SHA-NI"
    return _hasher()._replace(lanes=None, streams=_streams[0])


# The two ways of hashing a body's whole chunks several at a time: the hasher of each, alone.
BODY_WAYS = {"lanes": _lane_hasher, "streams": _stream_hasher}


@settings(max_examples=40, deadline=None)
@given(st.lists(tensor_types(), min_size=1, max_size=4), st.integers(16, 40), st.integers(0, 2**32 - 1))
def test_lanes_commit_rows_as_the_bulk_committer(types, count, seed):
    """Sixteen items at a time in lanes, and the rest one by one: each item's commitments are those
    of its own bodies, through hashlib."""
    bulk, rows, want = rows_of(types, count, seed)
    got = _lane_hasher().commit_rows(bulk.plan, rows, bulk.size, count)
    assert [[bytes(c) for c in item] for item in got] == want


def test_lanes_pad_every_length_at_the_block_edges():
    """Chunk messages (0x00 || chunk) of every length around SHA-256's block and padding edges
    (55, 56, 63, 64, 65 bytes, ...), chunks of 4096 and a short one, in three groups of lanes."""
    lengths = [1, 2, 53, 54, 55, 56, 62, 63, 64, 118, 119, 120, 126, 127, 128, 255, 256, 4096, 4097, 8191]
    types = [TensorType((n,), 8) for n in lengths]
    bulk, rows, want = rows_of(types, 48, 7)
    got = _lane_hasher().commit_rows(bulk.plan, rows, bulk.size, 48)
    assert [[bytes(c) for c in item] for item in got] == want


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_lanes_fold_trees_as_hashlib(trees, leaves, seed):
    """Trees of every leaf count (odd levels carry their last node up) sixteen at a time in lanes,
    and the rest one by one."""
    levels = np.random.default_rng(seed).integers(0, 256, size=(trees, leaves, 32), dtype=np.uint8)
    want = [tree_root([bytes(leaf) for leaf in tree]) for tree in levels]
    assert [bytes(root) for root in _lane_hasher().tree_roots(levels)] == want


def test_lanes_leave_fewer_than_sixteen_items_to_libcrypto():
    h = _lane_hasher()
    types = [TensorType((3, 5), 16)]
    for count, done in ((1, 0), (15, 0), (16, 16), (17, 16), (33, 32)):
        bulk, rows, want = rows_of(types, count, count)
        got = h.commit_rows(bulk.plan, rows, bulk.size, count)
        assert [[bytes(c) for c in item] for item in got] == want
        assert h.lanes.commit(bulk.plan, rows, bulk.size, count, np.empty(32 * count, np.uint8)) == done
        assert h.lanes.fold(np.zeros((count, 3, 32), np.uint8)) == done


@pytest.mark.parametrize("way", BODY_WAYS)
@settings(max_examples=60, deadline=None)
@given(st.sampled_from([128, 192, 256, 4096, 64, 100, 4095]), st.integers(1, 50), st.integers(0, 200),
       st.integers(0, 2**32 - 1))
def test_whole_chunks_of_a_body_hash_as_hashlib(way, size, chunks, tail, seed):
    """A body's chunk tree: whole chunks of a multiple of 64 bytes (at least 128) sixteen at a time
    in lanes or four in SHA-NI streams, each read where it lies with only its first and last blocks
    staged, and the rest one by one, a short last chunk included."""
    length = max(1, (chunks - 1) * size + tail % size if tail % size else chunks * size)
    body = np.random.default_rng(seed).integers(0, 256, size=length, dtype=np.uint8)
    assert BODY_WAYS[way]().blocks_root(body, size) == hashing.blocks_root(body.data, size)


# (chunk size, body length, chunks hashed together) for each way, counted by hand: whole chunks
# only, in groups of sixteen lanes or four streams, and none of a size not a multiple of 64 or under 128.
WHOLE_CHUNKS = {
    "lanes": ((4096, 16 * 4096, 16), (4096, 16 * 4096 - 1, 0), (4096, 33 * 4096 + 5, 32), (128, 47 * 128, 32),
              (256, 15 * 256 + 255, 0), (64, 64 * 64, 0), (4000, 40 * 4000, 0), (4160, 40 * 4160, 32)),
    "streams": ((4096, 4 * 4096, 4), (4096, 4 * 4096 - 1, 0), (4096, 33 * 4096 + 5, 32), (128, 47 * 128, 44),
                (256, 3 * 256 + 255, 0), (192, 9 * 192, 8), (64, 64 * 64, 0), (4000, 40 * 4000, 0),
                (4160, 41 * 4160, 40)),
}


@pytest.mark.parametrize("way", BODY_WAYS)
def test_whole_chunks_go_together_and_the_rest_one_by_one(way):
    h = BODY_WAYS[way]()
    for size, length, done in WHOLE_CHUNKS[way]:
        body = np.arange(length, dtype=np.int64).astype(np.uint8)
        nodes = np.zeros(32 * -(-length // size), np.uint8)
        assert getattr(h, way).leaves(body, size, nodes) == done
        want = [hashlib.sha256(hashing.LEAF + body[i * size:(i + 1) * size].tobytes()).digest() for i in range(done)]
        assert [nodes[32 * i:32 * i + 32].tobytes() for i in range(done)] == want
        assert not nodes[32 * done:].any()
        assert h.blocks_root(body, size) == hashing.blocks_root(body.data, size)


@pytest.mark.parametrize("way", BODY_WAYS)
def test_whole_chunks_are_refused_where_they_cannot_be_addressed(way):
    h = BODY_WAYS[way]()
    body, nodes = np.zeros(16 * 4096, np.uint8), np.zeros(16 * 32, np.uint8)
    for b, n in ((body.view(np.int8), nodes), (body, nodes.view(np.int8)), (body, nodes[:-1]),
                 (np.zeros(2 * 16 * 4096, np.uint8)[::2], nodes), (body, np.zeros(2 * 16 * 32, np.uint8)[::2]),
                 (body.reshape(16, 4096), nodes)):
        with pytest.raises(InternalError):
            getattr(h, way).leaves(b, 4096, n)


def test_lanes_refuse_what_is_not_within_its_buffers():
    """The compiled code reads and writes where it is told: every extent is checked before it runs."""
    h = _lane_hasher()
    bulk, rows, _ = rows_of([TensorType((3, 5), 16), TensorType((300,), 8)], 16, 1)
    plan, out = bulk.plan, np.empty(32 * 2 * 16, np.uint8)
    bad_plans = [plan._replace(chunks=plan.chunks + bulk.size), plan._replace(chunks=plan.chunks[:, ::-1].copy()),
                 plan._replace(pairs=plan.pairs + 100), plan._replace(roots=plan.roots + 100),
                 plan._replace(spans=plan.spans + 1), plan._replace(chunks=plan.chunks[:0])]
    for bad in bad_plans:
        with pytest.raises(InternalError):
            h.lanes.commit(bad, rows, bulk.size, 16, out)
    for buffer, out_ in ((rows[:15 * bulk.size], out), (rows, out[:-1]), (rows.view(np.int8), out), (rows, out[::2])):
        with pytest.raises(InternalError):
            h.lanes.commit(plan, buffer, bulk.size, 16, out_)
    for levels in (np.zeros((16, 3, 31), np.uint8), np.zeros((16, 3, 32), np.int8), np.zeros((16, 6, 32), np.uint8)[:, ::2]):
        with pytest.raises(InternalError):
            h.lanes.fold(levels)


def test_the_hasher_takes_lanes_only_where_they_are_fast(monkeypatch):
    from serializer import sha_lanes
    monkeypatch.setattr(sha_lanes, "fast_here", lambda: False)
    h = sha._compile_hasher()
    assert h is not None and h.lanes is None
    monkeypatch.setattr(sha_lanes, "fast_here", lambda: True)
    h = sha._compile_hasher()
    assert h is not None and h.lanes is not None


@pytest.mark.parametrize("part", ["commit", "fold"])
def test_the_hasher_drops_lanes_whose_answers_are_not_hashlibs(monkeypatch, part):
    """Lanes that commit or fold to one wrong byte are not used; the hasher keeps libcrypto, and the
    streams for a body's chunks where the CPU has SHA-NI."""
    from serializer import sha_lanes

    compile_lanes = sha_lanes.compile_lanes

    def wrong(leaf, inner):
        right = compile_lanes(leaf, inner)

        def commit(plan, buffer, size, count, out):
            done = right.commit(plan, buffer, size, count, out)
            out[:32] ^= 1
            return done

        def fold(levels):
            done = right.fold(levels)
            levels[0, 0, 0] ^= 1
            return done
        return right._replace(**{part: commit if part == "commit" else fold})
    monkeypatch.setattr(sha_lanes, "fast_here", lambda: True)
    monkeypatch.setattr(sha_lanes, "compile_lanes", wrong)
    h = sha._compile_hasher()
    assert h is not None and h.lanes is None
    assert (h.streams is not None) == sha_lanes.sha_here()


def test_no_lanes_without_llvm(monkeypatch):
    from serializer import sha_lanes
    monkeypatch.setattr(sha_lanes, "_machine_code", lambda: None)
    assert sha_lanes.compile_lanes(hashing.LEAF, hashing.INNER) is None


def test_the_hasher_takes_streams_only_where_the_cpu_has_sha(monkeypatch):
    from serializer import sha_lanes
    _stream_hasher()   # skips where there are none
    monkeypatch.setattr(sha_lanes, "fast_here", lambda: False)   # no lanes, which would come first
    monkeypatch.setattr(sha_lanes, "sha_here", lambda: False)
    h = sha._compile_hasher()
    assert h is not None and h.streams is None and h.lanes is None
    body = np.arange(40 * 4096, dtype=np.int64).astype(np.uint8)
    assert h.blocks_root(body, 4096) == hashing.blocks_root(body.data, 4096)   # libcrypto's
    monkeypatch.setattr(sha_lanes, "sha_here", lambda: True)
    h = sha._compile_hasher()
    assert h is not None and h.streams is not None
    assert h.blocks_root(body, 4096) == hashing.blocks_root(body.data, 4096)   # the streams'


def test_the_hasher_takes_no_streams_where_it_has_the_lanes(monkeypatch):
    """On a CPU with AVX-512 and SHA-NI whose lanes outrun its SHA-NI (every one but AMD's Zen:
    sha_lanes.streams_first) a body's chunks go through the lanes, and the streams are never
    compiled (lanes that fail their known answers leave a body's chunks to the streams:
    test_the_hasher_drops_lanes_whose_answers_are_not_hashlibs)."""
    from serializer import sha_lanes
    _stream_hasher()   # skips without SHA-NI
    _lane_hasher()
    compiled = []
    compile_streams = sha_lanes.compile_streams

    def counted(leaf):
        compiled.append(leaf)
        return compile_streams(leaf)
    monkeypatch.setattr(sha_lanes, "compile_streams", counted)
    monkeypatch.setattr(sha_lanes, "sha_here", lambda: True)
    monkeypatch.setattr(sha_lanes, "fast_here", lambda: True)
    monkeypatch.setattr(sha_lanes, "streams_first", lambda: False)
    h = sha._compile_hasher()
    assert h is not None and h.lanes is not None and h.streams is None and not compiled
    body = np.arange(40 * 4096 + 5, dtype=np.int64).astype(np.uint8)
    assert h.blocks_root(body, 4096) == hashing.blocks_root(body.data, 4096)


def test_the_hasher_keeps_lanes_and_streams_where_the_streams_come_first(monkeypatch):
    """Where SHA-NI outruns the lanes (AMD's Zen), the hasher keeps both: the lanes for commitments
    and trace trees, the streams for a body's chunks, and the body's root is hashlib's."""
    from serializer import sha_lanes
    _stream_hasher()   # skips without SHA-NI
    _lane_hasher()
    calls = []
    compile_streams = sha_lanes.compile_streams

    def counted(leaf):
        right = compile_streams(leaf)

        def leaves(body, size, nodes):
            calls.append(size)
            return right.leaves(body, size, nodes)
        return right._replace(leaves=leaves)
    monkeypatch.setattr(sha_lanes, "compile_streams", counted)
    monkeypatch.setattr(sha_lanes, "sha_here", lambda: True)
    monkeypatch.setattr(sha_lanes, "fast_here", lambda: True)
    monkeypatch.setattr(sha_lanes, "streams_first", lambda: True)
    h = sha._compile_hasher()
    assert h is not None and h.lanes is not None and h.streams is not None
    calls.clear()   # the known answers' own calls
    body = np.arange(40 * 4096 + 5, dtype=np.int64).astype(np.uint8)
    assert h.blocks_root(body, 4096) == hashing.blocks_root(body.data, 4096)
    assert calls == [4096]


@pytest.mark.parametrize("name, sha_ni, first", [
    ("znver4", True, True), ("znver5", True, True), ("znver3", True, True),
    ("znver4", False, False),   # no SHA-NI: nothing to put first
    ("rocketlake", True, False), ("sapphirerapids", True, False), ("icelake-server", True, False),
    ("generic", True, False), ("", True, False),
])
def test_streams_first_only_on_amds_zen_with_sha(monkeypatch, name, sha_ni, first):
    """The choice is the CPU's kind, never a timing (a timing would differ run to run)."""
    from serializer import sha_lanes
    binding = pytest.importorskip("llvmlite.binding")
    monkeypatch.setattr(binding, "get_host_cpu_name", lambda: name)
    monkeypatch.setattr(sha_lanes, "sha_here", lambda: sha_ni)
    assert sha_lanes.streams_first() is first


def test_streams_first_is_false_where_llvm_cannot_name_the_cpu(monkeypatch):
    from serializer import sha_lanes
    binding = pytest.importorskip("llvmlite.binding")

    def fails():
        raise RuntimeError("no host CPU name")
    monkeypatch.setattr(binding, "get_host_cpu_name", fails)
    monkeypatch.setattr(sha_lanes, "sha_here", lambda: True)
    assert sha_lanes.streams_first() is False


def test_the_hasher_drops_streams_whose_answers_are_not_hashlibs(monkeypatch):
    """Streams that hash one chunk to one wrong byte are not used; the hasher hashes bodies as before."""
    from serializer import sha_lanes
    _stream_hasher()
    monkeypatch.setattr(sha_lanes, "fast_here", lambda: False)   # no lanes, which would come first
    compile_streams = sha_lanes.compile_streams

    def wrong(leaf):
        right = compile_streams(leaf)

        def leaves(body, size, nodes):
            done = right.leaves(body, size, nodes)
            nodes[:1] ^= 1
            return done
        return right._replace(leaves=leaves)
    monkeypatch.setattr(sha_lanes, "compile_streams", wrong)
    h = sha._compile_hasher()
    assert h is not None and h.streams is None


def test_no_streams_where_llvm_cannot_compile_them(monkeypatch):
    """An LLVM without the SHA intrinsics, or a CPU without them, raises while compiling: no streams."""
    from serializer import sha_lanes

    def fails(binding, module):
        raise RuntimeError("LLVM ERROR: Cannot select: intrinsic %llvm.x86.sha256rnds2")
    monkeypatch.setattr(sha_lanes, "_engine", fails)
    assert sha_lanes.compile_streams(hashing.LEAF) is None


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 40000), st.sampled_from([1, 7, 64, 256, 4096]), st.integers(0, 2**32 - 1))
def test_hasher_blocks_root(length, size, seed):
    """A body's chunk tree (the hashing process's blocks), every length against hashlib's."""
    body = np.random.default_rng(seed).integers(0, 256, size=length, dtype=np.uint8)
    assert _hasher().blocks_root(body, size) == hashing.blocks_root(body.data, size)


def test_hasher_refuses_what_is_not_a_body():
    for body, size in ((np.zeros(0, np.uint8), 4096), (np.zeros(8, np.int8), 4096), (np.zeros((2, 4), np.uint8), 4),
                       (np.zeros(16, np.uint8)[::2], 4), (np.zeros(8, np.uint8), 0)):
        with pytest.raises(InternalError):
            _hasher().blocks_root(body, size)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 6), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_hasher_tree_roots(trees, leaves, seed):
    rng = np.random.default_rng(seed)
    levels = rng.integers(0, 256, size=(trees, leaves, 32), dtype=np.uint8)
    want = [tree_root([bytes(leaf) for leaf in tree]) for tree in levels]
    assert [bytes(root) for root in _hasher().tree_roots(levels)] == want


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 6), st.integers(1, 200), st.binary(max_size=80), st.data())
def test_hasher_gathers_as_hashlib(count, width, head, data):
    """Each row's digest of a head and then segments of the row (a batch's input commitments,
    output hashes and trace roots), empty, overlapping and whole-row segments included."""
    rows = np.frombuffer(data.draw(st.binary(min_size=count * width, max_size=count * width)),
                         dtype=np.uint8).reshape(count, width).copy()
    starts = st.integers(0, width)
    pairs = data.draw(st.lists(starts.flatmap(lambda s: st.tuples(st.just(s), st.integers(0, width - s))), max_size=6))
    segments = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    want = [hashlib.sha256(head + b"".join(bytes(r[s:s + n]) for s, n in pairs)).digest() for r in rows]
    assert [bytes(d) for d in _hasher().gather(rows, segments, head)] == want


def test_hasher_refuses_what_does_not_gather():
    rows = np.zeros((2, 64), dtype=np.uint8)
    good = np.array([[0, 32]], dtype=np.int64)
    for r, segments in ((rows.astype(np.int8), good), (np.zeros((2, 128), np.uint8)[:, ::2], good),
                        (rows, good.astype(np.int32)), (rows, np.array([0, 32], dtype=np.int64)),
                        (rows, np.array([[0, 32, 1]], dtype=np.int64)), (rows, np.array([[40, 32]], dtype=np.int64)),
                        (rows, np.array([[-1, 2]], dtype=np.int64)), (rows, np.array([[4, -2]], dtype=np.int64))):
        with pytest.raises(InternalError):
            _hasher().gather(r, segments, b"")


@settings(max_examples=80, deadline=None)
@given(st.tuples(st.integers(1, 2), st.integers(1, 40), st.integers(1, 12), st.integers(1, 12)),
       st.integers(1, 8), st.integers(0, 2**32 - 1))
def test_channel_mover_writes_bodies_as_numpy(shape, precision, seed):
    """Channel-last bodies (1-byte lanes, rank 4) written by the compiled mover, at the precision's
    bounds too: numpy's bytes."""
    t = TensorType(shape, precision)
    bound = precision_bound(precision)
    value = np.random.default_rng(seed).integers(-bound, bound + 1, size=shape, dtype=np.int64).astype(np.int32)
    value.reshape(-1)[:2] = (-bound, bound)[:value.size]
    committer = hashing.Committer(t)
    want, got = np.zeros(committer.length, np.uint8), np.zeros(committer.length, np.uint8)
    committer.write_body(value, want)
    move = sha.channel_mover()
    assert move is not None
    committer.write_body(value, got, move)
    assert np.array_equal(got, want) and bytes(want) == bytes(hashing.tensor_body(value, t))


def test_channel_mover_leaves_other_arrays_to_numpy():
    """A big-endian or strided array, or a body in wider lanes, is written by numpy whatever the mover."""
    def refuse(value, lanes):
        raise AssertionError("moved")
    t = TensorType((1, 3, 4, 5), 8)
    value = np.arange(60, dtype=np.int32).reshape(t.shape) - 30
    for v in (value.astype(">i4"), np.ascontiguousarray(value.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)):
        out = np.zeros(60, np.uint8)
        hashing.Committer(t).write_body(v, out, refuse)
        assert bytes(out) == bytes(hashing.tensor_body(value, t))
    wide = TensorType((1, 3, 4, 5), 16)
    out = np.zeros(120, np.uint8)
    hashing.Committer(wide).write_body(value, out, refuse)
    assert bytes(out) == bytes(hashing.tensor_body(value, wide))


def test_no_hasher_without_libcrypto(monkeypatch):
    monkeypatch.setattr(sha, "_libcrypto", lambda: None)
    assert sha._compile_hasher() is None


def test_no_hasher_whose_answers_are_not_hashlibs(monkeypatch):
    monkeypatch.setattr(sha, "tree_root", lambda leaves: b"\0" * 32)
    assert sha._compile_hasher() is None


def test_traced_runs_of_a_compiled_program_hash_through_it(monkeypatch):
    model = generate.load_fixture_model("digits")
    x = generate.load_fixture_inputs("digits")[0]
    want = model.run({"data": x}, trace=True).trace
    assert model.compile()
    calls = spied_hasher(monkeypatch)
    got = model.run({"data": x}, trace=True).trace
    assert calls == ["bulk", "tree"]
    assert got.root == want.root and got.commitments == want.commitments


def spied_hasher(monkeypatch) -> list[str]:
    """The compiled hasher, each call of its functions noted."""
    calls: list[str] = []
    h = _hasher()
    monkeypatch.setattr(sha, "_hashers", [sha.Hasher(lambda *a: calls.append("bulk") or h.bulk(*a),
                                                     lambda *a: calls.append("tree") or h.tree(*a), h.leaves,
                                                     lambda *a: calls.append("gather") or h.gathered(*a))])
    return calls


def test_stacked_runs_commit_their_items_through_it(monkeypatch):
    """A batch of digits images: one compiled call commits every item's stacked tensors, two make
    every item's input commitment and output hash, one folds every item's trace tree and one makes
    every trace root; every result is the one-by-one run's, uncompiled."""
    model = generate.load_fixture_model("digits")
    images = generate.load_fixture_inputs("digits")[:40]
    native.turn_off(model.program)
    want = [model.run({"data": x}, trace=True) for x in images]
    calls = spied_hasher(monkeypatch)
    got = model.run_batch([{"data": x} for x in images], trace=True)
    assert calls == ["bulk", "gather", "gather", "tree", "gather"]
    assert [(g.trace, g.output_hash, g.output_commitments) for g in got] == \
        [(w.trace, w.output_hash, w.output_commitments) for w in want]
    assert all(np.array_equal(g.outputs[0], w.outputs[0]) for g, w in zip(got, want))


@settings(max_examples=60, deadline=None)
@given(chains(), st.integers(2, 4), st.integers(0, 2**32 - 1))
def test_random_models_batched_through_it(case, count, seed):
    """Random models, some with multi-chunk tensors: each item of a stacked run committed through the
    compiled hasher is its one-by-one traced run through hashlib."""
    model, x = case
    rng = np.random.default_rng(seed)
    feeds = [{"x": x}] + [{"x": rng.integers(-127, 128, size=x.shape, dtype=np.int64).astype(np.int32)}
                         for _ in range(count - 1)]
    _hasher()
    got = model.run_batch(feeds, trace=True)
    native.turn_off(model.program)
    with monkeypatch_hashers([]):
        want = [model.run(f, trace=True) for f in feeds]
    assert [(g.trace, g.output_hash) for g in got] == [(w.trace, w.output_hash) for w in want]


class monkeypatch_hashers:
    """``sha._hashers`` set for a block (hypothesis tests cannot take pytest's monkeypatch)."""

    def __init__(self, value: list) -> None:
        self.value = value

    def __enter__(self) -> None:
        self.saved, sha._hashers = sha._hashers, self.value

    def __exit__(self, *exc) -> None:
        sha._hashers = self.saved


def test_a_process_compiles_it_after_enough_items(monkeypatch):
    """Stacked runs use hashlib until this process's stacked runs have committed HASH_WARM_ITEMS items,
    then the compiled hasher; the results are the same."""
    from cvmvm.vm import batching
    model = generate.load_fixture_model("digits")
    feeds = [{"data": x} for x in generate.load_fixture_inputs("digits")[:8]]
    monkeypatch.setattr(sha, "_hashers", [])
    monkeypatch.setattr(batching, "HASH_WARM_ITEMS", 16)
    monkeypatch.setattr(batching, "_committed", [0])
    first = model.run_batch(feeds, trace=True)
    second = model.run_batch(feeds, trace=True)
    assert sha._hashers == [] and batching._committed == [16]
    third = model.run_batch(feeds, trace=True)   # 16 items committed before it: compiled first
    assert sha._hashers and sha._hashers[0] is not None
    assert [r.trace for r in first] == [r.trace for r in second] == [r.trace for r in third]


def test_a_replayer_asked_to_compiles_it_first(monkeypatch):
    from cvmvm.tx.replay import Replayer
    monkeypatch.setattr(sha, "_hashers", [])
    Replayer(lambda h: None)
    assert sha._hashers == []
    Replayer(lambda h: None, compile=True)
    assert sha._hashers and sha._hashers[0] is not None


def test_a_stacked_run_that_saw_not_every_tensor(monkeypatch):
    """A stacked run whose observer missed a tensor commits nothing from a half-written buffer: its
    items run one at a time instead, with the same results."""
    from cvmvm.vm import batching
    model = generate.load_fixture_model("digits")
    feeds = [{"data": x} for x in generate.load_fixture_inputs("digits")[:4]]
    want = [r.trace for r in model.run_batch(feeds, trace=True)]
    real = batching.execute

    def blind(program, inputs, observe):   # never shows the observer the last instruction's output
        last = program.steps[-1].outputs[0]
        return real(program, inputs, lambda t, v: None if t == last else observe(t, v))

    _hasher()
    monkeypatch.setattr(batching, "execute", blind)
    big = model._batch._stacked[4]
    with pytest.raises(InternalError) as e:
        batching._run_stacked(model, model._batch.plan, big, [np.concatenate([f["data"] for f in feeds])], 4,
                              False, batching.RowBodies(model.program, model._batch.plan))
    assert e.value.code == "internal.hash"
    monkeypatch.setattr(batching, "execute", real)
    assert [r.trace for r in model.run_batch(feeds, trace=True)] == want


# -- when the loop does not take a program ----------------------------------------------

def test_an_op_it_does_not_have():
    model, _ = single_op_model("sum", [np.arange(6, dtype=np.int32).reshape(2, 3)], {"axis": (1,)})
    assert native.lay_out(model.program) is None
    assert native.prepare(model.program) is None


def test_tensors_too_large():
    x = np.zeros((native.MAX_ARENA_ELEMENTS // 2 + 1,), dtype=np.int32)
    model, _ = single_op_model("relu", [x])
    assert native.lay_out(model.program) is None
    small, _ = single_op_model("relu", [x[:native.MAX_ARENA_ELEMENTS // 2]])
    assert native.lay_out(small.program) is not None


def test_more_memory_than_verification_bounded():
    """A convolution whose gathered windows (64 channels x 3 x 3 taps for each of 28 x 28 outputs,
    int64) would take the loop past the memory verification bounded the run by."""
    x, w = np.zeros((1, 64, 30, 30), dtype=np.int32), np.zeros((1, 64, 3, 3), dtype=np.int32)
    program = single_op_model("conv2d", [x, w], {"channels": 1, "kernel_size": (3, 3), "use_bias": False})[0].program
    layout = native.lay_out(program)
    assert native.native_bytes(layout) == 4 * (57600 + 576 + 784) + 8 * 784 + 8 * 784 * 576 > program.memory_bytes
    assert native.prepare(program) is None


def test_without_numba(monkeypatch):
    monkeypatch.setattr(native, "_compiled", [None])
    monkeypatch.setattr(native, "WARM_RUNS", 16)
    model = generate.load_fixture_model("digits")
    x = generate.load_fixture_inputs("digits")[0]
    want = model.run({"data": x}).outputs[0]
    for _ in range(16):
        assert np.array_equal(model.run({"data": x}).outputs[0], want)
    assert model.program.runtime["native"] is False
    assert not generate.load_fixture_model("digits").compile()


def test_numba_that_cannot_compile_the_loop(monkeypatch):
    import numba

    def broken(*args, **kwargs):
        raise RuntimeError("no LLVM target here")
    monkeypatch.setattr(numba, "njit", broken)
    assert native._compile() is None


def test_numba_that_breaks_on_import(monkeypatch):
    """An installed numba whose import fails (broken, or out of memory under a bound) means no
    compiled code, never an error of the run."""
    import builtins
    real = builtins.__import__

    def broken(name, *args, **kwargs):
        if name == "numba":
            raise RuntimeError("numba's import failed")
        return real(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", broken)
    assert native._compile() is None and sha._compile_hasher() is None


def test_numba_with_its_jit_disabled(monkeypatch):
    import numba
    monkeypatch.setattr(numba.config, "DISABLE_JIT", True)
    assert native._compile() is None


def test_turned_off(monkeypatch):
    monkeypatch.setattr(native, "WARM_RUNS", 16)
    model = generate.load_fixture_model("digits")
    native.turn_off(model.program)
    for x in generate.load_fixture_inputs("digits")[:17]:
        model.run({"data": x})
    assert model.program.runtime["native"] is False
    assert not model.compile()


def test_compile_says_no_for_a_program_not_for_the_loop():
    model, feeds = single_op_model("sum", [np.arange(6, dtype=np.int32).reshape(2, 3)], {"axis": (1,)})
    assert not model.compile()
    assert model.run(feeds).outputs[0].tolist() == [3, 12]


# -- failures ----------------------------------------------------------------------------

def test_a_value_outside_its_precision_stops_the_run():
    """As the executor's confirmation does: the loop's check is tested by narrowing one bound."""
    model = generate.load_fixture_model("digits")
    program = model.program
    layout, loop = native.prepare(program)
    code = layout.code.copy()
    code[4, 3] = 0   # the first broadcast_mul's outputs may only be 0
    program.runtime["native"] = (native.NativeProgram(code, layout.template, layout.places), loop)
    with pytest.raises(InternalError) as e:
        execute(program, {"data": generate.load_fixture_inputs("digits")[0]})
    assert e.value.code == "internal.precision"
    assert "instruction 4 (broadcast_mul)" in e.value.message


def test_confirmed_as_the_executor_confirms():
    """Every value is checked against its precision except where the op's block proves it cannot
    leave it (OpDef.in_range), the executor's own rule: there the row's bound is -1."""
    program = generate.load_fixture_model("digits").program
    layout = native.lay_out(program)
    for step, row in zip(program.steps, layout.code):
        proved = step.op.in_range is not None
        assert row[3] == (-1 if proved else precision_bound(step.out_types[0].precision)), step.op.name
    assert {s.op.name for s in program.steps if s.op.in_range is None} == {"broadcast_mul"}


def test_an_op_it_writes_through_loses_its_proof():
    """relu, clip, right shift, copies and max_pool2d go straight into the arena: a block that no
    longer proves their range would take the program out of the loop."""
    import dataclasses
    from isa.table import OP_BY_NAME
    model, _ = single_op_model("relu", [np.arange(-3, 3, dtype=np.int32)])
    assert native.lay_out(model.program) is not None
    unproved = dataclasses.replace(OP_BY_NAME["relu"], in_range=None)
    steps = tuple(dataclasses.replace(s, op=unproved) for s in model.program.steps)
    assert native.lay_out(dataclasses.replace(model.program, steps=steps)) is None


def test_the_arena_is_new_each_run():
    """A run leaves nothing behind for the next: the params' template is never written."""
    model = generate.load_fixture_model("digits")
    layout, loop = native.prepare(model.program)
    before = layout.template.copy()
    images = generate.load_fixture_inputs("digits")
    a, _ = native.run(layout, loop, prepare_inputs(model.program, {"data": images[0]}))
    native.run(layout, loop, prepare_inputs(model.program, {"data": images[1]}))
    assert np.array_equal(layout.template, before)
    again, _ = native.run(layout, loop, prepare_inputs(model.program, {"data": images[0]}))
    assert np.array_equal(a, again)
