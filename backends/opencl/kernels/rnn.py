"""OpenCL kernels: LSTM and GRU and their backward ops (BPTT), with the time loop on the host.

Stages of every kernel (the NumPy reference's, run on device arrays):
1. ``_Problem`` views the node's inputs time-major ([T, B, ...], states [D, B, H]) with the ONNX
   defaults filled in (zero bias, initial states, peepholes).
2. Each direction is one forward recurrence over its own step order (the reverse direction
   reads each batch item's first ``sequence_lens[b]`` steps backwards). The input projection
   of all steps is one GEMM; each step enqueues one recurrent GEMM and the gate arithmetic,
   whose activations (with ``clip``) are generated elementwise kernels.
3. Backward recomputes the forward keeping the gate pre-activations, walks the steps in
   reverse, then computes the weight and input gradients with one GEMM each over all steps.

With ``sequence_lens``, a step past an item's length keeps its state and outputs zero; the step
order, masks and final-state selection are index arrays built on the host from the lengths.
"""
from __future__ import annotations

import numpy as np

from portable.ops.rnn import GRU_CELL, LSTM_CELL, resolve_activations

from backends.opencl.allocator import empty, from_numpy, host_value
from backends.opencl.elementwise import apply, assign
from backends.opencl.gather import gather_axis
from backends.opencl.kernels.table import kernel_table

kernels, kernel = kernel_table()


class _Activation:
    """One gate activation (``optable``'s ``Rnn<name>`` ops: family kernels shared with every
    other elementwise op) with its parameters and the cell clip (0: none)."""

    def __init__(self, name: str, alpha: float, beta: float, clip) -> None:
        self.name = f"Rnn{name}"
        self.params = [alpha, beta, 0.0 if clip is None else clip]

    def __call__(self, a):
        return apply(self.name, a, params=self.params)

    def backward(self, a, y, dy):
        """Gradient w.r.t. the pre-clip input ``a`` given the output ``y`` and its gradient."""
        return apply(f"{self.name}Grad", a, y, dy, params=self.params)


def _padded(values, n: int) -> list:
    values = list(values[:n])
    return values + [None] * (n - len(values))


def _time_major(a, layout: int):
    return a if a is None or layout == 0 else a.swapaxes(0, 1)


def _y_time_major(y, layout: int):
    return y if y is None or layout == 0 else y.transpose(1, 2, 0, 3)


def _sub(a, b):
    return apply("Sub", a, b)


def _add(a, b):
    return apply("Add", a, b)


def _mul(a, b):
    return apply("Mul", a, b)


