"""The transaction file (FORMAT.md section 8): version-4 framing byte for byte, strict records,
faults of one record against faults of the framing, versions 1 to 3 refused and converted, and
what convert cannot carry over (receipts of commitment formats 1 and 2)."""

from __future__ import annotations

import io
import json
import struct
import sys

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from isa.errors import CvmError
from isa.types import TensorType
from serializer.model import Input
from serializer.records import transactions
from cvmvm.cli import tx as cli_tx
from cvmvm.cli.main import main
from cvmvm.tx import schedule
from cvmvm.tx.store import Store
from tests.test_receipt import build, cli_json, instr, mlp_model, mlp_receipt, pair_model
from tests.test_replay import changed, clipped_inputs, honest


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "store")


def _txs(model, n: int, seed: int = 3):
    return [honest(model, f) for f in clipped_inputs(model, n, seed)]


def _code(f) -> str:
    with pytest.raises(CvmError) as e:
        f()
    return e.value.code


# -- the bytes -------------------------------------------------------------------------------

def test_layout_byte_for_byte():
    model = mlp_model()
    txs = _txs(model, 2)
    data = transactions.encode_txs(txs)
    bodies = [transactions.encode_tx(t) for t in txs]
    assert data[:12] == b"cvmvmtx\x00" + struct.pack("<I", 4)
    pos = 12
    for body in bodies:
        assert data[pos:pos + 4] == struct.pack("<I", len(body)) and data[pos + 4:pos + 4 + len(body)] == body
        assert body.startswith(b"\x83\xa5model\xc4\x20" + model.model_hash)
        pos += 4 + len(body)
    assert data[pos:] == b"\x00\x00\x00\x00" + struct.pack("<Q", 2)
    wire = msgpack.unpackb(bodies[0])
    assert list(wire) == ["model", "inputs", "receipt"]
    assert list(wire["inputs"][0]) == ["name", "dtype", "shape", "data"]


def test_round_trip_and_ids():
    model = pair_model()
    txs = _txs(model, 3)
    data = transactions.encode_txs(txs)
    back = transactions.decode_txs(data)
    assert transactions.encode_txs(back) == data
    assert [t.receipt for t in back] == [t.receipt for t in txs]
    records = list(transactions.iter_records(io.BytesIO(data), "t"))
    assert [r.index for r in records] == [0, 1, 2]
    assert records[1].offset == 12 + 4 + len(records[0].body)
    assert transactions.tx_id(records[0].body) != transactions.tx_id(records[1].body)


# -- faults of one record: that transaction's error, the others go on ----------------------

def _wire(model) -> dict:
    return msgpack.unpackb(transactions.encode_tx(_txs(model, 1)[0]))


@pytest.mark.parametrize("mutate, code", [
    (lambda w: {k: w[k] for k in ("inputs", "model", "receipt")}, "malformed.txs"),
    (lambda w: {**w, "model": w["model"][:16]}, "malformed.txs"),
    (lambda w: {k: v for k, v in w.items() if k != "receipt"}, "malformed.txs"),
    (lambda w: {**w, "receipt": b"\x80"}, "malformed.txs"),
    (lambda w: {**w, "receipt": {**w["receipt"], "ops": "1"}}, "malformed.txs"),
    (lambda w: {**w, "inputs": w["inputs"][:1] * 2}, "malformed.txs"),
    (lambda w: {**w, "inputs": [{**w["inputs"][0], "dtype": "int16"}]}, "malformed.txs"),
    (lambda w: {**w, "inputs": [{**w["inputs"][0], "data": b"\x00"}]}, "malformed.txs"),
    (lambda w: {**w, "inputs": [{**w["inputs"][0], "shape": [2, 0]}]}, "malformed.txs"),
    (lambda w: {**w, "inputs": [{**w["inputs"][0], "shape": [1, 1, 1, 1, 1, 1, 4]}]}, "limit.rank"),
    (lambda w: {**w, "inputs": [{**w["inputs"][0], "name": 5}]}, "malformed.txs"),
    (lambda w: {**w, "inputs": [{**w["inputs"][0], "shape": [1, True]}]}, "malformed.txs"),
    (lambda w: [w], "malformed.txs"),
])
def test_a_bad_record_is_its_transactions_error(store, mutate, code):
    model = mlp_model()
    store.add(model)
    good = transactions.encode_tx(_txs(model, 1)[0])
    bad = msgpack.packb(mutate(_wire(model)), use_bin_type=True)
    data = transactions.HEADER + b"".join(transactions.frame(b) for b in (good, bad, good)) + transactions.end_frame(3)
    outcomes = [o for burst in schedule.replay_records(transactions.iter_records(io.BytesIO(data), "t"), store)
                for o in burst]
    assert [(o.status, o.error) for o in outcomes] == [("ok", None), ("error", code), ("ok", None)]
    assert outcomes[1].offset == 12 + 4 + len(good)


