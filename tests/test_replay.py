"""Replay: batching decided statically and identical to one-by-one runs, every mismatch and
error kind, malleable inputs refused, worker processes, Ray (one machine), and `tx demo` end
to end.  The transaction file's format is tests/test_txs_file.py; results files, resume and
the command line are tests/test_replay_cli.py."""

from __future__ import annotations

import dataclasses
import json
import signal
import types

import functools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from serializer import strict
from serializer.records import transactions
from serializer.records.transactions import Transaction
from cvmvm.vm import batching
from cvmvm.tx import receipt, replay, results, schedule
from cvmvm.tx.store import Store
from cvmvm.vm.verify import Limits
from isa.errors import CvmError
from serializer.hashing import trace_root, tree_root
from cvmvm.cli.common import EXIT_CODES
from tests.test_receipt import (KEY, REPO, build, cli_json, column_sum_model, digits_model, instr, mlp_model,
                                pair_model, param, reshape_model)
from isa.types import TensorType
from serializer.model import Input

RNG_SEED = 20240611


def random_inputs(model, count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Values beyond each input's precision too, so clipping is exercised."""
    rng = np.random.default_rng(seed)
    return [{name: rng.integers(-300, 300, size=t.shape, dtype=np.int32) for name, t in model.inputs.items()}
            for _ in range(count)]


def clipped_inputs(model, count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """random_inputs within each input's precision: what a transaction may carry."""
    bounds = {name: (1 << (t.precision - 1)) - 1 for name, t in model.inputs.items()}
    return [{n: np.clip(v, -bounds[n], bounds[n]).astype(np.int32) for n, v in f.items()}
            for f in random_inputs(model, count, seed)]


def honest(model, inputs: dict, key=KEY) -> Transaction:
    r = receipt.make_receipt(model, model.run(inputs, trace=True))
    return Transaction(model.model_hash, tuple(inputs.items()), receipt.sign(r, key) if key else r)


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "store")


# -- the static batching decision --------------------------------------------------------------

def test_batch_plans():
    assert batching.batch_plan(mlp_model().program) == (True, False, False, False, True, True, True, True)
    assert batching.batch_plan(pair_model().program) == (True, True, True, True)
    assert batching.batch_plan(column_sum_model().program) is None
    assert batching.batch_plan(reshape_model().program) == (True, False, True, True)


def test_constant_operand_reaching_axis_0_is_not_batched():
    # A (2, 3) constant added to a (2, 3) input: stacking the input would misalign rows.
    m = build([Input("x", TensorType((2, 3), 8))], [param("k", [[1, 2, 3], [4, 5, 6]])],
              [instr("broadcast_add", (0, 1), 2)], [2])
    assert batching.batch_plan(m.program) is None
    # Constant-only steps are computed once and shared.
    m = build([Input("x", TensorType((1, 3), 8))], [param("k", [[1, 2, 3]])],
              [instr("relu", (1,), 2), instr("broadcast_add", (0, 2), 3)], [3, 2])
    assert batching.batch_plan(m.program) == (True, False, False, True)


@pytest.mark.parametrize("op, attrs, ok", [
    ("sum", {"axis": (1,)}, True), ("sum", {"axis": (0,)}, False), ("sum", {}, False),
    ("sum", {"axis": (0,), "exclude": True}, True), ("max", {"axis": (-1,), "keepdims": True}, True),
    ("transpose", {"axes": (0, 2, 1)}, True), ("transpose", {}, False),
    ("repeat", {"repeats": 2, "axis": 1}, True), ("repeat", {"repeats": 2, "axis": 0}, False),
    ("expand_dims", {"axis": 1}, True), ("expand_dims", {"axis": 0}, False), ("expand_dims", {"axis": -4}, False),
    ("tile", {"reps": (2, 2)}, True), ("tile", {"reps": (2, 1, 1)}, False), ("tile", {"reps": (1, 1, 2)}, True),
    ("squeeze", {"axis": (1,)}, True), ("squeeze", {"axis": (0,)}, False), ("squeeze", {}, False),
    ("flatten", {}, True), ("strided_slice", {"begin": (0,), "end": (2,)}, False),
])
def test_row_rules(op, attrs, ok):
    shape = (1, 1, 4) if op == "squeeze" else (2, 3, 4)
    try:
        m = build([Input("x", TensorType(shape, 8))], [], [instr(op, (0,), 1, **attrs)], [1])
    except CvmError:
        assert not ok
        return
    assert (batching.batch_plan(m.program) is not None) == ok


@pytest.mark.parametrize("make", [mlp_model, pair_model, reshape_model])
def test_stacked_program_types_are_the_scaled_single_types(make):
    program = make().program
    plan = batching.batch_plan(program)
    big = batching.stacked_program(program, plan, 5)
    assert big is not None
    for t, b, s in zip(program.types, big.types, plan):
        assert b.shape == ((t.shape[0] * 5,) + t.shape[1:] if s else t.shape) and b.precision == t.precision


# -- identical to one-by-one runs ----------------------------------------------------------------

@pytest.mark.parametrize("make", [mlp_model, pair_model, reshape_model, column_sum_model])
@pytest.mark.parametrize("batch", [1, 3, 64])
def test_batched_results_equal_one_by_one(make, batch):
    model = make()
    feeds = random_inputs(model, 11, RNG_SEED)
    names = list(model.inputs)
    got = replay.Replayer(lambda h: model, batch).execute(model.model_hash, [[f[n] for n in names] for f in feeds])
    for f, r in zip(feeds, got):
        result = model.run(f, trace=True)
        assert r == receipt.make_receipt(model, result)
        leaves = result.trace.commitments   # the commitments are the trace leaves
        assert r.trace_root == result.trace.root == trace_root(model.program_root, result.trace.inputs, len(leaves),
                                                               tree_root(leaves))


def test_digits_batched_equals_one_by_one():
    model = digits_model()
    assert batching.batch_plan(model.program) is not None
    images = np.load(REPO / "fixtures" / "models" / "digits" / "test_inputs.npy")[:24]
    got = replay.Replayer(lambda h: model, 10).execute(model.model_hash, [[x] for x in images])
    for x, r in zip(images, got):
        assert r == receipt.make_receipt(model, model.run({"data": x}, trace=True))


# -- outcomes --------------------------------------------------------------------------------------

def test_every_outcome_kind(store):
    model = mlp_model()
    store.add(model)
    feeds = clipped_inputs(model, 12, RNG_SEED + 1)
    txs = [honest(model, f) for f in feeds]

    def tamper(i, **fields):
        r = dataclasses.replace(txs[i].receipt, **fields)
        txs[i] = dataclasses.replace(txs[i], receipt=receipt.sign(dataclasses.replace(r, signer=None), KEY))

    flip = lambda b: bytes([b[0] ^ 1]) + b[1:]  # noqa: E731
    tamper(1, output_hash=flip(txs[1].receipt.output_hash))
    tamper(2, trace_root=flip(txs[2].receipt.trace_root))
    tamper(3, ops=txs[3].receipt.ops + 1)
    tamper(4, model_hash=flip(txs[4].receipt.model_hash))
    tamper(5, inputs=(("x", flip(txs[5].receipt.inputs[0][1])),))
    signed = txs[6].receipt
    txs[6] = dataclasses.replace(txs[6], receipt=dataclasses.replace(
        signed, signer=dataclasses.replace(signed.signer, signature=flip(signed.signer.signature))))
    txs[7] = dataclasses.replace(txs[7], model_hash=b"\x09" * 32)
    txs[8] = dataclasses.replace(txs[8], inputs=(("x", np.zeros((1, 5), np.int32)),))
    txs[9] = dataclasses.replace(txs[9], inputs=(("x", np.zeros((1, 4), np.float32)),))
    txs[10] = dataclasses.replace(txs[10], inputs=(("y", np.zeros((1, 4), np.int32)),))
    txs[11] = dataclasses.replace(txs[11], inputs=())
    outcomes = schedule.replay(txs, store)
    assert [(o.status, o.fields, o.error) for o in outcomes] == [
        ("ok", (), None),
        ("mismatch", ("output_hash",), None), ("mismatch", ("trace_root",), None), ("mismatch", ("ops",), None),
        ("mismatch", ("model_hash",), None), ("mismatch", ("inputs",), None), ("mismatch", ("signature",), None),
        ("error", (), "input.unknown_model"), ("error", (), "input.shape"), ("error", (), "input.dtype"),
        ("error", (), "input.name"), ("error", (), "input.name"),
    ]
    report = results.Report()
    for o in outcomes:
        report.add(o)
    s = report.summary()
    assert (s["ok"], s["mismatch"], s["error"]) == (1, 6, 5)
    # Every kind of line is read back as written (a mismatch of the signature has no re-execution's
    # keys, an error of the model a model key): the checks of a resumed line refuse none of them.
    assert [results.outcome_from_line(results.outcome_line(o).encode() + b"\n") for o in outcomes] == outcomes
    assert s["model_errors"] == [{"model": "09" * 32, "error": "input.unknown_model", "transactions": 1,
                                  "message": outcomes[7].message}]
    signer = KEY.public_key().public_bytes_raw()
    assert schedule.replay(txs[:1], store, signer=signer)[0].status == "ok"
    assert schedule.replay(txs[:1], store, signer=b"\x03" * 32)[0].fields == ("signer",)


def changed(data, body: bytes) -> bytes:
    """``body`` with a byte set, a cut, bytes inserted or one deleted, or unchanged (hypothesis)."""
    body = bytearray(body)
    at = data.draw(st.integers(0, len(body) - 1))
    change = data.draw(st.sampled_from(["set", "cut", "insert", "delete", "none"]))
    if change == "set":
        body[at] = data.draw(st.integers(0, 255))
    elif change == "cut":
        del body[at:]
    elif change == "insert":
        body[at:at] = data.draw(st.binary(min_size=1, max_size=3))
    elif change == "delete":
        del body[at]
    return bytes(body)


@pytest.fixture(scope="module")
def chunks(tmp_path_factory):
    """The pair model in a store, and records of it, signed and not, honest and tampered."""
    model = pair_model()
    store = Store(tmp_path_factory.mktemp("chunks") / "store")
    store.add(model)
    feeds = clipped_inputs(model, 6, RNG_SEED + 9)
    txs = [honest(model, f) for f in feeds[:3]] + [honest(model, f, None) for f in feeds[3:]]
    txs.append(dataclasses.replace(txs[3], receipt=dataclasses.replace(txs[3].receipt, ops=1)))
    txs.append(dataclasses.replace(txs[4], inputs=txs[4].inputs[::-1]))
    wide = {"a": np.full((1, 4), 1000, np.int32), "b": feeds[0]["b"]}
    txs.append(dataclasses.replace(txs[5], inputs=tuple(wide.items())))
    return model, store, [transactions.encode_tx(t) for t in txs]


def replayed_alone(model, body: bytes, signer: bytes | None) -> tuple:
    """What replay must make of one record, the plain way: a full decode, the signature, the
    inputs as the model takes them, one traced run, every receipt field compared."""
    try:
        _, given, claimed = transactions.decode_tx(body)
    except CvmError as e:
        return "error", (), e.code
    if claimed.signer is not None or signer is not None:
        bad = receipt.unauthenticated(claimed, signer)
        if bad:
            return "mismatch", bad, None
    try:
        replay._check_inputs([(i.name, i.type.dtype, i.type.shape) for i in model.program.model.inputs], given)
        feeds = {i.name: i.array() for i in given}
        if any(np.abs(feeds[i.name].astype(np.int64)).max() >= 1 << (i.type.precision - 1) for i in model.program.model.inputs):
            return "error", (), "input.value"
        actual = receipt.make_receipt(model, model.run(feeds, trace=True))
    except CvmError as e:
        return "error", (), e.code
    bad = receipt.recomputed_mismatches(claimed, actual)
    return ("mismatch" if bad else "ok"), bad, None


def _bin_spans(body: bytes) -> list[tuple[int, int]]:
    """Where each bin's payload lies in a record."""
    spans: list[tuple[int, int]] = []
    strict.scan(body, transactions._READER, spans)
    return spans


def _in_a_bin(data, body: bytes) -> bytes:
    """``body`` with one byte of one of its bins' payloads changed (a commitment, a root, input
    data, the signature...): still alike its template."""
    a, b = data.draw(st.sampled_from(_bin_spans(body)))
    at = data.draw(st.integers(a, b - 1))
    return body[:at] + bytes([body[at] ^ data.draw(st.integers(1, 255))]) + body[at + 1:]


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_a_chunk_replays_as_its_records_alone(chunks, data):
    """A chunk of one model's records, alike or not, some bytes changed anywhere (a bin's payload:
    a mismatch or an input beyond its precision; the rest: an error or another template), with a
    --signer and without: each outcome is the one that record gets replayed alone, and what
    a plain replay of it (replayed_alone) makes of it."""
    model, store, bodies = chunks
    chunk = data.draw(st.lists(st.sampled_from(bodies), min_size=1, max_size=10))
    chunk = [data.draw(st.sampled_from([b, changed(data, b), _in_a_bin(data, b)])) for b in chunk]
    items = [(i, 100 * i, b) for i, b in enumerate(chunk)]
    signer = data.draw(st.sampled_from([None, KEY.public_key().public_bytes_raw()]))
    fetch = functools.partial(store.get, limits=Limits())
    together = replay.Replayer(fetch, 4, signer).run(model.model_hash, items)
    alone = replay.Replayer(fetch, 4, signer)
    assert together == [alone.run(model.model_hash, [item])[0] for item in items]
    assert [(o.status, o.fields, o.error) for o in together] == [replayed_alone(model, b, signer) for b in chunk]


@pytest.mark.parametrize("signer", [None, KEY.public_key().public_bytes_raw()])
def test_every_bin_changed_in_one_chunk(chunks, signer):
    """Each record, then each with one byte of one bin's payload changed, as one chunk: records
    alike, each outcome what a plain replay of it makes of it (a claim's every field compared)."""
    model, store, bodies = chunks
    chunk = list(bodies)
    for body in bodies:
        spans = _bin_spans(body)
        chunk += [body[:a] + bytes([body[a] ^ 0x80]) + body[a + 1:] for a, _ in spans]
        chunk += [body[:b - 1] + bytes([body[b - 1] ^ 1]) + body[b:] for _, b in spans]
    items = [(i, 100 * i, b) for i, b in enumerate(chunk)]
    got = replay.Replayer(functools.partial(store.get, limits=Limits()), 512, signer).run(model.model_hash, items)
    want = [replayed_alone(model, b, signer) for b in chunk]
    assert [(o.status, o.fields, o.error) for o in got] == want
    if signer is None:   # else every changed claim is a mismatch of its signature or signer first
        assert {("program_root",), ("output_hash",), ("trace_root",), ("inputs",), ("model_hash",), ("ops",),
                "input.value"} <= {w[1] or w[2] for w in want}


def test_each_signature_is_verified_once(store, monkeypatch):
    """Signature verification is most of a signed replay's cost: once before execution, never again."""
    model = mlp_model()
    store.add(model)
    txs = [honest(model, f) for f in clipped_inputs(model, 5, RNG_SEED + 3)]
    calls = []
    verify = receipt.signature_valid
    monkeypatch.setattr(receipt, "signature_valid", lambda r: calls.append(r) or verify(r))
    assert [o.status for o in schedule.replay(txs, store)] == ["ok"] * 5
    assert len(calls) == 5


def test_store_hash_mismatch_is_an_error_for_that_model_only(store):
    a, b = mlp_model(), pair_model()
    store.add(a)
    store.add(b)
    data = bytearray(store.path(a.model_hash).read_bytes())
    data[-1] ^= 1
    store.path(a.model_hash).write_bytes(bytes(data))
    txs = [honest(a, f) for f in clipped_inputs(a, 2, 1)] + [honest(b, f) for f in clipped_inputs(b, 2, 2)]
    outcomes = schedule.replay(txs, store)
    assert [(o.status, o.error) for o in outcomes] == [("error", "malformed.store_hash")] * 2 + [("ok", None)] * 2


def test_mixed_models_workers_and_batch_sizes_give_one_answer(store):
    models = [mlp_model(), pair_model(), column_sum_model(), reshape_model()]
    for m in models:
        store.add(m)
    txs = [honest(models[i % 4], f) for i, f in enumerate(
        sum((clipped_inputs(m, 1, 100 + i) for i, m in enumerate(models * 10)), []))]
    txs[5] = dataclasses.replace(txs[5], receipt=dataclasses.replace(txs[5].receipt, signer=None, ops=1))
    seen = []
    reference = schedule.replay(txs, store, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (40, 40) and [o.index for o in reference] == list(range(40))
    assert reference[5].fields == ("ops",) and sum(o.status == "ok" for o in reference) == 39
    for kw in ({"batch_size": 1}, {"batch_size": 7}, {"workers": 2, "batch_size": 3},
               {"batch_size": 7, "compile": True}):   # the compiled hasher, where numba is installed
        assert schedule.replay(txs, store, **kw) == reference


class _TaskFailed(Exception):
    """What ray.get raises for a failed task (a ray.exceptions.RayError): the task's own
    exception, where there is one, as its ``cause``."""

    def __init__(self, cause):
        super().__init__(f"{'the task failed' if cause else 'the task was lost with its node'}\n(Ray's details)")
        self.cause = cause


@pytest.mark.parametrize("cause, code", [
    (RuntimeError("a worker's bug"), "internal.ray"),
    (ModuleNotFoundError("No module named 'cvmvm'"), "usage.ray_worker"),
    (None, "internal.ray"),   # lost with its node more often than Ray retries it: no cause
])
def test_a_failed_ray_task_is_one_error(cause, code):
    """The answer a failed task gets, without a cluster (tests/test_ray_cluster.py meets the import
    failure on a real one): one error naming the cause, never Ray's exception."""
    def get(ref):
        raise _TaskFailed(cause)
    tasks = schedule.Ray.__new__(schedule.Ray)   # its __init__ starts Ray; _get needs only the module
    tasks.ray = types.SimpleNamespace(get=get, exceptions=types.SimpleNamespace(RayError=_TaskFailed))
    with pytest.raises(CvmError) as e:
        tasks._get(object())
    assert e.value.code == code
    said = f"{type(cause).__name__}: {cause}" if cause is not None else "the task was lost with its node"
    assert said in e.value.message and "Ray's details" not in e.value.message


def test_ray_gives_the_same_answer(store):
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install cvmvm[ray])")
    models = [mlp_model(), pair_model()]
    for m in models:
        store.add(m)
    txs = [honest(models[i % 2], f) for i, f in enumerate(
        sum((clipped_inputs(m, 1, 200 + i) for i, m in enumerate(models * 15)), []))]
    txs[3] = dataclasses.replace(txs[3], model_hash=b"\x05" * 32)
    # A model not in the store: its record's own faults come first (a broken signature), on Ray as
    # in this process, where Ray gave every transaction of it the model's error.
    missing = column_sum_model()
    txs += [honest(missing, f) for f in clipped_inputs(missing, 2, 300)]
    signed = txs[-1].receipt
    txs[-1] = dataclasses.replace(txs[-1], receipt=dataclasses.replace(signed, signer=dataclasses.replace(
        signed.signer, signature=bytes([signed.signer.signature[0] ^ 1]) + signed.signer.signature[1:])))
    # A stored file under a model's name holding another model, read under a work limit it passes
    # not: the limit is checked first, on Ray as in a worker process.
    other = reshape_model()
    store.path(other.model_hash).write_bytes(mlp_model().canonical_bytes)
    txs += [honest(other, f) for f in clipped_inputs(other, 1, 301)]
    tight = Limits(work=10)
    reference = schedule.replay(txs, store)
    limited = schedule.replay(txs[-1:], store, limits=tight)
    # ray.init installs SIGTERM handlers that outlive ray.shutdown; later tests in this process
    # (test_cli_usage's SIGTERM cases) need the default back.
    terminate = signal.getsignal(signal.SIGTERM)
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        assert schedule.replay(txs, store, use_ray=True, batch_size=4) == reference
        assert schedule.replay(txs[-1:], store, use_ray=True, limits=tight) == limited
    finally:
        ray.shutdown()
        signal.signal(signal.SIGTERM, terminate)
    assert reference[3].error == "input.unknown_model"
    assert [(o.status, o.fields, o.error) for o in reference[-3:]] == [
        ("error", (), "input.unknown_model"), ("mismatch", ("signature",), None), ("error", (), "malformed.store_hash")]
    assert limited[0].error == "limit.work"


# -- malleability: a transaction carries exactly what the program reads --------------------------

def test_inputs_beyond_precision_or_of_another_dtype_are_refused(store):
    """Two byte strings for one receipt would be a forgery: clipping 1000 to 127 (precision 8) and
    reading int64 as int32 both make one; such inputs are errors, not clipped or converted."""
    model = mlp_model()
    store.add(model)
    x = np.array([[5, -100, 127, 7]], dtype=np.int32)
    tx = honest(model, {"x": x})
    clipped = dataclasses.replace(tx, inputs=(("x", np.array([[5, -100, 1000, 7]], dtype=np.int32)),))
    widened = dataclasses.replace(tx, inputs=(("x", x.astype(np.int64)),))
    narrowed = dataclasses.replace(tx, inputs=(("x", x.astype(np.int8)),))
    low = dataclasses.replace(tx, inputs=(("x", np.array([[5, -128, 0, 7]], dtype=np.int32)),))
    outcomes = schedule.replay([tx, clipped, widened, narrowed, low], store)
    assert [(o.status, o.error) for o in outcomes] == [
        ("ok", None), ("error", "input.value"), ("error", "input.dtype"), ("error", "input.dtype"),
        ("error", "input.value")]
    # The same receipt through `cvmvm run` clips (and says so): replay does not.
    assert model.run({"x": np.array([[5, -100, 1000, 7]], dtype=np.int32)}, trace=True).output_hash == \
        model.run({"x": x}, trace=True).output_hash


def test_inputs_out_of_the_models_order_are_refused(store):
    model = pair_model()
    store.add(model)
    feeds = random_inputs(model, 1, 7)[0]
    feeds = {"a": np.clip(feeds["a"], -127, 127), "b": np.clip(feeds["b"], -31, 31)}
    tx = honest(model, feeds)
    swapped = dataclasses.replace(tx, inputs=tx.inputs[::-1])
    assert [(o.status, o.error) for o in schedule.replay([tx, swapped], store)] == [("ok", None),
                                                                                  ("error", "input.name")]


# -- tx demo end to end ------------------------------------------------------------------------------

def test_tx_demo_500_end_to_end(capsys, tmp_path):
    code, info = cli_json(capsys, ["tx", "demo", "500", str(tmp_path)])
    assert code == 0 and info["bad"] == 16
    expected = json.loads((tmp_path / "expected.json").read_text())
    kinds = {b["kind"] for b in expected["bad"]}
    assert kinds == {"output_hash", "trace_root", "ops", "signature", "unknown_model", "malformed_input"}
    args = ["replay", str(tmp_path / "txs.cvmtx"), "--store", str(tmp_path / "store"),
            "--signer", str(tmp_path / "signer.pub")]
    code, info = cli_json(capsys, args)
    assert code == 1
    reported = [{k: v for k, v in r.items() if k in ("index", "status", "fields", "error")}
                for r in info["results"] if r["status"] != "ok"]
    assert reported == [{k: v for k, v in b.items() if k != "kind"} for b in expected["bad"]]
    assert info["summary"]["ok"] == 500 - 16
    unknown = sum(b["kind"] == "unknown_model" for b in expected["bad"])
    assert [m["transactions"] for m in info["summary"]["model_errors"]] == [unknown]
    code2, info2 = cli_json(capsys, [*args, "--workers", "2", "--batch", "100"])
    assert (code2, info2) == (code, info)
    assert cli_json(capsys, [*args, "--workers", "2", "--batch", "100", "--compile"]) == (code, info)
    # Deterministic: generating again gives the same bytes.
    again = tmp_path / "again"
    cli_json(capsys, ["tx", "demo", "500", str(again)])
    assert (again / "txs.cvmtx").read_bytes() == (tmp_path / "txs.cvmtx").read_bytes()
    assert json.loads((again / "expected.json").read_text()) == expected


@pytest.mark.parametrize("blocked", ["signer.pub", "expected.json", "txs.cvmtx", "store"])
def test_tx_demo_checks_every_output_before_it_generates(capsys, tmp_path, blocked):
    # Defect: a directory where signer.pub goes was found after txs.cvmtx had been replaced (3
    # transactions, with expected.json still counting 40).
    cli_json(capsys, ["tx", "demo", "40", str(tmp_path)])
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    target = tmp_path / blocked
    if target.is_dir():
        for f in target.iterdir():
            f.unlink()
        target.rmdir()
        target.write_bytes(b"")
        before.pop(blocked, None)
        before[blocked] = b""
    else:
        target.unlink()
        target.mkdir()
        before.pop(blocked)
    code, info = cli_json(capsys, ["tx", "demo", "3", str(tmp_path)])
    assert code == EXIT_CODES["io"] and info["error"] == "io.not_regular"
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_a_record_sent_back_as_undecodable_that_decodes_is_a_bug():
    """Replay reads each record's model hash from its canonical prefix and decodes a record whose
    prefix it cannot read in full, for that record's error; a record that decodes there after all
    means the two readers disagree, a bug named as one, never an outcome of that transaction."""
    model = mlp_model()
    body = transactions.encode_tx(honest(model, clipped_inputs(model, 1, 7)[0]))
    with pytest.raises(CvmError) as e:
        schedule._undecodable(transactions.Record(4, 100, body))
    assert e.value.code == "internal.replay" and "transaction 4" in e.value.message
    assert schedule._undecodable(transactions.Record(4, 100, body[:-1])).error.startswith("malformed.")


def test_cli_text_report_and_clean_exit(capsys, tmp_path, store):
    model = mlp_model()
    store.add(model)
    (tmp_path / "t.cvmtx").write_bytes(transactions.encode_txs([honest(model, f) for f in
                                                                clipped_inputs(model, 3, 5)]))
    from cvmvm.cli.main import main
    assert main(["replay", str(tmp_path / "t.cvmtx"), "--store", str(store.root)]) == 0
    assert capsys.readouterr().out.splitlines() == ["3 transactions: 3 ok, 0 mismatch, 0 error"]
    assert main(["replay", str(tmp_path / "t.cvmtx"), "--store", str(store.root), "--all"]) == 0
    assert capsys.readouterr().out.splitlines() == ["tx 0: ok", "tx 1: ok", "tx 2: ok",
                                                     "3 transactions: 3 ok, 0 mismatch, 0 error"]
