"""Every Cortex reference case converts to native and back losslessly, and runs the same from either form."""

from __future__ import annotations

import base64

import pytest

import cvmvm
from serializer import cortex
from tests.reference import cvm_cases, decode_array

OK = [c for c in cvm_cases() if c["expect"]["cvmvm"]["status"] == "ok"]


@pytest.mark.parametrize("case", OK, ids=[c["id"] for c in OK])
def test_cortex_native_cortex_round_trip(case):
    params = base64.b64decode(case["params_b64"]) if case["params_b64"] is not None else None
    original = cvmvm.load_cortex(case["graph"], params)
    native = cvmvm.load(original.canonical_bytes)
    assert native.model_hash == original.model_hash and native.ops == original.ops

    graph, blob = cortex.write_cortex(native.program.model, native.program.types)
    back = cvmvm.load_cortex(cortex.graph_to_json_bytes(graph), blob)
    assert back.canonical_bytes == original.canonical_bytes

    inputs = {}
    if "data" in original.inputs:
        d = case["data"]
        inputs["data"] = decode_array(d["int32_le_b64"], "<i4", d["shape"])
    runs = [m.run(inputs, trace=True) for m in (original, native, back)]
    assert len({(r.output_hash, r.trace.root) for r in runs}) == 1
