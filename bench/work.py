"""The resource model against the kernels: ns per work unit and peak memory, per op (a script, not a test).

    python3 bench/work.py [--repeat 3] [--ops conv2d,sum] [--quick] [--no-table] [--wait-idle 60]

For every op, at typical and at worst-case shapes (inner loops of 2, padding
far beyond the input, strides far beyond the kernel, every box kept, ...), one
instruction is verified without limits and run traced, as ``cvmvm run`` runs
it: the best wall time of --repeat runs over the instruction's work (the
executor's share included) gives ns per work unit; one more run under
tracemalloc gives the bytes it allocated at its peak beside memory_bytes
(which must not be exceeded: the "mem" column is their ratio).  Then:

- the spread: the slowest op's ns per work unit (its worst case) over the
  median op's (target: at most 10x);
- the executor: a chain of one-element relus (the per-instruction constant);
- every program of issue 11's table, verified under the default limits:
  refused (and with which code), or run, with its time (target: under 5 s).

Work units are calibrated so that the slowest case of every op runs at about
1 ns per unit on the calibration machine (2-vCPU AMD EPYC): a program at the
default limit of 5e9 units then runs in about 5 s.  The machine may be shared:
the CPU idle fraction is printed first, and --wait-idle waits for an idle one.
On a busy machine OPENBLAS_NUM_THREADS=1 gives steadier GEMM figures (BLAS's
second thread otherwise waits for the scheduler, milliseconds at a time), and
the CPU column is the figure such a machine distorts least.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import cvmvm  # noqa: E402  (before numpy: OpenBLAS's spin, cvmvm.vm.blas)
import numpy as np  # noqa: E402

from isa.attrs import parse_attrs  # noqa: E402
from isa.ops.elemwise import NoAttrs  # noqa: E402
from isa.table import OP_BY_NAME  # noqa: E402
from isa.types import TensorType, precision_bound  # noqa: E402
from perf import cpu_idle, wait_idle  # noqa: E402
from serializer.model import Input, Instr, Model as ModelIR, Param  # noqa: E402
from cvmvm.vm.api import Model, single_op_model  # noqa: E402
from cvmvm.vm.verify import Limits, verify  # noqa: E402

UNLIMITED = Limits(memory=None, work=None)
RNG = np.random.default_rng(11)


def ints(shape: tuple[int, ...], precision: int = 8) -> np.ndarray:
    m = precision_bound(precision)
    return RNG.integers(-m, m + 1, size=shape, dtype=np.int64).astype(np.int32)


def boxes(b: int, n: int, spread: bool, precision: int = 16) -> np.ndarray:
    """[id, score, x1, y1, x2, y2] rows; ``spread``: boxes that never overlap (nothing is suppressed)."""
    rows = np.zeros((b, n, 6), dtype=np.int64)
    rows[:, :, 0] = 0
    rows[:, :, 1] = RNG.integers(0, 1000, size=(b, n))
    if spread:
        i = np.arange(n, dtype=np.int64)
        rows[:, :, 2], rows[:, :, 4] = 2 * i, 2 * i + 1
        rows[:, :, 3], rows[:, :, 5] = 0, 1
    else:
        xy = RNG.integers(0, 50, size=(b, n, 2))
        rows[:, :, 2:4], rows[:, :, 4:6] = xy, xy + 10
    top = precision_bound(precision)
    if precision > 27:
        rows[:, :, 2:] += top - rows[:, :, 2:].max()
    return rows.astype(np.int32)


@dataclass
class Case:
    op: str
    label: str
    make: Callable[[], list[np.ndarray]]
    attrs: dict[str, Any] = field(default_factory=dict)
    precisions: list[int | None] | None = None
    worst: bool = False
    quick: bool = True


MP = dict(auto_pad="NOTSET", ceil_mode=0, storage_order=0, index_axis=0, index_dtype="int64")


def cases() -> list[Case]:
    big = 1 << 24
    c: list[Case] = []
    for op in ("relu", "abs", "negative", "clip", "cvm_clip", "cvm_right_shift", "cvm_left_shift", "cvm_precision"):
        attrs = {"clip": dict(a_min=-5, a_max=5), "cvm_clip": dict(precision=4),
                 "cvm_right_shift": dict(precision=8, shift_bit=3),
                 "cvm_left_shift": dict(precision=16, shift_bit=3)}.get(op, {})
        c.append(Case(op, "2^24", lambda: [ints((big,))], attrs, [8]))
        c.append(Case(op, "64x64", lambda: [ints((64, 64))], attrs, [8], worst=True))
    c.append(Case("cvm_right_shift", "2^24 p32 carry", lambda: [ints((big,), 31)], dict(precision=8, shift_bit=1),
                  [32], worst=True))
    for op in ("elemwise_add", "elemwise_sub"):
        c.append(Case(op, "2^24", lambda: [ints((big,)), ints((big,))], {}, [8, 8]))
    for op in ("broadcast_add", "broadcast_sub", "broadcast_mul", "broadcast_div", "broadcast_max",
               "broadcast_greater"):
        c.append(Case(op, "(2^24)+(2^24)", lambda: [ints((big,)), ints((big,))], {}, [8, 8]))
        c.append(Case(op, "(1,64,56,56)+(64,1,1)", lambda: [ints((1, 64, 56, 56)), ints((64, 1, 1))], {}, [8, 8]))
        c.append(Case(op, "(2^23,1)+(1,2)", lambda: [ints((big // 2, 1)), ints((1, 2))], {}, [8, 8], worst=True))
    c.append(Case("where", "2^24", lambda: [ints((big,)), ints((big,)), ints((big,))], {}, [8, 8, 8]))
    c.append(Case("where", "rows (2^23,2)", lambda: [ints((big // 2,)), ints((big // 2, 2)), ints((big // 2, 2))],
                  {}, [8, 8, 8], worst=True))
    for op in ("sum", "max"):
        c.append(Case(op, "all of 2^24", lambda: [ints((big,), 4)], {}, [4]))
        c.append(Case(op, "(64,2^18) axis 1", lambda: [ints((64, 1 << 18), 4)], dict(axis=(1,)), [4]))
        c.append(Case(op, "(2^23,2) axis 1", lambda: [ints((big // 2, 2), 4)], dict(axis=(1,)), [4], worst=True))
        c.append(Case(op, "(2^21,8) axis 1", lambda: [ints((1 << 21, 8), 4)], dict(axis=(1,)), [4], worst=True))
        c.append(Case(op, "(2^20,16) axis 0", lambda: [ints((1 << 20, 16), 4)], dict(axis=(0,)), [4], worst=True))
        c.append(Case(op, "(2^22,2,2) axes 0,2", lambda: [ints((1 << 22, 2, 2), 4)], dict(axis=(0, 2)), [4],
                      worst=True))
    def conv(label: str, x: tuple[int, ...], w: tuple[int, ...], worst: bool = False, **attrs: Any) -> Case:
        return Case("conv2d", label, lambda: [ints(x), ints(w)],
                    dict(channels=w[0], kernel_size=w[2:], use_bias=False, **attrs), [8, 8], worst)

    c += [conv("64ch 56x56 3x3", (1, 64, 56, 56), (64, 64, 3, 3), padding=(1, 1)),
          conv("128ch 28x28 3x3 (2 chunks)", (1, 128, 28, 28), (128, 128, 3, 3), padding=(1, 1)),
          conv("3ch 224 7x7/2", (1, 3, 224, 224), (64, 3, 7, 7), padding=(3, 3), strides=(2, 2)),
          conv("64ch 224 3x3 (tiled)", (1, 64, 224, 224), (64, 64, 3, 3), padding=(1, 1)),
          conv("depthwise 256ch x8", (8, 256, 14, 14), (256, 1, 3, 3), padding=(1, 1), groups=256),
          conv("1x1 512->1024 7x7", (1, 512, 7, 7), (1024, 512, 1, 1)),
          conv("1x1 input, pad 4095 stride 4095", (1, 64, 1, 1), (64, 64, 1, 1), True, padding=(4095, 4095),
               strides=(4095, 4095)),
          conv("1 output channel 64x64 kernel", (1, 8, 128, 128), (1, 8, 64, 64), True),
          conv("1x1 stride 4 pad 2", (1, 16, 256, 256), (16, 16, 1, 1), True, padding=(2, 2), strides=(4, 4)),
          conv("tiny 1x1x3x3", (1, 1, 3, 3), (1, 1, 3, 3), True)]
    c += [Case("dense", "1x1024 -> 1000", lambda: [ints((1, 1024)), ints((1000, 1024))],
               dict(units=1000, use_bias=False), [8, 8]),
          Case("dense", "512x2048 -> 2048", lambda: [ints((512, 2048)), ints((2048, 2048))],
               dict(units=2048, use_bias=False), [8, 8]),
          Case("dense", "2^20x1 -> 1", lambda: [ints((1 << 20, 1)), ints((1, 1))], dict(units=1, use_bias=False),
               [8, 8], worst=True),
          Case("dense", "1x2^20 -> 4", lambda: [ints((1, 1 << 20), 4), ints((4, 1 << 20), 4)],
               dict(units=4, use_bias=False), [4, 4], worst=True)]
    c += [Case("max_pool2d", "64ch 112 3x3/2 pad 1", lambda: [ints((1, 64, 112, 112))],
               dict(pool_size=(3, 3), strides=(2, 2), padding=(1,)), [8]),
          Case("max_pool2d", "64ch 112 2x2/2", lambda: [ints((1, 64, 112, 112))],
               dict(pool_size=(2, 2), strides=(2, 2)), [8]),
          Case("max_pool2d", "stride 4095 >> kernel 4x1", lambda: [ints((1, 1, 4, 1 << 22))],
               dict(pool_size=(4, 1), strides=(1, 4095)), [8], worst=True),
          Case("max_pool2d", "kernel 512x1", lambda: [ints((1, 1, 1024, 1024))], dict(pool_size=(512, 1)), [8],
               worst=True),
          Case("max_pool2d", "pad 3 on 1x1", lambda: [ints((4096, 1, 1, 1))], dict(pool_size=(4, 4), padding=(3,)),
               [8], worst=True)]
    c += [Case("upsampling", "64ch 128 x2", lambda: [ints((1, 64, 128, 128))], dict(scale=2), [8]),
          Case("upsampling", "1x1 x4095", lambda: [ints((1, 1, 1, 1))], dict(scale=4095), [8], worst=True)]
    c += [Case("repeat", "2^20 x16 axis 0", lambda: [ints((1 << 20,))], dict(repeats=16), [8]),
          Case("repeat", "(2^22,1) x2 axis 1", lambda: [ints((1 << 22, 1))], dict(repeats=2, axis=1), [8], worst=True),
          Case("tile", "1024^2 x (2,2)", lambda: [ints((1024, 1024))], dict(reps=(2, 2)), [8]),
          Case("tile", "(2^21,1) x (1,2)", lambda: [ints((1 << 21, 1))], dict(reps=(1, 2)), [8], worst=True),
          Case("tile", "(1,) x 4095^2", lambda: [ints((1,))], dict(reps=(4095, 4095)), [8], worst=True)]
    for op, attrs in (("flatten", {}), ("reshape", dict(shape=(-1,))), ("expand_dims", dict(axis=0)),
                      ("squeeze", {})):
        c.append(Case(op, "2^24", lambda: [ints((1 << 12, 1 << 12))], attrs, [8], worst=True))
    c += [Case("concatenate", "2 x 2^23", lambda: [ints((1 << 23,)), ints((1 << 23,))], dict(axis=0), [8, 8]),
          Case("concatenate", "(2^22,1)+(2^22,1) axis 1", lambda: [ints((1 << 22, 1)), ints((1 << 22, 1))],
               dict(axis=1), [8, 8], worst=True),
          Case("transpose", "4096^2", lambda: [ints((4096, 4096))], {}, [8]),
          Case("transpose", "(2^21,2,2,2) reversed", lambda: [ints((1 << 21, 2, 2, 2))], {}, [8], worst=True),
          Case("strided_slice", "4096^2 step 2", lambda: [ints((4096, 4096))],
               dict(begin=(0, 0), end=(4096, 4096), stride=(2, 2)), [8]),
          Case("strided_slice", "2^24 reversed", lambda: [ints((1 << 24,))], dict(begin=(-1,), end=(-(1 << 30),),
                                                                                  stride=(-1,)), [8], worst=True),
          Case("strided_slice", "(2^22,4) column 1", lambda: [ints((1 << 22, 4))], dict(begin=(0, 1), end=(1 << 22, 2)),
               [8], worst=True),
          Case("take", "2^24 from 2^20", lambda: [ints((1 << 20,)), RNG.integers(0, 1 << 20, 1 << 24).astype(np.int32)],
               {}, [8, 22]),
          Case("take", "(2^22,4) axis 1", lambda: [ints((1 << 22, 4)), np.array([3, 0], dtype=np.int32)], dict(axis=1),
               [8, 3], worst=True),
          Case("cvm_lut", "2^24 into 256", lambda: [RNG.integers(0, 256, 1 << 24).astype(np.int32), ints((256,))],
               dict(in_dim=256), [10, 8]),
          Case("slice_like", "4096^2 to half", lambda: [ints((4096, 4096)), ints((4096, 2048))], {}, [8, 8]),
          Case("slice_like", "(2^23,2) to (2^23,1)", lambda: [ints((1 << 23, 2)), ints((1 << 23, 1))], {}, [8, 8],
               worst=True)]
    c += [Case("get_valid_counts", "1x2^20x6", lambda: [boxes(1, 1 << 20, False)], dict(score_threshold=500), [16]),
          Case("get_valid_counts", "2^18 x 4 x 2", lambda: [ints((1 << 18, 4, 2), 16)], {}, [16], worst=True)]
    nms = dict(iou_threshold=50, force_suppress=False)
    c += [Case("non_max_suppression", "1000 boxes", lambda: [boxes(1, 1000, False), np.array([1000], np.int32)],
               nms, [16, 11]),
          Case("non_max_suppression", "8000 disjoint (all kept)",
               lambda: [boxes(1, 8000, True), np.array([8000], np.int32)], nms, [16, 14], worst=True),
          Case("non_max_suppression", "2000 disjoint, precision 32",
               lambda: [boxes(1, 2000, True, 32), np.array([2000], np.int32)], nms, [32, 12], worst=True),
          Case("non_max_suppression", "256 batches of 64",
               lambda: [boxes(256, 64, True), np.full(256, 64, np.int32)], nms, [16, 8], worst=True)]
    c += [Case("max_pool", "2-D 64ch 112 3x3/2", lambda: [ints((1, 64, 112, 112))],
               dict(kernel_shape=(3, 3), strides=(2, 2), dilations=(1, 1), pads=(1, 1, 1, 1), **MP), [8]),
          Case("max_pool", "2-D float32", lambda: [RNG.standard_normal((1, 64, 112, 112)).astype(np.float32)],
               dict(kernel_shape=(3, 3), strides=(2, 2), dilations=(1, 1), pads=(1, 1, 1, 1), **MP), [None]),
          Case("max_pool", "1-D kernel 2^30 on 1", lambda: [np.array([[[5]]], np.int32)],
               dict(kernel_shape=(1 << 30,), strides=(1,), dilations=(1,), pads=((1 << 30) - 1, 0), **MP), [8],
               worst=True),
          Case("max_pool", "3-D 2x2x2 on (1,8,64,64,64)", lambda: [ints((1, 8, 64, 64, 64))],
               dict(kernel_shape=(2, 2, 2), strides=(2, 2, 2), dilations=(1, 1, 1), pads=(0,) * 6, **MP), [8],
               worst=True),
          Case("max_pool", "1-D kernel 64 dilation 3", lambda: [ints((1, 4, 1 << 18))],
               dict(kernel_shape=(64,), strides=(1,), dilations=(3,), pads=(0, 0), **MP), [8], worst=True)]
    return c


def run_case(case: Case, repeat: int) -> dict[str, Any] | None:
    inputs = case.make()
    model, feeds = single_op_model(case.op, inputs, case.attrs, case.precisions, UNLIMITED)
    best = cpu = float("inf")
    for _ in range(repeat):
        start, used = time.perf_counter(), _cpu()
        model.run(feeds, trace=True)
        best = min(best, time.perf_counter() - start)
        cpu = min(cpu, _cpu() - used)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    model.run(feeds, trace=True)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return {"op": case.op, "label": case.label, "worst": case.worst, "work": model.work, "seconds": best,
            "ns_per_work": best * 1e9 / model.work, "cpu_per_work": cpu * 1e9 / model.work,
            "memory": model.memory_bytes, "peak": peak}


def _cpu() -> float:
    """CPU seconds of this process, every thread (BLAS's and the hashing thread's) included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def spread(rows: list[dict[str, Any]], key: str = "ns_per_work") -> tuple[float, str, float]:
    """(slowest op's worst ns/work over the median op's, the slowest op, the median)."""
    per_op: dict[str, float] = {}
    for r in rows:
        per_op[r["op"]] = max(per_op.get(r["op"], 0.0), r[key])
    median = statistics.median(per_op.values())
    slowest = max(per_op, key=per_op.__getitem__)
    return per_op[slowest] / median, slowest, median


