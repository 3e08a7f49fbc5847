"""`cvmvm show FILE`: any cvmvm file as readable text or JSON, its kind told from its content.

Each kind is decoded by its own codec (serializer.native, serializer.cortex,
serializer.records.*, the .npy reader), so what ``show`` prints is what every
other command reads; ``serializer.kinds`` tells the kinds apart.
"""

from __future__ import annotations

import argparse
import hashlib
import math
from typing import Any

import numpy as np

from isa.attrs import attrs_to_dict
from isa.errors import CvmError, LimitError, MalformedError, UsageError
from serializer import cortex, kinds, native
from serializer.cortex.params import read_params
from serializer.hashing import tensor_commitment
from serializer.limits import MAX_GRAPH_JSON_BYTES
from serializer.model import Model as ModelIR
from serializer.records import receipt as receipt_codec, stepproof as proof_codec, trace as trace_codec, transactions
from serializer.records.program import decode_instr
from isa.types import TensorType
from cvmvm import files
from cvmvm.vm import disasm
from cvmvm.vm.api import Model, value_type
from cvmvm.vm.verify import verify
from cvmvm.cli.common import EXIT_OK, Command, Reply, json_float, read_kind

Shown = tuple[dict[str, Any], list[str]]


def _t(t: TensorType) -> str:
    return f"{t.dtype}{list(t.shape)}" + ("" if t.precision is None else f" p{t.precision}")


def _type_json(t: TensorType) -> dict[str, Any]:
    return {"dtype": t.dtype, "shape": list(t.shape), "precision": t.precision}


def _attrs(record: Any) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in attrs_to_dict(record).items()}


def _model(ir: ModelIR, canonical: bytes, title: str) -> Shown:
    """A decoded model: verified, its hashes and listing; otherwise its structure and why it does
    not verify (its model hash needs its program root, which needs a verified program)."""
    info: dict[str, Any] = {"inputs": [{"name": i.name, **_type_json(i.type)} for i in ir.inputs],
                            "params": len(ir.params), "instructions": len(ir.instrs), "outputs": list(ir.outputs)}
    counts = (f"{len(ir.inputs)} inputs, {len(ir.params)} params, {len(ir.instrs)} instructions, "
              f"outputs {list(ir.outputs)}")
    try:
        program = verify(ir)
    except CvmError as e:
        info["verified"] = {"error": e.code, "message": e.message}
        lines = [f"{title}, bytes SHA-256 {hashlib.sha256(canonical).hexdigest()}", counts]
        lines += [f"input {i.name}: {_t(i.type)}" for i in ir.inputs]
        lines += [f"instruction {k}: {ins.op} {ins.name}" for k, ins in enumerate(ir.instrs)]
        lines.append(f"does NOT verify: {e.code}: {e.message}")
        return info, lines
    model = Model(program, canonical)
    info.update(model_hash=model.model_hash.hex(), program_root=model.program_root.hex(), verified=True)
    info.update(disasm.program_json(program))
    lines = [f"{title}, model hash {info['model_hash']}", f"program root {info['program_root']}", counts]
    return info, lines + disasm.listing(program)


def _native(data: bytes) -> Shown:
    ir = native.decode(data)
    info, lines = _model(ir, data, f"native model (format version {native.FORMAT_VERSION})")
    return {"format_version": native.FORMAT_VERSION, **info}, lines


def _cortex_graph(data: bytes, path: str, params: str | None) -> Shown:
    if len(data) > MAX_GRAPH_JSON_BYTES:
        raise LimitError("bytes", f"graph JSON {path}: {len(data)} bytes exceed the limit of {MAX_GRAPH_JSON_BYTES}")
    graph = cortex.read_graph(data)
    if params is None and any(n.op is None and n.name != cortex.DATA for n in graph.nodes):
        # Its variables other than data come from a params file: without it, the nodes.
        return _graph_nodes(graph)
    blob = None if params is None else read_kind(params, (kinds.CORTEX_PARAMS,), "params")
    ir = cortex.graph_model(graph, blob)
    return _model(ir, native.encode(ir), "Cortex graph JSON")


def _graph_nodes(graph: cortex.Graph) -> Shown:
    rows = [{"node": k, "op": "null" if n.op is None else "cvm_op", "name": n.name,
             "inputs": [src for src, _ in n.inputs]} for k, n in enumerate(graph.nodes)]
    heads = [[src, idx, 0] for src, idx in graph.heads]
    lines = [f"Cortex graph JSON, version {graph.version}: {len(rows)} nodes, heads {heads}",
             "(its params file is needed to decode it as a model: cvmvm show GRAPH --params PARAMS)"]
    lines += [f"node {r['node']}: " + (f"variable {n.name}" if n.op is None else f"{n.op.name} {n.name} <- nodes "
                                       f"{r['inputs']}") for r, n in zip(rows, graph.nodes)]
    return {"version": graph.version, "nodes": rows, "heads": heads}, lines


