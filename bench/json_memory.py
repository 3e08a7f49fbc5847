"""The memory and time the CLI takes to read JSON files, trace files and Cortex graphs, hostile
and honest (a script, not a test).

    python3 bench/json_memory.py [--mib 64] [--instructions 100000] [--graph-mib 64]
                                 [--nodes 100000] [--rounds 2] [--baseline DIR] [--only trace|graph]

Writes, into a temporary directory:
- hostile trace files of --mib MiB: one document whose entries are empty arrays,
  and JSON lines whose second line is an array of empty arrays (JSON's costliest
  objects per character, 56 bytes for three);
- an honest-shaped trace file of --mib MiB in each form: perf-large's trace
  entries repeated (refused at their tensor ids, after every entry is read);
- an honest trace of a chain of --instructions relu instructions, in each form;
- hostile graph JSON files of --graph-mib MiB: a relu graph whose graph attrs'
  shape list, or whose relu node's inputs, are empty arrays; one of variable
  nodes (refused at node_row_ptr, after every node is read);
- an honest graph of a chain of --nodes relu nodes.

Then runs `python -m cvmvm show FILE` on each (`diff FILE FILE` on the trace
chain, `run FILE` on the graphs: refused, or for want of an input, once the
model is read and verified), one process each, and prints each one's peak RSS
(the child's ru_maxrss) and wall time.  --baseline DIR runs another checkout's
CLI too, alternating with this one's, so that both see the machine alike.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def perf_large_lines() -> tuple[str, list[str]]:
    """perf-large's trace as JSON lines: its header and its entries."""
    import numpy as np
    import cvmvm
    from cvmvm.vm.trace import trace_to_json
    from serializer.records.trace import trace_lines
    models = REPO / "fixtures" / "models" / "perf-large"
    model = cvmvm.load_cortex(gzip.decompress((models / "graph.json.gz").read_bytes()),
                              gzip.decompress((models / "params.bin.gz").read_bytes()))
    image = np.load(gzip.open(models / "inputs.npy.gz"), allow_pickle=False)[0]
    doc = trace_to_json(model.program, model.run({"data": image}, trace=True).trace, model.model_hash)
    header, *entries = trace_lines(doc).decode().splitlines()
    return header, entries


def chain_doc(n: int) -> dict:
    import numpy as np
    from cvmvm.vm.api import Model
    from cvmvm.vm.trace import trace_to_json
    from cvmvm.vm.verify import verify
    model = Model(verify(relu_chain(n)))
    return trace_to_json(model.program, model.run({"data": np.array([[5, -100, 120, 7]], dtype=np.int32)},
                                                 trace=True).trace, model.model_hash)


def relu_chain(n: int):
    """A Cortex model: data, then ``n`` relus one after another."""
    from isa.attrs import parse_attrs
    from isa.table import OP_BY_NAME
    from isa.types import TensorType
    from serializer.model import Input, Instr, Model as ModelIR
    relu = parse_attrs(OP_BY_NAME["relu"].attrs, {}, fill_defaults=True)
    return ModelIR((Input("data", TensorType((1, 4), 8)),), (),
                   tuple(Instr("relu", relu, (k,), (k + 1,)) for k in range(n)), (n,))


