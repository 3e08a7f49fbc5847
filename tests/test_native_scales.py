"""Float scales (docs/FORMAT.md 1.6): their bytes and hash, every way to get them wrong, and running
with float inputs and dequantized outputs."""

from __future__ import annotations

import hashlib
import struct
import warnings
from dataclasses import replace

import msgpack
import numpy as np
import pytest

import cvmvm
from isa.attrs import parse_attrs
from isa.errors import CvmError
from isa.ops.pool import MaxPoolAttrs
from isa.types import TensorType, quantize_float
from serializer import native
from serializer.model import Input, Instr, Scales, with_scales
from serializer.model import Model as ModelIR
from cvmvm.vm.verify import verify
from tests.test_native_format import EXAMPLE, EXAMPLE_HASH

# FORMAT.md 1.6: the example of 1.5 with an eighth key; everything before it is unchanged but the map header.
SCALED = b"\x88" + EXAMPLE[1:] + bytes.fromhex(
    "a67363616c657382a6696e7075747391c408000000000000903fa7"
    "6f75747075747391c408000000000000a03f")


def test_format_example_bytes_and_hash():
    model = with_scales(native.decode(EXAMPLE), [2.0 ** -6], [2.0 ** -5])
    assert native.encode(model) == SCALED
    assert hashlib.sha256(SCALED).hexdigest() == "80052ba384f904493e95ae025d87f9e0b646b41eca57be8414006be9559f1314"
    decoded = native.decode(SCALED)
    assert decoded.scales.inputs == (2.0 ** -6,) and decoded.scales.outputs == (2.0 ** -5,)
    assert native.is_native(SCALED) and native.is_native(EXAMPLE)


def test_a_model_without_scales_keeps_its_bytes():
    model = native.decode(EXAMPLE)
    assert model.scales is None
    assert native.encode(with_scales(model, [None], [None])) == EXAMPLE
    assert hashlib.sha256(EXAMPLE).hexdigest() == EXAMPLE_HASH


def test_one_side_may_have_no_scale():
    model = with_scales(native.decode(EXAMPLE), [None], [0.5])
    again = native.decode(native.encode(model))
    assert again.scales.inputs == (None,) and again.scales.outputs == (0.5,)


def rewired(scales) -> bytes:
    wire = msgpack.unpackb(EXAMPLE, raw=False)
    wire["scales"] = scales
    return msgpack.packb(wire, use_bin_type=True)


def f64(x: float) -> bytes:
    return struct.pack("<d", x)


@pytest.mark.parametrize("scales, code", [
    ({"inputs": [None], "outputs": [None]}, "malformed.noncanonical"),        # all nil: the key must go
    ({"inputs": [f64(0.0)], "outputs": [None]}, "invalid.scale"),
    ({"inputs": [f64(-0.0)], "outputs": [None]}, "invalid.scale"),
    ({"inputs": [f64(-1.0)], "outputs": [None]}, "invalid.scale"),
    ({"inputs": [f64(float("nan"))], "outputs": [None]}, "invalid.scale"),
    ({"inputs": [f64(float("inf"))], "outputs": [None]}, "invalid.scale"),
    ({"inputs": [f64(1.0)[:7]], "outputs": [None]}, "malformed.native"),
    ({"inputs": [f64(1.0) + b"\0"], "outputs": [None]}, "malformed.native"),
    ({"inputs": [1], "outputs": [None]}, "malformed.native"),
    ({"inputs": [f64(1.0), None], "outputs": [None]}, "malformed.native"),   # one entry per input
    ({"inputs": [f64(1.0)], "outputs": []}, "malformed.native"),
    ({"outputs": [None], "inputs": [f64(1.0)]}, "malformed.native"),         # key order
    ({"inputs": [f64(1.0)], "outputs": [None], "x": 1}, "malformed.native"),
    ([f64(1.0)], "malformed.native"),
    (None, "malformed.native"),
])
def test_bad_scales(scales, code):
    with pytest.raises(CvmError) as e:
        native.decode(rewired(scales))
    assert e.value.code == code


def test_scales_must_be_the_last_key():
    wire = msgpack.unpackb(EXAMPLE, raw=False)
    reordered = {"scales": {"inputs": [f64(1.0)], "outputs": [None]}, **wire}
    with pytest.raises(CvmError) as e:
        native.decode(msgpack.packb(reordered, use_bin_type=True))
    assert e.value.code == "malformed.native"


def test_a_float_in_place_of_the_bytes_is_refused():
    with pytest.raises(CvmError) as e:
        native.decode(rewired({"inputs": [1.0], "outputs": [None]}))
    assert e.value.code == "malformed.native"


# -- running with float inputs and outputs ---------------------------------------------------

