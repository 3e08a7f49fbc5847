"""The ``cvmvm`` command line: the parser, dispatch, and exit codes.

Every command prints one clear line on failure, never a traceback, and exits
with its error family's code (``common.EXIT_CODES``); ``--json`` prints one
JSON object on stdout instead of text.  The commands themselves live in one
module per group (``model``, ``tx``, ``importer``); this module only assembles them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, Sequence

from isa.errors import CvmError
from cvmvm.cli import importer, model, tx
from cvmvm.cli.common import EXIT_CODES, EXIT_USAGE, UsageError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cvmvm", description="Deterministic integer VM for Cortex (CVM) models.")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, func: Callable[..., Any], help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(func=func)
        p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
        return p

    model.add_commands(command)
    tx.add_commands(command)
    importer.add_commands(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code, info, text = args.func(args)
    except (CvmError, UsageError) as e:
        if getattr(args, "json", False):
            print(json.dumps({"error": e.code, "message": e.message}))
        print(f"cvmvm: error {e.code}: {e.message}", file=sys.stderr)
        return EXIT_USAGE if isinstance(e, UsageError) else EXIT_CODES[e.family]
    except KeyboardInterrupt:
        print("cvmvm: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a VM bug: still one line, in the internal family
        print(f"cvmvm: error internal.bug: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_CODES["internal"]
    try:
        print(json.dumps(info, sort_keys=True) if args.json else text)
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. piped into `head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second failure at exit
    return code


if __name__ == "__main__":
    sys.exit(main())
