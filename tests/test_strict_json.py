"""Strict JSON (serializer.strict): nesting measured in linear time, and every failure named."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isa.errors import CvmError
from serializer import strict
from serializer.records import trace as trace_codec


def depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


# Strings full of what could be taken for structure: brackets, quotes, runs of backslashes.
TEXT = st.text(alphabet=st.sampled_from('[]{}"\\ aé\u2028\U0001f600'), max_size=12)
VALUES = st.recursive(st.none() | st.integers(-10**6, 10**6) | TEXT,
                      lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
                      max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(value=VALUES, step=st.sampled_from([1, 2, 3, 7, 1 << 20]), ascii_only=st.booleans())
def test_depth_is_the_nesting_of_the_value(value, step, ascii_only):
    # Small steps carry a string, or a run of backslashes, across step boundaries.
    with pytest.MonkeyPatch.context() as m:
        m.setattr(strict, "_DEPTH_STEP", step)
        assert strict.json_depth(json.dumps(value, ensure_ascii=ascii_only)) == depth(value)


@pytest.mark.parametrize("text, expected", [
    (r'["\\"]', 1),            # an even run: the quote closes the string
    (r'["\"]"]', 1),           # an odd run: the quote is part of it
    (r'["\\\"[", [[]]]', 3),
    (r'[{"[": "]"}]', 2),
    ('"' + "[" * 50 + '"', 0),
    ("", 0),
])
def test_depth_by_hand(text, expected):
    assert strict.json_depth(text) == expected


def test_a_string_never_closed_is_read_once():
    # A regular expression retried from each of these quotes took 31 s on 80 KB.
    assert strict.json_depth('{"nodes": "' + '\\"' * 400_000) == 1


def test_nesting_is_refused_past_the_limit():
    ok = "[" * strict.MAX_JSON_DEPTH + "]" * strict.MAX_JSON_DEPTH
    assert depth(strict.parse_json(ok, "graph_json", "g")) == strict.MAX_JSON_DEPTH
    with pytest.raises(CvmError) as e:
        strict.parse_json("[" + ok + "]", "graph_json", "g")
    assert e.value.code == "malformed.graph_json" and "nested more than 100" in e.value.message


def test_json_that_does_not_fit_in_memory_parsed_is_a_limit(monkeypatch):
    def no_memory(*args, **kwargs):
        raise MemoryError
    monkeypatch.setattr(strict.json, "loads", no_memory)
    with pytest.raises(CvmError) as e:
        strict.parse_json("[1]", "trace", "t.json")
    assert e.value.code == "limit.memory" and "t.json" in e.value.message


def test_json_lines_are_counted_before_any_is_parsed(monkeypatch):
    monkeypatch.setattr(trace_codec, "MAX_ENTRIES", 3)
    parsed = []
    real = strict.parse_json
    monkeypatch.setattr(strict, "parse_json", lambda text, *a: parsed.append(text) or real(text, *a))
    header = b'{"format":"cvmvm-trace/3"}\n'
    with pytest.raises(CvmError) as e:
        trace_codec.load_trace(header + b"0\n" * 4, "t.jsonl")
    assert e.value.code == "malformed.trace" and "more than 4 lines" in e.value.message
    assert len(parsed) == 1    # the whole text, as one document; no line
    parsed.clear()
    with pytest.raises(CvmError) as e:
        trace_codec.load_trace(header + b"0\n" * 3, "t.jsonl")
    assert "lines" not in e.value.message and len(parsed) == 5