def graph_files(mib: int, nodes: int) -> dict[str, bytes]:
    from cvmvm.vm.verify import verify
    from serializer.cortex import graph_to_json_bytes, write_cortex

    def text(n: int) -> bytes:
        program = verify(relu_chain(n))
        return graph_to_json_bytes(write_cortex(program.model, program.types)[0])
    size = (mib << 20) - 4096   # under the graph JSON limit with what surrounds the filler
    small = text(1).decode()
    empties = "[]," * (size // 3) + "[]"
    variable = '{"op": "null", "name": "v%07d", "inputs": []}'
    variables = ", ".join(variable % k for k in range(size // (len(variable % 0) + 2)))
    return {
        "graph-shapes.json": small.replace('"list_shape", [', f'"list_shape", [{empties}, ', 1).encode(),
        "graph-inputs.json": small.replace('"inputs": [[0, 0, 0]]', f'"inputs": [{empties}]', 1).encode(),
        "graph-variables.json": small.replace('"nodes": [', f'"nodes": [{variables}, ', 1).encode(),
        "graph-chain.json": text(nodes),
    }


def write_files(into: Path, mib: int, instructions: int, graph_mib: int, nodes: int) -> None:
    from serializer.records.trace import trace_bytes, trace_lines
    size = mib << 20
    header, entries = perf_large_lines()
    repeated = [entries[k % len(entries)] for k in range(size // (sum(map(len, entries)) // len(entries) + 1))]
    chain = chain_doc(instructions)
    files = {
        "hostile.json": b'{"entries":[' + b"[]," * (size // 3) + b'[]],"format":"cvmvm-trace/3"}\n',
        "hostile.jsonl": header.encode() + b"\n[" + b"[]," * (size // 3) + b"[]]\n",
        "repeated.json": trace_bytes({**json.loads(header), "entries": [json.loads(e) for e in repeated]}),
        "repeated.jsonl": ("\n".join([header, *repeated]) + "\n").encode(),
        "chain.json": trace_bytes(chain),
        "chain.jsonl": trace_lines(chain),
        **graph_files(graph_mib, nodes),
    }
    for name, data in files.items():
        (into / name).write_bytes(data)


FILES = ["hostile.json", "hostile.jsonl", "repeated.json", "repeated.jsonl", "chain.json", "chain.jsonl"]
GRAPHS = ["graph-shapes.json", "graph-inputs.json", "graph-variables.json", "graph-chain.json"]


def measure(tree: Path, argv: list[str]) -> tuple[float, float]:
    """Peak RSS (MiB) and wall time (s) of one CLI process run from ``tree``.  (A child's peak
    counts the pages it had before exec, so this process never loads what the files are made of.)"""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "cvmvm", *argv], cwd=tree, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=str(tree)))
    _, _, usage = os.wait4(proc.pid, 0)
    return usage.ru_maxrss / 1024, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64, help="size of the hostile and repeated files")
    parser.add_argument("--instructions", type=int, default=100_000, help="relu instructions of the honest chain")
    parser.add_argument("--graph-mib", type=int, default=64, help="size of the hostile graph JSON files")
    parser.add_argument("--nodes", type=int, default=100_000, help="relu nodes of the honest graph")
    parser.add_argument("--only", choices=["trace", "graph"], help="only the trace files, or only the graphs")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each command (per checkout)")
    parser.add_argument("--baseline", help="another checkout (a directory) whose CLI runs alternately")
    parser.add_argument("--write", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.write:
        write_files(Path(args.write), args.mib, args.instructions, args.graph_mib, args.nodes)
        return 0
    trees = [REPO] + ([Path(args.baseline).resolve()] if args.baseline else [])
    with tempfile.TemporaryDirectory() as tmp:
        print(f"writing the files ({args.mib} MiB, a chain of {args.instructions:,} instructions; graphs of "
              f"{args.graph_mib} MiB, a chain of {args.nodes:,} nodes) ...", flush=True)
        subprocess.run([sys.executable, __file__, "--mib", str(args.mib), "--instructions", str(args.instructions),
                        "--graph-mib", str(args.graph_mib), "--nodes", str(args.nodes), "--write", tmp], check=True)
        runs = []
        if args.only != "graph":
            runs += [(name, ["show", str(Path(tmp) / name)]) for name in FILES]
            runs += [(name, ["diff", str(Path(tmp) / name), str(Path(tmp) / name)])
                     for name in FILES if "chain" in name]
        if args.only != "trace":
            runs += [(name, [command, str(Path(tmp) / name)]) for name in GRAPHS for command in ("show", "run")]
        sizes = {name: (Path(tmp) / name).stat().st_size / 2 ** 20 for name, _ in runs}
        head = "".join(f"  {'this' if t == REPO else 'baseline':>8} MiB      s" for t in trees)
        print(f"{'command':<28}{'file MiB':>9}{head}")
        for name, cli in runs:
            got: dict[Path, list[tuple[float, float]]] = {t: [] for t in trees}
            for _ in range(args.rounds):
                for tree in trees:
                    got[tree].append(measure(tree, cli))
            cells = "".join(f"  {statistics.median(r for r, _ in got[t]):>12,.0f} {statistics.median(s for _, s in got[t]):>6.2f}"
                            for t in trees)
            print(f"{cli[0] + ' ' + name:<28}{sizes[name]:>9.1f}{cells}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
