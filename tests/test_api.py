"""The Python interface: load by content, the comforts (repr, names, hex hashes, save), run_batch
equal to one-by-one runs, keep=True, named trace entries, clipping, versions, and every bad
argument a CvmError with a code."""

from __future__ import annotations

import gzip
import importlib.metadata
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import cvmvm
from cvmvm import files
from isa.errors import CvmError
from isa.table import ISA_VERSION
from isa.types import INT32, TensorType
from serializer import native
from serializer.hashing import tensor_commitment, trace_root, tree_root
from serializer.cortex.layout import CANONICAL_VERSION
from serializer.limits import MAX_GRAPH_JSON_BYTES
from serializer.model import Input
from serializer.records import receipt as receipt_codec, stepproof, trace as trace_codec, transactions
from cvmvm.vm.api import single_op_model, value_type
from serializer import sha
from cvmvm.vm import batching
from cvmvm.vm.batching import batch_plan
from cvmvm.vm.trace import Tracer, make_trace, program_layout, trace_to_json
from cvmvm.tx import receipt
from tests.test_receipt import DIGITS, build, column_sum_model, digits_model, instr, mlp_model, pair_model

IMAGES = np.load(DIGITS / "test_inputs.npy", allow_pickle=False)


def code_of(call) -> str:
    with pytest.raises(CvmError) as e:
        call()
    return e.value.code


@pytest.fixture(scope="module")
def digits():
    return digits_model()


@pytest.fixture(scope="module")
def cortex_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cortex")
    (d / "graph.json").write_bytes(gzip.decompress((DIGITS / "graph.json.gz").read_bytes()))
    (d / "params.bin").write_bytes(gzip.decompress((DIGITS / "params.bin.gz").read_bytes()))
    return d


# -- loading by content ----------------------------------------------------------------------

def test_load_tells_native_from_cortex_by_content(digits, cortex_files, tmp_path):
    data = digits.canonical_bytes
    for source in (data, bytearray(data), memoryview(data)):
        assert cvmvm.load(source).model_hash == digits.model_hash
    (tmp_path / "no-suffix").write_bytes(data)
    assert cvmvm.load(tmp_path / "no-suffix").model_hash == digits.model_hash
    graph, params = cortex_files / "graph.json", cortex_files / "params.bin"
    for g, p in ((graph, params), (str(graph), str(params)), (graph.read_bytes(), params.read_bytes()),
                 (memoryview(graph.read_bytes()), bytearray(params.read_bytes()))):
        assert cvmvm.load(g, p).model_hash == digits.model_hash


def test_load_names_a_file_of_another_kind(digits, cortex_files, tmp_path):
    run = digits.run({"data": IMAGES[0]}, trace=True)
    r = receipt_codec.encode(receipt.make_receipt(digits, run))
    trace = trace_codec.trace_bytes(trace_to_json(digits.program, run.trace, digits.model_hash))
    np.save(tmp_path / "x.npy", IMAGES[0])
    for data in (r, trace, (tmp_path / "x.npy").read_bytes(), (cortex_files / "params.bin").read_bytes()):
        assert code_of(lambda: cvmvm.load(data)) == "malformed.kind"
    with pytest.raises(CvmError, match="this is a receipt, not a model"):
        cvmvm.load(r)
    assert code_of(lambda: cvmvm.load(cortex_files / "graph.json", r)) == "malformed.kind"
    assert code_of(lambda: cvmvm.load(b"\x00garbage")) == "malformed.native"
    assert code_of(lambda: cvmvm.load(b"{not json")) == "malformed.graph_json"
    assert code_of(lambda: cvmvm.load(cortex_files / "graph.json")) == "invalid.graph"  # no params file given


