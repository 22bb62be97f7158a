"""CausalConvWithState and LinearAttention (forward, and LinearAttention's backward) on the host
loop, written once for every backend whose arrays follow NumPy's operators (``+ - * @``,
slicing, reshape of contiguous arrays, ``xp.exp``/``tanh``/``sum``/``zeros``/``empty``): the
NumPy backend runs them on ``numpy.ndarray``, the OpenCL backend on its device arrays.

Both compute in float32 (float64 for float64 inputs), whatever the storage dtype, as
``onnx.reference`` does, and write the results into the given outputs (destination passing).

LinearAttention, stages:
1. ``_Heads`` views the packed (B, T, heads * size) inputs per key/value head, in shapes that
   make every step a batched matmul or a broadcast product: query (B, T, H_kv, G, d_k) (query
   head h = kv * G + g reads kv's state, ONNX's interleaved repeat), key as a column
   (B, T, H_kv, d_k, 1) and a row (B, T, H_kv, 1, d_k), value and the decay and beta factors
   with unit axes where they broadcast over the state (B, H_kv, d_k, d_v).
2. The forward walks the steps: S' = exp(g_t) S (gated rules); u = beta_t (v_t - S'^T k_t)
   (delta rules, else u = v_t); S_t = S' + k_t u^T; o_t = scale q_t^T S_t.
3. The backward recomputes the forward keeping every state, then walks the steps in reverse
   with dS (the gradient of S_t), applying the adjoint of each line of stage 2 in turn.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from portable.ops.sequence_mixing import head_dims, rule_flags


def compute_dtype(dtype) -> np.dtype:
    """float64 stays float64; every other float computes in float32."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def _wide(a, dtype):
    return a if a is None or a.dtype == dtype else a.astype(dtype)


def _sigmoid(xp, x):
    return 0.5 * xp.tanh(0.5 * x) + 0.5  # no exp overflow for large |x|


# -- CausalConvWithState ------------------------------------------------------------------------


def causal_conv_with_state(xp, inputs: Sequence[Any], outputs: Sequence[Any],
                           attrs: dict) -> None:
    """output[b, c, t] = act(bias[c] + sum_j w[c, 0, j] P[b, c, t + j]) over the padded input
    P = [past_state or zeros, input]; present_state = P's last k - 1 positions."""
    x, w, bias, past = (list(inputs) + [None] * 4)[:4]
    y, present = (list(outputs) + [None])[:2]
    dtype = compute_dtype(x.dtype)
    batch, channels, length = x.shape
    k = w.shape[2]
    x, w, bias = _wide(x, dtype), _wide(w, dtype), _wide(bias, dtype)
    if k > 1:
        padded = xp.empty((batch, channels, length + k - 1), dtype)
        if past is None:
            padded[:, :, :k - 1] = 0
        else:
            padded[:, :, :k - 1] = _wide(past, dtype)
        padded[:, :, k - 1:] = x
    else:
        padded = x
    acc = padded[:, :, :length] * w[:, :, 0]  # w[:, :, 0] is (C, 1): per channel
    for j in range(1, k):
        acc = acc + padded[:, :, j:j + length] * w[:, :, j]
    if bias is not None:
        acc = acc + bias.reshape(channels, 1)
    if attrs["activation"] != "none":  # silu / swish
        acc = acc * _sigmoid(xp, acc)
    y[...] = acc
    if present is not None and k > 1:
        present[...] = padded[:, :, length:]


# -- LinearAttention ----------------------------------------------------------------------------


class _Heads:
    """A LinearAttention node's inputs per key/value head (see stage 1 above)."""

    def __init__(self, xp, inputs: Sequence[Any], attrs: dict) -> None:
        q, k, v, past, decay, beta = (list(inputs) + [None] * 6)[:6]
        self.xp, self.attrs = xp, attrs
        self.dtype = dtype = compute_dtype(q.dtype)
        self.batch, self.steps = b, t = q.shape[:2]
        self.kv = h = attrs["kv_num_heads"]
        self.d_k, self.d_v, self.group = head_dims(q.shape, v.shape, attrs)
        self.gating, self.delta = rule_flags(attrs["update_rule"])
        scale = attrs["scale"]
        self.scale = float(scale) if scale else 1.0 / float(np.sqrt(self.d_k))
        d_k, d_v = self.d_k, self.d_v
        self.q = _wide(q, dtype).reshape(b, t, h, self.group, d_k)
        key = _wide(k, dtype)
        self.k_col, self.k_row = key.reshape(b, t, h, d_k, 1), key.reshape(b, t, h, 1, d_k)
        self.v = _wide(v, dtype).reshape(b, t, h, 1, d_v)
        # exp(decay): per head (B, T, H, 1, 1) or per key dimension (B, T, H, d_k, 1)
        self.decay_width = None if decay is None else decay.shape[2] // h
        self.a = None if decay is None else \
            xp.exp(_wide(decay, dtype)).reshape(b, t, h, self.decay_width, 1)
        self.beta_heads = None if beta is None else beta.shape[2]
        self.beta = None if beta is None else \
            _wide(beta, dtype).reshape(b, t, self.beta_heads, 1, 1)
        if past is None:
            self.initial = xp.zeros((b, h, d_k, d_v), dtype)
        else:
            self.initial = _wide(past, dtype)

    def step(self, state, t: int):
        """S' (the gated state) and u of step t (stage 2)."""
        gated = state * self.a[:, t] if self.gating else state
        if not self.delta:
            return gated, self.v[:, t], None
        retrieved = self.k_row[:, t] @ gated
        return gated, self.beta[:, t] * (self.v[:, t] - retrieved), retrieved

    def run(self, keep: bool):
        """The scaled outputs (B, T, H, G, d_v), the final state and, with ``keep``, the state
        before each step (T + 1 states, the last the final one)."""
        xp = self.xp
        out = xp.empty((self.batch, self.steps, self.kv, self.group, self.d_v), self.dtype)
        state = self.initial
        states = [state] if keep else None
        for t in range(self.steps):
            gated, u, _ = self.step(state, t)
            state = gated + self.k_col[:, t] * u
            out[:, t] = self.q[:, t] @ state
            if keep:
                states.append(state)
        return out * self.scale, state, states


