"""Export specifics: inference-only output (training ops stripped), decompositions of private
ops checked by onnxruntime, refusals, symbolic dims, external data for large models."""
import numpy as np
import pytest

from tests.exporters.helpers import make_model, onnx, ort_run, tensor

from portable.device import cpu
from portable.errors import UnknownOpError
from portable.executor.compiled import CompiledGraph
from portable.ir import GraphBuilder

from exporters.onnx import exporter, export_graph, import_graph

RNG = np.random.default_rng(3)


def _ours(graph, feeds):
    return [np.array(o) for o in CompiledGraph(graph, cpu()).run(feeds)]


def test_training_graph_exports_for_inference():
    b = GraphBuilder("bn")
    x = b.input("x", (4, 3, 5, 5))
    params = {name: b.input(name, (3,)) for name in ("scale", "bias", "mean", "var")}
    y, _, _ = b.op("BatchNormalization", x, *params.values(), outputs=["y", "rm", "rv"],
                   training_mode=1, momentum=0.9)
    z, _ = b.op("Dropout", y, b.const(np.float32(0.5)), outputs=["z", "mask"],
                training_mode=1)
    graph = b.build(["z"])
    values = {"scale": RNG.uniform(0.5, 2, 3).astype(np.float32),
              "bias": RNG.normal(size=3).astype(np.float32),
              "mean": RNG.normal(size=3).astype(np.float32),
              "var": RNG.uniform(0.5, 2, 3).astype(np.float32)}
    model = export_graph(graph, values)
    kinds = [n.op_type for n in model.graph.node]
    assert "Dropout" not in kinds
    (bn,) = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
    assert list(bn.output) == ["y"] and all(a.i == 0 for a in bn.attribute
                                            if a.name == "training_mode")
    x_value = RNG.normal(size=(4, 3, 5, 5)).astype(np.float32)
    expected = (x_value - values["mean"][:, None, None]) / np.sqrt(
        values["var"][:, None, None] + 1e-5) * values["scale"][:, None, None] + \
        values["bias"][:, None, None]
    np.testing.assert_allclose(ort_run(model, {"x": x_value})[0], expected, rtol=1e-4,
                               atol=1e-5)


def test_private_ops_are_decomposed():
    b = GraphBuilder("grads")
    dy = b.input("dy", (2, 3, 2, 2))
    indices = b.const(np.array([[4, 0], [4, 1], [2, 2]], np.int64))
    gathered = b.op("portable.GatherGrad", dy, indices, axis=1, shape=[2, 5, 2])
    sliced = b.op("portable.SliceGrad", b.input("ds", (2, 2)),
                  b.const(np.array([1, 0], np.int64)), b.const(np.array([3, 2], np.int64)),
                  shape=[4, 3])
    mask = b.input("mask", (2, 2), np.bool_)
    dropped = b.op("portable.DropoutGrad", b.input("dd", (2, 2)), mask,
                   b.const(np.float32(0.25)), training_mode=1)
    graph = b.build([gathered, sliced, dropped])
    feeds = {"dy": RNG.normal(size=(2, 3, 2, 2)).astype(np.float32),
             "ds": RNG.normal(size=(2, 2)).astype(np.float32),
             "mask": RNG.random((2, 2)) < 0.5,
             "dd": RNG.normal(size=(2, 2)).astype(np.float32)}
    model = export_graph(graph, opset=18)
    assert not [n for n in model.graph.node if n.domain]
    onnx.shape_inference.infer_shapes(model, strict_mode=True)
    for ours, theirs in zip(_ours(graph, feeds), ort_run(model, feeds)):
        np.testing.assert_allclose(theirs, ours, rtol=1e-6, atol=1e-6)


