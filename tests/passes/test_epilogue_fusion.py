"""Epilogue fusion: Clip with constant bounds, and a residual Add (then an activation), join the
Conv or Gemm before them (``portable.passes.inference_rewrites.FUSE_ACTIVATIONS``).

Graphs are built as ONNX models with onnx.helper, optimised by the pipeline and counted; their
outputs are compared with onnxruntime and onnx.reference. Tolerance: float32, ``rtol = atol =
1e-4`` as the small-model tests use (tests/io/test_torch_small_models.py); float16 against
onnx.reference at ``1e-2``, a few float16 ulps of outputs of size 1-10.
"""
from __future__ import annotations

import collections
import json
import os

import numpy as np
import pytest

from portable.device import cpu
from portable.executor.compiled import CompiledGraph
from portable.ir.graph import TensorType
from portable.passes.pipeline import optimize
from portable.predict.formats import load_graph

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}
FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "torch_small")
RNG = np.random.default_rng(7)
X_SHAPE, Y_SHAPE = (2, 3, 8, 8), (2, 4, 8, 8)


def _rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _model(nodes, inputs, outputs, initializers, opset=17):
    """An ONNX model; ``inputs``/``outputs`` are (name, shape, numpy dtype) triples."""
    def info(name, shape, dtype):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(
            np.dtype(dtype)), shape)
    graph = helper.make_graph(nodes, "g", [info(*i) for i in inputs],
                              [info(*o) for o in outputs],
                              [numpy_helper.from_array(v, k) for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _save(model, tmp_path) -> str:
    path = os.path.join(tmp_path, "model.onnx")
    onnx.save(model, path)
    return path


def _optimized(path, feeds):
    types = {k: TensorType(v.shape, v.dtype) for k, v in feeds.items()}
    return optimize(load_graph(path), "all", debug=True, input_types=types)


def _counts(graph) -> collections.Counter:
    """Ops of a graph; a fused Conv/Gemm is named with its epilogue: ``[activation+Z]``."""
    counts = collections.Counter()
    for node in graph.nodes:
        key = node.op
        if node.op in ("portable.FusedConv", "portable.FusedGemm"):
            z = "+Z" if len(node.inputs) > 3 and node.inputs[3] else ""
            key += f"[{node.attrs.get('activation', '')}{z}]"
        counts[key] += 1
    return counts


def _run_ours(graph, feeds):
    return CompiledGraph(graph, cpu()).run(feeds)


def _check(model, tmp_path, feeds, expected_ops, tolerance=TOLERANCE, with_ort=True):
    """The optimised graph has ``expected_ops`` (a Counter) and computes what onnxruntime and
    onnx.reference compute."""
    path = _save(model, tmp_path)
    graph = _optimized(path, feeds)
    assert _counts(graph) == collections.Counter(expected_ops), _counts(graph)
    got = _run_ours(graph, feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, **tolerance)
    if with_ort:
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        for g, w in zip(got, session.run(None, feeds)):
            np.testing.assert_allclose(g, w, **tolerance)
    return graph


def _conv_weights(bias=True, dtype=np.float32):
    weights = {"w": _rand(4, 3, 3, 3, dtype=dtype)}
    if bias:
        weights["b"] = _rand(4, dtype=dtype)
    return weights


def _conv(bias=True, out="c"):
    return helper.make_node("Conv", ["x", "w", "b"] if bias else ["x", "w"], [out],
                            pads=[1, 1, 1, 1])


# -- Clip -------------------------------------------------------------------------------------


@pytest.mark.parametrize("low,high", [(0.0, 6.0), (-0.5, None), (None, 0.25)],
                         ids=["relu6", "only_min", "only_max"])
def test_clip_with_constant_bounds_fuses_into_conv(tmp_path, low, high):
    inits = _conv_weights()
    names = []
    for key, value in (("lo", low), ("hi", high)):
        if value is not None:
            inits[key] = np.array(value, np.float32)
        names.append(key if value is not None else "")
    while names and not names[-1]:
        names.pop()
    nodes = [_conv(), helper.make_node("Clip", ["c", *names], ["y"])]
    x = {"x": _rand(*X_SHAPE) * 3}
    model = _model(nodes, [("x", X_SHAPE, np.float32)], [("y", Y_SHAPE, np.float32)], inits)
    graph = _check(model, tmp_path, x, {"portable.FusedConv[Clip]": 1})
    (fused,) = graph.nodes
    carried = {k: v for k, v in (("min", low), ("max", high)) if v is not None}
    assert fused.attrs["activation_attrs"] == json.dumps(carried, sort_keys=True)
    y = _run_ours(graph, x)[0]
    # the bounds are met, and both sides of each are reached (the test is not vacuous)
    if low is not None:
        assert y.min() == np.float32(low) and (y > low).any()
    if high is not None:
        assert y.max() == np.float32(high) and (y < high).any()


def test_opset6_clip_with_bound_attributes_fuses(tmp_path):
    nodes = [_conv(), helper.make_node("Clip", ["c"], ["y"], min=-1.0, max=2.0)]
    model = _model(nodes, [("x", X_SHAPE, np.float32)], [("y", Y_SHAPE, np.float32)],
                   _conv_weights(), opset=6)
    _check(model, tmp_path, {"x": _rand(*X_SHAPE)}, {"portable.FusedConv[Clip]": 1})


def test_clip_with_a_runtime_bound_stays_separate(tmp_path):
    inits = _conv_weights()
    inits["lo"] = np.array(0.0, np.float32)
    nodes = [_conv(), helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    model = _model(nodes, [("x", X_SHAPE, np.float32), ("hi", [], np.float32)],
                   [("y", Y_SHAPE, np.float32)], inits)
    feeds = {"x": _rand(*X_SHAPE), "hi": np.array(0.5, np.float32)}
    _check(model, tmp_path, feeds, {"portable.FusedConv[]": 1, "Clip": 1})


def test_conv_output_read_twice_is_not_fused(tmp_path):
    inits = {**_conv_weights(), "lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}
    nodes = [_conv(), helper.make_node("Clip", ["c", "lo", "hi"], ["y"]),
             helper.make_node("Add", ["c", "x2"], ["s"]),
             helper.make_node("Relu", ["c"], ["r"])]
    model = _model(nodes, [("x", X_SHAPE, np.float32), ("x2", Y_SHAPE, np.float32)],
                   [("y", Y_SHAPE, np.float32), ("s", Y_SHAPE, np.float32),
                    ("r", Y_SHAPE, np.float32)], inits)
    feeds = {"x": _rand(*X_SHAPE), "x2": _rand(*Y_SHAPE)}
    _check(model, tmp_path, feeds, {"portable.FusedConv[]": 1, "Clip": 1, "Add": 1, "Relu": 1})


def test_clip_fuses_into_gemm(tmp_path):
    inits = {"b": _rand(5, 4), "c": _rand(5), "lo": np.array(-0.5, np.float32),
             "hi": np.array(0.5, np.float32)}
    nodes = [helper.make_node("Gemm", ["a", "b", "c"], ["g"], transB=1),
             helper.make_node("Clip", ["g", "lo", "hi"], ["y"])]
    model = _model(nodes, [("a", (3, 4), np.float32)], [("y", (3, 5), np.float32)], inits)
    _check(model, tmp_path, {"a": _rand(3, 4)}, {"portable.FusedGemm[Clip]": 1})


def test_float16_clip_fuses(tmp_path):
    inits = {**_conv_weights(dtype=np.float16), "lo": np.array(0.0, np.float16),
             "hi": np.array(1.5, np.float16)}
    nodes = [_conv(), helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    model = _model(nodes, [("x", X_SHAPE, np.float16)], [("y", Y_SHAPE, np.float16)], inits)
    # onnxruntime has no float16 Conv on its CPU provider: onnx.reference alone
    _check(model, tmp_path, {"x": _rand(*X_SHAPE, dtype=np.float16)},
           {"portable.FusedConv[Clip]": 1}, {"rtol": 1e-2, "atol": 1e-2}, with_ort=False)


# -- residual Add -----------------------------------------------------------------------------


@pytest.mark.parametrize("conv_first", [True, False], ids=["conv_first", "conv_second"])
@pytest.mark.parametrize("activation", ["Relu", "", "Clip"])
def test_residual_add_and_activation_fuse(tmp_path, conv_first, activation):
    inits = _conv_weights()
    # Z is an intermediate that dies at the fused node: an output placed over it would be
    # overwritten by the Conv before Z is read.
    nodes = [_conv(), helper.make_node("Sigmoid", ["x2"], ["z"]),
             helper.make_node("Add", ["c", "z"] if conv_first else ["z", "c"],
                              ["s" if activation else "y"])]
    if activation == "Relu":
        nodes.append(helper.make_node("Relu", ["s"], ["y"]))
    elif activation == "Clip":
        inits["hi"] = np.array(1.0, np.float32)
        nodes.append(helper.make_node("Clip", ["s", "", "hi"], ["y"]))
    model = _model(nodes, [("x", X_SHAPE, np.float32), ("x2", Y_SHAPE, np.float32)],
                   [("y", Y_SHAPE, np.float32)], inits)
    feeds = {"x": _rand(*X_SHAPE), "x2": _rand(*Y_SHAPE)}
    graph = _check(model, tmp_path, feeds, {f"portable.FusedConv[{activation}+Z]": 1,
                                            "Sigmoid": 1})
    plan = CompiledGraph(graph, cpu()).plan
    fused = next(n for n in graph.nodes if n.op == "portable.FusedConv")
    z, y = fused.inputs[3], fused.outputs[0]
    nbytes = int(np.prod(Y_SHAPE)) * 4
    assert (plan.offsets[z] + nbytes <= plan.offsets[y]
            or plan.offsets[y] + nbytes <= plan.offsets[z]), "Y must not share Z's storage"


def test_residual_without_bias_keeps_the_bias_slot_empty(tmp_path):
    nodes = [_conv(bias=False), helper.make_node("Add", ["c", "x2"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    model = _model(nodes, [("x", X_SHAPE, np.float32), ("x2", Y_SHAPE, np.float32)],
                   [("y", Y_SHAPE, np.float32)], _conv_weights(bias=False))
    graph = _check(model, tmp_path, {"x": _rand(*X_SHAPE), "x2": _rand(*Y_SHAPE)},
                   {"portable.FusedConv[Relu+Z]": 1})
    (fused,) = graph.nodes
    assert fused.inputs[2] == "" and fused.inputs[3] == "x2"


def test_residual_sum_of_two_fuses_as_add(tmp_path):
    """The residual Sum of a ResNet exported at opset 6 (the model zoo's): Sum(Conv, x2) then
    Relu joins the Conv; a Sum of three does not."""
    nodes = [_conv(), helper.make_node("Sum", ["c", "x2"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"]),
             helper.make_node("Sum", ["y", "x2", "x2"], ["y3"])]
    model = _model(nodes, [("x", X_SHAPE, np.float32), ("x2", Y_SHAPE, np.float32)],
                   [("y3", Y_SHAPE, np.float32)], _conv_weights())
    _check(model, tmp_path, {"x": _rand(*X_SHAPE), "x2": _rand(*Y_SHAPE)},
           {"portable.FusedConv[Relu+Z]": 1, "Sum": 1})


@pytest.mark.parametrize("z_shape", [(1, 4, 1, 1), (1, 1, 8, 8), (2, 4, 1, 8)])
def test_broadcast_residual_is_not_fused(tmp_path, z_shape):
    nodes = [_conv(), helper.make_node("Add", ["c", "z"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    model = _model(nodes, [("x", X_SHAPE, np.float32), ("z", z_shape, np.float32)],
                   [("y", Y_SHAPE, np.float32)], _conv_weights())
    feeds = {"x": _rand(*X_SHAPE), "z": _rand(*z_shape)}
    # the Add and the Relu make one elementwise chain after the Conv
    _check(model, tmp_path, feeds, {"portable.FusedConv[]": 1, "portable.FusedElementwise": 1})


def test_residual_whose_conv_output_is_read_again_is_not_fused(tmp_path):
    nodes = [_conv(), helper.make_node("Add", ["c", "x2"], ["y"]),
             helper.make_node("Neg", ["c"], ["n"])]
    model = _model(nodes, [("x", X_SHAPE, np.float32), ("x2", Y_SHAPE, np.float32)],
                   [("y", Y_SHAPE, np.float32), ("n", Y_SHAPE, np.float32)], _conv_weights())
    _check(model, tmp_path, {"x": _rand(*X_SHAPE), "x2": _rand(*Y_SHAPE)},
           {"portable.FusedConv[]": 1, "Add": 1, "Neg": 1})


def test_activation_before_the_add_stays_before_it(tmp_path):
    """Conv -> Relu -> Add: the Relu applies to the Conv alone, so the Add may not join a
    FusedConv that already has an activation."""
    nodes = [_conv(), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Add", ["r", "x2"], ["y"])]
    model = _model(nodes, [("x", X_SHAPE, np.float32), ("x2", Y_SHAPE, np.float32)],
                   [("y", Y_SHAPE, np.float32)], _conv_weights())
    _check(model, tmp_path, {"x": _rand(*X_SHAPE), "x2": _rand(*Y_SHAPE)},
           {"portable.FusedConv[Relu]": 1, "Add": 1})


# -- the PyTorch fixtures ---------------------------------------------------------------------


@pytest.mark.parametrize("name,expected", [
    # 52 Convs: 35 end in ReLU6 (Clip 0..6 with constant bounds), 11 projections add their
    # block's input (the model's 11 Adds), 6 are linear; no Clip or Add is left.
    ("mobilenetv2_small", {"portable.FusedConv[Clip]": 35, "portable.FusedConv[+Z]": 11,
                           "portable.FusedConv[]": 6, "ReduceMean": 1, "Gemm": 1}),
    # 8 basic blocks: each second Conv adds the shortcut and applies Relu (3 of the shortcuts
    # are 1x1 Convs themselves); the stem and each first Conv apply Relu.
    ("resnet18_small", {"portable.FusedConv[Relu]": 9, "portable.FusedConv[Relu+Z]": 8,
                        "portable.FusedConv[]": 3, "GlobalAveragePool": 1, "Flatten": 1,
                        "Gemm": 1}),
])
def test_torch_small_models_fuse_their_epilogues(name, expected):
    path = os.path.join(FIXTURES, f"{name}.onnx")
    x = np.load(os.path.join(FIXTURES, f"{name}_input.npy"), allow_pickle=False)
    x3 = RNG.standard_normal((3, *x.shape[1:])).astype(np.float32)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for feed in (x, x3):
        graph = _optimized(path, {"input": feed})
        assert _counts(graph) == collections.Counter(expected), _counts(graph)
        (got,) = _run_ours(graph, {"input": feed})
        (want,) = session.run(None, {"input": feed})
        np.testing.assert_allclose(got, want, **TOLERANCE)
        (ref,) = ReferenceEvaluator(path).run(None, {"input": feed})
        np.testing.assert_allclose(got, ref, **TOLERANCE)


@pytest.mark.parametrize("name", ["mobilenetv2_small", "resnet18_small"])
def test_fused_epilogues_export_as_onnx_ops(name):
    """An optimised graph with fused Clips and residuals exports as plain ONNX (Conv, Add,
    Clip with its bounds as constant inputs) that onnxruntime runs to the original's outputs."""
    from exporters.onnx import export_graph

    path = os.path.join(FIXTURES, f"{name}.onnx")
    x = np.load(os.path.join(FIXTURES, f"{name}_input.npy"), allow_pickle=False)
    graph = _optimized(path, {"input": x})
    assert any(len(n.inputs) > 3 and n.inputs[3] for n in graph.nodes)  # residuals fused
    model = export_graph(graph)
    assert not [n for n in model.graph.node if n.domain]
    onnx.checker.check_model(model, full_check=True)
    exported = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
    original = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (got,), (want,) = exported.run(None, {"input": x}), original.run(None, {"input": x})
    np.testing.assert_allclose(got, want, **TOLERANCE)
