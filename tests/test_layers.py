"""The layers depend one way only: isa <- serializer <- cvmvm."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# What each layer may import beyond the standard library.
ALLOWED = {
    "isa": {"isa", "numpy"},
    "serializer": {"isa", "serializer", "numpy", "msgpack"},
    "cvmvm": {"isa", "serializer", "cvmvm", "numpy", "msgpack", "cryptography", "ray"},
}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_point_one_way(layer):
    stdlib = set(sys.stdlib_module_names)
    bad = {}
    for path in sorted((REPO / layer).rglob("*.py")):
        extra = imported_roots(path) - ALLOWED[layer] - stdlib - {"__future__"}
        if extra:
            bad[str(path.relative_to(REPO))] = sorted(extra)
    assert not bad, f"{layer} imports outside its layer: {bad}"


def test_no_pickle_anywhere():
    for layer in ALLOWED:
        for path in (REPO / layer).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            assert "allow_pickle=True" not in text, path
            assert "import pickle" not in text, path
