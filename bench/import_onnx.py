"""How long `import_onnx` takes on the fixture models and the pytorch-converted layer models.

    python bench/import_onnx.py [--repeat 5]

Prints, per model, the median wall time of the import itself (parse, fold,
calibrate, lower, verify: the report's ``import_seconds``) and of the
evaluation that fills the report, plus instructions, ops and the model hash.
Needs the onnx extra.  Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from cvmvm import CvmError  # noqa: E402
from cvmvm.importer import import_onnx  # noqa: E402


def cases():
    digits = REPO / "fixtures" / "onnx" / "digits"
    calibration, x, y = (np.load(digits / n) for n in ("calibration.npy", "test.npy", "test_labels.npy"))
    for name in ("digits_mlp", "digits_cnn"):
        yield name, (REPO / "fixtures" / "onnx" / f"{name}.onnx").read_bytes(), calibration, x, y
    base = Path(onnx.__file__).parent / "backend" / "test" / "data" / "pytorch-converted"
    for d in sorted(os.listdir(base)):
        source = (base / d / "model.onnx").read_bytes()
        x = numpy_helper.to_array(onnx.load_tensor(str(base / d / "test_data_set_0" / "input_0.pb")))
        yield d.removeprefix("test_"), source, x, None, None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"{'model':40} {'import ms':>10} {'report ms':>10} {'instr':>6} {'ops':>12}  model hash")
    for name, source, calibration, x, y in cases():
        times, reports = [], []
        try:
            for _ in range(args.repeat):
                r = import_onnx(source, calibration, eval_data=x, eval_labels=y).report
                times.append((r.import_seconds, r.evaluate_seconds))
                reports.append(r)
        except CvmError as e:
            print(f"{name:40} refused: {e.code}")
            continue
        r = reports[0]
        imp = statistics.median(t for t, _ in times) * 1e3
        ev = statistics.median(t for _, t in times) * 1e3
        print(f"{name:40} {imp:10.1f} {ev:10.1f} {r.instructions:6} {r.ops:12}  {r.model_hash[:16]}")
        if r.float_accuracy is not None:
            print(f"{'':40} top-1 float {r.float_accuracy:.2%} quantized {r.quantized_accuracy:.2%} "
                  f"agreement {r.agreement:.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
