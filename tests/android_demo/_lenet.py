"""A LeNet trained by ``portable train`` on digits (3 epochs: seconds), as ONNX and as a
deployment file with the same weights, made once per test session and shared by the demo's and
``portable predict``'s tests."""
from __future__ import annotations

import json
from pathlib import Path

from tests.train._cli import run

EPOCHS = 3  # ~95% on the held-out digits; enough to tell a working model from a broken one


def lenet_models(tmp_path_factory) -> dict[str, Path]:
    """``{"onnx": lenet.onnx, "portable": lenet.portable, "accuracy": float}``.

    The ONNX file comes from ``portable train --export`` (the trained net's own exporter, the
    reference onnxruntime runs), the deployment file from ``portable export`` of that file.
    """
    folder = Path(tmp_path_factory.getbasetemp()) / "android-demo-lenet"
    done = folder / "models.json"
    if not done.is_file():
        folder.mkdir(exist_ok=True)
        onnx_path, deployed = folder / "lenet.onnx", folder / "lenet.portable"
        summary, _ = run("train", "--model", "lenet", "--epochs", EPOCHS, "--no-progress",
                         "--out", folder / "run", "--export", onnx_path, "--json")
        run("export", onnx_path, "-o", deployed, "--json")
        done.write_text(json.dumps({"onnx": str(onnx_path), "portable": str(deployed),
                                    "accuracy": summary["test_accuracy"]}))
    found = json.loads(done.read_text())
    return {k: Path(v) if k != "accuracy" else v for k, v in found.items()}
