"""The model commands: verify, run (with --receipt), convert, hash, disasm, ops, demo."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from isa.errors import InputError
from isa.table import ISA_VERSION
from serializer import cortex, native
from serializer.hashing import tensor_hash
from cvmvm import files
from cvmvm.vm import disasm
from cvmvm.vm.api import Model, Result, load, load_cortex
from serializer.records import receipt as receipt_codec
from serializer.records.trace import trace_bytes
from cvmvm.vm.trace import trace_to_json
from cvmvm.tx import receipt
from cvmvm.cli import demo
from cvmvm.cli.common import EXIT_OK, Command, Reply, input_arg, load_model, model_args, parse_inputs


def _type_json(t: Any) -> dict[str, Any]:
    return {"shape": list(t.shape), "dtype": t.dtype, "precision": t.precision}


def _type_text(t: Any, scale: float | None = None) -> str:
    prec = f" p{t.precision}" if t.precision is not None else ""
    return f"{t.dtype}{list(t.shape)}{prec}" + (f" scale {scale!r}" if scale is not None else "")


def cmd_verify(args: argparse.Namespace) -> Reply:
    model = load_model(args.model, args.params, args.ops_limit)
    in_scales, out_scales = model.input_scales, model.output_scales
    info = {
        "model_hash": model.model_hash.hex(),
        "instructions": len(model.program.steps),
        "ops": model.ops,
        "gas": model.gas,
        "inputs": {n: {**_type_json(t), "scale": in_scales[n]} for n, t in model.inputs.items()},
        "outputs": [{**_type_json(t), "scale": s} for t, s in zip(model.output_types, out_scales)],
    }
    lines = [f"ok: {len(model.program.steps)} instructions, ops {model.ops}, gas {model.gas}",
             f"model hash {info['model_hash']}"]
    lines += [f"input  {n}: {_type_text(t, in_scales[n])}" for n, t in model.inputs.items()]
    lines += [f"output {k}: {_type_text(t, s)}" for k, (t, s) in enumerate(zip(model.output_types, out_scales))]
    return EXIT_OK, info, "\n".join(lines)


def _summary(t: Any, v: np.ndarray) -> dict[str, Any]:
    lo, hi = (int(v.min()), int(v.max())) if v.dtype.kind in "iu" else (float(np.nanmin(v)), float(np.nanmax(v)))
    return {**_type_json(t), "min": lo, "max": hi}


def cmd_run(args: argparse.Namespace) -> Reply:
    model = load_model(args.model, args.params, args.ops_limit)
    inputs = parse_inputs(args.input)
    result = model.run(inputs, trace=True)
    values = result.dequantized() if args.dequantize else result.outputs
    if args.save_outputs:
        out_dir = Path(args.save_outputs)
        out_dir.mkdir(parents=True, exist_ok=True)
        for k, value in enumerate(values):
            files.save_npy_atomic(out_dir / f"output_{k}.npy", value)
    if args.trace:
        doc = trace_to_json(model.program, result.trace, model.model_hash)
        files.write_atomic(args.trace, trace_bytes(doc))
    outputs = [{**_summary(t, v), "hash": h.hex()}
               for t, v, h in zip(model.output_types, result.outputs, result.output_hashes)]
    if args.dequantize:
        for o, v, scale in zip(outputs, values, model.output_scales):
            if scale is not None:
                o.update(scale=scale, float_min=float(v.min()), float_max=float(v.max()))
    info = {"model_hash": model.model_hash.hex(), "output_hash": result.output_hash.hex(),
            "trace_root": result.trace.root.hex(), "ops": result.ops, "outputs": outputs,
            "peak_tensor_bytes": result.peak_bytes, **run_receipt(args, model, result)}
    lines = [f"ok: ops {result.ops}",
             f"model hash  {info['model_hash']}",
             f"output hash {info['output_hash']}",
             f"trace root  {info['trace_root']}"]
    lines += [f"output {k}: {_type_text(t)} min {o['min']} max {o['max']}"
              + (f" (as floats {o['float_min']:.6g} .. {o['float_max']:.6g})" if "float_min" in o else "")
              for k, (t, o) in enumerate(zip(model.output_types, outputs))]
    return EXIT_OK, info, "\n".join(lines)


# -- run --receipt: the run's receipt, optionally signed ---------------------------------

def run_receipt(args: argparse.Namespace, model: Model, result: Result) -> dict[str, Any]:
    """For cmd_run: write the receipt when --receipt is given; the info entries to add."""
    if args.receipt is None:
        if args.sign is not None:
            raise InputError("argument", "--sign needs --receipt")
        return {}
    r = receipt.make_receipt(model, result)
    if args.sign is not None:
        r = receipt.sign(r, receipt.load_private_key(files.read_bytes(args.sign, "key"), args.sign))
    files.write_atomic(args.receipt, receipt_codec.encode(r))
    return {"receipt": args.receipt, "signer": None if r.signer is None else r.signer.public_key.hex()}


def cmd_convert(args: argparse.Namespace) -> Reply:
    data = files.read_bytes(args.source, "model")
    if native.is_native(data):
        if args.params:
            raise InputError("argument", "--params is only for Cortex graph JSON input")
        model = load(data)
        graph, blob = cortex.write_cortex(model.program.model, model.program.types)
        params_out = args.params_out or str(Path(args.out).with_suffix(".params"))
        files.write_atomic(params_out, blob)
        files.write_atomic(args.out, cortex.graph_to_json_bytes(graph))
        dropped = model.program.model.scales is not None
        info = {"from": "native", "to": "cortex", "graph": args.out, "params": params_out,
                "model_hash": model.model_hash.hex(), "dropped_scales": dropped}
        note = "; the float scales are dropped (a Cortex graph cannot hold them)" if dropped else ""
        return EXIT_OK, info, f"wrote Cortex graph {args.out} and params {params_out}{note}"
    if args.params_out:
        raise InputError("argument", "--params-out is only for native input")
    blob = files.read_bytes(args.params, "params") if args.params else None
    model = load_cortex(data, blob)
    files.write_atomic(args.out, model.canonical_bytes)
    info = {"from": "cortex", "to": "native", "out": args.out, "model_hash": model.model_hash.hex()}
    return EXIT_OK, info, f"wrote native model {args.out} (model hash {info['model_hash']})"


def cmd_hash(args: argparse.Namespace) -> Reply:
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


def cmd_disasm(args: argparse.Namespace) -> Reply:
    model = load_model(args.model, args.params)
    rows = disasm.listing(model.program)
    return EXIT_OK, {"model_hash": model.model_hash.hex(), "lines": rows}, "\n".join(rows)


def cmd_ops(args: argparse.Namespace) -> Reply:
    table = disasm.op_table()
    text = "\n".join(f"{o['code']:3d} {o['name']:<22} in {','.join(o['inputs']) or '*'}  "
                     f"out {','.join(o['outputs'])}  attrs {' '.join(a['name'] for a in o['attrs']) or '-'}"
                     for o in table)
    return EXIT_OK, {"isa": ISA_VERSION, "ops": table}, f"ISA version {ISA_VERSION}\n" + text


def cmd_demo(args: argparse.Namespace) -> Reply:
    info = demo.run_demo()
    return EXIT_OK, info, demo.render(info)


def add_commands(command: Command) -> None:
    p = command("verify", cmd_verify, "verify a model statically; print ops, gas, input and output types")
    model_args(p)
    p.add_argument("--ops-limit", type=int, help="reject the model if it costs more ops than this")

    p = command("run", cmd_run, "verify and run a model on .npy inputs (float ones quantized at the input's "
                                "scale); print output hash, trace root, ops")
    model_args(p)
    input_arg(p)
    p.add_argument("--trace", metavar="FILE", help="write the trace (every tensor hash) as JSON")
    p.add_argument("--save-outputs", metavar="DIR", help="write output_<k>.npy files into DIR")
    p.add_argument("--dequantize", action="store_true",
                   help="outputs with a float scale as float64 values q * scale (saved and summarized)")
    p.add_argument("--ops-limit", type=int, help="reject the model if it costs more ops than this")
    p.add_argument("--receipt", metavar="FILE", help="write the run's receipt (docs/FORMAT.md section 6)")
    p.add_argument("--sign", metavar="KEY", help="sign the receipt with this Ed25519 private key (PEM or raw 32 bytes)")

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

    command("ops", cmd_ops, "print the ISA table: op codes, inputs, outputs, attributes")
    command("demo", cmd_demo, "classify the bundled digits with the bundled model")
