"""The model commands: verify, run (with --receipt, --trace, --dump-tensors), convert, hash, disasm,
ops, demo."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import numpy as np

from isa.errors import InternalError, UsageError
from isa.table import ISA_VERSION
from isa.types import MAX_PRECISION, TensorType
from serializer import cortex, kinds
from serializer.hashing import tensor_commitment
from serializer.records import receipt as receipt_codec
from serializer.records.trace import trace_bytes, trace_lines
from cvmvm import files
from cvmvm.vm import disasm
from cvmvm.vm.api import Model, Result, load, value_type
from cvmvm.vm.trace import program_layout, tensor_name, trace_to_json
from cvmvm.vm.verify import NOT_RUN
from cvmvm.tx import receipt
from cvmvm.cli import demo
from cvmvm.cli.common import (EXIT_OK, KEY_FILE_BYTES, Command, Reply, clipping_json, input_arg, int_between,
                              json_float, limit_args, limits_of, load_model, model_args, ops_limit_arg, parse_inputs,
                              path_name, read_input, read_model, traced, warn_clipping)

TRACE_FORMATS = ("json", "jsonl")


def _type_json(t: TensorType) -> dict[str, Any]:
    return {"shape": list(t.shape), "dtype": t.dtype, "precision": t.precision}


def _type_text(t: TensorType, scale: float | None = None) -> str:
    prec = f" p{t.precision}" if t.precision is not None else ""
    return f"{t.dtype}{list(t.shape)}{prec}" + (f" scale {scale!r}" if scale is not None else "")


def cmd_verify(args: argparse.Namespace) -> Reply:
    model = load_model(args.model, args.params, limits_of(args))
    in_scales, out_scales = model.input_scales, model.output_scales
    info = {
        "model_hash": model.model_hash.hex(),
        "program_root": model.program_root.hex(),
        "instructions": len(model.program.steps),
        "ops": model.ops,
        "gas": model.gas,
        "work": model.work,
        "memory_bytes": model.memory_bytes,
        "inputs": {n: {**_type_json(t), "scale": in_scales[n]} for n, t in model.inputs.items()},
        "outputs": [{**_type_json(t), "name": n, "scale": s}
                    for t, n, s in zip(model.output_types, model.output_names, out_scales)],
    }
    lines = [f"ok: {len(model.program.steps)} instructions, ops {model.ops}, gas {model.gas}",
             f"work {model.work} units (limit {args.work_limit}), memory {model.memory_bytes} bytes "
             f"(limit {args.memory_limit})",
             f"model hash   {info['model_hash']}",
             f"program root {info['program_root']}"]
    lines += [f"input  {n}: {_type_text(t, in_scales[n])}" for n, t in model.inputs.items()]
    lines += [f"output {k} {n}: {_type_text(t, s)}"
              for k, (t, n, s) in enumerate(zip(model.output_types, model.output_names, out_scales))]
    return EXIT_OK, info, "\n".join(lines)


def _trace_format(args: argparse.Namespace) -> str:
    """--trace-format, or by the trace file's suffix: .jsonl is JSON lines, anything else JSON."""
    if args.trace_format is not None:
        if args.trace is None:
            raise UsageError("conflict", "--trace-format goes with --trace FILE")
        return str(args.trace_format)
    return "jsonl" if str(args.trace or "").endswith(".jsonl") else "json"


def _dump_name(model: Model, t: int, width: int) -> str:
    """tensor id, producer (op, or input/param) and name: 0007-conv2d-conv1.npy."""
    op, _ = program_layout(model.program).labels[t]
    producer = op or ("input" if t < len(model.program.model.inputs) else "param")
    name = re.sub(r"[^A-Za-z0-9_.]+", "_", tensor_name(model.program, t))[:80]
    return f"{t:0{width}d}-{producer}-{name}.npy"


# What --save-outputs and --dump-tensors write into their directories (and remove when an earlier
# run wrote more of them).
SAVED_OUTPUT = r"output_[0-9]+\.npy"
DUMPED_TENSOR = r"[0-9]+-[A-Za-z0-9_]+-[A-Za-z0-9_.]*\.npy"


