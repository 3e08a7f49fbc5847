"""The op_attrs grammar (serializer/cortex/attr_text.py): literals the runtime's parser accepts
and rejects, kind by kind, and the writer and the parser as an inverse pair."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isa.attrs import BOOL, INT, INTS, OPT_INT, STR
from isa.errors import CvmError
from isa.table import OP_BY_NAME
from serializer.cortex import read_cortex
from serializer.cortex.attr_text import attr_text, decode_attr, operator_attrs_text, read_operator_attrs
from tests.reference import case_params, cvm_cases


# -- attribute literals, kind by kind (the runtime's dmlc parameter parser) ----

ACCEPTED = [
    (INT, "5", 5), (INT, "-5", -5), (INT, "+5", 5), (INT, " 5 ", 5), (INT, "\t7\n", 7), (INT, "007", 7),
    (INT, "0", 0), (INT, "-0", 0), (INT, "2147483647", 2147483647), (INT, "-2147483648", -2147483648),
    (BOOL, "true", True), (BOOL, "True", True), (BOOL, "TRUE", True), (BOOL, "tRuE", True), (BOOL, "1", True),
    (BOOL, "false", False), (BOOL, "False", False), (BOOL, "FALSE", False), (BOOL, "0", False),
    (INTS, "(1, 2)", (1, 2)), (INTS, "[1, 2]", (1, 2)), (INTS, "(1,2)", (1, 2)), (INTS, "(1,)", (1,)),
    (INTS, "[1]", (1,)), (INTS, "()", ()), (INTS, "[]", ()), (INTS, "( )", ()), (INTS, " (1, 2) ", (1, 2)),
    (INTS, "(1, 2,)", (1, 2)), (INTS, "(1, 2, )", (1, 2)), (INTS, "(-1, -2)", (-1, -2)), (INTS, "(+1, 2)", (1, 2)),
    (INTS, "( 1 , 2 )", (1, 2)), (INTS, "(1L, 2L)", (1, 2)), (INTS, "(1 L, 2)", (1, 2)), (INTS, "(1, 2]", (1, 2)),
    (INTS, "5", (5,)), (INTS, "-1", (-1,)), (INTS, " 5", (5,)), (INTS, "5 ", (5,)),
    (INTS, "(0, 1, 2, 3, 4, 5, 6)", (0, 1, 2, 3, 4, 5, 6)),
    (OPT_INT, "None", None), (OPT_INT, "None ", None), (OPT_INT, "5", 5), (OPT_INT, "-3", -3),
    (OPT_INT, " 7", 7), (OPT_INT, "5L", 5), (OPT_INT, "5L ", 5),
    (STR, "NCHW", "NCHW"), (STR, "", ""), (STR, " a b ", " a b "), (STR, "(1, 2)", "(1, 2)"),
]

REJECTED = [
    (INT, ""), (INT, " "), (INT, "5.0"), (INT, "5L"), (INT, "0x10"), (INT, "five"), (INT, "- 5"), (INT, "5 5"),
    (INT, "--5"), (INT, "2147483648"), (INT, "-2147483649"), (INT, "1e3"), (INT, "\u0661"), (INT, "True"),
    (INT, "(5,)"), (INT, "5\x00"),
    (BOOL, ""), (BOOL, "maybe"), (BOOL, "yes"), (BOOL, "no"), (BOOL, "2"), (BOOL, " true"), (BOOL, "true "),
    (BOOL, "tru"), (BOOL, "01"), (BOOL, "\uff54rue"), (BOOL, "None"),
    (INTS, ""), (INTS, " "), (INTS, "("), (INTS, "(1"), (INTS, "(1,"), (INTS, "(1 2)"), (INTS, "(,)"),
    (INTS, "(1,,2)"), (INTS, "+5"), (INTS, "5L"), (INTS, "(1, 2) x"), (INTS, "1, 2"), (INTS, "(1L , 2)"),
    (INTS, "(a)"), (INTS, "(2147483648,)"), (INTS, "{1, 2}"), (INTS, "(1.5,)"), (INTS, "x(1,)"), (INTS, "(1)(2)"),
    (INTS, "()x"), (INTS, "(1L"),
    (OPT_INT, " None"), (OPT_INT, "none"), (OPT_INT, "Nonesense"), (OPT_INT, ""), (OPT_INT, "5.5"),
    (OPT_INT, "NULL"), (OPT_INT, "Non"), (OPT_INT, "5LL"), (OPT_INT, "(5,)"),
]


@pytest.mark.parametrize("kind, text, value", ACCEPTED)
def test_attribute_literals_accepted(kind, text, value):
    got = decode_attr(kind, text, "test")
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("kind, text", REJECTED)
def test_attribute_literals_rejected(kind, text):
    with pytest.raises(CvmError) as e:
        decode_attr(kind, text, "test")
    assert e.value.code == "malformed.attr"


INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
VALUES = {INT: INT32, BOOL: st.booleans(), INTS: st.lists(INT32, max_size=8).map(tuple),
          OPT_INT: st.none() | INT32, STR: st.text(st.characters(min_codepoint=32), max_size=12)}


@settings(derandomize=True, max_examples=300, deadline=None)
@given(st.sampled_from(sorted(VALUES)).flatmap(lambda k: st.tuples(st.just(k), VALUES[k])))
def test_written_attribute_literals_read_back(kind_value):
    kind, value = kind_value
    assert decode_attr(kind, attr_text(kind, value), "test") == value


def test_every_operator_record_of_the_reference_cases_reads_back():
    """operator_attrs_text writes every attribute explicitly; reading it back gives the same record."""
    seen = 0
    for case in cvm_cases():
        try:
            model = read_cortex(case["graph"], case_params(case))
        except CvmError:
            continue
        for instr in model.instrs:
            text = operator_attrs_text(instr.attrs)
            assert read_operator_attrs(OP_BY_NAME[instr.op], text, "test") == instr.attrs, text
            seen += 1
    assert seen > 100


@pytest.mark.parametrize("text, value", [
    ("0" * 5000 + "7", 7),
    ("-" + "0" * 5000 + "2147483648", -(1 << 31)),
    ("9" * 5000, None),
    ("1" + "0" * 10, None),
    ("2147483647", (1 << 31) - 1),
])
def test_long_digit_strings_never_reach_int(text, value):
    # int() of more than 4,300 digits raises ValueError unless PYTHONINTMAXSTRDIGITS says otherwise.
    if value is None:
        with pytest.raises(CvmError) as e:
            decode_attr(INT, text, "x")
        assert e.value.code == "malformed.attr"
    else:
        assert decode_attr(INT, text, "x") == value
    ints = f"({text}, 1)"
    if value is None:
        with pytest.raises(CvmError):
            decode_attr(INTS, ints, "x")
    else:
        assert decode_attr(INTS, ints, "x") == (value, 1)
