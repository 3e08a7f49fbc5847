"""Every Cortex reference case (fixtures/reference/cvm) against its expect.cvmvm oracle."""

from __future__ import annotations

import base64
import hashlib

import numpy as np
import pytest

import cvmvm
from tests.reference import cvm_cases, decode_array

CASES = cvm_cases()


def run_case(case):
    params = base64.b64decode(case["params_b64"]) if case["params_b64"] is not None else None
    model = cvmvm.load_cortex(case["graph"], params)
    inputs = {}
    if case["data"] is not None and "data" in model.inputs:
        d = case["data"]
        inputs["data"] = decode_array(d["int32_le_b64"], "<i4", d["shape"])
    return model, model.run(inputs)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_reference_case(case):
    expect = case["expect"]["cvmvm"]
    if expect["status"] == "error":
        with pytest.raises(cvmvm.CvmError):
            run_case(case)
        return
    model, result = run_case(case)
    assert result.ops == expect["ops"] == model.ops
    assert len(result.outputs) == len(expect["outputs"])
    for k, (got, want) in enumerate(zip(result.outputs, expect["outputs"])):
        assert list(got.shape) == want["shape"], f"output {k} shape"
        assert got.dtype == np.dtype("<i4")
        assert hashlib.sha256(got.astype("<i4").tobytes()).hexdigest() == want["sha256"], f"output {k} values"
        if want["precision"] is not None:
            assert model.output_types[k].precision == want["precision"], f"output {k} precision"


def test_case_count():
    assert len(CASES) == 839