def _params(data: bytes) -> Shown:
    arrays = read_params(data)
    rows = [{"name": n, "shape": list(a.values.shape), "bits": a.bits,
             "min": int(a.values.min()), "max": int(a.values.max())} for n, a in arrays.items()]
    lines = [f"Cortex params binary: {len(rows)} arrays"]
    lines += [f"{r['name']}: int{r['bits']}{r['shape']} min {r['min']} max {r['max']}" for r in rows]
    return {"arrays": rows}, lines


def _receipt_json(r: receipt_codec.Receipt) -> dict[str, Any]:
    return {"model_hash": r.model_hash.hex(), "program_root": r.program_root.hex(),
            "inputs": [{"name": n, "commitment": h.hex()} for n, h in r.inputs],
            "output_hash": r.output_hash.hex(), "trace_root": r.trace_root.hex(), "ops": r.ops,
            "signer": None if r.signer is None else {"public_key": r.signer.public_key.hex(),
                                                     "signature": r.signer.signature.hex()}}


def _receipt_lines(r: receipt_codec.Receipt) -> list[str]:
    lines = [f"model hash   {r.model_hash.hex()}", f"program root {r.program_root.hex()}"]
    lines += [f"input {n}: commitment {h.hex()}" for n, h in r.inputs]
    lines += [f"output hash {r.output_hash.hex()}", f"trace root  {r.trace_root.hex()}", f"ops {r.ops}",
              "unsigned" if r.signer is None else f"signed by {r.signer.public_key.hex()}"]
    return lines


def _receipt(data: bytes) -> Shown:
    r = receipt_codec.decode(data)
    lines = [f"receipt (format version {receipt_codec.RECEIPT_VERSION})", *_receipt_lines(r)]
    return {"format_version": receipt_codec.RECEIPT_VERSION, **_receipt_json(r)}, lines


def _trace(data: bytes, path: str) -> Shown:
    t = trace_codec.load_trace(data, path)
    rows = [e.row for e in t.entries]
    lines = [f"trace ({trace_codec.TRACE_FORMAT}): {len(rows)} tensors, model hash {t.model_hash}, root {t.root}",
             f"program root {t.program_root}, input commitment {t.input_commitment}"]
    for r in rows:
        what = r["kind"] if r["kind"] != "instr" else f"{r.get('op')} (instruction {r['index']})"
        prec = "" if r.get("precision") is None else f" p{r['precision']}"
        lines.append(f"%{r['tensor']:<4} {r.get('name')}: {what}, {r.get('dtype')}{r.get('shape')}{prec}, "
                     f"commitment {r['commitment']}")
    return {"format": trace_codec.TRACE_FORMAT, "model_hash": t.model_hash, "program_root": t.program_root,
            "input_commitment": t.input_commitment, "root": t.root, "entries": rows}, lines


def _proof(data: bytes) -> Shown:
    p = proof_codec.decode(data)
    record = decode_instr(p.record, p.counts, "step_proof")
    operands = [{"tensor": t, **_type_json(ty), "bytes": len(o.data), "chunks": [c.index for c in o.chunks],
                 "path": len(o.path)} for (t, ty), o in zip(record.inputs, p.operands)]
    results = [{"tensor": t, **_type_json(ty), "commitment": None if r.commitment is None else r.commitment.hex(),
                "chunk": None if r.chunk is None else r.chunk.index, "path": len(r.path)}
               for (t, ty), r in zip(record.outputs, p.results)]
    info: dict[str, Any] = {"format_version": proof_codec.PROOF_VERSION, "program": list(p.counts), "step": p.step,
                            "element": p.element, "op": record.op, "attrs": _attrs(record.attrs),
                            "operands": operands, "results": results}
    kind = "whole-instruction" if p.element is None else f"element {p.element}"
    lines = [f"step proof (format version {proof_codec.PROOF_VERSION}), {kind}: instruction {p.step}, {record.op} "
             f"{' '.join(f'{k}={v}' for k, v in info['attrs'].items())}",
             f"program counts (inputs, params, instructions, heads, tensors) {list(p.counts)}"]
    lines += [f"operand %{o['tensor']}: {_t(ty)}, " + (f"{o['bytes']} bytes" if p.element is None else
                                                       f"chunks {o['chunks']}") + f", path of {o['path']}"
              for o, (_, ty) in zip(operands, record.inputs)]
    lines += [f"result  %{r['tensor']}: {_t(ty)}, " + (f"commitment {r['commitment']}" if p.element is None else
                                                       f"chunk {r['chunk']}") + f", path of {r['path']}"
              for r, (_, ty) in zip(results, record.outputs)]
    return info, lines


