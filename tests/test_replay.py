"""Replay: the transaction file, batching decided statically and identical to one-by-one
runs, every mismatch and error kind, worker processes, Ray, and make_txs end to end."""

from __future__ import annotations

import dataclasses
import importlib.util
import json

import msgpack
import numpy as np
import pytest

from serializer.records import transactions
from serializer.records.transactions import Transaction
from cvmvm.vm import batching
from cvmvm.tx import receipt, replay
from cvmvm.cli.common import EXIT_CODES
from cvmvm.tx.store import Store
from isa.errors import CvmError
from serializer.hashing import merkle_root, trace_root
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
        assert r.trace_root == result.trace.root == trace_root(model.model_hash, len(result.trace.leaves),
                                                               merkle_root(result.trace.leaves))


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
    feeds = random_inputs(model, 12, RNG_SEED + 1)
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
    outcomes = replay.replay(txs, store)
    assert [(o.status, o.fields, o.error) for o in outcomes] == [
        ("ok", (), None),
        ("mismatch", ("output_hash",), None), ("mismatch", ("trace_root",), None), ("mismatch", ("ops",), None),
        ("mismatch", ("model_hash",), None), ("mismatch", ("inputs",), None), ("mismatch", ("signature",), None),
        ("error", (), "input.unknown_model"), ("error", (), "input.shape"), ("error", (), "input.dtype"),
        ("error", (), "input.name"), ("error", (), "input.name"),
    ]
    s = replay.summary(outcomes)
    assert (s["ok"], s["mismatch"], s["error"]) == (1, 6, 5)
    signer = KEY.public_key().public_bytes_raw()
    assert replay.replay(txs[:1], store, signer=signer)[0].status == "ok"
    assert replay.replay(txs[:1], store, signer=b"\x03" * 32)[0].fields == ("signer",)


def test_store_hash_mismatch_is_an_error_for_that_model_only(store):
    a, b = mlp_model(), pair_model()
    store.add(a)
    store.add(b)
    data = bytearray(store.path(a.model_hash).read_bytes())
    data[-1] ^= 1
    store.path(a.model_hash).write_bytes(bytes(data))
    txs = [honest(a, f) for f in random_inputs(a, 2, 1)] + [honest(b, f) for f in random_inputs(b, 2, 2)]
    outcomes = replay.replay(txs, store)
    assert [(o.status, o.error) for o in outcomes] == [("error", "malformed.store_hash")] * 2 + [("ok", None)] * 2


def test_mixed_models_workers_and_batch_sizes_give_one_answer(store):
    models = [mlp_model(), pair_model(), column_sum_model(), reshape_model()]
    for m in models:
        store.add(m)
    txs = [honest(models[i % 4], f) for i, f in enumerate(
        sum((random_inputs(m, 1, 100 + i) for i, m in enumerate(models * 10)), []))]
    txs[5] = dataclasses.replace(txs[5], receipt=dataclasses.replace(txs[5].receipt, signer=None, ops=1))
    seen = []
    reference = replay.replay(txs, store, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (40, 40) and [o.index for o in reference] == list(range(40))
    assert reference[5].fields == ("ops",) and sum(o.status == "ok" for o in reference) == 39
    for kw in ({"batch_size": 1}, {"batch_size": 7}, {"workers": 2, "batch_size": 3}):
        assert replay.replay(txs, store, **kw) == reference


def test_ray_gives_the_same_answer(store):
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install cvmvm[ray])")
    models = [mlp_model(), pair_model()]
    for m in models:
        store.add(m)
    txs = [honest(models[i % 2], f) for i, f in enumerate(
        sum((random_inputs(m, 1, 200 + i) for i, m in enumerate(models * 15)), []))]
    txs[3] = dataclasses.replace(txs[3], model_hash=b"\x05" * 32)
    reference = replay.replay(txs, store)
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        assert replay.replay(txs, store, use_ray=True, batch_size=4) == reference
    finally:
        ray.shutdown()
    assert reference[3].error == "input.unknown_model"


# -- the transaction file ---------------------------------------------------------------------------

def _wire(store) -> dict:
    model = pair_model()
    store.add(model)
    return msgpack.unpackb(transactions.encode_txs([honest(model, f) for f in random_inputs(model, 2, 3)]))


def test_txs_round_trip(store):
    model = mlp_model()
    txs = [honest(model, f) for f in random_inputs(model, 3, 4)]
    data = transactions.encode_txs(txs)
    back = transactions.decode_txs(data)
    assert transactions.encode_txs(back) == data
    assert [t.receipt for t in back] == [t.receipt for t in txs]
    assert all(np.array_equal(a[1], b[1]) for t, u in zip(txs, back) for a, b in zip(t.inputs, u.inputs))


def _code(data: bytes) -> str:
    with pytest.raises(CvmError) as e:
        transactions.decode_txs(data)
    return e.value.code


