"""The receipt record and its codec (docs/FORMAT.md section 7).

A receipt commits to the model hash, the program root, the commitment of every
input as the program read it (its trace entry), the output hash, the trace root
and the ops, in one
canonical msgpack record, with an optional Ed25519 signer: the public key and
the signature of ``signing_message()``.  Making, signing and checking receipts
is cvmvm.tx.receipt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, overload

from isa.types import MAX_OPS
from serializer import strict
from serializer.hashing import HASH_SIZE
from serializer.strict import Reader, pack

RECEIPT_FORMAT = "cvmvm-receipt"
RECEIPT_VERSION = 3
SIGN_TAG = b"cvmvm/receipt/v3\x00"
MAX_RECEIPT_BYTES = 1 << 24
PUBLIC_KEY_SIZE = 32
SIGNATURE_SIZE = 64

KEYS = ("format", "version", "model_hash", "program_root", "inputs", "output_hash", "trace_root", "ops", "signer")
INPUT_KEYS = ("name", "commitment")
SIGNER_KEYS = ("public_key", "signature")

_READER = Reader("receipt")


@dataclass(frozen=True)
class Signer:
    public_key: bytes  # raw Ed25519 public key
    signature: bytes   # Ed25519 signature of signing_message()


@dataclass(frozen=True)
class Receipt:
    model_hash: bytes
    program_root: bytes
    inputs: tuple[tuple[str, bytes], ...]  # (input name, tensor commitment), in the model's input order
    output_hash: bytes
    trace_root: bytes
    ops: int
    signer: Signer | None = None

    def signing_message(self) -> bytes:
        """What the executing node signs: the tag, then the receipt's canonical bytes with signer nil
        (``encode(replace(self, signer=None))``, without making that receipt: a signed replay
        makes one message per transaction)."""
        return SIGN_TAG + pack(_wire(self, None))


def to_wire(r: Receipt) -> dict[str, Any]:
    return _wire(r, None if r.signer is None else {"public_key": r.signer.public_key,
                                                   "signature": r.signer.signature})


def _wire(r: Receipt, signer: dict[str, bytes] | None) -> dict[str, Any]:
    return {
        "format": RECEIPT_FORMAT,
        "version": RECEIPT_VERSION,
        "model_hash": r.model_hash,
        "program_root": r.program_root,
        "inputs": [{"name": name, "commitment": digest} for name, digest in r.inputs],
        "output_hash": r.output_hash,
        "trace_root": r.trace_root,
        "ops": r.ops,
        "signer": signer,
    }


def encode(r: Receipt) -> bytes:
    return pack(to_wire(r))


def from_wire(top: Any, rd: Reader = _READER) -> Receipt:
    """A receipt map, checked; failures carry ``rd``'s reason (a receipt inside another record
    is malformed as that record)."""
    rd.version(top, RECEIPT_FORMAT, RECEIPT_VERSION, "receipt")
    top = rd.map(top, KEYS, "receipt")
    rd.const(top["format"], RECEIPT_FORMAT, "format")
    rd.const(top["version"], RECEIPT_VERSION, "version")
    inputs = []
    for k, e in enumerate(rd.list(top["inputs"], "inputs")):
        e = rd.map(e, INPUT_KEYS, f"inputs[{k}]")
        inputs.append((rd.str(e["name"], f"inputs[{k}].name"),
                       rd.bin(e["commitment"], f"inputs[{k}].commitment", HASH_SIZE)))
    signer = None
    if top["signer"] is not None:
        s = rd.map(top["signer"], SIGNER_KEYS, "signer")
        signer = Signer(rd.bin(s["public_key"], "signer.public_key", PUBLIC_KEY_SIZE),
                        rd.bin(s["signature"], "signer.signature", SIGNATURE_SIZE))
    return Receipt(rd.bin(top["model_hash"], "model_hash", HASH_SIZE),
                   rd.bin(top["program_root"], "program_root", HASH_SIZE), tuple(inputs),
                   rd.bin(top["output_hash"], "output_hash", HASH_SIZE),
                   rd.bin(top["trace_root"], "trace_root", HASH_SIZE),
                   rd.int(top["ops"], "ops", 0, MAX_OPS), signer)


def decode(data: bytes) -> Receipt:
    """Bytes -> Receipt; anything but the canonical encoding of a well-formed receipt is refused."""
    return strict.decode(data, _READER, MAX_RECEIPT_BYTES, "receipt", from_wire, to_wire)


# Receipts cross process boundaries (replay's workers) as plain tuples, which
# pickle several times faster than nested dataclasses.

def receipt_state(r: Receipt) -> tuple[Any, ...]:
    signer = None if r.signer is None else (r.signer.public_key, r.signer.signature)
    return (r.model_hash, r.program_root, r.inputs, r.output_hash, r.trace_root, r.ops, signer)


@overload
def receipt_from_state(state: tuple[Any, ...]) -> Receipt: ...
@overload
def receipt_from_state(state: tuple[Any, ...] | None) -> Receipt | None: ...


def receipt_from_state(state: tuple[Any, ...] | None) -> Receipt | None:
    if state is None:
        return None
    model_hash, program_root, inputs, output_hash, trace_root, ops, signer = state
    return Receipt(model_hash, program_root, inputs, output_hash, trace_root, ops,
                   None if signer is None else Signer(*signer))
