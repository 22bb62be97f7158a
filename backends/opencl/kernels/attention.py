"""OpenCL kernels: Attention and RotaryEmbedding.

Both run the stages shared with the NumPy backend (``backends/xp/kernels/attention.py``) on
device arrays, through the OpenCL array namespace: the two products are the tiled GEMM
(``gemm``, batched over the key/value heads), the masks, softcap and rotations are generated
elementwise kernels, and the softmax is the row kernel of ``nn.softmax_into``. Float16 is
computed in float32 (the table's ``half="upcast"``), as on the other OpenCL kernels.
"""
from __future__ import annotations

from backends.opencl.allocator import empty
from backends.opencl.kernels.nn import softmax_into
from backends.opencl.kernels.table import kernel_table
from backends.xp.kernels.attention import AttentionHooks, attention, rotary_embedding

kernels, kernel = kernel_table()


def _softmax(xp, scores):
    probs = empty(scores.runtime, scores.shape, scores.dtype)
    softmax_into(scores, -1, probs)
    return probs


_HOOKS = AttentionHooks(_softmax)


@kernel("Attention")
def attention_kernel(ctx, inputs, outputs, attrs):
    attention(ctx.xp, inputs, outputs, attrs, _HOOKS)


@kernel("RotaryEmbedding")
def rotary_embedding_kernel(ctx, inputs, outputs, attrs):
    rotary_embedding(ctx.xp, inputs, outputs, attrs)
