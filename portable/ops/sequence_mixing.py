"""Sequence-mixing ops of recent language models: LinearAttention (ONNX 27), CausalConvWithState
(ONNX 27) and SwiGLU (ONNX 28), with their gradients.

SwiGLU's and CausalConvWithState's gradients are written with declared ops (Sigmoid, Conv,
ConvTranspose, portable.ConvGradWeight, Pad, Slice). LinearAttention's state recurrence has no
closed form in declared ops short of unrolling every step, so, as LSTM and GRU do, its gradient
is one private op (``portable.LinearAttentionGrad``) that recomputes the forward states and
backpropagates through time.

LinearAttention follows ``onnx.reference`` (the spec's equations): the state accumulates in
float32 (or float64 for float64 inputs, which the gradient checks use) whatever the input
dtype, present_state takes past_state's dtype (the query's when past_state is absent), and
query head ``h`` reads the state of key/value head ``h // (q_num_heads / kv_num_heads)``.
"""
from __future__ import annotations

import numpy as np

from portable.ir.graph import TensorType
from portable.ops.registry import Attr, declare
from portable.ops.rules import require_float, same_dtype

# -- SwiGLU -------------------------------------------------------------------------------------


def _swiglu_infer(ctx):
    require_float(ctx, 0)
    same_dtype(ctx, (0, 1))
    if ctx.shape(0) != ctx.shape(1):
        ctx.fail(f"A {ctx.shape(0)} and B {ctx.shape(1)} must have the same shape (SwiGLU "
                 f"does not broadcast)")
    return [ctx.type(0)]


def _swiglu_grad(g, dys):
    """Y = A s B with s = sigmoid(alpha A): dB = dY A s, dA = dY B (s + alpha A s (1 - s))."""
    a, b = g.inputs
    dy = dys[0]
    alpha = g.attrs["alpha"]
    s = g.emit("Sigmoid", g.emit("Mul", a, g.scalar(alpha, a)))
    one_minus = g.emit("Sub", g.scalar(1.0, s), s)
    slope = g.emit("Add", s, g.emit("Mul", g.emit("Mul", a, g.scalar(alpha, a)),
                                    g.emit("Mul", s, one_minus)))
    return [g.emit("Mul", g.emit("Mul", dy, b), slope),
            g.emit("Mul", dy, g.emit("Mul", a, s))]


declare("SwiGLU", inputs=("A", "B"), outputs=("Y",), infer=_swiglu_infer,
        attrs={"alpha": Attr("float", 1.0)}, onnx_since=28, grad=_swiglu_grad,
        doc="Y = Swish_alpha(A) * B, A and B of one shape.")

# -- CausalConvWithState ------------------------------------------------------------------------

CAUSAL_CONV_ACTIVATIONS = ("none", "silu", "swish")


def _causal_conv_infer(ctx):
    if ctx.attrs["activation"] not in CAUSAL_CONV_ACTIVATIONS:
        ctx.fail(f"activation {ctx.attrs['activation']!r} is not one of "
                 f"{list(CAUSAL_CONV_ACTIVATIONS)}")
    x, w = ctx.shape(0), ctx.shape(1)
    if len(x) != 3:
        ctx.fail(f"input must be (batch, channels, length), got shape {x}")
    if len(w) != 3 or w[0] != x[1] or w[1] != 1 or w[2] < 1:
        ctx.fail(f"weight must be (channels={x[1]}, 1, k) with k >= 1 (depthwise), got {w}")
    if ctx.has(2) and ctx.shape(2) != (x[1],):
        ctx.fail(f"bias must be one value per channel ({x[1]},), got {ctx.shape(2)}")
    state = (x[0], x[1], w[2] - 1)
    if ctx.has(3) and ctx.shape(3) != state:
        ctx.fail(f"past_state must be (batch, channels, k - 1) = {state}, got {ctx.shape(3)}")
    require_float(ctx, 0)
    dtype = same_dtype(ctx, [i for i in range(4) if ctx.has(i)])
    return [TensorType(x, dtype), TensorType(state, dtype)]


