"""cvmvm's speed on the reference models, beside the Cortex runtime's (a script, not a test).

    python3 bench/perf.py [--runs 20] [--threads 1,2] [--models perf,perf-large] [--wait-idle 60]
                          [--orders numpy,cvmvm] [--baseline DIR [--rounds 3]]

Each BLAS thread count runs in its own process (OpenBLAS reads
OPENBLAS_NUM_THREADS when it loads).  Per model it prints the median time per
inference with and without the trace (every tensor hashed), their spread, each
op kind's share of an untraced run, the hashing cost, peak tensor memory, the
model's MACs, and the time over a GEMM bound: MACs / the float64 and float32
GEMM rates this process measures on a large matrix.  Then the digits model, one
image per call (throughput, and each call's latency: p50 and p99, traced and
untraced), as Model.run runs it after Model.compile (the compiled loop of
cvmvm.vm.native where the `speed` extra installed numba) and kernel by kernel, where one call goes (its kernels timed inside runs and alone, the
executor, a traced call's hashing), and as one batched run.  The Cortex
runtime's figures are issue 14's: the runtime built from its public source (CPU
device, OpenMP) and measured side by side with cvmvm on this project's 2-vCPU
AMD EPYC machines.

The machine may be shared: each block prints the CPU idle fraction measured
just before it, and --wait-idle waits (up to that many seconds) for an idle one.
The environment passes through.

--orders numpy,cvmvm runs each thread count once with numpy imported before
cvmvm and once after, and ends with the traced medians side by side: a traced
run limits BLAS to one thread through threadpoolctl (cvmvm.vm.blas) whatever
the import order, so the two must match.  The `speed` extra installs it.

On a loaded machine compare against a baseline measured in the same run:
--baseline DIR measures another checkout too (main's, say), alternating with
this one round by round, and prints each figure of both with their ratio (the
median of the rounds' ratios: a machine whose speed drifts moves both alike).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TREE = REPO  # the checkout a child process measures (--tree)

# Issue 14: the Cortex runtime, ms per inference by OMP thread count, measured side by side with
# cvmvm; digits about 107,000 images/s one image per call.
CORTEX_MS = {"perf": {1: 45.1, 2: 26.4}, "perf-large": {1: 202.6, 2: 118.2},
             "digits": {1: 1e3 / 107_000, 2: 1e3 / 107_000}}


def cpu_model() -> str:
    """The processor's name (figures differ between machines of the same size), where Linux says it."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "an unnamed processor"


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
    return {"min": s[0], "p25": q(0.25), "median": q(0.5), "p75": q(0.75), "p99": q(0.99), "max": s[-1]}


def macs(program) -> int:
    """Multiply-accumulates of the conv2d and dense instructions: output size * terms per output."""
    total = 0
    for step in program.steps:
        if step.op.name in ("conv2d", "dense"):
            total += step.out_types[0].size * getattr(step.plan, "gemm", step.plan).k  # a baseline's plans too
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


def start_hashing_process() -> bool:
    """The steady state of a long-lived process: its hashing process up before traced runs are
    timed (cvmvm.vm.hashworker starts it on the second traced run and uses it once ready).  A
    checkout measured with --baseline may predate it."""
    try:
        from cvmvm.vm import hashworker
    except ImportError:
        return False
    return hashworker.start() is not None


