"""Receipts: what one run of a model on some inputs produced, optionally signed.

A receipt commits to the model hash, the hash of every input as the program
read it (its trace entry), the output hash, the trace root and the ops, in one
canonical msgpack record (docs/FORMAT.md section 6).  The executing node may
sign it with Ed25519 over a domain-separated message; the public key travels in
the receipt, so anyone can check the signature, and ``signer=`` pins whose it
must be.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from isa.errors import MalformedError
from serializer import strict
from serializer.hashing import HASH_SIZE
from serializer.strict import Reader, pack
from cvmvm.vm.api import Model, Result
from cvmvm.vm.verify import MAX_OPS

RECEIPT_FORMAT = "cvmvm-receipt"
RECEIPT_VERSION = 1
SIGN_TAG = b"cvmvm/receipt/v1\x00"
MAX_RECEIPT_BYTES = 1 << 24
PUBLIC_KEY_SIZE = 32
SIGNATURE_SIZE = 64

KEYS = ("format", "version", "model_hash", "inputs", "output_hash", "trace_root", "ops", "signer")
INPUT_KEYS = ("name", "hash")
SIGNER_KEYS = ("public_key", "signature")

# The fields a re-execution recomputes, in report order; "signature" and
# "signer" are checked on the claim alone.
FIELDS = ("model_hash", "inputs", "output_hash", "trace_root", "ops")

_READER = Reader("receipt")


@dataclass(frozen=True)
class Signer:
    public_key: bytes  # raw Ed25519 public key
    signature: bytes   # Ed25519 signature of signing_message()


@dataclass(frozen=True)
class Receipt:
    model_hash: bytes
    inputs: tuple[tuple[str, bytes], ...]  # (input name, tensor hash), in the model's input order
    output_hash: bytes
    trace_root: bytes
    ops: int
    signer: Signer | None = None

    def signing_message(self) -> bytes:
        """What the executing node signs: the tag, then the receipt's canonical bytes with signer nil."""
        return SIGN_TAG + encode(replace(self, signer=None))


def to_wire(r: Receipt) -> dict[str, Any]:
    return {
        "format": RECEIPT_FORMAT,
        "version": RECEIPT_VERSION,
        "model_hash": r.model_hash,
        "inputs": [{"name": name, "hash": digest} for name, digest in r.inputs],
        "output_hash": r.output_hash,
        "trace_root": r.trace_root,
        "ops": r.ops,
        "signer": None if r.signer is None else {"public_key": r.signer.public_key,
                                                  "signature": r.signer.signature},
    }


def encode(r: Receipt) -> bytes:
    return pack(to_wire(r))


def from_wire(top: Any, rd: Reader = _READER) -> Receipt:
    """A receipt map, checked; failures carry ``rd``'s reason (a receipt inside another record
    is malformed as that record)."""
    top = rd.map(top, KEYS, "receipt")
    rd.const(top["format"], RECEIPT_FORMAT, "format")
    rd.const(top["version"], RECEIPT_VERSION, "version")
    inputs = []
    for k, e in enumerate(rd.list(top["inputs"], "inputs")):
        e = rd.map(e, INPUT_KEYS, f"inputs[{k}]")
        inputs.append((rd.str(e["name"], f"inputs[{k}].name"), rd.bin(e["hash"], f"inputs[{k}].hash", HASH_SIZE)))
    signer = None
    if top["signer"] is not None:
        s = rd.map(top["signer"], SIGNER_KEYS, "signer")
        signer = Signer(rd.bin(s["public_key"], "signer.public_key", PUBLIC_KEY_SIZE),
                        rd.bin(s["signature"], "signer.signature", SIGNATURE_SIZE))
    return Receipt(rd.bin(top["model_hash"], "model_hash", HASH_SIZE), tuple(inputs),
                   rd.bin(top["output_hash"], "output_hash", HASH_SIZE),
                   rd.bin(top["trace_root"], "trace_root", HASH_SIZE),
                   rd.int(top["ops"], "ops", 0, MAX_OPS), signer)


def decode(data: bytes) -> Receipt:
    """Bytes -> Receipt; anything but the canonical encoding of a well-formed receipt is refused."""
    return strict.decode(data, _READER, MAX_RECEIPT_BYTES, "receipt", from_wire, to_wire)


