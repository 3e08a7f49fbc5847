"""On-chain challenges and traced runs, measured in one run.

1. For every op kind of perf-large at its largest instance (the most work per
   output element), the worst of a sample of elements (the one whose proof
   carries the most bytes): a trace wrong at exactly that element is committed
   to CvmChallenge in py-evm and refuted; printed are the proof's calldata
   bytes and the transaction's gas (execution, plus EIP-2028 calldata and the
   EIP-7623 floor, whichever is higher, plus 21,000).  For every digits
   instruction, the worst of all its elements, each challenged.
2. The rate of a 1 MiB body's chunk tree each way this CPU has (libcrypto a
   chunk at a time; four SHA-NI streams; sixteen AVX-512 lanes), the hashing
   process's work on every block of the ring.
3. Traced run time of perf and perf-large with commitment format 3 against
   untraced runs, median of --repeat: interleaved (a format 3 run right after
   an untraced one), then each way's runs together after a pause, format 1
   (one SHA-256 per whole int32 tensor, the previous tracer's work) among
   them.  Format 1 stays out of the interleaved rounds: a format 3 run right
   after one of its runs (its thread's hashing, its allocations) took 1.9x
   untraced where one right after an untraced run took 1.4-1.6x (perf,
   2026-12-03).  This script imports cvmvm before numpy, so OpenBLAS's idle
   threads sleep at once (cvmvm.vm.blas); where they spin (numpy imported
   first), a format 3 run right after a multi-threaded GEMM (an untraced
   run's) shares its hashing process's core with them for about 0.1 s, and
   the interleaved rounds are slower.  Then each way's CPU time per run in
   those blocks, the hashing process's included (from /proc), against the
   most a traced run within 1.3x of untraced could use: the machine's cores
   x 1.3 x the untraced time.  A format 3 run's threads and process block
   rather than spin while they wait, so one that needs more cannot meet 1.3x
   however its work is spread over the cores.

    python bench/chain.py [--sample 40] [--repeat 15]

Needs the chain extra (`pip install -e '.[chain]'`) and nothing else: the
contract is the compiled artifact in the package.  Targets (issue 17, measured
here, never asserted): every perf-large challenge <= 3,000,000 gas and
<= 100 KiB of calldata; a digits challenge <= 100,000 gas; traced <= 1.3x
untraced.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import struct
import sys
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "fixtures"))

import cvmvm  # noqa: E402,F401  (before numpy: OpenBLAS's spin, cvmvm.vm.blas)
import numpy as np  # noqa: E402
import generate  # noqa: E402
from serializer.hashing import tensor_commitment  # noqa: E402
from serializer.records.stepproof import calldata_proof, challenge_calldata  # noqa: E402
from cvmvm.vm.execute import execute  # noqa: E402
from cvmvm.vm.trace import make_trace, program_layout  # noqa: E402
from cvmvm.tx import element  # noqa: E402
from cvmvm.tx.contract import artifact  # noqa: E402
from cvmvm.tx.stepproof import make_proof  # noqa: E402


def tx_gas(execution: int, calldata: bytes) -> int:
    """A transaction's gas under Prague: 21,000 + calldata (EIP-2028) + execution, or the
    EIP-7623 floor when that is higher."""
    zeros = calldata.count(0)
    tokens = zeros + 4 * (len(calldata) - zeros)
    return max(21_000 + 4 * tokens + execution, 21_000 + 10 * tokens)


class Chain:
    """CvmChallenge (which is CvmStep too) deployed in py-evm."""

    def __init__(self) -> None:
        import boa
        from eth_abi import encode

        self.boa, self.encode = boa, encode
        art = artifact()["contracts"]
        self.address, _ = boa.env.deploy_code(bytecode=bytes.fromhex(art["CvmChallenge"]["bytecode"]))
        self.contract = boa.loads_abi(json.dumps(art["CvmChallenge"]["abi"]), name="CvmChallenge").at(self.address)
        self.deployed = {name: len(c["deployedBytecode"]) // 2 for name, c in art.items()}

    def refute(self, program_root: bytes, inputs: bytes, trace_root: bytes, proof: bytes) -> tuple[int, int]:
        """Registers, commits, challenges; returns (calldata bytes, transaction gas)."""
        model = self.contract.registerModel(program_root)
        commitment = self.contract.commit(model, inputs, b"\0" * 32, trace_root)
        data = challenge_calldata(commitment, proof)
        c = self.boa.env.execute_code(to_address=self.address, data=data, gas=30_000_000)
        if c.is_error:
            raise RuntimeError(f"the challenge did not refute: {c.output!r}")
        return len(data), tx_gas(c.get_gas_used(), data)


class Run:
    def __init__(self, name: str) -> None:
        self.model = generate.load_fixture_model(name)
        program = self.program = self.model.program
        env: dict[int, np.ndarray] = {}
        execute(program, {"data": generate.load_fixture_inputs(name)[0]}, env.__setitem__)
        self.values = [env[t] for t in range(len(program.types))]
        self.commitments = [tensor_commitment(v, program.types[t]) for t, v in enumerate(self.values)]
        self.trace = make_trace(program, self.commitments)

    def proof_bytes(self, step: int, index: int) -> int:
        """Bytes of the honest proof (a wrong one has the same size)."""
        return len(calldata_proof(make_proof(self.program, self.trace, dict(enumerate(self.values)), step, index)))

    def refutation(self, chain: Chain, step: int, index: int) -> tuple[int, int]:
        """A trace wrong at exactly this element, committed and refuted."""
        t = self.program.steps[step].outputs[0]
        values = list(self.values)
        values[t] = values[t].copy()
        flat = values[t].reshape(-1)
        flat[index] += 1 if flat[index] < 0 else -1
        commitments = list(self.commitments)
        commitments[t] = tensor_commitment(values[t], self.program.types[t])
        trace = make_trace(self.program, commitments)
        proof = calldata_proof(make_proof(self.program, trace, dict(enumerate(values)), step, index))
        return chain.refute(program_layout(self.program).root, trace.inputs, trace.root, proof)


def largest_instances(program) -> dict[str, object]:
    best: dict[str, tuple] = {}
    for s in program.steps:
        key = (s.cost // s.out_types[0].size, s.out_types[0].size)
        if s.op.name not in best or key > best[s.op.name][0]:
            best[s.op.name] = (key, s)
    return {k: v[1] for k, v in sorted(best.items())}


def challenges(chain: Chain, sample: int) -> None:
    run = Run("perf-large")
    print("## challenges on perf-large: every op kind at its largest instance, worst sampled element")
    print("| op | instruction | element | footprint reads | calldata | gas |")
    print("|---|---|---|---|---|---|")
    rnd = random.Random(17)
    worst_gas = worst_bytes = 0
    for op, s in largest_instances(run.program).items():
        size = s.out_types[0].size
        candidates = sorted({0, size // 2, size - 1, *(rnd.randrange(size) for _ in range(sample))})
        index = max(candidates, key=lambda e: run.proof_bytes(s.index, e))
        reads = element.footprint(op, s.attrs, [run.program.types[t] for t in s.inputs], s.out_types[0], index)
        data, gas = run.refutation(chain, s.index, index)
        worst_gas, worst_bytes = max(worst_gas, gas), max(worst_bytes, data)
        print(f"| {op} | {s.index} | {index} | {sum(len(r) for r in reads)} | {data / 1024:.1f} KiB | {gas:,} |")
    print(f"\nworst: {worst_bytes / 1024:.1f} KiB of calldata (target <= 100 KiB), {worst_gas:,} gas "
          f"(target <= 3,000,000)")
    digits = Run("digits")
    print("\n## challenges on digits: every instruction, its worst element (every element challenged)")
    print("| instruction | op | element | calldata | gas |")
    print("|---|---|---|---|---|")
    for s in digits.program.steps:
        tried = []
        for e in range(s.out_types[0].size):
            data, gas = digits.refutation(chain, s.index, e)
            tried.append((gas, e, data))
        gas, index, data = max(tried)
        print(f"| {s.index} | {s.op.name} | {index} | {data:,} B | {gas:,} |")
    print(f"\ndeployed code: {chain.deployed} bytes (EIP-170 limit 24,576)")


# -- traced runs ------------------------------------------------------------------------------

class V1Tracer:
    """Format 1's hashing work, reproduced to compare against: one SHA-256 over each whole int32
    tensor (header and data), on one background thread, inline below 64 KiB or past a 4 MiB
    backlog, params hashed once per program -- what cvmvm's tracer did before format 2."""

    pool = ThreadPoolExecutor(max_workers=1)
    params: dict[int, list] = {}

    def __init__(self, program) -> None:
        self.program = program
        self.pending: deque = deque()
        self.backlog = 0
        self.first = len(program.model.inputs)
        self.cached = V1Tracer.params.setdefault(id(program), [None] * len(program.model.params))

    @staticmethod
    def digest(value: np.ndarray) -> bytes:
        data = np.ascontiguousarray(value, dtype="<i4") if value.dtype.kind == "i" else np.ascontiguousarray(value)
        h = hashlib.sha256(b"cvmvm/tensor/v1\x00" + struct.pack("<BB", 3, value.ndim)
                           + b"".join(struct.pack("<Q", d) for d in value.shape))
        h.update(memoryview(data).cast("B"))
        return h.digest()

    def __call__(self, t: int, value: np.ndarray) -> None:
        k = t - self.first
        if 0 <= k < len(self.cached):
            if self.cached[k] is None:
                self.cached[k] = self.digest(value)
            return
        while self.pending and self.pending[0][1].done():
            self.backlog -= self.pending.popleft()[0]
        if value.nbytes < 1 << 16 or (self.backlog and self.backlog + value.nbytes > 1 << 22):
            self.digest(value)
        else:
            self.pending.append((value.nbytes, self.pool.submit(self.digest, value)))
            self.backlog += value.nbytes

    def finish(self) -> None:
        while self.pending:
            self.pending.popleft()[1].result()


