"""Every error code the source can raise is listed in isa.errors.CODES, every listed code is raised
somewhere, and docs/ERRORS.md is exactly that list.

The source is read, not run: a raise with a literal reason (``InputError("name", ...)``), a strict
record or JSON reader (``Reader("receipt")``, ``StrictJson("trace")``, ``parse_json(text, "results", ...)``
fail as ``malformed.receipt``, ``malformed.trace``, ``malformed.results``), or a whole code written as a
string (``"internal.bug"``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from isa import errors
from isa.errors import CODES, FAMILIES
from cvmvm.cli.common import EXIT_CODES

REPO = Path(__file__).resolve().parent.parent
SOURCES = sorted(p for pkg in ("isa", "serializer", "cvmvm") for p in (REPO / pkg).rglob("*.py"))
FAMILY_OF = {cls.__name__: cls.family for cls in FAMILIES}
CODE = re.compile(r"(?:%s)\.[a-z_]+" % "|".join(cls.family for cls in FAMILIES))
# Codes raised only through a reason held in a variable: the verifier's rule phases
# (cvmvm/vm/verify.py: _apply_rule maps each rule's Rejected to its reason).
PHASE_REASONS = {"invalid.dtype", "invalid.shape", "invalid.precision", "limit.ops"}


def raised_codes() -> dict[str, list[str]]:
    """code -> where the source raises it (file:line)."""
    found: dict[str, list[str]] = {}
    for path in SOURCES:
        if path == REPO / "isa" / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            code = None
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                if name in FAMILY_OF:
                    code = f"{FAMILY_OF[name]}.{node.args[0].value}"
                elif name in ("Reader", "StrictJson"):
                    code = f"malformed.{node.args[0].value}"
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == \
                    "parse_json" and len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
                code = f"malformed.{node.args[1].value}"   # strict.parse_json(text, reason, what)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and CODE.fullmatch(node.value):
                code = node.value
            if code is not None:
                found.setdefault(code, []).append(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def test_every_raised_code_is_listed():
    unlisted = {code: where for code, where in raised_codes().items() if code not in CODES}
    assert not unlisted, f"add these codes, each with a one-line meaning, to isa.errors.CODES: {unlisted}"


def test_every_listed_code_is_raised():
    stale = set(CODES) - set(raised_codes()) - PHASE_REASONS
    assert not stale, f"isa.errors.CODES lists codes nothing raises: {sorted(stale)}"


def test_codes_are_well_formed_and_grouped_by_family():
    families = [cls.family for cls in FAMILIES]
    assert all(CODE.fullmatch(code) for code in CODES)
    order = [families.index(code.split(".")[0]) for code in CODES]
    assert order == sorted(order)
    assert set(EXIT_CODES) == set(families) and len(set(EXIT_CODES.values())) == len(families)


def error_table() -> str:
    rows = [f"| `{code}` | {EXIT_CODES[code.split('.')[0]]} | {meaning} |" for code, meaning in CODES.items()]
    return "\n".join(["| code | exit | meaning |", "|---|---|---|", *rows])


def test_docs_list_exactly_the_codes():
    text = (REPO / "docs" / "ERRORS.md").read_text(encoding="utf-8")
    begin, end = "<!-- codes: begin -->", "<!-- codes: end -->"
    assert begin in text and end in text
    listed = text.split(begin)[1].split(end)[0].strip()
    assert listed == error_table(), "docs/ERRORS.md is out of date; the table should read:\n" + error_table()


@pytest.mark.parametrize("cls", FAMILIES)
def test_every_family_is_exported(cls):
    import cvmvm
    assert getattr(cvmvm, cls.__name__) is cls and getattr(errors, cls.__name__) is cls


def test_every_error_pickles_with_its_code_and_message():
    """Errors cross process boundaries (a Ray task's model error): Exception's own pickling passed
    the message alone to a constructor that takes (reason, message)."""
    import pickle
    for cls in (errors.MalformedError, errors.InvalidError, errors.InputError, errors.LimitError,
                errors.InternalError, errors.UsageError, errors.IOFailure):
        e = cls("some_reason", "what happened")
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is cls and (back.code, back.message) == (e.code, e.message)