def test_optimised_graphs_export_their_fused_ops_as_onnx_ops():
    from portable.passes.pipeline import optimize

    b = GraphBuilder("fused")
    x = b.input("x", (2, 3, 8, 8))

    def const(*shape, low=-1.0):
        return b.const(RNG.uniform(low, 1.0, shape).astype(np.float32))

    y = b.op("Conv", x, const(4, 3, 3, 3), const(4), pads=[1, 1, 1, 1])
    y = b.op("BatchNormalization", y, const(4, low=0.5), const(4), const(4),
             const(4, low=0.5))
    y = b.op("Relu", y)
    y = b.op("Sigmoid", b.op("Add", b.op("Mul", y, const(4, 1, 1)), const(1)))
    y = b.op("Relu", b.op("Gemm", b.op("Flatten", y), const(256, 5)))
    graph = b.build([y])
    optimised = optimize(graph, "all")
    fused = {n.op for n in optimised.nodes if n.domain}
    assert fused >= {"portable.FusedConv", "portable.FusedElementwise"}, fused
    x_value = RNG.normal(size=(2, 3, 8, 8)).astype(np.float32)
    model = export_graph(optimised)
    assert not [n for n in model.graph.node if n.domain]
    onnx.shape_inference.infer_shapes(model, strict_mode=True)
    np.testing.assert_allclose(ort_run(model, {"x": x_value})[0],
                               _ours(graph, {"x": x_value})[0], rtol=1e-4, atol=1e-5)


def test_private_op_without_decomposition_is_refused():
    b = GraphBuilder("lrn")
    x = b.input("x", (1, 3, 4, 4))
    y = b.op("portable.LRNGrad", x, x, size=3)
    with pytest.raises(UnknownOpError, match=r"portable.LRNGrad.*private"):
        export_graph(b.build([y]))


@pytest.mark.parametrize("opset", [13, None])
def test_det_exports_as_onnx_det_and_inverse_is_refused(opset):
    b = GraphBuilder("det")
    x = b.input("x", (3, 4, 4))
    graph = b.build([b.op("Det", b.op("Mul", x, x))])
    model = export_graph(graph, opset=opset)
    assert [n.op_type for n in model.graph.node] == ["Mul", "Det"]
    value = RNG.normal(size=(3, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(ort_run(model, {"x": value})[0], _ours(graph, {"x": value})[0],
                               rtol=1e-4, atol=1e-5)
    again, _ = import_graph(model)
    np.testing.assert_allclose(_ours(again, {"x": value})[0], _ours(graph, {"x": value})[0],
                               rtol=1e-6)
    b = GraphBuilder("inverse")
    y = b.op("portable.Inverse", b.input("x", (2, 2)))
    with pytest.raises(UnknownOpError, match=r"portable.Inverse.*private"):
        export_graph(b.build([y]), opset=opset)


def test_reexport_keeps_symbolic_dims():
    w = RNG.normal(size=(4, 3)).astype(np.float32)
    model = make_model([onnx.helper.make_node("MatMul", ["x", "w"], ["h"]),
                        onnx.helper.make_node("Softmax", ["h"], ["y"], axis=-1)],
                       [("x", np.ones((2, 4), np.float32))], ["y"], 17, [tensor("w", w)])
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    graph, params = import_graph(model)
    again = export_graph(graph, params)
    dim = again.graph.input[0].type.tensor_type.shape.dim[0]
    assert dim.dim_param and not dim.HasField("dim_value")
    x = RNG.normal(size=(7, 4)).astype(np.float32)
    np.testing.assert_allclose(ort_run(again, {"x": x})[0], ort_run(model, {"x": x})[0],
                               rtol=1e-5, atol=1e-6)


def test_large_models_keep_tensors_in_a_data_file(tmp_path, monkeypatch):
    monkeypatch.setattr(exporter, "PROTOBUF_LIMIT", 1024)  # "large" = more than 1 KiB here
    b = GraphBuilder("big")
    x = b.input("x", (2, 64))
    y = b.op("MatMul", x, b.input("w", (64, 64)))
    weight = RNG.normal(size=(64, 64)).astype(np.float32)
    path = tmp_path / "big.onnx"
    model = exporter.export_model(b.build([y]), {"w": weight}, path)
    assert (tmp_path / "big.onnx.data").stat().st_size >= weight.nbytes
    assert path.stat().st_size < weight.nbytes
    x_value = RNG.normal(size=(2, 64)).astype(np.float32)
    np.testing.assert_allclose(ort_run(path, {"x": x_value})[0], x_value @ weight, rtol=1e-5)
    assert model.graph.initializer[0].name == "w"
