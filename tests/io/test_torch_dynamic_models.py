"""Models with data-dependent shapes and symbolic input dims, exported by PyTorch, run through
the Predictor and the onnx backend and match onnxruntime within 1e-4:

- ``detection_head.onnx``: a conv backbone, a score threshold (NonZero/GatherND),
  ``torchvision.ops.nms`` (NonMaxSuppression, then Gather and Slice of the data-dependent
  count of kept boxes) and ``torchvision.ops.roi_align`` (RoiAlign) of the kept boxes feeding a
  classifier; the images below keep 0, 3, 7 and 10 boxes (onnxruntime's count is checked too).
- ``decoder_transformer.onnx``: a 2-layer decoder-only transformer (causal mask, learned
  positions) whose batch and sequence axes are symbolic: planned per input shape.

The files are recorded by ``tests/fixtures/torch_exported/record.py``; torch is not needed here.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from exporters.onnx import backend
from portable.predict import Predictor

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
HERE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "torch_exported")
DETECTION = os.path.join(HERE, "detection_head.onnx")
DECODER = os.path.join(HERE, "decoder_transformer.onnx")

_RNG = np.random.default_rng(3)
# Brighter images score higher: the threshold keeps none of the first, NMS and the cap of ten
# leave 3, 7 and 10 of the others (asserted against onnxruntime below, so a re-recorded fixture
# that stops varying the count fails loudly rather than testing less).
IMAGES = [(_RNG.random((1, 3, 32, 32), dtype=np.float32) * scale) for scale in (0.5, 1, 2, 6)]
KEPT = [0, 3, 7, 10]
SHAPES = [(b, t) for b in (1, 3) for t in (5, 17, 64)]
TOKENS = {shape: _RNG.integers(0, 50, shape, dtype=np.int64) for shape in SHAPES}


def _expected(path, feeds):
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _assert_matches(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g = np.asarray(g)
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, g.dtype, e.shape, e.dtype)
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)


def test_fixtures_hold_the_dynamic_ops():
    ops = {n.op_type for n in onnx.load(DETECTION).graph.node}
    assert {"NonMaxSuppression", "RoiAlign", "NonZero", "GatherND", "Slice"} <= ops
    assert os.path.getsize(DETECTION) < 200_000 and os.path.getsize(DECODER) < 200_000
    (ids,) = onnx.load(DECODER).graph.input
    dims = [d.dim_param for d in ids.type.tensor_type.shape.dim]
    assert dims == ["batch", "sequence"]
    counts = [_expected(DETECTION, {"image": image})[0].shape[0] for image in IMAGES]
    assert counts == KEPT


def _check_detection(predictor):
    for image in IMAGES:
        _assert_matches(predictor.predict({"image": image}), _expected(DETECTION, {"image": image}))


def test_detection_head_predictor_matches_onnxruntime():
    _check_detection(Predictor(DETECTION))


def test_detection_head_predictor_on_opencl_matches_onnxruntime():
    from tests.backends.opencl.conftest import opencl_device

    device = opencl_device()  # (skips, saying why, without pyopencl or a device)
    _check_detection(Predictor(DETECTION, device=device))


def test_detection_head_onnx_backend_matches_onnxruntime():
    prepared = backend.prepare(onnx.load(DETECTION))
    for image in IMAGES:
        _assert_matches(prepared.run([image]), _expected(DETECTION, {"image": image}))


def _check_decoder(predictor):
    for shape in SHAPES:
        feeds = {"input_ids": TOKENS[shape]}
        _assert_matches(predictor.predict(feeds), _expected(DECODER, feeds))
    assert predictor.plans_made == len(SHAPES)  # one plan per input shape, then reused
    feeds = {"input_ids": TOKENS[SHAPES[0]]}
    _assert_matches(predictor.predict(feeds), _expected(DECODER, feeds))
    assert predictor.plans_made == len(SHAPES)


def test_decoder_transformer_predictor_matches_onnxruntime():
    _check_decoder(Predictor(DECODER, batch_size=None))


def test_decoder_transformer_predictor_on_opencl_matches_onnxruntime():
    from tests.backends.opencl.conftest import opencl_device

    device = opencl_device()
    _check_decoder(Predictor(DECODER, device=device, batch_size=None))


def test_decoder_transformer_onnx_backend_matches_onnxruntime():
    prepared = backend.prepare(onnx.load(DECODER))
    for shape in SHAPES:
        feeds = {"input_ids": TOKENS[shape]}
        _assert_matches(prepared.run([feeds["input_ids"]]), _expected(DECODER, feeds))