@pytest.mark.parametrize("garble", [
    lambda b: b"\x84" + b[1:],                                     # a map header claiming 4 entries
    lambda b: b.replace(b"\xa6inputs", b"\xd9\x06inputs", 1),      # a non-canonical str header
    lambda b: b + b"\xc0",                                        # a trailing value
    lambda b: b"\x00" + b[1:],                                    # not a map
    lambda b: b[:20],                                             # cut short
])
def test_garbled_records_and_noncanonical_ones(store, garble):
    model = mlp_model()
    store.add(model)
    good = transactions.encode_tx(_txs(model, 1)[0])
    data = transactions.HEADER + transactions.frame(garble(good)) + transactions.frame(good) + transactions.end_frame(2)
    outcomes = schedule.replay_records(transactions.iter_records(io.BytesIO(data), "t"), store)
    got = [o for burst in outcomes for o in burst]
    assert got[0].status == "error" and got[0].error in ("malformed.txs", "malformed.noncanonical")
    assert got[1].status == "ok"


# -- the decoder of records alike: decode_tx's result or error, whatever the bytes -----------------

def _cut(decoder, bodies: list[bytes]) -> list:
    """What ``decoder.cut`` gives each record: its decoded record, or its error (type, code, message)."""
    groups, errors = decoder.cut(bodies)
    got: dict[int, object] = {k: (type(e), e.code, e.message) for k, e in errors}
    for g in groups:
        assert g.rows == sorted(g.rows) and all(len(c) == len(g.rows) for c in g.columns)
        for i, k in enumerate(g.rows):
            assert k not in got   # every record in one place only
            got[k] = g.decoded(i)
    assert sorted(got) == list(range(len(bodies)))
    return [got[k] for k in range(len(bodies))]


def _outcome(body: bytes):
    try:
        return transactions.decode_tx(body)
    except CvmError as e:
        return type(e), e.code, e.message


@pytest.fixture(scope="module")
def alike():
    """Records of the pair model (two inputs, two outputs), signed and not: each is a template for the others."""
    model = pair_model()
    signed = [transactions.encode_tx(t) for t in _txs(model, 4)]
    unsigned = [transactions.encode_tx(honest(model, f, None)) for f in clipped_inputs(model, 4, 5)]
    return signed, unsigned


def test_records_alike_are_read_at_once(monkeypatch, alike):
    """One full decode per shape of record, the rest cut as one array, to the same results; a
    template outlives its chunk."""
    for bodies in alike:
        want = [transactions.decode_tx(b) for b in bodies]
        full = []
        real = transactions.decode_tx
        monkeypatch.setattr(transactions, "decode_tx", lambda b: full.append(b) or real(b))
        decoder = transactions.Decoder()
        groups, errors = decoder.cut(bodies)
        assert not errors and [g.rows for g in groups] == [[0, 1, 2, 3]]
        assert [groups[0].decoded(i) for i in range(4)] == want
        assert _cut(decoder, bodies[::-1]) == want[::-1]
        assert full == bodies[:1]
        monkeypatch.undo()


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_decoder_gives_decode_txs_result_or_error(alike, data):
    """Any change to a record alike to the template (a byte anywhere, one cut, inserted or deleted,
    a template of the other kind): the decoder's result or error is decode_tx's."""
    signed, unsigned = alike
    bodies = data.draw(st.sampled_from([signed, unsigned]))
    decoder = transactions.Decoder()
    decoder.cut([data.draw(st.sampled_from(signed + unsigned))])
    body = changed(data, data.draw(st.sampled_from(bodies)))
    assert _cut(decoder, [body]) == [_outcome(body)]


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_a_chunk_is_cut_into_decode_txs_results_and_errors(alike, data):
    """A chunk of records of both kinds, some changed: every record in exactly one group or with
    its error, and each as decode_tx decodes it, whatever template the decoder held before."""
    signed, unsigned = alike
    decoder = transactions.Decoder()
    if data.draw(st.booleans()):
        decoder.cut([data.draw(st.sampled_from(signed + unsigned))])
    chunk = data.draw(st.lists(st.sampled_from(signed + unsigned), min_size=1, max_size=12))
    chunk = [changed(data, b) if data.draw(st.booleans()) else b for b in chunk]
    assert _cut(decoder, chunk) == [_outcome(b) for b in chunk]


