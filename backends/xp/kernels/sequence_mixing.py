"""NumPy kernels: SwiGLU, CausalConvWithState, LinearAttention and portable.LinearAttentionGrad.

The last three are the shared host loops of ``backends/xp/sequence_mixing.py`` run on
``ctx.xp``; SwiGLU is one expression.
"""
from __future__ import annotations

from backends.xp.sequence_mixing import (causal_conv_with_state, compute_dtype,
                                         linear_attention, linear_attention_grad)
from portable.backend import kernel_table

kernels, kernel = kernel_table()


@kernel("SwiGLU")
def swiglu(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    # float16 computes in float32, as onnx's expected values are made
    a, b = (v.astype(compute_dtype(v.dtype), copy=False) for v in inputs)
    scaled = a * a.dtype.type(attrs["alpha"])
    gate = 0.5 * xp.tanh(0.5 * scaled) + 0.5  # sigmoid without exp overflow
    outputs[0][...] = a * gate * b


@kernel("CausalConvWithState")
def causal_conv(ctx, inputs, outputs, attrs):
    causal_conv_with_state(ctx.xp, inputs, outputs, attrs)


@kernel("LinearAttention")
def linear_attention_kernel(ctx, inputs, outputs, attrs):
    linear_attention(ctx.xp, inputs, outputs, attrs)


@kernel("portable.LinearAttentionGrad")
def linear_attention_grad_kernel(ctx, inputs, outputs, attrs):
    linear_attention_grad(ctx.xp, inputs, outputs, attrs)
