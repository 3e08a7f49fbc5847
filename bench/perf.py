"""cvmvm's speed on the reference models, beside the Cortex runtime's (a script, not a test).

    python3 bench/perf.py [--runs 20] [--threads 1,2] [--models perf,perf-large] [--wait-idle 60]

Each BLAS thread count runs in its own process (OpenBLAS reads
OPENBLAS_NUM_THREADS when it loads).  Per model it prints the median time per
inference with and without the trace (every tensor hashed), their spread, each
op kind's share of an untraced run, the hashing cost, peak tensor memory, the
model's MACs, and the time over a GEMM bound: MACs / the float64 and float32
GEMM rates this process measures on a large matrix.  Then the digits model's
throughput, one image per run and as one batched run.  The Cortex runtime's
figures are fixtures/models/README.md's (2-vCPU AMD EPYC, -O3, OpenMP, median
per inference on a quiet machine).

The machine may be shared: each block prints the CPU idle fraction measured
just before it, and --wait-idle waits (up to that many seconds) for an idle one.
The environment passes through.

--orders numpy,cvmvm runs each thread count once with numpy imported before
cvmvm and once after, and ends with the traced medians side by side: a traced
run limits BLAS to one thread through threadpoolctl (cvmvm.vm.blas) whatever
the import order, so the two must match.  The `speed` extra installs it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# fixtures/models/README.md: Cortex runtime, ms per inference, by OMP thread count.
CORTEX_MS = {"perf": {1: 51.7, 2: 33.2}, "perf-large": {1: 202.8, 2: 117.8}, "digits": {1: 0.0122, 2: 0.0162}}


def cpu_idle(seconds: float = 0.5) -> float:
    """Fraction of all CPUs idle over the next ``seconds`` (from /proc/stat)."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        return fields[3] + fields[4], sum(fields)
    idle0, total0 = sample()
    time.sleep(seconds)
    idle1, total1 = sample()
    return (idle1 - idle0) / max(1, total1 - total0)


def wait_idle(limit: float) -> float:
    deadline = time.monotonic() + limit
    idle = cpu_idle()
    while idle < 0.9 and time.monotonic() < deadline:
        idle = cpu_idle(1.0)
    return idle


def quantiles(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)

    def q(p: float) -> float:
        return s[min(len(s) - 1, int(p * (len(s) - 1) + 0.5))]
    return {"min": s[0], "p25": q(0.25), "median": q(0.5), "p75": q(0.75), "max": s[-1]}


def macs(program) -> int:
    """Multiply-accumulates of the conv2d and dense instructions: output size * terms per output."""
    total = 0
    for step in program.steps:
        if step.op.name in ("conv2d", "dense"):
            total += step.out_types[0].size * (step.plan.gemm if step.op.name == "conv2d" else step.plan).k
    return total


def gemm_rate(dtype, n: int = 1536, repeats: int = 5) -> float:
    """MACs per second of one n x n x n GEMM, best of ``repeats``."""
    import numpy as np
    a = np.ones((n, n), dtype=dtype)
    b = np.ones((n, n), dtype=dtype)
    np.matmul(a, b)
    best = min(_timed(lambda: np.matmul(a, b)) for _ in range(repeats))
    return n ** 3 / best


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def op_shares(program, feeds: dict, runs: int) -> dict[str, float]:
    """Median seconds per op kind of an untraced run: the time between consecutive
    instruction outputs (kernel plus output check), taken by an observer."""
    from cvmvm.vm.execute import execute
    owner = {t: step.op.name for step in program.steps for t in step.outputs}
    per_kind: dict[str, list[float]] = defaultdict(list)
    for _ in range(runs):
        stamps: list[tuple[int, float]] = []
        start = time.perf_counter()
        execute(program, feeds, lambda t, v: stamps.append((t, time.perf_counter())))
        totals: dict[str, float] = defaultdict(float)
        prev = start
        for t, stamp in stamps:
            if t in owner:
                totals[owner[t]] += stamp - prev
            prev = stamp
        for kind in set(owner.values()):
            per_kind[kind].append(totals[kind])
    return {k: quantiles(v)["median"] for k, v in per_kind.items()}


def per_run_tensors(program) -> list[int]:
    """The tensors a traced run hashes each time: inputs and instruction outputs (params once per program)."""
    model = program.model
    return [t for t in range(len(program.types)) if not len(model.inputs) <= t < model.num_variables]


