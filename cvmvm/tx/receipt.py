"""Receipts: make one from a traced run, sign it, check a claim against a re-execution.

The record and its bytes are serializer.records.receipt.  The executing node
may sign a receipt with Ed25519 over a domain-separated message; the public key
travels in the receipt, so anyone can check the signature, and ``signer=`` pins
whose it must be.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from isa.errors import MalformedError, UsageError
from serializer.records.receipt import PUBLIC_KEY_SIZE, Receipt, Signer
from cvmvm import files
from cvmvm.vm.api import Model, Result
from cvmvm.tx import ed25519

# The fields a re-execution recomputes, in report order; "signature" and
# "signer" are checked on the claim alone.
FIELDS = ("model_hash", "program_root", "inputs", "output_hash", "trace_root", "ops")


def make_receipt(model: Model, result: Result) -> Receipt:
    """The unsigned receipt of a traced run of ``model``."""
    if result.trace is None:
        raise ValueError("a receipt needs a traced run (Model.run(..., trace=True))")
    names = [i.name for i in model.program.model.inputs]
    # Trace entries start with the inputs, in input order, committed as the program read them.
    inputs = tuple((name, e.commitment) for name, e in zip(names, result.trace.entries))
    return Receipt(model.model_hash, model.program_root, inputs, result.output_hash, result.trace.root, result.ops)


# -- signatures ----------------------------------------------------------------

def sign(r: Receipt, key: Ed25519PrivateKey) -> Receipt:
    unsigned = replace(r, signer=None)
    public = key.public_key().public_bytes_raw()
    return replace(r, signer=Signer(public, key.sign(unsigned.signing_message())))


def signature_valid(r: Receipt) -> bool:
    """Whether a signed receipt's signature verifies under the public key it carries, by
    FORMAT.md section 7's rule (cvmvm.tx.ed25519)."""
    return r.signer is not None and ed25519.valid(r.signer.public_key, r.signer.signature, r.signing_message())


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
    """A raw Ed25519 public key from PEM or the raw 32 bytes.  A private key is refused: a
    signer is named by its public key, and a private key has no business on a verifier."""
    if data.lstrip().startswith(b"-----BEGIN") and b"PRIVATE KEY" in data:
        raise UsageError("argument", f"{what} is a private key; give the signer's public key instead "
                                     f"({what}.pub, if cvmvm keygen wrote it)")
    if data.lstrip().startswith(b"-----BEGIN"):
        try:
            key = serialization.load_pem_public_key(data)
        except (ValueError, UnsupportedAlgorithm) as e:
            raise MalformedError("key", f"{what}: not a PEM public key ({e})") from None
        if not isinstance(key, Ed25519PublicKey):
            raise MalformedError("key", f"{what}: a {type(key).__name__}, not an Ed25519 key")
        raw = key.public_bytes_raw()
    elif len(data) != PUBLIC_KEY_SIZE:
        raise MalformedError("key", f"{what}: {len(data)} bytes; expected PEM or a raw 32-byte Ed25519 key")
    else:
        raw = data
    if not ed25519.key_well_formed(raw):
        raise MalformedError("key", f"{what}: not a canonical encoding of a point of large order, so no "
                                    f"signature is valid under it (FORMAT.md section 7)")
    return raw


def keygen(path: Path) -> bytes:
    """Write a new Ed25519 key pair: ``path`` (PKCS#8 PEM, readable by its owner only) and
    ``path.pub`` (SubjectPublicKeyInfo PEM); never over an existing file.  Returns the raw public key."""
    public = Path(str(path) + ".pub")
    # Both files checked first and written as one unit: never a private key without its public one.
    # Whether they exist is asked at commit, under the directory's lock and after a killed keygen's
    # unit is finished: asked before, two keygens both wrote, and one's public key matched no file.
    outputs = files.Outputs()
    keys = (outputs.file(path, "KEY", fresh="keygen never overwrites a key"),
            outputs.file(public, "KEY.pub", fresh="keygen never overwrites a key"))
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
    outputs.put(keys[0], private_pem, mode=0o600)
    outputs.put(keys[1], public_pem)
    outputs.commit()
    return key.public_key().public_bytes_raw()


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
        return [{"name": n, "commitment": d.hex()} for n, d in value]
    return value


