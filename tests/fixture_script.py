"""fixtures/generate.py, loaded by its path.

fixtures/ is data plus its generator script, not a package, and it must not go on sys.path: its
folders (fixtures/onnx, fixtures/reference, ...) would become namespace packages that shadow real
modules, so that without the onnx extra ``import onnx`` finds the fixture folder instead of failing.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parent.parent / "fixtures" / "generate.py"


def _load():
    spec = importlib.util.spec_from_file_location("generate", _PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["generate"] = module  # dataclasses and pickling look their module up by name
    spec.loader.exec_module(module)
    return module


generate = _load()
