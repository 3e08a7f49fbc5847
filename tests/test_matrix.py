"""Same bytes on every supported Python and numpy: 3.10 to 3.13, each with the oldest numpy
pyproject.toml allows that has a wheel for it and the newest, at 1 and 2 BLAS threads.

Each combination is a virtual environment built from the package index (wheels only) that
runs tests/records.py -- every golden fixture, the demo, every refused reference case -- and
must compute exactly what the host computes in the same session.  Skip locally with
``-m 'not platforms'``; under CI a missing interpreter or a failed install fails.
"""

from __future__ import annotations

import shutil

import pytest

from tests import platforms

pytestmark = pytest.mark.platforms


@pytest.fixture(scope="module")
def cache():
    path = platforms.temp_cache() if platforms.in_ci() else platforms.cache_dir()
    yield path
    if platforms.in_ci():
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("which", ["oldest", "newest"])
@pytest.mark.parametrize("minor", platforms.PYTHON_MINORS)
def test_same_bytes_as_the_host(cache, host_records, minor, which):
    try:
        python = platforms.find_python(minor)
    except platforms.Unavailable as e:
        if platforms.in_ci():
            pytest.fail(f"the determinism matrix cannot run in CI: {e}", pytrace=False)
        pytest.skip(f"{e}; under CI this fails")
    venv = platforms.venv_for(python, minor, which, cache)
    for threads in ("1", "2"):
        got = platforms.run_records([str(venv / "bin" / "python")], env={"OPENBLAS_NUM_THREADS": threads})
        platforms.SEEN.append(platforms.describe(f"Python {minor}, numpy {which}", got["platform"]))
        diff = platforms.differences(host_records["records"], got["records"])
        assert not diff, f"Python {minor} with numpy {got['platform']['numpy']} ({threads} BLAS threads):\n" \
                         + "\n".join(diff)