def _row(name: str, times: dict[str, list[float]]) -> str:
    """A table row: each way's median (and fastest) run in ms, then format 3's and, where measured,
    format 1's ratio to untraced."""
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    low = {k: min(v) * 1e3 for k, v in times.items()}
    ways = [k for k in ("untraced", "v1", "v3") if k in times]
    cells = [f"{med[k]:.1f} ({low[k]:.1f})" for k in ways]
    cells += [f"{med[k] / med['untraced']:.2f}x ({low[k] / low['untraced']:.2f}x)" for k in ("v3", "v1") if k in times]
    return f"| {name} | " + " | ".join(cells) + " |"


def cpu_seconds(pid: int | None) -> float:
    """CPU time of every thread of this process and, where /proc has it, of the hashing process."""
    own = time.process_time()
    if pid is None:
        return own
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return own
    # utime and stime: fields 14 and 15 of proc(5), counted after the command name's ")".
    return own + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def traced_times(repeat: int) -> None:
    from cvmvm.vm import hashworker
    worker = hashworker.start()   # the steady state of a long-lived process: the hashing process up
    pid = worker.pid if worker is not None and os.path.exists(f"/proc/{worker.pid}/stat") else None
    print("\n## traced run time, median (and fastest) of", repeat, "rounds of an untraced run then a format 3 one, ms")
    print("| model | untraced | format 3 traced | v3 / untraced |\n|---|---|---|---|")
    cpus: dict[str, dict[str, float]] = {}
    together: list[str] = []
    for name in ("perf", "perf-large"):
        model = generate.load_fixture_model(name)
        feeds = {"data": generate.load_fixture_inputs(name)[0]}
        program = model.program

        def v1() -> None:
            tracer = V1Tracer(program)
            execute(program, feeds, tracer)
            tracer.finish()

        ways = {"untraced": lambda: model.run(feeds), "v1": v1, "v3": lambda: model.run(feeds, trace=True)}
        for way in ways.values():   # warm: params committed once per program, BLAS threads up
            way()
        times: dict[str, list[float]] = {"untraced": [], "v3": []}
        for _ in range(repeat):
            for key in times:
                way = ways[key]
                t0 = time.perf_counter()
                way()
                times[key].append(time.perf_counter() - t0)
        print(_row(name, times))
        blocks: dict[str, list[float]] = {}
        cpus[name] = {}
        for key, way in ways.items():
            time.sleep(0.5)   # BLAS threads that spun after the last multi-threaded GEMM are asleep
            way()
            blocks[key] = []
            # The hashing process's clock ticks are 10 ms: the block's total, per run.
            c0 = cpu_seconds(pid)
            for _ in range(repeat):
                t0 = time.perf_counter()
                way()
                blocks[key].append(time.perf_counter() - t0)
            cpus[name][key] = (cpu_seconds(pid) - c0) / repeat * 1e3
        cpus[name]["budget"] = (os.cpu_count() or 1) * 1.3 * statistics.median(blocks["untraced"]) * 1e3
        together.append(_row(name, blocks))
    print(f"\n## the same, each way's {repeat} runs together after a 0.5 s pause, ms")
    print("| model | untraced | format 1 traced | format 3 traced | v3 / untraced | v1 / untraced |\n"
          "|---|---|---|---|---|---|")
    print("\n".join(together))
    whose = "this process's threads and the hashing process's" if pid is not None else "this process's threads"
    print(f"\nCPU time per run in the runs together ({whose}, mean, ms): the cores' work each way needs, against"
          " the most a traced run within 1.3x could use (cores x 1.3 x the untraced median)")
    print("| model | untraced | format 1 traced | format 3 traced | 1.3x on all cores |")
    print("|---|---|---|---|---|")
    for name, c in cpus.items():
        print(f"| {name} | {c['untraced']:.1f} | {c['v1']:.1f} | {c['v3']:.1f} | {c['budget']:.1f} |")