def linear_attention(xp, inputs: Sequence[Any], outputs: Sequence[Any], attrs: dict) -> None:
    """ONNX LinearAttention: output (B, T, H_q * d_v) and present_state (B, H_kv, d_k, d_v)."""
    heads = _Heads(xp, inputs, attrs)
    out, state, _ = heads.run(keep=False)
    outputs[0][...] = out.reshape(outputs[0].shape)
    if len(outputs) > 1 and outputs[1] is not None:
        outputs[1][...] = state


def _swap(a):
    """Transpose of the last two axes of a rank-4 or rank-5 array."""
    return a.swapaxes(a.ndim - 2, a.ndim - 1)


def linear_attention_grad(xp, inputs: Sequence[Any], outputs: Sequence[Any],
                          attrs: dict) -> None:
    """portable.LinearAttentionGrad: the six forward inputs, then d_output and
    d_present_state (either may be absent) -> dquery, dkey, dvalue, dpast_state, ddecay and
    dbeta (zero for an absent decay or beta)."""
    inputs = list(inputs) + [None] * (8 - len(inputs))
    p = _Heads(xp, inputs[:6], attrs)
    dout, dpresent = inputs[6], inputs[7]
    b, steps, h, dt = p.batch, p.steps, p.kv, p.dtype
    _, _, states = p.run(keep=True)
    dq = xp.zeros(p.q.shape, dt)
    dk = xp.zeros(p.k_col.shape, dt)
    dv = xp.zeros(p.v.shape, dt)
    ddecay = None if p.a is None else xp.zeros(p.a.shape, dt)
    dbeta = None if p.beta is None else xp.zeros((b, steps, h, 1, 1), dt)
    ds = xp.zeros(p.initial.shape, dt) if dpresent is None else _wide(dpresent, dt) + 0
    do = None if dout is None else \
        _wide(dout, dt).reshape(b, steps, h, p.group, p.d_v) * p.scale
    for t in reversed(range(steps)):
        state, prev = states[t + 1], states[t]
        if do is not None:  # o_t = scale q_t^T S_t
            dq[:, t] = do[:, t] @ _swap(state)
            ds = ds + _swap(p.q[:, t]) @ do[:, t]
        gated, u, retrieved = p.step(prev, t)
        # S_t = S' + k u^T
        dk_t = ds @ _swap(u)
        du = p.k_row[:, t] @ ds
        dgated = ds
        if p.delta:  # u = beta (v - r), r = S'^T k
            beta = p.beta[:, t]
            dv[:, t] = beta * du
            dbeta[:, t] = xp.sum(du * (p.v[:, t] - retrieved), axis=3, keepdims=True)
            dr = du * (-beta)
            dgated = dgated + p.k_col[:, t] * dr
            dk_t = dk_t + gated @ _swap(dr)
        else:
            dv[:, t] = du
        dk[:, t] = dk_t
        if p.gating:  # S' = exp(g) S
            a = p.a[:, t]
            da = xp.sum(dgated * prev, axis=3, keepdims=True)
            if p.decay_width == 1:
                da = xp.sum(da, axis=2, keepdims=True)
            ddecay[:, t] = da * a
            ds = dgated * a
        else:
            ds = dgated
    grads = [dq, dk, dv, ds, ddecay, dbeta]
    if dbeta is not None and p.beta_heads == 1:  # one beta shared by every head
        grads[5] = xp.sum(dbeta, axis=2, keepdims=True)
    for out, grad in zip(outputs, grads):
        if out is None:
            continue
        if grad is None:
            out[...] = 0
        else:
            out[...] = grad.reshape(out.shape)
