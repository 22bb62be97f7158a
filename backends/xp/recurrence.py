"""RNN, LSTM and GRU and their backward ops (BPTT) on the host, written once for every backend
whose arrays follow NumPy's operators (``+ - * @``, slicing, ``xp.where``/``concatenate``/
``stack``): the NumPy backend runs it on ``numpy.ndarray``, the OpenCL backend on its device
arrays, each with its own gate activations (``RnnHooks``).

Stages of every kernel:
1. ``_Problem`` reads the node's inputs as time-major arrays ([T, B, ...], states [D, B, H])
   with the ONNX defaults filled in (zero bias, initial states, peepholes).
2. Each direction runs as one forward recurrence over its own step order: the reverse direction
   reads every batch item's first ``sequence_lens[b]`` steps backwards (``step_order``), so one
   loop serves both. The input projection X @ W^T + bias of all steps is one matmul; the loop
   does the recurrent matmul of all gates at once (GRU without linear_before_reset needs a
   second one, for the reset hidden state).
3. Results go back in ONNX step order and layout (``step_order`` is its own inverse).

Invariants with ``sequence_lens``: a step past an item's length leaves its states unchanged
and outputs zero, so the final state is the one after its last step (zero for length 0, as in
onnxruntime); backwards, such a step passes the state gradient through unchanged and
contributes nothing to the weights. The lengths, the masks and the reverse-order rows are
built on the host from the lengths and uploaded once per call.

Backward ops recompute the forward with the gate pre-activations kept, then walk the steps in
reverse, collecting the gradients of all pre-activations; weight and input gradients are then
one matmul each over all steps.

Example:
    >>> register_rnn_kernels(kernel, RnnHooks(Activation, np.asarray))  # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from portable.ops.rnn import GRU_CELL, LSTM_CELL, RNN_CELL, resolve_activations


class RnnHooks(NamedTuple):
    """What a backend supplies to the shared recurrence."""

    # (xp, name, alpha, beta, clip or None) -> a gate activation: act(a), act.backward(a, y, dy)
    activation: Callable[..., Any]
    # a device array -> the same values as a host NumPy array (small: sequence lengths)
    to_host: Callable[[Any], np.ndarray]


def _padded(values, n: int) -> list:
    """The first ``n`` of ``values``, padded with None (absent trailing inputs or outputs)."""
    values = list(values[:n])
    return values + [None] * (n - len(values))


# -- inputs and step order ---------------------------------------------------------------------


def _time_major(a, layout: int):
    """[B, T, ...] or [B, D, H] (layout 1) as a [T, B, ...] / [D, B, H] view."""
    return a if a is None or layout == 0 else a.swapaxes(0, 1)


def _y_time_major(y, layout: int):
    """Y ([T, D, B, H], or [B, T, D, H] for layout 1) as a [T, D, B, H] view."""
    return y if y is None or layout == 0 else y.transpose(1, 2, 0, 3)


class _Problem:
    """One recurrent node's inputs, time-major, with the ONNX defaults filled in."""

    def __init__(self, xp, inputs, attrs, cell, hooks: RnnHooks) -> None:
        inputs = _padded(inputs, len(cell.inputs))
        x, w, r, bias, lens = inputs[:5]
        self.xp, self.attrs, self.cell, self.layout = xp, attrs, cell, attrs["layout"]
        self.x = _time_major(x, self.layout)
        self.w, self.r = w, r
        self.steps, self.batch = self.x.shape[:2]
        self.dirs, self.hidden = w.shape[0], r.shape[2]
        gh = cell.gates * self.hidden
        if bias is None:
            bias = xp.zeros((self.dirs, 2 * gh), x.dtype)
        self.wb, self.rb = bias[:, :gh], bias[:, gh:]
        self.lens = self._lengths(None if lens is None else hooks.to_host(lens))
        zeros = xp.zeros((self.dirs, self.batch, self.hidden), x.dtype)
        self.initial = [zeros if s is None else _time_major(s, self.layout)
                        for s in inputs[5:5 + cell.states]]
        self.peepholes = inputs[cell.peepholes] if cell.peepholes else None
        clip = attrs["clip"]
        self.acts = [[hooks.activation(xp, name, a, b, clip if k < cell.clipped else None)
                      for k, (name, a, b) in enumerate(direction)]
                     for direction in resolve_activations(cell, attrs)]
        self.mask = self.alive = None
        if self.lens is not None:
            mask = np.arange(self.steps)[:, None] < self.lens[None, :]
            self.mask = xp.asarray(mask[..., None])
            self.alive = xp.asarray(mask.any(0)[:, None])  # items of length > 0

    def _lengths(self, lens):
        if lens is None:
            return None
        lens = np.asarray(lens).astype(np.int64)
        low, high = int(lens.min()), int(lens.max())
        if low < 0 or high > self.steps:
            raise ValueError(f"sequence_lens must lie in [0, {self.steps}], got {low}..{high}")
        return None if low == self.steps else lens  # all full: the fast path

    def reverse(self, d: int) -> bool:
        return d == 1 or self.attrs["direction"] == "reverse"

    def step_order(self, a, d: int):
        """``a`` ([T, B, ...]) in the order direction ``d`` processes it, zero past lengths.
        The map is its own inverse, so it also brings results back to ONNX order."""
        reverse = self.reverse(d)
        if self.lens is None:
            return a[::-1] if reverse else a
        if reverse:  # one gather of rows [t, b] -> [lens[b] - 1 - t, b] of the flat array
            src = np.maximum(self.lens[None, :] - 1 - np.arange(self.steps)[:, None], 0)
            rows = (src * self.batch + np.arange(self.batch)[None, :]).reshape(-1)
            a = a.reshape((self.steps * self.batch,) + a.shape[2:])[rows].reshape(a.shape)
        return self.xp.where(self.mask, a, 0)

    def final(self, state):
        """A direction's final state as ONNX reports it: zero for items of length 0."""
        return state if self.lens is None else self.xp.where(self.alive, state, 0)

    def project(self, x, d: int, bias):
        """X @ W[d]^T + bias for all steps in one matmul: [T, B, gates * H]."""
        flat = x.reshape(-1, x.shape[-1]) @ self.w[d].T + bias
        return flat.reshape(self.steps, self.batch, -1)

    def advance(self, t: int, states, news, ys) -> None:
        """Store step ``t``'s new states; items past their length keep the old ones."""
        if self.mask is None:
            for seq, new in zip(states, news):
                seq[t + 1] = new
            ys[t] = news[0]
            return
        m = self.mask[t]
        for seq, new in zip(states, news):
            seq[t + 1] = self.xp.where(m, new, seq[t])
        ys[t] = self.xp.where(m, news[0], 0)

    def keep_valid(self, t: int, grads, passed):
        """Backwards: gradients of items past their length pass through unchanged."""
        if self.mask is None:
            return grads
        return [self.xp.where(self.mask[t], g, p) for g, p in zip(grads, passed)]

    def weight_grads(self, x, d: int, da_w, da_r, r_inputs):
        """dX (step order), dW, dR, dB of direction ``d`` from the pre-activation gradients of
        all steps: ``da_w`` of the input side, ``da_r`` of the recurrent side, whose gate
        blocks multiply ``r_inputs`` ([(rows of R, [T, B, H] input)])."""
        xp, gh = self.xp, da_w.shape[-1]
        flat_w = da_w.reshape(-1, gh)
        dw = flat_w.T @ x.reshape(-1, x.shape[-1])
        dr = xp.empty_like(self.r[d])
        for rows, seq in r_inputs:
            dr[rows] = da_r[..., rows].reshape(-1, dr[rows].shape[0]).T @ \
                seq.reshape(-1, self.hidden)
        db = xp.concatenate([flat_w.sum(0), da_r.reshape(-1, gh).sum(0)])
        dx = (flat_w @ self.w[d]).reshape(x.shape)
        return dx, dw, dr, db


