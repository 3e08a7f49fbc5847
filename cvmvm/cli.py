"""The ``cvmvm`` command line.

Every command prints one clear line on failure, never a traceback, and exits
with its error family's code (EXIT_CODES); ``--json`` prints one JSON object on
stdout instead of text.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from isa.errors import CvmError, InputError
from cvmvm import files
from cvmvm.api import Model, load_cortex

EXIT_OK = 0
EXIT_MISMATCH = 1   # the command ran, and what it checked does not hold
EXIT_USAGE = 2      # argparse's own code for bad command lines
EXIT_CODES = {"malformed": 3, "invalid": 4, "input": 5, "limit": 6, "internal": 7}


def _type_json(t: Any) -> dict[str, Any]:
    return {"shape": list(t.shape), "dtype": t.dtype, "precision": t.precision}


def _type_text(t: Any) -> str:
    prec = f" p{t.precision}" if t.precision is not None else ""
    return f"{t.dtype}{list(t.shape)}{prec}"


def load_model(path: str, params: str | None, ops_limit: int | None) -> Model:
    graph = files.read_bytes(path, "model")
    blob = files.read_bytes(params, "params") if params else None
    return load_cortex(graph, blob, ops_limit=ops_limit)


def parse_inputs(specs: Sequence[str]) -> dict[str, np.ndarray]:
    inputs: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise InputError("argument", f"--input {spec!r}: expected NAME=FILE.npy")
        if name in inputs:
            raise InputError("argument", f"--input {name} given twice")
        inputs[name] = files.read_npy(path)
    return inputs


def cmd_verify(args: argparse.Namespace) -> tuple[int, dict[str, Any], str]:
    model = load_model(args.model, args.params, args.ops_limit)
    info = {
        "ops": model.ops,
        "gas": model.gas,
        "inputs": {n: _type_json(t) for n, t in model.inputs.items()},
        "outputs": [_type_json(t) for t in model.output_types],
    }
    lines = [f"ok: {len(model.program.steps)} instructions, ops {model.ops}, gas {model.gas}"]
    lines += [f"input  {n}: {_type_text(t)}" for n, t in model.inputs.items()]
    lines += [f"output {k}: {_type_text(t)}" for k, t in enumerate(model.output_types)]
    return EXIT_OK, info, "\n".join(lines)


def cmd_run(args: argparse.Namespace) -> tuple[int, dict[str, Any], str]:
    model = load_model(args.model, args.params, args.ops_limit)
    result = model.run(parse_inputs(args.input))
    if args.save_outputs:
        out_dir = Path(args.save_outputs)
        out_dir.mkdir(parents=True, exist_ok=True)
        for k, value in enumerate(result.outputs):
            files.save_npy_atomic(out_dir / f"output_{k}.npy", value)
    outputs = [{**_type_json(t), "min": int(v.min()) if v.dtype.kind in "iu" else float(np.nanmin(v)),
                "max": int(v.max()) if v.dtype.kind in "iu" else float(np.nanmax(v))}
               for t, v in zip(model.output_types, result.outputs)]
    info = {"ops": result.ops, "outputs": outputs}
    lines = [f"ok: ops {result.ops}"]
    lines += [f"output {k}: {_type_text(t)} min {o['min']} max {o['max']}"
              for k, (t, o) in enumerate(zip(model.output_types, outputs))]
    return EXIT_OK, info, "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cvmvm", description="Deterministic integer VM for Cortex (CVM) models.")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, func: Callable[..., Any], help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(func=func)
        p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
        return p

    p = command("verify", cmd_verify, "verify a model statically; print ops, gas, input and output types")
    p.add_argument("model", help="Cortex graph JSON")
    p.add_argument("--params", help="Cortex params binary")
    p.add_argument("--ops-limit", type=int, help="reject the model if it costs more ops than this")

    p = command("run", cmd_run, "verify and run a model on .npy inputs")
    p.add_argument("model", help="Cortex graph JSON")
    p.add_argument("--params", help="Cortex params binary")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="an input array (repeatable)")
    p.add_argument("--save-outputs", metavar="DIR", help="write output_<k>.npy files into DIR")
    p.add_argument("--ops-limit", type=int, help="reject the model if it costs more ops than this")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code, info, text = args.func(args)
    except CvmError as e:
        if getattr(args, "json", False):
            print(json.dumps({"error": e.code, "message": e.message}))
        print(f"cvmvm: error {e.code}: {e.message}", file=sys.stderr)
        return EXIT_CODES[e.family]
    except KeyboardInterrupt:
        print("cvmvm: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a VM bug: still one line, in the internal family
        print(f"cvmvm: error internal.bug: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_CODES["internal"]
    if args.json:
        print(json.dumps(info, sort_keys=True))
    else:
        print(text)
    return code


if __name__ == "__main__":
    sys.exit(main())
