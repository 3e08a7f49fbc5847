"""`cvmvm demo`: classify bundled handwritten digits with the bundled model.

The model is the trained digits CNN of the Cortex reference models, converted
to the native format; the images are the first test images of the same data
set (scikit-learn's 8x8 digits), shipped in the package so the demo needs
nothing else.
"""

from __future__ import annotations

import io
import time
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from cvmvm import files
from cvmvm.vm.api import Model, load
from cvmvm.cli.common import traced

EXPORTED_IMAGES = 2  # image0.npy, image1.npy: enough to show a match and a mismatch


def _resource(name: str) -> bytes:
    return (resources.files("cvmvm.cli") / "demo" / name).read_bytes()


def _images() -> np.ndarray:
    return np.load(io.BytesIO(_resource("images.npy")), allow_pickle=False)


def export(out_dir: str) -> list[str]:
    """Write the demo's model and its first images into ``out_dir``, for trying every other command."""
    outputs = files.Outputs()
    folder = outputs.directory(out_dir, "--export", r"digits\.cvm|image[0-9]+\.npy")
    outputs.put_in(folder, "digits.cvm", _resource("digits.cvm"))
    written = [str(Path(out_dir) / "digits.cvm")]
    for k, image in enumerate(_images()[:EXPORTED_IMAGES]):
        outputs.put_in(folder, f"image{k}.npy", files.npy_bytes(image))
        written.append(str(Path(out_dir) / f"image{k}.npy"))
    outputs.commit()
    return written


def demo_model_and_images() -> tuple[Model, np.ndarray]:
    """The bundled digits model and its images (also the source of ``cvmvm tx demo``)."""
    return load(_resource("digits.cvm")), _images()


def run_demo() -> dict[str, Any]:
    start = time.perf_counter()
    model, images = demo_model_and_images()
    labels = np.load(io.BytesIO(_resource("labels.npy")), allow_pickle=False)
    rows = []
    for k, (image, label) in enumerate(zip(images, labels)):
        result = model.run({"data": image}, trace=True)
        logits = result.outputs[0][0]
        rows.append({"image": k, "label": int(label), "prediction": int(np.argmax(logits)),
                     "output_hash": result.output_hash.hex(), "trace_root": traced(result).root.hex()})
    correct = sum(r["prediction"] == r["label"] for r in rows)
    return {"model_hash": model.model_hash.hex(), "ops": model.ops, "images": rows,
            "correct": correct, "total": len(rows), "accuracy": correct / len(rows),
            "seconds": round(time.perf_counter() - start, 4)}


def render(info: dict[str, Any]) -> str:
    lines = [f"cvmvm demo: digits CNN, model hash {info['model_hash']}", ""]
    for r in info["images"]:
        mark = "ok " if r["prediction"] == r["label"] else "MISS"
        lines.append(f"  image {r['image']:2d}: predicted {r['prediction']}  label {r['label']}  {mark}"
                     f"  trace root {r['trace_root'][:16]}...")
    lines += ["", f"accuracy {info['correct']}/{info['total']} = {100 * info['accuracy']:.1f} %",
              f"ops per image {info['ops']} (gas {info['ops'] // 20000}), "
              f"{info['total']} traced runs in {info['seconds']:.3f} s"]
    return "\n".join(lines)