def _authentication(claimed: Receipt, signer: bytes | None) -> list[tuple[str, bool]]:
    """(field, holds) for the signature (when signed) and the signer (when one is required)."""
    verdicts = []
    if claimed.signer is not None:
        verdicts.append(("signature", signature_valid(claimed)))
    if signer is not None:
        verdicts.append(("signer", claimed.signer is not None and claimed.signer.public_key == signer))
    return verdicts


def _recomputed(claimed: Receipt, actual: Receipt | None) -> list[tuple[str, bool]]:
    """(field, holds) for the fields a re-execution recomputes (none without one)."""
    return [] if actual is None else [(f, getattr(claimed, f) == getattr(actual, f)) for f in FIELDS]


def _verdicts(claimed: Receipt, actual: Receipt | None, signer: bytes | None) -> list[tuple[str, bool]]:
    """(field, holds): the recomputed fields, then the signature (when signed), then the signer
    (when one is required)."""
    return _recomputed(claimed, actual) + _authentication(claimed, signer)


def unauthenticated(claimed: Receipt, signer: bytes | None = None) -> tuple[str, ...]:
    """The fields of the claim alone that do not hold: a bad signature, a missing or other signer.
    Checked before anything is re-executed: an unauthenticated receipt costs no computation."""
    return tuple(field for field, ok in _authentication(claimed, signer) if not ok)


def check(claimed: Receipt, actual: Receipt | None, signer: bytes | None = None) -> list[FieldCheck]:
    """Field by field, with the claimed and actual values as JSON-ready data; without a
    re-execution (``actual`` None), the signature and signer only."""
    shown = {} if actual is None else {f: (_hexed(getattr(claimed, f)), _hexed(getattr(actual, f))) for f in FIELDS}
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


def _inputs_text(claimed: Any, actual: Any) -> str:
    claimed_names = [e["name"] for e in claimed]
    actual_names = [e["name"] for e in actual]
    if claimed_names != actual_names:
        return (f"the receipt lists inputs {', '.join(claimed_names) or 'none'}; "
                f"the model takes {', '.join(actual_names)}")
    differ = [f"input {c['name']} commits to {a['commitment']}, the receipt claims {c['commitment']}"
              for c, a in zip(claimed, actual) if c["commitment"] != a["commitment"]]
    if differ:
        return "; ".join(differ)
    return "every input commits as claimed (" + ", ".join(f"{c['name']} {c['commitment']}" for c in claimed) + ")"


def explain(c: FieldCheck) -> str:
    """One check in words: what holds, or what the receipt claims against what was found."""
    if c.field == "inputs":
        return _inputs_text(c.claimed, c.actual)
    if c.field == "signature":
        return ("the signature verifies under the receipt's public key" if c.ok else
                "the signature does not verify under the receipt's public key: the receipt was changed after "
                "it was signed, or signed by another key")
    if c.field == "signer":
        if c.ok:
            return f"signed by {c.claimed}, as --signer requires"
        if c.claimed is None:
            return f"the receipt is unsigned; --signer requires {c.actual}"
        return f"signed by {c.claimed}; --signer requires {c.actual}"
    if c.ok:
        return str(c.actual)
    return f"the receipt claims {c.claimed}; re-execution gives {c.actual}"


def mismatches(claimed: Receipt, actual: Receipt, signer: bytes | None = None) -> tuple[str, ...]:
    """The names of the fields that do not hold, in report order."""
    return tuple(field for field, ok in _verdicts(claimed, actual, signer) if not ok)


def recomputed_mismatches(claimed: Receipt, actual: Receipt) -> tuple[str, ...]:
    """The recomputed fields that do not hold.  For a claim already authenticated: its
    signature is not verified a second time (it is most of a signed replay's cost)."""
    return tuple(field for field, ok in _recomputed(claimed, actual) if not ok)
