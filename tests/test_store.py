"""The model store: content-addressed, atomic writes, every read re-hashed."""

from __future__ import annotations

import gzip
import hashlib
import os
import time
from pathlib import Path

import pytest

from cvmvm import files
from cvmvm.cli.common import EXIT_CODES
from cvmvm.cli.main import main
from cvmvm.tx.store import Store
from isa.errors import CvmError
from tests.test_receipt import DIGITS, cli_json, mlp_model, pair_model


def test_add_names_the_file_by_model_hash(tmp_path):
    model = mlp_model()
    store = Store(tmp_path / "store")
    digest = store.add(model)
    # FORMAT.md 1.3: the program root and the bytes' SHA-256, under their tag.
    assert digest == model.model_hash == hashlib.sha256(b"cvmvm/model/v3\x00" + model.program_root
                                                        + hashlib.sha256(model.canonical_bytes).digest()).digest()
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
    assert e.value.code == "io.not_found"


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


# -- a store directory is not trusted -------------------------------------------------------

def _hostile_names(tmp_path, store: Store) -> dict[str, str]:
    """Under model-file names: what each holds instead of a model, and the problem list reports."""
    names = {}

    def name(k: int) -> Path:
        n = f"{k:064x}.cvm"
        return tmp_path / n

    name(1).symlink_to("/dev/zero")
    names[name(1).name] = "symbolic link"
    name(2).symlink_to(name(2))
    names[name(2).name] = "symbolic link"
    os.mkfifo(name(3))
    names[name(3).name] = "fifo"
    name(4).mkdir()
    names[name(4).name] = "directory"
    name(5).symlink_to(tmp_path / "nowhere")
    names[name(5).name] = "symbolic link"
    with open(name(6), "wb") as f:
        f.truncate((1 << 32) + 1)
    names[name(6).name] = "too large"
    good = store.add(mlp_model())
    (tmp_path / "outside.cvm").write_bytes(mlp_model().canonical_bytes)
    name(7).symlink_to(tmp_path / "outside.cvm")   # a link out of the store, even to a valid model
    names[name(7).name] = "symbolic link"
    names[good.hex() + ".cvm"] = None
    return names


def test_list_refuses_anything_but_regular_files_without_opening_them(tmp_path):
    store = Store(tmp_path)
    names = _hostile_names(tmp_path, store)
    start = time.monotonic()
    entries = store.list()
    assert time.monotonic() - start < 5   # a link to /dev/zero read 4 GiB in 18 s
    assert {e.model_hash + ".cvm": e.problem for e in entries} == names
    assert [e.intact for e in entries if e.problem is None] == [True]


def test_get_refuses_anything_but_regular_files(tmp_path):
    store = Store(tmp_path)
    names = _hostile_names(tmp_path, store)
    for name, problem in names.items():
        digest = bytes.fromhex(name[:64])
        if problem is None:
            assert store.get(digest).model_hash == digest
            continue
        with pytest.raises(CvmError) as e:
            store.get(digest)
        assert e.value.code == ("limit.bytes" if problem == "too large" else "io.not_regular"), name


def test_cli_store_list_of_a_hostile_directory(capsys, tmp_path):
    names = _hostile_names(tmp_path, Store(tmp_path))
    code, info = cli_json(capsys, ["store", "list", str(tmp_path)])
    assert code == 1 and {m["model_hash"] + ".cvm": m["problem"] for m in info["models"]} == names
    assert main(["store", "list", str(tmp_path / "outside.cvm")]) == EXIT_CODES["io"]


def test_add_replaces_a_link_under_its_name_and_cleans_stale_temporary_files(tmp_path):
    store = Store(tmp_path)
    model = mlp_model()
    target = store.path(model.model_hash)
    (tmp_path / "elsewhere").write_bytes(b"not this")
    target.symlink_to(tmp_path / "elsewhere")
    stale = tmp_path / files.temp_name(target.name, "ab" * 8)
    stale.write_bytes(b"half a model")
    store.add(model)
    assert not target.is_symlink() and target.read_bytes() == model.canonical_bytes
    assert (tmp_path / "elsewhere").read_bytes() == b"not this" and not stale.exists()


def test_add_into_a_store_whose_parent_is_missing(tmp_path):
    with pytest.raises(CvmError) as e:
        Store(tmp_path / "no" / "store").add(mlp_model())
    assert e.value.code == "io.not_found"
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(CvmError) as e:
        Store(tmp_path / "file").add(mlp_model())
    assert e.value.code == "io.not_regular"
