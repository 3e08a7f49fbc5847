"""Import float ONNX models as quantized CVM programs (needs the ``onnx`` extra).

    from cvmvm.importer import import_onnx, Options
    result = import_onnx("model.onnx", calibration_samples, eval_data=x, eval_labels=y)
    result.model            # a verified cvmvm Model; result.model.canonical_bytes is the .cvm file
    print(result.report.text())

graph.py (ONNX -> nodes and constants, the classifier tail), floateval.py (the
float reference in a fixed order), calibrate.py (shapes, folding, ranges),
quant.py (scales, weights, integer rescaling plans), lower.py (ONNX ops ->
CVM instructions), program.py (the program being built), report.py (float vs quantized), api.py (the pipeline).

May import isa, serializer, cvmvm.files and cvmvm.vm; never cvmvm.tx or cvmvm.cli.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ImportResult", "Options", "import_onnx"]


def __getattr__(name: str) -> Any:
    # Resolved on first use, so that the modules that need no onnx (quant.py's arithmetic) import
    # without the extra; using the pipeline without it raises onnx's ModuleNotFoundError.
    if name in ("ImportResult", "import_onnx"):
        from cvmvm.importer import api
        return getattr(api, name)
    if name == "Options":
        from cvmvm.importer.lower import Options
        return Options
    raise AttributeError(f"module 'cvmvm.importer' has no attribute {name!r}")
