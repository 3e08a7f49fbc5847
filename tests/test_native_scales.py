"""The native format's float scales (docs/FORMAT.md 1.6): bytes, hash, and every way to get them wrong."""

from __future__ import annotations

import hashlib
import struct

import msgpack
import pytest

from isa.errors import CvmError
from serializer import native
from serializer.model import with_scales

EXAMPLE = bytes.fromhex(
    "87a6666f726d6174a563766d766da776657273696f6e01a369736101a6696e70"
    "7574739184a46e616d65a178a56474797065a5696e743332a573686170659202"
    "03a9707265636973696f6e08a6706172616d739186a46e616d65a177a5647479"
    "7065a5696e743332a57368617065920203a9707265636973696f6e08a773746f"
    "72616765a4696e7438a464617461c40601817f0005fda4636f64659285a26f70"
    "04a46e616d65a3616464a2696e920001a36f75749102a561747472738085a26f"
    "7008a46e616d65a27273a2696e9102a36f75749103a5617474727383a9707265"
    "636973696f6e08a973686966745f62697401a769735f7369676ec3a76f757470"
    "7574739103")
SCALED = bytes.fromhex(
    "88a6666f726d6174a563766d766da776657273696f6e01a369736101a6696e70"
    "7574739184a46e616d65a178a56474797065a5696e743332a573686170659202"
    "03a9707265636973696f6e08a6706172616d739186a46e616d65a177a5647479"
    "7065a5696e743332a57368617065920203a9707265636973696f6e08a773746f"
    "72616765a4696e7438a464617461c40601817f0005fda4636f64659285a26f70"
    "04a46e616d65a3616464a2696e920001a36f75749102a561747472738085a26f"
    "7008a46e616d65a27273a2696e9102a36f75749103a5617474727383a9707265"
    "636973696f6e08a973686966745f62697401a769735f7369676ec3a76f757470"
    "7574739103a67363616c657382a6696e7075747391c408000000000000903fa7"
    "6f75747075747391c408000000000000a03f")


def test_format_example_bytes_and_hash():
    model = with_scales(native.decode(EXAMPLE), [2.0 ** -6], [2.0 ** -5])
    assert native.encode(model) == SCALED
    assert hashlib.sha256(SCALED).hexdigest() == "1ea8a1dc1eee2fc3be15e77dc00aaf036314c86e9bb12ed861b592c4ecc905e4"
    decoded = native.decode(SCALED)
    assert decoded.scales.inputs == (2.0 ** -6,) and decoded.scales.outputs == (2.0 ** -5,)
    assert native.is_native(SCALED) and native.is_native(EXAMPLE)


def test_a_model_without_scales_keeps_its_bytes():
    model = native.decode(EXAMPLE)
    assert model.scales is None
    assert native.encode(with_scales(model, [None], [None])) == EXAMPLE
    assert hashlib.sha256(EXAMPLE).hexdigest() == "07cabf081a0470d3870832d6131ba03de417a41d671bc4f0907197e007a43e63"


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