def bench_model(name: str, runs: int, wait: float) -> dict:
    import numpy as np
    sys.path.insert(0, str(TREE / "fixtures"))
    import generate
    model = generate.load_fixture_model(name)
    inputs = generate.load_fixture_inputs(name)
    want = np.load(TREE / "fixtures" / "models" / name / "expected_outputs.npy")
    idle = wait_idle(wait)
    out: dict = {"idle": idle, "hashing process": start_hashing_process()}
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
    """One image per call: images/s (the best pass over the 297 test images) and each call's
    latency over every pass (p50, p99, max); then one batched run."""
    import numpy as np
    sys.path.insert(0, str(TREE / "fixtures"))
    import generate
    from cvmvm.vm import batching
    from cvmvm.vm.api import Model
    model = generate.load_fixture_model("digits")
    images = generate.load_fixture_inputs("digits")
    want = np.load(TREE / "fixtures" / "models" / "digits" / "expected_outputs.npy")
    out: dict = {}
    clock = time.perf_counter
    # What Model.run does (the compiled loop once warm, where numba is installed: cvmvm.vm.native),
    # then the kernels one by one on a model with the loop turned off, in the same process.
    kernels = generate.load_fixture_model("digits")
    native = None
    try:
        from cvmvm.vm import native
        native.turn_off(kernels.program)
        model.compile()
    except ImportError:   # a checkout from before the compiled loop
        kernels = None
    for suffix, which in (("", model), ("_kernels", kernels)):
        if which is None:
            continue
        for trace in (False, True):
            # Warm-up, long enough for the BLAS threads that spun after the models' large GEMMs to sleep.
            start = clock()
            while clock() - start < 0.5:
                for x in images[:50]:
                    which.run({"data": x}, trace=trace)
            best, cpu, calls = None, None, []
            for _ in range(max(1, runs // 4)):
                got = []
                start, start_cpu = clock(), time.process_time()
                for x in images:
                    t = clock()
                    got.append(which.run({"data": x}, trace=trace).outputs[0])
                    calls.append(clock() - t)
                elapsed, used = clock() - start, time.process_time() - start_cpu
                best = elapsed if best is None else min(best, elapsed)
                cpu = used if cpu is None else min(cpu, used)
            out[f"single_{'traced' if trace else 'untraced'}{suffix}"] = {
                "images_per_s": len(images) / best, "cpu_per_image": cpu / len(images), "latency": quantiles(calls),
                "exact": bool(np.array_equal(np.concatenate(got), want))}
    out["loop"] = bool(native is not None and model.program.runtime.get("native"))
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
    out["parts"] = digits_parts(images)
    return out


def digits_parts(images) -> dict:
    """Where one digits call goes, in microseconds per image: the 13 kernels timed inside real
    runs (perf_counter around each, on a model of its own) and each timed alone on its own
    inputs (hot in the caches), the whole executor, and a traced call's hashing: its small tensors
    committed together and the trace tree with its roots."""
    import dataclasses
    import timeit
    import generate
    from cvmvm.vm import execute as ex
    from cvmvm.vm.trace import make_trace, program_layout
    model = generate.load_fixture_model("digits")
    program = model.program
    try:
        from cvmvm.vm import native
    except ImportError:   # a checkout from before the compiled loop
        native = None
    else:
        native.turn_off(program)   # these parts are the kernels' and the executor's
    plan = ex.compiled(program)
    clock = time.perf_counter
    inside = [0.0]

    def timed(run):
        def run_timed(*args):
            start = clock()
            try:
                return run(*args)
            finally:
                inside[0] += clock() - start
        return run_timed

    def per_image(f, number: int = 2000) -> float:
        return min(timeit.repeat(f, number=number, repeat=3)) / number * 1e6

    x = images[0]
    kept = model.run({"data": x}, keep=True).tensors
    alone = 0.0
    for step in plan.steps:
        args = step.fetch(list(kept))
        alone += per_image((lambda: step.run(*args)) if step.several else (lambda: step.run(args)))
    executor = per_image(lambda: ex.execute(program, {"data": x}))
    program.runtime["compiled"] = dataclasses.replace(plan, steps=tuple(s._replace(run=timed(s.run))
                                                                        for s in plan.steps))
    for image in images:
        ex.execute(program, {"data": image})
    inside[0] = 0.0
    for _ in range(5):
        for image in images:
            ex.execute(program, {"data": image})
    in_run = inside[0] / (5 * len(images)) * 1e6
    program.runtime["compiled"] = plan
    out = {"kernels_in_run": in_run, "kernels_alone": alone, "executor": executor}
    ready = native.prepare(program) if native is not None else None
    if ready is not None:
        arena_layout, loop = ready
        feeds = ex.prepare_inputs(program, {"data": x})
        out["loop"] = per_image(lambda: native.run(arena_layout, loop, feeds))
    trace = model.run({"data": x}, trace=True).trace
    out["trace_tree"] = per_image(lambda: make_trace(program, trace.commitments))
    layout = program_layout(program)
    if hasattr(layout, "bulk"):   # a checkout from before BulkCommitter has no such part
        bodies = layout.take_bodies()[1]
        out["small_commitments"] = per_image(lambda: layout.bulk.commit(bodies))
        try:   # serializer.sha from 2026-11-28 on; cvmvm.vm.native before it
            from serializer.sha import hasher as compiled
        except ImportError:
            compiled = native.hasher
        hasher = compiled() if ready is not None else None
        if hasher is not None:   # what a traced call through the loop makes of the same hashes
            out["compiled_commitments"] = per_image(lambda: hasher.commit(layout.bulk.plan, bodies.buffer))
            out["compiled_tree"] = per_image(lambda: hasher.tree_root(trace.commitments))
    return out


def child(args: argparse.Namespace) -> None:
    global TREE
    TREE = Path(args.tree).resolve()
    sys.path.insert(0, str(TREE))
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
              f"peak tensor memory {m['peak_tensor_bytes'] / 2**20:.1f} MiB; "
              f"hashing process {'up' if m.get('hashing process') else 'not used'})")
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
    names = {"single_untraced": "one, untraced", "single_traced": "one, traced",
             "single_untraced_kernels": "one, untraced, kernels", "single_traced_kernels": "one, traced, kernels",
             "batched_untraced": f"batch of {d['batch']}, untraced", "batched_traced": f"batch of {d['batch']}, traced"}
    if "loop" in d:
        print(f"  one image per call runs {'as one compiled loop' if d['loop'] else 'kernel by kernel (no numba)'}; "
              f"'kernels': kernel by kernel, the loop turned off")
    for key, what in names.items():
        if key not in d:
            continue
        v = d[key]
        line = f"  {what:26s} {v['images_per_s']:>10,.0f} images/s  exact={v['exact']}"
        if "latency" in v:
            lat = v["latency"]
            line += (f"  latency p50 {us(lat['median'])} us, p99 {us(lat['p99'])} us "
                     f"({lat['p99'] / lat['median']:.2f}x p50), max {us(lat['max'])} us; "
                     f"CPU {us(v['cpu_per_image'])} us per image")
        print(line)
    for kind in ("untraced", "traced"):
        fast, slow = d.get(f"single_{kind}"), d.get(f"single_{kind}_kernels")
        if fast and slow and d.get("loop"):
            print(f"  one per call {kind}: the loop is {fast['images_per_s'] / slow['images_per_s']:.2f}x the kernels' rate")
    parts = d["parts"]
    print(f"  one call, us: kernels {parts['kernels_in_run']:.1f} inside runs ({parts['kernels_alone']:.1f} each "
          f"timed alone), the executor {parts['executor']:.1f}; traced: trace tree and roots {parts['trace_tree']:.1f}"
          + (f", small tensors' commitments {parts['small_commitments']:.1f}" if "small_commitments" in parts else "")
          + (f"; the compiled loop alone {parts['loop']:.1f}" if "loop" in parts else "")
          + (f", the same commitments compiled {parts['compiled_commitments']:.1f} and the trace tree's root "
             f"{parts['compiled_tree']:.1f}" if "compiled_commitments" in parts else ""))


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f}"