# -- RNN (one gate block: H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb)) -------------------------


def _rnn_forward(p: _Problem, d: int, x, keep: bool):
    xp, (T, B), H = p.xp, x.shape[:2], p.hidden
    (f,) = p.acts[d]
    xw = p.project(x, d, p.wb[d] + p.rb[d])
    hs = xp.empty((T + 1, B, H), x.dtype)
    hs[0] = p.initial[0][d]
    ys = xp.empty((T, B, H), x.dtype)
    pre = xp.empty((T, B, H), x.dtype) if keep else None
    for t in range(T):
        a = xw[t] + hs[t] @ p.r[d].T
        if keep:
            pre[t] = a
        p.advance(t, (hs,), (f(a),), ys)
    return ys, (hs[T],), (hs, pre)


def _rnn_backward(p: _Problem, d: int, x, cache, dys, dfinal):
    xp, T = p.xp, x.shape[0]
    (f,) = p.acts[d]
    hs, pre = cache
    da = xp.empty_like(pre)
    (dh,) = dfinal
    for t in reversed(range(T)):
        dh = dh + dys[t]
        # hs[t + 1] is f(pre[t]) wherever the step is valid; keep_valid drops the rest
        da_t = f.backward(pre[t], hs[t + 1], dh)
        da[t], dh = p.keep_valid(t, (da_t, da_t @ p.r[d]), (xp.zeros_like(da_t), dh))
    grads = p.weight_grads(x, d, da, da, [(slice(None), hs[:-1])])
    return grads, (dh,), None


