"""The ``cvmvm`` command line: the parser, dispatch, and exit codes.

Every command prints one clear line on failure, never a traceback, and exits
with its error family's code (``common.EXIT_CODES``); ``--json`` prints one
JSON object on stdout instead of text, failures included.  A mistake on the
command line is a ``usage.*`` error like any other (exit 2, one line), not
argparse's usage dump; Ctrl-C ends the command with one line and exit 130, and
SIGTERM with one line and exit 143, each through the same unwinding (nothing
half-written is left), here and, while this module loads, in cvmvm.cli.launch.
The commands themselves live in one module per group (``model``, ``tx``,
``show``, ``importer``); this module only assembles them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, NoReturn, Sequence

from isa.errors import CvmError, LimitError, UsageError, one_line
from cvmvm import versions
from cvmvm.cli import importer, model, show, tx
from cvmvm.cli.common import EXIT_BROKEN_PIPE, EXIT_CODES, EXIT_OK, Reply
from cvmvm.cli.interrupts import sigterm_raises, stopped


class Parser(argparse.ArgumentParser):
    """argparse, except that a mistake raises ``usage.argument`` (one line) instead of printing
    the usage and exiting; ``--help`` still prints the help."""

    commands: tuple[str, ...] = ()  # the command words, once build_parser has added them

    def error(self, message: str) -> NoReturn:
        raise UsageError("argument", f"{self.prog}: {message} (see '{self.prog} --help')")


def build_parser() -> Parser:
    parser = Parser(prog="cvmvm", description="Deterministic integer VM for Cortex (CVM) models.")
    parser.add_argument("--version", action="store_true",
                        help="print the package version, the ISA version and every file format's version")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, func: Callable[..., Any], help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(func=func)
        # SUPPRESS: a --json given before the command is not reset by the command's default.
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                       help="print one JSON object instead of text")
        return p

    model.add_commands(command)
    tx.add_commands(command)
    show.add_commands(command)
    importer.add_commands(command)
    parser.commands = tuple(sorted(sub.choices))
    return parser


def _versions() -> Reply:
    info = versions()
    cortex_read = ", ".join(info["cortex_graph_read"])
    text = "\n".join([
        f"cvmvm {info['cvmvm']}",
        f"ISA version {info['isa']}",
        f"native model format {info['native']}, receipt {info['receipt']}, transaction file "
        f"{info['transactions']}, trace {info['trace']}, step proof {info['step_proof']}",
        f"Cortex graph JSON: reads {cortex_read}; writes {info['cortex_graph']}",
    ])
    return EXIT_OK, info, text


def _first_command(argv: Sequence[str]) -> str | None:
    """The command word: the first argument that is not an option (the top-level options take
    no values)."""
    for a in argv:
        if a == "--":
            return None
        if not a.startswith("-"):
            return a
    return None


def _run(argv: list[str]) -> tuple[Reply, bool]:
    parser = build_parser()
    commands = parser.commands
    word = _first_command(argv)
    if word is not None and word not in commands:
        raise UsageError("command", f"unknown command {word!r}; the commands are {', '.join(commands)} "
                                    "(see 'cvmvm --help')")
    args, extra = parser.parse_known_args(argv)
    if extra:
        where = "cvmvm" if args.command is None else f"cvmvm {args.command}"
        raise UsageError("argument", f"{where}: unrecognized arguments: {' '.join(extra)} (see '{where} --help')")
    as_json = bool(args.json)
    if args.command is None:
        if args.version:
            return _versions(), as_json
        raise UsageError("command", f"no command given; the commands are {', '.join(commands)} "
                                    "(see 'cvmvm --help')")
    if args.version:
        raise UsageError("argument", "--version takes no command")
    reply: Reply = args.func(args)
    return reply, as_json


def _print(text: str) -> None:
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. piped into `head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second failure at exit


def _described(e: Exception) -> str:
    """A bug's exception as one bounded line: its message may span lines or quote a whole array,
    and its ``__str__`` may itself fail."""
    try:
        text = str(e)
    except Exception:
        text = "(its message cannot be shown)"
    return one_line(f"{type(e).__name__}: {text}")


def _fail(code: str, message: str, as_json: bool) -> None:
    if as_json:
        _print(json.dumps({"error": code, "message": message}))
    print(f"cvmvm: error {code}: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    with sigterm_raises():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in args  # until the command line parses
    # Names may hold any Unicode; a terminal that cannot show a character gets an escape, not a traceback.
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        try:
            (code, info, text), as_json = _run(args)
            # allow_nan=False: a NaN or infinity that reached a reply is a bug, not "-Infinity" (not JSON).
            out = json.dumps(info, sort_keys=True, allow_nan=False) if as_json else str(text)
        except CvmError as e:
            _fail(e.code, e.message, as_json)
            return EXIT_CODES[e.family]
        except MemoryError:  # outside a run, which refuses it itself: reading or decoding a file
            _fail("limit.memory", "out of memory: this host cannot give what the command needs", as_json)
            return EXIT_CODES[LimitError.family]
        except BrokenPipeError:  # a command streaming its output (replay) into `head`: stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_BROKEN_PIPE
        except Exception as e:  # a VM bug: still one line, in the internal family
            _fail("internal.bug", _described(e), as_json)
            return EXIT_CODES["internal"]
        if info is not None:  # None: the command printed its own output as it went (replay)
            _print(out)
        return code
    except KeyboardInterrupt as e:   # Ctrl-C, or SIGTERM (interrupts.Terminated)
        return stopped(e)


if __name__ == "__main__":
    sys.exit(main())
