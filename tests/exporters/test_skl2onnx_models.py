"""Models that a real exporter wrote: scikit-learn pipelines, linear models, SVMs, trees and
transformers converted by skl2onnx (``tests/fixtures/skl2onnx/record.py`` recorded them; the
tests need neither skl2onnx nor scikit-learn). Each runs through portable's ONNX backend and
its Predictor, and must give onnxruntime's outputs (labels exactly, scores within 1e-5) and
scikit-learn's own predictions (within 1e-4: skl2onnx computes in float32).

Each also survives a round trip: imported, exported again (the opset-3 tree ensembles become
TreeEnsemble of ai.onnx.ml 5) and run on onnxruntime and on portable.

Models whose ops all have OpenCL kernels (the linear and preprocessing ones) also run through
the Predictor on OpenCL; the SVM and tree models are refused there by name (no silent
fallback).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.exporters.helpers import ort_run

from exporters.onnx import backend
from exporters.onnx.exporter import export_graph
from portable.io.onnx.importer import import_graph
from portable.predict import Predictor

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "skl2onnx"
MODELS = sorted(p.stem for p in FIXTURES.glob("*.onnx"))
# models whose every op runs on OpenCL
ON_DEVICE = {"linear_regression", "linear_svc", "logistic_pipeline", "normalizer_l1",
             "normalizer_l2", "normalizer_max", "simple_imputer"}


def _load(name: str):
    data = np.load(FIXTURES / f"{name}.npz")
    model = onnx.load(FIXTURES / f"{name}.onnx")
    return model, data["X"], {k: data[k] for k in data.files if k != "X"}


def _check(got, want, scikit, name):
    assert len(got) == len(want), name
    for j, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype == w.dtype, \
            f"{name} output {j}: {g.dtype}{g.shape} vs onnxruntime's {w.dtype}{w.shape}"
        if w.dtype.kind in "iu":
            np.testing.assert_array_equal(g, w, err_msg=f"{name} output {j}")
        else:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"{name} output {j}")
    # scikit-learn's answers: the label first, then probabilities; or the one prediction
    expected = [scikit[k] for k in ("label", "probabilities", "prediction") if k in scikit]
    for j, want_scikit in enumerate(expected):
        g = np.asarray(got[j])
        if want_scikit.dtype.kind in "iu":
            np.testing.assert_array_equal(g, want_scikit, err_msg=f"{name}: scikit-learn")
        else:
            np.testing.assert_allclose(g.reshape(want_scikit.shape), want_scikit, atol=1e-4,
                                       err_msg=f"{name}: scikit-learn")


def test_fixtures_are_present():
    assert len(MODELS) >= 12, f"skl2onnx fixtures missing in {FIXTURES}: {MODELS}"


@pytest.mark.parametrize("name", MODELS)
def test_backend_matches_onnxruntime_and_scikit_learn(name):
    model, x, scikit = _load(name)
    want = ort_run(model, {model.graph.input[0].name: x})
    got = backend.prepare(model).run([x])
    _check(got, want, scikit, name)


@pytest.mark.parametrize("name", MODELS)
def test_predictor_matches_onnxruntime(name):
    model, x, scikit = _load(name)
    want = ort_run(model, {model.graph.input[0].name: x})
    predictor = Predictor(FIXTURES / f"{name}.onnx", batch_size=len(x))
    _check(predictor.predict(x), want, scikit, name)


@pytest.mark.parametrize("name", MODELS)
def test_exported_again_matches(name):
    model, x, scikit = _load(name)
    want = ort_run(model, {model.graph.input[0].name: x})
    graph, params = import_graph(model)
    exported = export_graph(graph, params, dynamic_batch=True)
    _check(ort_run(exported, {exported.graph.input[0].name: x}), want, scikit, name)
    _check(backend.prepare(exported).run([x]), want, scikit, name)


def _opencl():
    pytest.importorskip("pyopencl", reason="pyopencl is not installed")
    import portable as pt
    from portable.errors import BackendError

    try:
        device = pt.opencl(0)
        device.backend
    except BackendError as exc:
        pytest.skip(f"no OpenCL device: {exc}")
    return device


@pytest.mark.parametrize("name", MODELS)
def test_predictor_on_opencl(name):
    from portable.errors import BackendError

    device = _opencl()
    model, x, scikit = _load(name)
    if name not in ON_DEVICE:
        with pytest.raises(BackendError, match="ai.onnx.ml") as caught:
            Predictor(FIXTURES / f"{name}.onnx", device=device, batch_size=len(x)).predict(x)
        assert "opencl" in str(caught.value)
        return
    want = ort_run(model, {model.graph.input[0].name: x})
    predictor = Predictor(FIXTURES / f"{name}.onnx", device=device, batch_size=len(x))
    got = predictor.predict(x)
    for j, (g, w) in enumerate(zip(got, want)):  # (device float32: within 1e-4)
        assert g.shape == w.shape and g.dtype == w.dtype, f"{name} output {j}"
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"{name} output {j}")
