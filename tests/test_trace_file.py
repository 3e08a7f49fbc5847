"""Reading trace files an entry at a time: any JSON spelling of a trace reads as its canonical
bytes do, anything JSON refuses is refused, and what parsing builds at once is bounded by one
entry, not by the file."""

from __future__ import annotations

import json
import random
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isa.errors import CvmError
from isa.types import TensorType
from serializer import strict
from serializer.model import Input
from serializer.records import trace as trace_codec
from serializer.records.trace import trace_bytes, trace_lines
from cvmvm.vm.trace import trace_to_json
from tests.test_receipt import build, digits_model, instr, mlp_model, pair_model

REPO = Path(__file__).resolve().parents[1]
IMAGES = np.load(REPO / "fixtures" / "models" / "digits" / "test_inputs.npy", allow_pickle=False)


def trace_doc(model, inputs) -> dict:
    return trace_to_json(model.program, model.run(inputs, trace=True).trace, model.model_hash)


DOCS = [trace_doc(mlp_model(), {"x": np.array([[5, -100, 120, 7]], dtype=np.int32)}),
        trace_doc(pair_model(), {"a": np.ones((2, 3), np.int32), "b": np.ones((2, 3), np.int32)})]
DIGITS = trace_doc(digits_model(), {"data": IMAGES[0]})


def unique(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a key twice")
    return dict(pairs)


def no_constant(name):
    raise ValueError(name)


def bounded_int(token):
    if len(token) - token.startswith("-") > strict.MAX_JSON_DIGITS:
        raise ValueError("a long integer")
    return int(token)


def reference(data: bytes) -> bytes | None:
    """The canonical bytes of the trace document a file spells, read the simple way (the whole
    file parsed at once; JSON lines if it is not one document); None if it spells none."""
    def parse(text):
        return json.loads(text, object_pairs_hook=unique, parse_constant=no_constant, parse_int=bounded_int)
    try:
        text = data.decode("utf-8")
        try:
            doc = parse(text)
        except ValueError:
            lines = text.split("\n")
            if lines[-1] == "":
                lines.pop()
            rows = [parse(line) for line in lines]
            if not rows or type(rows[0]) is not dict or "entries" in rows[0]:
                return None
            doc = {**rows[0], "entries": rows[1:]}
        return trace_bytes(doc) if type(doc) is dict else None
    except (ValueError, RecursionError):
        return None


def outcome(data: bytes):
    try:
        return trace_codec.load_trace(data, "t")
    except CvmError as e:
        return e.code


def shuffled(value, rng):
    """The same JSON value with every object's keys in another order."""
    if isinstance(value, dict):
        items = [(k, shuffled(v, rng)) for k, v in value.items()]
        rng.shuffle(items)
        return dict(items)
    if isinstance(value, list):
        return [shuffled(v, rng) for v in value]
    return value


SPELLINGS = st.fixed_dictionaries({
    "indent": st.sampled_from([None, 0, 1, 3, "\t"]), "separators": st.sampled_from([(",", ":"), (", ", ": "), (" ,", " :  ")]),
    "ensure_ascii": st.booleans(), "seed": st.integers(0, 2 ** 32 - 1), "lines": st.booleans(),
    "around": st.sampled_from(["", " ", "\n", "\r\n\t "])})


@settings(max_examples=60, deadline=None)
@given(doc=st.sampled_from(DOCS), spelling=SPELLINGS, name=st.text(max_size=8))
def test_any_json_spelling_of_a_trace_reads_as_its_canonical_bytes(doc, spelling, name):
    rng = random.Random(spelling["seed"])
    doc = {**doc, "entries": [{**e, "name": name} if e["kind"] == "instr" else e for e in doc["entries"]]}

    def dumps(value):
        return json.dumps(shuffled(value, rng), indent=None if spelling["lines"] else spelling["indent"],
                          separators=spelling["separators"], ensure_ascii=spelling["ensure_ascii"])
    around = spelling["around"]
    if spelling["lines"]:
        header = {k: v for k, v in doc.items() if k != "entries"}
        text = "\n".join(around.strip("\r\n") + dumps(row) for row in [header, *doc["entries"]]) + "\n"
    else:
        text = around + dumps(doc) + around
    assert outcome(text.encode("utf-8")) == trace_codec.load_trace(trace_bytes(doc), "t")


# Characters that make and break JSON's structure.
EDITS = st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 3), st.sampled_from(list('[]{}",:\\ \n0e-.tna'))),
                 min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(doc=st.sampled_from(DOCS), lines=st.booleans(), edits=EDITS)
