"""Attribute records whose constraints are data.

An op's attributes are a frozen dataclass; each field is declared with
``attr(kind, domain, default)``.  ``parse_attrs`` turns typed values (from the
native format, or from the Cortex loader after it has decoded its strings) into
a record, rejecting unknown, missing, ill-typed and out-of-domain values.

Kinds are the wire types: INT, BOOL, INTS (tuple of ints), OPT_INT (int or
None), STR.  Domains are small predicate objects with a readable ``describe``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from isa.errors import InvalidError, shown

INT = "int"
BOOL = "bool"
INTS = "ints"
OPT_INT = "opt_int"
STR = "str"
KINDS = (INT, BOOL, INTS, OPT_INT, STR)

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1

# Every name a dtype attribute of the Cortex runtime parses (its DMLC_DECLARE_DTYPE_FIELD enum,
# in declaration order); anything else fails its attribute parser.
RUNTIME_DTYPE_NAMES = ("float16", "float32", "float64", "uint8", "uint16", "uint32", "uint64",
                       "int8", "int16", "int32", "int64")


@dataclass(frozen=True)
class Domain:
    """A named predicate on one attribute value."""

    describe: str
    test: Callable[[Any], bool]

    def __call__(self, value: Any) -> bool:
        return self.test(value)


def between(lo: int, hi: int) -> Domain:
    return Domain(f"in [{lo}, {hi}]", lambda v: lo <= v <= hi)


def one_of(*values: Any) -> Domain:
    return Domain(f"one of {', '.join(map(repr, values))}", lambda v: v in values)


def each(inner: Domain, min_len: int = 0, max_len: int = 6) -> Domain:
    """A tuple whose length is in [min_len, max_len] and whose every entry is in ``inner``."""
    return Domain(
        f"a tuple of {min_len}..{max_len} values, each {inner.describe}",
        lambda v: min_len <= len(v) <= max_len and all(inner(x) for x in v),
    )


ANY_INT32 = between(INT32_MIN, INT32_MAX)
ANY_BOOL = Domain("true or false", lambda v: True)


def attr(kind: str, domain: Domain, default: Any = dataclasses.MISSING) -> Any:
    """Declare one attribute field: its wire kind, its domain and (Cortex) default."""
    if kind not in KINDS:
        raise ValueError(f"unknown attribute kind {kind!r}")
    metadata = {"kind": kind, "domain": domain}
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class FieldSpec:
    name: str
    kind: str
    domain: Domain
    default: Any  # dataclasses.MISSING when required


def attr_fields(record: type) -> tuple[FieldSpec, ...]:
    """The declared fields of an attribute record, in declaration order."""
    return tuple(
        FieldSpec(f.name, f.metadata["kind"], f.metadata["domain"], f.default)
        for f in dataclasses.fields(record)
    )


def well_typed(kind: str, value: Any, sequence: type[tuple[Any, ...]] | type[list[Any]] = tuple) -> bool:
    """Whether a value is of an attribute kind; INTS values are ``sequence``s (a wire format's arrays are lists)."""
    # type(v) is int, not isinstance: True is an int to isinstance.
    if kind == INT:
        return type(value) is int
    if kind == BOOL:
        return type(value) is bool
    if kind == INTS:
        return type(value) is sequence and all(type(x) is int for x in value)
    if kind == OPT_INT:
        return value is None or type(value) is int
    return type(value) is str


def parse_attrs(record: type, raw: Mapping[str, Any], *, fill_defaults: bool) -> Any:
    """Build an attribute record from typed values.

    ``fill_defaults`` is True for the Cortex format (missing keys take the
    runtime's defaults) and False for the native format, where every attribute
    is explicit on the wire.  Lists are accepted for INTS and frozen to tuples.
    """
    specs = attr_fields(record)
    names = {s.name for s in specs}
    unknown = sorted((k for k in raw if k not in names), key=shown)    # keys of any type, from Python
    if unknown:
        raise InvalidError("attr", f"unknown attribute {shown(unknown[0])}; expected some of {sorted(names)}")
    values: dict[str, Any] = {}
    for spec in specs:
        if spec.name in raw:
            value = raw[spec.name]
            if spec.kind == INTS and type(value) is list:
                value = tuple(value)
        elif fill_defaults and spec.default is not dataclasses.MISSING:
            value = spec.default
        else:
            raise InvalidError("attr", f"attribute {spec.name!r} is required")
        if not well_typed(spec.kind, value):
            raise InvalidError("attr", f"attribute {spec.name}={shown(value)} must be of kind {spec.kind}")
        if spec.kind == OPT_INT and value is None:
            pass
        elif not spec.domain(value):
            raise InvalidError("attr", f"attribute {spec.name}={shown(value)} must be {spec.domain.describe}")
        values[spec.name] = value
    return record(**values)


def attrs_to_dict(record: Any) -> dict[str, Any]:
    """Every attribute, explicit, in declaration order (the native wire form)."""
    return {s.name: getattr(record, s.name) for s in attr_fields(type(record))}
