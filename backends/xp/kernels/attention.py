"""Attention and RotaryEmbedding, written once over the array namespace for every backend whose
arrays follow NumPy's operators, slicing, ``reshape``/``transpose`` and ``xp.where``/``matmul``
(NumPy and CuPy here; OpenCL registers the same stages with its own softmax,
``backends/opencl/kernels/attention.py``).

Attention's stages (the geometry comes from ``portable.ops.attention``):
1. Q, K, V in the head layout (B, heads, seq, size); the cache is prepended to K and V, written
   straight into present_key/present_value when those are asked for.
2. Scores: (Q sqrt(s)) (K sqrt(s))^T in Q's dtype, as one batched MatMul per key/value head:
   Q is viewed as (B, kv heads, groups * S, D), so grouped-query heads never copy K or V.
3. Softcap, then one additive bias (B|1, H|1, S, T): the attn_mask (padded with -inf/False to
   the total length), and -inf wherever the causal frontier, the sliding window or
   nonpad_kv_seqlen disallow a key. Frontiers are bottom-right aligned by the cache offset.
4. Softmax in softmax_precision's dtype. Rows whose bias is -inf everywhere are zeroed before
   (no NaN from exp(-inf + inf)) and after the softmax: they attend nothing and output zeros.
5. Y = P V, back to the node's layout; qk_matmul_output takes the stage its mode names.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from backends.xp.kernels.nn import softmax as host_softmax
from portable.backend import kernel_table
from portable.dtypes import is_low_precision
from portable.ops.attention import attention_geometry, rotary_geometry, softmax_dtype

kernels, kernel = kernel_table()


class AttentionHooks(NamedTuple):
    """What a backend supplies to the shared stages."""

    # (xp, scores) -> softmax over the last axis, a new array of the scores' dtype
    softmax: Callable[[Any, Any], Any]


def _padded(values, n: int) -> list:
    values = list(values[:n])
    return values + [None] * (n - len(values))


def _to_heads(xp, x, heads: int):
    """A 3-D (B, L, heads * size) tensor as (B, heads, L, size); 4-D ones are already."""
    if x.ndim == 4:
        return x
    batch, length, hidden = x.shape
    return xp.transpose(xp.reshape(x, (batch, length, heads, hidden // heads)), (0, 2, 1, 3))


def _with_cache(xp, past, new, present):
    """``new`` (B, H, L, D) with the cache ``past`` prepended, in ``present`` when given."""
    if past is None:
        if present is not None:
            present[...] = new
            return present
        return new
    return xp.concatenate([past, new], axis=2, out=present)


def _allowed(xp, geo, attrs, nonpad):
    """Which keys each query may see under is_causal, the windows and nonpad_kv_seqlen: a bool
    array broadcasting to (B, H, S, T), or None when nothing is restricted."""
    causal, left = attrs["is_causal"], attrs["left_window_size"]
    right = attrs["right_window_size"]
    if not (causal or left >= 0 or right >= 0 or nonpad is not None):
        return None
    seq, total = geo.q_len, geo.total_len
    keys = xp.reshape(xp.arange(total, dtype=np.int64), (1, total))
    # a query's absolute position: its index plus the keys that precede the block
    position = xp.reshape(xp.arange(seq, dtype=np.int64), (seq, 1))
    if nonpad is not None:
        position = xp.reshape(nonpad - seq, (-1, 1, 1, 1)) + position
    elif geo.past_len:
        position = position + geo.past_len
    allowed = None

    def both(a, b):
        return b if a is None else xp.logical_and(a, b)
    if causal:
        allowed = xp.less_equal(keys, position)
    if left >= 0:
        allowed = both(allowed, xp.greater_equal(keys, position - left))
    if right >= 0:
        allowed = both(allowed, xp.less_equal(keys, position + right))
    if nonpad is not None:
        allowed = both(allowed, xp.less(keys, xp.reshape(nonpad, (-1, 1, 1, 1))))
    return allowed


def _bias(xp, geo, attrs, mask, nonpad, dtype):
    """The additive bias (0 or -inf, plus a float mask) and its dtype, or (None, dtype)."""
    total = geo.total_len
    mask_bias = None
    if mask is not None:
        if mask.dtype != np.bool_:
            dtype = np.result_type(dtype, mask.dtype)
        if mask.shape[-1] < total:  # a short mask leaves the keys after it out
            fill = False if mask.dtype == np.bool_ else -np.inf
            wide = xp.full(tuple(mask.shape[:-1]) + (total,), fill, dtype=mask.dtype)
            wide[..., :mask.shape[-1]] = mask
            mask = wide
        if mask.dtype == np.bool_:
            mask_bias = xp.where(mask, xp.zeros((), dtype=dtype), xp.full((), -np.inf, dtype))
        else:
            mask_bias = mask.astype(dtype)
    allowed = _allowed(xp, geo, attrs, nonpad)
    if allowed is None:
        return mask_bias, dtype
    if mask_bias is None:
        mask_bias = xp.zeros((), dtype=dtype)
    return xp.where(allowed, mask_bias, xp.full((), -np.inf, dtype)), dtype


def attention(xp, inputs, outputs, attrs, hooks: AttentionHooks) -> None:
    """The Attention kernel's stages (module docstring) over the namespace ``xp``."""
    q, k, v, mask, past_k, past_v, nonpad = _padded(inputs, 7)
    y, present_k, present_v, scores_out = _padded(outputs, 4)
    geo = attention_geometry(q.shape, k.shape, v.shape, None if past_k is None else past_k.shape,
                             None if past_v is None else past_v.shape, attrs)
    dtype = q.dtype
    k_all = _with_cache(xp, past_k, _to_heads(xp, k, geo.kv_heads), present_k)
    v_all = _with_cache(xp, past_v, _to_heads(xp, v, geo.kv_heads), present_v)
    batch, kv_heads, rows, total = geo.batch, geo.kv_heads, geo.groups * geo.q_len, geo.total_len
    root = dtype.type(geo.root_scale(dtype))
    q_scaled = xp.multiply(_to_heads(xp, q, geo.q_heads), root)
    k_scaled = xp.multiply(k_all, root)
    grouped = xp.reshape(q_scaled, (batch, kv_heads, rows, geo.head_size))
    logits = xp.reshape(xp.matmul(grouped, xp.swapaxes(k_scaled, 2, 3)), geo.scores_shape())
    softcap = attrs["softcap"]
    if softcap > 0:
        logits = xp.multiply(xp.tanh(xp.divide(logits, dtype.type(softcap))),
                             dtype.type(softcap))
    mode = attrs["qk_matmul_output_mode"]
    if scores_out is not None and mode in (0, 1):
        scores_out[...] = logits
    bias, bias_dtype = _bias(xp, geo, attrs, mask, nonpad, dtype)
    scores, masked_rows = logits, None
    if bias is not None:
        scores = xp.add(logits, bias)
        # (the bias decides which rows attend nothing, not the possibly NaN scores)
        masked_rows = xp.equal(xp.max(bias, axis=-1, keepdims=True), -np.inf)
    if scores_out is not None and mode == 2:
        scores_out[...] = scores
    wanted = softmax_dtype(attrs, np.result_type(dtype, bias_dtype))
    if scores.dtype != wanted:
        scores = scores.astype(wanted)
    if masked_rows is not None:
        scores = xp.where(masked_rows, xp.zeros((), dtype=wanted), scores)
    probs = hooks.softmax(xp, scores)
    if masked_rows is not None:
        probs = xp.where(masked_rows, xp.zeros((), dtype=wanted), probs)
    probs = probs.astype(dtype) if probs.dtype != dtype else probs
    if scores_out is not None and mode == 3:
        scores_out[...] = probs
    if v_all.dtype != dtype:
        v_all = v_all.astype(dtype)
    out = xp.matmul(xp.reshape(probs, (batch, kv_heads, rows, total)), v_all)
    out = xp.reshape(out, (batch, geo.q_heads, geo.q_len, geo.v_head_size))
    if geo.rank == 3:  # (a copy: written through y itself, whatever its strides)
        out = xp.reshape(xp.transpose(out, (0, 2, 1, 3)), y.shape)
    y[...] = out