def test_records_all_unlike_are_each_decoded_once(monkeypatch, alike):
    """A chunk where no record is like another costs a full decode each, and no more than a few
    array comparisons a record (the templates' budget)."""
    signed, unsigned = alike
    mlp = [transactions.encode_tx(t) for t in _txs(mlp_model(), 2)]
    bodies = [signed[0], mlp[0], unsigned[0], b"\x00", signed[0][:-1]]
    want = [_outcome(b) for b in bodies]
    full = []
    real = transactions.decode_tx
    monkeypatch.setattr(transactions, "decode_tx", lambda b: full.append(b) or real(b))
    assert _cut(transactions.Decoder(), bodies) == want
    assert full == bodies


def test_the_decoder_takes_a_new_template_for_another_shape(alike):
    signed, unsigned = alike
    mlp = [transactions.encode_tx(t) for t in _txs(mlp_model(), 2)]
    decoder = transactions.Decoder()
    for body in (signed[0], mlp[0], signed[1], unsigned[0], mlp[1], unsigned[1]):
        assert _cut(decoder, [body]) == [transactions.decode_tx(body)]


# -- faults of the framing: where the file ends -----------------------------------------------

def _file(model, n=3) -> bytes:
    return transactions.encode_txs(_txs(model, n))


def test_every_truncation_is_reported_where_the_file_ends(store):
    model = mlp_model()
    store.add(model)
    data = _file(model)
    record = len(transactions.encode_tx(_txs(model, 1)[0]))
    for cut in list(range(0, 40)) + list(range(len(data) - 40, len(data))):
        f = io.BytesIO(data[:cut])
        with pytest.raises(CvmError) as e:
            for _ in transactions.iter_records(f, "t"):
                pass
        assert e.value.code in ("malformed.txs", "malformed.txs_version"), cut
        if cut >= 12:
            assert f"at byte {cut}" in e.value.message, (cut, e.value.message)
    # Replay gives the outcomes of the whole records before the cut, then the fault.
    cut = 12 + 2 * (4 + record) + 7
    got = []
    with pytest.raises(CvmError) as e:
        for burst in schedule.replay_records(transactions.iter_records(io.BytesIO(data[:cut]), "t"), store):
            got += burst
    assert [o.status for o in got] == ["ok", "ok"] and e.value.code == "malformed.txs"


@pytest.mark.parametrize("tail, what", [
    (transactions.end_frame(2), "counts 2"),
    (transactions.end_frame(3) + b"\x00", "after the end frame"),
    (struct.pack("<I", transactions.MAX_RECORD_BYTES + 1) + b"\x00" * 8, "exceeds"),
])
def test_framing_faults(store, tail, what):
    model = mlp_model()
    data = _file(model)[:-transactions.END_SIZE] + tail
    with pytest.raises(CvmError) as e:
        transactions.decode_txs(data)
    assert e.value.code == "malformed.txs" and what in e.value.message


