"""Every Cortex reference case (fixtures/reference/cvm) against its expect.cvmvm oracle."""

from __future__ import annotations

import hashlib

import pytest

import cvmvm
from isa.types import DTYPES, INT32
from tests.reference import case_inputs, case_params, cvm_cases

CASES = cvm_cases()

def run_case(case):
    model = cvmvm.load_cortex(case["graph"], case_params(case))
    return model, model.run(case_inputs(case, model.inputs))


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
        assert got.dtype == DTYPES[INT32]   # the VM's int32 (native byte order)
        assert hashlib.sha256(got.astype("<i4").tobytes()).hexdigest() == want["sha256"], f"output {k} values"
        if want["precision"] is not None:
            assert model.output_types[k].precision == want["precision"], f"output {k} precision"


def test_case_count():
    assert len(CASES) == 839
