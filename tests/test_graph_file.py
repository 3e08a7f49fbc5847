"""Reading Cortex graph JSON text a piece at a time: any JSON spelling of a graph reads as the
parsed graph does, and what parsing builds at once is bounded by a piece or by the counts the
graph allows, not by the file (serializer.cortex.read._Text)."""

from __future__ import annotations

import gc
import gzip
import json
import random
import tracemalloc
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isa.errors import MAX_MESSAGE, CvmError, MalformedError
from serializer.cortex import read as cortex_read
from serializer.cortex import read_cortex
from tests.test_cortex_format import relu_graph
from tests.test_trace_file import shuffled

REPO = Path(__file__).resolve().parents[1]
PERF = json.loads(gzip.decompress((REPO / "fixtures" / "models" / "perf" / "graph.json.gz").read_bytes()))
PERF_PARAMS = gzip.decompress((REPO / "fixtures" / "models" / "perf" / "params.bin.gz").read_bytes())


def outcome(graph, params=None):
    try:
        return read_cortex(graph, params)
    except CvmError as e:
        return e.code, e.message


@settings(max_examples=20, deadline=None)
@given(indent=st.sampled_from([None, 0, 2, "\t"]),
       separators=st.sampled_from([(",", ":"), (", ", ": "), (" ,", " :  ")]), seed=st.integers(0, 2 ** 32 - 1), walk=st.sampled_from([0, 64, cortex_read._WALK_CHARS]))
def test_any_json_spelling_of_a_graph_reads_as_the_parsed_graph(indent, separators, seed, walk):
    """Key order, spacing, and whether each array and object is walked or parsed whole change
    nothing (walk: the longest parsed whole)."""
    text = json.dumps(shuffled(PERF, random.Random(seed)), indent=indent, separators=separators)
    with mock.patch.object(cortex_read, "_WALK_CHARS", walk):
        assert read_cortex(text.encode(), PERF_PARAMS) == read_cortex(PERF, PERF_PARAMS)


# Characters that make and break JSON's structure.
EDITS = st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 3), st.sampled_from(list('[]{}",:\\ \n0-tna'))),
                 min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(edits=EDITS, walk=st.sampled_from([0, 16, cortex_read._WALK_CHARS]))
def test_an_edited_graph_reads_as_json_parsed_whole_reads(edits, walk):
    """Broken or rebuilt structure: the text read a piece at a time gives what json.loads of the
    whole text, read as a parsed graph, gives (the same code; any text json refuses is
    malformed.graph_json)."""
    text = bytearray(json.dumps(relu_graph()).encode())
    for at, how, ch in edits:
        at %= len(text) + 1
        if how == 0:
            text[at:at] = ch.encode()
        elif how == 1:
            text[at:at + 1] = ch.encode()
        else:
            del text[at:at + 1]
    try:
        doc = json.loads(text)
    except ValueError:
        expected = "malformed.graph_json"
    else:
        expected = outcome(doc) if type(doc) is dict else "malformed.graph_json"
        expected = expected if type(expected) is str else expected[0] if type(expected) is tuple else "ok"
    with mock.patch.object(cortex_read, "_WALK_CHARS", walk):
        got = outcome(bytes(text))
    assert (got if type(got) is str else got[0] if type(got) is tuple else "ok") == expected


