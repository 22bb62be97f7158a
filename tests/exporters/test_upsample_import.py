"""Upsample (ai.onnx versions 7 to 10, deprecated by Resize) is read as Resize and computes
what onnxruntime computes for it; the graph holds no Upsample node."""
import numpy as np
import pytest

from tests.exporters.helpers import make_model, onnx, ort_run, tensor

from portable.errors import OpAttributeError

from exporters.onnx import backend, import_graph

helper = onnx.helper
X = np.random.default_rng(0).normal(size=(1, 2, 3, 4)).astype(np.float32)
SCALES = [1.0, 1.0, 2.0, 3.0]

# name -> (opset, node, initializers)
FORMS = {
    "nearest_7_attribute": (7, helper.make_node("Upsample", ["x"], ["y"], scales=SCALES), []),
    "linear_7_attribute": (7, helper.make_node("Upsample", ["x"], ["y"], mode="linear",
                                               scales=[1.0, 1.0, 2.0, 1.5]), []),
    "nearest_9_input": (9, helper.make_node("Upsample", ["x", "s"], ["y"]),
                        [tensor("s", SCALES)]),
    "linear_9_input": (9, helper.make_node("Upsample", ["x", "s"], ["y"], mode="linear"),
                       [tensor("s", [1.0, 1.0, 2.5, 2.0])]),
}


@pytest.mark.parametrize("name", sorted(FORMS))
def test_upsample_matches_onnxruntime(name):
    opset, node, inits = FORMS[name]
    model = make_model([node], [("x", X)], ["y"], opset, inits)
    expected = ort_run(model, {"x": X})[0]
    got = backend.prepare(model).run({"x": X})[0]
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    graph, _ = import_graph(model)
    assert [n.op for n in graph.nodes] == ["Resize"]


def test_an_unknown_upsample_mode_is_refused_naming_it():
    node = helper.make_node("Upsample", ["x"], ["y"], mode="cubic", scales=SCALES)
    model = make_model([node], [("x", X)], ["y"], 7, [])
    with pytest.raises(OpAttributeError, match=r"Upsample.*mode='cubic'"):
        import_graph(model)
