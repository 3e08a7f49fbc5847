# About 900 lines: the mutations, the eight targets and the runner; a target is its seeds and its contract, read in one place.
"""The fuzzing suite: one target per untrusted input, mutations drawn by hypothesis, and the runner.

A target has seeds (valid inputs built from the repository alone), a case
format (bytes) and a contract ``check(case)``: every outcome is a result or a
CvmError whose code is documented; a mutated receipt, transaction or step
proof is accepted only when its bytes are the original's; a trace file whose
root is the original's shows exactly the original's committed fields.  The
runner adds the rest of the contract: no other exception, no case over 2 s,
and (in a worker process under RLIMIT_AS of 4 GiB) no death and no memory
error; an allocation before a size check would be one.

Cases are mutated seeds.  ``hypothesis`` draws every choice (which seed, which
mutations, where, what value), so a run is reproducible from its seed and a
failure shrinks to a small case.  Mutations act on bytes (bit flips, set
bytes, truncation, deletion, duplication, insertion, splices of another seed)
and on structure: the seed is decoded as msgpack or JSON, a node of the tree
is changed (its type, an integer to a boundary value, a length, a dim, a
string to another op or dtype name, a deeper nesting, a duplicated or
reordered key, a non-canonical msgpack width) and the tree is encoded again.

Used by tests/test_fuzz.py (a fixed budget in CI) and scripts/fuzz.py (long
runs); failures become files in fixtures/fuzz/<target>/ that
tests/test_fuzz.py replays forever.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import gzip
import hashlib
import io
import json
import os
import re
import resource
import shutil
import struct
import sys
import tempfile
import time
import tracemalloc
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import msgpack
import numpy as np
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from tests.platforms import address_space_env, bound_address_space

REPO = Path(__file__).resolve().parent.parent
CRASHES = REPO / "fixtures" / "fuzz"
CASE_SECONDS = 2.0                 # the contract: no case takes longer
ADDRESS_SPACE = 4 << 30            # workers run in this much address space (RLIMIT_AS)
MAX_MUTATIONS = 4


@functools.lru_cache(maxsize=None)
def scratch() -> Path:
    """This process's scratch directory (stores, .npy cases), removed when it exits."""
    d = Path(tempfile.mkdtemp(prefix="cvmvm-fuzz-"))
    atexit.register(shutil.rmtree, d, True)
    return d


class Violation(AssertionError):
    """A case broke its target's contract (the case is attached by the runner)."""


# -- structure-aware encoders: what a mutated tree is written back with -----------------------

@dataclass(frozen=True)
class Dup:
    """A msgpack map or JSON object written with these (key, value) pairs, duplicates included."""
    pairs: tuple[tuple[Any, Any], ...]


@dataclass(frozen=True)
class Wide:
    """A msgpack value written with the widest header of its kind (valid msgpack, never canonical)."""
    value: Any


@dataclass(frozen=True)
class Nest:
    """A value inside ``depth`` one-element arrays."""
    value: Any
    depth: int


@dataclass(frozen=True)
class Token:
    """JSON text written as it is (a long integer, a float, NaN)."""
    text: str


def pack(value: Any) -> bytes:
    """msgpack bytes of a tree that may hold Dup, Wide and Nest nodes."""
    if isinstance(value, Nest):
        return b"\x91" * value.depth + pack(value.value)
    if isinstance(value, Dup):
        return _map_header(len(value.pairs)) + b"".join(pack(k) + pack(v) for k, v in value.pairs)
    if isinstance(value, Wide):
        return _wide(value.value)
    if isinstance(value, dict):
        return _map_header(len(value)) + b"".join(pack(k) + pack(v) for k, v in value.items())
    if isinstance(value, list):
        n = len(value)
        head = bytes([0x90 + n]) if n < 16 else b"\xdc" + struct.pack(">H", n) if n < 1 << 16 else \
            b"\xdd" + struct.pack(">I", n)
        return head + b"".join(pack(v) for v in value)
    return msgpack.packb(value, use_bin_type=True)


def _map_header(n: int) -> bytes:
    return bytes([0x80 + n]) if n < 16 else b"\xde" + struct.pack(">H", n) if n < 1 << 16 else \
        b"\xdf" + struct.pack(">I", n)


def _wide(v: Any) -> bytes:
    if type(v) is int:
        return b"\xcf" + struct.pack(">Q", v) if v >= 0 else b"\xd3" + struct.pack(">q", v)
    if isinstance(v, str):
        raw = v.encode("utf-8", "surrogatepass")
        return b"\xdb" + struct.pack(">I", len(raw)) + raw
    if isinstance(v, bytes):
        return b"\xc6" + struct.pack(">I", len(v)) + v
    if isinstance(v, list):
        return b"\xdd" + struct.pack(">I", len(v)) + b"".join(pack(x) for x in v)
    if isinstance(v, dict):
        return b"\xdf" + struct.pack(">I", len(v)) + b"".join(pack(k) + pack(x) for k, x in v.items())
    return pack(v)


