"""Op-table cases: FlexAttention (ai.onnx.preview).

Cases without subgraphs go to onnx.reference as they are. A case with score_mod or prob_mod
carries its body twice, from one spec: as a portable Graph (the node's attribute) and as a
GraphProto, with which its reference runs the same FlexAttention node through onnx.reference.
onnx.reference's FlexAttention runs a body without the enclosing scope, so the case whose body
reads an outer value through a captured input computes its reference with onnx.reference's
own FlexAttention math (``_compute_flex_attention``) and the body written in NumPy.
FlexAttention is not differentiable (its gradient would differentiate the user's bodies).
"""
from __future__ import annotations

import numpy as np

from portable.ir.graph import Graph, Node, TensorType
from tests.ops.harness import Case, rand

OP = "ai.onnx.preview.FlexAttention"
B, H, L, S, E = 2, 2, 3, 4, 4


def _qkv(q_heads=H, kv_heads=H, v_head=E, seed=0, dtype=np.float32):
    return [rand(B, q_heads, L, E, seed=seed, dtype=dtype),
            rand(B, kv_heads, S, E, seed=seed + 1, dtype=dtype),
            rand(B, kv_heads, S, v_head, seed=seed + 2, dtype=dtype)]


class _Body:
    """One body spec: nodes (op, inputs, outputs, attrs), float32 initializers, the input
    name, the output name and captured names; as a portable Graph and as a GraphProto."""

    def __init__(self, name, nodes, consts, captures=()):
        self.name, self.nodes, self.consts, self.captures = name, nodes, consts, captures

    def graph(self, shape):
        inputs = [("x", TensorType(shape, "float32"))] + \
            [(c, TensorType(shape, "float32")) for c in self.captures]
        return Graph(nodes=tuple(Node(op, ins, outs, attrs, f"n{i}")
                                 for i, (op, ins, outs, attrs) in enumerate(self.nodes)),
                     inputs=tuple(inputs), outputs=("y",), name=self.name,
                     initializers={k: np.asarray(v, np.float32) for k, v in self.consts.items()},
                     captures=tuple(self.captures))

    def proto(self):
        from onnx import TensorProto, helper, numpy_helper

        return helper.make_graph(
            [helper.make_node(op, ins, outs, **attrs) for op, ins, outs, attrs in self.nodes],
            self.name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(np.asarray(v, np.float32), k)
             for k, v in self.consts.items()])


# Gemma-2's soft cap: tanh(x / cap) cap
_SOFT_CAP = _Body("soft_cap", [("Div", ("x", "cap"), ("d",), {}), ("Tanh", ("d",), ("t",), {}),
                               ("Mul", ("t", "cap"), ("y",), {})], {"cap": 0.7})
# probabilities squared, then scaled (rows no longer sum to one)
_PROB_SQUARE = _Body("prob_square", [("Mul", ("x", "x"), ("sq",), {}),
                                     ("Mul", ("sq", "half"), ("y",), {})], {"half": 0.5})
# a bias read from the enclosing graph through a captured input
_OUTER_BIAS = _Body("outer_bias", [("Add", ("x", "bias"), ("y",), {})], {}, captures=("bias",))


def _with_bodies(mods: dict):
    """The node attributes (portable Graphs) and the onnx.reference check of ``mods``
    ({attr: _Body}) for the scores shape of the case's inputs."""
    def attrs_for(shape, extra):
        return {**extra, **{attr: body.graph(shape) for attr, body in mods.items()}}

    def reference(inputs, attrs):
        import onnx
        from onnx import helper
        from onnx.reference import ReferenceEvaluator

        plain = {k: v for k, v in attrs.items() if not isinstance(v, Graph)}
        node = helper.make_node("FlexAttention", ["q", "k", "v"], ["y"],
                                domain="ai.onnx.preview", **plain)
        for attr, body in mods.items():
            node.attribute.append(helper.make_attribute(attr, body.proto()))
        typed = [helper.make_tensor_value_info(
            n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in zip("qkv", inputs)]
        model = helper.make_model(
            helper.make_graph([node], "case", typed, [helper.make_tensor_value_info(
                "y", onnx.TensorProto.UNDEFINED, None)]),
            opset_imports=[helper.make_opsetid("", 26),
                           helper.make_opsetid("ai.onnx.preview", 1)])
        return ReferenceEvaluator(model).run(None, dict(zip("qkv", inputs)))
    return attrs_for, reference


class _NumpyBody:
    """A body for onnx.reference's FlexAttention math, computed in NumPy."""

    input_names = ["x"]

    def __init__(self, fn):
        self.fn = fn

    def run(self, _outputs, feeds, attributes=None):
        return [self.fn(feeds["x"])]


def _outer_bias_reference(inputs, attrs):
    from onnx.reference.ops.aionnx_preview.op_flex_attention import _compute_flex_attention

    q, k, v, bias = inputs
    return list(_compute_flex_attention(q, k, v, scale=attrs.get("scale"),
                                        score_mod=_NumpyBody(lambda x: x + bias)))


_cap_attrs, _cap_reference = _with_bodies({"score_mod": _SOFT_CAP})
_prob_attrs, _prob_reference = _with_bodies({"prob_mod": _PROB_SQUARE})
_both_attrs, _both_reference = _with_bodies({"score_mod": _SOFT_CAP, "prob_mod": _PROB_SQUARE})

CASES = [
    Case(OP, _qkv(), grad=False, name="mha"),
    Case(OP, _qkv(q_heads=4, kv_heads=2, v_head=3), attrs={"scale": 0.3}, grad=False,
         name="gqa_scaled_v_head_size"),
    Case(OP, _qkv(q_heads=4, kv_heads=1), attrs={"softmax_precision": 11}, grad=False,
         name="mqa_softmax_in_double"),
    Case(OP, _qkv(dtype=np.float16), grad=False, rtol=2e-3, atol=2e-3,
         name="float16_softmax_in_float32"),
    Case(OP, _qkv(dtype=np.float64), grad=False, rtol=1e-10, atol=1e-12, name="double"),
    Case(OP, _qkv(), attrs=_cap_attrs((B, H, L, S), {}), reference=_cap_reference,
         grad=False, name="score_mod_soft_cap"),
    Case(OP, _qkv(q_heads=4, kv_heads=2), attrs=_prob_attrs((B, 4, L, S), {"scale": 0.5}),
         reference=_prob_reference, grad=False, name="prob_mod_gqa"),
    Case(OP, _qkv(seed=3), attrs=_both_attrs((B, H, L, S), {}), reference=_both_reference,
         grad=False, name="score_mod_and_prob_mod"),
    Case(OP, _qkv(seed=5) + [rand(B, H, L, S, seed=9)],
         attrs={"score_mod": _OUTER_BIAS.graph((B, H, L, S))}, reference=_outer_bias_reference,
         grad=False, name="score_mod_captured_bias"),
]