def test_a_graph_json_path_is_read_under_the_graph_limit(tmp_path, monkeypatch):
    # Defect: a 1 GiB graph JSON was read whole (12 s, 2 GB) before its 64 MiB limit refused it.
    path = tmp_path / "big.json"
    reads: list[int] = []
    real = files.read_bounded

    def counted(f, expected, *rest, **kwargs):
        reads.append(expected)
        return real(f, expected, *rest, **kwargs)

    monkeypatch.setattr(files, "read_bounded", counted)
    for size, code, read in ((MAX_GRAPH_JSON_BYTES, "malformed.graph_json", [MAX_GRAPH_JSON_BYTES]),
                             (MAX_GRAPH_JSON_BYTES + 1, "limit.bytes", [])):
        with open(path, "wb") as f:
            f.write(b' {"nodes": ')
            f.truncate(size)                   # the rest a hole: at the limit a graph of NULs, past it refused unread
        reads.clear()
        assert (code_of(lambda: cvmvm.load(path)), reads) == (code, read)
        assert code_of(lambda: cvmvm.load(str(path), b"")) == code
    with pytest.raises(CvmError, match=f"graph JSON {path}: {MAX_GRAPH_JSON_BYTES + 1} bytes exceed the limit"):
        cvmvm.load(path)


@pytest.mark.parametrize("call, code", [
    (lambda m: cvmvm.load(42), "usage.argument"),
    (lambda m: cvmvm.load(None), "usage.argument"),
    (lambda m: cvmvm.load(m.canonical_bytes, ops_limit=-1), "usage.argument"),
    (lambda m: cvmvm.load(m.canonical_bytes, ops_limit=True), "usage.argument"),
    (lambda m: cvmvm.load(m.canonical_bytes, ops_limit=1000), "limit.ops"),
    (lambda m: cvmvm.load(m.canonical_bytes, b"params"), "usage.conflict"),
    # bytes that are no model are malformed with params as without (they were called a native model)
    (lambda m: cvmvm.load(b"[]", b"params"), "malformed.native"),
    (lambda m: cvmvm.load(b"\xef\xbb\xbf{}", b"params"), "malformed.native"),
    (lambda m: cvmvm.load(b"\x00\x01garbage", b"params"), "malformed.native"),
    (lambda m: cvmvm.load_cortex(42), "usage.argument"),
    (lambda m: m.run(None), "usage.argument"),
    (lambda m: m.run([IMAGES[0]]), "usage.argument"),
    (lambda m: m.run({0: IMAGES[0]}), "usage.argument"),
    (lambda m: m.run("data"), "usage.argument"),
    (lambda m: m.run({"data": IMAGES[0].tolist()}), "input.dtype"),
    (lambda m: m.run({"data": IMAGES[0].astype(np.float32)}), "input.dtype"),
    (lambda m: m.run({}), "input.name"),
    (lambda m: m.run({"data": IMAGES[0], "extra": IMAGES[0]}), "input.name"),
    (lambda m: m.run({"data": IMAGES[0][0]}), "input.shape"),
    (lambda m: m.run_batch({"data": IMAGES[0]}), "usage.argument"),
    (lambda m: m.run_batch("data"), "usage.argument"),
    (lambda m: m.run_batch([{"data": IMAGES[0]}, None]), "usage.argument"),
    (lambda m: m.run_batch([{"data": IMAGES[0]}, {"data": IMAGES[0][0]}]), "input.shape"),
    (lambda m: m.save(3), "usage.argument"),
    (lambda m: cvmvm.run_op(None, []), "usage.argument"),
    (lambda m: cvmvm.run_op("relu", None), "usage.argument"),
    (lambda m: cvmvm.run_op("relu", np.zeros(3, np.int32)), "usage.argument"),
    (lambda m: cvmvm.run_op("relu", [np.zeros(3, np.int32)], [1]), "usage.argument"),
    (lambda m: cvmvm.run_op("relu", [np.zeros(3, np.int32)], precisions=8), "usage.argument"),
    (lambda m: cvmvm.run_op("relu", [[1, 2]]), "input.dtype"),
    (lambda m: cvmvm.run_op("relu", [np.zeros(3, np.int32)], precisions=[8, 8]), "input.precision"),
    (lambda m: cvmvm.run_op("relu", [np.zeros(3, np.int32)], precisions=[0]), "invalid.precision"),
    (lambda m: value_type(np.zeros(3, np.int32), 0), "input.precision"),
    (lambda m: value_type(np.zeros(3, np.int32), 33), "input.precision"),
    (lambda m: value_type(np.array([200], np.int32), 8), "input.value"),
])
def test_every_bad_argument_is_a_cvm_error_with_a_code(digits, call, code):
    assert code_of(lambda: call(digits)) == code


