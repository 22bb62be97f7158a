"""The nine model-zoo architectures of onnx/backend/test/data/light match the outputs stored
beside them (onnx's backend test feeds arange(n)/n and compares with rtol 1e-3, atol 1e-7)."""
import os

import numpy as np
import pytest

from tests.exporters.helpers import (assert_light_outputs, light_input, light_models, onnx,
                                    ort_run, with_logits, with_random_weights)

from exporters.onnx import backend


@pytest.mark.parametrize("path", light_models(), ids=lambda p: os.path.basename(p)[6:-5])
def test_light_model_matches_stored_output(path):
    model = with_logits(onnx.load(path))
    name, x = light_input(model)
    expected = onnx.numpy_helper.to_array(onnx.load_tensor(path[:-5] + "_output_0.pb"))
    got = backend.prepare(model).run({name: x})
    assert got[0].shape == expected.shape and got[0].dtype == expected.dtype
    # (where the stored softmax sits on tied logits, onnxruntime's logits are the reference)
    assert_light_outputs(got, [expected, *ort_run(model, {name: x})[1:]], rtol=1e-3, atol=1e-7)


CONCATS = {"densenet121": 58, "inception_v1": 9, "inception_v2": 10, "shufflenet": 3,
           "squeezenet": 8}


@pytest.mark.parametrize("name", sorted(CONCATS))
def test_concats_computed_in_place_match_onnxruntime_with_random_weights(name):
    """At batch 1 every Concat of these nets has its inputs computed straight into their
    slices of its output (no copy). The light models' constant weights make every channel
    alike, so random ones show a channel out of place; the logits are compared."""
    path = next(p for p in light_models() if p.endswith(f"light_{name}.onnx"))
    model = with_logits(with_random_weights(onnx.load(path)))
    input_name, x = light_input(model)
    x = np.random.default_rng(1).uniform(0, 1, x.shape).astype(np.float32)
    rep = backend.prepare(model)
    got = rep.run({input_name: x})[-1]
    want = ort_run(model, {input_name: x})[-1]
    assert len(rep.plan({input_name: x}).plan.concats) == CONCATS[name]
    assert float(np.std(want)) > 1e-3 * float(np.abs(want).max())  # (the logits differ)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * float(np.abs(want).max()))


def test_there_are_nine_light_models():
    assert len(light_models()) == 9
