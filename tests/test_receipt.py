"""Receipts: canonical encoding, Ed25519 signatures, field-by-field checking, and the CLI.

Also home of the small hand-built models the other transaction tests share
(mlp_model, pair_model, ...).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import msgpack
import numpy as np
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from serializer.records import receipt as receipt_codec
from cvmvm.tx import receipt
from cvmvm.vm.api import Model
from cvmvm.cli.common import EXIT_CODES
from cvmvm.cli.main import main
from cvmvm.vm.verify import verify
from isa.attrs import parse_attrs
from isa.errors import CvmError
from isa.table import OP_BY_NAME
from isa.types import TensorType
from serializer.hashing import tensor_commitment
from serializer.model import Input, Instr, Model as ModelIR, Param

REPO = Path(__file__).resolve().parent.parent
DIGITS = REPO / "fixtures" / "models" / "digits"


# -- shared builders ----------------------------------------------------------------------

def instr(op: str, ins: tuple[int, ...], out: int, **attrs) -> Instr:
    return Instr(op, parse_attrs(OP_BY_NAME[op].attrs, attrs, fill_defaults=True), ins, (out,))


def param(name: str, values) -> Param:
    value = np.asarray(values, dtype=np.int32)
    value.setflags(write=False)
    return Param(name, TensorType(value.shape, 8), value)


def build(inputs, params, instrs, outputs) -> Model:
    return Model(verify(ModelIR(tuple(inputs), tuple(params), tuple(instrs), tuple(outputs))))


def mlp_model() -> Model:
    """x (1, 4) p8 -> relu -> dense 3 -> * scale -> right shift 4: batchable."""
    return build([Input("x", TensorType((1, 4), 8))],
                 [param("w", [[1, -2, 3, -4], [5, 6, -7, 8], [-9, 10, 11, -12]]), param("b", [3, -5, 7]),
                  param("s", [3])],
                 [instr("relu", (0,), 4), instr("dense", (4, 1, 2), 5, units=3),
                  instr("broadcast_mul", (5, 3), 6), instr("cvm_right_shift", (6,), 7, precision=8, shift_bit=4)],
                 [7])


def pair_model() -> Model:
    """Two inputs of 2 rows each, two outputs: elemwise_add, then a row sum (batchable, n = 2)."""
    return build([Input("a", TensorType((2, 3), 8)), Input("b", TensorType((2, 3), 6))], [],
                 [instr("elemwise_add", (0, 1), 2), instr("sum", (2,), 3, axis=(1,))], [3, 2])


def column_sum_model() -> Model:
    """Sums over axis 0: rows depend on each other, so never batched."""
    return build([Input("x", TensorType((2, 3), 8))], [], [instr("sum", (0,), 1, axis=(0,))], [1])


def reshape_model() -> Model:
    """reshape names axis 0 literally; the batched program rewrites it."""
    return build([Input("x", TensorType((1, 6), 8))], [param("k", [[1, 2, 3]])],
                 [instr("reshape", (0,), 2, shape=(1, 2, 3)), instr("broadcast_add", (2, 1), 3)], [3])


def digits_model() -> Model:
    import cvmvm
    return cvmvm.load_cortex(gzip.decompress((DIGITS / "graph.json.gz").read_bytes()),
                             gzip.decompress((DIGITS / "params.bin.gz").read_bytes()))


def cli_json(capsys, argv: list[str]) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))


def mlp_receipt(x=None) -> tuple[Model, receipt_codec.Receipt, dict]:
    model = mlp_model()
    inputs = {"x": np.array([[5, -100, 200, 7]], dtype=np.int32) if x is None else x}
    return model, receipt.make_receipt(model, model.run(inputs, trace=True)), inputs


# -- making and encoding --------------------------------------------------------------------

def test_receipt_commits_to_the_run():
    model, r, _ = mlp_receipt()
    result = model.run({"x": np.array([[5, -100, 200, 7]], dtype=np.int32)}, trace=True)
    assert r.model_hash == model.model_hash
    assert r.output_hash == result.output_hash
    assert r.trace_root == result.trace.root
    assert r.ops == model.ops
    # The input as the program read it: 200 clipped to precision 8 (127).
    assert r.program_root == model.program_root
    assert r.inputs == (("x", tensor_commitment(np.array([[5, -100, 127, 7]], dtype=np.int32), TensorType((1, 4), 8))),)
    assert r.signer is None


def test_encode_decode_round_trip_signed_and_unsigned():
    _, r, _ = mlp_receipt()
    for x in (r, receipt.sign(r, KEY)):
        data = receipt_codec.encode(x)
        assert receipt_codec.decode(data) == x
        assert receipt_codec.encode(receipt_codec.decode(data)) == data


def test_wire_layout_is_the_documented_one():
    _, r, _ = mlp_receipt()
    wire = msgpack.unpackb(receipt_codec.encode(receipt.sign(r, KEY)))
    assert list(wire) == ["format", "version", "model_hash", "program_root", "inputs", "output_hash", "trace_root",
                          "ops", "signer"]
    assert wire["format"] == "cvmvm-receipt" and wire["version"] == 3
    assert list(wire["inputs"][0]) == ["name", "commitment"] and list(wire["signer"]) == ["public_key", "signature"]
    assert receipt_codec.encode(r)[:1] == b"\x89"  # a map of 9 keys, "signer" nil


# -- signatures -------------------------------------------------------------------------------

def test_signature_is_over_the_tagged_unsigned_bytes():
    _, r, _ = mlp_receipt()
    signed = receipt.sign(r, KEY)
    assert receipt.signature_valid(signed)
    message = b"cvmvm/receipt/v3\x00" + receipt_codec.encode(r)
    assert signed.signing_message() == message
    KEY.public_key().verify(signed.signer.signature, message)
    assert signed.signer.public_key == KEY.public_key().public_bytes_raw()


def test_signature_without_the_domain_tag_is_rejected():
    _, r, _ = mlp_receipt()
    untagged = KEY.sign(receipt_codec.encode(r))
    forged = dataclasses.replace(r, signer=receipt_codec.Signer(KEY.public_key().public_bytes_raw(), untagged))
    assert not receipt.signature_valid(forged)


@pytest.mark.parametrize("field", ["model_hash", "program_root", "output_hash", "trace_root"])
def test_changing_a_signed_field_breaks_the_signature(field):
    _, r, _ = mlp_receipt()
    signed = receipt.sign(r, KEY)
    value = getattr(signed, field)
    tampered = dataclasses.replace(signed, **{field: bytes([value[0] ^ 1]) + value[1:]})
    assert not receipt.signature_valid(tampered)


def test_bad_signature_is_reported_as_signature_mismatch():
    _, r, _ = mlp_receipt()
    signed = receipt.sign(r, KEY)
    bad = dataclasses.replace(signed, signer=dataclasses.replace(signed.signer, signature=bytes(64)))
    assert receipt.mismatches(bad, r) == ("signature",)
    other_key = dataclasses.replace(signed, signer=dataclasses.replace(
        signed.signer, public_key=Ed25519PrivateKey.from_private_bytes(b"\x07" * 32).public_key().public_bytes_raw()))
    assert receipt.mismatches(other_key, r) == ("signature",)
    assert receipt.mismatches(signed, r) == ()


def test_required_signer():
    _, r, _ = mlp_receipt()
    signed = receipt.sign(r, KEY)
    mine = KEY.public_key().public_bytes_raw()
    assert receipt.mismatches(signed, r, mine) == ()
    assert receipt.mismatches(signed, r, b"\x01" * 32) == ("signer",)
    assert receipt.mismatches(r, r, mine) == ("signer",)


def test_every_field_is_compared():
    model, r, _ = mlp_receipt()
    other = receipt.make_receipt(model, model.run({"x": np.array([[1, 2, 3, 4]], dtype=np.int32)}, trace=True))
    assert receipt.mismatches(r, other) == ("inputs", "output_hash", "trace_root")
    assert receipt.mismatches(dataclasses.replace(r, ops=r.ops + 1), r) == ("ops",)
    assert receipt.mismatches(dataclasses.replace(r, model_hash=b"\x00" * 32), r) == ("model_hash",)
    assert receipt.mismatches(dataclasses.replace(r, inputs=(("y", r.inputs[0][1]),)), r) == ("inputs",)
    checks = receipt.check(r, other)
    assert receipt.mismatches(dataclasses.replace(r, program_root=b"\x00" * 32), r) == ("program_root",)
    assert [c.field for c in checks] == ["model_hash", "program_root", "inputs", "output_hash", "trace_root", "ops"]
    assert checks[3].claimed == r.output_hash.hex() and checks[3].actual == other.output_hash.hex()


# -- keys ---------------------------------------------------------------------------------------

def test_keys_in_pem_and_raw_form():
    pem = KEY.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    raw = KEY.private_bytes_raw()
    public = KEY.public_key().public_bytes_raw()
    public_pem = KEY.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert receipt.load_private_key(pem, "k").private_bytes_raw() == raw
    assert receipt.load_private_key(raw, "k").private_bytes_raw() == raw
    assert receipt.load_public_key(public_pem, "k") == public
    assert receipt.load_public_key(public, "k") == public


def test_a_private_key_is_refused_as_a_signer():
    pem = KEY.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    with pytest.raises(CvmError) as e:
        receipt.load_public_key(pem, "k")
    assert e.value.code == "usage.argument"


def test_keygen_writes_a_pair_and_never_overwrites(tmp_path, capsys):
    code, info = cli_json(capsys, ["keygen", str(tmp_path / "k")])
    assert code == 0
    private = receipt.load_private_key((tmp_path / "k").read_bytes(), "k")
    assert receipt.load_public_key((tmp_path / "k.pub").read_bytes(), "k.pub") == private.public_key().public_bytes_raw()
    assert info["public_hex"] == private.public_key().public_bytes_raw().hex()
    assert (tmp_path / "k").stat().st_mode & 0o077 == 0
    before = (tmp_path / "k").read_bytes()
    code, info = cli_json(capsys, ["keygen", str(tmp_path / "k")])
    assert code == EXIT_CODES["usage"] and info["error"] == "usage.argument"
    assert (tmp_path / "k").read_bytes() == before


@pytest.mark.parametrize("data", [b"", b"\x01" * 31, b"\x01" * 33, b"-----BEGIN PRIVATE KEY-----\nnot base64\n"])
def test_malformed_keys_are_rejected(data):
    with pytest.raises(CvmError) as e:
        receipt.load_private_key(data, "k")
    assert e.value.code == "malformed.key"


def test_a_key_of_another_algorithm_is_rejected():
    other = ec.derive_private_key(12345, ec.SECP256R1())
    pem = other.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    public_pem = other.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    for load, data in ((receipt.load_private_key, pem), (receipt.load_public_key, public_pem)):
        with pytest.raises(CvmError) as e:
            load(data, "k")
        assert e.value.code == "malformed.key"


# -- strict decoding ------------------------------------------------------------------------------

def _signed_wire() -> dict:
    _, r, _ = mlp_receipt()
    return receipt_codec.to_wire(receipt.sign(r, KEY))


def _code(data: bytes) -> str:
    with pytest.raises(CvmError) as e:
        receipt_codec.decode(data)
    return e.value.code


def test_noncanonical_receipt_is_rejected():
    wire = _signed_wire()
    data = receipt_codec.encode(receipt_codec.from_wire(wire))
    ops = msgpack.packb(wire["ops"])
    assert len(ops) < 9
    # The same ops as a uint64: decodes to the same receipt, but is not canonical.
    longer = data.replace(b"\xa3ops" + ops, b"\xa3ops\xcf" + wire["ops"].to_bytes(8, "big"))
    assert _code(longer) == "malformed.noncanonical"
    # A str8 header where fixstr is the shortest form.
    assert _code(data.replace(b"\xa6format", b"\xd9\x06format", 1)) == "malformed.noncanonical"


@pytest.mark.parametrize("mutate", [
    lambda w: {k: w[k] for k in reversed(list(w))},                       # keys out of order
    lambda w: {**w, "extra": 1},                                         # unknown key
    lambda w: {k: v for k, v in w.items() if k != "ops"},                # missing key
    lambda w: {**w, "format": "cvmvm-receipt2"},
    lambda w: {**w, "version": True},
    lambda w: {**w, "model_hash": w["model_hash"][:31]},
    lambda w: {**w, "output_hash": w["output_hash"].hex()},
    lambda w: {**w, "ops": -1},
    lambda w: {**w, "ops": (1 << 40) + 1},
    lambda w: {**w, "inputs": [{"commitment": b"\x00" * 32, "name": "x"}]},
    lambda w: {**w, "inputs": [{"name": "x", "hash": b"\x00" * 32}]},          # format 1's key
    lambda w: {**w, "program_root": w["program_root"][:31]},
    lambda w: {**w, "inputs": {"x": b"\x00" * 32}},
    lambda w: {**w, "signer": {"public_key": w["signer"]["public_key"]}},
    lambda w: {**w, "signer": {**w["signer"], "signature": w["signer"]["signature"][:63]}},
    lambda w: {**w, "signer": b""},
])
def test_malformed_receipts_are_rejected(mutate):
    assert _code(msgpack.packb(mutate(_signed_wire()), use_bin_type=True)) == "malformed.receipt"


def test_receipts_of_older_formats_are_refused_by_their_version():
    """A version-1 receipt (its keys differ) or a version-2 one is refused with a message naming its version."""
    wire = {"format": "cvmvm-receipt", "version": 1, "model_hash": b"\x00" * 32,
            "inputs": [{"name": "x", "hash": b"\x00" * 32}], "output_hash": b"\x00" * 32,
            "trace_root": b"\x00" * 32, "ops": 1, "signer": None}
    with pytest.raises(CvmError) as e:
        receipt_codec.decode(msgpack.packb(wire, use_bin_type=True))
    assert e.value.code == "malformed.receipt" and "version 1" in e.value.message
    # Format 2's receipt has this one's keys, and format 2's hashes: refused by its version too.
    with pytest.raises(CvmError) as e:
        receipt_codec.decode(msgpack.packb({**_signed_wire(), "version": 2}, use_bin_type=True))
    assert e.value.code == "malformed.receipt" and "version 2" in e.value.message
    assert _code(msgpack.packb({**_signed_wire(), "version": 4}, use_bin_type=True)) == "malformed.receipt"


def test_truncated_trailing_and_duplicate_keys_are_rejected():
    data = receipt_codec.encode(receipt_codec.from_wire(_signed_wire()))
    assert _code(data[:-1]) == "malformed.receipt"
    assert _code(data + b"\x00") == "malformed.receipt"
    assert _code(b"\x81\xa1a\x01" + data) == "malformed.receipt"
    duplicate = b"\x8a" + data[1:] + b"\xa3ops\x00"
    assert _code(duplicate) == "malformed.receipt"
    assert _code(b"\xcb" + b"\x00" * 8) == "malformed.receipt"  # a float


def test_every_byte_of_a_signed_receipt_matters():
    model, r, _ = mlp_receipt()
    data = receipt_codec.encode(receipt.sign(r, KEY))
    for i in range(len(data)):
        tampered = bytearray(data)
        tampered[i] ^= 0x01
        try:
            claimed = receipt_codec.decode(bytes(tampered))
        except CvmError as e:
            assert e.family in ("malformed", "limit"), (i, e.code)
            continue
        assert receipt.mismatches(claimed, r), i


# -- the command line ----------------------------------------------------------------------------------

@pytest.fixture
def files(tmp_path):
    model, r, inputs = mlp_receipt()
    (tmp_path / "m.cvm").write_bytes(model.canonical_bytes)
    np.save(tmp_path / "x.npy", inputs["x"])
    np.save(tmp_path / "y.npy", np.array([[1, 2, 3, 4]], dtype=np.int32))
    (tmp_path / "key").write_bytes(KEY.private_bytes_raw())
    (tmp_path / "other.pub").write_bytes(b"\x02" * 32)
    return tmp_path


def test_run_writes_a_signed_receipt_that_checks(capsys, files):
    code, info = cli_json(capsys, ["run", str(files / "m.cvm"), "--input", f"x={files / 'x.npy'}",
                                   "--receipt", str(files / "r"), "--sign", str(files / "key")])
    assert code == 0 and info["signer"] == KEY.public_key().public_bytes_raw().hex()
    r = receipt_codec.decode((files / "r").read_bytes())
    assert r.output_hash.hex() == info["output_hash"] and r.trace_root.hex() == info["trace_root"]
    code, info = cli_json(capsys, ["check-receipt", str(files / "r"), "--model", str(files / "m.cvm"),
                                   "--input", f"x={files / 'x.npy'}"])
    assert code == 0 and info["match"]
    assert [f["field"] for f in info["fields"]] == ["model_hash", "program_root", "inputs", "output_hash",
                                                     "trace_root", "ops", "signature"]


def test_check_receipt_reports_each_mismatch(capsys, files):
    main(["run", str(files / "m.cvm"), "--input", f"x={files / 'x.npy'}", "--receipt", str(files / "r")])
    capsys.readouterr()
    code, info = cli_json(capsys, ["check-receipt", str(files / "r"), "--model", str(files / "m.cvm"),
                                   "--input", f"x={files / 'y.npy'}"])
    assert code == 1 and not info["match"] and info["executed"]
    assert [f["field"] for f in info["fields"] if not f["match"]] == ["inputs", "output_hash", "trace_root"]


def test_check_receipt_authenticates_before_it_runs(capsys, files):
    """A receipt without the required signer, or with a bad signature, is not re-executed:
    the model named is never even read."""
    main(["run", str(files / "m.cvm"), "--input", f"x={files / 'x.npy'}", "--receipt", str(files / "r")])
    main(["run", str(files / "m.cvm"), "--input", f"x={files / 'x.npy'}", "--receipt", str(files / "s"),
          "--sign", str(files / "key")])
    data = bytearray((files / "s").read_bytes())
    data[-1] ^= 0x01
    (files / "bad").write_bytes(bytes(data))
    capsys.readouterr()
    for name, signer, failed in (("r", ["--signer", str(files / "other.pub")], ["signer"]),
                                 ("s", ["--signer", str(files / "other.pub")], ["signer"]),
                                 ("bad", [], ["signature"])):
        code, info = cli_json(capsys, ["check-receipt", str(files / name), "--model", str(files / "missing.cvm"),
                                       "--input", f"x={files / 'missing.npy'}", *signer])
        assert code == 1 and not info["match"] and not info["executed"], name
        assert [f["field"] for f in info["fields"] if not f["match"]] == failed, name
        assert "inputs" not in [f["field"] for f in info["fields"]]


def test_check_receipt_rejects_a_tampered_file(capsys, files):
    main(["run", str(files / "m.cvm"), "--input", f"x={files / 'x.npy'}", "--receipt", str(files / "r"),
          "--sign", str(files / "key")])
    data = bytearray((files / "r").read_bytes())
    data[-1] ^= 0x01  # the signature's last byte: still decodes, no longer verifies
    (files / "r").write_bytes(bytes(data))
    capsys.readouterr()
    code, info = cli_json(capsys, ["check-receipt", str(files / "r"), "--model", str(files / "m.cvm"),
                                   "--input", f"x={files / 'x.npy'}"])
    assert code == 1 and [f["field"] for f in info["fields"] if not f["match"]] == ["signature"]
    (files / "r").write_bytes(bytes(data[:-1]))
    code, info = cli_json(capsys, ["check-receipt", str(files / "r"), "--model", str(files / "m.cvm"),
                                   "--input", f"x={files / 'x.npy'}"])
    assert code == EXIT_CODES["malformed"] and info["error"] == "malformed.receipt"


def test_sign_needs_receipt_and_a_valid_key(capsys, files):
    (files / "bad.key").write_bytes(b"nope")
    assert main(["run", str(files / "m.cvm"), "--input", f"x={files / 'x.npy'}",
                 "--sign", str(files / "key")]) == EXIT_CODES["usage"]
    code, info = cli_json(capsys, ["run", str(files / "m.cvm"), "--input", f"x={files / 'x.npy'}",
                                   "--receipt", str(files / "r"), "--sign", str(files / "bad.key")])
    assert code == EXIT_CODES["malformed"] and info["error"] == "malformed.key"


def test_keygen_writes_both_files_or_neither(tmp_path, capsys):
    # Defect: KEY was written before KEY.pub failed (a name 255 bytes long with ".pub"), and a retry
    # then refused to overwrite the lone private key.
    key = tmp_path / ("k" * 252)
    code, info = cli_json(capsys, ["keygen", str(key)])
    assert code == EXIT_CODES["io"] and info["error"] == "io.write"
    assert list(tmp_path.iterdir()) == []
    key = tmp_path / ("k" * 251)     # KEY.pub: 255 bytes, the most a name may have
    code, info = cli_json(capsys, ["keygen", str(key)])
    assert code == 0 and sorted(p.name for p in tmp_path.iterdir()) == [key.name, key.name + ".pub"]


def test_keygen_sees_a_key_written_after_it_started(tmp_path, monkeypatch, capsys):
    """Two keygens at once both wrote and both printed a public key, one matching no file: whether
    the key exists was asked before the directory's lock.  It is asked under it."""
    from cvmvm import files
    key = tmp_path / "k"
    commit = files.Outputs.commit

    def another_keygen_first(self):
        key.write_bytes(b"the other's key")
        (tmp_path / "k.pub").write_bytes(b"the other's public key")
        commit(self)
    monkeypatch.setattr(files.Outputs, "commit", another_keygen_first)
    code, info = cli_json(capsys, ["keygen", str(key)])
    assert code == EXIT_CODES["usage"] and info["error"] == "usage.argument" and "never overwrites" in info["message"]
    assert key.read_bytes() == b"the other's key" and (tmp_path / "k.pub").read_bytes() == b"the other's public key"


def test_keygen_after_a_killed_keygen_completes_its_pair(tmp_path, capsys):
    """Killed between its two renames, keygen left a private key without its public key, and a rerun
    refused (the key exists) without finishing the unit: the pair stayed broken."""
    import os
    key = tmp_path / "k"
    pid = os.fork()
    if pid == 0:
        real = os.replace

        def replace(src, dst):
            if str(dst).endswith(".pub"):
                os._exit(99)
            return real(src, dst)
        os.replace = replace
        try:
            receipt.keygen(key)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert key.exists() and not (tmp_path / "k.pub").exists()
    code, info = cli_json(capsys, ["keygen", str(key)])
    assert code == EXIT_CODES["usage"] and info["error"] == "usage.argument"
    private = receipt.load_private_key(key.read_bytes(), "k")
    assert receipt.load_public_key((tmp_path / "k.pub").read_bytes(), "k.pub") == \
        private.public_key().public_bytes_raw()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k", "k.pub"]
