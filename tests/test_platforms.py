"""Same bytes on every architecture: s390x (big-endian) and arm64 roots under qemu-user emulation,
and a native amd64 root of Debian testing (its Python, numpy, OpenBLAS, mypy: newer than the venvs').

Each root runs tests/records.py -- every golden fixture, the demo, every refused reference case --
and its result must equal the host's byte for byte; then tests run there too: the whole suite in
the native root less the tests of how the host's kernel ends processes (``platforms.KERNEL_TESTS``;
6.5 min on a Rocket Lake Xeon, 7.9 with them, 2026-12-02), CI's subset under emulation (``platforms.EMULATED_TESTS``:
vectors, determinism, codecs, hashes, GEMM paths, models, parity, shift sign rules; less
``platforms.EMULATED_DESELECT``, two ring sizes of the hashing-timing test).  The native
root runs first, alone, so its timing-sensitive tests (kill points, the fuzzing deadline) do not
share the 2 cores with qemu; then both emulated roots at once.  Skip locally with ``-m 'not
platforms'``; a root this machine cannot run is skipped here and fails under CI.  Building a root
takes about a minute and a half (both emulated ones at once on 2 cores; the native one 15 s),
installing the checkout in it some 15 s.

The whole suite runs in the emulated roots with ``python -m tests.platforms --full`` (README, "The
whole suite on s390x and arm64"): over an hour per architecture, more than CI's 90 minutes leave,
so it is run by hand.  Its last result is in the README.  The emulated roots' 4 tests last took
22 min on a 2-core machine that other jobs kept at a load of 2 to 3.5 (43 min at 4 to 5;
2026-11-27), the roots already built.  On a slower 2-core machine (an AMD EPYC Zen 3 at 2.45 GHz,
2026-12-02) this module took 35 to 42 of a clean-clone CI run's 75.5 minutes
(docs/BENCHMARKS.md).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
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
    tests = platforms.run_in_root(root, [*platforms.PYTEST_IN_ROOT, *platforms.ci_tests(arch)], arch=arch,
                                  timeout=3600)
    return ArchRun(platforms.root_suite(root), records, rec.stderr[-3000:], tests.returncode,
                   platforms.pytest_summary(tests.stdout + tests.stderr))


def _attempt(arch: platforms.Arch, cache) -> ArchRun | BaseException:
    try:
        return _run_arch(arch, cache)
    except Exception as e:  # reported by each test, not lost in the fixture
        return e


@pytest.fixture(scope="module")
def roots() -> dict[str, ArchRun | BaseException]:
    """Every root this machine can run: the native ones first, then the emulated ones at once
    (qemu runs each process on one core)."""
    out: dict[str, ArchRun | BaseException] = {}
    runnable = []
    for arch in platforms.ARCHES:
        try:
            platforms.check_emulation(arch)
            runnable.append(arch)
        except platforms.Unavailable as e:
            out[arch.name] = e
    cache = platforms.temp_cache() if platforms.in_ci() else platforms.cache_dir()
    for arch in runnable:
        if arch.qemu is None:
            out[arch.name] = _attempt(arch, cache)
    emulated = [a for a in runnable if a.qemu is not None]
    if emulated:
        with ThreadPoolExecutor(len(emulated)) as pool:
            futures = {a.name: pool.submit(_attempt, a, cache) for a in emulated}
            out.update((name, f.result()) for name, f in futures.items())
    yield out
    if platforms.in_ci():
        shutil.rmtree(cache, ignore_errors=True)


def _get(roots, name: str) -> ArchRun:
    run = roots[name]
    if isinstance(run, platforms.Unavailable):
        if platforms.in_ci():
            pytest.fail(f"the {name} root cannot run in CI: {run}", pytrace=False)
        pytest.skip(f"the {name} root cannot run here ({run}); under CI this fails")
    if isinstance(run, BaseException):
        pytest.fail(f"{name}: {type(run).__name__}: {run}", pytrace=False)
    return run


@pytest.mark.parametrize("name", [a.name for a in platforms.ARCHES])
def test_same_bytes_as_the_host(roots, host_records, name):
    run = _get(roots, name)
    assert run.records is not None, f"{name}: tests/records.py failed:\n{run.records_error}"
    info = run.records["platform"]
    arch = platforms.ARCH_BY_NAME[name]
    platforms.SEEN.append(platforms.describe(platforms.root_label(arch, run.suite), info))
    assert info["byteorder"] == arch.byteorder
    diff = platforms.differences(host_records["records"], run.records["records"])
    assert not diff, f"{name} computes different bytes:\n" + "\n".join(diff)


@pytest.mark.parametrize("name", [a.name for a in platforms.ARCHES])
def test_tests_pass_in_the_root(roots, name):
    run = _get(roots, name)
    tests = " ".join(platforms.ci_tests(platforms.ARCH_BY_NAME[name])) or "(the whole suite)"
    assert run.pytest_exit == 0, f"{name}: pytest {tests} failed:\n{run.pytest_tail}"


def test_the_roots_deselected_tests_exist():
    """pytest ignores a ``--deselect`` that names nothing, so a renamed test (or a changed parameter)
    would run again unseen: each id must name tests pytest collects."""
    ids = [*platforms.KERNEL_TESTS, *platforms.EMULATED_DESELECT]
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                          *sorted({t.split("::")[0] for t in ids})],
                         cwd=platforms.REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"collecting {ids} failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}"
    collected = out.stdout.splitlines()
    for test in ids:   # pytest deselects by prefix: a parametrized test's name deselects every case
        assert any(c == test or c.startswith(test + "[") for c in collected), f"{test} names no test"
