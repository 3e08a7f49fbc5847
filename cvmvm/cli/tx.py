"""The transaction commands: check-receipt, store, replay, diff, prove-step, check-step."""

from __future__ import annotations

import argparse
import sys

from isa.errors import UsageError
from serializer import kinds
from serializer.records import receipt as receipt_codec, stepproof as proof_codec, trace as trace_codec, transactions
from cvmvm import files
from cvmvm.vm.execute import Clipping, prepare_inputs
from cvmvm.tx import receipt, replay, stepproof, tracediff
from cvmvm.tx.store import Store
from cvmvm.cli.common import (EXIT_MISMATCH, EXIT_OK, NOT_RUN, Command, Reply, clipping_json, hash_hex, input_arg,
                              limit_args, limits_of, load_model, model_args, non_negative_int, parse_inputs,
                              positive_int, read_kind, warn_clipping)


def _signer(path: str | None) -> bytes | None:
    return None if path is None else receipt.load_public_key(files.read_bytes(path, "public key"), path)


# -- check-receipt ---------------------------------------------------------------------

def cmd_check_receipt(args: argparse.Namespace) -> Reply:
    claimed = receipt_codec.decode(read_kind(args.receipt, (kinds.RECEIPT,), "receipt",
                                             receipt_codec.MAX_RECEIPT_BYTES))
    signer = _signer(args.signer)
    # The claim is authenticated before anything is computed for it.
    executed = not receipt.unauthenticated(claimed, signer)
    actual: receipt_codec.Receipt | None = None
    clipping: tuple[Clipping, ...] = ()
    if executed:
        model = load_model(args.model, args.params, limits_of(args))
        result = model.run(parse_inputs(args.input), trace=True)
        warn_clipping(result.clipping)
        actual, clipping = receipt.make_receipt(model, result), result.clipping
    checks = receipt.check(claimed, actual, signer)
    ok = executed and all(c.ok for c in checks)
    info = {"match": ok, "executed": executed, "clipped": clipping_json(clipping),
            "fields": [{"field": c.field, "match": c.ok, "claimed": c.claimed, "actual": c.actual,
                        "detail": receipt.explain(c)} for c in checks]}
    lines = [f"{'match   ' if c.ok else 'MISMATCH'} {c.field}: {receipt.explain(c)}" for c in checks]
    if not executed:
        lines.append("not re-executed: the receipt's signature or signer does not hold")
    lines.append("receipt matches" if ok else "receipt does NOT match")
    return (EXIT_OK if ok else EXIT_MISMATCH), info, "\n".join(lines)


# -- store ------------------------------------------------------------------------------

def cmd_store_add(args: argparse.Namespace) -> Reply:
    store = Store(args.dir)
    digest = store.add(load_model(args.model, args.params, NOT_RUN))
    return EXIT_OK, {"model_hash": digest.hex(), "path": str(store.path(digest))}, digest.hex()


def cmd_store_list(args: argparse.Namespace) -> Reply:
    entries = Store(args.dir).list()
    rows = [{"model_hash": e.model_hash, "bytes": e.size, "intact": e.intact} for e in entries]
    lines = [f"{e.model_hash} {e.size:>12d} bytes{'' if e.intact else '  CORRUPT: content does not hash to its name'}"
             for e in entries]
    lines.append(f"{len(entries)} models")
    intact = all(e.intact for e in entries)
    return (EXIT_OK if intact else EXIT_MISMATCH), {"models": rows}, "\n".join(lines)


# -- replay -------------------------------------------------------------------------------

def _progress_bar() -> replay.Progress | None:
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        width = 30
        filled = width * done // max(1, total)
        end = "\n" if done == total else ""
        print(f"\rreplay [{'#' * filled}{'.' * (width - filled)}] {done}/{total}", end=end, file=sys.stderr, flush=True)

    return show


def cmd_replay(args: argparse.Namespace) -> Reply:
    txs = transactions.decode_txs(read_kind(args.txs, (kinds.TXS,), "transaction file", transactions.MAX_TXS_BYTES))
    outcomes = replay.replay(txs, Store(args.store), workers=args.workers, use_ray=args.ray,
                             batch_size=args.batch, signer=_signer(args.signer), progress=_progress_bar(),
                             limits=limits_of(args))
    summary = replay.summary(outcomes)
    info = {"summary": summary, "results": [o.to_json() for o in outcomes]}
    clean = summary["ok"] == summary["total"]
    return (EXIT_OK if clean else EXIT_MISMATCH), info, "\n".join(replay.iter_lines(outcomes, args.all))


# -- diff ---------------------------------------------------------------------------------

def cmd_diff(args: argparse.Namespace) -> Reply:
    a = trace_codec.load_trace(read_kind(args.trace_a, (kinds.TRACE,), "trace"), args.trace_a)
    b = trace_codec.load_trace(read_kind(args.trace_b, (kinds.TRACE,), "trace"), args.trace_b)
    report = tracediff.diff(a, b)
    return (EXIT_OK if report["same"] else EXIT_MISMATCH), report, tracediff.render(report)


# -- step proofs --------------------------------------------------------------------------