def dump_tensors(model: Model, result: Result, outputs: files.Outputs, folder: str) -> int:
    """Put every tensor of a kept run among the outputs, as .npy files in ``folder``; return how many."""
    tensors = result.tensors or ()
    width = max(4, len(str(len(tensors) - 1)))
    for t, value in enumerate(tensors):
        outputs.put_in(folder, _dump_name(model, t, width), files.npy_bytes(value))
    return len(tensors)


def _summary(t: TensorType, v: np.ndarray) -> dict[str, Any]:
    if v.dtype.kind in "iu":
        return {**_type_json(t), "min": int(v.min()), "max": int(v.max())}
    numbers = v[~np.isnan(v)]
    lo, hi = (float(numbers.min()), float(numbers.max())) if numbers.size else (float("nan"),) * 2
    return {**_type_json(t), "min": json_float(lo), "max": json_float(hi)}


def cmd_run(args: argparse.Namespace) -> Reply:
    if args.sign is not None and args.receipt is None:
        raise UsageError("conflict", "--sign KEY signs the receipt: give --receipt FILE too")
    trace_format = _trace_format(args)
    # Every output is checked before the run, and written as one unit after it (cvmvm.files.Outputs).
    outputs = files.Outputs(reads=[args.model, args.params, args.sign, *(path for _, path in args.input)])
    trace_out = outputs.file(args.trace, "--trace") if args.trace else None
    receipt_out = outputs.file(args.receipt, "--receipt") if args.receipt else None
    saved = outputs.directory(args.save_outputs, "--save-outputs", SAVED_OUTPUT) if args.save_outputs else None
    dump = outputs.directory(args.dump_tensors, "--dump-tensors", DUMPED_TENSOR) if args.dump_tensors else None
    model = load_model(args.model, args.params, limits_of(args))
    inputs = parse_inputs(args.input)
    result = model.run(inputs, trace=True, keep=dump is not None)
    trace = traced(result)
    warn_clipping(result.clipping)
    values = result.dequantized() if args.dequantize else result.outputs
    if saved is not None:
        for k, value in enumerate(values):
            outputs.put_in(saved, f"output_{k}.npy", files.npy_bytes(value))
    dumped = None if dump is None else dump_tensors(model, result, outputs, dump)
    if trace_out is not None:
        doc = trace_to_json(model.program, trace, model.model_hash)
        outputs.put(trace_out, trace_lines(doc) if trace_format == "jsonl" else trace_bytes(doc))
    receipt_info = run_receipt(args, model, result, outputs, receipt_out)
    outputs.commit()
    summaries = [{**_summary(t, v), "name": n, "commitment": c.hex()}
                 for t, n, v, c in zip(model.output_types, model.output_names, result.outputs,
                                       result.output_commitments)]
    if args.dequantize:
        for o, v, scale in zip(summaries, values, model.output_scales):
            if scale is not None:
                o.update(scale=scale, float_min=float(v.min()), float_max=float(v.max()))
    info = {"model_hash": model.model_hash.hex(), "program_root": model.program_root.hex(),
            "input_commitment": trace.inputs.hex(), "output_hash": result.output_hash.hex(),
            "trace_root": trace.root.hex(), "ops": result.ops, "outputs": summaries,
            "peak_tensor_bytes": result.peak_bytes, "clipped": clipping_json(result.clipping), **receipt_info}
    if dumped is not None:
        info["dumped_tensors"] = dumped
    lines = [f"ok: ops {result.ops}",
             f"model hash       {info['model_hash']}",
             f"program root     {info['program_root']}",
             f"input commitment {info['input_commitment']}",
             f"output hash      {info['output_hash']}",
             f"trace root       {info['trace_root']}"]
    lines += [f"output {k} {o['name']}: {_type_text(t)} min {o['min']} max {o['max']}"
              + (f" (as floats {o['float_min']:.6g} .. {o['float_max']:.6g})" if "float_min" in o else "")
              for k, (t, o) in enumerate(zip(model.output_types, summaries))]
    if dumped is not None:
        lines.append(f"wrote {dumped} tensors to {args.dump_tensors}")
    return EXIT_OK, info, "\n".join(lines)


# -- run --receipt: the run's receipt, optionally signed ---------------------------------