def _causal_conv_grad(g, dys):
    """The op is Conv(group=C) over P = Concat(past_state or zeros, input) (valid windows),
    then the activation; present_state is P's last k - 1 positions. So dZ = dY act'(Z),
    dP = ConvTranspose(dZ, W) plus d_present on its last k - 1 positions, and dW, dbias are
    Conv's; dP splits back into d_past_state and d_input."""
    x, w = g.inputs[:2]
    bias = g.inputs[2] if len(g.inputs) > 2 else None
    past = g.inputs[3] if len(g.inputs) > 3 else None
    dy, dpresent = (list(dys) + [None, None])[:2]
    batch, channels, length = g.shape(x)
    k = g.shape(w)[2]

    def ints(values):
        return g.const(np.asarray(values, np.int64))

    if k == 1:
        padded = x
    elif past is not None:
        padded = g.emit("Concat", past, x, axis=2)
    else:
        padded = g.emit("Pad", x, ints([0, 0, k - 1, 0, 0, 0]))
    if dy is None:
        dz = None
    elif g.attrs["activation"] == "none":
        dz = dy
    else:  # silu: d/dz z s(z) = s + z s (1 - s)
        z = g.emit("Conv", padded, w, bias, group=channels, kernel_shape=[k])
        s = g.emit("Sigmoid", z)
        slope = g.emit("Add", s, g.emit("Mul", z, g.emit("Mul", s, g.emit(
            "Sub", g.scalar(1.0, s), s))))
        dz = g.emit("Mul", dy, slope)
    dpadded = None
    if dz is not None:
        dpadded = g.emit("ConvTranspose", dz, w, group=channels, kernel_shape=[k])
    if dpresent is not None and k > 1:
        spread = g.emit("Pad", dpresent, ints([0, 0, length, 0, 0, 0]))
        dpadded = spread if dpadded is None else g.emit("Add", dpadded, spread)
    if dpadded is None:
        return [None] * len(g.inputs)
    total = length + k - 1
    dx = dpadded if k == 1 else g.emit("Slice", dpadded, ints([k - 1]), ints([total]),
                                       ints([2]))
    dpast = None
    if past is not None and k > 1:
        dpast = g.emit("Slice", dpadded, ints([0]), ints([k - 1]), ints([2]))
    dw = db = None
    if dz is not None:
        dw = g.emit("portable.ConvGradWeight", padded, dz, group=channels, kernel_shape=[k])
        if bias is not None:
            db = g.emit("ReduceSum", dz, ints([0, 2]), keepdims=0)
    zeros = [g.zeros_like(h) if h is not None else None for h in (w, bias)]
    dw = zeros[0] if dw is None else dw
    db = zeros[1] if db is None and bias is not None else db
    return [dx, dw, db, dpast][:len(g.inputs)]


declare("CausalConvWithState", inputs=("input", "weight", "bias?", "past_state?"),
        outputs=("output", "present_state"), infer=_causal_conv_infer,
        attrs={"activation": Attr("string", "none")}, onnx_since=27, grad=_causal_conv_grad,
        doc="Depthwise causal Conv1D over Concat(past_state, input) with an optional SiLU.")

# -- LinearAttention ----------------------------------------------------------------------------

UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")
DECAY, BETA, PAST = 4, 5, 3  # input indices


def rule_flags(update_rule: str) -> tuple[bool, bool]:
    """(gating, delta correction) of an update rule."""
    return update_rule in ("gated", "gated_delta"), update_rule in ("delta", "gated_delta")


