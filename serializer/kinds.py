"""What kind of cvmvm file some bytes are, told from their content alone, and the versions of
every format.

Every loader asks ``expect`` before it decodes, so a file of the wrong kind is
named as such ("this is a receipt, not a model") rather than failing deep in a
decoder; ``cvmvm show`` asks ``detect``.  Detection reads a few leading bytes
(the .npy and params magics, the ``format`` name a msgpack record starts
with) or searches a JSON text for a trace's format name; it never decodes a
whole file, and it only says what a file claims to be: the decoders still
check everything.  The format names and versions are read from the codecs,
so a codec's change flows through.
"""

from __future__ import annotations

import re
import struct
from typing import Sequence

from isa.errors import MalformedError
from isa.table import ISA_VERSION
from serializer import native
from serializer.cortex.layout import CANONICAL_VERSION, VERSIONS
from serializer.cortex.params import PARAMS_MAGIC
from serializer.records import receipt, stepproof, trace, transactions

NATIVE = "native model"
CORTEX_GRAPH = "Cortex graph JSON"
CORTEX_PARAMS = "Cortex params binary"
RECEIPT = "receipt"
TRACE = "trace"
STEP_PROOF = "step proof"
TXS = "transaction file"
NPY = ".npy array"

KINDS = (NATIVE, CORTEX_GRAPH, CORTEX_PARAMS, RECEIPT, TRACE, STEP_PROOF, TXS, NPY)
MODEL = (NATIVE, CORTEX_GRAPH)  # what every command that takes a MODEL accepts

# The msgpack records: the format name their leading map's first entry holds.
_RECORDS = {native.FORMAT_NAME: NATIVE, receipt.RECEIPT_FORMAT: RECEIPT, transactions.TXS_FORMAT: TXS,
            stepproof.PROOF_FORMAT: STEP_PROOF}
_NPY_MAGIC = b"\x93NUMPY"
_FORMAT_KEY = b"\xa6format"  # the msgpack str "format"
# The name before the version: a trace of another version is still named a trace.
_TRACE_NAME = re.compile(rb'"format"\s*:\s*"' + re.escape(trace.TRACE_FORMAT.split("/")[0].encode()) + rb"/")
_GRAPH_KEY = re.compile(rb'"nodes"\s*:')


def versions() -> dict[str, int | str | list[str]]:
    """The ISA version and each format's version as its codec states it (the Cortex graph: the
    version written, and the versions read)."""
    return {"isa": ISA_VERSION, "native": native.FORMAT_VERSION, "receipt": receipt.RECEIPT_VERSION,
            "transactions": transactions.TXS_VERSION, "trace": trace.TRACE_VERSION,
            "step_proof": stepproof.PROOF_VERSION, "cortex_graph": CANONICAL_VERSION,
            "cortex_graph_read": list(VERSIONS)}


def _record_name(data: bytes) -> str | None:
    """The format name of a msgpack map whose first key is "format" (a fixmap or map16/32 header)."""
    if not msgpack_map(data):
        return None
    pos = {0xde: 3, 0xdf: 5}.get(data[0], 1)
    if data[pos:pos + len(_FORMAT_KEY)] != _FORMAT_KEY:
        return None
    pos += len(_FORMAT_KEY)
    if pos >= len(data):
        return None
    b = data[pos]
    if 0xa0 <= b <= 0xbf:
        size, pos = b & 0x1f, pos + 1
    elif b == 0xd9 and pos + 1 < len(data):
        size, pos = data[pos + 1], pos + 2
    else:
        return None
    try:
        return data[pos:pos + size].decode("utf-8") if pos + size <= len(data) else None
    except UnicodeDecodeError:
        return None


def detect(data: bytes) -> str | None:
    """The kind of file ``data`` is, or None when it is none of KINDS.

    A JSON object with a "nodes" key that is not a trace is taken for a Cortex
    graph: the Cortex reader then says what, if anything, is wrong with it.
    """
    if data.startswith(_NPY_MAGIC):
        return NPY
    if len(data) >= 8 and struct.unpack_from("<Q", data)[0] == PARAMS_MAGIC:
        return CORTEX_PARAMS
    if data.startswith(transactions.MAGIC):
        return TXS
    name = _record_name(data)
    if name is not None:
        return _RECORDS.get(name)
    if data.lstrip()[:1] == b"{":
        if _TRACE_NAME.search(data):
            return TRACE
        if _GRAPH_KEY.search(data):
            return CORTEX_GRAPH
    return None


def msgpack_map(head: bytes) -> bool:
    """Whether ``head`` begins with a msgpack map header, as every cvmvm record does."""
    return bool(head) and (0x80 <= head[0] <= 0x8f or head[0] in (0xde, 0xdf))


def json_head(head: bytes) -> bool:
    """Whether a file that begins with ``head`` is JSON text (a Cortex graph or a trace): it begins
    with '{' or whitespace, as no other kind does (a msgpack record begins with a map header, the
    binary formats with their magic).  A reader picks the kind's byte limit from this before it
    reads the rest."""
    return head[:1] == b"{" or head[:1].isspace()


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def expect(data: bytes, wanted: Sequence[str], where: str, what: str | None = None) -> str | None:
    """The kind of ``data`` when it is one of ``wanted``; None when it is no known kind (the
    decoder then says what is wrong); ``malformed.kind`` naming it when it is another kind.

    ``what`` names what was wanted in the message (default: the wanted kinds).
    """
    found = detect(data)
    if found is not None and found not in wanted:
        raise MalformedError("kind", f"{where}: this is {_a(found)}, not {what or ' or '.join(_a(k) for k in wanted)}")
    return found
