"""The code type-checks: mypy over isa, serializer and cvmvm, the public API under --strict's rules
(the configuration is pyproject.toml's [tool.mypy])."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_mypy_passes():
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
