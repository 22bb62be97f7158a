"""Bad models around the data-dependent ops give one clear error naming the node (and op),
whether found while planning or only when a run gives the shapes."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import exporters.onnx.backend as backend
from portable.errors import PortableError, ShapeError


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "bad", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _value(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def test_compress_condition_longer_than_the_axis():
    model = _model([helper.make_node("Compress", ["x", "c"], ["y"], axis=0, name="pick")],
                   [_value("x", TensorProto.FLOAT, [3, 2]), _value("c", TensorProto.BOOL, [5])],
                   [_value("y", TensorProto.FLOAT, None)])
    with pytest.raises(ShapeError, match="'pick'.*Compress.*5 entries"):
        backend.prepare(model).run([np.ones((3, 2), np.float32), np.ones(5, bool)])


def test_nms_boxes_of_the_wrong_rank():
    model = _model([helper.make_node("NonMaxSuppression", ["b", "s"], ["y"], name="nms")],
                   [_value("b", TensorProto.FLOAT, [4, 4]),
                    _value("s", TensorProto.FLOAT, [1, 1, 4])],
                   [_value("y", TensorProto.INT64, None)])
    with pytest.raises(ShapeError, match="'nms'.*NonMaxSuppression.*boxes must be"):
        backend.prepare(model).run([np.ones((4, 4), np.float32), np.ones((1, 1, 4), np.float32)])


def test_unique_axis_out_of_range():
    model = _model([helper.make_node("Unique", ["x"], ["y"], axis=3, name="uniq")],
                   [_value("x", TensorProto.FLOAT, [3, 2])], [_value("y", TensorProto.FLOAT, None)])
    with pytest.raises(ShapeError, match="'uniq'.*Unique.*axis 3"):
        backend.prepare(model).run([np.ones((3, 2), np.float32)])


def test_a_later_segment_that_cannot_take_the_run_time_shape():
    # NonZero gives (2, count); a Reshape to (2, 3) fits only when count is 3: the error comes
    # when a run gives another count, and names the Reshape
    model = _model([helper.make_node("NonZero", ["x"], ["where"]),
                    helper.make_node("Reshape", ["where", "shape"], ["y"], name="fixed")],
                   [_value("x", TensorProto.FLOAT, [2, 2])], [_value("y", TensorProto.INT64, None)],
                   [helper.make_tensor("shape", TensorProto.INT64, [2], [2, 3])])
    rep = backend.prepare(model)
    x = np.array([[1, 1], [1, 0]], np.float32)
    np.testing.assert_array_equal(rep.run([x])[0], np.array(np.nonzero(x)))
    with pytest.raises(PortableError, match="'fixed'.*Reshape"):
        rep.run([np.ones((2, 2), np.float32)])