def make_receipt(model: Model, result: Result) -> Receipt:
    """The unsigned receipt of a traced run of ``model``."""
    if result.trace is None:
        raise ValueError("a receipt needs a traced run (Model.run(..., trace=True))")
    names = [i.name for i in model.program.model.inputs]
    # Trace entries start with the inputs, in input order, hashed as the program read them.
    inputs = tuple((name, e.digest) for name, e in zip(names, result.trace.entries))
    return Receipt(model.model_hash, inputs, result.output_hash, result.trace.root, result.ops)


# -- signatures ----------------------------------------------------------------

def sign(r: Receipt, key: Ed25519PrivateKey) -> Receipt:
    unsigned = replace(r, signer=None)
    public = key.public_key().public_bytes_raw()
    return replace(r, signer=Signer(public, key.sign(unsigned.signing_message())))


def signature_valid(r: Receipt) -> bool:
    """Whether a signed receipt's signature verifies under the public key it carries."""
    if r.signer is None:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(r.signer.public_key).verify(r.signer.signature, r.signing_message())
    except (InvalidSignature, ValueError):
        return False
    return True


def load_private_key(data: bytes, what: str) -> Ed25519PrivateKey:
    """An Ed25519 private key: PEM (PKCS#8, unencrypted) or the raw 32-byte seed."""
    if data.lstrip().startswith(b"-----BEGIN"):
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm) as e:
            raise MalformedError("key", f"{what}: not an unencrypted PEM private key ({e})") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise MalformedError("key", f"{what}: a {type(key).__name__}, not an Ed25519 key")
        return key
    if len(data) != 32:
        raise MalformedError("key", f"{what}: {len(data)} bytes; expected PEM or a raw 32-byte Ed25519 key")
    return Ed25519PrivateKey.from_private_bytes(data)


def load_public_key(data: bytes, what: str) -> bytes:
    """A raw Ed25519 public key from PEM (public, or private to derive it) or the raw 32 bytes."""
    if data.lstrip().startswith(b"-----BEGIN") and b"PRIVATE KEY" in data:
        return load_private_key(data, what).public_key().public_bytes_raw()
    if data.lstrip().startswith(b"-----BEGIN"):
        try:
            key = serialization.load_pem_public_key(data)
        except (ValueError, UnsupportedAlgorithm) as e:
            raise MalformedError("key", f"{what}: not a PEM public key ({e})") from None
        if not isinstance(key, Ed25519PublicKey):
            raise MalformedError("key", f"{what}: a {type(key).__name__}, not an Ed25519 key")
        return key.public_bytes_raw()
    if len(data) != PUBLIC_KEY_SIZE:
        raise MalformedError("key", f"{what}: {len(data)} bytes; expected PEM or a raw 32-byte Ed25519 key")
    return data


# -- comparing a claim with a re-execution --------------------------------------

@dataclass(frozen=True)
class FieldCheck:
    field: str
    ok: bool
    claimed: Any
    actual: Any


def _hexed(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, tuple):
        return [{"name": n, "hash": d.hex()} for n, d in value]
    return value


def _verdicts(claimed: Receipt, actual: Receipt, signer: bytes | None) -> list[tuple[str, bool]]:
    """(field, holds): the recomputed fields, then the signature (when signed), then the
    signer (when one is required)."""
    verdicts = [(f, getattr(claimed, f) == getattr(actual, f)) for f in FIELDS]
    if claimed.signer is not None:
        verdicts.append(("signature", signature_valid(claimed)))
    if signer is not None:
        verdicts.append(("signer", claimed.signer is not None and claimed.signer.public_key == signer))
    return verdicts


def check(claimed: Receipt, actual: Receipt, signer: bytes | None = None) -> list[FieldCheck]:
    """Field by field, with the claimed and actual values as JSON-ready data."""
    shown = {f: (_hexed(getattr(claimed, f)), _hexed(getattr(actual, f))) for f in FIELDS}
    if claimed.signer is not None:
        shown["signature"] = (claimed.signer.signature.hex(), None)
        shown["signer"] = (claimed.signer.public_key.hex(), None if signer is None else signer.hex())
    else:
        shown["signer"] = (None, None if signer is None else signer.hex())
    checks = []
    for field, ok in _verdicts(claimed, actual, signer):
        claimed_value, actual_value = shown[field]
        if field == "signature":
            actual_value = "valid" if ok else "invalid"
        checks.append(FieldCheck(field, ok, claimed_value, actual_value))
    return checks


def mismatches(claimed: Receipt, actual: Receipt, signer: bytes | None = None) -> tuple[str, ...]:
    """The names of the fields that do not hold, in report order."""
    return tuple(field for field, ok in _verdicts(claimed, actual, signer) if not ok)