def test_float_inputs_are_quantized_exactly_as_integers_would_be():
    model = cvmvm.load(SCALED)
    x = np.array([[0.5, -1.0, 2.0], [0.0078125, -0.0078125, 100.0]], dtype=np.float32)
    q = quantize_float(x, 2.0 ** -6, 8)
    assert q.tolist() == [[32, -64, 127], [1, -1, 127]]   # halves away from zero; 100 clips
    by_float = model.run({"x": x}, trace=True)
    by_int = model.run({"x": q}, trace=True)
    assert by_float.output_hash == by_int.output_hash
    assert by_float.trace.root == by_int.trace.root       # the trace sees the integers the program read
    assert model.input_scales == {"x": 2.0 ** -6} and model.output_scales == (2.0 ** -5,)
    (deq,) = by_float.dequantized()
    assert deq.dtype == np.float64
    assert np.array_equal(deq, by_float.outputs[0].astype(np.float64) * 2.0 ** -5)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_every_float_width(dtype):
    x = np.array([[0.25, -0.5, 1.0], [0.0, 1.5, -1.5]], dtype=dtype)
    model = cvmvm.load(SCALED)
    assert np.array_equal(model.run({"x": x}).outputs[0], model.run({"x": quantize_float(x, 2.0 ** -6, 8)}).outputs[0])


@pytest.mark.parametrize("bad, code", [(np.nan, "input.value"), (np.inf, "input.value"), (-np.inf, "input.value")])
def test_non_finite_float_inputs(bad, code):
    x = np.zeros((2, 3), dtype=np.float32)
    x[1, 2] = bad
    with pytest.raises(CvmError) as e:
        cvmvm.load(SCALED).run({"x": x})
    assert e.value.code == code


def test_floats_need_a_scale():
    with pytest.raises(CvmError) as e:
        cvmvm.load(EXAMPLE).run({"x": np.zeros((2, 3), dtype=np.float32)})
    assert e.value.code == "input.dtype"
    result = cvmvm.load(EXAMPLE).run({"x": np.zeros((2, 3), dtype=np.int32)})
    assert result.output_scales == () and result.dequantized()[0] is result.outputs[0]


def test_an_output_without_a_scale_stays_integer():
    model = cvmvm.load(native.encode(with_scales(native.decode(EXAMPLE), [0.5], [None])))
    result = model.run({"x": np.ones((2, 3), dtype=np.float64)})
    assert result.dequantized()[0].dtype == np.int32


def _float_input_model(scales) -> ModelIR:
    x = TensorType((1, 1, 4), None, "float32")
    return ModelIR((Input("x", x),), (), (Instr("max_pool", _pool_attrs(), (0,), (1, 2)),), (1, 2), scales)


def _pool_attrs():
    return parse_attrs(MaxPoolAttrs, {"kernel_shape": [2], "strides": [2], "dilations": [1], "pads": [0, 0],
                                      "auto_pad": "NOTSET", "ceil_mode": 0, "storage_order": 0, "index_axis": 0,
                                      "index_dtype": "int64"}, fill_defaults=False)


@pytest.mark.parametrize("inputs, outputs", [((0.5,), (None, None)),      # a float input
                                             ((None,), (None, 0.5)),      # int64 indices
                                             ((None,), (0.5, None))])     # a float output
def test_scales_only_on_cvm_int32_tensors(inputs, outputs):
    with pytest.raises(CvmError) as e:
        verify(_float_input_model(Scales(inputs, outputs)))
    assert e.value.code == "invalid.scale"


@pytest.mark.parametrize("inputs, outputs", [((1.0, 1.0), (1.0,)), ((1.0,), ()), ((1,), (1.0,)),
                                             ((float("nan"),), (1.0,)), ((0.0,), (1.0,))])
def test_scales_built_in_python_are_checked_too(inputs, outputs):
    model = replace(native.decode(EXAMPLE), scales=Scales(inputs, outputs))
    with pytest.raises(CvmError) as e:
        verify(model)
    assert e.value.code == "invalid.scale"


def test_a_float_input_whose_quotient_overflows_is_clipped_and_reported_exactly():
    # Defect: 1.7e308 at a scale of 2^-6 divided to infinity, and reporting its clipping raised
    # OverflowError (internal.bug).
    x = np.zeros((2, 3), dtype=np.float64)
    x[0, 0], x[1, 1] = 1.7e308, -1.7e308
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = cvmvm.load(SCALED).run({"x": x})
    assert np.array_equal(result.outputs[0], cvmvm.load(SCALED).run({"x": quantize_float(x, 2.0 ** -6, 8)}).outputs[0])
    (clipping,) = result.clipping
    assert (clipping.count, clipping.low, clipping.high) == (2, -int(1.7e308) * 64, int(1.7e308) * 64)