def test_an_edited_trace_reads_exactly_when_json_reads_it(doc, lines, edits):
    text = bytearray(trace_lines(doc) if lines else trace_bytes(doc))
    for at, how, ch in edits:
        at %= len(text) + 1
        if how == 0:
            del text[at:at + 1]
        elif how == 1:
            text[at:at + 1] = ch.encode()
        else:
            text[at:at] = ch.encode()
    canonical = reference(bytes(text))
    got = outcome(bytes(text))
    if canonical is None:
        assert type(got) is str and got.startswith(("malformed.", "limit."))
    else:
        assert got == outcome(canonical)


def test_an_entry_may_be_brackets_throughout_its_name():
    conv = next(k for k, e in enumerate(DIGITS["entries"]) if e.get("op") == "conv2d")

    def forms(entries):
        doc = {**DIGITS, "entries": entries}
        return ((trace_bytes(doc), f"entries[{conv}]"), (trace_lines(doc), f"line {conv + 2}"))
    for name in ("[" * strict.MAX_NAME, "[" * (strict.MAX_NAME - 1) + "{"):
        for data, _ in forms([{**e, "name": name} if k == conv else e for k, e in enumerate(DIGITS["entries"])]):
            assert trace_codec.load_trace(data, "t").entries[conv].name == name
    # conv2d has four list-valued attributes, the most of any op: its entry is at the bound, and
    # one bracket more is refused.
    entries = [{**e, "name": "[" * strict.MAX_NAME, "junk": []} if k == conv else e
               for k, e in enumerate(DIGITS["entries"])]
    for data, where in forms(entries):
        with pytest.raises(CvmError) as e:
            trace_codec.load_trace(data, "t")
        assert e.value.code == "malformed.trace" and f"{where}: {trace_codec.MAX_ENTRY_BRACKETS + 1} brackets" \
            in e.value.message


@pytest.mark.parametrize("form", [trace_bytes, trace_lines])
def test_an_entry_longer_than_any_can_be_is_refused_before_it_is_parsed(monkeypatch, form):
    doc = DOCS[0]
    # What is bounded: each entry, and in JSON lines the header line too.
    units = [json.dumps(e, separators=(",", ":")) for e in doc["entries"]]
    if form is trace_lines:
        units = trace_lines(doc).decode().splitlines()
    longest = max(map(len, units))
    monkeypatch.setattr(trace_codec, "MAX_ENTRY_CHARS", longest)
    assert trace_codec.load_trace(form(doc), "t").root == doc["root"]
    monkeypatch.setattr(trace_codec, "MAX_ENTRY_CHARS", longest - 1)
    parsed = []
    real = strict.StrictJson._parse
    monkeypatch.setattr(strict.StrictJson, "_parse", lambda self, what, parse: parsed.append(what) or real(self, what, parse))
    with pytest.raises(CvmError) as e:
        trace_codec.load_trace(form(doc), "t")
    assert e.value.code == "limit.bytes" and f"at most {longest - 1}" in e.value.message
    refused = e.value.message.split(": ")[1]     # entries[k], or line k
    assert refused not in [w.split(": ")[1] for w in parsed if ": " in w]


@pytest.mark.parametrize("form", [trace_bytes, trace_lines])
def test_the_header_and_outputs_are_bounded_as_entries_are(form):
    nested = {**DOCS[0], "outputs": [[7]] * trace_codec.MAX_ENTRY_BRACKETS}
    with pytest.raises(CvmError) as e:
        trace_codec.load_trace(form(nested), "t")
    assert e.value.code == "malformed.trace" and "brackets" in e.value.message