# The figures a comparison with a baseline prints: (label, path in a child's report, lower is better).
FIGURES = [(f"{name} {kind} median (ms)", ("models", name, kind, "seconds", "median"), True)
           for name in ("perf", "perf-large") for kind in ("untraced", "traced")]
FIGURES += [(f"digits one per call {kind}: images/s", ("digits", f"single_{kind}", "images_per_s"), False)
            for kind in ("untraced", "traced")]
FIGURES += [(f"digits one per call {kind}: CPU us per image", ("digits", f"single_{kind}", "cpu_per_image"), True)
            for kind in ("untraced", "traced")]
FIGURES += [(f"digits one per call {kind}: latency {q} (us)", ("digits", f"single_{kind}", "latency", k), True)
            for kind in ("untraced", "traced") for q, k in (("p50", "median"), ("p99", "p99"))]
FIGURES += [(f"digits one per call {kind}, kernels: images/s", ("digits", f"single_{kind}_kernels", "images_per_s"),
             False) for kind in ("untraced", "traced")]
FIGURES += [(f"digits batch {kind}: images/s", ("digits", f"batched_{kind}", "images_per_s"), False)
            for kind in ("untraced", "traced")]


def figure(report: dict, path: tuple[str, ...]) -> float | None:
    for key in path:
        if not isinstance(report, dict) or key not in report:
            return None
        report = report[key]
    return float(report)  # type: ignore[arg-type]


