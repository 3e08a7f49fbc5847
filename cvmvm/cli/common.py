"""What every command module shares: exit codes, the reply type, the argument types, and the
MODEL and --input arguments with their loaders.

A command is a function ``(args) -> Reply``: it returns (exit code, JSON info,
text) and raises CvmError for failures, which ``cvmvm.cli.main`` maps to exit
codes.  Every file a command reads goes through ``serializer.kinds`` first, so
a file of the wrong kind is named as such.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Callable, Sequence

import numpy as np

from isa.errors import InternalError, MalformedError, UsageError
from serializer import kinds
from cvmvm import files
from cvmvm.vm.api import Model, Result, load, model_limit
from cvmvm.vm.execute import Clipping
from cvmvm.vm.trace import Trace
from cvmvm.vm.verify import DEFAULT_MEMORY_LIMIT, DEFAULT_WORK_LIMIT, Limits

EXIT_OK = 0
EXIT_MISMATCH = 1   # the command ran, and what it checked does not hold
EXIT_USAGE = 2      # a bad command line (usage.*), argparse's own mistakes included
EXIT_CODES = {"usage": EXIT_USAGE, "malformed": 3, "invalid": 4, "input": 5, "limit": 6, "internal": 7, "io": 8}
EXIT_BROKEN_PIPE = 141  # the reader of a streamed output went away: 128 + SIGPIPE
# Ctrl-C and SIGTERM (130, 143): cvmvm.cli.interrupts, which loads before anything else.

# A key file (PEM or raw) is well under a KiB.
KEY_FILE_BYTES = 1 << 16

# (None, None: the command printed its own output as it went.)
Reply = tuple[int, dict[str, Any] | None, str | None]
# Adds a subcommand (name, function, help) to the main parser; returns its parser.
Command = Callable[[str, Callable[..., Any], str], argparse.ArgumentParser]


# -- argument types: a bad value is a usage.argument error naming the option -------------

def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``low``."""
    def parse(text: str) -> int:
        try:
            if not text.isascii():   # int() reads any script's digits
                raise ValueError(text)
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} must be at least {low}")
        return value
    return parse


def int_between(low: int, high: int, high_text: str | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high] (``high_text``: how to write ``high``)."""
    at_least = int_at_least(low)

    def parse(text: str) -> int:
        value = at_least(text)
        if value > high:
            raise argparse.ArgumentTypeError(f"{text[:40]}{'...' if len(text) > 40 else ''} must be at most "
                                             f"{high_text or format(high, ',')}")
        return value
    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)
uint256 = int_between(0, (1 << 256) - 1, "2^256 - 1")   # an id the contract takes as uint256


def json_float(x: float) -> float | str:
    """JSON has no infinities or NaN: they are the strings "inf", "-inf" and "nan" (README)."""
    return x if np.isfinite(x) else str(x)


def path_name(text: str) -> str:
    """An argparse type: a path that names something (Path('') would be the current directory)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path names nothing")
    return text


def hash_hex(text: str) -> bytes:
    """A 32-byte hash written as 64 hex digits."""
    try:
        digest = bytes.fromhex(text)
    except ValueError:
        digest = b""
    if len(digest) != 32:
        raise argparse.ArgumentTypeError(f"{text!r} is not 64 hex digits")
    return digest