def run_receipt(args: argparse.Namespace, model: Model, result: Result, outputs: files.Outputs,
                key: str | None) -> dict[str, Any]:
    """For cmd_run: put the receipt among the outputs when --receipt is given; the info entries to add."""
    if key is None:
        return {}
    r = receipt.make_receipt(model, result)
    if args.sign is not None:
        r = receipt.sign(r, receipt.load_private_key(files.read_bytes(args.sign, "key", KEY_FILE_BYTES), args.sign))
    outputs.put(key, receipt_codec.encode(r))
    return {"receipt": args.receipt, "signer": None if r.signer is None else r.signer.public_key.hex()}


# The suffix convert's OUT must have, by the direction the input decides.
CORTEX_SUFFIX, NATIVE_SUFFIX = ".json", ".cvm"


def _convert_out(out: str, suffix: str, direction: str) -> None:
    if Path(out).suffix != suffix:
        raise UsageError("argument", f"convert {direction}: OUT {out} must end in {suffix}")


def cmd_convert(args: argparse.Namespace) -> Reply:
    data = read_model(args.source)
    kinds.expect(data, kinds.MODEL, args.source, "a model (a native model or a Cortex graph JSON)")
    outputs = files.Outputs(reads=[args.source, args.params])
    if kinds.detect(data) == kinds.NATIVE:
        if args.params:
            raise UsageError("conflict", f"--params goes with a Cortex graph JSON; {args.source} is a native model")
        _convert_out(args.out, CORTEX_SUFFIX, "native -> Cortex")
        params_out = args.params_out or str(Path(args.out).with_suffix(".params"))
        graph_key = outputs.file(args.out, "OUT")
        params_key = outputs.file(params_out, "--params-out")
        model = load(data, memory_limit=None, work_limit=None)  # converted, never run here
        graph, blob = cortex.write_cortex(model.program.model, model.program.types)
        if blob is None:
            raise InternalError("param", "a native model converted to Cortex came without its params")
        outputs.put(params_key, blob)
        outputs.put(graph_key, cortex.graph_to_json_bytes(graph))
        outputs.commit()
        dropped = model.program.model.scales is not None
        info = {"from": "native", "to": "cortex", "graph": args.out, "params": params_out,
                "model_hash": model.model_hash.hex(), "dropped_scales": dropped}
        note = "; the float scales are dropped (a Cortex graph cannot hold them)" if dropped else ""
        return EXIT_OK, info, f"wrote Cortex graph {args.out} and params {params_out}{note}"
    if args.params_out:
        raise UsageError("conflict", f"--params-out goes with a native model; {args.source} is a Cortex graph JSON")
    _convert_out(args.out, NATIVE_SUFFIX, "Cortex -> native")
    key = outputs.file(args.out, "OUT")
    model = load_model(args.source, args.params, NOT_RUN, data)
    outputs.put(key, model.canonical_bytes)
    outputs.commit()
    info = {"from": "cortex", "to": "native", "out": args.out, "model_hash": model.model_hash.hex()}
    return EXIT_OK, info, f"wrote native model {args.out} (model hash {info['model_hash']})"


def cmd_hash(args: argparse.Namespace) -> Reply:
    data = read_model(args.target, "file")   # a .npy array is read under a native model's limit: any file's 4 GiB
    if kinds.detect(data) == kinds.NPY:
        if args.params:
            raise UsageError("conflict", f"--params goes with a Cortex graph JSON; {args.target} is a .npy array")
        value = read_input(args.target)
        t = value_type(value, args.precision)
        digest = tensor_commitment(value.astype(np.int32) if t.dtype == "int32" else value, t)
        info = {"kind": "tensor", "commitment": digest.hex(), **_type_json(t)}
        return EXIT_OK, info, f"tensor commitment {digest.hex()} ({_type_text(t)})"
    if args.precision is not None:
        raise UsageError("conflict", "--precision goes with a tensor (.npy)")
    model = load_model(args.target, args.params, NOT_RUN, data)
    info = {"kind": "model", "model_hash": model.model_hash.hex(), "program_root": model.program_root.hex()}
    return EXIT_OK, info, f"model hash   {info['model_hash']}\nprogram root {info['program_root']}"


