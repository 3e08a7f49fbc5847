"""The layers depend one way only, and no module imports itself back.

isa <- serializer <- cvmvm; inside cvmvm, files <- vm <- tx <- cli, and
files <- vm <- importer <- cli (the importer, beside tx, needs neither); the
reference kernels stand alone.  Every import counts, including those inside
functions (a deferred import hides a cycle from the interpreter, not from this
test).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("isa", "serializer", "cvmvm")

# What each layer may import beyond the standard library (ray and tqdm: optional extras,
# imported inside the function that uses them; see EXTRAS for who may).
ALLOWED = {
    "isa": {"isa", "numpy"},
    "serializer": {"isa", "serializer", "numpy", "msgpack"},
    "cvmvm": {"isa", "serializer", "cvmvm", "numpy", "msgpack", "cryptography", "ray", "tqdm"},
}

# Optional extras only a sub-package may import (the core works without them; cvmvm.vm.blas
# falls back to leaving BLAS threads alone, cvmvm.vm.native to the numpy kernels,
# serializer.sha to hashlib, serializer.sha_lanes to libcrypto's one message at a time and
# cvmvm.tx.ed25519 to OpenSSL, which changes timing only).
EXTRAS = {"cvmvm.importer": {"onnx", "tqdm"}, "cvmvm.cli.tx": {"tqdm"}, "cvmvm.vm.blas": {"threadpoolctl"},
          "cvmvm.vm.native": {"numba"}, "serializer.sha": {"numba"},
          "serializer.sha_lanes": {"llvmlite"},
          "cvmvm.tx.ed25519": {"nacl"}}

# Inside cvmvm: a module may import cvmvm modules of its own sub-layer or a lower one.
# The package itself re-exports the VM's API, so it sits with vm; __main__ runs the CLI.
CVMVM_LEVELS = {"cvmvm.files": 0, "cvmvm.vm": 1, "cvmvm": 1, "cvmvm.tx": 2, "cvmvm.importer": 2, "cvmvm.cli": 3,
                "cvmvm.__main__": 3}
# Sub-layers of one level that must not import each other.
SIBLINGS = (("cvmvm.tx", "cvmvm.importer"),)

# Modules that stand alone: the reference kernels share nothing with the fast ones.
STANDALONE = {"isa.reference": {"numpy"}}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it: ours resolved to the module (``from a import b``
    names a.b when that is a module), others by their full dotted name."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
    return found


GRAPH = {name: {m for m in imports(path) if m in MODULES} for name, path in MODULES.items()}


def sublayer(module: str) -> int:
    for prefix in sorted(CVMVM_LEVELS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return CVMVM_LEVELS[prefix]
    raise AssertionError(f"{module} is in no cvmvm sub-layer: add it to CVMVM_LEVELS")


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_point_one_way(layer):
    stdlib = set(sys.stdlib_module_names)
    bad = {}
    for name, path in MODULES.items():
        if name.split(".")[0] != layer:
            continue
        extras = set().union(*(v for k, v in EXTRAS.items() if name == k or name.startswith(k + ".")))
        extra = {m.split(".")[0] for m in imports(path)} - ALLOWED[layer] - extras - stdlib - {"__future__"}
        if extra:
            bad[name] = sorted(extra)
    assert not bad, f"{layer} imports outside its layer: {bad}"


def test_cvmvm_sublayers_point_one_way():
    """files <- vm <- tx <- cli: vm never imports tx or cli, tx never imports cli."""
    bad = [(name, m) for name in MODULES if name.split(".")[0] == "cvmvm"
           for m in GRAPH[name] if m.split(".")[0] == "cvmvm" and sublayer(m) > sublayer(name)]
    assert not bad, f"imports that point up the cvmvm sub-layers: {bad}"


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize("a, b", SIBLINGS)
def test_sibling_sublayers_do_not_import_each_other(a, b):
    bad = [(name, m) for name in MODULES for m in GRAPH[name]
           if (within(name, a) and within(m, b)) or (within(name, b) and within(m, a))]
    assert not bad, bad


def test_the_core_does_not_import_the_extras():
    """`import cvmvm` works without the onnx and progress extras: only the importer package reaches
    for onnx, and for tqdm only the importer and replay's progress bar (inside a function)."""
    every = set().union(*EXTRAS.values())
    for name, path in MODULES.items():
        own = set().union(*(extras for package, extras in EXTRAS.items() if within(name, package)))
        assert not {m.split(".")[0] for m in imports(path)} & (every - own), name


@pytest.mark.parametrize("package", sorted(STANDALONE))
def test_standalone_packages(package):
    stdlib = set(sys.stdlib_module_names)
    bad = {name: sorted(imports(path) - {name} - stdlib - {"__future__"} - STANDALONE[package])
           for name, path in MODULES.items() if name == package or name.startswith(package + ".")}
    assert not {k: v for k, v in bad.items() if v}, bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module, or a module importing itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert cycles(GRAPH) == []


def test_the_cycle_check_sees_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_deferred_imports_count():
    """The graph holds an import made inside a function (cvmvm.tx.schedule imports ray there)."""
    assert "ray" in imports(MODULES["cvmvm.tx.schedule"])


def test_no_pickle_anywhere():
    for path in MODULES.values():
        text = path.read_text(encoding="utf-8")
        assert "allow_pickle=True" not in text, path
        assert "import pickle" not in text, path