class _Problem:
    """One recurrent node's inputs, time-major, with the ONNX defaults filled in."""

    def __init__(self, xp, inputs, attrs, cell) -> None:
        inputs = _padded(inputs, len(cell.inputs))
        x, w, r, bias, lens = inputs[:5]
        self.xp, self.attrs, self.cell, self.layout = xp, attrs, cell, attrs["layout"]
        self.x = _time_major(x, self.layout)
        self.w, self.r = w, r
        self.steps, self.batch = self.x.shape[:2]
        self.dirs, self.hidden = w.shape[0], r.shape[2]
        self.dtype = x.dtype
        gh = cell.gates * self.hidden
        if bias is None:
            bias = xp.zeros((self.dirs, 2 * gh), x.dtype)
        self.wb, self.rb = bias[:, :gh], bias[:, gh:]
        self.lens = self._lengths(lens)
        zeros = xp.zeros((self.dirs, self.batch, self.hidden), x.dtype)
        self.initial = [zeros if s is None else _time_major(s, self.layout)
                        for s in inputs[5:5 + cell.states]]
        self.peepholes = inputs[cell.peepholes] if cell.peepholes else None
        clip = attrs["clip"]
        self.acts = [[_Activation(name, a, b, clip if k < cell.clipped else None)
                      for k, (name, a, b) in enumerate(direction)]
                     for direction in resolve_activations(cell, attrs)]
        self.mask = self.alive = None
        if self.lens is not None:
            host = np.arange(self.steps)[:, None] < self.lens[None, :]
            self.mask = from_numpy(x.runtime, host[..., None])
            self.alive = from_numpy(x.runtime, host.any(0)[:, None])

    def _lengths(self, lens):
        if lens is None:
            return None
        lens = host_value(lens).astype(np.int64)
        low, high = int(lens.min()), int(lens.max())
        if low < 0 or high > self.steps:
            raise ValueError(f"sequence_lens must lie in [0, {self.steps}], got {low}..{high}")
        return None if low == self.steps else lens  # all full: the fast path

    def reverse(self, d: int) -> bool:
        return d == 1 or self.attrs["direction"] == "reverse"

    def step_order(self, a, d: int):
        """``a`` ([T, B, ...]) in the order direction ``d`` processes it, zero past lengths;
        its own inverse."""
        reverse = self.reverse(d)
        if self.lens is None:
            return a[::-1] if reverse else a
        if reverse:
            src = np.maximum(self.lens[None, :] - 1 - np.arange(self.steps)[:, None], 0)
            rows = (src * self.batch + np.arange(self.batch)[None, :]).reshape(-1)
            flat = a.reshape((self.steps * self.batch,) + a.shape[2:])
            out = empty(a.runtime, flat.shape, a.dtype)
            gather_axis(flat, from_numpy(a.runtime, rows), 0, out)
            a = out.reshape(a.shape)
        return self.xp.where(self.mask, a, 0)

    def final(self, state):
        return state if self.lens is None else self.xp.where(self.alive, state, 0)

    def project(self, x, d: int, bias):
        """X @ W[d]^T + bias for all steps in one GEMM: [T, B, gates * H]."""
        flat = _add(x.reshape(-1, x.shape[-1]) @ self.w[d].T, bias)
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
        if self.mask is None:
            return grads
        return [self.xp.where(self.mask[t], g, p) for g, p in zip(grads, passed)]

    def weight_grads(self, x, d: int, da_w, da_r, r_inputs):
        """dX (step order), dW, dR, dB of direction ``d`` from the pre-activation gradients."""
        gh = da_w.shape[-1]
        flat_w = da_w.reshape(-1, gh)
        dw = flat_w.T @ x.reshape(-1, x.shape[-1])
        dr = empty(self.r.runtime, self.r[d].shape, self.dtype)
        for rows, seq in r_inputs:
            part = da_r[..., rows]
            dr[rows] = part.reshape(-1, part.shape[-1]).T @ seq.reshape(-1, self.hidden)
        db = self.xp.concatenate([flat_w.sum(0), da_r.reshape(-1, gh).sum(0)])
        dx = (flat_w @ self.w[d]).reshape(x.shape)
        return dx, dw, dr, db


def _one_minus(a):
    return apply("Sub", 1.0, a)


# -- LSTM (gate blocks i, o, f, c) -------------------------------------------------------------


def _lstm_forward(p: _Problem, d: int, x, keep: bool):
    (T, B), H = x.shape[:2], p.hidden
    f, g, h = p.acts[d]
    peep = None if p.peepholes is None else p.peepholes[d].reshape(3, H)
    xw = p.project(x, d, _add(p.wb[d], p.rb[d]))
    hs, cs = empty(x.runtime, (T + 1, B, H), p.dtype), empty(x.runtime, (T + 1, B, H), p.dtype)
    hs[0], cs[0] = p.initial[0][d], p.initial[1][d]
    ys = empty(x.runtime, (T, B, H), p.dtype)
    pre = empty(x.runtime, (T, B, 4 * H), p.dtype) if keep else None
    r_t = p.r[d].T
    for t in range(T):
        a = _add(xw[t], hs[t] @ r_t)
        if peep is not None:
            a[:, :H] += _mul(peep[0], cs[t])
            a[:, 2 * H:3 * H] += _mul(peep[2], cs[t])
        i = f(a[:, :H])
        forget = _one_minus(i) if p.attrs["input_forget"] else f(a[:, 2 * H:3 * H])
        c = _add(_mul(forget, cs[t]), _mul(i, g(a[:, 3 * H:])))
        if peep is not None:
            a[:, H:2 * H] += _mul(peep[1], c)
        if keep:
            pre[t] = a
        p.advance(t, (hs, cs), (_mul(f(a[:, H:2 * H]), h(c)), c), ys)
    return ys, (hs[T], cs[T]), (hs, cs, pre)