# -- the executor and issue 11's table ------------------------------------------------

def relu_chain(n: int, size: int = 1) -> ModelIR:
    instrs = tuple(Instr("relu", NoAttrs(), (i,), (i + 1,)) for i in range(n))
    return ModelIR((Input("data", TensorType((size,), 8)),), (), instrs, (n,))


def one_op(name: str, types: list[TensorType], attrs: dict[str, Any]) -> ModelIR:
    op = OP_BY_NAME[name]
    n = len(types)
    outs = tuple(range(n, n + len(op.outputs)))
    return ModelIR(tuple(Input(f"in{k}", t) for k, t in enumerate(types)), (),
                   (Instr(name, parse_attrs(op.attrs, attrs, fill_defaults=True), tuple(range(n)), outs),), outs)


def huge_params() -> ModelIR:
    """300 params of 2^30 elements and no instruction: 1.6e12 ops (zero-stride values: nothing allocated)."""
    value = np.broadcast_to(np.int32(0), (1 << 15, 1 << 15))
    params = tuple(Param(f"p{k}", TensorType((1 << 15, 1 << 15), 8), value) for k in range(300))
    return ModelIR((), params, (), (0,))


def table() -> list[tuple[str, Callable[[], ModelIR]]]:
    """Issue 11's programs, each as a model."""
    t = TensorType
    return [
        ("conv2d 1x1024x1x1, 1x1 kernel, padding and strides 4095",
         lambda: one_op("conv2d", [t((1, 1024, 1, 1), 8), t((1024, 1024, 1, 1), 8)],
                        dict(channels=1024, kernel_size=(1, 1), padding=(4095, 4095), strides=(4095, 4095),
                             use_bias=False))),
        ("conv2d at 2^37.2 ops (one output channel, 64x64 kernel: 211 GB of im2col)",
         lambda: one_op("conv2d", [t((1, 64, 512, 512), 4), t((1, 64, 64, 64), 4)],
                        dict(channels=1, kernel_size=(64, 64), use_bias=False))),
        ("1-D max_pool, kernel 2^30 on a 1-element input",
         lambda: one_op("max_pool", [t((1, 1, 1), 8)], dict(kernel_shape=(1 << 30,), strides=(1,), dilations=(1,),
                                                             pads=((1 << 30) - 1, 0), **MP))),
        ("non_max_suppression over 50,000 boxes",
         lambda: one_op("non_max_suppression", [t((1, 50_000, 6), 16), t((1,), 17)], dict(iou_threshold=50))),
        ("non_max_suppression over 8,000 boxes (all kept)",
         lambda: one_op("non_max_suppression", [t((1, 8_000, 6), 16), t((1,), 14)], dict(iou_threshold=50))),
        ("repeat to a 4 GiB output", lambda: one_op("repeat", [t((1 << 10, 1 << 14), 8)], dict(repeats=64))),
        ("tile to a 4 GiB output", lambda: one_op("tile", [t((1 << 15, 1 << 5), 8)], dict(reps=(1, 1024)))),
        ("broadcast_add to a 4 GiB output",
         lambda: one_op("broadcast_add", [t((1 << 15, 1), 8), t((1, 1 << 15), 8)], {})),
        ("a chain of 2^17 one-element relus", lambda: relu_chain(1 << 17)),
        ("max_pool2d, horizontal stride 4095 over a 4x1 kernel",
         lambda: one_op("max_pool2d", [t((1, 1, 4, 1 << 24), 8)], dict(pool_size=(4, 1), strides=(1, 4095)))),
        ("no instructions, 1.6e12 ops of params", huge_params),
    ]