def test_not_a_transaction_file_and_other_versions():
    assert _code(lambda: transactions.decode_txs(b"\x93\x01\x02")) == "malformed.txs"
    assert _code(lambda: transactions.decode_txs(b"cvmvmtx\x00" + struct.pack("<I", 5))) == "malformed.txs_version"
    for version, fmt in ((2, 1), (3, 2)):
        with pytest.raises(CvmError) as e:
            transactions.decode_txs(b"cvmvmtx\x00" + struct.pack("<I", version) + transactions.end_frame(0))
        assert e.value.code == "malformed.txs_version" and f"version {version} transaction file" in e.value.message
        assert f"commitment format {fmt}" in e.value.message and "cvmvm tx convert" in e.value.message
    with pytest.raises(CvmError) as e:   # a framed header naming version 1 (which never was framed)
        transactions.decode_txs(b"cvmvmtx\x00" + struct.pack("<I", 1) + transactions.end_frame(0))
    assert e.value.code == "malformed.txs_version" and "convert" not in e.value.message


# -- versions 1 to 3: refused with a pointer to convert, and converted -----------------------------

def _v1(txs) -> bytes:
    return msgpack.packb({"format": "cvmvm-txs", "version": 1,
                          "txs": [msgpack.unpackb(transactions.encode_tx(t)) for t in txs]}, use_bin_type=True)


def test_version_1_is_refused_by_replay_and_converted(capsys, tmp_path, store):
    model = mlp_model()
    store.add(model)
    txs = _txs(model, 4)
    (tmp_path / "old.cvmtx").write_bytes(_v1(txs))
    code, info = cli_json(capsys, ["replay", str(tmp_path / "old.cvmtx"), "--store", str(store.root)])
    assert code == 3 and info["error"] == "malformed.txs_version" and "cvmvm tx convert" in info["message"]
    code, info = cli_json(capsys, ["tx", "convert", str(tmp_path / "old.cvmtx"), str(tmp_path / "new.cvmtx")])
    assert code == 0 and info["transactions"] == 4
    assert (tmp_path / "new.cvmtx").read_bytes() == transactions.encode_txs(txs)
    code, info = cli_json(capsys, ["tx", "convert", str(tmp_path / "new.cvmtx"), str(tmp_path / "x.cvmtx")])
    assert code == 2 and info["error"] == "usage.argument"
    bad = _v1(txs).replace(b"\xa6format", b"\xd9\x06format", 1)
    (tmp_path / "bad.cvmtx").write_bytes(bad)
    code, info = cli_json(capsys, ["tx", "convert", str(tmp_path / "bad.cvmtx"), str(tmp_path / "y.cvmtx")])
    assert code == 3 and info["error"] == "malformed.noncanonical" and not (tmp_path / "y.cvmtx").exists()


def _v2(bodies, version: int = 2) -> bytes:
    """Version 2's framing (version 3's too) around these records."""
    return (b"cvmvmtx\x00" + struct.pack("<I", version) + b"".join(transactions.frame(b) for b in bodies)
            + transactions.end_frame(len(bodies)))


def _v3(bodies) -> bytes:
    return _v2(bodies, 3)


def _format1(body: bytes) -> bytes:
    """The record as commitment format 1 wrote it: a version 1 receipt (no program root, input "hash")."""
    wire = msgpack.unpackb(body)
    r = wire["receipt"]
    old = {"format": r["format"], "version": 1, "model_hash": r["model_hash"],
           "inputs": [{"name": i["name"], "hash": i["commitment"]} for i in r["inputs"]],
           "output_hash": r["output_hash"], "trace_root": r["trace_root"], "ops": r["ops"], "signer": r["signer"]}
    return msgpack.packb({**wire, "receipt": old}, use_bin_type=True)


def _format2(body: bytes) -> bytes:
    """The record as commitment format 2 wrote it: a version 2 receipt (the same keys, format 2's hashes)."""
    wire = msgpack.unpackb(body)
    return msgpack.packb({**wire, "receipt": {**wire["receipt"], "version": 2}}, use_bin_type=True)