def test_a_bad_batch_item_is_named(digits):
    with pytest.raises(CvmError, match=r"feeds\[1\]"):
        digits.run_batch([{"data": IMAGES[0]}, {"data": IMAGES[0][0]}])


# -- the comforts ------------------------------------------------------------------------------

def test_repr_names_hashes_and_save(digits, tmp_path):
    text = repr(digits)
    assert text.startswith("<cvmvm.Model ") and digits.model_hash_hex[:16] in text
    assert "13 instructions" in text and "data: int32[1, 1, 8, 8] p8" in text and "dense_0" in text
    assert digits.output_names == ("dense_0",)
    assert digits.model_hash_hex == digits.model_hash.hex()
    result = digits.run({"data": IMAGES[0]})
    assert result.output_hash_hex == result.output_hash.hex()
    digits.save(tmp_path / "d.cvm")
    assert (tmp_path / "d.cvm").read_bytes() == digits.canonical_bytes
    assert cvmvm.load(tmp_path / "d.cvm").model_hash == digits.model_hash


def test_output_names_of_a_multi_output_op():
    model, _ = single_op_model("max_pool", [np.arange(16, dtype=np.int32).reshape(1, 1, 4, 4)],
                               {"kernel_shape": (2, 2), "strides": (2, 2), "dilations": (1, 1), "pads": (0, 0, 0, 0),
                                "auto_pad": "NOTSET", "ceil_mode": 0, "storage_order": 0, "index_axis": 0,
                                "index_dtype": "int64"})
    name = model.program.steps[0].name
    assert model.output_names == (f"{name}:0", f"{name}:1")


def test_versions_come_from_the_package_and_the_codecs():
    assert cvmvm.__version__ == importlib.metadata.version("cvmvm")
    v = cvmvm.versions()
    assert v == {"cvmvm": cvmvm.__version__, "isa": ISA_VERSION, "native": native.FORMAT_VERSION,
                 "receipt": receipt_codec.RECEIPT_VERSION, "transactions": transactions.TXS_VERSION,
                 "trace": trace_codec.TRACE_VERSION, "step_proof": stepproof.PROOF_VERSION,
                 "cortex_graph": CANONICAL_VERSION, "cortex_graph_read": v["cortex_graph_read"]}
    assert trace_codec.TRACE_FORMAT.endswith(f"/{trace_codec.TRACE_VERSION}")


# -- intermediate values ----------------------------------------------------------------------

def test_keep_gives_every_tensor_and_the_trace_names_them(digits):
    result = digits.run({"data": IMAGES[3]}, trace=True, keep=True)
    program = digits.program
    assert len(result.tensors) == len(program.types) == len(result.trace.entries)
    for t, (value, entry) in enumerate(zip(result.tensors, result.trace.entries)):
        ty = program.types[t]
        assert value.shape == ty.shape and entry.tensor == t
        assert (entry.dtype, entry.shape, entry.precision) == (ty.dtype, ty.shape, ty.precision)
        assert entry.commitment_hex == entry.commitment.hex()
    assert all(tensor_commitment(v, program.types[e.tensor]) == e.commitment
               for v, e in zip(result.tensors, result.trace.entries))
    assert [e.op for e in result.trace.entries[:9]] == [None] * 9
    assert [e.op for e in result.trace.entries[9:]] == [s.op.name for s in program.steps]
    assert result.trace.entries[0].name == "data" and result.trace.entries[1].name == "conv1_weight"
    assert "conv2d" in repr(result.trace.entries[9])
    assert result.trace.entries[9].commitment_hex in repr(result.trace.entries[9])
    assert result.tensors[program.model.outputs[0]] is result.outputs[0]
    assert digits.run({"data": IMAGES[3]}).tensors is None


# -- run_batch == one by one -------------------------------------------------------------------

