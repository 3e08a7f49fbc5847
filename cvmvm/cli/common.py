"""What every command module shares: exit codes, the reply type, and the MODEL
and --input arguments with their loaders.

A command is a function ``(args) -> Reply``: it returns (exit code, JSON info,
text) and raises CvmError for failures, which ``cvmvm.cli.main`` maps to exit
codes.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable, Sequence

import numpy as np

from isa.errors import InputError
from serializer import native
from cvmvm import files
from cvmvm.vm.api import Model, load, load_cortex

EXIT_OK = 0
EXIT_MISMATCH = 1   # the command ran, and what it checked does not hold
EXIT_USAGE = 2      # argparse's own code for bad command lines
EXIT_CODES = {"malformed": 3, "invalid": 4, "input": 5, "limit": 6, "internal": 7}

Reply = tuple[int, dict[str, Any], str]


class UsageError(Exception):
    """A command that cannot run as asked, though argparse accepted it (an extra not installed):
    one line ``cvmvm: error usage.<reason>: ...``, exit 2."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = f"usage.{reason}"
        self.message = message

# Adds a subcommand (name, function, help) to the main parser; returns its parser.
Command = Callable[[str, Callable[..., Any], str], argparse.ArgumentParser]


def load_model(path: str, params: str | None, ops_limit: int | None = None) -> Model:
    """A native model file, or a Cortex graph JSON (with its params file)."""
    data = files.read_bytes(path, "model")
    if native.is_native(data):
        if params:
            raise InputError("argument", "--params is only for Cortex graph JSON models")
        return load(data, ops_limit=ops_limit)
    blob = files.read_bytes(params, "params") if params else None
    return load_cortex(data, blob, ops_limit=ops_limit)


def parse_inputs(specs: Sequence[str], flag: str = "--input") -> dict[str, np.ndarray]:
    """``NAME=FILE.npy`` arguments of ``flag``, each name once, read as arrays."""
    inputs: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise InputError("argument", f"{flag} {spec!r}: expected NAME=FILE.npy")
        if name in inputs:
            raise InputError("argument", f"{flag} {name} given twice")
        inputs[name] = files.read_npy(path)
    return inputs


def model_args(p: argparse.ArgumentParser, flag: str = "model") -> None:
    """A MODEL (positional ``model``, or a required option such as ``--model``) and its --params."""
    extra = {"required": True} if flag.startswith("-") else {}
    p.add_argument(flag, help="native model (.cvm) or Cortex graph JSON", **extra)
    p.add_argument("--params", help="Cortex params binary (with a graph JSON)")


def input_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="an input array (repeatable)")
