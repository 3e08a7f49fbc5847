"""Same bytes on every architecture: s390x (big-endian) and arm64 roots under qemu-user emulation.

Each root runs tests/records.py -- every golden fixture, the demo, every refused reference case --
and its result must equal the host's byte for byte; then CI's subset of the suite runs there too
(``platforms.EMULATED_TESTS``: vectors, determinism, codecs, hashes, GEMM paths, models, parity,
shift sign rules).  Skip locally with ``-m 'not platforms'``; under CI a platform that cannot run
fails.  Building a root takes about a minute and a half (both at once on 2 cores), installing the
checkout in it some 15 s.

The whole suite runs in the roots with ``python -m tests.platforms --full`` (README, "The whole
suite on s390x and arm64"): over an hour per architecture, more than CI's 90 minutes leave, so it
is run by hand.  Its last result is in the README.  This module's 4 tests last took 22 min on a
2-core machine that other jobs kept at a load of 2 to 3.5 (43 min at 4 to 5; 2026-11-27), the roots
already built.
"""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from tests import platforms

pytestmark = pytest.mark.platforms

@dataclass
class ArchRun:
    suite: str
    records: dict[str, Any] | None
    records_error: str
    pytest_exit: int
    pytest_tail: str


def _run_arch(arch: platforms.Arch, cache) -> ArchRun:
    root = platforms.root_for(arch, cache)
    platforms.stage_source(root, arch)
    rec = platforms.run_in_root(root, ["-m", "tests.records"], arch=arch, timeout=1800)
    records = json.loads(rec.stdout) if rec.returncode == 0 else None
    tests = platforms.run_in_root(root, [*platforms.PYTEST_IN_ROOT, *platforms.EMULATED_TESTS], arch=arch,
                                  timeout=3600)
    return ArchRun(platforms.root_suite(root), records, rec.stderr[-3000:], tests.returncode,
                   platforms.pytest_summary(tests.stdout + tests.stderr))


@pytest.fixture(scope="module")
def emulated() -> dict[str, ArchRun | BaseException]:
    """Both architectures, built and run concurrently (qemu runs each process on one core)."""
    try:
        for arch in platforms.ARCHES:
            platforms.check_emulation(arch)
    except platforms.Unavailable as e:
        if platforms.in_ci():
            pytest.fail(f"cross-architecture tests cannot run in CI: {e}", pytrace=False)
        pytest.skip(f"cross-architecture tests cannot run here ({e}); under CI this fails")
    cache = platforms.temp_cache() if platforms.in_ci() else platforms.cache_dir()
    out: dict[str, ArchRun | BaseException] = {}
    with ThreadPoolExecutor(len(platforms.ARCHES)) as pool:
        futures = {a.name: pool.submit(_run_arch, a, cache) for a in platforms.ARCHES}
        for name, f in futures.items():
            try:
                out[name] = f.result()
            except Exception as e:  # reported by each test, not lost in the fixture
                out[name] = e
    yield out
    if platforms.in_ci():
        shutil.rmtree(cache, ignore_errors=True)


def _get(emulated, name: str) -> ArchRun:
    run = emulated[name]
    if isinstance(run, BaseException):
        pytest.fail(f"{name}: {type(run).__name__}: {run}", pytrace=False)
    return run


@pytest.mark.parametrize("name", [a.name for a in platforms.ARCHES])
def test_same_bytes_as_the_host(emulated, host_records, name):
    run = _get(emulated, name)
    assert run.records is not None, f"{name}: tests/records.py failed:\n{run.records_error}"
    info = run.records["platform"]
    platforms.SEEN.append(platforms.describe(f"{name} (Debian {run.suite}, qemu)", info))
    assert info["byteorder"] == platforms.ARCH_BY_NAME[name].byteorder
    diff = platforms.differences(host_records["records"], run.records["records"])
    assert not diff, f"{name} computes different bytes:\n" + "\n".join(diff)


@pytest.mark.parametrize("name", [a.name for a in platforms.ARCHES])
def test_tests_pass_under_emulation(emulated, name):
    run = _get(emulated, name)
    assert run.pytest_exit == 0, f"{name}: pytest {' '.join(platforms.EMULATED_TESTS)} failed:\n{run.pytest_tail}"
