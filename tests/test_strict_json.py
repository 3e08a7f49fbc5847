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


def spelled(value, ascii_only: bool) -> tuple[str, dict[int, list[tuple[int, int]]]]:
    """json.dumps of a value, and where each array and object in it opens and closes, by level."""
    spans: dict[int, list[tuple[int, int]]] = {}
    parts: list[str] = []
    size = 0

    def put(text: str) -> None:
        nonlocal size
        parts.append(text)
        size += len(text)

    def walk(v, level: int) -> None:
        if not isinstance(v, (list, dict)):
            put(json.dumps(v, ensure_ascii=ascii_only))
            return
        start = size
        put("[" if isinstance(v, list) else "{")
        for k, item in enumerate(v.items() if isinstance(v, dict) else v):
            put(", " if k else "")
            if isinstance(v, dict):
                put(json.dumps(item[0], ensure_ascii=ascii_only) + ": ")
                item = item[1]
            walk(item, level + 1)
        put("]" if isinstance(v, list) else "}")
        spans.setdefault(level, []).append((start, size - 1))

    walk(value, 1)
    text = "".join(parts)
    assert text == json.dumps(value, ensure_ascii=ascii_only)
    return text, spans


@settings(max_examples=300, deadline=None)
@given(value=VALUES, step=st.sampled_from([1, 2, 3, 7, 1 << 20]), ascii_only=st.booleans(), cap=st.integers(0, 4))
def test_the_layout_locates_every_array_and_object_of_a_level(value, step, ascii_only, cap):
    text, spans = spelled(value, ascii_only)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(strict, "_DEPTH_STEP", step)
        layout = strict.json_layout(text + " " + text, {2: cap, 3: cap})   # the second value is not looked in
    for level in (2, 3):
        found = sorted(spans.get(level, []))
        assert layout.counts[level] == len(found)
        assert list(zip(*map(list, layout.spans[level]))) == found[:cap]
    assert layout.first_end == (len(text) if spans else -1) and layout.lowest == 0


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
    monkeypatch.setattr(strict.json.JSONDecoder, "raw_decode", no_memory)
    with pytest.raises(CvmError) as e:
        strict.parse_json("[1]", "trace", "t.json")
    assert e.value.code == "limit.memory" and "t.json" in e.value.message


def test_json_lines_are_counted_before_any_is_parsed(monkeypatch):
    monkeypatch.setattr(trace_codec, "MAX_ENTRIES", 3)
    parsed = []
    real = strict.StrictJson._parse
    monkeypatch.setattr(strict.StrictJson, "_parse", lambda self, what, parse: parsed.append(what) or real(self, what, parse))
    header = b'{"format":"cvmvm-trace/3"}\n'
    with pytest.raises(CvmError) as e:
        trace_codec.load_trace(header + b"{}\n" * 4, "t.jsonl")
    assert e.value.code == "malformed.trace" and "more than 4 lines" in e.value.message
    assert parsed == []
    with pytest.raises(CvmError) as e:
        trace_codec.load_trace(header + b"{}\n" * 3, "t.jsonl")
    assert "more than" not in e.value.message and parsed == ["t.jsonl: line 1"]   # its header: the keys


def strict_reference(text: str) -> bool:
    """Whether strict JSON (StrictJson) reads ``text`` whole."""
    try:
        strict.StrictJson("x").document(text, "t")
    except CvmError:
        return False
    return True


# Characters that make and break JSON's structure.
EDITS = st.lists(st.tuples(st.integers(0, 10 ** 4), st.integers(0, 2), st.sampled_from([*'[]{}",:\\ 0-e.tn', '   '])),
                 max_size=3)


@settings(max_examples=400, deadline=None)
@given(value=VALUES, edits=EDITS, small=st.sampled_from([1, 2, 5, 16, 1 << 16]), step=st.sampled_from([3, 1 << 18]),
       indent=st.sampled_from([None, 1]))
def test_a_check_a_piece_at_a_time_accepts_what_a_whole_parse_accepts(value, edits, small, step, indent):
    """JsonWalk.check parses text in pieces of about ``small`` characters, keeping nothing: it
    refuses exactly the texts strict JSON refuses read whole (empty arrays and objects, spacing,
    commas in strings, keys twice in pieces apart, broken separators)."""
    text = json.dumps([value, value] if isinstance(value, dict) else value, indent=indent)
    for at, how, ch in edits:
        at %= len(text) + 1
        text = text[:at] + ch + text[at + (how == 1):] if how < 2 else text[:at] + text[at + 1:]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(strict, "_DEPTH_STEP", step)
        try:
            strict.JsonWalk(text, strict.StrictJson("x"), "t", {}).check(small)
            ok = True
        except CvmError as e:
            assert e.code == "malformed.x"
            ok = False
    assert ok == strict_reference(text), text


@pytest.mark.parametrize("text", ["[   ]", "{ \n }", "[1,   ]", "[   ,1]", "[ 1 ]", '{ "a" : 1 ,   "b":[   ] }',
                                  '{"a": 1, "a": 2}', '[[1, 2], [3, 4]]', '[[1, 2], [3, 4}]', "[1 2]", '{"a" 1}',
                                  '["a,b", "c\\"d,"]', '[' + ' ' * 40 + '"x"' + ' ' * 40 + ']'])
@pytest.mark.parametrize("small", [1, 2, 3, 8])
def test_a_check_by_hand(text, small):
    """Spaces only, commas with nothing beside them, keys twice, brackets that do not match,
    commas in strings, an item with much space around it."""
    try:
        strict.JsonWalk(text, strict.StrictJson("x"), "t", {}).check(small)
        ok = True
    except CvmError:
        ok = False
    assert ok == strict_reference(text)
