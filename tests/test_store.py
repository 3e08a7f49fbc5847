"""The model store: content-addressed, atomic writes, every read re-hashed."""

from __future__ import annotations

import gzip
import hashlib

import pytest

from cvmvm.cli.common import EXIT_CODES
from cvmvm.tx.store import Store
from isa.errors import CvmError
from tests.test_receipt import DIGITS, cli_json, mlp_model, pair_model


def test_add_names_the_file_by_model_hash(tmp_path):
    model = mlp_model()
    store = Store(tmp_path / "store")
    digest = store.add(model)
    assert digest == model.model_hash == hashlib.sha256(model.canonical_bytes).digest()
    path = tmp_path / "store" / (digest.hex() + ".cvm")
    assert path.read_bytes() == model.canonical_bytes
    assert store.get(digest).model_hash == digest
    assert [p.name for p in (tmp_path / "store").iterdir()] == [path.name]  # no temporary file left


def test_add_is_idempotent_and_repairs_a_corrupt_copy(tmp_path):
    model = mlp_model()
    store = Store(tmp_path)
    digest = store.add(model)
    assert store.add(model) == digest
    store.path(digest).write_bytes(b"garbage")
    store.add(model)
    assert store.read(digest) == model.canonical_bytes


def test_unknown_model_is_refused(tmp_path):
    store = Store(tmp_path)
    store.add(mlp_model())
    with pytest.raises(CvmError) as e:
        store.get(b"\x12" * 32)
    assert e.value.code == "input.unknown_model"
    with pytest.raises(CvmError) as e:
        Store(tmp_path / "missing").get(b"\x12" * 32)
    assert e.value.code == "input.unknown_model"


def test_a_file_whose_hash_is_not_its_name_is_refused(tmp_path):
    store = Store(tmp_path)
    digest = store.add(mlp_model())
    data = bytearray(store.path(digest).read_bytes())
    data[-1] ^= 0x01
    store.path(digest).write_bytes(bytes(data))
    with pytest.raises(CvmError) as e:
        store.get(digest)
    assert e.value.code == "malformed.store_hash"


def test_a_valid_model_under_another_name_is_refused(tmp_path):
    store = Store(tmp_path)
    a = store.add(mlp_model())
    b = store.add(pair_model())
    store.path(a).write_bytes(store.path(b).read_bytes())
    with pytest.raises(CvmError) as e:
        store.get(a)
    assert e.value.code == "malformed.store_hash"
    assert store.get(b).model_hash == b


def test_list_rehashes_and_ignores_other_files(tmp_path):
    store = Store(tmp_path)
    hashes = sorted([store.add(mlp_model()).hex(), store.add(pair_model()).hex()])
    (tmp_path / "notes.txt").write_text("not a model")
    (tmp_path / ".tmp.cvm.abc").write_bytes(b"half")
    entries = store.list()
    assert [e.model_hash for e in entries] == hashes and all(e.intact for e in entries)
    store.path(bytes.fromhex(hashes[0])).write_bytes(b"x")
    assert [e.intact for e in store.list()] == [False, True]
    with pytest.raises(CvmError) as e:
        Store(tmp_path / "missing").list()
    assert e.value.code == "input.file"


def test_cli_store_add_and_list(capsys, tmp_path):
    (tmp_path / "graph.json").write_bytes(gzip.decompress((DIGITS / "graph.json.gz").read_bytes()))
    (tmp_path / "params.bin").write_bytes(gzip.decompress((DIGITS / "params.bin.gz").read_bytes()))
    (tmp_path / "m.cvm").write_bytes(mlp_model().canonical_bytes)
    store = tmp_path / "store"
    code, info = cli_json(capsys, ["store", "add", str(store), str(tmp_path / "graph.json"),
                                   "--params", str(tmp_path / "params.bin")])
    assert code == 0
    digits_hash = info["model_hash"]
    code, info = cli_json(capsys, ["store", "add", str(store), str(tmp_path / "m.cvm")])
    assert code == 0 and info["model_hash"] == mlp_model().model_hash.hex()
    code, info = cli_json(capsys, ["store", "list", str(store)])
    assert code == 0
    assert sorted(m["model_hash"] for m in info["models"]) == sorted([digits_hash, mlp_model().model_hash.hex()])
    (store / f"{digits_hash}.cvm").write_bytes(b"tampered")
    code, info = cli_json(capsys, ["store", "list", str(store)])
    assert code == 1 and [m["intact"] for m in info["models"] if m["model_hash"] == digits_hash] == [False]


def test_cli_store_add_rejects_a_bad_model(capsys, tmp_path):
    (tmp_path / "bad.json").write_text("{")
    code, info = cli_json(capsys, ["store", "add", str(tmp_path / "store"), str(tmp_path / "bad.json")])
    assert code == EXIT_CODES["malformed"] and info["error"].startswith("malformed.")