@pytest.mark.parametrize("old", [_v2, _v3])
def test_versions_2_and_3_are_refused_by_replay_and_converted(capsys, tmp_path, store, old):
    model = mlp_model()
    store.add(model)
    txs = _txs(model, 3)
    (tmp_path / "old.cvmtx").write_bytes(old([transactions.encode_tx(t) for t in txs]))
    code, info = cli_json(capsys, ["replay", str(tmp_path / "old.cvmtx"), "--store", str(store.root)])
    assert code == 3 and info["error"] == "malformed.txs_version" and "cvmvm tx convert" in info["message"]
    code, info = cli_json(capsys, ["tx", "convert", str(tmp_path / "old.cvmtx"), str(tmp_path / "new.cvmtx")])
    assert code == 0 and (info["transactions"], info["version"]) == (3, 4)
    assert (tmp_path / "new.cvmtx").read_bytes() == transactions.encode_txs(txs)
    assert [o.status for burst in schedule.replay_file(tmp_path / "new.cvmtx", store) for o in burst] == ["ok"] * 3


@pytest.mark.parametrize("old", [_v1, _v2, _v3])
@pytest.mark.parametrize("older", [_format1, _format2])
def test_convert_never_carries_a_receipt_of_an_older_format_and_says_so(capsys, tmp_path, old, older):
    model = mlp_model()
    bodies = [transactions.encode_tx(t) for t in _txs(model, 4)]
    bodies[1] = older(bodies[1])
    bodies[3] = _format1(bodies[3])
    fmt = 1 if older is _format1 else 2
    assert [transactions.old_receipt(b) for b in bodies] == [None, fmt, None, 1]
    if old is _v1:
        data = msgpack.packb({"format": "cvmvm-txs", "version": 1, "txs": [msgpack.unpackb(b) for b in bodies]},
                             use_bin_type=True)
    else:
        data = old(bodies)
    (tmp_path / "old.cvmtx").write_bytes(data)
    code, info = cli_json(capsys, ["tx", "convert", str(tmp_path / "old.cvmtx"), str(tmp_path / "new.cvmtx")])
    assert (code, info["error"]) == (3, "malformed.txs_version")
    assert "2 of 4 transactions (1, 3)" in info["message"]
    assert f"commitment format {'1' if fmt == 1 else '1 and 2'}," in info["message"]
    assert not (tmp_path / "new.cvmtx").exists() and list(tmp_path.iterdir()) == [tmp_path / "old.cvmtx"]


# -- tx add -----------------------------------------------------------------------------------

def test_tx_add_builds_and_extends_a_file_from_real_runs(capsys, tmp_path, store):
    model = mlp_model()
    store.add(model)
    (tmp_path / "m.cvm").write_bytes(model.canonical_bytes)
    np.save(tmp_path / "x.npy", np.array([[5, -100, 1000, 7]], dtype=np.int64))   # clipped, and int64
    np.save(tmp_path / "y.npy", np.array([[1, 2, 3, 4]], dtype=np.int32))
    txs = tmp_path / "t.cvmtx"
    for k, x in enumerate(("x", "y")):
        code, info = cli_json(capsys, ["tx", "add", str(txs), "--model", str(tmp_path / "m.cvm"),
                                       "--input", f"x={tmp_path / f'{x}.npy'}"])
        assert code == 0 and info["index"] == k and info["receipt_matches_run"]
    back = transactions.decode_txs(txs.read_bytes())
    assert back[0].inputs[0][1].dtype == np.int32 and back[0].inputs[0][1].tolist() == [[5, -100, 127, 7]]
    code, info = cli_json(capsys, ["replay", str(txs), "--store", str(store.root)])
    assert code == 0 and info["summary"]["ok"] == 2
    # A claimed receipt of another run is carried as given, and replay reports it.
    code, _ = cli_json(capsys, ["run", str(tmp_path / "m.cvm"), "--input", f"x={tmp_path / 'y.npy'}",
                                "--receipt", str(tmp_path / "r.bin")])
    code, info = cli_json(capsys, ["tx", "add", str(txs), "--model", str(tmp_path / "m.cvm"),
                                   "--input", f"x={tmp_path / 'x.npy'}", "--receipt", str(tmp_path / "r.bin")])
    assert code == 0 and not info["receipt_matches_run"]
    code, info = cli_json(capsys, ["replay", str(txs), "--store", str(store.root)])
    assert code == 1 and info["results"][2]["fields"] == ["inputs", "output_hash", "trace_root"]


