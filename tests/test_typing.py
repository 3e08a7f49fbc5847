"""The code type-checks: mypy over isa, serializer and cvmvm, the public API under --strict's rules
(the configuration is pyproject.toml's [tool.mypy]), against numpy's annotations from 2.3 on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
# numpy's own annotations type ndarray, frombuffer and tolist differently before 2.3: against
# 2.2's, mypy (1.15 or 2.4 alike) finds 17 to 19 errors in code that is fine against 2.3's and
# later (Debian trixie's numpy 2.2, in the emulated arm64 root, is one).  The runtime supports
# numpy from 1.24 (tests/test_matrix.py); the type check is made against current annotations.
NUMPY_ANNOTATIONS = (2, 3)


def test_mypy_passes():
    have = tuple(int(part) for part in np.__version__.split(".")[:2])
    if have < NUMPY_ANNOTATIONS:
        pytest.skip(f"numpy {np.__version__}'s annotations predate {'.'.join(map(str, NUMPY_ANNOTATIONS))}, "
                    f"which the code is type-checked against")
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
