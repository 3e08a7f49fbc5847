"""Same bytes, same hashes: whatever the input's byte order or memory layout, whatever the BLAS thread count."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
from cvmvm.vm import hashworker  # noqa: E402
from tests.fixture_script import generate  # noqa: E402


def golden(name: str) -> list[dict]:
    return [json.loads(line) for line in (REPO / "fixtures" / "golden" / f"{name}.jsonl").read_text().splitlines()]


def strided(x: np.ndarray) -> np.ndarray:
    """The same values in a non-contiguous view of a larger buffer."""
    big = np.zeros(x.shape[:-1] + (x.shape[-1] * 2,), dtype=x.dtype)
    big[..., ::2] = x
    view = big[..., ::2]
    assert not view.flags.c_contiguous
    return view


@pytest.mark.parametrize("layout", ["big-endian", "non-contiguous", "fortran"])
@pytest.mark.parametrize("name", ["digits", "perf"])
def test_input_layout_does_not_change_any_hash(name, layout):
    model = generate.load_fixture_model(name)
    inputs = generate.load_fixture_inputs(name)
    for want in golden(name)[:4]:
        x = inputs[int(want["id"].split("/")[1])]
        if layout == "big-endian":
            x = x.astype(">i4")
        elif layout == "non-contiguous":
            x = strided(x)
        else:
            x = np.asfortranarray(x)
        assert generate.golden_record(want["id"], model, {"data": x}) == want


def test_maxpool_float_inputs_byteswapped_hash_the_same():
    from tests.reference import decode_array, maxpool_cases
    import cvmvm
    wants = {g["id"]: g for g in golden("maxpool")}
    checked = 0
    for case in maxpool_cases():
        if case["id"] not in wants or case["x"]["dtype"] not in ("float16", "float32", "float64", "int32"):
            continue
        x = decode_array(case["x"]["b64"], case["x"]["dtype"], case["x"]["shape"])
        swapped = x.astype(x.dtype.newbyteorder(">"))
        model, _ = cvmvm.vm.api.single_op_model("max_pool", [x], case["attrs"])
        assert generate.golden_record(case["id"], model, {"in0": swapped}) == wants[case["id"]]
        checked += 1
    assert checked > 50


SCRIPT = """
import json, sys
sys.path.insert(0, {fixtures!r}); sys.path.insert(0, {repo!r})
import generate
for name, count in (("perf", 2), ("digits", 4)):
    model = generate.load_fixture_model(name)
    xs = generate.load_fixture_inputs(name)
    for k in range(count):
        print(json.dumps(generate.golden_record(f"{{name}}/{{k}}", model, {{"data": xs[k]}}), sort_keys=True))
"""


@pytest.mark.parametrize("threads, spin", [("1", "28"), ("2", "4"), ("2", "28")])
def test_blas_thread_count_does_not_change_any_hash(threads, spin):
    """Nor OpenBLAS's spin (cvmvm.vm.blas): with a short one a traced run hashes beside every BLAS thread."""
    env = dict(os.environ, OPENBLAS_THREAD_TIMEOUT=spin)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = threads
    code = SCRIPT.format(fixtures=str(REPO / "fixtures"), repo=str(REPO))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=600)
    got = [json.loads(line) for line in out.stdout.splitlines()]
    want = golden("perf")[:2] + golden("digits")[:4]
    assert got == want


@pytest.mark.parametrize("order", ["<", ">"])
def test_uint64_input_saturates_in_either_byte_order(order):
    # 2^64 - 1 must clip to the precision's top, not wrap to -1 through int64, whatever the byte order.
    model = generate.load_fixture_model("digits")
    x = generate.load_fixture_inputs("digits")[0]
    big = np.where(x > 0, np.uint64(2**64 - 1), np.uint64(0)).astype(order + "u8")
    top = np.where(x > 0, 2 ** (model.inputs["data"].precision - 1) - 1, 0).astype(np.int32)
    assert generate.golden_record("u64", model, {"data": big}) == generate.golden_record("u64", model, {"data": top})


@pytest.mark.parametrize("ring", [hashworker.RING_BYTES, 3 << 19, 1 << 18])
def test_repeated_traced_runs_never_depend_on_hashing_timing(monkeypatch, ring):
    """The trace hands large bodies to the hashing process and goes on, while execution frees their
    tensors: repeated runs over every input layout give the golden trace each time, with the
    default ring and with one so small that bodies wait for earlier blocks, wrap around it, or do
    not fit and are hashed inline (a block read after its bytes were reused would show here)."""
    worker = hashworker.HashWorker(ring)
    monkeypatch.setattr(hashworker, "_worker", worker)
    assert worker.wait_ready(30) and not worker.broken
    model = generate.load_fixture_model("perf")
    want = golden("perf")[0]
    x = generate.load_fixture_inputs("perf")[int(want["id"].split("/")[1])]
    layouts = [np.ascontiguousarray(x), np.asfortranarray(x), strided(x), x.astype(x.dtype.newbyteorder())]
    try:
        for _ in range(3):
            for value in layouts:
                result = model.run({"data": value}, trace=True)
                assert [e.commitment.hex() for e in result.trace.entries] == want["trace"]
                assert result.trace.root.hex() == want["trace_root"]
        assert not worker.broken and worker.answered > 0
    finally:
        worker.close()