def test_tx_add_and_convert_name_a_file_of_another_kind(capsys, tmp_path):
    """A model or a receipt where a transaction file is read is malformed.kind, as replay says,
    not a transaction file with a broken header; the file is left as it was."""
    model = mlp_model()
    (tmp_path / "m.cvm").write_bytes(model.canonical_bytes)
    np.save(tmp_path / "x.npy", np.array([[1, 2, 3, 4]], dtype=np.int32))
    code, _ = cli_json(capsys, ["run", str(tmp_path / "m.cvm"), "--input", f"x={tmp_path / 'x.npy'}",
                                "--receipt", str(tmp_path / "r.bin")])
    assert code == 0
    for other, kind in (("m.cvm", "native model"), ("r.bin", "receipt")):
        before = (tmp_path / other).read_bytes()
        for argv in (["tx", "add", str(tmp_path / other), "--model", str(tmp_path / "m.cvm"),
                      "--input", f"x={tmp_path / 'x.npy'}"],
                     ["tx", "convert", str(tmp_path / other), str(tmp_path / "new.cvmtx")]):
            code, info = cli_json(capsys, argv)
            assert code == 3 and info["error"] == "malformed.kind" and kind in info["message"], info
        assert (tmp_path / other).read_bytes() == before and not (tmp_path / "new.cvmtx").exists()


def test_a_record_of_empty_maps_is_refused_before_it_is_unpacked(monkeypatch):
    # 64 KiB of them would unpack into 4.7 MB of dicts (a 50 MiB record: 3.6 GB).
    monkeypatch.setattr(transactions.msgpack, "unpackb", lambda *a, **k: pytest.fail("unpacked"))
    with pytest.raises(CvmError) as e:
        transactions.decode_tx(b"\xdd" + struct.pack(">I", 1 << 16) + b"\x80" * (1 << 16))
    assert e.value.code == "malformed.txs" and "more than 32 a byte" in e.value.message


@pytest.mark.parametrize("count", [transactions.MAX_TX_INPUTS, transactions.MAX_TX_INPUTS + 1])
def test_tx_add_refuses_a_model_of_more_inputs_than_a_record_carries(capsys, tmp_path, store, count):
    """A record carries at most 64 inputs (FORMAT.md section 8).  A model of more used to be added
    as a record that replay and show then refused to read."""
    model = build([Input(f"x{k}", TensorType((1, 1), 8)) for k in range(count)], [],
                  [instr("concatenate", tuple(range(count)), count, axis=0)], [count])
    store.add(model)
    (tmp_path / "m.cvm").write_bytes(model.canonical_bytes)
    np.save(tmp_path / "x.npy", np.array([[3]], dtype=np.int32))
    inputs = [a for k in range(count) for a in ("--input", f"x{k}={tmp_path / 'x.npy'}")]
    txs = tmp_path / "t.cvmtx"
    code, info = cli_json(capsys, ["tx", "add", str(txs), "--model", str(tmp_path / "m.cvm"), *inputs])
    if count <= transactions.MAX_TX_INPUTS:
        assert code == 0
        code, info = cli_json(capsys, ["replay", str(txs), "--store", str(store.root)])
        assert code == 0 and info["summary"]["ok"] == 1
    else:
        assert code == 6 and info["error"] == "limit.items" and "at most 64 inputs" in info["message"]
        assert not txs.exists()
        tx = transactions.Transaction(model.model_hash, tuple((f"x{k}", np.zeros((1, 1), np.int32))
                                                              for k in range(count)), mlp_receipt()[1])
        with pytest.raises(CvmError) as e:
            transactions.encode_tx(tx)
        assert e.value.code == "limit.items"


