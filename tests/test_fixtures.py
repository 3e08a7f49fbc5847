"""The golden files and the demo's package data are exactly what fixtures/generate.py makes today."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "fixtures"))

import generate  # noqa: E402  (fixtures/ is data plus its generator script, not a package)


@pytest.fixture(scope="module")
def regenerated() -> dict[str, bytes]:
    return generate.golden_files()


def test_golden_files_are_up_to_date(regenerated):
    stale = generate.write_or_check(regenerated, check=True)
    assert stale == [], f"run `python fixtures/generate.py`: stale {stale}"


def test_golden_files_cover_every_ok_reference_case(regenerated):
    lines = regenerated["fixtures/golden/cvm-reference.jsonl"].splitlines()
    from tests.reference import cvm_cases
    ok = [c["id"] for c in cvm_cases() if c["expect"]["cvmvm"]["status"] == "ok"]
    assert len(lines) == len(ok)


def test_reference_copies_match_shared_when_present():
    shared = REPO.parent / "shared"
    if not (shared / "cvm-reference").is_dir():
        pytest.skip("../shared is not beside this checkout; the copies cannot be compared")
    stale = generate.write_or_check(generate.copy_reference(shared), check=True)
    assert stale == []
