"""Everything a platform must compute byte for byte like every other one, as one JSON object.

    python -m tests.records            (from the repository root; numpy, msgpack, cryptography only)

``records`` maps a stable id to what was computed for it:

- every line of every golden file that ``fixtures/generate.py`` makes (model hash, input and
  trace digests, trace root, output hash, ops), and the sha256 of every other file it makes
  (the demo's package data);
- the demo, run through the command line (model hash, every prediction, output hash, trace root),
  and the sha256 of every file a traced run of its model writes (outputs, tensors, trace, receipt);
- the error code of every Cortex reference case the runtime refuses (a model refused on one
  platform and run on another would split a chain as surely as a different hash).

Nothing here names a hash: the expected values are whatever the host computes in the same run
(tests/test_platforms.py, tests/test_matrix.py), so a format change moves every platform together.
``platform`` says what ran: Python, numpy, the BLAS library numpy loaded, the byte order.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform as _platform
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def platform_info() -> dict[str, Any]:
    """What this interpreter is: versions of Python, numpy and the BLAS numpy actually loaded."""
    import numpy as np

    a = np.ones((64, 64), dtype=np.float64)
    _ = a @ a  # load the BLAS before looking for it
    return {
        "machine": _platform.machine(),
        "byteorder": sys.byteorder,
        "python": _platform.python_version(),
        "numpy": np.__version__,
        "blas": blas_libraries(),
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
    }


def blas_libraries() -> list[str]:
    """The BLAS/LAPACK shared objects mapped into this process, by file name (Linux)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return ["unknown (no /proc/self/maps)"]
    names = set()
    for line in maps.splitlines():
        path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
        base = os.path.basename(path)
        if any(key in base.lower() for key in ("blas", "lapack")):
            names.add(os.path.relpath(os.path.realpath(path), "/") if path.startswith("/usr/lib") else base)
    return sorted(names)


def golden_records() -> dict[str, Any]:
    from tests.fixture_script import generate

    out: dict[str, Any] = {}
    for path, data in sorted(generate.golden_files().items()):
        if path.endswith(".jsonl"):
            for line in data.decode("utf-8").splitlines():
                record = json.loads(line)
                out[f"{path}:{record['id']}"] = record
        else:
            out[path] = {"sha256": hashlib.sha256(data).hexdigest()}
    return out


def demo_record() -> dict[str, Any]:
    run = subprocess.run([sys.executable, "-m", "cvmvm", "demo", "--json"], cwd=REPO,
                         capture_output=True, text=True, timeout=900)
    if run.returncode != 0:
        return {"exit": run.returncode, "stderr": run.stderr[-2000:]}
    info = json.loads(run.stdout)
    info.pop("seconds", None)  # wall time, the one field that may differ
    return info


def files_record() -> dict[str, Any]:
    """The sha256 of every file a traced run of the demo's model writes through the command line:
    its outputs as integers and dequantized, every tensor, the trace and the receipt."""
    import tempfile

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        steps = (["demo", "--export", str(d)],
                 ["run", str(d / "digits.cvm"), "--input", f"data={d / 'image0.npy'}", "--save-outputs",
                  str(d / "outputs"), "--dump-tensors", str(d / "tensors"), "--trace", str(d / "trace.jsonl"),
                  "--receipt", str(d / "run.receipt")],
                 ["run", str(d / "digits.cvm"), "--input", f"data={d / 'image1.npy'}", "--dequantize",
                  "--save-outputs", str(d / "dequantized")])
        for argv in steps:
            run = subprocess.run([sys.executable, "-m", "cvmvm", *argv], cwd=REPO, capture_output=True, text=True,
                                 timeout=900)
            if run.returncode != 0:
                return {"argv": argv, "exit": run.returncode, "stderr": run.stderr[-2000:]}
        for path in sorted(p for p in d.rglob("*") if p.is_file()):
            out[path.relative_to(d).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def refusal_records() -> dict[str, Any]:
    import cvmvm
    from tests.reference import case_inputs, case_params, cvm_cases

    out: dict[str, Any] = {}
    for case in cvm_cases():
        if case["expect"]["cvmvm"]["status"] != "error":
            continue
        try:
            model = cvmvm.load_cortex(case["graph"], case_params(case))
            result = model.run(case_inputs(case, model.inputs))
            out[f"refused:{case['id']}"] = {"accepted": result.output_hash.hex()}
        except cvmvm.CvmError as e:
            out[f"refused:{case['id']}"] = {"code": e.code}
    return out


def main() -> int:
    sys.path.insert(0, str(REPO))
    records = golden_records()
    records["demo"] = demo_record()
    records["files"] = files_record()
    records.update(refusal_records())
    json.dump({"platform": platform_info(), "records": records}, sys.stdout, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