def table_feeds(model: Model) -> dict[str, np.ndarray]:
    """Values for each input: boxes that never overlap (every one kept) for non_max_suppression."""
    steps = model.program.steps
    if steps and steps[0].op.name == "non_max_suppression":
        n = model.inputs["in0"].shape[1]
        return {"in0": boxes(1, n, True), "in1": np.array([n], dtype=np.int32)}
    return {name: ints(ty.shape, min(ty.precision, 8)) for name, ty in model.inputs.items()}


def table_row(label: str, make: Callable[[], ModelIR]) -> str:
    try:
        model = Model(verify(make()))
    except cvmvm.CvmError as e:
        return f"  refused {e.code:<14} {label}: {e.message[:110]}"
    feeds = table_feeds(model)
    start = time.perf_counter()
    model.run(feeds, trace=True)
    seconds = time.perf_counter() - start
    verdict = "under 5 s" if seconds < 5 else "OVER 5 s"
    return (f"  ran     {seconds:6.3f} s {verdict:<9} {label} (work {model.work:.3g}, "
            f"{seconds * 1e9 / model.work:.2f} ns/unit, memory {model.memory_bytes / 2**20:.0f} MiB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per case (the best counts)")
    parser.add_argument("--ops", help="comma-separated ops to measure (default: all)")
    parser.add_argument("--quick", action="store_true", help="typical shapes only")
    parser.add_argument("--no-table", action="store_true", help="skip issue 11's table")
    parser.add_argument("--wait-idle", type=float, default=0.0, help="wait up to this many seconds for an idle CPU")
    args = parser.parse_args()
    idle = wait_idle(args.wait_idle) if args.wait_idle else cpu_idle()
    print(f"CPU idle {idle:.0%} when starting; ns per work unit, best of {args.repeat} traced runs")
    print(f"{'op':<20} {'case':<34} {'work':>10} {'ms':>9} {'ns/unit':>8} {'cpu':>6} {'memory_bytes':>13} "
          f"{'peak':>12} {'mem':>5}")
    only = set(args.ops.split(",")) if args.ops else None
    rows = []
    for case in cases():
        if (only and case.op not in only) or (args.quick and case.worst):
            continue
        r = run_case(case, args.repeat)
        rows.append(r)
        flag = "" if r["peak"] <= r["memory"] else "  PEAK OVER memory_bytes"
        print(f"{r['op']:<20} {('* ' if r['worst'] else '') + r['label']:<34} {r['work']:>10.3g} "
              f"{r['seconds'] * 1e3:>9.2f} {r['ns_per_work']:>8.3f} {r['cpu_per_work']:>6.3f} {r['memory']:>13,} "
              f"{r['peak']:>12,} "
              f"{r['peak'] / r['memory']:>5.2f}{flag}", flush=True)
    if rows:
        print("\n(* worst-case shapes; cpu: CPU seconds of every thread per unit, the figure a shared machine "
              "distorts least)")
        for key, what in (("ns_per_work", "wall"), ("cpu_per_work", "cpu")):
            ratio, slowest, median = spread(rows, key)
            print(f"spread ({what}): slowest op {slowest} at {ratio * median:.3f} ns/unit over the median op's "
                  f"{median:.3f}: {ratio:.1f}x (target <= 10x); fastest case {min(r[key] for r in rows):.3f}")
    if only is None:
        for n, size in ((4096, 1), (512, 1 << 16)):
            model = Model(verify(relu_chain(n, size)))
            x = ints((size,))
            best = min(_timed(lambda: model.run({"data": x}, trace=True)) for _ in range(args.repeat))
            print(f"executor: {n} relus of {size} elements: {best / n * 1e6:.1f} us per instruction, "
                  f"{best * 1e9 / model.work:.3f} ns/unit")
    if not args.no_table:
        print("\nissue 11's table, under the default limits (5e9 work units, 2 GiB):")
        for label, make in table():
            print(table_row(label, make), flush=True)


def _timed(f: Callable[[], Any]) -> float:
    start = time.perf_counter()
    f()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
