"""The nine model-zoo architectures of onnx/backend/test/data/light match the outputs stored
beside them (onnx's backend test feeds arange(n)/n and compares with rtol 1e-3, atol 1e-7)."""
import os

import numpy as np
import pytest

from tests.exporters.helpers import light_input, light_models, onnx

from exporters.onnx import backend


@pytest.mark.parametrize("path", light_models(), ids=lambda p: os.path.basename(p)[6:-5])
def test_light_model_matches_stored_output(path):
    model = onnx.load(path)
    name, x = light_input(model)
    expected = onnx.numpy_helper.to_array(onnx.load_tensor(path[:-5] + "_output_0.pb"))
    rep = backend.prepare(path)
    (got,) = rep.run({name: x})
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-7)


def test_there_are_nine_light_models():
    assert len(light_models()) == 9
