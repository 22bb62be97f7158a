"""Writes the PyTorch-exported models that tests read without PyTorch installed:
``tests/exporters/data/torch/<name>.onnx`` (TorchScript exporter, opset 17, dynamic batch) and
``<name>.npz`` holding an input ``x`` (batch 3) and PyTorch's output ``y`` for it.

    $ pip install torch && python -m tests.exporters.torch_fixtures
"""
from __future__ import annotations

import io
import os

import numpy as np

from tests.exporters.test_torch_models import MODELS, _exported, build, torch

FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "torch")


def main() -> None:
    os.makedirs(FOLDER, exist_ok=True)
    for name in sorted(MODELS):
        model, inputs = build(name)
        data = _exported(model, inputs(2))
        x = inputs(3)
        with torch.no_grad():
            y = model(x).numpy()
        with open(os.path.join(FOLDER, f"{name}.onnx"), "wb") as handle:
            handle.write(data)
        buffer = io.BytesIO()
        np.savez(buffer, x=x.numpy(), y=y)
        with open(os.path.join(FOLDER, f"{name}.npz"), "wb") as handle:
            handle.write(buffer.getvalue())
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