def _txs(data: bytes) -> Shown:
    txs = transactions.decode_txs(data)
    rows: list[dict[str, Any]] = [{"model_hash": tx.model_hash.hex(),
             "inputs": [{"name": n, "dtype": str(v.dtype), "shape": list(v.shape)} for n, v in tx.inputs],
             "receipt": _receipt_json(tx.receipt)} for tx in txs]
    lines = [f"transaction file (format version {transactions.TXS_VERSION}): {len(rows)} transactions"]
    for k, (tx, row) in enumerate(zip(txs, rows)):
        ins = ", ".join(f"{i['name']} {i['dtype']}{i['shape']}" for i in row["inputs"])
        signed = "unsigned" if tx.receipt.signer is None else f"signed by {tx.receipt.signer.public_key.hex()[:16]}..."
        lines.append(f"tx {k}: model {row['model_hash'][:16]}..., inputs {ins}, claims output hash "
                     f"{row['receipt']['output_hash'][:16]}..., {signed}")
    return {"format_version": transactions.TXS_VERSION, "transactions": rows}, lines


def _npy(path: str) -> Shown:
    value = files.read_npy(path)
    info: dict[str, Any] = {"dtype": str(value.dtype), "shape": list(value.shape)}
    lines = [f".npy array: {value.dtype}{list(value.shape)}"]
    if value.size and value.dtype.kind in "iu":
        info.update(min=int(value.min()), max=int(value.max()))
        lines.append(f"min {info['min']} max {info['max']}")
    elif value.size and value.dtype.kind == "f":
        real = value[~np.isnan(value)]     # NaN is no bound; an array of NaN only has none
        lo, hi = (float(real.min()), float(real.max())) if real.size else (math.nan, math.nan)
        info.update(min=json_float(lo), max=json_float(hi))
        lines.append(f"min {lo} max {hi}")
    try:
        t = value_type(value)
    except CvmError as e:
        lines.append(f"no tensor commitment: {e.message}")
    else:
        info["commitment"] = tensor_commitment(value.astype(np.int32) if t.dtype == "int32" else value, t).hex()
        info["precision"] = t.precision
        lines.append(f"tensor commitment {info['commitment']} ({_t(t)})")
    return info, lines


def _limit(head: bytes) -> tuple[int, str]:
    """The byte limit of a file to show: JSON text is a trace or a graph, and only its whole text
    tells which (``_cortex_graph`` checks a graph's smaller limit); anything else, any file's."""
    if kinds.json_head(head):
        return max(trace_codec.MAX_TRACE_BYTES, MAX_GRAPH_JSON_BYTES), "JSON file"
    return files.MAX_FILE_BYTES, "file"


def cmd_show(args: argparse.Namespace) -> Reply:
    data = files.read_by_head(args.file, "file", _limit)
    kind = kinds.detect(data)
    if args.params is not None and kind != kinds.CORTEX_GRAPH:
        raise UsageError("conflict", f"--params goes with a Cortex graph JSON; {args.file} is "
                                     f"{kind or 'no cvmvm file'}")
    if kind is None:
        raise MalformedError("kind", f"{args.file}: not a cvmvm file (one of: {', '.join(kinds.KINDS)})")
    if kind == kinds.NATIVE:
        info, lines = _native(data)
    elif kind == kinds.CORTEX_GRAPH:
        info, lines = _cortex_graph(data, args.file, args.params)
    elif kind == kinds.CORTEX_PARAMS:
        info, lines = _params(data)
    elif kind == kinds.RECEIPT:
        info, lines = _receipt(data)
    elif kind == kinds.TRACE:
        info, lines = _trace(data, args.file)
    elif kind == kinds.STEP_PROOF:
        info, lines = _proof(data)
    elif kind == kinds.TXS:
        info, lines = _txs(data)
    else:
        info, lines = _npy(args.file)
    return EXIT_OK, {"kind": kind, **info}, "\n".join(lines)


def add_commands(command: Command) -> None:
    p = command("show", cmd_show, "decode any cvmvm file (model, Cortex graph or params, receipt, trace, "
                                  "step proof, transaction file, .npy) to text, telling its kind from its content")
    p.add_argument("file", help="the file to show")
    p.add_argument("--params", help="a Cortex graph's params binary, to show the graph as a verified model")
