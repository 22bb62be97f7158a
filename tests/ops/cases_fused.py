"""Op-table cases: the private fused ops that the optimisation passes create.

References are independent of our kernels: NumPy for the elementwise chains and Gemm, and
onnx.reference's Conv followed by the activation in NumPy for FusedConv.
"""
import json

import numpy as np

from portable.ops.fused import encode_body
from tests.ops.harness import Case, rand

ACTIVATIONS = {"Relu": lambda x, a: np.maximum(x, 0),
               "LeakyRelu": lambda x, a: np.where(x > 0, x, a.get("alpha", 0.01) * x),
               "Sigmoid": lambda x, a: 1 / (1 + np.exp(-x)),
               "Tanh": lambda x, a: np.tanh(x), "": lambda x, a: x,
               "Clip": lambda x, a: np.clip(x, a.get("min", -np.inf), a.get("max", np.inf))}


def _chain_reference(inputs, attrs):
    x, scale, shift = inputs
    return [np.tanh(np.maximum(x * scale + shift, 0)).astype(x.dtype)]


def _self_gated_reference(inputs, attrs):
    (x,) = inputs
    return [(x / (1 + np.exp(-x))).astype(x.dtype)]  # x * sigmoid(x), x read at both steps


def _fused_conv_reference(inputs, attrs):
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    conv_attrs = {k: v for k, v in attrs.items() if k not in ("activation", "activation_attrs")}
    names = ["x", "w", "b"][:len(inputs)]
    node = helper.make_node("Conv", names, ["y"], **conv_attrs)
    value_infos = [helper.make_tensor_value_info(n, 1, a.shape) for n, a in zip(names, inputs)]
    model = helper.make_model(helper.make_graph(
        [node], "conv", value_infos, [helper.make_tensor_value_info("y", 1, None)]))
    y = ReferenceEvaluator(model).run(None, dict(zip(names, inputs[:3])))[0]
    if len(inputs) > 3:  # the residual Z, added before the activation
        y = y + inputs[3]
    act = attrs.get("activation", "")
    return [ACTIVATIONS[act](y, json.loads(attrs.get("activation_attrs", "{}"))).astype(y.dtype)]


def _fused_gemm_reference(inputs, attrs):
    a, b, c = inputs
    y = a @ b.T * attrs.get("alpha", 1.0) + c
    return [ACTIVATIONS[attrs["activation"]](y, {}).astype(a.dtype)]


def _fused_conv(name, inputs, activation, activation_attrs=None, **conv_attrs):
    """A FusedConv case (X, W, B?, Z?) against onnx.reference's Conv, Z and the activation."""
    attrs = {**conv_attrs, "activation": activation,
             "activation_attrs": json.dumps(activation_attrs or {})}
    return Case("portable.FusedConv", inputs, attrs=attrs, reference=_fused_conv_reference,
                grad=False, rtol=1e-5, atol=1e-5, name=name)


CHAIN = encode_body([("Mul", [0, 1], {}), ("Add", [-1, 2], {}), ("Relu", [-1], {}),
                     ("Tanh", [-1], {})])
SELF_GATED = encode_body([("Sigmoid", [0], {}), ("Mul", [-1, 0], {})])

CASES = [
    Case("portable.FusedElementwise", [rand(2, 3, 4), rand(3, 1, seed=1), rand(4, seed=2)],
         attrs={"body": CHAIN}, reference=_chain_reference, grad=False, name="chain"),
    Case("portable.FusedElementwise", [rand(3, 5)], attrs={"body": SELF_GATED},
         reference=_self_gated_reference, grad=False, name="reads_input_twice"),
    _fused_conv("relu", [rand(2, 3, 6, 6), rand(4, 3, 3, 3, seed=1), rand(4, seed=2)], "Relu",
                pads=[1, 1, 1, 1], strides=[2, 2]),
    _fused_conv("grouped_leaky", [rand(1, 4, 5, 5), rand(4, 2, 3, 3, seed=1)], "LeakyRelu",
                {"alpha": 0.2}, group=2),
    Case("portable.FusedConv", [rand(1, 3, 4, 4), rand(2, 3, 1, 1, seed=1)],
         reference=_fused_conv_reference, grad=False, rtol=1e-5, atol=1e-5,
         name="pointwise_no_activation"),
    # bias, residual and clamp in one store: tiles with full vectors and ragged edges (81
    # columns, 7 rows), groups, and the 1x1 path that multiplies the input directly
    _fused_conv("relu_residual", [rand(2, 8, 9, 9), rand(7, 8, 3, 3, seed=1), rand(7, seed=2),
                                  rand(2, 7, 9, 9, seed=3)], "Relu", pads=[1, 1, 1, 1]),
    _fused_conv("grouped_clip_residual", [rand(1, 8, 7, 7), rand(6, 4, 3, 3, seed=1),
                                          rand(6, seed=2), rand(1, 6, 7, 7, seed=3)],
                "Clip", {"min": 0.0, "max": 0.5}, pads=[1, 1, 1, 1], group=2),
    _fused_conv("pointwise_clip_max_residual", [rand(1, 20, 5, 5), rand(9, 20, 1, 1, seed=1),
                                                rand(9, seed=2), rand(1, 9, 5, 5, seed=3)],
                "Clip", {"max": 0.3}),
    _fused_conv("pointwise_relu_bias", [rand(2, 20, 4, 5), rand(9, 20, 1, 1, seed=1),
                                        rand(9, seed=2)], "Relu"),
    _fused_conv("depthwise_clip_residual", [rand(1, 4, 6, 6), rand(4, 1, 3, 3, seed=1),
                                            rand(4, seed=2), rand(1, 4, 6, 6, seed=3)],
                "Clip", {"min": 0.0, "max": 0.5}, pads=[1, 1, 1, 1], group=4),
    # a depthwise Conv alone runs its own (direct) kernel; with an activation the GEMM's
    # store cannot apply, the Conv's kernel and then the activation's
    _fused_conv("depthwise_bias", [rand(1, 6, 7, 7), rand(6, 1, 3, 3, seed=1),
                                   rand(6, seed=2)], "", pads=[1, 1, 1, 1], group=6),
    _fused_conv("depthwise_sigmoid", [rand(2, 4, 6, 6), rand(4, 1, 3, 3, seed=1),
                                      rand(4, seed=2)], "Sigmoid", strides=[2, 2], group=4),
    Case("portable.FusedGemm", [rand(3, 4), rand(5, 4, seed=1), rand(5, seed=2)],
         attrs={"transB": 1, "activation": "Sigmoid", "activation_attrs": "{}"},
         reference=_fused_gemm_reference, grad=False, name="sigmoid"),
]