def hostile(where: str, size: int) -> bytes:
    """relu_graph's text with ``size`` bytes of `[],` (JSON's costliest objects per character:
    a 56-byte list for each three) in one of its arrays."""
    g = relu_graph()
    filler = "[]," * (size // 3) + "[]"
    marker = "__filler__"
    if where == "nodes":
        g["nodes"] = marker
    elif where == "inputs":
        g["nodes"][1]["inputs"] = marker
    elif where == "shape":
        g["attrs"]["shape"][1] = marker
    elif where == "heads":
        g["heads"] = [marker]
    elif where == "arg_nodes":
        filler = "1000," * (size // 5) + "0"
        g["arg_nodes"] = marker
    elif where == "op_attrs":
        filler = '"ab",' * (size // 5) + '"ab"'
        g["attrs"]["op_attrs"][1] = marker
    return json.dumps(g).replace(f'"{marker}"', f"[{filler}]").encode()


@pytest.mark.parametrize("where", ["nodes", "inputs", "shape", "heads", "arg_nodes", "op_attrs"])
def test_a_hostile_graph_builds_a_bounded_amount(where):
    """16 MiB of objects that a whole-text parse would build 19 bytes of objects a character for
    (300 MiB) are refused having built at most about three times the text (its copies included)
    besides the layout's arrays."""
    data = hostile(where, 16 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(CvmError) as e:
            read_cortex(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert e.value.code in ("malformed.graph_json", "invalid.graph", "limit.items", "limit.bytes")
    # The layout's arrays of positions are allocated at their caps (tracemalloc counts them whole;
    # only what is found is ever written), and its numpy steps take about 10 MiB.
    positions = sum(8 * min(cap, (len(data) + 1) // 2) for cap in cortex_read._LEVELS.values())
    assert peak < 3 * len(data) + positions + (16 << 20), (where, peak / len(data))


def test_a_piece_parsed_whole_is_bounded_before_it_is_parsed():
    bound = cortex_read.MAX_PIECE_CHARS
    for space in (bound - len("[1, 0, 0]"), bound - len("[1, 0, 0]") + 1):
        g = relu_graph()
        text = json.dumps(g).replace("[1, 0, 0]", "[1," + " " * space + " 0, 0]")
        got = outcome(text)
        if space + len("[1, 0, 0]") <= bound:
            assert got == read_cortex(g)
        else:
            assert got[0] == "limit.bytes" and "heads[0]" in got[1], got


@pytest.mark.parametrize("enabled", [True, False])
def test_the_cycle_collector_is_paused_while_a_graph_is_read_and_resumes_as_it_was(enabled):
    seen = []
    real = cortex_read._read_graph
    (gc.enable if enabled else gc.disable)()
    try:
        with mock.patch.object(cortex_read, "_read_graph", lambda src: seen.append(gc.isenabled()) or real(src)):
            read_cortex(json.dumps(relu_graph()))
            assert gc.isenabled() is enabled
            with pytest.raises(CvmError):
                read_cortex(json.dumps(relu_graph()).replace('"relu"', '"no_such_op"'))
            assert gc.isenabled() is enabled
            read_cortex(relu_graph())
        assert seen == [False, False, False] and gc.isenabled() is enabled
    finally:
        gc.enable()


def test_lists_are_read_no_longer_than_the_graph_allows():
    g = relu_graph()
    g["arg_nodes"] = [0, 1, 0]
    assert outcome(g)[0] == "invalid.graph" and "more ids than the graph's 2 nodes" in outcome(g)[1]
    g = relu_graph()
    g["node_row_ptr"] = [0, 1, 2, 3]
    assert outcome(g)[0] == "invalid.graph"
    g = relu_graph()
    g["attrs"]["precision"][1] += [8] * 5
    assert outcome(g) == ("invalid.graph", "attrs.precision has more than 2 entries; the graph has 2")
    g = relu_graph()
    g["attrs"]["dtype"] = ["list_int", [4, 4, 4]]
    assert outcome(g)[0] == "invalid.graph"
    with mock.patch.object(cortex_read, "MAX_NODES", 1):
        assert outcome(relu_graph())[0] == "limit.items"
    with mock.patch.object(cortex_read, "MAX_ITEMS", 1):
        g = relu_graph()
        g["nodes"][1]["inputs"] *= 2
        assert outcome(g) == ("limit.items", "nodes[1].inputs: more than 1 inputs")
        g = relu_graph()
        g["heads"] *= 2
        assert outcome(g) == ("limit.items", "heads: more than 1 outputs")


def test_a_message_names_a_long_list_by_its_first_difference():
    g = relu_graph()
    g["node_row_ptr"] = [0, 1, 5]
    assert outcome(g)[1].endswith("node_row_ptr[2] is 5, where it must be 2")
    g["node_row_ptr"] = list(range(100_000))
    code, message = outcome(g)
    assert code == "invalid.graph" and len(message) < 200


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40).map(lambda s: s * 500))
def test_every_message_is_one_printable_line_of_bounded_length(text):
    message = MalformedError("graph_json", f"name {text}").message
    assert message.isprintable() and len(message) <= MAX_MESSAGE
    assert message == MalformedError("graph_json", message).message   # already one line: kept