def _lstm_backward(p: _Problem, d: int, x, cache, dys, dfinal):
    xp, T, H = p.xp, x.shape[0], p.hidden
    f, g, h = p.acts[d]
    hs, cs, pre = cache
    peep = None if p.peepholes is None else p.peepholes[d].reshape(3, H)
    da = empty(x.runtime, pre.shape, p.dtype)
    dpeep = xp.zeros((3, H), p.dtype)
    dh, dc = dfinal
    r = p.r[d]
    for t in reversed(range(T)):
        dh = _add(dh, dys[t])
        a, c_prev, c = pre[t], cs[t], cs[t + 1]
        a_i, a_o, a_f, a_c = (a[:, k * H:(k + 1) * H] for k in range(4))
        i, o, cell, hc = f(a_i), f(a_o), g(a_c), h(c)
        forget = _one_minus(i) if p.attrs["input_forget"] else f(a_f)
        da_o = f.backward(a_o, o, _mul(dh, hc))
        dc_new = _add(dc, h.backward(c, hc, _mul(dh, o)))
        if peep is not None:
            dc_new = _add(dc_new, _mul(da_o, peep[1]))
        d_forget = _mul(dc_new, c_prev)
        d_i = _mul(dc_new, cell)
        if p.attrs["input_forget"]:
            d_i, da_f = _sub(d_i, d_forget), xp.zeros_like(d_i)
        else:
            da_f = f.backward(a_f, forget, d_forget)
        da_i = f.backward(a_i, i, d_i)
        da_c = g.backward(a_c, cell, _mul(dc_new, i))
        dc_prev = _mul(dc_new, forget)
        if peep is not None:
            dc_prev = _add(dc_prev, _add(_mul(da_i, peep[0]), _mul(da_f, peep[2])))
        da_t = xp.concatenate([da_i, da_o, da_f, da_c], axis=1)
        da[t], dh, dc = p.keep_valid(t, (da_t, da_t @ r, dc_prev),
                                     (xp.zeros_like(da_t), dh, dc))
        # dP even when P is absent (zero): every output of a backward op is well defined
        dpeep += xp.stack([_mul(da[t, :, :H], c_prev).sum(0), _mul(da[t, :, H:2 * H], c).sum(0),
                           _mul(da[t, :, 2 * H:3 * H], c_prev).sum(0)])
    grads = p.weight_grads(x, d, da, da, [(slice(None), hs[:-1])])
    return grads, (dh, dc), dpeep.reshape(-1)


# -- GRU (gate blocks z, r, h) -----------------------------------------------------------------


def _gru_forward(p: _Problem, d: int, x, keep: bool):
    xp, (T, B), H = p.xp, x.shape[:2], p.hidden
    f, g = p.acts[d]
    linear = p.attrs["linear_before_reset"]
    r_t, r_zr_t, r_h_t, rb_h = p.r[d].T, p.r[d][:2 * H].T, p.r[d][2 * H:].T, p.rb[d][2 * H:]
    # Every bias folds into the input projection except Rbh under linear_before_reset.
    bias = _add(p.wb[d], p.rb[d])
    if linear:
        bias = xp.concatenate([bias[:2 * H], p.wb[d][2 * H:]])
    xw = p.project(x, d, bias)
    hs = empty(x.runtime, (T + 1, B, H), p.dtype)
    hs[0] = p.initial[0][d]
    ys = empty(x.runtime, (T, B, H), p.dtype)
    pre = empty(x.runtime, (T, B, 3 * H), p.dtype) if keep else None
    lin = empty(x.runtime, (T, B, H), p.dtype) if keep and linear else None
    for t in range(T):
        h_prev = hs[t]
        if linear:
            hr = h_prev @ r_t
            a_zr, q = _add(xw[t, :, :2 * H], hr[:, :2 * H]), _add(hr[:, 2 * H:], rb_h)
        else:
            a_zr = _add(xw[t, :, :2 * H], h_prev @ r_zr_t)
        z, reset = f(a_zr[:, :H]), f(a_zr[:, H:])
        gate = _mul(reset, q) if linear else _mul(reset, h_prev) @ r_h_t
        a_h = _add(xw[t, :, 2 * H:], gate)
        n = g(a_h)
        if keep:
            pre[t, :, :2 * H], pre[t, :, 2 * H:] = a_zr, a_h
            if linear:
                lin[t] = q
        p.advance(t, (hs,), (_add(n, _mul(z, _sub(h_prev, n))),), ys)
    return ys, (hs[T],), (hs, pre, lin)