# -- LSTM (gate blocks i, o, f, c) -------------------------------------------------------------


def _lstm_forward(p: _Problem, d: int, x, keep: bool):
    xp, (T, B), H = p.xp, x.shape[:2], p.hidden
    f, g, h = p.acts[d]
    peep = None if p.peepholes is None else p.peepholes[d].reshape(3, H)
    xw = p.project(x, d, p.wb[d] + p.rb[d])
    hs, cs = xp.empty((T + 1, B, H), x.dtype), xp.empty((T + 1, B, H), x.dtype)
    hs[0], cs[0] = p.initial[0][d], p.initial[1][d]
    ys = xp.empty((T, B, H), x.dtype)
    pre = xp.empty((T, B, 4 * H), x.dtype) if keep else None
    for t in range(T):
        a = xw[t] + hs[t] @ p.r[d].T
        if peep is not None:
            a[:, :H] += peep[0] * cs[t]
            a[:, 2 * H:3 * H] += peep[2] * cs[t]
        i = f(a[:, :H])
        forget = 1 - i if p.attrs["input_forget"] else f(a[:, 2 * H:3 * H])
        c = forget * cs[t] + i * g(a[:, 3 * H:])
        if peep is not None:
            a[:, H:2 * H] += peep[1] * c
        if keep:
            pre[t] = a
        p.advance(t, (hs, cs), (f(a[:, H:2 * H]) * h(c), c), ys)
    return ys, (hs[T], cs[T]), (hs, cs, pre)


def _lstm_backward(p: _Problem, d: int, x, cache, dys, dfinal):
    xp, T, H = p.xp, x.shape[0], p.hidden
    f, g, h = p.acts[d]
    hs, cs, pre = cache
    peep = None if p.peepholes is None else p.peepholes[d].reshape(3, H)
    da = xp.empty_like(pre)
    dpeep = xp.zeros((3, H), x.dtype)
    dh, dc = dfinal
    for t in reversed(range(T)):
        dh = dh + dys[t]
        a, c_prev, c = pre[t], cs[t], cs[t + 1]
        a_i, a_o, a_f, a_c = (a[:, k * H:(k + 1) * H] for k in range(4))
        i, o, cell, hc = f(a_i), f(a_o), g(a_c), h(c)
        forget = 1 - i if p.attrs["input_forget"] else f(a_f)
        da_o = f.backward(a_o, o, dh * hc)
        dc_new = dc + h.backward(c, hc, dh * o)
        if peep is not None:
            dc_new = dc_new + da_o * peep[1]
        d_forget = dc_new * c_prev
        d_i = dc_new * cell
        if p.attrs["input_forget"]:
            d_i, da_f = d_i - d_forget, xp.zeros_like(d_i)
        else:
            da_f = f.backward(a_f, forget, d_forget)
        da_i = f.backward(a_i, i, d_i)
        da_c = g.backward(a_c, cell, dc_new * i)
        dc_prev = dc_new * forget
        if peep is not None:
            dc_prev = dc_prev + da_i * peep[0] + da_f * peep[2]
        da_t = xp.concatenate([da_i, da_o, da_f, da_c], axis=1)
        da[t], dh, dc = p.keep_valid(t, (da_t, da_t @ p.r[d], dc_prev),
                                     (xp.zeros_like(da_t), dh, dc))
        # dP even when P is absent (zero): every output of a backward op is well defined
        dpeep += xp.stack([(da[t, :, :H] * c_prev).sum(0), (da[t, :, H:2 * H] * c).sum(0),
                           (da[t, :, 2 * H:3 * H] * c_prev).sum(0)])
    grads = p.weight_grads(x, d, da, da, [(slice(None), hs[:-1])])
    return grads, (dh, dc), dpeep.reshape(-1)