def rotary_embedding(xp, inputs, outputs, attrs) -> None:
    """Rotate each head's first rotary_embedding_dim channels, pairwise (halves, or even and
    odd channels when interleaved), by the cached angles of each token's position."""
    x, cos, sin, positions = _padded(inputs, 4)
    y = outputs[0]
    geo = rotary_geometry(x.shape, attrs)
    shape = (geo.batch, geo.seq_len, geo.heads, geo.head_size)

    if geo.rank == 3 and not y.flags.c_contiguous:  # Y is written through a reshaped view
        raise ValueError(f"RotaryEmbedding: a non-contiguous output {y.shape} cannot be viewed "
                         f"as {shape}")

    def token_major(a):  # (B, S, heads, head size) views of X and Y
        return xp.transpose(a, (0, 2, 1, 3)) if geo.rank == 4 else xp.reshape(a, shape)
    xv, yv = token_major(x), token_major(y)
    if positions is not None:
        cos, sin = cos[positions], sin[positions]
    half, rotary = geo.rotary_dim // 2, geo.rotary_dim
    cos = xp.reshape(cos, (geo.batch, geo.seq_len, 1, half))
    sin = xp.reshape(sin, (geo.batch, geo.seq_len, 1, half))
    first, second = ((slice(0, rotary, 2), slice(1, rotary, 2)) if attrs["interleaved"]
                     else (slice(0, half), slice(half, rotary)))
    x1, x2 = xv[..., first], xv[..., second]
    yv[..., first] = xp.subtract(xp.multiply(cos, x1), xp.multiply(sin, x2))
    yv[..., second] = xp.add(xp.multiply(sin, x1), xp.multiply(cos, x2))
    if rotary < geo.head_size:
        yv[..., rotary:] = xv[..., rotary:]


def _host_softmax(xp, scores):
    return host_softmax(xp, scores, -1)


_HOOKS = AttentionHooks(_host_softmax)


def widened(xp, inputs, outputs, run) -> None:
    """``run(inputs, outputs)`` with ml_dtypes' floats (bfloat16) computed in float32: NumPy
    has no fast arithmetic for them, and float32 holds every bfloat16 value exactly."""
    def low(a):
        return a is not None and is_low_precision(a.dtype)
    if not any(low(a) for a in list(inputs) + list(outputs)):
        run(inputs, outputs)
        return
    wide_out = [xp.empty(o.shape, dtype=np.float32) if low(o) else o for o in outputs]
    run([a.astype(np.float32) if low(a) else a for a in inputs], wide_out)
    for target, value in zip(outputs, wide_out):
        if target is not None and target is not value:
            target[...] = value.astype(target.dtype)


@kernel("Attention")
def attention_kernel(ctx, inputs, outputs, attrs):
    widened(ctx.xp, inputs, outputs,
            lambda ins, outs: attention(ctx.xp, ins, outs, attrs, _HOOKS))


@kernel("RotaryEmbedding")
def rotary_embedding_kernel(ctx, inputs, outputs, attrs):
    rotary_embedding(ctx.xp, inputs, outputs, attrs)
