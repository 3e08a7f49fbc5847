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

from cvmvm.importer.api import ImportResult, import_onnx
from cvmvm.importer.lower import Options

__all__ = ["ImportResult", "Options", "import_onnx"]