def cmd_prove_step(args: argparse.Namespace) -> Reply:
    model = load_model(args.model, args.params, limits_of(args))
    inputs = parse_inputs(args.input)
    clipped: list[Clipping] = []
    prepare_inputs(model.program, inputs, clipped)
    warn_clipping(clipped)
    proof, root = stepproof.prove_step(model, inputs, args.step)
    files.write_atomic(args.out, proof_codec.encode(proof))
    info = {"proof": args.out, "step": proof.step, "op": proof.op, "trace_root": root.hex(),
            "model_hash": model.model_hash.hex(), "clipped": clipping_json(clipped)}
    return EXIT_OK, info, f"wrote proof of instruction {proof.step} ({proof.op}) to {args.out}\ntrace root {root.hex()}"


def cmd_check_step(args: argparse.Namespace) -> Reply:
    if args.model is not None and args.store is not None:
        raise UsageError("conflict", "give at most one of --model and --store")
    if args.params is not None and args.model is None:
        raise UsageError("conflict", "--params goes with --model")
    proof = proof_codec.decode(read_kind(args.proof, (kinds.STEP_PROOF,), "step proof", proof_codec.MAX_PROOF_BYTES))
    model = None  # only compared with the proof, never run: the ISA's rules, not a run's limits
    if args.model is not None:
        model = load_model(args.model, args.params, NOT_RUN)
    elif args.store is not None:
        model = Store(args.store).get(proof.model_hash, NOT_RUN)
    checks = stepproof.check_step(proof, args.root, model, limits_of(args))
    ok = all(c.ok for c in checks)
    info = {"valid": ok, "step": proof.step, "op": proof.op,
            "checks": [{"check": c.name, "ok": c.ok, "detail": c.detail} for c in checks]}
    lines = [f"{'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}" for c in checks]
    lines.append(f"proof of instruction {proof.step} ({proof.op}) is {'valid' if ok else 'INVALID'}")
    return (EXIT_OK if ok else EXIT_MISMATCH), info, "\n".join(lines)


# -- the parser -----------------------------------------------------------------------------

def add_commands(command: Command) -> None:
    p = command("check-receipt", cmd_check_receipt, "check a receipt's signature, then re-execute its run and "
                                                    "report, field by field, what matches")
    p.add_argument("receipt", help="receipt file (cvmvm run --receipt)")
    model_args(p, "--model")
    input_arg(p)
    p.add_argument("--signer", metavar="PUBKEY", help="require this Ed25519 signer (PEM or raw 32-byte public key)")
    limit_args(p)

    p = command("store", cmd_store_list, "a model store: a directory of native models named by model hash")
    actions = p.add_subparsers(dest="store_command", required=True, metavar="{add,list}")
    add = actions.add_parser("add", help="add a Cortex or native model; print its hash")
    add.add_argument("dir", help="store directory (created if missing)")
    model_args(add)
    add.set_defaults(func=cmd_store_add)
    listing = actions.add_parser("list", help="list the stored models, each re-hashed")
    listing.add_argument("dir", help="store directory")
    listing.set_defaults(func=cmd_store_list)
    for sub in (add, listing):  # --json after the action too; SUPPRESS keeps a --json given before it
        sub.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON object")

    p = command("replay", cmd_replay, "re-execute a file of transactions and check every claimed receipt")
    p.add_argument("txs", help="transaction file (docs/FORMAT.md section 7)")
    p.add_argument("--store", required=True, help="model store directory")
    p.add_argument("--workers", type=positive_int, default=1, help="worker processes (default 1: this process)")
    p.add_argument("--ray", action="store_true", help="run on Ray (pip install cvmvm[ray]); --workers is then a hint")
    p.add_argument("--batch", type=positive_int, default=replay.DEFAULT_BATCH,
                   help="most transactions in one batched run")
    p.add_argument("--signer", metavar="PUBKEY", help="require every receipt signed by this Ed25519 key")
    p.add_argument("--all", action="store_true", help="print a line for every transaction, not only those that "
                                                      "did not hold (--json always lists every one)")
    limit_args(p)

    p = command("diff", cmd_diff, "name the first instruction at which two traces of a model disagree")
    p.add_argument("trace_a", help="trace file (cvmvm run --trace)")
    p.add_argument("trace_b", help="trace file (cvmvm run --trace)")

    p = command("prove-step", cmd_prove_step, "write a proof of one instruction of a run against its trace root")
    model_args(p)
    input_arg(p)
    p.add_argument("--step", type=non_negative_int, required=True, help="the instruction's index (from 0)")
    p.add_argument("--out", required=True, help="proof file to write")
    limit_args(p)

    p = command("check-step", cmd_check_step, "check a step proof: every inclusion proof against the root, then "
                                              "re-execute its one instruction")
    p.add_argument("proof", help="step proof file (cvmvm prove-step)")
    p.add_argument("--root", type=hash_hex, required=True, help="the trace root (64 hex digits)")
    p.add_argument("--model", help="optional: also confirm the proof names this model's instruction "
                                   "(native, or Cortex graph JSON)")
    p.add_argument("--params", help="Cortex params binary (with a graph JSON)")
    p.add_argument("--store", help="optional: a model store holding the model the proof names, to confirm it too")
    limit_args(p)
