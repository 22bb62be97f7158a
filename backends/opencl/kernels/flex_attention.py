"""OpenCL kernel: FlexAttention.

It runs the stages shared with the NumPy backend (``backends/xp/kernels/flex_attention.py``) on
device arrays through the OpenCL array namespace: the two products are the tiled GEMM, the
scaling and casts generated elementwise kernels, the softmax the row kernel of
``nn.softmax_into``, and score_mod/prob_mod run as bodies compiled for this device by the
shared body runner, so the scores never leave it. Float16 is computed in float32 (the table's
``half="upcast"``), which is the softmax dtype of float16 inputs anyway.
"""
from __future__ import annotations

from backends.opencl.allocator import empty
from backends.opencl.kernels.nn import softmax_into
from backends.opencl.kernels.table import kernel_table
from backends.xp.kernels.flex_attention import flex_attention

kernels, kernel = kernel_table()


def _softmax(xp, scores):
    if not scores.is_contiguous:  # (a body's result may be a strided view of its arena)
        scores = scores.copy()
    probs = empty(scores.runtime, scores.shape, scores.dtype)
    softmax_into(scores, -1, probs)
    return probs


@kernel("ai.onnx.preview.FlexAttention")
def flex_attention_kernel(ctx, inputs, outputs, attrs):
    flex_attention(ctx, ctx.xp, inputs, outputs, attrs, _softmax)
