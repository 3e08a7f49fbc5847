"""Run the fuzzing suite for a long stretch; save what it finds into fixtures/fuzz/.

    python scripts/fuzz.py [--minutes 60] [--targets native,cortex,...] [--jobs 2] [--cases 5000] [--seed 1]

Each round runs every chosen target once, in a worker process under RLIMIT_AS
of 4 GiB, ``--cases`` cases drawn with the next seed (seeds start at --seed,
so a run is reproducible: the round and target of a failure name its seed).
A failure (an exception other than a CvmError, a broken contract, a case over
2 s, a worker that dies or hangs) is shrunk by hypothesis and saved as
fixtures/fuzz/<target>/<sha256 prefix>.bin, which tests/test_fuzz.py replays
from then on.  Prints a line per target at the end (cases, failures, slowest
case, peak memory) and exits 1 if anything was found.  See README "Reliability".
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(REPO))
    from tests import fuzzkit

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="how long to run (default 60)")
    parser.add_argument("--targets", default=",".join(fuzzkit.TARGETS), help="comma-separated target names")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes at a time (default 2)")
    parser.add_argument("--cases", type=int, default=5000, help="cases per target per round (default 5000)")
    parser.add_argument("--seed", type=int, default=1, help="the first round's seed (default 1)")
    parser.add_argument("--no-save", action="store_true", help="report failures without writing fixtures/fuzz/")
    args = parser.parse_args(argv)
    names = args.targets.split(",")
    unknown = [n for n in names if n not in fuzzkit.TARGETS]
    if unknown or args.jobs < 1 or args.cases < 1 or args.minutes <= 0:
        parser.error(f"unknown targets {unknown}" if unknown else "--jobs, --cases and --minutes must be positive")

    deadline = time.monotonic() + args.minutes * 60
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    found: list[fuzzkit.Failure] = []
    round_seed = args.seed
    tty = sys.stderr.isatty()
    start = time.monotonic()
    while time.monotonic() < deadline:
        jobs = [fuzzkit.Job(name, args.cases, round_seed, measure=50) for name in names]
        results, failures = fuzzkit.run_jobs(jobs, parallel=args.jobs, wall=max(600.0, 0.2 * args.cases))
        for r in results:
            t = totals[r["target"]]
            t["cases"] += r["cases"]
            t["slowest"] = max(t["slowest"], r["slowest"])
            t["rss"] = max(t["rss"], r["max_rss"])
            t["traced"] = max(t["traced"], r["peak_traced"])
        for f in failures:
            totals[f.target]["failures"] += 1
            found.append(f)
            where = "not saved" if args.no_save else fuzzkit.save_crash(f).relative_to(REPO)
            print(f"FOUND {f.target} seed {round_seed} {f.kind}: {f.detail.splitlines()[0][:200]} ({where})",
                  file=sys.stderr, flush=True)
        done = sum(t["cases"] for t in totals.values())
        elapsed = time.monotonic() - start
        line = f"fuzz: round {round_seed - args.seed + 1}, {done:,.0f} cases, {len(found)} found, " \
               f"{elapsed / 60:.1f} of {args.minutes:g} min"
        print(("\r" + line) if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)
        round_seed += 1
    if tty:
        print(file=sys.stderr)

    print(f"{'target':<11} {'cases':>9} {'found':>6} {'slowest':>8} {'peak (traced)':>14} {'worker RSS':>11}")
    for name in names:
        t = totals[name]
        print(f"{name:<11} {t['cases']:>9,.0f} {t['failures']:>6.0f} {t['slowest']:>7.3f}s "
              f"{t['traced'] / 2**20:>12.1f} MiB {t['rss'] / 2**20:>7.0f} MiB")
    print(f"total {sum(t['cases'] for t in totals.values()):,.0f} cases in "
          f"{(time.monotonic() - start) / 60:.1f} min, seeds {args.seed}..{round_seed - 1}; {len(found)} found")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
