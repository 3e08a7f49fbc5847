"""fixtures/onnx is what fixtures/onnx/generate.py makes today.

Everything but the scikit-learn MLP is regenerated here bit for bit: the data
splits from images.npy, the CNN by retraining it (elementwise float64 in a
fixed order: the same bytes on any machine), and both golden imports.  The
MLP's training goes through BLAS, so it is checked by its recorded hash only
(``python fixtures/onnx/generate.py --check`` retrains it where the library
versions match the manifest's).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")

HERE = Path(__file__).resolve().parent.parent / "fixtures" / "onnx"
_spec = importlib.util.spec_from_file_location("onnx_fixture_generator", HERE / "generate.py")
generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate)


def test_every_file_has_its_recorded_hash():
    manifest = json.loads((HERE / "MANIFEST.json").read_text())
    files = manifest["files"]
    assert set(files) == {str(p.relative_to(HERE)) for p in HERE.rglob("*")
                          if p.is_file() and p.suffix in (".npy", ".onnx", ".json") and p.name != "MANIFEST.json"}
    for name, digest in files.items():
        assert hashlib.sha256((HERE / name).read_bytes()).hexdigest() == digest, name


@pytest.fixture(scope="module")
def source():
    return np.load(HERE / "digits" / "images.npy"), np.load(HERE / "digits" / "labels.npy")


def test_splits_derive_from_the_images(source):
    for name, data in generate.digits_derived(*source).items():
        assert (HERE / name).read_bytes() == data, name


def test_splits_are_little_endian_whatever_the_host():
    """On s390x the splits came out big-endian ('>f4'), other bytes than the files recorded here."""
    pixels = np.arange(6, dtype=np.float32) / np.float32(16)
    assert generate.npy_bytes(pixels.astype(">f4")) == generate.npy_bytes(pixels)
    assert b"'descr': '<f4'" in generate.npy_bytes(pixels.astype(">f4"))


def test_the_cnn_retrains_to_the_same_bytes(source):
    assert generate.cnn_onnx(generate.cnn_train(*source)) == (HERE / "digits_cnn.onnx").read_bytes()


def test_golden_imports_are_current():
    assert generate.golden({}) == (HERE / "golden.json").read_bytes()