def test_format_md_gives_the_entry_bounds():
    text = " ".join((REPO / "docs" / "FORMAT.md").read_text().split())
    assert trace_codec.MAX_ENTRY_CHARS == 1 << 24 and "2^24 characters" in text
    assert f"{trace_codec.MAX_ENTRY_BRACKETS:,} brackets" in text and f"{strict.MAX_NAME:,} for a name" in text


@pytest.mark.parametrize("text", [
    '{"entries":[{}', '{"entries":[{}]', '{"entries":[{}]}}', '{"entries":[{},]}', '{"entries":[{}],}',
    '{"entries" [{}]}', '{"entries":[{}] "format":"cvmvm-trace/3"}', '{,}', '{"a":1,,"b":2}', '{"entries":[0]}',
    '{"entries":[[]]}', '{"entries":{}}', '{"entries":"x"}', '{}', '[]', '"x"', '', '\n', ' ', '{"entries":[{}]} x',
    ']{"entries":[]}', '{"entries":[]]}', '{"format":"cvmvm-trace/3"}\n0\n', '{"format":"cvmvm-trace/3"}\n[]\n',
    '{"format":"cvmvm-trace/3"}\n\n{}\n', '{"format":"cvmvm-trace/3","entries":[]}\n{}\n',
])
def test_broken_framing_is_malformed(text):
    assert outcome(text.encode()) == "malformed.trace"


def peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
    except CvmError:
        pass
    finally:
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return top


@pytest.mark.parametrize("kind", ["document", "lines", "one entry"])
def test_hostile_json_builds_no_more_than_one_entry_while_it_is_read(kind):
    # Empty arrays are JSON's costliest objects per character (56 bytes for three characters):
    # read whole, 16 MiB of them would build about 300 MiB.
    n = (16 << 20) // 3
    head = trace_lines(DOCS[0]).split(b"\n")[0]
    data = {"document": b'{"entries":[' + b"[]," * n + b'[]],"format":"cvmvm-trace/3"}',
            "lines": head + b'\n{"a":[' + b"[]," * n + b"[]]}\n",
            "one entry": b'{"entries":[{"kind":"input","a":[' + b"[]," * n + b"[]]}]}"}[kind]
    # The text, the layout's numpy steps and its positions (at most 4 bytes each of 2 x 2^22).
    assert peak(lambda: trace_codec.load_trace(data, "t")) < len(data) + (80 << 20)


def test_a_long_trace_keeps_its_entries_not_the_objects_parsing_built():
    # 4,000 instructions in a chain: a trace of 1 MiB.
    model = build([Input("x", TensorType((1, 4), 8))], [],
                  [instr("relu", (k,), k + 1) for k in range(4000)], [4000])
    doc = trace_doc(model, {"x": np.array([[5, -100, 120, 7]], dtype=np.int32)})
    for data in (trace_bytes(doc), trace_lines(doc)):
        top = peak(lambda: trace_codec.load_trace(data, "t"))
        # Read whole, the same file built about 11 bytes of objects a character.
        assert top < 4 * len(data) + (48 << 20), (top, len(data))


def test_the_layout_locates_what_nests_inside_the_first_value():
    text = ' {"a": [1, {"b": "]}"}], "c": {"d": [[]]}} [[0]]'
    layout = strict.json_layout(text, {2: 10, 3: 10})
    assert (layout.deepest, layout.lowest, layout.first_end) == (4, 0, text.index("} [[") + 1)
    assert [text[a:b + 1] for a, b in zip(*layout.spans[2])] == ['[1, {"b": "]}"}]', '{"d": [[]]}']
    assert [text[a:b + 1] for a, b in zip(*layout.spans[3])] == ['{"b": "]}"}', '[[]]']
    capped = strict.json_layout(text, {2: 1})
    assert capped.counts[2] == 2 and [text[a:b + 1] for a, b in zip(*capped.spans[2])] == ['[1, {"b": "]}"}]']
    assert strict.json_layout("]][").lowest == -2 and strict.json_layout("[").first_end == -1
