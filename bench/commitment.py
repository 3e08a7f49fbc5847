"""Choosing the commitment format's chunk size and element order by measurement.

For each candidate (element order inside a tensor, chunk size), in one run:

- the hashing side: the time to commit every tensor of a perf and a perf-large
  run (lane encoding + chunk leaves + chunk tree), on one and on two threads,
  against v1 (one SHA-256 over each whole int32 tensor);
- the dispute side: for every op kind at its largest instance in perf-large,
  the worst element of a sample (the one whose proof carries the most bytes):
  the chunks its footprint touches, the calldata of those chunks and their
  Merkle paths, and the gas that implies (EIP-2028/EIP-7623 calldata pricing
  of the real bytes, plus execution from unit costs measured on py-evm:
  ``--units`` prints them when titanoboa and node are installed).

    python bench/commitment.py [--sizes 1024,2048,4096,8192,format] [--sample 200]

A size is a chunk size for every tensor, or ``format``: the format's own rule,
``serializer.hashing.chunk_size`` of each tensor's body (256 bytes up to 4096,
else 4096).  Prints measurements only; docs/FORMAT.md section 10.5 records the
choice (bench/chain.py measures the contract itself).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import cvmvm  # noqa: E402,F401  (before numpy: OpenBLAS's spin, cvmvm.vm.blas)
import numpy as np  # noqa: E402
from serializer.hashing import chunk_size  # noqa: E402
from cvmvm.tx import element  # noqa: E402
from cvmvm.vm.execute import execute  # noqa: E402

# Execution gas per unit of the verifier's own functions, measured on py-evm (Prague): --units.
PATH_LEVEL_GAS = 450        # one SHA-256 precompile call over 0x01 || left || right, and the loop
LEAF_BASE_GAS = 880         # one chunk leaf hash: call overhead
LEAF_BYTE_GAS = 0.57        # ... and per chunk byte (12 gas per word, memory)
MAC_GAS = 51                # one int8 x int8 multiply-accumulate, 32 lanes a word, in Yul
READ_GAS = 150              # one element read outside a dot product (lane decode, chunk lookup)
FIXED_BYTES = 600           # descriptor, counts, commitments, selector, ABI framing (estimate)


def lane_width(t: cvmvm.TensorType) -> int:
    if t.dtype != "int32" or t.precision is None:
        return np.dtype(t.dtype).itemsize if t.dtype != "int32" else 4
    return 1 if t.precision <= 8 else 2 if t.precision <= 16 else 4


LANE_DTYPES = {1: np.dtype("i1"), 2: np.dtype("<i2"), 4: np.dtype("<i4")}

# Where the channel axis of a 4-D (NCHW) tensor goes last: never, always, or only in
# 1-byte lanes (every conv2d input and weight: their precision is at most 8).
ORDERS = ("row-major", "channel-last", "channel-last-1B")


def channel_last(order: str, ndim: int, lane: int) -> bool:
    return ndim == 4 and (order == "channel-last" or (order == "channel-last-1B" and lane == 1))


def committed_position(order: str, shape: tuple[int, ...], index: np.ndarray, lane: int) -> np.ndarray:
    """Row-major flat indices -> positions in the committed element order."""
    if not channel_last(order, len(shape), lane):
        return index
    n, c, h, w = np.unravel_index(index, shape)
    return ((n * shape[2] + h) * shape[3] + w) * shape[1] + c


def encode(order: str, value: np.ndarray, lane: int) -> np.ndarray:
    if channel_last(order, value.ndim, lane):
        out = np.empty((value.shape[0], value.shape[2], value.shape[3], value.shape[1]), dtype=LANE_DTYPES[lane])
        np.copyto(out, value.transpose(0, 2, 3, 1), casting="unsafe")
        return out
    return value.astype(LANE_DTYPES[lane]) if lane != 4 else np.ascontiguousarray(value, dtype="<i4")


FORMAT = 0   # a size: the format's rule, by body length


def chunk_of(size: int, length: int) -> int:
    """The chunk size a candidate gives a body of ``length`` bytes."""
    return chunk_size(length) if size == FORMAT else size


def chunk_tree(buf: memoryview, size: int) -> bytes:
    """RFC 6962-shaped root over SHA-256(0x00 || chunk) leaves (pairs from the left, odd one promoted)."""
    size = chunk_of(size, len(buf))
    base = hashlib.sha256(b"\x00")
    level = []
    for i in range(0, max(len(buf), 1), size):
        h = base.copy()
        h.update(buf[i:i + size])
        level.append(h.digest())
    while len(level) > 1:
        nxt = [hashlib.sha256(b"\x01" + level[i] + level[i + 1]).digest() for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def run_tensors(name: str) -> tuple[cvmvm.Model, dict[int, np.ndarray]]:
    d = ROOT / "fixtures" / "models" / name
    model = cvmvm.load_cortex(gzip.open(d / "graph.json.gz").read(), gzip.open(d / "params.bin.gz").read())
    raw = d / "inputs.npy"
    x = np.load(raw) if raw.exists() else np.load(gzip.open(d / "inputs.npy.gz"))
    env: dict[int, np.ndarray] = {}
    execute(model.program, {"data": x[0]}, lambda t, v: env.__setitem__(t, v))
    return model, env


def time_hashing(model: cvmvm.Model, env: dict[int, np.ndarray], order: str, size: int | None,
                 threads: int, repeat: int = 5) -> tuple[float, float]:
    """Median seconds to commit every non-param tensor: (encode only, encode + hash).  One
    thread is timed in process CPU time (what a shared machine's load does not inflate), two
    threads in wall time."""
    types = model.program.types
    first_param = len(model.program.model.inputs)
    ids = [t for t in env if not first_param <= t < model.program.model.num_variables]
    ids.sort(key=lambda t: -env[t].nbytes)

    def one(t: int) -> bytes:
        if size is None:
            return hashlib.sha256(memoryview(np.ascontiguousarray(env[t], dtype="<i4")).cast("B")).digest()
        data = encode(order, env[t], lane_width(types[t]))
        return chunk_tree(memoryview(data).cast("B"), size)

    enc, total = [], []
    pool = ThreadPoolExecutor(threads) if threads > 1 else None
    clock = time.perf_counter if pool is not None else time.process_time
    for _ in range(repeat):
        t0 = clock()
        if size is not None:
            for t in ids:
                encode(order, env[t], lane_width(types[t]))
        enc.append(clock() - t0)
        t0 = clock()
        if pool is None:
            for t in ids:
                one(t)
        else:
            list(pool.map(one, ids))
        total.append(clock() - t0)
    if pool is not None:
        pool.shutdown()
    return statistics.median(enc), statistics.median(total)


def depth(count: int) -> int:
    return (count - 1).bit_length()


def dispute(model: cvmvm.Model, env: dict[int, np.ndarray], step: object, order: str, size: int,
            elements: list[int]) -> tuple[int, int, int]:
    """Worst element over ``elements``: (element, calldata bytes, estimated gas)."""
    prog = model.program
    ins = [prog.types[t] for t in step.inputs]
    out = step.out_types[0]
    worst = (-1, 0, 0)
    n_leaves = len(prog.types)
    for e in elements:
        reads = element.footprint(step.op.name, step.attrs, ins, out, e)
        data_bytes = zero = 0
        exec_gas = 0
        chunks_total = 0
        operands = list(zip(step.inputs, ins, reads)) + [(step.outputs[0], out, np.array([e], dtype=np.int64))]
        for t, ty, r in operands:
            lane = lane_width(ty)
            blob = encode(order, env[t], lane).reshape(-1).view(np.uint8)
            pos = committed_position(order, ty.shape, r, lane)
            chunk = chunk_of(size, ty.size * lane)
            chunks = np.unique(pos * lane // chunk)
            count = -(-ty.size * lane // chunk)
            for c in chunks.tolist():
                piece = blob[c * chunk:(c + 1) * chunk]
                data_bytes += piece.size + 32 * depth(count)
                zero += int(np.count_nonzero(piece == 0))
                exec_gas += LEAF_BASE_GAS + LEAF_BYTE_GAS * piece.size + PATH_LEVEL_GAS * depth(count)
            chunks_total += len(chunks)
            exec_gas += PATH_LEVEL_GAS * depth(n_leaves)   # the tensor's commitment in the trace
        macs = len(reads[0]) if step.op.name in ("conv2d", "dense") else 0
        exec_gas += MAC_GAS * macs + READ_GAS * (sum(len(r) for r in reads) if not macs else 0)
        exec_gas += PATH_LEVEL_GAS * depth(len(prog.steps) + len(prog.model.params) + 8)
        calldata = data_bytes + FIXED_BYTES
        nonzero = calldata - zero
        tokens = zero + 4 * nonzero
        gas = max(21000 + 4 * tokens + exec_gas, 21000 + 10 * tokens)
        if calldata > worst[1]:
            worst = (e, calldata, int(gas))
    return worst


def measure_units() -> None:
    """Measure the unit costs above on py-evm with the verifier's own functions (commitment_probe.sol
    builds on CvmStep; needs the chain extra and `npm ci`)."""
    import json
    import subprocess
    import tempfile

    import boa
    from eth_abi import encode as abi
    from eth_utils import function_signature_to_4byte_selector as selector

    src = Path(__file__).with_name("commitment_probe.sol")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / src.name).write_text(src.read_text())
        art = json.loads(subprocess.run(["node", str(ROOT / "scripts" / "compile_contract.js"), tmp,
                                         str(ROOT / "cvmvm" / "tx" / "solidity")],
                                        check=True, capture_output=True, text=True).stdout)
    addr, _ = boa.env.deploy_code(bytecode=bytes.fromhex(art["contracts"]["Probe"]["bytecode"]))

    def gas(sig: str, types: list[str], args: list[object]) -> int:
        c = boa.env.execute_code(to_address=addr, data=selector(sig) + abi(types, args), gas=30_000_000)
        assert not c.is_error, c.error
        return c.get_gas_used()

    rnd = random.Random(0)
    path = "root(bytes32,uint256,uint256,bytes32[])"
    levels = [gas(path, ["bytes32", "uint256", "uint256", "bytes32[]"],
                  [b"\1" * 32, (1 << d) - 1, 1 << d, [rnd.randbytes(32) for _ in range(d)]]) for d in (0, 20)]
    print(f"Merkle path: {(levels[1] - levels[0]) / 20:.0f} gas per level")
    leaf = [gas("leafHash(bytes)", ["bytes"], [rnd.randbytes(s)]) for s in (256, 4096)]
    print(f"chunk leaf hash: {leaf[0] - 256 * (leaf[1] - leaf[0]) / 3840:.0f} gas + "
          f"{(leaf[1] - leaf[0]) / 3840:.2f} gas per byte")
    k = 4608
    mac = gas("dot8u(bytes,bytes)", ["bytes", "bytes"], [rnd.randbytes(k), rnd.randbytes(k)])
    print(f"int8 dot product: {mac / k:.1f} gas per multiply-accumulate")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1024,2048,4096,8192,format")
    ap.add_argument("--sample", type=int, default=20, help="random elements tried per instruction")
    ap.add_argument("--units", action="store_true", help="measure the EVM unit costs instead")
    ap.add_argument("--no-disputes", action="store_true", help="only the hashing side")
    args = ap.parse_args()
    if args.units:
        measure_units()
        return
    sizes = [FORMAT if s == "format" else int(s) for s in args.sizes.split(",")]
    runs = {name: run_tensors(name) for name in ("perf", "perf-large")}
    print(f"cores: {os.cpu_count()}")
    print("\n## hashing a traced run (median of 5, ms): encode only and 1 thread in CPU time, 2 threads in wall time")
    print("| model | order | chunk | encode | 1 thread | 2 threads |")
    print("|---|---|---|---|---|---|")
    for name, (model, env) in runs.items():
        v1 = [time_hashing(model, env, "row-major", None, k)[1] for k in (1, 2)]
        print(f"| {name} | v1 whole tensor, int32 | - | - | {v1[0] * 1e3:.1f} | {v1[1] * 1e3:.1f} |")
        for order in ORDERS:
            for size in sizes:
                e1, t1 = time_hashing(model, env, order, size, 1)
                _, t2 = time_hashing(model, env, order, size, 2)
                print(f"| {name} | {order} | {size or 'format'} | {e1 * 1e3:.1f} | {t1 * 1e3:.1f} | {t2 * 1e3:.1f} |")

    if args.no_disputes:
        return
    model, env = runs["perf-large"]
    print("\n## disputes on perf-large: per op kind, the worst sampled element of any of its instructions"
          " (calldata / estimated gas)")
    print("| op | instr | " + " | ".join(f"{o} {s or 'format'}" for o in ORDERS for s in sizes) + " |")
    print("|---|---|" + "---|" * (len(ORDERS) * len(sizes)))
    worst = {(o, s): (0, 0) for o in ORDERS for s in sizes}
    kinds: dict[str, list[object]] = {}
    for step in model.program.steps:
        kinds.setdefault(step.op.name, []).append(step)
    for op, steps in sorted(kinds.items()):
        cells = []
        where = set()
        for o in ORDERS:
            for s in sizes:
                cd = g = 0
                for step in steps:
                    size_out = step.out_types[0].size
                    r = random.Random(step.index)
                    elements = sorted({0, size_out // 2, size_out - 1, *(r.randrange(size_out) for _ in range(args.sample))})
                    _, c1, g1 = dispute(model, env, step, o, s, elements)
                    if c1 > cd:
                        cd, g, top = c1, g1, step.index
                where.add(top)
                worst[(o, s)] = (max(worst[(o, s)][0], cd), max(worst[(o, s)][1], g))
                cells.append(f"{cd / 1024:.1f} KiB / {g / 1e6:.2f}M")
        print(f"| {op} | {','.join(map(str, sorted(where)))} | " + " | ".join(cells) + " |")
    print("| worst | | " + " | ".join(f"{worst[(o, s)][0] / 1024:.1f} KiB / {worst[(o, s)][1] / 1e6:.2f}M"
                                       for o in ORDERS for s in sizes) + " |")


if __name__ == "__main__":
    main()
