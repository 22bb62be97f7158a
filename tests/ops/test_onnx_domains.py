"""Ops of the standard ONNX domains besides ai.onnx (ai.onnx.ml, ai.onnx.preview.training):
imported with their domain's opset, exported back with their domain and its opset, string
keys for LabelEncoder, and the refusals of unknown domains and opsets."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from portable.errors import UnknownOpError  # noqa: E402
from portable.io.onnx.importer import import_graph  # noqa: E402
from tests.ops.harness import Case, run_ours  # noqa: E402

ML, TRAINING = "ai.onnx.ml", "ai.onnx.preview.training"


def _model(nodes, inputs, outputs, imports):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s)
                                           for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v)
                                                   for d, v in imports])


def _binarizer_model(ml_opset=1):
    node = helper.make_node("Binarizer", ["x"], ["y"], domain=ML, threshold=0.5, name="bin")
    relu = helper.make_node("Relu", ["y"], ["z"])
    return _model([node, relu], [("x", TensorProto.FLOAT, [2, 3])],
                  [("z", TensorProto.FLOAT, [2, 3])], [("", 17), (ML, ml_opset)])


def test_ml_ops_import_under_their_qualified_name():
    graph, _ = import_graph(_binarizer_model())
    assert [n.op for n in graph.nodes] == ["ai.onnx.ml.Binarizer", "Relu"]


def test_export_writes_the_domain_and_its_opset():
    from exporters.onnx.exporter import export_graph

    graph, params = import_graph(_binarizer_model())
    model = export_graph(graph, params, opset=17)
    imports = {o.domain: o.version for o in model.opset_import}
    assert imports == {"": 17, ML: 5}
    node = [n for n in model.graph.node if n.op_type == "Binarizer"][0]
    assert node.domain == ML
    again, _ = import_graph(model)
    assert [n.op for n in again.nodes] == ["ai.onnx.ml.Binarizer", "Relu"]
    ort = pytest.importorskip("onnxruntime")
    x = np.array([[0.2, 0.7, 0.5], [1.0, -1.0, 0.51]], np.float32)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], (x > 0.5).astype(np.float32))


def test_a_training_op_exports_with_its_domain():
    from exporters.onnx.exporter import export_graph

    node = helper.make_node("Adagrad", ["r", "t", "x", "g", "h"], ["x2", "h2"],
                            domain=TRAINING, epsilon=1e-5)
    model = _model([node], [("r", TensorProto.FLOAT, []), ("t", TensorProto.INT64, []),
                            ("x", TensorProto.FLOAT, [3]), ("g", TensorProto.FLOAT, [3]),
                            ("h", TensorProto.FLOAT, [3])],
                   [("x2", TensorProto.FLOAT, [3]), ("h2", TensorProto.FLOAT, [3])],
                   [(TRAINING, 1)])  # no ai.onnx import at all, as ONNX's own cases
    graph, _ = import_graph(model)
    assert graph.nodes[0].op == "ai.onnx.preview.training.Adagrad"
    exported = export_graph(graph, {}, opset=17)
    assert {o.domain: o.version for o in exported.opset_import}[TRAINING] == 1
    assert exported.graph.node[0].domain == TRAINING


def test_unknown_domains_and_opsets_are_refused_by_name():
    node = helper.make_node("Scaler", ["x"], ["y"], domain="com.example", name="sc")
    model = _model([node], [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])],
                   [("", 17), ("com.example", 1)])
    with pytest.raises(UnknownOpError, match="'sc'.*'Scaler'.*'com.example'"):
        import_graph(model)
    with pytest.raises(UnknownOpError, match="ai.onnx.ml opset 9"):
        import_graph(_binarizer_model(ml_opset=9))
    missing = _binarizer_model()
    del missing.opset_import[1]
    with pytest.raises(UnknownOpError, match="'bin'.*does not import"):
        import_graph(missing)
    unimplemented = helper.make_node("ZipMap", ["x"], ["y"], domain=ML, name="zip",
                                     classlabels_int64s=[0, 1])
    model = _model([unimplemented], [("x", TensorProto.FLOAT, [2, 2])],
                   [("y", TensorProto.FLOAT, [2, 2])], [("", 17), (ML, 3)])
    with pytest.raises(UnknownOpError, match="'zip'.*'ZipMap'.*'ai.onnx.ml'"):
        import_graph(model)


def test_label_encoder_with_string_keys_on_the_cpu():
    x = np.array(["a", "b", "d", "c"], dtype=object)
    case = Case("ai.onnx.ml.LabelEncoder", [x], {"keys_strings": ["a", "b", "c"],
                                                 "values_int64s": [0, 1, 2],
                                                 "default_int64": 42}, grad=False)
    np.testing.assert_array_equal(run_ours(case)[0], np.array([0, 1, 42, 2], np.int64))
    back = Case("ai.onnx.ml.LabelEncoder", [np.array([2, 0, 5], np.int64)],
                {"keys_int64s": [0, 1, 2], "values_strings": ["zero", "one", "two"]},
                grad=False)
    assert run_ours(back)[0].tolist() == ["two", "zero", "_Unused"]
