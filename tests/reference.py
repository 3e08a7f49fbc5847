"""Readers for the reference vectors copied into fixtures/ (no ../shared needed)."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from typing import Any, Iterator

import numpy as np

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

CVM_FAMILIES = ("broadcast", "divergence", "elemwise", "error", "format", "model",
                "nn", "reduce", "transform", "undefined", "vision")


def read_jsonl_gz(path: Path) -> Iterator[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def cvm_cases(family: str | None = None) -> list[dict[str, Any]]:
    """Cortex reference cases, of one family or all, in file order."""
    families = (family,) if family else CVM_FAMILIES
    return [c for fam in families for c in read_jsonl_gz(FIXTURES / "reference" / "cvm" / f"{fam}.jsonl.gz")]


def maxpool_cases() -> list[dict[str, Any]]:
    return list(read_jsonl_gz(FIXTURES / "reference" / "maxpool" / "cases.jsonl.gz"))


def case_params(case: dict[str, Any]) -> bytes | None:
    """A Cortex reference case's params file, or None when it has none."""
    return base64.b64decode(case["params_b64"]) if case["params_b64"] is not None else None


def case_inputs(case: dict[str, Any], input_names: Any) -> dict[str, np.ndarray]:
    """The case's ``data`` input (raw, before clipping), when it has one and the model takes it."""
    d = case["data"]
    if d is None or "data" not in input_names:
        return {}
    return {"data": decode_array(d["int32_le_b64"], "<i4", d["shape"])}


def decode_array(b64: str, dtype: str, shape: list[int]) -> np.ndarray:
    """Raw little-endian bytes (base64) -> array of the VM's (native) dtype, as every decoder does."""
    wire = np.dtype(dtype).newbyteorder("<")
    return np.frombuffer(base64.b64decode(b64), dtype=wire).reshape(shape).astype(wire.newbyteorder("="))
