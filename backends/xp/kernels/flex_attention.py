"""FlexAttention, written once over the array namespace (NumPy and CuPy here; OpenCL registers
the same stages with its own softmax, ``backends/opencl/kernels/flex_attention.py``).

Stages (the semantics are stated in ``portable/ops/flex_attention.py``):
1. Scores: (Q sqrt(s)) (K sqrt(s))^T in Q's dtype, as one batched MatMul per key/value head
   (Q viewed as (B, kv heads, groups * L, E), as Attention does: grouped-query heads never
   copy K or V), then cast to the softmax dtype.
2. score_mod, when given, runs on the scores through the shared body runner on this backend.
3. Softmax over the keys (the backend's hook), then prob_mod likewise.
4. Y = probs V in the softmax dtype, written into Y (which casts to V's dtype).

A body's results are views into its plan's arena, valid until that body runs again; each is
consumed (cast or multiplied) before then, so nothing is copied for it.
"""
from __future__ import annotations

from typing import Any, Callable

from backends.xp.kernels.attention import widened
from backends.xp.kernels.nn import softmax as host_softmax
from portable.backend import kernel_table
from portable.executor.control_flow import body_runner
from portable.ops.flex_attention import (check_mod_output, flex_geometry, flex_root_scale,
                                         flex_softmax_dtype)

kernels, kernel = kernel_table()


def _modified(ctx: Any, attrs: dict, attr: str, value: Any, captured: list) -> Any:
    """``value`` through body ``attr`` when the node has one."""
    body = attrs.get(attr)
    if body is None:
        return value
    result = body_runner(body, ctx.backend).run([value] + captured)[0]
    check_mod_output(attr, result, value)
    return result


def flex_attention(ctx: Any, xp: Any, inputs: list, outputs: list, attrs: dict,
                   softmax: Callable[[Any, Any], Any]) -> None:
    """The FlexAttention stages (module docstring); ``softmax(xp, scores)`` over the last
    axis gives a new array of the scores' dtype."""
    q, k, v = inputs[:3]
    captured = list(inputs[3:])
    y = outputs[0]
    geo = flex_geometry(tuple(q.shape), tuple(k.shape), tuple(v.shape), attrs)
    dtype = q.dtype
    root = dtype.type(flex_root_scale(geo, dtype))
    batch, kv_heads, rows = geo.batch, geo.kv_heads, geo.groups * geo.q_len
    grouped = xp.reshape(xp.multiply(q, root), (batch, kv_heads, rows, geo.head_size))
    logits = xp.matmul(grouped, xp.swapaxes(xp.multiply(k, root), 2, 3))
    wanted = flex_softmax_dtype(attrs, dtype)
    scores = xp.reshape(logits, geo.scores_shape())
    if scores.dtype != wanted:
        scores = scores.astype(wanted)
    scores = _modified(ctx, attrs, "score_mod", scores, captured)
    probs = _modified(ctx, attrs, "prob_mod", softmax(xp, scores), captured)
    values = v if v.dtype == wanted else v.astype(wanted)
    out = xp.matmul(xp.reshape(probs, (batch, kv_heads, rows, geo.kv_len)), values)
    y[...] = xp.reshape(out, y.shape)


def _softmax(xp, scores):
    return host_softmax(xp, scores, -1)


@kernel("ai.onnx.preview.FlexAttention")
def flex_attention_kernel(ctx, inputs, outputs, attrs):
    # (bfloat16 is computed in float32, whose softmax dtype it has anyway)
    widened(ctx.xp, inputs, outputs,
            lambda ins, outs: flex_attention(ctx, ctx.xp, ins, outs, attrs, _softmax))