# -- GRU (gate blocks z, r, h) -----------------------------------------------------------------


def _gru_forward(p: _Problem, d: int, x, keep: bool):
    xp, (T, B), H = p.xp, x.shape[:2], p.hidden
    f, g = p.acts[d]
    linear = p.attrs["linear_before_reset"]
    r_zr, r_h, rb_h = p.r[d][:2 * H], p.r[d][2 * H:], p.rb[d][2 * H:]
    # Every bias folds into the input projection except Rbh under linear_before_reset,
    # where the reset gate scales it.
    bias = p.wb[d] + p.rb[d]
    if linear:
        bias = xp.concatenate([bias[:2 * H], p.wb[d][2 * H:]])
    xw = p.project(x, d, bias)
    hs = xp.empty((T + 1, B, H), x.dtype)
    hs[0] = p.initial[0][d]
    ys = xp.empty((T, B, H), x.dtype)
    pre = xp.empty((T, B, 3 * H), x.dtype) if keep else None
    lin = xp.empty((T, B, H), x.dtype) if keep and linear else None
    for t in range(T):
        h_prev = hs[t]
        if linear:
            hr = h_prev @ p.r[d].T
            a_zr, q = xw[t, :, :2 * H] + hr[:, :2 * H], hr[:, 2 * H:] + rb_h
        else:
            a_zr = xw[t, :, :2 * H] + h_prev @ r_zr.T
        z, reset = f(a_zr[:, :H]), f(a_zr[:, H:])
        a_h = xw[t, :, 2 * H:] + (reset * q if linear else (reset * h_prev) @ r_h.T)
        n = g(a_h)
        if keep:
            pre[t, :, :2 * H], pre[t, :, 2 * H:] = a_zr, a_h
            if linear:
                lin[t] = q
        p.advance(t, (hs,), (n + z * (h_prev - n),), ys)
    return ys, (hs[T],), (hs, pre, lin)


def _gru_backward(p: _Problem, d: int, x, cache, dys, dfinal):
    xp, T, H = p.xp, x.shape[0], p.hidden
    f, g = p.acts[d]
    hs, pre, lin = cache
    linear = p.attrs["linear_before_reset"]
    r_zr, r_h = p.r[d][:2 * H], p.r[d][2 * H:]
    da_w, da_r = xp.empty_like(pre), xp.empty_like(pre)
    (dh,) = dfinal
    for t in reversed(range(T)):
        dh = dh + dys[t]
        h_prev, a = hs[t], pre[t]
        z, reset, n = f(a[:, :H]), f(a[:, H:2 * H]), g(a[:, 2 * H:])
        da_h = g.backward(a[:, 2 * H:], n, dh * (1 - z))
        dh_prev = dh * z
        if linear:
            d_reset, dr_h = da_h * lin[t], da_h * reset  # dr_h: gradient of h_prev @ Rh^T + Rbh
            dh_prev = dh_prev + dr_h @ r_h
        else:
            d_reset_h = da_h @ r_h                          # gradient of reset * h_prev
            d_reset, dr_h = d_reset_h * h_prev, da_h
            dh_prev = dh_prev + d_reset_h * reset
        da_zr = xp.concatenate([f.backward(a[:, :H], z, dh * (h_prev - n)),
                                f.backward(a[:, H:2 * H], reset, d_reset)], axis=1)
        dh_prev = dh_prev + da_zr @ r_zr
        dw_t = xp.concatenate([da_zr, da_h], axis=1)
        dr_t = xp.concatenate([da_zr, dr_h], axis=1)
        zero = xp.zeros_like(dw_t)
        da_w[t], da_r[t], dh = p.keep_valid(t, (dw_t, dr_t, dh_prev), (zero, zero, dh))
    h_inputs = hs[:-1]
    if not linear:  # Rh multiplies the reset hidden state
        h_inputs = h_inputs * f(pre[:, :, H:2 * H])
    grads = p.weight_grads(x, d, da_w, da_r, [(slice(0, 2 * H), hs[:-1]),
                                              (slice(2 * H, 3 * H), h_inputs)])
    return grads, (dh,), None


