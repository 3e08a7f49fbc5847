"""The op_attrs strings of a Cortex graph: the attribute grammar, read and written side by side.

Each node's op_attrs is a JSON object of strings.  An operator's values are
parsed as the runtime's dmlc parameter parser does (an emulation of C++
``istream >>``: ``decode_attr``) and written so that parser reads them back
(``attr_text``); a variable's op_attrs only restate its shape and precision.
Reading and writing are inverse: tests/test_attr_text.py checks the round
trip.
"""

from __future__ import annotations

from typing import Any

from isa.attrs import BOOL, INT, INT32_MAX, INT32_MIN, INTS, OPT_INT, STR, attr_fields, parse_attrs
from isa.errors import InvalidError, MalformedError, shown
from isa.spec import OpDef
from isa.types import Shape, TensorType
from serializer.cortex.json_text import json_text, parse_json

VARIABLE_ATTR_KEYS = ("precision", "shape")
_C_SPACE = " \t\n\v\f\r"  # C isspace() in the "C" locale


# -- one node's op_attrs -------------------------------------------------------

def attr_object(text: str, where: str) -> dict[str, str]:
    """One op_attrs entry: a JSON object whose values are all strings."""
    obj = parse_json(text, "attr", f"{where} op_attrs")
    if type(obj) is not dict:
        raise MalformedError("attr", f"{where}: op_attrs must be a JSON object, got {shown(text)}")
    for key, value in obj.items():
        if type(value) is not str:
            raise MalformedError("attr", f"{where}: op_attrs value of {key!r} must be a string, got {shown(value)}")
    return obj


def read_operator_attrs(op: OpDef, text: str, where: str) -> Any:
    raw = attr_object(text, where)
    kinds = {f.name: f.kind for f in attr_fields(op.attrs)}
    typed = {key: decode_attr(kinds[key], value, f"{where} attribute {key}") if key in kinds else value
             for key, value in raw.items()}
    try:
        return parse_attrs(op.attrs, typed, fill_defaults=True)
    except InvalidError as e:
        raise InvalidError("attr", f"{where}: {e.message}") from None


def operator_attrs_text(attrs: Any) -> str:
    """An attribute record as op_attrs: every attribute explicit, in field order."""
    return json_text({f.name: attr_text(f.kind, getattr(attrs, f.name)) for f in attr_fields(type(attrs))})


def check_variable_attrs(text: str, shape: Shape, precision: int, where: str) -> None:
    """A variable's op_attrs are informational, but what they say must agree with attrs."""
    raw = attr_object(text, where)
    for key in raw:
        if key not in VARIABLE_ATTR_KEYS:
            raise InvalidError("attr", f"{where}: a variable's op_attrs may hold only precision and shape, "
                                       f"not {key!r}")
    if "shape" in raw and decode_attr(INTS, raw["shape"], f"{where} shape") != shape:
        raise InvalidError("shape", f"{where}: op_attrs shape {shown(raw['shape'])} differs from attrs.shape {shape}")
    if "precision" in raw and decode_attr(INT, raw["precision"], f"{where} precision") != precision:
        raise InvalidError("precision", f"{where}: op_attrs precision {shown(raw['precision'])} differs from "
                                        f"attrs.precision {precision}")


def variable_attrs_text(t: TensorType) -> str:
    """A variable's informational op_attrs; a dtype without precision (max_pool's) states only its shape."""
    shape = attr_text(INTS, t.shape)
    return json_text({"shape": shape} if t.precision is None else {"precision": str(t.precision), "shape": shape})


# -- one attribute value -------------------------------------------------------

def decode_attr(kind: str, text: str, where: str) -> Any:
    """An attribute string -> its typed value, accepting what the runtime's parameter parser accepts.

    INT: C++ ``istream >> int`` (spaces, an optional sign, digits, trailing
    spaces).  BOOL: true/false/1/0 in any case, nothing else.  INTS: a Tuple
    ("(1, 2)", "[1, 2]", "(1,)", "()", or one bare integer).  OPT_INT: "None"
    or an integer (an "L" suffix allowed).  STR: the string itself.
    Integers outside int32 do not parse.
    """
    value: Any = None
    if kind == STR:
        return text
    if kind == BOOL:
        value = {"true": True, "false": False, "1": True, "0": False}.get(text.lower()) if text.isascii() else None
    elif kind == INT:
        value = _whole(text, _scan_int(text, 0))
    elif kind == OPT_INT:
        if text.startswith("None") and _only_space(text, 4):
            return None
        scanned = _scan_int(text, 0)
        if scanned is not None and scanned[1] < len(text) and text[scanned[1]] == "L":
            scanned = (scanned[0], scanned[1] + 1)
        value = _whole(text, scanned)
    elif kind == INTS:
        value = _whole(text, _scan_tuple(text))
    if value is None:
        raise MalformedError("attr", f"{where}={shown(text)} is not a valid {kind}")
    return value


def attr_text(kind: str, value: Any) -> str:
    """A typed attribute value as the runtime's parser reads it back."""
    if kind == BOOL:
        return "True" if value else "False"
    if kind == INTS:
        return "(" + ", ".join(str(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if kind == OPT_INT and value is None:
        return "None"
    return value if kind == STR else str(value)


def _only_space(text: str, i: int) -> bool:
    return all(c in _C_SPACE for c in text[i:])


def _whole(text: str, scanned: tuple[Any, int] | None) -> Any:
    """The scanned value if only spaces follow it (dmlc's FieldEntry check), else None."""
    if scanned is None or not _only_space(text, scanned[1]):
        return None
    return scanned[0]


def _scan_int(text: str, i: int) -> tuple[int, int] | None:
    """``istream >> int`` from position i: (value, end), or None."""
    n = len(text)
    while i < n and text[i] in _C_SPACE:
        i += 1
    start = i
    if i < n and text[i] in "+-":
        i += 1
    digits = i
    while i < n and "0" <= text[i] <= "9":
        i += 1
    if i == digits:
        return None
    # istream reads any number of leading zeros; past them, more than 10 digits is outside int32,
    # and int() of a long digit string would depend on PYTHONINTMAXSTRDIGITS.
    significant = text[digits:i].lstrip("0")
    if len(significant) > 10:
        return None
    value = int(text[start:digits] + (significant or "0"))
    return (value, i) if INT32_MIN <= value <= INT32_MAX else None


def _scan_tuple(text: str) -> tuple[tuple[int, ...], int] | None:
    """The runtime's ``operator>>(istream, Tuple)`` (include/cvm/tuple.h), step by step."""
    n, i = len(text), 0
    while True:
        if i < n and (text[i] == "-" or "0" <= text[i] <= "9"):
            one = _scan_int(text, i)
            return None if one is None else ((one[0],), one[1])
        if i >= n:
            return None
        ch, i = text[i], i + 1
        if ch in "([":
            break
        if ch not in _C_SPACE:
            return None
    while i < n and text[i] in _C_SPACE:
        i += 1
    if i < n and text[i] in ")]":
        return (), i + 1
    values: list[int] = []
    while True:
        scanned = _scan_int(text, i)
        if scanned is None:
            return None
        values.append(scanned[0])
        i = scanned[1]
        while i < n and text[i] in _C_SPACE:
            i += 1
        if i >= n:
            return None
        ch, i = text[i], i + 1
        if ch == "L":
            if i >= n:
                return None
            ch, i = text[i], i + 1
        if ch == ",":
            while i < n and text[i] in _C_SPACE:
                i += 1
            if i < n and text[i] in ")]":
                return tuple(values), i + 1
        elif ch in ")]":
            return tuple(values), i
        else:
            return None
