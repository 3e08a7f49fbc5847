"""Generate a digits transaction file for ``cvmvm replay``, some transactions bad on purpose.

    python scripts/make_txs.py OUT_DIR [--count 10000]

Writes OUT_DIR/store/ (a model store holding the digits model), OUT_DIR/txs.cvmtx
(the transactions), OUT_DIR/expected.json (which transactions are bad, how,
and what replay must report for them) and OUT_DIR/signer.pub (the raw public
key every receipt is signed with).

Everything is deterministic: transaction i uses test image i mod 297 with one
pixel changed (position and value from SHAKE-256 of i), so nearly every run is
distinct; the signing key is SHAKE-256 of a label; transaction i is bad when
i mod 32 == 7, its kind cycling through KINDS.  A bad receipt is re-signed after
it is altered, so it fails in exactly one field.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

REPO = Path(__file__).resolve().parent.parent
DIGITS = REPO / "fixtures" / "models" / "digits"

BAD_EVERY, BAD_AT = 32, 7
KINDS = ("output_hash", "trace_root", "ops", "signature", "unknown_model", "malformed_input")
UNKNOWN_MODEL = hashlib.sha256(b"cvmvm/make_txs/unknown model").digest()


def shake(label: str, n: int) -> bytes:
    return hashlib.shake_256(f"cvmvm/make_txs/{label}".encode()).digest(n)


def bad_kind(i: int) -> str | None:
    return KINDS[(i // BAD_EVERY) % len(KINDS)] if i % BAD_EVERY == BAD_AT else None


def image(images: np.ndarray, i: int) -> np.ndarray:
    x = images[i % len(images)].copy()
    pos, value = shake(f"pixel {i}", 2)
    x.reshape(-1)[pos % x.size] = value % 128
    return x


def _flip(digest: bytes) -> bytes:
    return bytes([digest[0] ^ 0xFF]) + digest[1:]


def generate(out: Path, count: int) -> dict:
    """Write the store, the transactions, the expectations and the public key; return the expectations."""
    # Imported here: run as a script, the repository is put on sys.path first.
    from cvmvm import load_cortex
    from serializer.records import transactions
    from cvmvm.tx import receipt, replay
    from cvmvm.tx.store import Store

    model = load_cortex(gzip.decompress((DIGITS / "graph.json.gz").read_bytes()),
                        gzip.decompress((DIGITS / "params.bin.gz").read_bytes()))
    images = np.load(DIGITS / "test_inputs.npy", allow_pickle=False)
    out.mkdir(parents=True, exist_ok=True)
    model_hash = Store(out / "store").add(model)
    key = Ed25519PrivateKey.from_private_bytes(shake("signing key", 32))
    name = next(iter(model.inputs))
    inputs = [image(images, i) for i in range(count)]
    runs = replay.Replayer(lambda h: model).execute(model_hash, [[x] for x in inputs])

    txs, bad = [], []
    for i, (x, r) in enumerate(zip(inputs, runs)):
        kind = bad_kind(i)
        tx_model, tx_input, expect = model_hash, x, None
        if kind in ("output_hash", "trace_root"):
            r = dataclasses.replace(r, **{kind: _flip(getattr(r, kind))})
        elif kind == "ops":
            r = dataclasses.replace(r, ops=r.ops + 1)
        r = receipt.sign(r, key)
        if kind == "signature":
            r = dataclasses.replace(r, signer=dataclasses.replace(r.signer, signature=_flip(r.signer.signature)))
        if kind in ("output_hash", "trace_root", "ops", "signature"):
            expect = {"status": "mismatch", "fields": [kind]}
        elif kind == "unknown_model":
            tx_model, expect = UNKNOWN_MODEL, {"status": "error", "error": "input.unknown_model"}
        elif kind == "malformed_input":
            if (i // BAD_EVERY // len(KINDS)) % 2 == 0:
                tx_input, expect = x[..., :-1].copy(), {"status": "error", "error": "input.shape"}
            else:
                tx_input, expect = x.astype(np.float32), {"status": "error", "error": "input.dtype"}
        if kind is not None:
            bad.append({"index": i, "kind": kind, **expect})
        txs.append(transactions.Transaction(tx_model, ((name, tx_input),), r))

    (out / "txs.cvmtx").write_bytes(transactions.encode_txs(txs))
    (out / "signer.pub").write_bytes(key.public_key().public_bytes_raw())
    expected = {"count": count, "model_hash": model_hash.hex(), "bad": bad}
    (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    return expected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="output directory")
    parser.add_argument("--count", type=int, default=10_000, help="transactions (default 10000)")
    args = parser.parse_args(argv)
    expected = generate(args.out, args.count)
    kinds = {k: sum(b["kind"] == k for b in expected["bad"]) for k in KINDS}
    print(f"{args.count} transactions, {len(expected['bad'])} bad: {kinds} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
