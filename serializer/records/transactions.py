"""The transaction file: a list of transactions, each a model hash, its inputs and a claimed
receipt (docs/FORMAT.md section 7); strict and canonical, like a native model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from serializer import strict
from serializer.hashing import HASH_SIZE
from serializer.records import receipt
from serializer.records.receipt import Receipt, receipt_from_state, receipt_state
from serializer.strict import Reader, pack, tensor_to_wire

TXS_FORMAT = "cvmvm-txs"
TXS_VERSION = 1
TOP_KEYS = ("format", "version", "txs")
TX_KEYS = ("model", "inputs", "receipt")
TX_INPUT_KEYS = ("name", "dtype", "shape", "data")

MAX_TXS_BYTES = 1 << 32

_READER = Reader("txs")

# Transactions cross process boundaries (replay's workers) as plain tuples and
# bytes, which pickle several times faster than arrays and nested dataclasses.

def _transaction(model_hash: bytes, inputs: tuple[tuple[str, str, tuple[int, ...], bytes], ...],
                 claimed: tuple[Any, ...]) -> Transaction:
    return Transaction(model_hash, tuple((n, np.frombuffer(data, dtype=np.dtype(dt)).reshape(shape))
                                         for n, dt, shape, data in inputs), receipt_from_state(claimed))


@dataclass(frozen=True)
class Transaction:
    model_hash: bytes
    inputs: tuple[tuple[str, np.ndarray], ...]  # (name, value) as the transaction gives them
    receipt: Receipt                            # what the executing node claims

    def __reduce__(self) -> tuple[Any, ...]:
        return (_transaction, (self.model_hash, tuple((n, v.dtype.str, v.shape, v.tobytes()) for n, v in self.inputs),
                               receipt_state(self.receipt)))


def _tx_wire(tx: Transaction) -> dict[str, Any]:
    return {"model": tx.model_hash,
            "inputs": [{"name": name, **tensor_to_wire(value)} for name, value in tx.inputs],
            "receipt": receipt.to_wire(tx.receipt)}


def _txs_wire(txs: Iterable[Transaction]) -> dict[str, Any]:
    return {"format": TXS_FORMAT, "version": TXS_VERSION, "txs": [_tx_wire(tx) for tx in txs]}


def encode_txs(txs: Iterable[Transaction]) -> bytes:
    return pack(_txs_wire(txs))


def _tx_from_wire(e: Any, where: str) -> Transaction:
    rd = _READER
    e = rd.map(e, TX_KEYS, where)
    inputs = []
    names: set[str] = set()
    for k, i in enumerate(rd.list(e["inputs"], f"{where}.inputs")):
        w = f"{where}.inputs[{k}]"
        i = rd.map(i, TX_INPUT_KEYS, w)
        name = rd.str(i["name"], f"{w}.name")
        if name in names:
            raise rd.fail(f"{w}: input {name!r} given twice")
        names.add(name)
        inputs.append((name, rd.tensor(i, w)))
    return Transaction(rd.bin(e["model"], f"{where}.model", HASH_SIZE), tuple(inputs),
                       receipt.from_wire(e["receipt"], rd))


def _txs_from_wire(top: Any) -> list[Transaction]:
    top = _READER.map(top, TOP_KEYS, "txs file")
    _READER.const(top["format"], TXS_FORMAT, "format")
    _READER.const(top["version"], TXS_VERSION, "version")
    return [_tx_from_wire(e, f"txs[{k}]") for k, e in enumerate(_READER.list(top["txs"], "txs"))]


def decode_txs(data: bytes) -> list[Transaction]:
    """A transaction file -> its transactions; strict and canonical, like a native model."""
    return strict.decode(data, _READER, MAX_TXS_BYTES, "transaction file", _txs_from_wire, _txs_wire)
