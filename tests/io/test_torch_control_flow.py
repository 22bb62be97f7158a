"""Control flow exported by PyTorch (a scripted loop, a scripted branch, ``torch.cond``: ONNX
Loop and If whose bodies read outer values) runs through the Predictor and the onnx backend
and matches onnxruntime within 1e-4. The files are recorded by
``tests/fixtures/torch_exported/record.py``; torch is not needed here."""
from __future__ import annotations

import os

import numpy as np
import pytest

from exporters.onnx import backend
from portable.predict import Predictor

ort = pytest.importorskip("onnxruntime")
HERE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "torch_exported")
RNG = np.random.default_rng(7)
X = RNG.standard_normal((3, 4)).astype(np.float32)

CASES = {
    "scripted_loop.onnx": [{"x": X, "steps": np.array(s, np.int64)} for s in (0, 1, 5)],
    "scripted_branch.onnx": [{"x": X, "y": RNG.standard_normal((3, 4)).astype(np.float32)},
                             {"x": -np.abs(X), "y": X}],
    "torch_cond.onnx": [{"x": np.abs(X), "y": X}, {"x": -np.abs(X), "y": X}],
}


def _expected(path, feeds):
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("name", sorted(CASES))
def test_predictor_matches_onnxruntime(name):
    path = os.path.join(HERE, name)
    predictor = Predictor(path, batch_size=None)
    for feeds in CASES[name]:
        got = predictor.predict(feeds)
        for g, e in zip(got, _expected(path, feeds)):
            np.testing.assert_allclose(np.asarray(g), e, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(CASES))
def test_onnx_backend_matches_onnxruntime(name):
    path = os.path.join(HERE, name)
    import onnx

    model = onnx.load(path)
    names = [i.name for i in model.graph.input]
    for feeds in CASES[name]:
        got = backend.prepare(model).run([feeds[n] for n in names])
        for g, e in zip(got, _expected(path, feeds)):
            np.testing.assert_allclose(np.asarray(g), e, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(CASES))
def test_predictor_on_opencl_matches_onnxruntime(name):
    from tests.backends.opencl.conftest import opencl_device

    device = opencl_device()  # (skips, saying why, without pyopencl or a device)
    path = os.path.join(HERE, name)
    predictor = Predictor(path, device=device, batch_size=None)
    for feeds in CASES[name]:
        got = predictor.predict(feeds)
        for g, e in zip(got, _expected(path, feeds)):
            np.testing.assert_allclose(np.asarray(g), e, rtol=1e-4, atol=1e-4)
