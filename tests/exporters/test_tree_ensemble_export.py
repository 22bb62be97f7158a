"""Export of the opset-3 tree ensembles, which ai.onnx.ml 5 (the opset portable writes that
domain at) deprecates: each is written as TreeEnsemble plus standard ops
(``portable/io/onnx/tree_export.py``), and onnxruntime must give the exported model's outputs
the same as the original's. What the translation cannot say exactly is refused by name."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.exporters.helpers import ort_run
from tests.ops.cases_ml_models import CASES

from exporters.onnx.exporter import export_graph
from portable.errors import OpError
from portable.io.onnx.importer import import_graph

TREE_CASES = [c for c in CASES if c.op.rsplit(".", 1)[-1].startswith("TreeEnsemble")]


def _one_node(case):
    domain, _, op_type = case.op.rpartition(".")
    x = np.asarray(case.inputs[0])
    outs = [f"out{j}" for j in range(case.outputs)]
    node = helper.make_node(op_type, ["x"], outs, domain=domain, name="trees", **case.attrs)
    graph = helper.make_graph(
        [node], "trees", [helper.make_tensor_value_info(
            "x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
        [onnx.ValueInfoProto(name=o) for o in outs])
    return helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid(domain, 3)]), x


@pytest.mark.parametrize("case", TREE_CASES, ids=[c.id for c in TREE_CASES])
def test_exported_tree_ensemble_matches_the_original(case):
    model, x = _one_node(case)
    graph, params = import_graph(model)
    if x.dtype != np.float32:
        with pytest.raises(OpError, match="only float32 X"):
            export_graph(graph, params)
        return
    exported = export_graph(graph, params)
    assert {n.op_type for n in exported.graph.node if n.domain == "ai.onnx.ml"} == \
        {"TreeEnsemble"}
    want = ort_run(model, {"x": x})
    got = ort_run(exported, {exported.graph.input[0].name: x})
    for j, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, f"{case.id} output {j}"
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{case.id} {j}")


def test_what_treeensemble_cannot_say_is_refused_by_name():
    case = next(c for c in TREE_CASES if c.name == "sum")
    model, _ = _one_node(case)  # (the case sets neither attribute)
    model.graph.node[0].attribute.extend([
        helper.make_attribute("post_transform", "SOFTMAX_ZERO"),
        helper.make_attribute("base_values", [0.5, -0.5])])
    graph, params = import_graph(model)
    with pytest.raises(OpError, match="TreeEnsembleRegressor.*SOFTMAX_ZERO after base"):
        export_graph(graph, params)


def test_string_labels_are_exported_as_string_constants():
    from tests.ops.test_ml_string_labels import CASES as STRING_CASES

    for case in (c for c in STRING_CASES if c.op.endswith("TreeEnsembleClassifier")):
        model, x = _one_node(case)
        exported = export_graph(*import_graph(model))
        want = ort_run(model, {"x": x})
        got = ort_run(exported, {exported.graph.input[0].name: x})
        assert got[0].tolist() == want[0].tolist(), case.id
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6, err_msg=case.id)
