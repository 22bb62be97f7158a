"""FlexAttention (domain ai.onnx.preview, version 1): scaled dot-product attention over rank-4
inputs whose scores and probabilities pass through optional user subgraphs.

    scores = (Q sqrt(s)) (K sqrt(s))^T         in Q's dtype, then in the softmax dtype
    scores = score_mod(scores)                 when the attribute is given
    probs  = softmax(scores, axis=-1)
    probs  = prob_mod(probs)                   when the attribute is given
    Y      = probs V                           in the softmax dtype, then in V's dtype

The geometry (grouped-query heads, the scale's default 1/sqrt(head size)) is Attention's
(``portable.ops.attention.attention_geometry``, 4-D layout). Semantics follow
``onnx.reference`` (which generates the conformance cases): the scale is applied as
sqrt(float32(scale)) to Q and to K, rounded to Q's dtype; the softmax dtype is
softmax_precision's, else float32 for inputs narrower than 32 bits, else the inputs' own.

The bodies are portable Graphs run by the shared body runner
(``portable/executor/control_flow.py``). Each takes one rank-4 tensor of the scores' shape and
the softmax dtype, then, as every op holding a subgraph, the node's trailing inputs for the
values it reads from enclosing scopes (``portable/ir/graph.py``): the node is
``FlexAttention(Q, K, V, *captures)`` and both bodies read all of the captures, the importer's
one list per node. Each body must give back one tensor of its input's shape and dtype.

Not differentiable: the gradient would have to differentiate the user's bodies, which the
declared ops cannot express as one rule.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.dtypes import ONNX_DTYPES, is_float
from portable.errors import ShapeError
from portable.ir.graph import TensorType
from portable.ops.attention import SOFTMAX_PRECISIONS, AttentionGeometry, attention_geometry
from portable.ops.control_flow import body_types
from portable.ops.registry import Attr, declare

PREVIEW = "ai.onnx.preview"
MOD_BODIES = ("score_mod", "prob_mod")


def flex_geometry(q: tuple, k: tuple, v: tuple, attrs: dict) -> AttentionGeometry:
    """Attention's geometry of a FlexAttention node (rank-4 inputs only).

    Raises:
        ValueError: naming the shapes that do not fit.
    """
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        raise ValueError(f"Q, K and V must be rank 4 (batch, heads, sequence, head size), got "
                         f"{q}, {k}, {v}")
    return attention_geometry(q, k, v, None, None, {"scale": attrs.get("scale")})


def flex_root_scale(geo: AttentionGeometry, dtype: Any) -> float:
    """sqrt(scale) as the reference computes it: in float32, then rounded to ``dtype``."""
    return float(np.asarray(np.sqrt(np.float32(geo.scale)), dtype=dtype))


def flex_softmax_dtype(attrs: dict, q_dtype: Any) -> np.dtype:
    """The dtype of the scores, the softmax and the bodies' tensors: softmax_precision's, else
    float32 for 16-bit inputs, else the inputs' own."""
    precision = attrs.get("softmax_precision")
    if precision is not None:
        return np.dtype(ONNX_DTYPES[precision])
    q_dtype = np.dtype(q_dtype)
    return np.dtype(np.float32) if q_dtype.itemsize < 4 else q_dtype


def scores_type(geo: AttentionGeometry, attrs: dict, q_dtype: Any) -> TensorType:
    """The type of the tensor each body takes and gives: (B, q heads, L, S) in the softmax
    dtype."""
    return TensorType(geo.scores_shape(), flex_softmax_dtype(attrs, q_dtype))


def _body_input_types(attrs: dict, types: list) -> dict[str, list[Any]]:
    """The input types of the node's bodies (the exporter writes the bodies with them)."""
    q, k, v = types[:3]
    scores = scores_type(flex_geometry(q.shape, k.shape, v.shape, attrs), attrs, q.dtype)
    return {attr: [scores] + list(types[3:]) for attr in MOD_BODIES
            if attrs.get(attr) is not None}


def _flex_infer(ctx) -> list[Any]:
    for i in (0, 1, 2):
        if not is_float(ctx.dtype(i)):
            ctx.fail(f"input {ctx.op.input_name(i)!r} must be floating point, got "
                     f"{ctx.dtype(i).name}")
        if ctx.dtype(i) != ctx.dtype(0):
            ctx.fail(f"{ctx.op.input_name(i)} ({ctx.dtype(i).name}) must have Q's dtype "
                     f"{ctx.dtype(0).name}")
    try:
        geo = flex_geometry(ctx.shape(0), ctx.shape(1), ctx.shape(2), ctx.attrs)
    except ValueError as error:
        ctx.fail(str(error))
    precision = ctx.attrs["softmax_precision"]
    if precision is not None and precision not in SOFTMAX_PRECISIONS:
        ctx.fail(f"softmax_precision={precision} is not one of {SOFTMAX_PRECISIONS} (float, "
                 f"float16, double; bfloat16 has no portable dtype)")
    scores = scores_type(geo, ctx.attrs, ctx.dtype(0))
    captured = list(ctx.types[3:])
    for attr in MOD_BODIES:
        body = ctx.attrs[attr]
        if body is None:
            continue
        if len(body.captures) != len(captured):
            ctx.fail(f"{attr} captures {len(body.captures)} outer values, the node gives it "
                     f"{len(captured)}")
        if len(body.outputs) != 1:
            ctx.fail(f"{attr} must have one output, it has {len(body.outputs)}")
        out = body_types(ctx, attr, [scores] + captured)[1][0]
        if out is None:  # known only when the body runs: the kernel checks it then
            continue
        if not isinstance(out, TensorType) or out.dtype != scores.dtype or \
                out.rank != scores.rank or any(d is not None and d != s for d, s in
                                               zip(out.shape, scores.shape)):
            ctx.fail(f"{attr} gives {out!r} for scores {scores!r}; it must keep their shape "
                     f"and dtype")
    return [TensorType((geo.batch, geo.q_heads, geo.q_len, geo.v_head_size), ctx.dtype(0))]


def _flex_dtypes(ctx) -> list[Any]:
    return [ctx.unify([0, 1, 2], [0])]


def check_mod_output(attr: str, value: Any, scores: Any) -> None:
    """A body's result at run time must keep the scores' shape and dtype (the type rule
    checks it while planning where the body's types are known then).

    Raises:
        ShapeError: naming the body and both shapes.
    """
    if tuple(value.shape) != tuple(scores.shape) or np.dtype(value.dtype) != \
            np.dtype(scores.dtype):
        raise ShapeError(f"FlexAttention: {attr} gave {tuple(value.shape)} "
                         f"{np.dtype(value.dtype).name} for scores {tuple(scores.shape)} "
                         f"{np.dtype(scores.dtype).name}; it must keep their shape and dtype")


declare("FlexAttention", domain=PREVIEW, inputs=("Q", "K", "V", "captures*"), outputs=("Y",),
        infer=_flex_infer, onnx_since=1, dtype_rule=_flex_dtypes,
        subgraph_types=_body_input_types,
        attrs={"scale": Attr("float", None), "softmax_precision": Attr("int", None),
               "score_mod": Attr("graph", None), "prob_mod": Attr("graph", None)},
        doc="Scaled dot-product attention over rank-4 Q, K, V with optional score_mod and "
            "prob_mod subgraphs on the scores and the probabilities; trailing inputs are the "
            "subgraphs' outer-scope values.")