def dump_json(value: Any) -> str:
    """JSON text of a tree that may hold Dup, Nest and Token nodes."""
    if isinstance(value, Token):
        return value.text
    if isinstance(value, Nest):
        return "[" * value.depth + dump_json(value.value) + "]" * value.depth
    if isinstance(value, Dup):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {dump_json(v)}" for k, v in value.pairs) + "}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {dump_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(dump_json(v) for v in value) + "]"
    if isinstance(value, bytes):
        return json.dumps(value.hex())
    return json.dumps(value)


# -- mutations ------------------------------------------------------------------------

INTERESTING_INTS = (0, 1, -1, 2, 6, 7, 8, 31, 32, 33, 127, 128, 255, 256, 1023, 1024, 1025, 65535, 65536,
                    (1 << 20), (1 << 20) + 1, (1 << 24), (1 << 24) + 1, (1 << 30), (1 << 31) - 1, 1 << 31,
                    -(1 << 31), (1 << 32) - 1, 1 << 32, (1 << 40) + 1, (1 << 63) - 1, -(1 << 63), (1 << 64) - 1)
INTERESTING_STRS = ("", "int32", "int64", "int8", "uint8", "float16", "float32", "float64", "bool", "relu",
                    "dense", "conv2d", "max_pool", "cvm_right_shift", "null", "cvm_op", "data", "None", "True",
                    "(1, 2)", "[1,]", "(0,)", "-0", " 1", "9" * 30, "0" * 40 + "1", "NCHW", "__undef__",
                    "x" * 1025, "\u00e9", "\ud800", "cvmvm", "cvmvm-receipt", "cvmvm-txs", "cvmvm-step-proof",
                    "cvmvm-trace/1", "input", "param", "instr", "a" * 64, "0" * 64)
INTERESTING_BYTES = (0x00, 0x01, 0x7f, 0x80, 0xff, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc6, 0xca, 0xcb, 0xcc, 0xcf,
                     0xd3, 0xd9, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0x90, 0x9f, 0x80, 0x8f, 0xa0, 0xbf, 0x22, 0x5b,
                     0x5d, 0x7b, 0x7d, 0x2c, 0x3a, 0x5c, 0x2d, 0x30, 0x39, 0x20)


def _paths(tree: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) of the tree, depth first; the root as (None, None)."""
    found: list[tuple[Any, Any]] = [(None, None)]
    stack = [tree]
    while stack:
        node = stack.pop()
        keys = list(node) if isinstance(node, dict) else range(len(node)) if isinstance(node, list) else ()
        for k in keys:
            found.append((node, k))
            if isinstance(node[k], (dict, list)):
                stack.append(node[k])
    return found


def _replacement(old: Any, choice: int, arg: int, json_mode: bool) -> Any:
    """A new value for a tree node: choice picks the kind of change, arg parameterizes it."""
    kinds = 14
    c = choice % kinds
    if c == 0:
        return INTERESTING_INTS[arg % len(INTERESTING_INTS)]
    if c == 1:
        return INTERESTING_STRS[arg % len(INTERESTING_STRS)]
    if c == 2:
        return [None, True, False, 1.5, [], {}, b"", b"\x00" * 32, -0.0][arg % 9]
    if c == 3 and type(old) is int:
        return old + [-1, 1, -2, 2][arg % 4] if arg % 5 else -old
    if c == 4 and isinstance(old, list):
        return old[: arg % (len(old) + 1)]                    # shorter
    if c == 5 and isinstance(old, list) and old:
        return old + [old[arg % len(old)]] * (1 + arg % 3)    # longer
    if c == 6 and isinstance(old, dict) and old:
        keys = list(old)
        drop = keys[arg % len(keys)]
        return {k: v for k, v in old.items() if k != drop}    # a key missing
    if c == 7 and isinstance(old, dict) and old:
        pairs = list(old.items())
        return Dup(tuple(pairs + [pairs[arg % len(pairs)]]))  # a key twice
    if c == 8 and isinstance(old, dict) and len(old) > 1:
        pairs = list(old.items())
        k = arg % (len(pairs) - 1)
        pairs[k], pairs[k + 1] = pairs[k + 1], pairs[k]
        return dict(pairs)                                    # reordered
    if c == 9:
        return Nest(old, 1 + arg % 4 if arg % 7 else 100_000)  # nested, sometimes very deep
    if c == 10 and isinstance(old, bytes):
        return old[: arg % (len(old) + 1)] if arg % 2 else old + bytes([arg % 256]) * (1 + arg % 5)
    if c == 11 and isinstance(old, str):
        return old + old[-1:] * (1 + arg % 3) if arg % 3 else old[:-1]
    if c == 12:
        if json_mode:
            return Token(["9" * 5000, "-" + "9" * 25, "1e400", "NaN", "-Infinity", "1.0", "0.5", "-0",
                          '"\\u0000"', '"\\ud800"'][arg % 10])
        return Wide(old)
    if c == 13 and isinstance(old, list) and len(old) > 1:
        k = arg % (len(old) - 1)
        return old[:k] + [old[k + 1], old[k]] + old[k + 2:]   # two items swapped
    return INTERESTING_INTS[arg % len(INTERESTING_INTS)]


def mutate_tree(tree: Any, path_choice: int, choice: int, arg: int, json_mode: bool) -> Any:
    paths = _paths(tree)
    container, key = paths[path_choice % len(paths)]
    if container is None:
        return _replacement(tree, choice, arg, json_mode)
    container[key] = _replacement(container[key], choice, arg, json_mode)
    return tree


def _decode_tree(data: bytes, fmt: str) -> Any:
    try:
        if fmt == "msgpack":
            return msgpack.unpackb(data, raw=False, strict_map_key=False, max_buffer_size=len(data))
        return json.loads(data)
    except Exception:   # anything that does not decode gets byte mutations only
        return None


def mutate(data: bytes, ops: list[tuple[int, int, int, int]], fmt: str | None, seeds: list[bytes]) -> bytes:
    """Apply each (kind, a, b, c) in turn: kinds 0-7 act on bytes, 8-15 on the decoded structure."""
    for kind, a, b, c in ops:
        n = len(data)
        k = kind % 16
        if k >= 8 and fmt is not None:
            tree = _decode_tree(data, fmt)
            if tree is not None:
                tree = mutate_tree(tree, a, b, c, fmt == "json")
                try:
                    data = pack(tree) if fmt == "msgpack" else dump_json(tree).encode("utf-8", "surrogatepass")
                except (OverflowError, ValueError, TypeError):
                    pass
                continue
        if n == 0:
            data = bytes([INTERESTING_BYTES[a % len(INTERESTING_BYTES)]])
        elif k == 0 or k >= 8:
            i = a % n
            data = data[:i] + bytes([data[i] ^ (1 << (b % 8))]) + data[i + 1:]
        elif k == 1:
            i = a % n
            data = data[:i] + bytes([INTERESTING_BYTES[b % len(INTERESTING_BYTES)]]) + data[i + 1:]
        elif k == 2:
            data = data[: a % n]
        elif k == 3:
            i = a % n
            data = data[:i] + data[i + 1 + b % 16:]
        elif k == 4:
            i = a % n
            data = data[:i] + data[i:i + 1 + b % 64] * (1 + c % 3) + data[i:]
        elif k == 5:
            i = a % (n + 1)
            data = data[:i] + bytes([(b >> (8 * j)) & 0xff for j in range(1 + c % 8)]) + data[i:]
        elif k == 6:
            other = seeds[b % len(seeds)]
            if other:
                j = c % len(other)
                data = data[: a % n] + other[j: j + 1 + (a ^ c) % 256] + data[a % n:]
        else:
            i = a % n
            data = data[:i] + struct.pack("<I", b & 0xffffffff) + data[i + 4:]
    return data


def cases(target: "Target") -> st.SearchStrategy[bytes]:
    """Mutated seeds of a target: a seed, then up to MAX_MUTATIONS drawn mutations."""
    word = st.integers(0, (1 << 32) - 1)
    op = st.tuples(st.integers(0, 15), word, word, word)

    @st.composite
    def build(draw: Any) -> bytes:
        seed_data = draw(st.sampled_from(target.seeds))
        ops = draw(st.lists(op, min_size=1, max_size=MAX_MUTATIONS))
        if target.fmt == "cortex":
            return mutate_cortex(seed_data, ops, target.seeds)
        if target.fmt == "txs":
            return mutate_txs(seed_data, ops, target.seeds)
        data = mutate(seed_data, ops, target.fmt, target.seeds)
        if target.name == "trace":
            data = reroot_trace(data, draw(st.integers(0, 2)))
        return data
    return build()


def reroot_trace(data: bytes, how: int) -> bytes:
    """What a dishonest node would write: the trace's program root (how 2), input commitment and
    root (how 1, 2) recomputed from whatever its entries now say; unchanged when it no longer
    parses."""
    from serializer.hashing import input_commitment, trace_root, tree_root
    from serializer.records import trace as codec
    try:
        doc = json.loads(data)
        if how == 2:
            entries = tuple(codec._entry(row, "entry") for row in doc["entries"])
            doc["program_root"] = codec._program_root(entries, doc["outputs"], "trace").hex()
        commitments = [bytes.fromhex(e["commitment"]) for e in doc["entries"]]
        inputs = input_commitment([c for c, e in zip(commitments, doc["entries"]) if e["kind"] == "input"])
        doc["input_commitment"] = inputs.hex()
        doc["root"] = trace_root(bytes.fromhex(doc["program_root"]), inputs, len(commitments),
                                 tree_root(commitments)).hex()
        return codec.trace_bytes(doc)
    except Exception:   # whatever no longer has a trace's shape stays as the mutations left it
        return data


def mutate_cortex(case: bytes, ops: list[tuple[int, int, int, int]], seeds: list[bytes]) -> bytes:
    """A Cortex case's graph JSON (JSON-aware) or params (bytes) mutated, the pair kept together."""
    graph, params = msgpack.unpackb(case, raw=False)
    pairs = [msgpack.unpackb(s, raw=False) for s in seeds]
    for kind, a, b, c in ops:
        if a % 3 and graph is not None:
            graph = mutate(graph, [(kind, a // 3, b, c)], "json", [g for g, _ in pairs])
        else:
            params = mutate(params or b"", [(kind, a // 3, b, c)], None, [p for _, p in pairs if p])
    return cortex_case(graph, params)


# -- the targets ------------------------------------------------------------------------------

@dataclass
class Target:
    name: str
    what: str                         # the untrusted input it covers (README Reliability)
    fmt: str | None                   # its seeds' structure: "msgpack", "json", "cortex" (graph JSON + params),
                                      # "txs" (framed msgpack records)
    build: Callable[[], "Setup"]      # seeds and the contract, built once per process

    @functools.cached_property
    def setup(self) -> "Setup":
        return self.build()

    @property
    def seeds(self) -> list[bytes]:
        return self.setup.seeds

    def check(self, case: bytes) -> None:
        self.setup.check(case)


@dataclass
class Setup:
    seeds: list[bytes]
    check: Callable[[bytes], None]


CODES_SEEN: set[str] = set()


def outcome(fn: Callable[[], Any]) -> Any:
    """A result, or None for a CvmError (its code recorded); any other exception propagates."""
    from isa.errors import FAMILIES, CvmError
    try:
        return fn()
    except CvmError as e:
        if type(e) not in FAMILIES or not re.fullmatch(r"[a-z_]+", e.reason) or "\n" in e.message:
            raise Violation(f"undocumented error {type(e).__name__} {e.code!r}: {e.message[:200]!r}") from None
        CODES_SEEN.add(e.code)
        return None


def decoded(decode: Callable[[bytes], Any], encode: Callable[[Any], bytes], case: bytes, what: str) -> Any:
    """The record a case decodes to, or None when it is refused; a record accepted from bytes
    other than its own encoding breaks the contract (one encoding per record)."""
    record = outcome(lambda: decode(case))
    if record is not None and encode(record) != case:
        raise Violation(f"a {what} decoded from bytes that are not its encoding")
    return record


def _small_run_inputs(model: Any) -> dict[str, np.ndarray] | None:
    """Zero inputs for a model cheap enough to run inside a case (else None)."""
    from isa.types import DTYPES
    types = model.program.types
    if model.ops > 2_000_000 or sum(t.size * DTYPES[t.dtype].itemsize for t in types) > 16 << 20:
        return None
    return {name: np.zeros(t.shape, dtype=DTYPES[t.dtype]) for name, t in model.inputs.items()}


def _model_contract(model: Any) -> None:
    """A model that loads has one canonical encoding, decodes back to itself, and runs or fails cleanly."""
    import cvmvm
    from serializer import native
    from cvmvm.vm import disasm
    disasm.listing(model.program)
    again = cvmvm.load(model.canonical_bytes)
    if again.model_hash != model.model_hash or native.encode(again.program.model) != model.canonical_bytes:
        raise Violation("a model that verifies does not decode back to itself")
    feeds = _small_run_inputs(model)
    if feeds is not None:
        outcome(lambda: model.run(feeds, trace=True))


def _native() -> Setup:
    import cvmvm
    from tests.test_receipt import column_sum_model, digits_model, mlp_model, pair_model, reshape_model
    seeds = [m().canonical_bytes for m in (mlp_model, pair_model, column_sum_model, reshape_model)]
    seeds += [digits_model().canonical_bytes, _maxpool_model().canonical_bytes]

    def check(case: bytes) -> None:
        model = outcome(lambda: cvmvm.load(case))
        if model is not None:
            if model.canonical_bytes != case:
                raise Violation("a native model was accepted in a non-canonical encoding")
            _model_contract(model)
    return Setup(seeds, check)


def _maxpool_model() -> Any:
    from isa.attrs import parse_attrs
    from isa.table import OP_BY_NAME
    from isa.types import TensorType
    from serializer.model import Input, Instr, Model as IR
    from cvmvm.vm.api import Model
    from cvmvm.vm.verify import verify
    attrs = parse_attrs(OP_BY_NAME["max_pool"].attrs, dict(
        kernel_shape=(2, 2), strides=(1, 2), dilations=(1, 1), pads=(0, 1, 1, 0), auto_pad="NOTSET", ceil_mode=1,
        storage_order=0, index_axis=2, index_dtype="int32"), fill_defaults=False)
    return Model(verify(IR((Input("x", TensorType((1, 2, 3, 4), None, "float32")),), (),
                           (Instr("max_pool", attrs, (0,), (1, 2)),), (1, 2, 0))))


def cortex_case(graph: bytes, params: bytes | None) -> bytes:
    """A Cortex case is one msgpack array: [graph JSON bytes, params bytes or nil]."""
    return msgpack.packb([graph, params], use_bin_type=True)


def _cortex() -> Setup:
    import cvmvm
    from serializer import cortex
    from tests.test_cortex_format import Y8, add_graph, blob, unary_graph
    digits = REPO / "fixtures" / "models" / "digits"
    seeds = [
        cortex_case(gzip.decompress((digits / "graph.json.gz").read_bytes()),
                    gzip.decompress((digits / "params.bin.gz").read_bytes())),
        cortex_case(json.dumps(add_graph()).encode(), blob(Y8)),
        cortex_case(json.dumps(unary_graph("cvm_right_shift", json.dumps({"precision": "8", "shift_bit": "2"})))
                    .encode(), None),
        cortex_case(json.dumps(unary_graph("max_pool2d", json.dumps({"pool_size": "(2, 2)", "strides": "(1, 1)",
                                                                      "padding": "(1, 0)"}))).encode(), None),
    ]

    def check(case: bytes) -> None:
        try:
            graph, params = msgpack.unpackb(case, raw=False)
            if not isinstance(graph, bytes) or not (params is None or isinstance(params, bytes)):
                return
        except Exception:   # not a case of this target: nothing to check
            return
        model = outcome(lambda: cvmvm.load_cortex(graph, params))
        if model is None:
            return
        _model_contract(model)
        # A model read from Cortex converts back, and the conversion reads as the same model.
        g, p = cortex.write_cortex(model.program.model, model.program.types)
        back = cvmvm.load_cortex(cortex.graph_to_json_bytes(g), p)
        if back.model_hash != model.model_hash:
            raise Violation("a Cortex model does not survive conversion to Cortex and back")
    return Setup(seeds, check)


def _npy() -> Setup:
    from cvmvm import files
    from isa.types import TensorType, vm_dtype
    from serializer.hashing import tensor_commitment
    seeds = []
    values = [np.arange(12, dtype=np.int32).reshape(3, 4), np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3)),
              np.arange(5, dtype=">i4"), np.array([True, False]), np.zeros((0, 2), np.uint8),
              np.array(2.5, np.float16), np.linspace(-1, 1, 7, dtype=np.float32)]
    for k, v in enumerate(values):
        buf = io.BytesIO()
        np.lib.format.write_array(buf, v, version=((1, 0), (2, 0), (3, 0))[k % 3], allow_pickle=False)
        seeds.append(buf.getvalue())
    workdir = scratch()

    def check(case: bytes) -> None:
        path = workdir / "case.npy"
        path.write_bytes(case)
        value = outcome(lambda: files.read_npy(path))
        if value is None:
            return
        # What cvmvm accepts, numpy reads as the same array (a differential check of the parser).
        try:
            theirs = np.load(path, allow_pickle=False)
        except Exception as e:
            raise Violation(f"read_npy accepted a file numpy refuses ({type(e).__name__})") from None
        if theirs.dtype != value.dtype or theirs.shape != value.shape or \
                not np.array_equal(theirs, value, equal_nan=value.dtype.kind == "f"):
            raise Violation("read_npy and numpy read different arrays")
        dtype = vm_dtype(value.dtype)
        if value.size and dtype is not None:   # committed as a tensor of its VM dtype, in either byte order
            outcome(lambda: tensor_commitment(value, TensorType(tuple(value.shape), None, dtype)))
    return Setup(seeds, check)


@functools.lru_cache(maxsize=None)
def _receipt_world() -> dict[str, Any]:
    """A signed and an unsigned receipt of real runs, with what checking them needs."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cvmvm.tx import receipt
    from tests.test_receipt import digits_model, mlp_model
    key = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"cvmvm/fuzz/key").digest())
    out = []
    images = np.load(REPO / "fixtures" / "models" / "digits" / "test_inputs.npy", allow_pickle=False)
    for model, inputs in ((mlp_model(), {"x": np.array([[5, -100, 120, 7]], dtype=np.int32)}),
                          (digits_model(), {"data": images[3]})):
        r = receipt.make_receipt(model, model.run(inputs, trace=True))
        out += [(r, model, inputs), (receipt.sign(r, key), model, inputs)]
    return {"receipts": out, "public": key.public_key().public_bytes_raw()}


def _receipts() -> Setup:
    from serializer.records import receipt as codec
    from cvmvm.tx import receipt
    world = _receipt_world()
    by_bytes = {codec.encode(r): (r, m, i) for r, m, i in world["receipts"]}
    seeds = list(by_bytes)
    actual = {m.model_hash: receipt.make_receipt(m, m.run(i, trace=True)) for _, m, i in world["receipts"]}

    def check(case: bytes) -> None:
        r = decoded(codec.decode, codec.encode, case, "receipt")
        if r is None:
            return
        real = actual.get(r.model_hash)
        if real is None:
            return
        for signer in (None, world["public"]):
            if all(c.ok for c in receipt.check(r, real, signer)) and case not in seeds:
                raise Violation("a mutated receipt passed check-receipt")
    return Setup(seeds, check)


@functools.lru_cache(maxsize=None)
def _tx_world() -> dict[str, Any]:
    """A store of two models and the records of their honest runs (inputs as the program read them)."""
    from cvmvm.tx.store import Store
    from cvmvm.tx.txtools import transaction_for
    from serializer.records import transactions
    from tests.test_receipt import mlp_model, pair_model
    store = Store(scratch() / "tx-store")
    records = []
    rng = np.random.default_rng(7)
    for model in (mlp_model(), pair_model()):
        store.add(model)
        for bound in (40, 300):   # the second run's inputs reach past their precision: carried clipped
            inputs = {n: rng.integers(-bound, bound, t.shape).astype(np.int32) for n, t in model.inputs.items()}
            tx, _, _ = transaction_for(model, inputs)
            records.append(transactions.encode_tx(tx))
    return {"store": store, "records": records}


def _txs_file(records: list[bytes]) -> bytes:
    from serializer.records import transactions
    return transactions.HEADER + b"".join(transactions.frame(r) for r in records) + transactions.end_frame(len(records))


def mutate_txs(case: bytes, ops: list[tuple[int, int, int, int]], seeds: list[bytes]) -> bytes:
    """A transaction file mutated as bytes, or one record of it as a msgpack tree (re-framed)."""
    from serializer.records import transactions
    for kind, a, b, c in ops:
        records = None
        if kind % 16 >= 8:
            try:
                records = [r.body for r in transactions.iter_records(io.BytesIO(case), "case")]
            except Exception:   # no longer framed: byte mutations only
                records = None
        if records:
            k = a % len(records)
            records[k] = mutate(records[k], [(kind, a // len(records), b, c)], "msgpack", records)
            case = _txs_file(records)
        else:
            case = mutate(case, [(kind % 8, a, b, c)], None, seeds)
    return case


def _transactions() -> Setup:
    from serializer.records import transactions
    from cvmvm.tx import replay, schedule
    world = _tx_world()
    originals = set(world["records"])
    seeds = [_txs_file(world["records"]), _txs_file(world["records"][:1])]

    def check(case: bytes) -> None:
        records = outcome(lambda: list(transactions.iter_records(io.BytesIO(case), "case")))
        if records is None or sum(len(r.body) for r in records) > 16 << 20:
            return
        for burst in schedule.replay_records(records, world["store"], schedule.Options(batch_size=8)):
            for o in burst:
                if o.status == replay.OK and records[o.index].body not in originals:
                    raise Violation("a mutated transaction replayed as ok")
                if o.status == replay.ERROR:
                    CODES_SEEN.add(str(o.error))
    return Setup(seeds, check)


def _step_proofs() -> Setup:
    from serializer.records import stepproof as codec
    from cvmvm.tx import element, stepproof
    from tests.test_receipt import digits_model, mlp_model, pair_model
    images = np.load(REPO / "fixtures" / "models" / "digits" / "test_inputs.npy", allow_pickle=False)
    roots = {}
    for model, inputs in ((mlp_model(), {"x": np.array([[5, -100, 120, 7]], dtype=np.int32)}),
                          (pair_model(), {"a": np.arange(6, dtype=np.int32).reshape(2, 3),
                                          "b": -np.arange(6, dtype=np.int32).reshape(2, 3)}),
                          (digits_model(), {"data": images[0]})):
        for k, s in enumerate(model.program.steps):
            # Whole-instruction proofs of the small models; element proofs (first and last
            # element) of every covered op.
            size = model.program.types[s.outputs[0]].size
            wanted = ([None] if size <= 256 else []) + ([0, size - 1] if s.op.name in element.COVERED else [])
            for e in wanted:
                proof, trace = stepproof.prove_step(model, inputs, k, e)
                roots[codec.encode(proof)] = (trace.root, model.program_root)
    seeds = list(roots)
    all_roots = set(roots.values())

    def check(case: bytes) -> None:
        proof = decoded(codec.decode, codec.encode, case, "step proof")
        if proof is None:
            return
        for trace_root, program_root in all_roots:
            verdict = outcome(lambda: stepproof.check_step(proof, trace_root, program_root))
            # Every trace here is honest: a proof that authenticates may only ever say so.
            if verdict is not None and not verdict.correct:
                raise Violation("a mutated step proof proved an honest trace wrong")
    return Setup(seeds, check)


def _traces() -> Setup:
    from serializer.records.trace import trace_bytes, trace_lines
    from cvmvm.tx import tracediff
    from cvmvm.vm.trace import trace_to_json
    from tests.test_receipt import digits_model, mlp_model, pair_model
    docs = []
    images = np.load(REPO / "fixtures" / "models" / "digits" / "test_inputs.npy", allow_pickle=False)
    for model, inputs in ((mlp_model(), {"x": np.array([[5, -100, 120, 7]], dtype=np.int32)}),
                          (pair_model(), {"a": np.ones((2, 3), np.int32), "b": np.ones((2, 3), np.int32)}),
                          (digits_model(), {"data": images[0]}), (_maxpool_model(), {
                              "x": np.linspace(-3, 3, 24, dtype=np.float32).reshape(1, 2, 3, 4)})):
        doc = trace_to_json(model.program, model.run(inputs, trace=True).trace, model.model_hash)
        docs += [trace_bytes(doc), trace_lines(doc)]   # each form has its own reader
    originals = {tracediff.read_trace(d, "seed").root: tracediff.read_trace(d, "seed") for d in docs}

    def committed(tf: Any) -> list[Any]:
        return [(e.kind, e.index, e.output, e.tensor, e.type, e.commitment, e.op, e.inputs,
                 None if e.attrs is None else dataclasses.astuple(e.attrs)) for e in tf.entries]

    def check(case: bytes) -> None:
        tf = outcome(lambda: tracediff.read_trace(case, "case"))
        if tf is None:
            return
        original = originals.get(tf.root)
        if original is not None and (committed(tf) != committed(original)
                                     or (tf.program_root, tf.input_commitment) != (original.program_root,
                                                                                   original.input_commitment)):
            raise Violation("a trace file with an original root shows other committed fields")
        for other in originals.values():
            report = tracediff.diff(other, tf)
            tracediff.render(report)
            json.dumps(report, allow_nan=False)
    return Setup(docs, check)


def _store() -> Setup:
    import cvmvm
    from cvmvm.tx.store import Store
    from tests.test_receipt import mlp_model, pair_model
    models = [mlp_model(), pair_model()]
    seeds = [m.canonical_bytes for m in models]
    root = scratch() / "store"

    def check(case: bytes) -> None:
        # The case is the content of a file under each model's name; the byte after the first
        # also picks what else the directory holds under a model's name.
        for model in models:
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            store = Store(root)
            name = store.path(model.model_hash)
            name.write_bytes(case)
            odd = root / (hashlib.sha256(case).hexdigest() + ".cvm")
            kind = case[1] % 6 if len(case) > 1 and odd != name else 0
            if kind == 1:
                odd.symlink_to(name)
            elif kind == 2:
                os.mkfifo(odd)
            elif kind == 3:
                odd.mkdir()
            elif kind == 4:
                odd.symlink_to(root / "nowhere")
            elif kind == 5 and not odd.exists():
                odd.write_bytes(case)
            got = outcome(lambda: store.get(model.model_hash))
            if got is not None and case != model.canonical_bytes:
                raise Violation("the store returned a model whose hash is not its file's name")
            listed = outcome(store.list)
            if listed is not None:
                for e in listed:
                    if e.intact and outcome(lambda: cvmvm.load((root / (e.model_hash + ".cvm")).read_bytes())
                                            .model_hash.hex()) != e.model_hash:
                        raise Violation("store list called a corrupt file intact")
            outcome(lambda: store.add(model))
            if name.read_bytes() != model.canonical_bytes:
                raise Violation("store add did not repair a corrupt copy")
            if any(p.name.startswith(".") for p in root.iterdir()):
                raise Violation("store add left a temporary file")
            outcome(lambda: cvmvm.load(name))
    return Setup(seeds, check)


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("native", "native models (.cvm): decode, verify, re-encode, run", "msgpack", _native),
    Target("cortex", "Cortex graph JSON and params: read, verify, convert both ways, run", "cortex", _cortex),
    Target("npy", ".npy inputs: the header and data sizes, against numpy's own reader", None, _npy),
    Target("receipt", "receipts: decode, check against re-execution, signatures", "msgpack", _receipts),
    Target("txs", "transaction files: frames and records, replayed against a store", "txs", _transactions),
    Target("step_proof", "step proofs: decode, check against trace roots, with and without the model",
           "msgpack", _step_proofs),
    Target("trace", "trace files: read, every committed field, diff", "json", _traces),
    Target("store", "the store's files: get, list, add (repair), links, fifos, directories", None, _store),
)}


# -- running ----------------------------------------------------------------------------------

@dataclass
class Failure:
    target: str
    case: bytes
    kind: str        # "exception", "violation", "slow", "death", "hang"
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "case": self.case.hex(), "kind": self.kind, "detail": self.detail}


def run_case(target: Target, case: bytes) -> tuple[float, Failure | None]:
    """Seconds taken, and the failure (None when the contract holds)."""
    start = time.perf_counter()
    try:
        target.check(case)
    except Violation as e:
        return time.perf_counter() - start, Failure(target.name, case, "violation", str(e))
    except Exception as e:   # noqa: BLE001 -- anything but a CvmError breaks the contract
        tb = traceback.format_exception(type(e), e, e.__traceback__)
        return time.perf_counter() - start, Failure(target.name, case, "exception",
                                                    f"{type(e).__name__}: {e}"[:300] + "\n" + "".join(tb[-3:]))
    took = time.perf_counter() - start
    if took > CASE_SECONDS:
        start = time.perf_counter()   # once more: a busy machine may have stalled it
        target.check(case)
        took = time.perf_counter() - start
        if took > CASE_SECONDS:
            return took, Failure(target.name, case, "slow", f"{took:.2f} s")
    return took, None


@dataclass
class Stats:
    cases: int = 0
    seconds: float = 0.0
    slowest: float = 0.0
    peak_traced: int = 0   # the most memory one case allocated (tracemalloc), when measured


def fuzz(target: Target, examples: int, seed_value: int, current: Path | None = None,
         stats: Stats | None = None, measure: int = 0) -> Failure | None:
    """Run ``examples`` cases drawn with ``seed_value``; the first failure, shrunk, or None.
    The first ``measure`` cases run under tracemalloc, their peak recorded in ``stats``."""
    stats = stats if stats is not None else Stats()
    found: list[Failure] = []
    for s in target.seeds:   # warm up (imports, first BLAS calls) outside the timing of any case
        target.check(s)

    @seed(seed_value)
    @settings(max_examples=examples, database=None, deadline=None, derandomize=False, print_blob=False,
              suppress_health_check=list(HealthCheck), phases=(Phase.generate, Phase.shrink))
    @given(cases(target))
    def prop(case: bytes) -> None:
        if current is not None:
            current.write_bytes(case)
        traced = stats.cases < measure
        if traced:
            tracemalloc.start()
        took, failure = run_case(target, case)
        if traced:
            stats.peak_traced = max(stats.peak_traced, tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
        stats.cases += 1
        stats.seconds += took
        stats.slowest = max(stats.slowest, took)
        if failure is not None:
            found.append(failure)
            raise Violation(failure.detail)

    try:
        prop()
    except Violation:
        pass
    # The last failure recorded is the shrunk one hypothesis reports.
    return found[-1] if found else None


def crash_files(target: str) -> list[Path]:
    d = CRASHES / target
    return sorted(d.glob("*.bin")) if d.is_dir() else []


def save_crash(f: Failure) -> Path:
    d = CRASHES / f.target
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{hashlib.sha256(f.case).hexdigest()[:16]}.bin"
    path.write_bytes(f.case)
    return path


# -- worker processes: address space bounded, deaths and hangs caught by the parent ------------

def peak_rss() -> int:
    """This process's peak resident memory in bytes.  VmHWM, not ru_maxrss: on Linux ru_maxrss
    survives exec, so a worker started from a large process (pytest) would report that one's."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def worker_main(argv: list[str]) -> int:
    """``python -m tests.fuzzkit TARGET EXAMPLES SEED CURRENT_FILE MEASURED``: one JSON line of results."""
    name, examples, seed_value, current, measure = argv[0], int(argv[1]), int(argv[2]), Path(argv[3]), int(argv[4])
    bound_address_space(ADDRESS_SPACE)
    target = TARGETS[name]
    stats = Stats()
    failure = fuzz(target, examples, seed_value, current, stats, measure)
    print(json.dumps({"target": name, "seed": seed_value, "cases": stats.cases, "seconds": stats.seconds,
                      "slowest": stats.slowest, "codes": sorted(CODES_SEEN), "peak_traced": stats.peak_traced,
                      "max_rss": peak_rss(),
                      "failure": None if failure is None else failure.to_json()}))
    return 0


@dataclass
class Job:
    target: str
    examples: int
    seed: int
    measure: int = 0   # cases run under tracemalloc


def run_jobs(jobs: list[Job], parallel: int = 2, wall: float = 600.0) -> tuple[list[dict[str, Any]], list[Failure]]:
    """Run each job in its own worker process, ``parallel`` at a time.  A worker that dies or
    outlives ``wall`` seconds is a failure of the case it was running."""
    import subprocess
    results: list[dict[str, Any]] = []
    failures: list[Failure] = []
    pending = list(jobs)
    running: list[tuple[Job, Any, Path, float]] = []
    cases_dir = Path(tempfile.mkdtemp(prefix="cvmvm-fuzz-cases-"))
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    env = address_space_env(ADDRESS_SPACE, {**os.environ, "PYTHONPATH": path})
    try:
        while pending or running:
            while pending and len(running) < parallel:
                job = pending.pop(0)
                current = cases_dir / f"{job.target}-{job.seed}.case"
                proc = subprocess.Popen([sys.executable, "-m", "tests.fuzzkit", job.target, str(job.examples),
                                         str(job.seed), str(current), str(job.measure)], cwd=REPO, env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                running.append((job, proc, current, time.monotonic()))
            time.sleep(0.05)
            for item in list(running):
                job, proc, current, started = item
                if proc.poll() is None and time.monotonic() - started < wall:
                    continue
                running.remove(item)
                case = current.read_bytes() if current.exists() else b""
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                    failures.append(Failure(job.target, case, "hang", f"worker still running after {wall:.0f} s"))
                    continue
                out, err = proc.communicate()
                if proc.returncode != 0:
                    failures.append(Failure(job.target, case, "death",
                                            f"worker exited {proc.returncode}: {err.strip()[-500:]}"))
                    continue
                result = json.loads(out.strip().splitlines()[-1])
                result["wall"] = time.monotonic() - started
                results.append(result)
                if result["failure"] is not None:
                    f = result["failure"]
                    failures.append(Failure(f["target"], bytes.fromhex(f["case"]), f["kind"], f["detail"]))
    finally:
        for _, proc, _, _ in running:
            proc.kill()
        shutil.rmtree(cases_dir, ignore_errors=True)
    return results, failures


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