def same(a: cvmvm.Result, b: cvmvm.Result) -> bool:
    return (len(a.outputs) == len(b.outputs) and all(np.array_equal(x, y) and x.dtype == y.dtype
                                                     for x, y in zip(a.outputs, b.outputs))
            and (a.ops, a.output_commitments, a.output_hash, a.peak_bytes, a.trace, a.clipping)
            == (b.ops, b.output_commitments, b.output_hash, b.peak_bytes, b.trace, b.clipping))


def test_a_trace_commits_to_the_commitments_it_is_given(digits):
    """A trace's leaves are the commitments it is given: a trace claiming another commitment for
    a param (a disputed trace file) has that leaf, and its entries and tree (made when asked for)
    say the same."""
    program = digits.program
    honest = digits.run({"data": IMAGES[3]}, trace=True).trace
    for k in (1, 8):   # the first and the last param
        claimed = list(honest.commitments)
        claimed[k] = bytes(32)
        trace = make_trace(program, claimed)
        assert trace.commitments == tuple(claimed) and trace.levels[0] == claimed
        assert trace.root == trace_root(program_layout(program).root, honest.inputs, len(claimed), tree_root(claimed))
        assert trace.entries[k].commitment == bytes(32) and trace.levels[-1][0] == tree_root(claimed)
        assert trace.path(k ^ 1)[0] == bytes(32)   # the claimed commitment is its sibling's first path node
    assert make_trace(program, list(honest.commitments)) == honest
    given = make_trace(program, list(honest.commitments), honest.root)   # a batched run's, root computed
    assert given == honest and given.levels == honest.levels
    with pytest.raises(CvmError) as e:
        make_trace(program, [*honest.commitments[:-1], None])
    assert e.value.code == "internal.trace"


def test_a_traced_run_cut_short_commits_only_what_it_produced(digits):
    """A traced run's small tensors are committed together at its end (BulkCommitter): one that
    stopped part way leaves the rest uncommitted and its trace is refused, and the buffers it held
    serve the next run, whose trace is the honest one."""
    program = digits.program
    honest = digits.run({"data": IMAGES[5]}, trace=True).trace
    kept = digits.run({"data": IMAGES[5]}, keep=True).tensors
    layout = program_layout(program)
    assert len(layout.small) == len(program.types) - len(program.model.params)   # digits: every one of them
    tracer = Tracer(program)
    produced = 9 + 4   # the variables, then the first four instructions' outputs
    for t in range(produced):
        tracer(t, kept[t])
    assert [c is not None for c in tracer.commitments] == [t < produced for t in range(len(kept))]
    assert tracer.commitments[:produced] == list(honest.commitments[:produced])
    with pytest.raises(CvmError) as e:
        tracer.trace()
    assert e.value.code == "internal.trace" and f"{len(kept) - produced} tensors" in e.value.message
    assert digits.run({"data": IMAGES[5]}, trace=True).trace == honest
    spare = len(layout._spare)
    failed = []
    for _ in range(3):   # a failed run's buffers go back at once, though its error keeps the tracer
        with pytest.raises(CvmError) as e:
            digits.run({"data": IMAGES[5][..., :4]}, trace=True)
        failed.append(e.value)
        assert len(layout._spare) == spare


def test_traced_runs_in_threads_get_their_own_buffers(digits):
    """Concurrent traced runs of one program never share the buffers their small bodies go to."""
    want = [digits.run({"data": IMAGES[k]}, trace=True).trace.root for k in range(8)]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            got = list(pool.map(lambda k: digits.run({"data": IMAGES[k % 8]}, trace=True).trace.root, range(64)))
            assert got == [want[k % 8] for k in range(64)]


def hashing_by(way: str, monkeypatch) -> None:
    """Stacked runs commit their items through hashlib, or through the compiled hasher
    (cvmvm.vm.native, where numba is installed)."""
    if way == "compiled":
        pytest.importorskip("numba")
        assert sha.hasher() is not None
    else:
        monkeypatch.setattr(sha, "_hashers", [])
        monkeypatch.setattr(batching, "HASH_WARM_ITEMS", 10**12)