def test_concurrent_appends_lose_no_transaction(tmp_path, monkeypatch):
    """Two `tx add`s at once both reported their transaction added and the file held one: each had
    opened the old file before taking the directory's lock, and the second copied what the first
    replaced.  The old file is now opened under the lock."""
    import threading
    from cvmvm.tx import txtools
    model, claim, inputs = mlp_receipt()
    body = transactions.encode_tx(transactions.Transaction(model.model_hash, tuple(inputs.items()), claim))
    txs = tmp_path / "t.cvmtx"
    txtools.append(txs, [body])
    in_close, go = threading.Event(), threading.Event()

    class Held(transactions.TxWriter):
        def close(self):
            if not in_close.is_set():
                in_close.set()
                go.wait(10)
            return super().close()
    monkeypatch.setattr(txtools.transactions, "TxWriter", Held)
    counts: list[int] = []
    first = threading.Thread(target=lambda: counts.append(txtools.append(txs, [body])))
    first.start()
    assert in_close.wait(10)
    second = threading.Thread(target=lambda: counts.append(txtools.append(txs, [body])))
    second.start()
    second.join(0.3)    # the second waits for the lock the first holds
    go.set()
    first.join(10)
    second.join(10)
    assert sorted(counts) == [2, 3] and len(transactions.decode_txs(txs.read_bytes())) == 3


def test_tx_add_checks_its_file_before_the_run(capsys, tmp_path):
    """As every command that writes: an output in a missing directory is named before the work
    (the model ran first, and an input's fault was reported instead)."""
    (tmp_path / "m.cvm").write_bytes(mlp_model().canonical_bytes)
    np.save(tmp_path / "wrong.npy", np.zeros((2, 2), np.int32))
    code, info = cli_json(capsys, ["tx", "add", str(tmp_path / "nodir" / "t.cvmtx"), "--model",
                                   str(tmp_path / "m.cvm"), "--input", f"x={tmp_path / 'wrong.npy'}"])
    assert code == 8 and info["error"] == "io.not_found" and "nodir" in info["message"]


# -- progress bars ------------------------------------------------------------------------------

def test_every_command_over_a_transaction_file_draws_a_bar_on_a_terminal(capsys, monkeypatch, tmp_path, store):
    """replay, tx demo (up to 10,000,000 transactions), tx convert and tx add (each copies the whole
    file) count transactions on stderr, on a terminal only, and not with --quiet; the output is the same."""
    pytest.importorskip("tqdm", reason="the progress extra is not installed (pip install 'cvmvm[progress]')")
    # Here, not in a fixture: capsys's stderr is in place only once the test runs.
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    monkeypatch.setattr(cli_tx, "TX_BAR_DELAY", 0)   # drawn at once, not after half a second
    model = mlp_model()
    store.add(model)
    (tmp_path / "m.cvm").write_bytes(model.canonical_bytes)
    np.save(tmp_path / "x.npy", np.array([[1, 2, 3, 4]], dtype=np.int32))
    (tmp_path / "old.cvmtx").write_bytes(_v3([transactions.encode_tx(t) for t in _txs(model, 3)]))
    runs = [
        ("tx demo", ["tx", "demo", "5", str(tmp_path / "demo")], "5.00/5.00"),
        ("tx convert", ["tx", "convert", str(tmp_path / "old.cvmtx"), str(tmp_path / "new.cvmtx")], "3.00tx"),
        ("tx add", ["tx", "add", str(tmp_path / "new.cvmtx"), "--model", str(tmp_path / "m.cvm"),
                    "--input", f"x={tmp_path / 'x.npy'}"], "4.00/4.00"),
        ("replay", ["replay", str(tmp_path / "new.cvmtx"), "--store", str(store.root)], "4.00/4.00"),
    ]
    for name, argv, count in runs:
        code = main([*argv, "--json"])
        out, err = capsys.readouterr()
        assert code == 0 and "error" not in json.loads(out)
        assert f"{name}: " in err and count in err, err
    for name, argv, _ in runs:
        if name == "tx add":   # its TXS is now one longer: add to a copy, as the first time
            argv = ["tx", "add", str(tmp_path / "quiet.cvmtx"), *argv[3:]]
        elif name == "tx demo" or name == "tx convert":
            argv = [*argv[:-1], argv[-1] + "-quiet"]
        code = main([*argv, "--quiet"])
        assert code == 0 and capsys.readouterr().err == "", name
