"""Every Cortex reference case converts to native and back losslessly, and runs the same from either form."""

from __future__ import annotations

import pytest

import cvmvm
from serializer import cortex
from tests.reference import case_inputs, case_params, cvm_cases

OK = [c for c in cvm_cases() if c["expect"]["cvmvm"]["status"] == "ok"]


@pytest.mark.parametrize("case", OK, ids=[c["id"] for c in OK])
def test_cortex_native_cortex_round_trip(case):
    original = cvmvm.load_cortex(case["graph"], case_params(case))
    native = cvmvm.load(original.canonical_bytes)
    assert native.model_hash == original.model_hash and native.ops == original.ops

    graph, blob = cortex.write_cortex(native.program.model, native.program.types)
    back = cvmvm.load_cortex(cortex.graph_to_json_bytes(graph), blob)
    assert back.canonical_bytes == original.canonical_bytes

    inputs = case_inputs(case, original.inputs)
    runs = [m.run(inputs, trace=True) for m in (original, native, back)]
    assert len({(r.output_hash, r.trace.root) for r in runs}) == 1