@pytest.mark.parametrize("hashing", ["hashlib", "compiled"])
@pytest.mark.parametrize("trace", [False, True])
@pytest.mark.parametrize("make, feeds, stacked", [
    (digits_model, [{"data": IMAGES[k] * (1 + k % 3)} for k in range(7)], True),  # some clipped
    (mlp_model, [{"x": np.array([[k, -k, 2 * k, 300]], np.int32)} for k in range(5)], True),
    (pair_model, [{"a": np.full((2, 3), k, np.int32), "b": np.full((2, 3), -k, np.int64)} for k in range(4)], True),
    (column_sum_model, [{"x": np.full((2, 3), k, np.int32)} for k in range(3)], False),
])
def test_run_batch_equals_one_by_one(make, feeds, stacked, trace, hashing, monkeypatch):
    hashing_by(hashing, monkeypatch)
    model = make()
    assert (batch_plan(model.program) is not None) == stacked
    batch = model.run_batch(feeds, trace=trace)
    assert len(batch) == len(feeds)
    for feed, got in zip(feeds, batch):
        assert same(got, model.run(feed, trace=trace))
    assert model.run_batch([]) == []


def test_run_batch_reports_each_items_clipping():
    model = mlp_model()
    batch = model.run_batch([{"x": np.array([[1, 2, 3, 4]], np.int32)}, {"x": np.array([[500, -600, 3, 4]], np.int32)}])
    assert batch[0].clipping == () and batch[1].clipped == 2


# -- clipping -----------------------------------------------------------------------------------

def test_clipping_is_counted_with_its_range(digits):
    x = IMAGES[0].astype(np.int64) * 3 - 100
    result = digits.run({"data": x})
    outside = int(np.count_nonzero(np.abs(x) > 127))
    assert outside > 0 and result.clipped == outside
    (c,) = result.clipping
    assert (c.input, c.count, c.low, c.high, c.precision, c.bound) == ("data", outside, int(x.min()), int(x.max()), 8, 127)
    assert str(c).startswith("input data: ")
    assert np.array_equal(result.outputs[0], digits.run({"data": np.clip(x, -127, 127)}).outputs[0])
    assert digits.run({"data": IMAGES[0]}).clipping == ()


def test_uint64_inputs_clip_with_their_true_range():
    model = build([Input("x", TensorType((1, 3), 8, INT32))], [], [instr("relu", (0,), 1)], [1])
    big = np.array([[2 ** 64 - 1, 5, 2 ** 63]], dtype=np.uint64)
    (c,) = model.run({"x": big}).clipping
    assert (c.count, c.low, c.high) == (2, 5, 2 ** 64 - 1)


@pytest.mark.parametrize("make", [digits_model, mlp_model, pair_model, column_sum_model])
def test_the_static_peak_is_the_measured_one(make):
    from cvmvm.vm.execute import peak_bytes
    model = make()
    feeds = {i.name: np.zeros(i.type.shape, np.int32) for i in model.program.model.inputs}
    assert peak_bytes(model.program) == model.run(feeds).peak_bytes


def test_the_static_peak_of_the_perf_models():
    from cvmvm.vm.execute import peak_bytes
    for name in ("perf", "perf-large"):
        d = DIGITS.parent / name
        model = cvmvm.load(gzip.decompress((d / "graph.json.gz").read_bytes()),
                           gzip.decompress((d / "params.bin.gz").read_bytes()))
        x = {"data": np.zeros(model.inputs["data"].shape, np.int32)}
        assert peak_bytes(model.program) == model.run(x).peak_bytes


# -- Python arguments of the wrong kind are usage errors, never a bare exception -------------------

@pytest.mark.parametrize("flags", [{"trace": np.array([1, 2])}, {"keep": np.array([1, 2])}, {"trace": "yes"},
                                   {"trace": 1}, {"keep": None}])
def test_run_flags_are_bools(digits, flags):
    with pytest.raises(CvmError) as e:
        digits.run({"data": IMAGES[0]}, **flags)
    assert e.value.code == "usage.argument"


def test_run_batch_flags_are_bools(digits):
    with pytest.raises(CvmError) as e:
        digits.run_batch([{"data": IMAGES[0]}], trace=np.array([1, 2]))
    assert e.value.code == "usage.argument"


