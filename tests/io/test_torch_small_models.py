"""Six small models exported by PyTorch (LeNet, MobileNetV2 at width 0.25, a CIFAR ResNet-18, a
2-layer LSTM, a 2-layer transformer encoder, an MLP) run through the onnx backend and the
Predictor and match PyTorch's recorded output and onnxruntime's, at batch 1 and, through the
symbolic batch dim, at batch 3.

Tolerance: float32 throughout, ``rtol = atol = 1e-4``. Two correct float32 implementations
differ here by at most about 6e-6 (onnxruntime against PyTorch on MobileNetV2, where the
BatchNorm folded into the convolutions changes the rounding), so the bound leaves a wide margin
for a different order of accumulation; outputs are of size 0.1-1 and move by 0.03 or more
between inputs (checked below), so a wrong kernel does not pass within it.

The files are recorded by ``tests/fixtures/torch_small/record.py``; torch is not needed here.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from exporters.onnx import backend
from portable.predict import Predictor

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
HERE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "torch_small")
NAMES = ["lenet", "mobilenetv2_small", "resnet18_small", "lstm", "encoder", "mlp"]
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}


def _path(name: str) -> str:
    return os.path.join(HERE, f"{name}.onnx")


def _recorded(name: str) -> tuple[np.ndarray, np.ndarray]:
    load = lambda kind: np.load(os.path.join(HERE, f"{name}_{kind}.npy"),  # noqa: E731
                                allow_pickle=False)
    return load("input"), load("torch_output")


def _batch3(name: str) -> np.ndarray:
    x, _ = _recorded(name)
    rng = np.random.default_rng(NAMES.index(name))
    return rng.standard_normal((3, *x.shape[1:])).astype(np.float32)


def _onnxruntime(name: str, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(_path(name), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"input": x})
    return y


def _assert_close(got, expected) -> None:
    got = np.asarray(got)
    assert got.shape == expected.shape and got.dtype == expected.dtype == np.float32, (
        got.shape, got.dtype, expected.shape, expected.dtype)
    np.testing.assert_allclose(got, expected, **TOLERANCE)


def test_fixtures_are_small_and_sensitive_to_their_input():
    total = sum(os.path.getsize(_path(name)) for name in NAMES)
    assert total < 6_000_000, total
    for name in NAMES:
        (dim,) = onnx.load(_path(name)).graph.input[0].type.tensor_type.shape.dim[:1]
        assert dim.dim_param == "batch", name
        x, torch_y = _recorded(name)
        assert x.shape[0] == 1 and x.dtype == torch_y.dtype == np.float32, name
        # Outputs that barely depend on the input would let a wrong kernel through.
        y = _onnxruntime(name, _batch3(name))
        assert np.abs(y - y[:1]).max() > 100 * TOLERANCE["atol"], name


@pytest.mark.parametrize("name", NAMES)
def test_onnx_backend_matches_pytorch_and_onnxruntime(name):
    prepared = backend.prepare(onnx.load(_path(name)))
    x, torch_y = _recorded(name)
    (got,) = prepared.run({"input": x})
    _assert_close(got, torch_y)
    _assert_close(got, _onnxruntime(name, x))
    x3 = _batch3(name)  # the same prepared model, a new batch size
    (got3,) = prepared.run({"input": x3})
    _assert_close(got3, _onnxruntime(name, x3))


@pytest.mark.parametrize("name", NAMES)
def test_predictor_matches_pytorch_and_onnxruntime(name):
    x, torch_y = _recorded(name)
    (got,) = Predictor(_path(name)).predict({"input": x})
    _assert_close(got, torch_y)
    x3 = _batch3(name)
    (got3,) = Predictor(_path(name), batch_size=3).predict({"input": x3})
    _assert_close(got3, _onnxruntime(name, x3))
