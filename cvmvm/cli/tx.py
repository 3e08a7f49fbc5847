"""The transaction commands: check-receipt, store, replay, tx (add, convert, demo), keygen, diff,
prove-step, check-step, prove-outputs, contract."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from isa.errors import CvmError, InputError, UsageError
from serializer import kinds
from serializer.hashing import outputs_hash
from serializer.records import receipt as receipt_codec, stepproof as proof_codec, trace as trace_codec, transactions
from cvmvm import files
from cvmvm.vm.execute import Clipping, prepare_inputs
from cvmvm.vm.trace import make_trace, program_layout
from cvmvm.vm.verify import NOT_RUN
from cvmvm.tx import contract, receipt, replay, results, schedule, stepproof, tracediff, txtools
from cvmvm.tx.store import Entry, Store
from cvmvm.cli import demo
from cvmvm.cli.common import (EXIT_CODES, EXIT_MISMATCH, EXIT_OK, KEY_FILE_BYTES, Command, Reply,
                              clipping_json, hash_hex, input_arg, limit_args, limits_of, load_model, model_args,
                              int_between, non_negative_int, parse_inputs, path_name, positive_int, read_input,
                              read_kind, uint256, warn_clipping)


def _signer(path: str | None) -> bytes | None:
    return None if path is None else receipt.load_public_key(files.read_bytes(path, "public key", KEY_FILE_BYTES), path)


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


def _store_problem(e: Entry) -> str:
    if e.problem == "hash":
        return "  CORRUPT: content does not hash to its name"
    if e.problem == "too large":
        return "  REFUSED: larger than a model may be"
    return f"  REFUSED: a {e.problem}, not a regular file" if e.problem else ""


def cmd_store_list(args: argparse.Namespace) -> Reply:
    entries = Store(args.dir).list()
    rows = [{"model_hash": e.model_hash, "bytes": e.size, "intact": e.intact, "problem": e.problem} for e in entries]
    lines = [f"{e.model_hash} {e.size:>12d} bytes{_store_problem(e)}" for e in entries]
    lines.append(f"{len(entries)} models")
    intact = all(e.intact for e in entries)
    return (EXIT_OK if intact else EXIT_MISMATCH), {"models": rows}, "\n".join(lines)


# -- replay -------------------------------------------------------------------------------

class _Progress:
    """A tqdm bar on stderr counting transactions, when tqdm is installed (the ``progress``
    extra), stderr is a terminal and --quiet is not given.  ``delay``: shown only once the
    command has run this long (a ``tx add`` to a small file never draws one)."""

    def __init__(self, total: int | None, quiet: bool, desc: str, delay: float = 0.0) -> None:
        self.bar = None
        if quiet or not sys.stderr.isatty():
            return
        try:
            from tqdm import tqdm
        except ImportError:
            return
        self.bar = tqdm(total=total, unit="tx", unit_scale=True, desc=desc, file=sys.stderr,
                        dynamic_ncols=True, smoothing=0.05, delay=delay)

    def update(self, n: int, note: str | None = None) -> None:
        if self.bar is not None:
            if note is not None:
                self.bar.set_postfix_str(note, refresh=False)
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# The tx commands' bars wait this long: most of their runs are over before it.
TX_BAR_DELAY = 0.5


def cmd_replay(args: argparse.Namespace) -> Reply:
    if args.resume and args.output is None:
        raise UsageError("conflict", "--resume continues the results file given with --output")
    if args.ray is not None:
        try:
            import ray  # noqa: F401  (only to say at once that the extra is missing)
        except ImportError:
            raise schedule.ray_missing() from None
    store = Store(args.store)
    schedule.check_store(store)
    opts = schedule.Options(args.workers, args.ray, args.batch, _signer(args.signer), limits_of(args), args.compile)
    # Before the results file is made: a transaction file that is missing or no regular file
    # (a fifo is refused unopened) leaves no results file behind.
    total = schedule.count_hint(args.txs)
    previous = None
    out = None
    if args.output is not None:
        # Checked as every output is (its directory, not an input); appended to, not replaced.
        files.Outputs(reads=[args.txs, args.signer]).file(args.output, "--output")
        if args.resume and os.path.lexists(args.output):
            out, previous = results.resume(args.output, opts.signer, opts.limits)
        else:
            out = results.ResultsFile.create(args.output, opts.signer, opts.limits)
    report = results.Report()
    progress = _Progress(total, args.quiet, "replay")
    stdout = sys.stdout
    first = True  # with --json, the object opens with the first outcome: a failure before it prints only the error
    try:
        for burst in schedule.replay_file(args.txs, store, opts, previous):
            if out is not None:
                out.write(burst)
            text = []
            for o in burst:
                report.add(o)
                if args.json:
                    text.append(('{"results": [' if first else ", ") + results.outcome_line(o))
                    first = False
                elif results.shown(o, args.all):
                    text.append(results.describe(o) + "\n")
            if text:
                stdout.write("".join(text))
                stdout.flush()
            progress.update(len(burst), f"{report.mismatch} mismatch, {report.error} error")
    except CvmError as e:
        if e.code != "malformed.txs" or report.total == 0:
            raise
        report.file_error = e
    finally:
        progress.close()
        if out is not None:
            out.close()
    if args.json:
        summary = json.dumps(report.summary(), sort_keys=True)
        stdout.write(('{"results": [' if first else "") + '], "summary": ' + summary + "}\n")
    else:
        stdout.write("\n".join(report.lines()) + "\n")
    stdout.flush()
    if report.file_error is not None:
        fault = report.file_error
        print(f"cvmvm: error {fault.code}: {fault.message}", file=sys.stderr)
        return EXIT_CODES[fault.family], None, None
    return (EXIT_OK if report.ok == report.total else EXIT_MISMATCH), None, None


# -- tx: add, convert, demo; keygen -------------------------------------------------------

def cmd_tx_add(args: argparse.Namespace) -> Reply:
    # TXS's directory is checked before the run, as every output's is.  A TXS that is another kind of
    # file (the model, say) is malformed.kind when it is read to be appended to.
    files.Outputs().file(args.txs, "TXS")
    model = load_model(args.model, args.params, limits_of(args))
    claim = None
    if args.receipt is not None:
        claim = receipt_codec.decode(read_kind(args.receipt, (kinds.RECEIPT,), "receipt",
                                               receipt_codec.MAX_RECEIPT_BYTES))
    tx, actual, clipping = txtools.transaction_for(model, parse_inputs(args.input), claim)
    warn_clipping(clipping)
    try:
        total = schedule.count_hint(args.txs) if os.path.lexists(args.txs) else 0
    except CvmError:   # for the bar only: append names what is wrong with TXS
        total = None
    with _Progress(None if total is None else total + 1, args.quiet, "tx add", TX_BAR_DELAY) as bar:
        count = txtools.append(Path(args.txs), [transactions.encode_tx(tx)], bar.update)
    holds = receipt.mismatches(tx.receipt, actual)
    info = {"txs": args.txs, "index": count - 1, "model_hash": model.model_hash.hex(),
            "receipt_matches_run": not holds, "mismatched_fields": list(holds), "clipped": clipping_json(clipping)}
    text = f"added transaction {count - 1} to {args.txs} (model {model.model_hash.hex()})"
    if holds:
        text += f"\nnote: its receipt does not match the run: {', '.join(holds)}"
    return EXIT_OK, info, text


def cmd_tx_convert(args: argparse.Namespace) -> Reply:
    # No total: an old version's last bytes state no count.
    with _Progress(None, args.quiet, "tx convert", TX_BAR_DELAY) as bar:
        count = txtools.convert(Path(args.old), Path(args.new), bar.update)
    return (EXIT_OK, {"transactions": count, "out": args.new, "version": transactions.TXS_VERSION},
            f"wrote {count} transactions to {args.new} (version {transactions.TXS_VERSION})")


def cmd_tx_demo(args: argparse.Namespace) -> Reply:
    model, images = demo.demo_model_and_images()
    with _Progress(args.count, args.quiet, "tx demo", TX_BAR_DELAY) as bar:
        expected = txtools.generate(model, images, Path(args.out), args.count, signed=not args.unsigned,
                                    advance=bar.update)
    kinds: dict[str, int] = {}
    for b in expected["bad"]:
        kinds[b["kind"]] = kinds.get(b["kind"], 0) + 1
    text = (f"{args.count} transactions ({len(expected['bad'])} bad: "
            + ", ".join(f"{k} {n}" for k, n in kinds.items()) + f") in {args.out}/txs.cvmtx, "
            f"store {args.out}/store" + ("" if args.unsigned else f", signer {args.out}/signer.pub"))
    return EXIT_OK, {"count": args.count, "bad": len(expected["bad"]), "kinds": kinds, "out": args.out}, text


def cmd_keygen(args: argparse.Namespace) -> Reply:
    public = receipt.keygen(Path(args.key))
    return (EXIT_OK, {"private_key": args.key, "public_key": args.key + ".pub", "public_hex": public.hex()},
            f"wrote {args.key} (private: keep it; for --sign) and {args.key}.pub (public: for --signer)\n"
            f"public key {public.hex()}")


# -- diff ---------------------------------------------------------------------------------

def cmd_diff(args: argparse.Namespace) -> Reply:
    a = tracediff.read_trace(read_kind(args.trace_a, (kinds.TRACE,), "trace", trace_codec.MAX_TRACE_BYTES), args.trace_a)
    b = tracediff.read_trace(read_kind(args.trace_b, (kinds.TRACE,), "trace", trace_codec.MAX_TRACE_BYTES), args.trace_b)
    report = tracediff.diff(a, b)
    return (EXIT_OK if report["same"] else EXIT_MISMATCH), report, tracediff.render(report)


# -- step proofs --------------------------------------------------------------------------

def cmd_prove_step(args: argparse.Namespace) -> Reply:
    if args.calldata is not None and args.element is None and args.against is None:
        raise UsageError("conflict", "--calldata needs --element (or --against): the contract checks one element")
    if (args.calldata is None) != (args.commitment_id is None):
        raise UsageError("conflict", "--calldata and --commitment-id go together")
    if args.out is None and args.calldata is None:
        raise UsageError("conflict", "give --out, --calldata, or both")
    if (args.against is None) != (args.claimed_output is None):
        raise UsageError("conflict", "--against and --claimed-output go together")
    if args.against is None and args.step is None:
        raise UsageError("conflict", "--step is needed (or --against, which finds the first wrong instruction)")
    # Every output is checked before the run, and written as one unit after it (cvmvm.files.Outputs).
    outputs = files.Outputs(reads=[args.model, args.params, args.against, args.claimed_output,
                                   *(path for _, path in args.input)])
    proof_out = outputs.file(args.out, "--out") if args.out is not None else None
    calldata_out = outputs.file(args.calldata, "--calldata") if args.calldata is not None else None
    model = load_model(args.model, args.params, limits_of(args))
    inputs = parse_inputs(args.input)
    clipped: list[Clipping] = []
    prepare_inputs(model.program, inputs, clipped)
    warn_clipping(clipped)
    if args.against is None:
        proof, trace = stepproof.prove_step(model, inputs, args.step, args.element)
    else:
        disputed = trace_codec.load_trace(read_kind(args.against, (kinds.TRACE,), "trace",
                                                    trace_codec.MAX_TRACE_BYTES), args.against)
        if disputed.program_root != model.program_root.hex():
            raise InputError("trace", f"{args.against} is a trace of another program (program root "
                                      f"{disputed.program_root})")
        proof, trace, _, _ = stepproof.prove_against(model, inputs, [e.commitment for e in disputed.entries],
                                                     read_input(args.claimed_output), args.step, args.element)
    op = model.program.steps[proof.step].op.name
    if args.calldata is not None and proof.element is None:
        raise InputError("not_covered", f"{op} has no element proofs: no calldata (--out writes a "
                                        "whole-instruction proof)")
    info = {"step": proof.step, "op": op, "element": proof.element, "program_root": model.program_root.hex(),
            "input_commitment": trace.inputs.hex(), "trace_root": trace.root.hex(),
            "clipped": clipping_json(clipped)}
    lines = []
    if proof_out is not None:
        data = proof_codec.encode(proof)
        outputs.put(proof_out, data)
        info.update(proof=args.out, proof_bytes=len(data))
        lines.append(f"wrote the proof of instruction {proof.step} ({op})"
                     + ("" if proof.element is None else f", element {proof.element},") + f" to {args.out}")
    if calldata_out is not None:
        data = proof_codec.challenge_calldata(args.commitment_id, proof_codec.calldata_proof(proof))
        outputs.put(calldata_out, ("0x" + data.hex() + "\n").encode())
        info.update(calldata=args.calldata, calldata_bytes=len(data))
        lines.append(f"wrote challenge({args.commitment_id}, proof) calldata ({len(data)} bytes) to {args.calldata}")
    outputs.commit()
    lines += [f"program root {info['program_root']}", f"trace root   {info['trace_root']}"]
    return EXIT_OK, info, "\n".join(lines)


def cmd_check_step(args: argparse.Namespace) -> Reply:
    proof = proof_codec.decode(read_kind(args.proof, (kinds.STEP_PROOF,), "step proof", proof_codec.MAX_PROOF_BYTES))
    if (args.model is None) == (args.program_root is None):
        raise UsageError("conflict", "give exactly one of --program-root and --model")
    if args.params is not None and args.model is None:
        raise UsageError("conflict", "--params goes with --model")
    # The model is only read for its program root, never run: the ISA's rules, not a run's limits.
    program_root = (args.program_root if args.model is None
                    else load_model(args.model, args.params, NOT_RUN).program_root)
    verdict = stepproof.check_step(proof, args.root, program_root, limits_of(args))
    what = f"instruction {verdict.step} ({verdict.op})" + ("" if verdict.element is None else f", element {verdict.element}")
    info = {"verdict": "correct" if verdict.correct else "wrong", "step": verdict.step, "op": verdict.op,
            "element": verdict.element, "detail": list(verdict.detail)}
    lines = list(verdict.detail)
    lines.append(f"{what}: the trace's result is correct" if verdict.correct else
                 f"{what}: the trace's result is WRONG (fraud, proved against the roots alone)")
    return (EXIT_OK if verdict.correct else EXIT_MISMATCH), info, "\n".join(lines)


def cmd_prove_outputs(args: argparse.Namespace) -> Reply:
    calldata_out = files.Outputs(reads=[args.model, args.params, args.against])
    key = calldata_out.file(args.calldata, "--calldata")
    model = load_model(args.model, args.params, NOT_RUN)  # its trace is the disputed one: nothing is run
    disputed = trace_codec.load_trace(read_kind(args.against, (kinds.TRACE,), "trace", trace_codec.MAX_TRACE_BYTES),
                                      args.against)
    if disputed.program_root != model.program_root.hex():
        raise InputError("trace", f"{args.against} is a trace of another program (program root {disputed.program_root})")
    trace = make_trace(model.program, [e.commitment for e in disputed.entries])
    heads = stepproof.prove_outputs(model.program, trace)
    layout = program_layout(model.program)
    proof = proof_codec.outputs_calldata_proof(layout.counts, trace.commitments[:layout.counts[0]], heads)
    data = proof_codec.challenge_calldata(args.commitment_id, proof, proof_codec.CHALLENGE_OUTPUTS_SELECTOR)
    calldata_out.put(key, ("0x" + data.hex() + "\n").encode())
    calldata_out.commit()
    output_hash = outputs_hash([h.commitment for h in heads]).hex()
    info = {"calldata": args.calldata, "calldata_bytes": len(data), "output_hash": output_hash,
            "trace_root": trace.root.hex()}
    return EXIT_OK, info, (f"wrote challengeOutputs({args.commitment_id}, proof) calldata ({len(data)} bytes) to "
                           f"{args.calldata}\nthe trace's output hash is {output_hash}: the challenge refutes a "
                           f"commitment of this trace root with any other")


def cmd_contract(args: argparse.Namespace) -> Reply:
    out = Path(args.dir)
    deployment = contract.deployment_files()
    outputs = files.Outputs()
    folder = outputs.directory(out, "contract directory", "|".join(re.escape(name) for name in deployment))
    for name, data in deployment.items():
        outputs.put_in(folder, name, data)
    outputs.commit()
    written = list(deployment)
    info = {"dir": str(out), "files": written, "compiler": contract.artifact()["compiler"]}
    return EXIT_OK, info, "\n".join([f"wrote {out / name}" for name in written]
                                    + ["deploy CvmChallenge.bin (it is CvmStep too); docs/FORMAT.md section 10"])


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
    add.add_argument("dir", type=path_name, help="store directory (created if missing)")
    model_args(add)
    add.set_defaults(func=cmd_store_add)
    listing = actions.add_parser("list", help="list the stored models, each re-hashed")
    listing.add_argument("dir", type=path_name, help="store directory")
    listing.set_defaults(func=cmd_store_list)
    for sub in (add, listing):  # --json after the action too; SUPPRESS keeps a --json given before it
        sub.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON object")

    p = command("replay", cmd_replay, "re-execute a file of transactions and check every claimed receipt")
    p.add_argument("txs", help="transaction file (docs/FORMAT.md section 8)")
    p.add_argument("--store", required=True, help="model store directory")
    p.add_argument("--workers", type=int_between(1, schedule.MAX_WORKERS), default=1, help="worker processes (default 1: this process)")
    p.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                   help="run on Ray (pip install 'cvmvm[ray]'): the cluster at ADDRESS, else RAY_ADDRESS's, else "
                        "a local one; give it after TXS or as --ray=ADDRESS")
    p.add_argument("--batch", type=positive_int, default=replay.DEFAULT_BATCH,
                   help="most transactions in one batched run")
    p.add_argument("--signer", metavar="PUBKEY", help="require every receipt signed by this Ed25519 public key")
    p.add_argument("--compile", action="store_true",
                   help="each worker compiles its hashing first (the 'speed' extra: about 4 s, then some 30-48 us less "
                        "a digits transaction); without it a worker compiles after 100,000 transactions")
    p.add_argument("--output", metavar="RESULTS.jsonl", help="stream one JSON line per transaction to this new file")
    p.add_argument("--resume", action="store_true", help="continue the --output file of an interrupted replay")
    p.add_argument("--all", action="store_true", help="print a line for every transaction, not only those that "
                                                      "did not hold (--json always lists every one)")
    limit_args(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar (there is one on a terminal when the "
                                                        "'progress' extra, tqdm, is installed)")

    p = command("tx", cmd_tx_add, "make transaction files: add a real run, convert an old file, generate a demo")
    actions = p.add_subparsers(dest="tx_command", required=True)
    add = actions.add_parser("add", help="append a transaction of a real run (created if missing)",
                             description="Run MODEL on the inputs and append the transaction (inputs as the program "
                                         "read them, and the run's receipt, or the --receipt given) to TXS.")
    add.add_argument("txs", help="transaction file (created if missing)")
    model_args(add, "--model")
    input_arg(add)
    add.add_argument("--receipt", help="carry this receipt as the claim (e.g. signed by cvmvm run --receipt --sign)")
    limit_args(add)
    add.set_defaults(func=cmd_tx_add)
    conv = actions.add_parser("convert", help=f"convert a version 1, 2 or 3 transaction file to version "
                                              f"{transactions.TXS_VERSION} (never a receipt of an older commitment "
                                              f"format: see FORMAT.md 8)")
    conv.add_argument("old", help="version 1, 2 or 3 transaction file")
    conv.add_argument("new", help=f"version {transactions.TXS_VERSION} file to write")
    conv.set_defaults(func=cmd_tx_convert)
    gen = actions.add_parser("demo", help="generate N digits transactions, some bad on purpose, and their store",
                             description=txtools.__doc__.split("\n\n")[2] if txtools.__doc__ else None)
    gen.add_argument("count", type=int_between(1, txtools.MAX_DEMO), metavar="N",
                     help=f"transactions (at most {txtools.MAX_DEMO:,})")
    gen.add_argument("out", metavar="OUT", type=path_name, help="directory for store/, txs.cvmtx, expected.json, signer.pub")
    gen.add_argument("--unsigned", action="store_true", help="unsigned receipts (no signature to verify)")
    gen.set_defaults(func=cmd_tx_demo)
    for sub in (add, conv, gen):
        sub.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON object")
        sub.add_argument("--quiet", action="store_true", help="no progress bar (there is one on a terminal, after "
                                                              f"{TX_BAR_DELAY} s, when the 'progress' extra, tqdm, "
                                                              "is installed)")

    p = command("keygen", cmd_keygen, "write an Ed25519 key pair: KEY (private, for --sign) and KEY.pub (for --signer)")
    p.add_argument("key", type=path_name, help="private key file to write; the public key goes to KEY.pub")

    p = command("diff", cmd_diff, "name the first instruction at which two traces of a model disagree")
    p.add_argument("trace_a", help="trace file (cvmvm run --trace)")
    p.add_argument("trace_b", help="trace file (cvmvm run --trace)")

    p = command("prove-step", cmd_prove_step, "prove one instruction (or one element of it) of a run against "
                                               "its trace root and program root")
    model_args(p)
    input_arg(p)
    p.add_argument("--step", type=non_negative_int, help="the instruction's index, from 0 (with --against: found "
                                                         "when omitted)")
    p.add_argument("--element", type=non_negative_int, help="an element proof of this output element (row-major "
                                                            "index), for the ops the contract covers (with "
                                                            "--against: the first wrong element when omitted)")
    p.add_argument("--out", help="proof file to write (docs/FORMAT.md section 9)")
    p.add_argument("--calldata", metavar="FILE", help="write the ABI-encoded challenge(commitmentId, proof) "
                                                      "calldata as hex (an element proof)")
    p.add_argument("--commitment-id", type=uint256, help="the contract's id of the disputed commitment "
                                                                  "(with --calldata)")
    p.add_argument("--against", metavar="TRACE", help="prove a disputed run wrong: its trace file (cvmvm-trace/3); "
                                                      "the proof opens its first wrong instruction")
    p.add_argument("--claimed-output", metavar="NPY", help="with --against: the disputed run's value of that "
                                                           "instruction's output")
    limit_args(p)

    p = command("check-step", cmd_check_step, "check a step proof against a trace root and a program root: "
                                              "correct, wrong (fraud), or an error")
    p.add_argument("proof", help="step proof file (cvmvm prove-step)")
    p.add_argument("--root", type=hash_hex, required=True, help="the trace root (64 hex digits)")
    p.add_argument("--program-root", type=hash_hex, help="the program root (64 hex digits)")
    p.add_argument("--model", help="take the program root from this model (native, or Cortex graph JSON)")
    p.add_argument("--params", help="Cortex params binary (with a graph JSON)")
    limit_args(p)

    p = command("prove-outputs", cmd_prove_outputs, "write the calldata that refutes a commitment whose output hash "
                                                    "is not its trace's")
    model_args(p)
    p.add_argument("--against", metavar="TRACE", required=True, help="the committed run's trace file (cvmvm-trace/3)")
    p.add_argument("--calldata", metavar="FILE", required=True, help="where to write challengeOutputs calldata (hex)")
    p.add_argument("--commitment-id", type=uint256, required=True, help="the contract's id of the commitment")

    p = command("contract", cmd_contract, "write the on-chain verifier: Solidity source, ABI, bytecode")
    p.add_argument("dir", type=path_name, help="directory to write into (created if missing; its parent must exist)")