def cmd_disasm(args: argparse.Namespace) -> Reply:
    if args.dot and getattr(args, "json", False):
        raise UsageError("conflict", "give at most one of --dot and --json")
    model = load_model(args.model, args.params, NOT_RUN)
    rows = disasm.listing(model.program)
    info = {"model_hash": model.model_hash.hex(), **disasm.program_json(model.program)}
    return EXIT_OK, info, disasm.dot(model.program) if args.dot else "\n".join(rows)


def cmd_ops(args: argparse.Namespace) -> Reply:
    table = disasm.op_table()
    text = "\n".join(f"{o['code']:3d} {o['name']:<22} in {','.join(o['inputs']) or '*'}  "
                     f"out {','.join(o['outputs'])}  attrs {' '.join(a['name'] for a in o['attrs']) or '-'}"
                     for o in table)
    return EXIT_OK, {"isa": ISA_VERSION, "ops": table}, f"ISA version {ISA_VERSION}\n" + text


def cmd_demo(args: argparse.Namespace) -> Reply:
    if args.export is not None:
        written = demo.export(args.export)
        return EXIT_OK, {"exported": written}, "\n".join(f"wrote {p}" for p in written)
    info = demo.run_demo()
    return EXIT_OK, info, demo.render(info)


def add_commands(command: Command) -> None:
    p = command("verify", cmd_verify, "verify a model statically; print ops, gas, work, memory, input and output types")
    model_args(p)
    ops_limit_arg(p)
    limit_args(p)

    p = command("run", cmd_run, "verify and run a model on .npy inputs (float ones quantized at the input's "
                                "scale); print output hash, trace root, ops")
    model_args(p)
    input_arg(p)
    p.add_argument("--trace", metavar="FILE", help="write the trace (every tensor commitment): JSON, or JSON lines "
                                                   "when FILE ends in .jsonl")
    p.add_argument("--trace-format", choices=TRACE_FORMATS, help="the trace file's form, whatever its suffix")
    p.add_argument("--save-outputs", metavar="DIR", help="write output_<k>.npy files into DIR")
    p.add_argument("--dequantize", action="store_true",
                   help="outputs with a float scale as float64 values q * scale (saved and summarized)")
    p.add_argument("--dump-tensors", metavar="DIR", help="write every tensor into DIR as <id>-<producer>-<name>.npy")
    ops_limit_arg(p)
    limit_args(p)
    p.add_argument("--receipt", metavar="FILE", help="write the run's receipt (docs/FORMAT.md section 7)")
    p.add_argument("--sign", metavar="KEY", help="sign the receipt with this Ed25519 private key (PEM or raw 32 bytes)")

    p = command("convert", cmd_convert, "convert Cortex (graph JSON + params) <-> native, by the input's content")
    p.add_argument("source", help="native model, or Cortex graph JSON")
    p.add_argument("out", help="output: native model, or Cortex graph JSON")
    p.add_argument("--params", help="Cortex params binary of the input")
    p.add_argument("--params-out", help="where to write the Cortex params (default: OUT with suffix .params)")

    p = command("hash", cmd_hash, "print a model's hash and program root, or a .npy tensor's commitment")
    p.add_argument("target", help="native model, Cortex graph JSON (with --params), or TENSOR.npy")
    p.add_argument("--params", help="Cortex params binary")
    p.add_argument("--precision", type=int_between(1, MAX_PRECISION), metavar="P",
                   help="an int32 tensor's precision (default: the smallest that holds its values)")

    p = command("disasm", cmd_disasm, "list a model's instructions with shapes, precisions and costs")
    model_args(p)
    p.add_argument("--dot", action="store_true", help="print the model as a Graphviz graph instead "
                                                       "(cvmvm disasm M --dot > m.dot && dot -Tsvg m.dot > m.svg)")

    command("ops", cmd_ops, "print the ISA table: op codes, inputs, outputs, attributes")
    p = command("demo", cmd_demo, "classify the bundled digits with the bundled model")
    p.add_argument("--export", metavar="DIR", type=path_name, help="instead, write the demo's model and two of its images "
                                                   "(digits.cvm, image0.npy, image1.npy) into DIR")