@pytest.mark.parametrize("limits", [("1", None, None), (None, "x", None), (None, None, 1.5), (-1, None, None),
                                    (None, 0, None), (True, None, None), (None, None, np.int64(5))])
def test_limits_are_positive_integers_or_none(limits):
    with pytest.raises(CvmError) as e:
        cvmvm.Limits(*limits)
    assert e.value.code == "usage.argument"


@pytest.mark.parametrize("precision", ["8", 8.0, True, np.int64(8), np.array([8, 8])])
def test_run_op_precisions_are_integers(precision):
    with pytest.raises(CvmError) as e:
        cvmvm.run_op("relu", [np.array([1, -1], dtype=np.int32)], precisions=[precision])
    assert e.value.code == "usage.argument"


def test_run_op_bounds_an_input_before_it_reads_it():
    # Defect: min/max ran over 2^40 elements of a broadcast view (minutes) before limit.size.
    huge = np.broadcast_to(np.int32(1), (1 << 20, 1 << 20))
    with pytest.raises(CvmError) as e:
        cvmvm.run_op("relu", [huge])
    assert e.value.code == "limit.size"


@pytest.mark.parametrize("attrs", [{"precision": 10 ** 5000, "shift_bit": 3}, {"precision": [10 ** 5000], "shift_bit": 3},
                                   {1: 2, "precision": 8, "shift_bit": 3}])
def test_an_attribute_too_long_to_print_is_still_named(attrs):
    # Defect: the message's repr raised ValueError past Python's 4,300-digit limit.
    with pytest.raises(CvmError) as e:
        cvmvm.run_op("cvm_right_shift", [np.array([1, 2], dtype=np.int32)], attrs)
    assert e.value.code == "invalid.attr" and len(e.value.message) < 200


def test_a_graph_dict_is_read_as_strictly_as_its_text():
    deep: list = []
    cur = deep
    for _ in range(100_000):
        cur.append([])
        cur = cur[0]
    for graph in ({"nodes": deep}, {"heads": [[10 ** 5000, 0, 0]]}, {"nodes": {1, 2}}, {"x": float("nan")}):
        with pytest.raises(CvmError) as e:
            cvmvm.load_cortex(graph)
        assert e.value.code == "malformed.graph_json"


@pytest.mark.parametrize("call", [lambda: cvmvm.load("a\0b"), lambda: cvmvm.load_cortex("a\0b.json"),
                                  lambda: cvmvm.load_cortex("{}", "p\0")])
def test_a_path_with_a_nul_byte_is_a_usage_error(call):
    with pytest.raises(CvmError) as e:
        call()
    assert e.value.code == "usage.argument"


def test_clipping_reports_the_uint64_values_given(digits):
    given = np.full(IMAGES[0].shape, 2 ** 63, dtype=np.uint64)
    given.flat[0] = 2 ** 64 - 1
    (clipping,) = digits.run({"data": given}).clipping
    assert (clipping.low, clipping.high) == (2 ** 63, 2 ** 64 - 1)


def test_a_released_memoryview_is_a_usage_error():
    # load read a released view through bytes(), whose ValueError reached the caller.
    view = memoryview(b"\x81")
    view.release()
    with pytest.raises(CvmError) as e:
        cvmvm.load(view)
    assert e.value.code == "usage.argument"


def test_an_output_that_is_a_param_cannot_change_the_model():
    """A param built from a writeable array (serializer.model.Param says read-only) was returned as
    the output itself: writing that output changed every later run, under the same commitment."""
    from serializer.model import Model as ModelIR, Param
    from cvmvm.vm.api import Model
    from cvmvm.vm.verify import verify
    from tests.test_receipt import instr
    w = np.array([[1, -2, 3]], np.int32)
    model = Model(verify(ModelIR((Input("x", TensorType((1, 3), 8)),), (Param("w", TensorType((1, 3), 8), w),),
                                 (instr("relu", (0,), 2),), (2, 1))))
    x = {"x": np.array([[1, 2, 3]], np.int32)}
    for result in (model.run(x), model.run(x, trace=True), model.run_batch([x, x])[1]):
        with pytest.raises(ValueError):
            result.outputs[1][0, 0] = 99
    assert model.run(x).outputs[1].tolist() == [[1, -2, 3]] and w.flags.writeable