# -- kernels ----------------------------------------------------------------------------------


def _forward_kernel(cell, run, hooks: RnnHooks):
    def rnn(ctx, inputs, outputs, attrs):
        p = _Problem(ctx.xp, inputs, attrs, cell, hooks)
        outputs = _padded(outputs, len(cell.outputs))
        y = _y_time_major(outputs[0], p.layout)
        states = [_time_major(s, p.layout) for s in outputs[1:]]
        for d in range(p.dirs):
            ys, finals, _ = run(p, d, p.step_order(p.x, d), keep=False)
            if y is not None:
                y[:, d] = p.step_order(ys, d)
            for out, final in zip(states, finals):
                if out is not None:
                    out[d] = p.final(final)
    rnn.__name__ = cell.name.lower()
    return rnn


def _backward_kernel(cell, run, back, hooks: RnnHooks):
    def rnn_grad(ctx, inputs, outputs, attrs):
        xp = ctx.xp
        p = _Problem(xp, inputs, attrs, cell, hooks)
        heads = _padded(inputs[len(cell.inputs):], len(cell.outputs))
        dy = _y_time_major(heads[0], p.layout)
        dstates = [_time_major(s, p.layout) for s in heads[1:]]
        dx_out, dw_out, dr_out, db_out = outputs[:4]
        dinit = [_time_major(s, p.layout) for s in outputs[4:4 + cell.states]]
        dx_total = xp.zeros_like(p.x)
        zeros = xp.zeros((p.steps, p.batch, p.hidden), p.x.dtype)
        for d in range(p.dirs):
            x = p.step_order(p.x, d)
            _, _, cache = run(p, d, x, keep=True)
            dys = zeros if dy is None else p.step_order(dy[:, d], d)
            dfinal = [zeros[0] if s is None else p.final(s[d]) for s in dstates]
            (dx, dw, dr, db), dinit_d, dpeep = back(p, d, x, cache, dys, dfinal)
            dx_total += p.step_order(dx, d)
            dw_out[d], dr_out[d], db_out[d] = dw, dr, db
            for out, value in zip(dinit, dinit_d):
                out[d] = value
            if cell.peepholes:
                outputs[-1][d] = dpeep
        _time_major(dx_out, p.layout)[...] = dx_total
    rnn_grad.__name__ = f"{cell.name.lower()}_grad"
    return rnn_grad


def register_rnn_kernels(kernel: Callable[[str], Callable], hooks: RnnHooks) -> None:
    """Register RNN, LSTM, GRU and their gradients with a backend's kernel table.

    Args:
        kernel: the table's decorator factory (``kernel(op_name)(fn)``).
        hooks: the backend's gate activations and device-to-host copy.
    """
    kernel("RNN")(_forward_kernel(RNN_CELL, _rnn_forward, hooks))
    kernel("portable.RNNGrad")(_backward_kernel(RNN_CELL, _rnn_forward, _rnn_backward, hooks))
    kernel("LSTM")(_forward_kernel(LSTM_CELL, _lstm_forward, hooks))
    kernel("GRU")(_forward_kernel(GRU_CELL, _gru_forward, hooks))
    kernel("portable.LSTMGrad")(_backward_kernel(LSTM_CELL, _lstm_forward, _lstm_backward,
                                                 hooks))
    kernel("portable.GRUGrad")(_backward_kernel(GRU_CELL, _gru_forward, _gru_backward, hooks))