def head_dims(query_shape, value_shape, attrs) -> tuple[int, int, int]:
    """(d_k, d_v, group): per-head key and value sizes and query heads per key/value head."""
    q_heads, kv_heads = attrs["q_num_heads"], attrs["kv_num_heads"]
    return (query_shape[-1] // q_heads, value_shape[-1] // kv_heads, q_heads // kv_heads)


def _linear_attention_types(ctx) -> tuple[TensorType, TensorType]:
    attrs = ctx.attrs
    rule, q_heads, kv_heads = attrs["update_rule"], attrs["q_num_heads"], attrs["kv_num_heads"]
    if rule not in UPDATE_RULES:
        ctx.fail(f"update_rule {rule!r} is not one of {list(UPDATE_RULES)}")
    if q_heads <= 0 or kv_heads <= 0 or q_heads % kv_heads:
        ctx.fail(f"q_num_heads ({q_heads}) must be a positive multiple of kv_num_heads "
                 f"({kv_heads})")
    gating, delta = rule_flags(rule)
    for index, needed, what in ((DECAY, gating, "decay"), (BETA, delta, "beta")):
        if needed != ctx.has(index):
            ctx.fail(f"update_rule {rule!r} {'requires' if needed else 'forbids'} the {what} "
                     f"input")
    q, k, v = ctx.shape(0), ctx.shape(1), ctx.shape(2)
    if len(q) != 3 or len(k) != 3 or len(v) != 3:
        ctx.fail("query, key and value must be rank 3 (batch, length, heads * head_size)")
    batch, steps = q[:2]
    if k[:2] != (batch, steps) or v[:2] != (batch, steps):
        ctx.fail(f"query, key and value must share (batch, length) = {(batch, steps)}")
    if q[2] % q_heads or v[2] % kv_heads:
        ctx.fail(f"query's last axis ({q[2]}) must divide by q_num_heads ({q_heads}) and "
                 f"value's ({v[2]}) by kv_num_heads ({kv_heads})")
    d_k, d_v, _ = head_dims(q, v, attrs)
    if k[2] != kv_heads * d_k:
        ctx.fail(f"key's last axis must be kv_num_heads * d_k = {kv_heads * d_k}, got {k[2]}")
    if ctx.has(DECAY) and ctx.shape(DECAY) not in ((batch, steps, kv_heads),
                                                   (batch, steps, kv_heads * d_k)):
        ctx.fail(f"decay must be (batch, length, kv_num_heads[* d_k]), got {ctx.shape(DECAY)}")
    if ctx.has(BETA) and ctx.shape(BETA) not in ((batch, steps, kv_heads), (batch, steps, 1)):
        ctx.fail(f"beta must be (batch, length, kv_num_heads or 1), got {ctx.shape(BETA)}")
    state = (batch, kv_heads, d_k, d_v)
    if ctx.has(PAST) and ctx.shape(PAST) != state:
        ctx.fail(f"past_state must be (batch, kv_num_heads, d_k, d_v) = {state}, got "
                 f"{ctx.shape(PAST)}")
    dtype = same_dtype(ctx, [i for i in (0, 1, 2, DECAY, BETA) if ctx.has(i)])
    if dtype.kind != "f":
        ctx.fail(f"LinearAttention computes in floating point, got {dtype.name}")
    if ctx.has(PAST) and ctx.dtype(PAST).kind != "f":
        ctx.fail(f"past_state must be floating point, got {ctx.dtype(PAST).name}")
    state_dtype = ctx.dtype(PAST) if ctx.has(PAST) else dtype
    return (TensorType((batch, steps, q_heads * d_v), dtype), TensorType(state, state_dtype))


def _linear_attention_infer(ctx):
    return list(_linear_attention_types(ctx))


def _linear_attention_dtypes(ctx):
    """output takes the data's dtype (T); present_state past_state's (S), else T."""
    data = ctx.unify([i for i in (0, 1, 2, DECAY, BETA) if ctx.has(i)], [0])
    state = ctx.dtype(PAST) if ctx.has(PAST) else data
    return [data, state][:len(ctx.outputs)]


def _linear_attention_grad_infer(ctx):
    out, state = _linear_attention_types(ctx)
    for index, expected in ((6, out), (7, state)):
        if ctx.has(index) and ctx.type(index) != expected:
            ctx.fail(f"output gradient {ctx.op.input_name(index)!r} must be {expected!r}")
    batch, steps = ctx.shape(0)[:2]
    kv_heads, dtype = ctx.attrs["kv_num_heads"], out.dtype

    def like(index, default):
        return ctx.type(index) if ctx.has(index) else TensorType(default, dtype)
    return [ctx.type(0), ctx.type(1), ctx.type(2), state,
            like(DECAY, (batch, steps, kv_heads)), like(BETA, (batch, steps, kv_heads))]


def _linear_attention_grad(g, dys):
    inputs = list(g.inputs) + [None] * (6 - len(g.inputs))
    heads = list(dys) + [None] * (2 - len(dys))
    grads = g.emit("portable.LinearAttentionGrad", *inputs, *heads, num_outputs=6,
                   **g.attrs)
    return [grads[i] if handle is not None else None
            for i, handle in enumerate(inputs)][:len(g.inputs)]


_LINEAR_ATTENTION_ATTRS = {
    "chunk_size": Attr("int", 64), "kv_num_heads": Attr("int"), "q_num_heads": Attr("int"),
    "scale": Attr("float", 0.0), "update_rule": Attr("string", "gated_delta"),
}
_LINEAR_ATTENTION_INPUTS = ("query", "key", "value", "past_state?", "decay?", "beta?")

declare("LinearAttention", inputs=_LINEAR_ATTENTION_INPUTS,
        outputs=("output", "present_state"), infer=_linear_attention_infer,
        attrs=_LINEAR_ATTENTION_ATTRS, onnx_since=27, grad=_linear_attention_grad,
        dtype_rule=_linear_attention_dtypes,
        doc="ONNX LinearAttention (linear, gated, delta, gated_delta rules, GQA); gradient "
            "through portable.LinearAttentionGrad (BPTT).")
declare("LinearAttentionGrad", domain="portable",
        inputs=_LINEAR_ATTENTION_INPUTS + ("doutput?", "dpresent_state?"),
        outputs=("dquery", "dkey", "dvalue", "dpast_state", "ddecay", "dbeta"),
        infer=_linear_attention_grad_infer, attrs=_LINEAR_ATTENTION_ATTRS,
        doc="Gradients of LinearAttention's inputs given its output gradients (an absent "
            "decay or beta gets a zero gradient of shape (batch, length, kv_num_heads)).")