@pytest.mark.parametrize("mutate", [
    lambda w: {**w, "format": "cvmvm-tx"},
    lambda w: {**w, "version": 0},
    lambda w: {k: w[k] for k in ("version", "format", "txs")},
    lambda w: {**w, "txs": {}},
    lambda w: {**w, "txs": [{**w["txs"][0], "model": w["txs"][0]["model"][:16]}]},
    lambda w: {**w, "txs": [{k: v for k, v in w["txs"][0].items() if k != "receipt"}]},
    lambda w: {**w, "txs": [{**w["txs"][0], "receipt": b"\x80"}]},
    lambda w: {**w, "txs": [{**w["txs"][0], "receipt": {**w["txs"][0]["receipt"], "ops": "1"}}]},
    lambda w: {**w, "txs": [{**w["txs"][0], "inputs": w["txs"][0]["inputs"][:1] * 2}]},
    lambda w: {**w, "txs": [{**w["txs"][0], "inputs": [{**w["txs"][0]["inputs"][0], "dtype": "int16"}]}]},
    lambda w: {**w, "txs": [{**w["txs"][0], "inputs": [{**w["txs"][0]["inputs"][0], "data": b"\x00"}]}]},
    lambda w: {**w, "txs": [{**w["txs"][0], "inputs": [{**w["txs"][0]["inputs"][0], "shape": [2, 0]}]}]},
])
def test_malformed_tx_files_are_rejected(store, mutate):
    assert _code(msgpack.packb(mutate(_wire(store)), use_bin_type=True)) == "malformed.txs"


def test_tx_file_bounds_and_canonical_form(store):
    data = msgpack.packb(_wire(store), use_bin_type=True)
    assert transactions.decode_txs(data)
    assert _code(data[:-3]) == "malformed.txs"
    assert _code(data + b"\xc0") == "malformed.txs"
    assert _code(data.replace(b"\xa6format", b"\xd9\x06format", 1)) == "malformed.noncanonical"
    wide = msgpack.packb({**_wire(store), "txs": [{**_wire(store)["txs"][0], "inputs": [
        {**_wire(store)["txs"][0]["inputs"][0], "shape": [1, 1, 1, 1, 1, 1, 6]}]}]}, use_bin_type=True)
    assert _code(wide) == "limit.rank"


def test_cli_rejects_a_malformed_file(capsys, tmp_path, store):
    (tmp_path / "bad.cvmtx").write_bytes(b"\x93\x01\x02")
    code, info = cli_json(capsys, ["replay", str(tmp_path / "bad.cvmtx"), "--store", str(store.root)])
    assert code == EXIT_CODES["malformed"] and info["error"] == "malformed.txs"


# -- make_txs end to end ------------------------------------------------------------------------------

def _make_txs():
    spec = importlib.util.spec_from_file_location("make_txs", REPO / "scripts" / "make_txs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_make_txs_500_end_to_end(capsys, tmp_path):
    expected = _make_txs().generate(tmp_path, 500)
    kinds = {b["kind"] for b in expected["bad"]}
    assert kinds == {"output_hash", "trace_root", "ops", "signature", "unknown_model", "malformed_input"}
    assert len(expected["bad"]) == 16
    args = ["replay", str(tmp_path / "txs.cvmtx"), "--store", str(tmp_path / "store"),
            "--signer", str(tmp_path / "signer.pub")]
    code, info = cli_json(capsys, args)
    assert code == 1
    reported = [{k: v for k, v in r.items() if k in ("index", "status", "fields", "error")}
                for r in info["results"] if r["status"] != "ok"]
    assert reported == [{k: v for k, v in b.items() if k != "kind"} for b in expected["bad"]]
    assert info["summary"]["ok"] == 500 - 16
    code2, info2 = cli_json(capsys, [*args, "--workers", "2", "--batch", "100"])
    assert (code2, info2) == (code, info)
    # Deterministic: generating again gives the same bytes.
    again = tmp_path / "again"
    _make_txs().generate(again, 500)
    assert (again / "txs.cvmtx").read_bytes() == (tmp_path / "txs.cvmtx").read_bytes()
    assert json.loads((again / "expected.json").read_text()) == expected


def test_cli_text_report_and_clean_exit(capsys, tmp_path, store):
    model = mlp_model()
    store.add(model)
    (tmp_path / "t.cvmtx").write_bytes(transactions.encode_txs([honest(model, f) for f in random_inputs(model, 3, 5)]))
    from cvmvm.cli.main import main
    assert main(["replay", str(tmp_path / "t.cvmtx"), "--store", str(store.root)]) == 0
    assert capsys.readouterr().out.splitlines() == ["3 transactions: 3 ok, 0 mismatch, 0 error"]
    assert main(["replay", str(tmp_path / "t.cvmtx"), "--store", str(store.root), "--all"]) == 0
    assert capsys.readouterr().out.splitlines() == ["tx 0: ok", "tx 1: ok", "tx 2: ok",
                                                     "3 transactions: 3 ok, 0 mismatch, 0 error"]
