"""The reference models give exactly the Cortex runtime's recorded outputs.

digits: all 297 test images (and every intermediate tensor of images 0-3);
perf and perf-large: all 4 inputs each.  Their convolutions take float32
GEMMs in 1 and 2 chunks (perf) and up to 5 (perf-large).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "fixtures" / "models"
from tests.fixture_script import generate  # noqa: E402

from cvmvm.vm.execute import execute  # noqa: E402


@pytest.fixture(scope="module")
def digits():
    return generate.load_fixture_model("digits"), generate.load_fixture_inputs("digits")


def test_digits_every_test_image(digits):
    model, images = digits
    want = np.load(MODELS / "digits" / "expected_outputs.npy")
    got = np.concatenate([model.run({"data": x}).outputs[0] for x in images])
    assert got.dtype == np.int32
    assert np.array_equal(got, want)
    labels = np.load(MODELS / "digits" / "test_labels.npy")
    assert int((got.argmax(axis=1) == labels).sum()) == 284     # README: 95.62 % quantized


def test_digits_every_intermediate_of_the_first_images(digits):
    model, images = digits
    recorded = np.load(MODELS / "digits" / "intermediates.npz")
    program = model.program
    names = {t: step.name for step in program.steps for t in step.outputs}
    for k in range(4):
        seen: dict[str, np.ndarray] = {}
        execute(program, {"data": images[k]}, lambda t, v: seen.__setitem__(names[t], v) if t in names else None)
        keys = [key for key in recorded.files if key.startswith(f"img{k}/")]
        assert len(keys) == len(program.steps)
        for key in keys:
            assert np.array_equal(seen[key.split("/", 1)[1]], recorded[key]), key


@pytest.mark.parametrize("name, count", [("perf", 4), ("perf-large", 4)])
def test_perf_models(name, count):
    model = generate.load_fixture_model(name)
    inputs = generate.load_fixture_inputs(name)
    want = np.load(MODELS / name / "expected_outputs.npy")
    gemms = {step.op.name: [] for step in model.program.steps}
    for step in model.program.steps:
        gemms[step.op.name].append(step.plan.gemm if step.op.name == "conv2d" else step.plan)
    chunkings = {plan.chunks for plan in gemms["conv2d"]}
    assert {plan.path for plan in gemms["conv2d"] + gemms.get("dense", [])} == {"f32"}
    assert chunkings == ({1, 2} if name == "perf" else {1, 2, 3, 5})
    for k in range(count):
        traced = k % 2 == 1          # hashing in the background must not change a value
        (y,) = model.run({"data": inputs[k]}, trace=traced).outputs
        assert np.array_equal(y.reshape(-1), want[k].reshape(-1)), f"{name} input {k}"
