"""The fuzzing suite on a fixed budget (README "Reliability"), and every crash ever found, replayed.

Each target runs in its own worker process under RLIMIT_AS of 4 GiB (tests/fuzzkit.py); a
worker that dies or hangs is a failure of the case it was running.  scripts/fuzz.py runs the
same targets for as long as asked and saves what it finds into fixtures/fuzz/.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests import fuzzkit

REPO = Path(__file__).resolve().parent.parent

# Cases per target in one CI run (fixed seed: the same cases every run).  The store's cases write
# and sync files, so it gets fewer.
SEED = 20261125
BUDGET = {"native": 5000, "cortex": 5000, "npy": 5000, "receipt": 5000, "txs": 5000, "step_proof": 5000,
          "trace": 5000, "store": 1200}
MEASURED = 300          # of them, cases run under tracemalloc
PEAK_BYTES = 256 << 20  # the most memory any case may take, and any worker


def _documented() -> str:
    return "\n".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])


def test_every_target_on_its_budget():
    assert set(BUDGET) == set(fuzzkit.TARGETS)
    jobs = [fuzzkit.Job(name, BUDGET[name], SEED, MEASURED) for name in BUDGET]
    results, failures = fuzzkit.run_jobs(jobs, parallel=2, wall=600)
    report = "\n".join(f"{f.target} {f.kind}: {f.detail}\n  case {f.case.hex()}" for f in failures)
    assert not failures, "fuzzing broke a contract (save the case into fixtures/fuzz/<target>/ once fixed):\n" \
        + report
    assert {r["target"] for r in results} == set(BUDGET)
    for r in results:
        assert r["cases"] >= BUDGET[r["target"]], r
        assert r["slowest"] <= fuzzkit.CASE_SECONDS, r
        assert r["peak_traced"] < PEAK_BYTES and r["max_rss"] < PEAK_BYTES, r
    docs = _documented()
    codes = sorted({c for r in results for c in r["codes"]})
    assert len(codes) >= 20
    undocumented = [c for c in codes if f"`{c}`" not in docs and not re.search(rf"\b{re.escape(c)}\b", docs)]
    assert not undocumented, f"error codes the fuzzers met that no document names: {undocumented}"


CRASHES = [(name, path) for name in fuzzkit.TARGETS for path in fuzzkit.crash_files(name)]


@pytest.mark.parametrize("name, path", CRASHES, ids=[f"{n}/{p.name}" for n, p in CRASHES])
def test_crash_files_replay(name, path):
    target = fuzzkit.TARGETS[name]
    took, failure = fuzzkit.run_case(target, path.read_bytes())
    assert failure is None, failure.detail


# Files of older commitment formats (written by cvmvm before format 2, or 3), kept among the
# replayed cases: each is refused with its own malformed code and a message naming its version,
# never a crash.  (trace/35ca3096bf2e1f01 is format 2's copy of the case trace/2e93705dcbbf5ae8.)
OLD_FILES = {"trace/6cb7bc1d0b38b699.bin": ("malformed.trace", 1),
             "step_proof/30c3a199616055a5.bin": ("malformed.step_proof", 1),
             "receipt/123b0db647a6703c.bin": ("malformed.receipt", 1),
             "trace/35ca3096bf2e1f01.bin": ("malformed.trace", 2)}


@pytest.mark.parametrize("name", sorted(OLD_FILES))
def test_files_of_older_formats_are_refused_naming_their_version(name):
    from isa.errors import CvmError
    from serializer.records import receipt, stepproof
    from cvmvm.tx import tracediff
    data = (fuzzkit.CRASHES / name).read_bytes()
    read = {"trace": lambda: tracediff.read_trace(data, "file"), "step_proof": lambda: stepproof.decode(data),
            "receipt": lambda: receipt.decode(data)}[name.split("/")[0]]
    with pytest.raises(CvmError) as e:
        read()
    code, version = OLD_FILES[name]
    assert e.value.code == code and f"version {version}" in e.value.message


def test_crash_directories_name_targets():
    assert fuzzkit.CRASHES.is_dir()
    for d in fuzzkit.CRASHES.iterdir():
        if d.is_dir():
            assert d.name in fuzzkit.TARGETS, d


def test_cases_are_reproducible_from_their_seed():
    from hypothesis import given, seed, settings
    target = fuzzkit.TARGETS["receipt"]

    def draw(s: int) -> list[bytes]:
        got: list[bytes] = []

        @seed(s)
        @settings(max_examples=30, database=None, derandomize=False)
        @given(fuzzkit.cases(target))
        def collect(case):
            got.append(case)
        collect()
        return got
    assert draw(5) == draw(5) != draw(6)


def test_structure_mutations_reach_every_kind_of_change():
    seed_tree = {"a": [1, 2, {"b": b"xy", "c": "int32"}], "d": 7}
    seen = set()
    for path in range(12):
        for choice in range(14):
            tree = json.loads(json.dumps({"a": [1, 2, {"b": "xy", "c": "int32"}], "d": 7}))
            out = fuzzkit.mutate_tree(tree, path, choice, 3, json_mode=False)
            seen.add(type(out).__name__)
            fuzzkit.pack(out)
    assert seed_tree and {"dict", "Nest"} <= seen
    data = fuzzkit.pack({"k": 1, "j": [1, 2]})
    for kind in range(16):
        fuzzkit.mutate(data, [(kind, 5, 9, 3)], "msgpack", [data])
    assert fuzzkit.pack(fuzzkit.Dup((("k", 1), ("k", 2)))) == b"\x82\xa1k\x01\xa1k\x02"
    assert fuzzkit.pack(fuzzkit.Wide(5)) == b"\xcf" + (5).to_bytes(8, "big")
    assert fuzzkit.dump_json(fuzzkit.Nest(1, 3)) == "[[[1]]]"
