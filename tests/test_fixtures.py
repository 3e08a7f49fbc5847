"""The golden files and the demo's package data are exactly what fixtures/generate.py makes today."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
from tests.fixture_script import generate  # noqa: E402


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


def test_fixtures_folder_is_never_on_sys_path():
    """Its folders would shadow real packages (fixtures/onnx for onnx): see tests/fixture_script.py.
    Every test module is imported before any test runs, so this sees what they all did."""
    import sys
    assert str(REPO / "fixtures") not in [str(Path(p).resolve()) for p in sys.path if p]
