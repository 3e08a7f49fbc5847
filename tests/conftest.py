"""Shared fixtures: one directory holding a file of every kind cvmvm reads, made through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serializer.records import transactions
from serializer.records.receipt import decode as decode_receipt
from cvmvm.cli.main import main


def cvmvm_json(capsys, argv: list[str]) -> tuple[int, dict]:
    """Run the command line in this process with --json; the exit status and the JSON object."""
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture(scope="session")
def demo_files(tmp_path_factory) -> Path:
    """digits.cvm, image0/1.npy, digits.json + digits.params, run0.receipt, run0.json, run0.jsonl,
    run1.jsonl, step3.proof, one.txs, models/ (a store) -- all from the demo's model."""
    d = tmp_path_factory.mktemp("demo")
    steps = [
        ["demo", "--export", str(d)],
        ["convert", str(d / "digits.cvm"), str(d / "digits.json")],
        ["run", str(d / "digits.cvm"), "--input", f"data={d / 'image0.npy'}", "--trace", str(d / "run0.json"),
         "--receipt", str(d / "run0.receipt")],
        ["run", str(d / "digits.cvm"), "--input", f"data={d / 'image0.npy'}", "--trace", str(d / "run0.jsonl")],
        ["run", str(d / "digits.cvm"), "--input", f"data={d / 'image1.npy'}", "--trace", str(d / "run1.jsonl")],
        ["prove-step", str(d / "digits.cvm"), "--input", f"data={d / 'image0.npy'}", "--step", "3",
         "--out", str(d / "step3.proof")],
        ["store", "add", str(d / "models"), str(d / "digits.cvm")],
    ]
    for argv in steps:
        assert main(argv) == 0, argv
    import numpy as np
    r = decode_receipt((d / "run0.receipt").read_bytes())
    tx = transactions.Transaction(r.model_hash, (("data", np.load(d / "image0.npy")),), r)
    (d / "one.txs").write_bytes(transactions.encode_txs([tx]))
    return d
