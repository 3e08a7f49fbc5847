"""JSON as the Cortex runtime reads and writes it (utils/json.h).

Reading is strict: UTF-8, no duplicate keys, no NaN/Infinity, and only the
string escapes the runtime's reader knows.  Writing gives text the runtime
reads back: ", " and ": " separators, keys in the order given, no \\u escapes.
"""

from __future__ import annotations

import re
from typing import Any

from isa.errors import InvalidError, MalformedError
from serializer import strict

# The only string escapes the runtime's JSON reader knows (utils/json.h
# ReadString); it aborts on any other, \u and \/ included.
RUNTIME_ESCAPES = frozenset('rn\\t"')
_ESCAPE = re.compile(r"\\(.?)", re.S)
_WRITE_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def parse_json(text: str, reason: str, what: str) -> Any:
    return strict.parse_json(check_escapes(text, reason, what), reason, what)


def check_escapes(text: str, reason: str, what: str) -> str:
    """``text``, if it holds only the string escapes the runtime reads."""
    for m in _ESCAPE.finditer(text):
        if m.group(1) not in RUNTIME_ESCAPES:
            raise MalformedError(reason, f"{what}: string escape {m.group(0)!r} at offset {m.start()} is not "
                                         "one the Cortex runtime reads (\\r \\n \\t \\\\ \\\")")
    return text


def json_text(value: Any) -> str:
    """JSON the Cortex runtime reads back: ", " and ": " separators, keys in the given order, no \\u escapes."""
    if type(value) is dict:
        return "{" + ", ".join(f"{_json_string(k)}: {json_text(v)}" for k, v in value.items()) + "}"
    if type(value) in (list, tuple):
        return "[" + ", ".join(json_text(v) for v in value) + "]"
    if type(value) is str:
        return _json_string(value)
    if type(value) is int:
        return str(value)
    raise TypeError(f"a Cortex graph holds no {type(value).__name__} ({value!r})")


def _json_string(s: str) -> str:
    for c in s:
        if c < " " and c not in _WRITE_ESCAPES:
            raise InvalidError("graph", f"string {s!r} holds control character {c!r}, which Cortex JSON cannot carry")
    return '"' + "".join(_WRITE_ESCAPES.get(c, c) for c in s) + '"'