def test_run_batch_gives_each_item_its_own_constant_output():
    """An output computed from params alone is one array of the stacked run: every item's Result
    held that same array, so writing one item's output changed the others'."""
    from tests.test_receipt import build, instr, param
    model = build([Input("x", TensorType((1, 3), 8))], [param("w", [[1, -2, 3]])],
                  [instr("relu", (0,), 2), instr("negative", (1,), 3)], (2, 3))
    x = {"x": np.array([[1, 2, 3]], np.int32)}
    results = model.run_batch([x, x, x])
    outs = [r.outputs[1] for r in results]
    assert len({id(o) for o in outs}) == 3 and all(o.flags.writeable for o in outs)
    outs[0][0, 0] = 99
    assert [o.tolist() for o in outs[1:]] == [[[-1, 2, -3]]] * 2
    assert [r.outputs[1].tolist() for r in model.run_batch([x, x])] == [[[-1, 2, -3]]] * 2


HUGE = memoryview(np.broadcast_to(np.uint8(ord("{")), (1 << 40,)))   # claims 1 TiB, holds one byte


@pytest.mark.parametrize("call", [lambda: cvmvm.load(HUGE), lambda: cvmvm.load_cortex(HUGE),
                                  lambda: cvmvm.load_cortex(DIGITS / "graph_all_heads.json", HUGE)],
                         ids=["load", "graph", "params"])
def test_bytes_given_are_bounded_before_they_are_copied(call):
    # bytes(view) was called first: MemoryError, not a CvmError.  len() of a view counts rows, not bytes.
    with pytest.raises(CvmError) as e:
        call()
    assert e.value.code == "limit.bytes"


def test_a_graph_view_of_wide_items_is_bounded_by_its_bytes():
    from serializer.cortex import read
    view = memoryview(np.zeros(MAX_GRAPH_JSON_BYTES // 8 + 1, np.float64))   # len() is 1/8 of its bytes
    with pytest.raises(CvmError) as e:
        read.read_cortex(view)
    assert e.value.code == "limit.bytes"


def test_a_model_given_as_a_strided_view_is_its_bytes(digits):
    spread = np.zeros(2 * len(digits.canonical_bytes), np.uint8)
    spread[::2] = np.frombuffer(digits.canonical_bytes, np.uint8)
    assert cvmvm.load(memoryview(spread[::2])).model_hash == digits.model_hash


def test_a_result_does_not_alias_an_input_of_another_type():
    # A float32 input was kept as the caller's array: writing it changed the result.
    given = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    model, _ = single_op_model("max_pool", [given],
                               {"kernel_shape": (1, 1), "strides": (1, 1), "dilations": (1, 1), "pads": (0, 0, 0, 0),
                                "auto_pad": "NOTSET", "ceil_mode": 0, "storage_order": 0, "index_axis": 0,
                                "index_dtype": "int64"})
    result = model.run({"in0": given}, keep=True)
    given[...] = 7
    assert result.tensors[0].ravel().tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("tensor", [-1, 10 ** 6, True, 1.0, "0", None])
def test_a_trace_path_outside_the_trace_is_a_usage_error(digits, tensor):
    trace = digits.run({"data": IMAGES[0]}, trace=True).trace
    with pytest.raises(CvmError) as e:
        trace.path(tensor)
    assert e.value.code == "usage.argument"


def test_a_trace_path_takes_numpy_integers(digits):
    trace = digits.run({"data": IMAGES[0]}, trace=True).trace
    assert trace.path(np.int64(3)) == trace.path(3)


def test_bytes_given_as_bytes_are_not_copied_again(digits):
    """Immutable already: a 4 GiB params file given as bytes is not held twice."""
    from cvmvm.vm.api import model_limit
    from serializer.cortex import read
    data = digits.canonical_bytes
    assert files.given_bytes(data, "model", model_limit)[0] is data
    assert read._source_bytes(data, len(data), "params") is data
    assert files.given_bytes(bytearray(data), "model", model_limit)[0] == data