def body_rates(repeat: int) -> None:
    """The rate of a 1 MiB body's chunk tree (256 chunks of 4096 bytes, in the caches, as the
    hashing process finds the ring's blocks) each way this CPU has, alternating, fastest of
    ``repeat`` rounds of ten."""
    from serializer import sha
    fast = sha.hasher()
    if fast is None:
        print("\n## a body's chunk tree: no compiled hasher here (numba, libcrypto), hashlib only")
        return
    ways = {"libcrypto, one chunk at a time": fast._replace(lanes=None, streams=None)}
    # The hasher keeps the streams only where it has no lanes: compiled here to compare them.
    streams = fast.streams if fast.streams is not None else sha._compile_streams()
    if streams is not None:
        ways["SHA-NI, four streams"] = fast._replace(lanes=None, streams=streams)
    if fast.lanes is not None:
        ways["AVX-512, sixteen lanes"] = fast._replace(streams=None)
    body = np.random.default_rng(1).integers(0, 256, size=1 << 20, dtype=np.uint8)
    best = {name: float("inf") for name in ways}
    for _ in range(repeat):
        for name, h in ways.items():
            t0 = time.perf_counter()
            for _ in range(10):
                h.blocks_root(body, 4096)
            best[name] = min(best[name], (time.perf_counter() - t0) / 10)
    print("\n## a 1 MiB body's chunk tree, in the caches, fastest of", repeat, "rounds of ten")
    print("| way | ms a MiB | MB/s | against libcrypto |\n|---|---|---|---|")
    base = best["libcrypto, one chunk at a time"]
    for name, t in best.items():
        print(f"| {name} | {t * 1e3:.3f} | {(1 << 20) / t / 1e6:,.0f} | {base / t:.2f}x |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=int, default=40, help="random elements tried per perf-large instruction")
    ap.add_argument("--repeat", type=int, default=15, help="timed runs per configuration")
    ap.add_argument("--only", choices=("challenges", "times"), help="one half only")
    args = ap.parse_args()
    print(f"cores: {os.cpu_count()}")
    if args.only != "times":
        challenges(Chain(), args.sample)
    if args.only != "challenges":
        body_rates(args.repeat)
        traced_times(args.repeat)


if __name__ == "__main__":
    main()