def compare(threads: str, first: str, ours: list[dict], theirs: list[dict], baseline: Path) -> None:
    """Each figure of both checkouts (median over the rounds) and how many times faster this one is:
    the median, over the rounds, of that round's ratio."""
    print(f"\n=== OPENBLAS_NUM_THREADS={threads}, {first} imported first: this checkout against {baseline}, {len(ours)} rounds, "
          f"alternating (x: how many times faster this checkout is)")
    for label, path, lower in FIGURES:
        got = [figure(r, path) for r in ours]
        base = [figure(r, path) for r in theirs]
        if any(v is None for v in got + base):
            continue
        a, b = [float(v or 0) for v in got], [float(v or 0) for v in base]
        ratios = [(y / x if lower else x / y) for x, y in zip(a, b)]
        scale = 1e3 if "(ms)" in label else 1e6 if "us" in label else 1
        print(f"  {label:48s} {statistics.median(a) * scale:>12,.1f} {statistics.median(b) * scale:>12,.1f}  "
              f"{statistics.median(ratios):5.2f}x  (rounds {min(ratios):.2f}-{max(ratios):.2f})")


def run_child(tree: Path, threads: str, first: str, args: argparse.Namespace) -> dict:
    env = dict(os.environ, OPENBLAS_NUM_THREADS=threads, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--tree", str(tree), "--runs", str(args.runs),
           "--models", args.models, "--wait-idle", str(args.wait_idle), "--first", first]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="timed runs per model and mode")
    parser.add_argument("--threads", default="1,2", help="OPENBLAS_NUM_THREADS values, one process each")
    parser.add_argument("--models", default="perf,perf-large")
    parser.add_argument("--wait-idle", type=float, default=0.0,
                        help="seconds to wait for a >= 90%% idle CPU before each model")
    parser.add_argument("--orders", default="cvmvm", help="import orders to run, of numpy and cvmvm: the one "
                                                             "imported first (default cvmvm)")
    parser.add_argument("--baseline", help="another checkout (a directory) to measure alternately with this one")
    parser.add_argument("--rounds", type=int, default=3, help="with --baseline: rounds of both")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--first", default="cvmvm", help=argparse.SUPPRESS)
    parser.add_argument("--tree", default=str(REPO), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return 0
    print(f"cvmvm bench: {os.cpu_count()} CPUs ({cpu_model()}), load average {os.getloadavg()[0]:.2f}")
    traced: dict[tuple[str, str, str], float] = {}
    orders = args.orders.split(",")
    for th in args.threads.split(","):
        for first in orders:
            if args.baseline is None:
                report = run_child(REPO, th, first, args)
                show(report)
            else:
                baseline = Path(args.baseline).resolve()
                ours: list[dict] = []
                theirs: list[dict] = []
                for _ in range(args.rounds):
                    ours.append(run_child(REPO, th, first, args))
                    theirs.append(run_child(baseline, th, first, args))
                report = ours[0]
                show(report)
                compare(th, first, ours, theirs, baseline)
            for name, m in report["models"].items():
                traced[(th, name, first)] = m["traced"]["seconds"]["median"]
    if len(orders) > 1:
        print("\ntraced median by import order (numpy first / cvmvm first):")
        for th in args.threads.split(","):
            for name in args.models.split(","):
                times = [traced[(th, name, first)] for first in orders]
                print(f"  {name:<11} {th} thread(s): " + ", ".join(f"{f} first {ms(t)} ms" for f, t in zip(orders, times))
                      + f"  (ratio {times[0] / times[-1]:.2f})")
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