def _gru_backward(p: _Problem, d: int, x, cache, dys, dfinal):
    xp, T, H = p.xp, x.shape[0], p.hidden
    f, g = p.acts[d]
    hs, pre, lin = cache
    linear = p.attrs["linear_before_reset"]
    r_zr, r_h = p.r[d][:2 * H], p.r[d][2 * H:]
    da_w, da_r = empty(x.runtime, pre.shape, p.dtype), empty(x.runtime, pre.shape, p.dtype)
    (dh,) = dfinal
    for t in reversed(range(T)):
        dh = _add(dh, dys[t])
        h_prev, a = hs[t], pre[t]
        z, reset, n = f(a[:, :H]), f(a[:, H:2 * H]), g(a[:, 2 * H:])
        da_h = g.backward(a[:, 2 * H:], n, _mul(dh, _one_minus(z)))
        dh_prev = _mul(dh, z)
        if linear:
            d_reset, dr_h = _mul(da_h, lin[t]), _mul(da_h, reset)
            dh_prev = _add(dh_prev, dr_h @ r_h)
        else:
            d_reset_h = da_h @ r_h
            d_reset, dr_h = _mul(d_reset_h, h_prev), da_h
            dh_prev = _add(dh_prev, _mul(d_reset_h, reset))
        da_zr = xp.concatenate([f.backward(a[:, :H], z, _mul(dh, _sub(h_prev, n))),
                                f.backward(a[:, H:2 * H], reset, d_reset)], axis=1)
        dh_prev = _add(dh_prev, da_zr @ r_zr)
        dw_t = xp.concatenate([da_zr, da_h], axis=1)
        dr_t = xp.concatenate([da_zr, dr_h], axis=1)
        zero = xp.zeros_like(dw_t)
        da_w[t], da_r[t], dh = p.keep_valid(t, (dw_t, dr_t, dh_prev), (zero, zero, dh))
    h_inputs = hs[:-1]
    if not linear:  # Rh multiplies the reset hidden state
        h_inputs = _mul(h_inputs, f(pre[:, :, H:2 * H]))
    grads = p.weight_grads(x, d, da_w, da_r, [(slice(0, 2 * H), hs[:-1]),
                                              (slice(2 * H, 3 * H), h_inputs)])
    return grads, (dh,), None


# -- kernels ----------------------------------------------------------------------------------


def _forward_kernel(cell, run):
    def rnn(ctx, inputs, outputs, attrs):
        p = _Problem(ctx.xp, inputs, attrs, cell)
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


def _backward_kernel(cell, run, back):
    def rnn_grad(ctx, inputs, outputs, attrs):
        xp = ctx.xp
        p = _Problem(xp, inputs, attrs, cell)
        heads = _padded(inputs[len(cell.inputs):], len(cell.outputs))
        dy = _y_time_major(heads[0], p.layout)
        dstates = [_time_major(s, p.layout) for s in heads[1:]]
        dx_out, dw_out, dr_out, db_out = outputs[:4]
        dinit = [_time_major(s, p.layout) for s in outputs[4:4 + cell.states]]
        dx_total = xp.zeros(p.x.shape, p.dtype)
        zeros = xp.zeros((p.steps, p.batch, p.hidden), p.dtype)
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
        assign(_time_major(dx_out, p.layout), dx_total)
    rnn_grad.__name__ = f"{cell.name.lower()}_grad"
    return rnn_grad


kernel("LSTM")(_forward_kernel(LSTM_CELL, _lstm_forward))
kernel("GRU")(_forward_kernel(GRU_CELL, _gru_forward))
kernel("portable.LSTMGrad")(_backward_kernel(LSTM_CELL, _lstm_forward, _lstm_backward))
kernel("portable.GRUGrad")(_backward_kernel(GRU_CELL, _gru_forward, _gru_backward))
