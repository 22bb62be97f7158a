"""Kernels in two parts (plan-time ``prepare``, run-time ``run``): a plan prepares each step
once and reuses what it built on every run, so the runs after the first must give the answers
the first would. Checked against onnx.reference with new inputs on every run, the same input
array refilled in place, and Conv shapes that pad, crop (stride leaves the last columns
unread) or neither, and through the imperative API's per-signature cache.
"""
from __future__ import annotations

import numpy as np
import pytest

import portable as pt
from portable.backend import KernelContext, PreparedKernel, array_types, kernel_table

onnx = pytest.importorskip("onnx", reason="onnx builds the graphs and its reference checks them")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from exporters.onnx import backend as onnx_backend  # noqa: E402

CONVS = {  # name: (input shape, weight shape, Conv attributes)
    "padded": ((2, 3, 9, 9), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    "cropped": ((1, 3, 10, 10), (5, 3, 3, 3), {"strides": [2, 2]}),
    "asymmetric": ((1, 2, 7, 6), (3, 2, 3, 2), {"pads": [0, 1, 2, 0], "strides": [1, 2]}),
    "pointwise": ((1, 8, 5, 5), (6, 8, 1, 1), {}),
    "grouped": ((1, 4, 6, 6), (4, 2, 3, 3), {"pads": [1, 1, 1, 1], "group": 2}),
}


def _two_conv_model(x_shape, w_shape, attrs, seed=0):
    """Conv -> Relu -> Conv of the same geometry where it fits: the second Conv's input is a
    plan buffer (an arena view), the first's the caller's array."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal(w_shape).astype(np.float32)
    b1 = rng.standard_normal(w_shape[0]).astype(np.float32)
    group = attrs.get("group", 1)
    w2 = rng.standard_normal((w_shape[0], w_shape[0] // group, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], **attrs),
             helper.make_node("Relu", ["c1"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], group=group)]
    graph = helper.make_graph(
        nodes, "two_convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
         numpy_helper.from_array(w2, "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("name", sorted(CONVS))
def test_a_plan_reuses_its_prepared_convs_across_runs(name):
    x_shape, w_shape, attrs = CONVS[name]
    model = _two_conv_model(x_shape, w_shape, attrs)
    reference = ReferenceEvaluator(model)
    rep = onnx_backend.prepare(model)
    rng = np.random.default_rng(1)
    refilled = np.empty(x_shape, np.float32)
    for step in range(4):
        x = rng.standard_normal(x_shape).astype(np.float32)
        if step % 2:  # the same array object, new values: kept views must read them again
            refilled[...] = x
            x = refilled
        (want,) = reference.run(None, {"x": x})
        (got,) = rep.run({"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"run {step}")


def test_imperative_convs_reuse_their_prepared_kernel():
    rng = np.random.default_rng(2)
    model = _two_conv_model((1, 3, 8, 8), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]})
    weight = numpy_helper.to_array(model.graph.initializer[0])
    for step in range(3):
        x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
        got = pt.nd.conv(pt.nd.array(x), pt.nd.array(weight), pads=[1, 1, 1, 1]).asnumpy()
        single = helper.make_model(helper.make_graph(
            [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "one",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
             helper.make_tensor_value_info("w", TensorProto.FLOAT, weight.shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
            opset_imports=[helper.make_opsetid("", 17)])
        (want,) = ReferenceEvaluator(single).run(None, {"x": x, "w": weight})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"call {step}")


def test_calling_a_prepared_kernel_prepares_and_runs_in_one_go():
    table, kernel = kernel_table()
    prepared = []

    def prepare(backend, input_types, output_types, attrs):
        prepared.append((tuple(t.shape for t in input_types), attrs["k"]))
        return attrs["k"] * 2

    @kernel("Scale", prepare=prepare)
    def scale(state, ctx, inputs, outputs, attrs):
        outputs[0][...] = inputs[0] * state

    assert isinstance(table["Scale"], PreparedKernel)
    backend = pt.cpu().backend
    ctx = KernelContext(np, np.random.default_rng(0), backend)
    x, y = np.arange(3.0), np.empty(3)
    table["Scale"](ctx, [x], [y], {"k": 3})  # a call site that planned nothing
    np.testing.assert_array_equal(y, x * 6)
    bound = table["Scale"].bind(backend, array_types([x]), array_types([y]), {"k": 5})
    for _ in range(3):
        bound(ctx, [x], [y], {"k": 5})
    np.testing.assert_array_equal(y, x * 10)
    assert prepared == [(((3,),), 3), (((3,),), 5)]  # the bound kernel prepared once
