"""Shared fixtures: one directory holding a file of every kind cvmvm reads, made through the CLI;
the ``platforms`` marker, what this host computes for tests/records.py, and the report of what
platforms ran."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from serializer.records import transactions
from serializer.records.receipt import decode as decode_receipt
from cvmvm.cli.main import main
from tests import platforms


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "platforms: builds and runs other platforms (emulated s390x/arm64 roots, other Pythons and numpys); "
        "skip locally with -m 'not platforms'")


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if platforms.SEEN:
        terminalreporter.section("platforms compared byte for byte with this host")
        for line in platforms.SEEN:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def host_records() -> dict:
    """What this host computes (tests/records.py), in a fresh interpreter, once per session."""
    computed = platforms.run_records([sys.executable])
    platforms.SEEN.append(platforms.describe("host", computed["platform"]))
    return computed


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
