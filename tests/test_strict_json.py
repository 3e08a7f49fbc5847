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


def naive_layout(text: str, caps: dict[int, int], cut: int) -> tuple:
    """json_layout's facts, found a character at a time, for any text at all."""
    depth = deepest = lowest = 0
    first_end = -1
    inside, run = False, 0      # within a string; backslashes just before
    opens: dict[int, list[int]] = {level: [] for level in caps}
    closes: dict[int, list[int]] = {level: [] for level in caps}
    commas: list[int] = []
    for k, ch in enumerate(text):
        if ch == '"' and run % 2 == 0:
            inside = not inside
        elif not inside and ch in "[{":
            depth += 1
            if first_end < 0 and depth in caps:
                opens[depth].append(k)
        elif not inside and ch in "]}":
            depth -= 1
            if first_end < 0 and depth == 0:
                first_end = k + 1
            elif first_end < 0 and depth + 1 in caps:
                closes[depth + 1].append(k)
        elif not inside and ch == "," and depth == 1 and first_end < 0:
            commas.append(k)
        run = run + 1 if ch == "\\" else 0
        deepest, lowest = max(deepest, depth), min(lowest, depth)
    cuts: list[int] = []
    for k, c in enumerate(commas):   # the first and the last comma of each stretch of ``cut`` characters
        if cut and (k == 0 or commas[k - 1] // cut != c // cut or k + 1 == len(commas)
                    or commas[k + 1] // cut != c // cut):
            cuts.append(c)
    return (deepest, lowest, first_end, {level: len(opens[level]) for level in caps},
            {level: (opens[level][:caps[level]], closes[level][:caps[level]]) for level in caps}, cuts)


# Text that is mostly not JSON: what a hostile file holds, in pieces that make and break strings.
ANY_TEXT = st.lists(st.sampled_from([*'[]{}",:\\ aé\u2028\U0001f600', '\\\\', '\\"', '"a"', '[1, 2]', '{"k": [ ]}']),
                    max_size=40).map("".join)


@settings(max_examples=500, deadline=None)
@given(text=ANY_TEXT, wrap=st.booleans(), caps=st.dictionaries(st.integers(1, 4), st.integers(0, 5), max_size=3),
       cut=st.sampled_from([0, 1, 2, 3, 7, 50]), step=st.sampled_from([1, 2, 3, 5, 7, 1 << 18]))
def test_the_layout_of_any_text_is_what_reading_it_a_character_at_a_time_finds(text, wrap, caps, cut, step):
    """json_layout works on where the backslashes, quotes, brackets and commas are, a step of
    text at a time; on any text, split anywhere (a run of backslashes, a string, the first value
    across steps), it finds what a walk over every character does."""
    text = "[" + text + "]" if wrap else text
    with pytest.MonkeyPatch.context() as m:
        m.setattr(strict, "_DEPTH_STEP", step)
        layout = strict.json_layout(text, caps, cut)
    spans = {level: (opens.tolist(), closes.tolist()) for level, (opens, closes) in layout.spans.items()}
    assert (layout.deepest, layout.lowest, layout.first_end, layout.counts, spans, layout.cuts) == \
        naive_layout(text, caps, cut)


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


def walked(text: str, run: int) -> tuple[list, int] | str:
    """The items of the array ``text`` as JsonWalk.items gives them with ``run``, every array and
    object parsed, and the characters parsed in runs; or the message of the fault met first."""
    parsed = 0
    json_ = strict.StrictJson("x")
    real = json_.document

    def document(piece: str, what: str):
        nonlocal parsed
        parsed += len(piece)
        return real(piece, what)
    json_.document = document
    try:
        walk = strict.JsonWalk(text, json_, "t", {2: 1000})
        array = walk.first("t")
        if array is None or not array.array:
            return "not an array"
        items = [walk.parse(v, "t") if type(v) is strict.Span else v for v in walk.items(array, "t", run=run)]
    except CvmError as e:
        return e.message
    return items, parsed


@settings(max_examples=300, deadline=None)
@given(value=st.lists(VALUES, max_size=30), edits=EDITS, run=st.sampled_from([1, 8, 40, 1 << 16]),
       indent=st.sampled_from([None, 1]))
def test_items_read_in_runs_are_the_items_read_one_at_a_time(value, edits, run, indent):
    """Arrays and objects among an array's items come parsed a run at a time; where a run does
    not parse as such (values of other kinds between, a fault in one), its items are read one at
    a time: the same items, or the same fault with the same message, as without runs; and no
    character is parsed in a run twice."""
    text = json.dumps(value, indent=indent)
    for at, how, ch in edits:
        at %= len(text) + 1
        text = text[:at] + ch + text[at + (how == 1):] if how < 2 else text[:at] + text[at + 1:]
    alone, in_runs = walked(text, 0), walked(text, run)
    if type(alone) is str or type(in_runs) is str:
        assert in_runs == alone
    else:
        assert in_runs[0] == alone[0] and alone[1] == 0
        assert in_runs[1] <= len(text) + 2 * len(in_runs[0])   # each run parsed in brackets of its own


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