def input_spec(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=FILE.npy")
    return name, path


class _InputSpecs(argparse.Action):
    """--input, repeatable; a name given twice is a mistake, not the last one winning."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        specs = list(getattr(namespace, self.dest) or [])
        if any(name == values[0] for name, _ in specs):
            raise argparse.ArgumentError(self, f"input {values[0]!r} given twice")
        setattr(namespace, self.dest, specs + [values])


# -- the shared arguments ------------------------------------------------------------------

def model_args(p: argparse.ArgumentParser, flag: str = "model") -> None:
    """A MODEL (positional ``model``, or a required option such as ``--model``) and its --params."""
    if flag.startswith("-"):
        p.add_argument(flag, required=True, help="native model (.cvm) or Cortex graph JSON")
    else:
        p.add_argument(flag, help="native model (.cvm) or Cortex graph JSON")
    p.add_argument("--params", help="Cortex params binary (with a graph JSON)")


def input_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", action=_InputSpecs, type=input_spec, default=[], metavar="NAME=FILE.npy",
                   help="an input array (repeatable, one per input name)")


def ops_limit_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ops-limit", type=positive_int, metavar="N",
                   help="reject the model if it costs more ops than this")


_SIZE = re.compile(r"([0-9]+(?:_[0-9]+)*)\s*(?:([kmgt])(ib|b)?|b)?", re.IGNORECASE)


def byte_count(text: str) -> int:
    """A positive number of bytes: 2147483648, 2GiB, 2G, 2GB.  GNU coreutils' reading of the
    suffixes: KiB..TiB and a bare K..T are powers of 1024, kB..TB powers of 1000 as SI writes
    them, so that "2GB" is the 2,000,000,000 bytes it says (it was 2 GiB until 2026-12-02)."""
    m = _SIZE.fullmatch(text.strip())
    if m is None or int(m.group(1)) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive byte count (e.g. 2147483648, 2GiB, 512MiB)")
    if m.group(2) is None:
        return int(m.group(1))
    power = "kmgt".index(m.group(2).lower()) + 1
    return int(m.group(1)) * (1000 if (m.group(3) or "").lower() == "b" else 1024) ** power


def unit_count(text: str) -> int:
    """A positive whole number of work units: 5000000000, 5_000_000_000 or 5e9."""
    mantissa, _, exponent = text.strip().lower().partition("e")
    try:
        if not text.isascii():
            raise ValueError(text)
        value = int(mantissa) * 10 ** int(exponent or "0") if 0 <= int(exponent or "0") <= 30 else 0
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number of work units (e.g. 5e9)")
    return value


def limit_args(p: argparse.ArgumentParser) -> None:
    """--memory-limit and --work-limit: what a run may use, refused at verification (docs/RESOURCES.md)."""
    p.add_argument("--memory-limit", type=byte_count, default=DEFAULT_MEMORY_LIMIT, metavar="BYTES",
                   help=f"refuse a model whose run needs more memory (default {DEFAULT_MEMORY_LIMIT >> 30}GiB)")
    p.add_argument("--work-limit", type=unit_count, default=DEFAULT_WORK_LIMIT, metavar="UNITS",
                   help=f"refuse a model whose run takes more work units (default {DEFAULT_WORK_LIMIT:.0e}, "
                        "about 5 s)")


def limits_of(args: argparse.Namespace) -> Limits:
    return Limits(getattr(args, "ops_limit", None), args.memory_limit, args.work_limit)


# -- loading what the arguments name ----------------------------------------------------------

def read_kind(path: str, wanted: Sequence[str], what: str, limit: int = files.MAX_FILE_BYTES,
              described: str | None = None) -> bytes:
    """A file's bytes, refused with ``malformed.kind`` when it is a file of another kind
    (``described`` names what was wanted, by default the wanted kinds)."""
    data = files.read_bytes(path, what, limit)
    kinds.expect(data, wanted, path, described)
    return data


def read_model(path: str, what: str = "model") -> bytes:
    """A file named as a model, read under the limit of the kind its first bytes show (a graph
    JSON's 64 MiB, a native model's 4 GiB): a huge graph JSON is refused before it is read."""
    return files.read_by_head(path, what, model_limit)


def load_model(path: str, params: str | None, limits: Limits = Limits(), data: bytes | None = None) -> Model:
    """A native model file, or a Cortex graph JSON (with its params file), told apart by content,
    verified under ``limits``; ``data``: the file's bytes, when the caller has read them."""
    if data is None:
        data = read_model(path)
    kind = kinds.expect(data, kinds.MODEL, path, "a model (a native model or a Cortex graph JSON)")
    if kind == kinds.NATIVE and params is not None:
        raise UsageError("conflict", f"--params goes with a Cortex graph JSON; {path} is a native model")
    return load(data, None if params is None else read_kind(params, (kinds.CORTEX_PARAMS,), "params"),
                ops_limit=limits.ops, memory_limit=limits.memory, work_limit=limits.work)


def read_input(path: str) -> np.ndarray:
    try:
        return files.read_npy(path)
    except MalformedError:
        read_kind(path, (kinds.NPY,), "input")  # names the file's kind when it is another
        raise


def parse_inputs(specs: Sequence[tuple[str, str]]) -> dict[str, np.ndarray]:
    """The --input arrays by name (``input_arg`` has checked the NAME=FILE form and the names)."""
    return {name: read_input(path) for name, path in specs}


def input_specs(texts: Sequence[str], flag: str) -> list[tuple[str, str]]:
    """``NAME=FILE.npy`` arguments of an option other than --input, checked as --input's are."""
    specs: list[tuple[str, str]] = []
    for text in texts:
        try:
            name, path = input_spec(text)
        except argparse.ArgumentTypeError as e:
            raise UsageError("argument", f"{flag}: {e}") from None
        if any(name == seen for seen, _ in specs):
            raise UsageError("argument", f"{flag}: input {name!r} given twice")
        specs.append((name, path))
    return specs


def traced(result: Result) -> Trace:
    """The trace of a run made with trace=True."""
    if result.trace is None:
        raise InternalError("trace", "a traced run gave no trace")
    return result.trace


def clipping_json(clipping: Sequence[Clipping]) -> list[dict[str, Any]]:
    return [{"input": c.input, "count": c.count, "low": c.low, "high": c.high, "precision": c.precision,
             "bound": c.bound} for c in clipping]


def warn_clipping(clipping: Sequence[Clipping]) -> None:
    """Say on stderr what was clipped: a run with clipped inputs is not an error, but not silent."""
    for c in clipping:
        print(f"cvmvm: warning: {c}", file=sys.stderr)
