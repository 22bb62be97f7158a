"""OpenCL kernels: SwiGLU, CausalConvWithState, LinearAttention and portable.LinearAttentionGrad.

SwiGLU is two generated elementwise kernels (the op table's Swish, then Mul). The others are
the shared host loops of ``backends/xp/sequence_mixing.py`` run on device arrays: the causal
convolution is k broadcast multiply-adds over shifted views of the padded input, and each
LinearAttention step enqueues its batched GEMMs (one per matrix product of the recurrence) and
the elementwise state update; nothing is copied to the host. float16 computes in float32.
"""
from __future__ import annotations

from backends.opencl.elementwise import apply
from backends.opencl.kernels.table import kernel_table
from backends.xp.sequence_mixing import (causal_conv_with_state, linear_attention,
                                         linear_attention_grad)

kernels, kernel = kernel_table()


@kernel("SwiGLU", half="native")
def swiglu(ctx, inputs, outputs, attrs):
    a, b = inputs
    apply("Mul", apply("Swish", a, params=[attrs["alpha"]]), b, out=outputs[0])


@kernel("CausalConvWithState")
def causal_conv(ctx, inputs, outputs, attrs):
    causal_conv_with_state(ctx.xp, inputs, outputs, attrs)


@kernel("LinearAttention")
def linear_attention_kernel(ctx, inputs, outputs, attrs):
    linear_attention(ctx.xp, inputs, outputs, attrs)


@kernel("portable.LinearAttentionGrad")
def linear_attention_grad_kernel(ctx, inputs, outputs, attrs):
    linear_attention_grad(ctx.xp, inputs, outputs, attrs)
