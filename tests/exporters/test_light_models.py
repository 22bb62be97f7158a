"""The nine model-zoo architectures of onnx/backend/test/data/light match the outputs stored
beside them (onnx's backend test feeds arange(n)/n and compares with rtol 1e-3, atol 1e-7)."""
import os

import pytest

from tests.exporters.helpers import (assert_light_outputs, light_input, light_models, onnx,
                                    ort_run, with_logits)

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


def test_there_are_nine_light_models():
    assert len(light_models()) == 9