def hashing_seconds(program, feeds: dict) -> float:
    """Committing one run's tensors (FORMAT.md section 2) in the calling thread, one after another."""
    from cvmvm.vm.execute import execute
    from serializer.hashing import tensor_commitment
    wanted = set(per_run_tensors(program))
    values: list = []
    execute(program, feeds, lambda t, v: values.append((t, v)) if t in wanted else None)
    return _timed(lambda: [tensor_commitment(v, program.types[t]) for t, v in values])


def bench_model(name: str, runs: int, wait: float) -> dict:
    import numpy as np
    sys.path.insert(0, str(REPO / "fixtures"))
    import generate
    model = generate.load_fixture_model(name)
    inputs = generate.load_fixture_inputs(name)
    want = np.load(REPO / "fixtures" / "models" / name / "expected_outputs.npy")
    idle = wait_idle(wait)
    out: dict = {"idle": idle}
    for trace in (False, True):
        model.run({"data": inputs[0]}, trace=trace)           # warm-up
        times, exact, peak = [], True, 0
        for i in range(runs):
            k = i % len(inputs)
            t = time.perf_counter()
            result = model.run({"data": inputs[k]}, trace=trace)
            times.append(time.perf_counter() - t)
            exact &= bool(np.array_equal(result.outputs[0].reshape(-1), want[k].reshape(-1)))
            peak = result.peak_bytes
        out["traced" if trace else "untraced"] = {"seconds": quantiles(times), "exact": exact}
        out["peak_tensor_bytes"] = peak
    feeds = {"data": inputs[0]}
    out["ops"] = op_shares(model.program, feeds, max(3, runs // 2))
    out["hashing"] = min(hashing_seconds(model.program, feeds) for _ in range(3))
    out["hashed_bytes"] = sum(model.program.types[t].size * np.dtype(model.program.types[t].dtype).itemsize
                              for t in per_run_tensors(model.program))
    out["macs"] = macs(model.program)
    out["plans"] = sorted({str(s.plan) for s in model.program.steps if s.op.name in ("conv2d", "dense")})
    return out


def bench_digits(runs: int, batch: int) -> dict:
    import numpy as np
    sys.path.insert(0, str(REPO / "fixtures"))
    import generate
    from cvmvm.vm import batching
    from cvmvm.vm.api import Model
    model = generate.load_fixture_model("digits")
    images = generate.load_fixture_inputs("digits")
    want = np.load(REPO / "fixtures" / "models" / "digits" / "expected_outputs.npy")
    out: dict = {}
    for trace in (False, True):
        best = None
        for _ in range(max(1, runs // 10)):
            t = time.perf_counter()
            got = [model.run({"data": x}, trace=trace).outputs[0] for x in images]
            elapsed = time.perf_counter() - t
            best = elapsed if best is None else min(best, elapsed)
        out[f"single_{'traced' if trace else 'untraced'}"] = {
            "images_per_s": len(images) / best, "exact": bool(np.array_equal(np.concatenate(got), want))}
    program = model.program
    big = Model(batching.stacked_program(program, batching.batch_plan(program), batch))
    stacked = np.concatenate(list(images[:batch]))
    for trace in (False, True):
        big.run({"data": stacked}, trace=trace)
        best = min(_timed(lambda: big.run({"data": stacked}, trace=trace)) for _ in range(max(3, runs // 2)))
        got = big.run({"data": stacked}).outputs[0]
        out[f"batched_{'traced' if trace else 'untraced'}"] = {
            "images_per_s": batch / best, "exact": bool(np.array_equal(got, want[:batch]))}
    out["batch"] = batch
    return out


def child(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(REPO))
    if args.first == "numpy":
        import numpy as np
        import cvmvm  # noqa: F401
    else:
        import cvmvm  # noqa: F401
        import numpy as np
    from cvmvm.vm.blas import controller
    report: dict = {"threads": int(os.environ["OPENBLAS_NUM_THREADS"]), "first": args.first,
                    "threadpoolctl": controller() is not None,
                    "gemm_f64": gemm_rate(np.float64), "gemm_f32": gemm_rate(np.float32), "models": {}}
    for name in args.models.split(","):
        report["models"][name] = bench_model(name, args.runs, args.wait_idle)
    report["digits"] = bench_digits(args.runs, 297)
    report["max_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(report))


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def show(r: dict) -> None:
    th = r["threads"]
    f64, f32 = r["gemm_f64"], r["gemm_f32"]
    print(f"\n=== OPENBLAS_NUM_THREADS={th}, {r['first']} imported first"
          f"{'' if r['threadpoolctl'] else ' (no threadpoolctl: traced runs keep every BLAS thread)'}: "
          f"GEMM rate float64 {f64 / 1e9:.1f} GMAC/s, float32 {f32 / 1e9:.1f} GMAC/s "
          f"(1536^3, this process); max RSS {r['max_rss_bytes'] / 2**20:.0f} MiB")
    for name, m in r["models"].items():
        cortex = CORTEX_MS[name].get(th)
        print(f"\n{name}  (CPU idle before: {m['idle']:.0%}; {m['macs'] / 1e6:.1f} M MACs; "
              f"peak tensor memory {m['peak_tensor_bytes'] / 2**20:.1f} MiB)")
        print(f"  convolution/dense plans: {'; '.join(m['plans'])}")
        for kind in ("untraced", "traced"):
            s = m[kind]["seconds"]
            ratio = f"  Cortex {cortex} ms -> cvmvm is {cortex / (s['median'] * 1e3):.2f}x its speed" if cortex else ""
            print(f"  {kind:9s} median {ms(s['median'])} ms  (IQR {ms(s['p25'])}-{ms(s['p75'])}, "
                  f"min {ms(s['min'])}, max {ms(s['max'])})  exact={m[kind]['exact']}{ratio}")
        bound64, bound32 = m["macs"] / f64, m["macs"] / f32
        med = m["untraced"]["seconds"]["median"]
        print(f"  GEMM bound: float64 {ms(bound64)} ms, float32 {ms(bound32)} ms; "
              f"untraced time / bound = {med / bound64:.2f} (f64), {med / bound32:.2f} (f32)")
        print(f"  hashing a run's {m['hashed_bytes'] / 2**20:.1f} MiB of tensors in one thread: {ms(m['hashing'])} ms "
              f"(params: once per program)")
        total = sum(m["ops"].values())
        shares = sorted(m["ops"].items(), key=lambda kv: -kv[1])
        print("  untraced time by op kind: " + ", ".join(f"{k} {ms(v)} ms ({v / total:.0%})" for k, v in shares))
    d = r["digits"]
    cortex = CORTEX_MS["digits"].get(th)
    ref = f" (Cortex: {1 / (cortex / 1e3):,.0f} images/s, one image per call)" if cortex else ""
    print(f"\ndigits{ref}")
    for key in ("single_untraced", "single_traced", "batched_untraced", "batched_traced"):
        v = d[key]
        what = key.replace("_", ", ").replace("batched", f"batch of {d['batch']}")
        print(f"  {what:26s} {v['images_per_s']:>10,.0f} images/s  exact={v['exact']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="timed runs per model and mode")
    parser.add_argument("--threads", default="1,2", help="OPENBLAS_NUM_THREADS values, one process each")
    parser.add_argument("--models", default="perf,perf-large")
    parser.add_argument("--wait-idle", type=float, default=0.0,
                        help="seconds to wait for a >= 90%% idle CPU before each model")
    parser.add_argument("--orders", default="cvmvm", help="import orders to run, of numpy and cvmvm: the one "
                                                             "imported first (default cvmvm)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--first", default="cvmvm", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return 0
    print(f"cvmvm bench: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    traced: dict[tuple[str, str, str], float] = {}
    for th in args.threads.split(","):
        for first in args.orders.split(","):
            env = dict(os.environ, OPENBLAS_NUM_THREADS=th, OMP_NUM_THREADS=th, MKL_NUM_THREADS=th)
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--runs", str(args.runs),
                   "--models", args.models, "--wait-idle", str(args.wait_idle), "--first", first]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            report = json.loads(done.stdout.splitlines()[-1])
            show(report)
            for name, m in report["models"].items():
                traced[(th, name, first)] = m["traced"]["seconds"]["median"]
    orders = args.orders.split(",")
    if len(orders) > 1:
        print("\ntraced median by import order (numpy first / cvmvm first):")
        for th in args.threads.split(","):
            for name in args.models.split(","):
                times = [traced[(th, name, first)] for first in orders]
                print(f"  {name:<11} {th} thread(s): " + ", ".join(f"{f} first {ms(t)} ms" for f, t in zip(orders, times))
                      + f"  (ratio {times[0] / times[-1]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
