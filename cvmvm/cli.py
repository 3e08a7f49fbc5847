"""The ``cvmvm`` command line.

Every command prints one clear line on failure, never a traceback, and exits
with its error family's code (EXIT_CODES); ``--json`` prints one JSON object on
stdout instead of text.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from isa.errors import CvmError, InputError
from isa.table import ISA_VERSION
from serializer import cortex, native
from serializer.hashing import tensor_hash
from cvmvm import cli_tx, demo, disasm, files
from cvmvm.api import Model, load, load_cortex
from cvmvm.trace import trace_bytes, trace_to_json

EXIT_OK = 0
EXIT_MISMATCH = 1   # the command ran, and what it checked does not hold
EXIT_USAGE = 2      # argparse's own code for bad command lines
EXIT_CODES = {"malformed": 3, "invalid": 4, "input": 5, "limit": 6, "internal": 7}


def _type_json(t: Any) -> dict[str, Any]:
    return {"shape": list(t.shape), "dtype": t.dtype, "precision": t.precision}


def _type_text(t: Any) -> str:
    prec = f" p{t.precision}" if t.precision is not None else ""
    return f"{t.dtype}{list(t.shape)}{prec}"


def load_model(path: str, params: str | None, ops_limit: int | None = None) -> Model:
    """A native model file, or a Cortex graph JSON (with its params file)."""
    data = files.read_bytes(path, "model")
    if native.is_native(data):
        if params:
            raise InputError("argument", "--params is only for Cortex graph JSON models")
        return load(data, ops_limit=ops_limit)
    blob = files.read_bytes(params, "params") if params else None
    return load_cortex(data, blob, ops_limit=ops_limit)


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
        "model_hash": model.model_hash.hex(),
        "instructions": len(model.program.steps),
        "ops": model.ops,
        "gas": model.gas,
        "inputs": {n: _type_json(t) for n, t in model.inputs.items()},
        "outputs": [_type_json(t) for t in model.output_types],
    }
    lines = [f"ok: {len(model.program.steps)} instructions, ops {model.ops}, gas {model.gas}",
             f"model hash {info['model_hash']}"]
    lines += [f"input  {n}: {_type_text(t)}" for n, t in model.inputs.items()]
    lines += [f"output {k}: {_type_text(t)}" for k, t in enumerate(model.output_types)]
    return EXIT_OK, info, "\n".join(lines)


def _summary(t: Any, v: np.ndarray) -> dict[str, Any]:
    lo, hi = (int(v.min()), int(v.max())) if v.dtype.kind in "iu" else (float(np.nanmin(v)), float(np.nanmax(v)))
    return {**_type_json(t), "min": lo, "max": hi}


def cmd_run(args: argparse.Namespace) -> tuple[int, dict[str, Any], str]:
    model = load_model(args.model, args.params, args.ops_limit)
    inputs = parse_inputs(args.input)
    result = model.run(inputs, trace=True)
    if args.save_outputs:
        out_dir = Path(args.save_outputs)
        out_dir.mkdir(parents=True, exist_ok=True)
        for k, value in enumerate(result.outputs):
            files.save_npy_atomic(out_dir / f"output_{k}.npy", value)
    if args.trace:
        doc = trace_to_json(model.program, result.trace, model.model_hash)
        files.write_atomic(args.trace, trace_bytes(doc))
    outputs = [{**_summary(t, v), "hash": h.hex()}
               for t, v, h in zip(model.output_types, result.outputs, result.output_hashes)]
    info = {"model_hash": model.model_hash.hex(), "output_hash": result.output_hash.hex(),
            "trace_root": result.trace.root.hex(), "ops": result.ops, "outputs": outputs,
            "peak_tensor_bytes": result.peak_bytes, **cli_tx.run_receipt(args, model, result)}
    lines = [f"ok: ops {result.ops}",
             f"model hash  {info['model_hash']}",
             f"output hash {info['output_hash']}",
             f"trace root  {info['trace_root']}"]
    lines += [f"output {k}: {_type_text(t)} min {o['min']} max {o['max']}"
              for k, (t, o) in enumerate(zip(model.output_types, outputs))]
    return EXIT_OK, info, "\n".join(lines)


def cmd_convert(args: argparse.Namespace) -> tuple[int, dict[str, Any], str]:
    data = files.read_bytes(args.source, "model")
    if native.is_native(data):
        if args.params:
            raise InputError("argument", "--params is only for Cortex graph JSON input")
        model = load(data)
        graph, blob = cortex.write_cortex(model.program.model, model.program.types)
        params_out = args.params_out or str(Path(args.out).with_suffix(".params"))
        files.write_atomic(params_out, blob)
        files.write_atomic(args.out, cortex.graph_to_json_bytes(graph))
        info = {"from": "native", "to": "cortex", "graph": args.out, "params": params_out,
                "model_hash": model.model_hash.hex()}
        return EXIT_OK, info, f"wrote Cortex graph {args.out} and params {params_out}"
    if args.params_out:
        raise InputError("argument", "--params-out is only for native input")
    blob = files.read_bytes(args.params, "params") if args.params else None
    model = load_cortex(data, blob)
    files.write_atomic(args.out, model.canonical_bytes)
    info = {"from": "cortex", "to": "native", "out": args.out, "model_hash": model.model_hash.hex()}
    return EXIT_OK, info, f"wrote native model {args.out} (model hash {info['model_hash']})"


def cmd_hash(args: argparse.Namespace) -> tuple[int, dict[str, Any], str]:
    if args.target.endswith(".npy") and not args.params:
        value = files.read_npy(args.target)
        try:
            digest = tensor_hash(value)
        except ValueError:
            raise InputError("dtype", f"{args.target}: dtype {value.dtype} is not a VM dtype") from None
        info = {"kind": "tensor", "tensor_hash": digest.hex(), "dtype": str(value.dtype), "shape": list(value.shape)}
        return EXIT_OK, info, f"tensor hash {digest.hex()}"
    model = load_model(args.target, args.params)
    info = {"kind": "model", "model_hash": model.model_hash.hex()}
    return EXIT_OK, info, f"model hash {info['model_hash']}"


def cmd_disasm(args: argparse.Namespace) -> tuple[int, dict[str, Any], str]:
    model = load_model(args.model, args.params)
    rows = disasm.listing(model.program)
    return EXIT_OK, {"model_hash": model.model_hash.hex(), "lines": rows}, "\n".join(rows)


def cmd_ops(args: argparse.Namespace) -> tuple[int, dict[str, Any], str]:
    table = disasm.op_table()
    text = "\n".join(f"{o['code']:3d} {o['name']:<22} in {','.join(o['inputs']) or '*'}  "
                     f"out {','.join(o['outputs'])}  attrs {' '.join(a['name'] for a in o['attrs']) or '-'}"
                     for o in table)
    return EXIT_OK, {"isa": ISA_VERSION, "ops": table}, f"ISA version {ISA_VERSION}\n" + text


def cmd_demo(args: argparse.Namespace) -> tuple[int, dict[str, Any], str]:
    info = demo.run_demo()
    return EXIT_OK, info, demo.render(info)


def model_args(p: argparse.ArgumentParser, flag: str = "model") -> None:
    """A MODEL (positional ``model``, or a required option such as ``--model``) and its --params."""
    extra = {"required": True} if flag.startswith("-") else {}
    p.add_argument(flag, help="native model (.cvm) or Cortex graph JSON", **extra)
    p.add_argument("--params", help="Cortex params binary (with a graph JSON)")


def input_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="an input array (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cvmvm", description="Deterministic integer VM for Cortex (CVM) models.")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, func: Callable[..., Any], help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(func=func)
        p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
        return p

    p = command("verify", cmd_verify, "verify a model statically; print ops, gas, input and output types")
    model_args(p)
    p.add_argument("--ops-limit", type=int, help="reject the model if it costs more ops than this")

    p = command("run", cmd_run, "verify and run a model on .npy inputs; print output hash, trace root, ops")
    model_args(p)
    input_arg(p)
    p.add_argument("--trace", metavar="FILE", help="write the trace (every tensor hash) as JSON")
    p.add_argument("--save-outputs", metavar="DIR", help="write output_<k>.npy files into DIR")
    p.add_argument("--ops-limit", type=int, help="reject the model if it costs more ops than this")
    cli_tx.add_run_options(p)

    p = command("convert", cmd_convert, "convert Cortex (graph JSON + params) <-> native, by the input's type")
    p.add_argument("source", help="native model, or Cortex graph JSON")
    p.add_argument("out", help="output: native model, or Cortex graph JSON")
    p.add_argument("--params", help="Cortex params binary of the input")
    p.add_argument("--params-out", help="where to write the Cortex params (default: OUT with suffix .params)")

    p = command("hash", cmd_hash, "print the model hash of a model, or the tensor hash of a .npy file")
    p.add_argument("target", help="native model, Cortex graph JSON (with --params), or TENSOR.npy")
    p.add_argument("--params", help="Cortex params binary")

    p = command("disasm", cmd_disasm, "list a model's instructions with shapes, precisions and costs")
    model_args(p)

    cli_tx.add_commands(command)
    command("ops", cmd_ops, "print the ISA table: op codes, inputs, outputs, attributes")
    command("demo", cmd_demo, "classify the bundled digits with the bundled model")
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
    try:
        print(json.dumps(info, sort_keys=True) if args.json else text)
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. piped into `head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second failure at exit
    return code


if __name__ == "__main__":
    sys.exit(main())
