"""Compiled LSTM and GRU forward (inference) ops: a whole node in one numba call.

The xp kernel (``backends/xp/recurrence.py``) runs each time step as a Python iteration of a
dozen NumPy calls on [B, H] arrays; at the sizes of exported models (hidden 64, batch 1-16)
those calls' overhead and temporaries are nearly all of the time. Here, per direction:

1. The input projection X @ W^T + biases of every step at once: one [T * B, In] x [In, G]
   product, compiled (``recurrent_math.matmul_nt``) or, for many rows of few inputs, NumPy's
   BLAS (see PROJECTION_BLAS_ROWS).
2. Then the steps in the direction's order (reverse: T - 1 down to 0). Each step computes
   H @ R^T with ``matmul_nt``, then the gates of the whole batch (``_lstm_gates``,
   ``_gru_reset`` / ``_gru_update``), updating the states in place and writing Y's rows of
   the step's own time index, so no reordering pass is needed afterwards.
3. The states are the Y_h / Y_c outputs themselves where those are [D, B, H] and contiguous
   (layout 0), else copied there after the call.

Configurations taken: batch * hidden <= MAX_STEP_ELEMENTS[dtype] (see its comment),
float32/float64, the default activations (LSTM: Sigmoid, Tanh, Tanh; GRU: Sigmoid, Tanh), no
``clip``, ``input_forget=0``, every direction and layout, optional bias, initial states and
peepholes, both GRU ``linear_before_reset`` values, and ``sequence_lens`` only when every length
is T (checked per call; the xp kernel runs any other call). Everything else is the xp kernel's.

Where the time went, and why it is written this way (LSTM, T 16, input 32, hidden 64, one
thread, 2 shared cores of an AVX-512 machine). The earlier loops spent ~18-30 ns per gate in
libm's scalar ``tanhf`` (320 calls a step at batch 1: ~90 us of a ~105 us call), and batch 8
(batch * hidden 512, over the old limit of 256) ran the xp kernel at 6x the batch-1 time;
OpenBLAS's sgemm for the [8, 64] x [64, 256] step product takes 7.5 us there, mostly fixed
cost (6.3 us at batch 2). Now:

- float32 tanh is a rational approximation with no call, so the gate loops vectorise, and
  the products are compiled register tiles: 2.7-3.0 us for the step product above, no BLAS
  inside the loops (``backends/numpy/jit/recurrent_math.py`` says how and how accurate).
- The gates of a step go over the batch in one call, as short loops over one gate block each
  (see ``_lstm_gates``): the loops vectorise and no array view is made per batch row.
- One numba call per node (projection, steps and every direction) and the run-time Python
  part reads what planning fixed (``_Plan``): about 2.5 us of Python per call.

Measured on the 2-layer LSTM of the small-model suite (``benchmarks/inference_latency.py
--models lstm --batches 1 8 --threads 1``, beside onnxruntime in the same run, medians of 3
runs alternated with the code before, load 4-5 on 2 cores): batch 1 0.134 -> 0.051 ms (3.6x ->
1.38x onnxruntime), batch 8 0.78 -> 0.20 ms (6.6x -> 1.69x). What is left at batch 8 is
mostly the step products (3 us each, 16 steps, 2 layers) and the projections (~20-40 us).

The gates follow the xp kernel's formulas in its order of operations (sigmoid as
0.5 * tanh(0.5 * a) + 0.5, constants of the array's dtype so float32 stays float32), so results
differ from it by the tanh approximation (float32), libm's tanh against NumPy's (float64) and
the products' summation order: a few ulps per step.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numba
import numpy as np

from backends.numpy.jit.recurrent_math import matmul_nt, project, sigmoid, tanh
from backends.numpy.jit.support import FLOATS, JIT, override
from backends.xp.kernels.rnn import kernels as xp_rnn_kernels
from portable.ops.rnn import GRU_CELL, LSTM_CELL, SEQUENCE_LENS, Cell, resolve_activations

# Batch * hidden above which the xp kernel runs, per dtype. Measured (T 16, input = hidden,
# one thread, 2 shared cores, CPU time; xp / compiled): float32 LSTM 1 x 64: 7.3, 8 x 64:
# 2.5, 1 x 256: 2.0, 16 x 256: 1.4, 64 x 256: 1.16, 1 x 1024: 1.16, 32 x 512: 1.3; GRU
# 1.1-9.8: no limit. float64 pays libm's scalar tanh (NumPy's is SIMD): LSTM 1 x 64: 2.8,
# 1 x 256: 1.1, 4 x 128: 0.9, 8 x 64: 0.7, so 256 as before the float32 tanh and the tiles.
MAX_STEP_ELEMENTS = {np.dtype(np.float32): 1 << 62, np.dtype(np.float64): 256}

# The input projection goes to NumPy's BLAS (one matmul per direction, before the loop's
# call) for float32 with at least this many rows (T * B) and at most PROJECTION_BLAS_INNER
# inputs: there the tiles' per-output horizontal sums outweigh the short dot products.
# Measured (float32, 256 outputs; tile / BLAS time): 32 x 32: 1.5, 128 x 32: 1.9,
# 128 x 64: 1.4, 16 x 32: 1.2 (even, once BLAS's extra bias pass is counted), 128 x 128: 0.94,
# any x 256: 0.5-0.85; float64 never above 1.02.
PROJECTION_BLAS_ROWS = 32
PROJECTION_BLAS_INNER = 64

# -- the loops ----------------------------------------------------------------------------------


@numba.njit(**JIT)
def _lstm(x, w, r, bias, xw, projected, h, c, peep, use_peep, y, reverse, layout, half):
    """Every direction of an LSTM over all steps.

    x: [T, B, In] (layout 0) or [B, T, In]; w: [D, 4H, In]; r: [D, 4H, H]; bias: [D, 8H],
    Wb then Rb; xw: X @ W^T + Wb + Rb of each direction, [D, T * B, 4H], when ``projected``, else
    [1, T * B, 4H] scratch for it; h, c: [D, B, H] states, updated in place; peep: [D, 3H]
    (i, o, f); y: Y, [T, D, B, H] or [B, T, D, H]; reverse: per direction, whether it walks
    from T - 1. All C-contiguous.
    """
    dirs, batch, hidden = h.shape
    steps = x.shape[0] if layout == 0 else x.shape[1]
    zero = half - half
    a = np.empty((batch, 4 * hidden), x.dtype)
    for d in range(dirs):
        if projected:
            xd = xw[d]
        else:
            xd = xw[0]
            folded = bias[d, :4 * hidden] + bias[d, 4 * hidden:]
            project(x.reshape(-1, x.shape[2]), w[d], folded, xd, zero)
        rd, hd, cd, pd = r[d], h[d], c[d], peep[d]
        for s in range(steps):
            t = steps - 1 - s if reverse[d] else s
            matmul_nt(hd, rd, a, zero)
            if layout == 0:
                _lstm_gates(xd[t * batch:(t + 1) * batch], a, pd, use_peep, cd, hd, y[t, d],
                            half)
            else:  # rows b * T + t, strided views
                _lstm_gates(xd.reshape(batch, steps, -1)[:, t], a, pd, use_peep, cd, hd,
                            y[:, t, d], half)


@numba.njit(**JIT)
def _lstm_gates(xs, a, peep, use_peep, c, h, ys, half):
    """The gates of one LSTM step for every batch row: xs, a: [B, 4H], the step's rows of
    X @ W^T + biases and of H @ R^T (a is overwritten), gates i, o, f, c; peep: [3H];
    c, h: [B, H] states, updated; ys: Y's [B, H] of the step.

    Written as short loops each touching two or three arrays, over the whole batch in one
    call, indexed by unsigned offsets: one loop reading five arrays and writing three was not
    vectorised (LLVM's runtime alias checks give up past a few pointer pairs), and a view per
    row (a[b], c[b], ...) cost each row several reference-count updates: together 2x the
    GRU's time at batch 8.
    """
    batch, hidden = c.shape
    u_o, u_f, u_c = np.uint64(hidden), np.uint64(2 * hidden), np.uint64(3 * hidden)
    for b in range(batch):
        for j in range(4 * hidden):
            a[b, j] += xs[b, j]
        if use_peep:
            for k in range(hidden):
                a[b, k] += peep[k] * c[b, k]
                a[b, u_f + np.uint64(k)] += peep[u_f + np.uint64(k)] * c[b, k]
        for k in range(hidden):
            uk = np.uint64(k)
            c[b, k] = (sigmoid(a[b, u_f + uk], half) * c[b, k]
                       + sigmoid(a[b, k], half) * tanh(a[b, u_c + uk]))
        if use_peep:
            for k in range(hidden):
                a[b, u_o + np.uint64(k)] += peep[u_o + np.uint64(k)] * c[b, k]
        for k in range(hidden):
            h[b, k] = sigmoid(a[b, u_o + np.uint64(k)], half) * tanh(c[b, k])
        for k in range(hidden):
            ys[b, k] = h[b, k]


@numba.njit(**JIT)
def _gru(x, w, r, bias, xw, projected, rb_h, linear, h, y, reverse, layout, half):
    """Every direction of a GRU over all steps.

    x: [T, B, In] (layout 0) or [B, T, In]; w: [D, 3H, In]; r: [D, 3H, H]; bias: [D, 3H],
    every bias but Rbh under linear_before_reset; xw: as ``_lstm``'s, with 3H;
    rb_h: [D, H], Rbh (``linear`` only);
    h: [D, B, H] state, updated in place; y: Y, [T, D, B, H] or [B, T, D, H]; reverse: per
    direction, whether it walks from T - 1. All C-contiguous.
    """
    dirs, batch, hidden = h.shape
    steps = x.shape[0] if layout == 0 else x.shape[1]
    zero = half - half
    # H @ R^T: z, r and (when linear) h; when not linear the h block multiplies r * H instead
    a = np.empty((batch, (3 if linear else 2) * hidden), x.dtype)
    reset_h = np.empty((batch, hidden), x.dtype)  # r * H
    a_h = np.empty((batch, hidden), x.dtype)      # (r * H) @ Rh^T
    for d in range(dirs):
        if projected:
            xd = xw[d]
        else:
            xd = xw[0]
            project(x.reshape(-1, x.shape[2]), w[d], bias[d], xd, zero)
        rd, hd, rbd = r[d], h[d], rb_h[d]
        r_gates = rd if linear else rd[:2 * hidden]
        for s in range(steps):
            t = steps - 1 - s if reverse[d] else s
            # two calls, not one of a conditional expression: that would type both views as
            # strided (the layout-1 case's), and the C-contiguous loops would not vectorise
            if layout == 0:
                _gru_step(xd[t * batch:(t + 1) * batch], r_gates, rd[2 * hidden:], rbd, linear,
                          a, reset_h, a_h, hd, y[t, d], half)
            else:  # rows b * T + t, strided views
                _gru_step(xd.reshape(batch, steps, -1)[:, t], r_gates, rd[2 * hidden:], rbd,
                          linear, a, reset_h, a_h, hd, y[:, t, d], half)


@numba.njit(**JIT)
def _gru_step(xs, r_gates, r_h, rb_h, linear, a, reset_h, a_h, h, ys, half):
    """One GRU step over the batch: xs [B, 3H], the step's rows of X @ W^T + biases; r_gates,
    r_h: R's z and r blocks (and h when ``linear``), R's h block; ys: Y's [B, H]."""
    zero = half - half
    matmul_nt(h, r_gates, a, zero)
    _gru_reset(xs, a, rb_h, linear, h, reset_h, a_h, half)
    if not linear:
        matmul_nt(reset_h, r_h, a_h, zero)
    _gru_update(xs, a, a_h, linear, h, ys)


# The GRU's gates, per step over the whole batch, as ``_lstm_gates`` (short loops, unsigned
# offsets, no view per row). xs: [B, 3H] the step's rows of X @ W^T + biases (z, r, h);
# a: [B, 2H or 3H] H @ R^T, its z block overwritten by z; h: [B, H] the state.


@numba.njit(**JIT)
def _gru_reset(xs, a, rb_h, linear, h, reset_h, a_h, half):
    """z into a's z block; then r * H into reset_h or, when ``linear``, the candidate's
    pre-activation Xh + r * (H @ Rh^T + Rbh) into a_h."""
    batch, hidden = h.shape
    u_r, u_h = np.uint64(hidden), np.uint64(2 * hidden)
    for b in range(batch):
        for k in range(hidden):
            a[b, k] = sigmoid(xs[b, k] + a[b, k], half)
        if linear:
            for k in range(hidden):
                uk = np.uint64(k)
                reset = sigmoid(xs[b, u_r + uk] + a[b, u_r + uk], half)
                a_h[b, k] = xs[b, u_h + uk] + reset * (a[b, u_h + uk] + rb_h[k])
        else:
            for k in range(hidden):
                uk = np.uint64(k)
                reset_h[b, k] = sigmoid(xs[b, u_r + uk] + a[b, u_r + uk], half) * h[b, k]


@numba.njit(**JIT)
def _gru_update(xs, a, a_h, linear, h, ys):
    """H = n + z * (H - n), n = tanh(the candidate's pre-activation); ys: Y's [B, H]."""
    batch, hidden = h.shape
    u_h = np.uint64(2 * hidden)
    for b in range(batch):
        if linear:
            for k in range(hidden):
                n = tanh(a_h[b, k])
                h[b, k] = n + a[b, k] * (h[b, k] - n)
        else:
            for k in range(hidden):
                n = tanh(xs[b, u_h + np.uint64(k)] + a_h[b, k])
                h[b, k] = n + a[b, k] * (h[b, k] - n)
        for k in range(hidden):
            ys[b, k] = h[b, k]


# -- plan time ----------------------------------------------------------------------------------


class _Plan(NamedTuple):
    """What the types and attributes fix for the run-time call."""
    reverse: tuple[bool, ...]  # per direction: whether it walks from T - 1
    layout: int
    linear: bool               # GRU's linear_before_reset
    blas: bool                 # the input projection by NumPy (PROJECTION_BLAS_ROWS)
    steps: int
    batch: int
    dirs: int
    hidden: int
    y_shape: tuple[int, ...]
    dtype: np.dtype
    half: np.floating          # 0.5 of the dtype, the sigmoid's constant


def _prepare(cell: Cell):
    """The plan-time check of ``cell``: the ``_Plan`` of a configuration the loops take, else
    None (the xp kernel is prepared instead)."""
    defaults = [name.lower() for name in cell.activations]

    def prepare(input_types, output_types, attrs):
        types = list(input_types) + [None] * (len(cell.inputs) - len(input_types))
        floats = [t for k, t in enumerate(types) if t is not None and k != SEQUENCE_LENS]
        if (floats[0].dtype not in FLOATS
                or any(t.dtype != floats[0].dtype or not t.is_static for t in floats)
                or any(t is not None and not t.is_static for t in output_types)):
            return None
        if attrs["clip"] is not None or (cell is LSTM_CELL and attrs["input_forget"]):
            return None
        try:
            activations = resolve_activations(cell, attrs)
        except ValueError:
            return None  # the xp kernel raises its own error
        if any([name for name, _, _ in direction] != defaults for direction in activations):
            return None
        dtype, layout = floats[0].dtype, int(attrs["layout"])
        x_shape = types[0].shape
        steps, batch = x_shape[:2] if layout == 0 else x_shape[1::-1]
        inner = x_shape[2]
        hidden = types[2].shape[2]
        if batch * hidden > MAX_STEP_ELEMENTS[dtype]:
            return None
        dirs = len(activations)
        reverse = tuple(d == 1 or attrs["direction"] == "reverse" for d in range(dirs))
        linear = bool(attrs["linear_before_reset"]) if cell is GRU_CELL else False
        blas = (dtype == np.float32 and steps * batch >= PROJECTION_BLAS_ROWS
                and inner <= PROJECTION_BLAS_INNER)
        y_shape = (steps, dirs, batch, hidden) if layout == 0 else (batch, steps, dirs, hidden)
        return _Plan(reverse, layout, linear, blas, steps, batch, dirs, hidden, y_shape, dtype,
                     dtype.type(0.5))
    return prepare


# -- run time -----------------------------------------------------------------------------------


def _full_lengths(lens, steps: int) -> bool:
    """Whether ``sequence_lens`` is absent or every length is T (the xp kernel's fast path)."""
    return lens is None or bool(np.all(np.asarray(lens) == steps))


def _time_major(a, layout: int):
    """[B, D, H] (layout 1) as a [D, B, H] view."""
    return a if layout == 0 else a.swapaxes(0, 1)


def _states(out, given, p: _Plan):
    """The C-contiguous [D, B, H] state the loop updates, holding the initial state ``given``
    (zeros when absent): the output ``out`` (Y_h or Y_c) itself where it is [D, B, H] and
    C-contiguous (the final state then needs no copy), else a new array; never the input."""
    if out is not None and p.layout == 0 and out.flags.c_contiguous:
        if given is None:
            out.fill(0)
        else:
            out[...] = given
        return out
    if given is None:
        return np.zeros((p.dirs, p.batch, p.hidden), p.dtype)
    return np.array(_time_major(given, p.layout), p.dtype, order="C")


def _projection(x, w, folded: Callable, blas: bool):
    """(xw, projected) for the loops: with ``blas``, X @ W^T + bias of every direction by
    NumPy, [D, T * B, G] (``folded()``: the bias [D, G]); else scratch [1, T * B, G] that the
    loop projects into."""
    dirs, gates = w.shape[:2]
    if not blas:
        return np.empty((1, x.shape[0] * x.shape[1], gates), x.dtype), False
    x2 = x.reshape(-1, x.shape[2])
    xw = np.empty((dirs, x2.shape[0], gates), x.dtype)
    for d in range(dirs):
        np.matmul(x2, w[d].T, out=xw[d])
    xw += folded()[:, None]
    return xw, True


def _output(y, p: _Plan):
    """Where the loops write Y: the output itself when C-contiguous, else scratch."""
    if y is not None and y.flags.c_contiguous:
        return y
    return np.empty(p.y_shape, p.dtype)


def _finish(outputs, y_out, finals, layout: int) -> None:
    """Copy Y out of scratch (when it was used) and the final states into Y_h / Y_c (where
    the loop did not update them in place)."""
    y = outputs[0]
    if y is not None and y_out is not y:
        y[...] = y_out
    for out, final in zip(outputs[1:], finals):
        if out is not None and out is not final:
            _time_major(out, layout)[...] = final


_contiguous = np.ascontiguousarray  # the input itself when it already is


@override(xp_rnn_kernels["LSTM"], _prepare(LSTM_CELL))
def lstm(state, ctx, inputs, outputs, attrs) -> bool:
    p = state
    x, w, r = inputs[:3]
    bias, lens, h0, c0, peep = (list(inputs[3:]) + [None] * 5)[:5]
    if lens is not None and not _full_lengths(lens, p.steps):
        return False
    gh = 4 * p.hidden
    bias = np.zeros((p.dirs, 2 * gh), p.dtype) if bias is None else _contiguous(bias)
    outputs = list(outputs) + [None] * (3 - len(outputs))
    h = _states(outputs[1], h0, p)
    c = _states(outputs[2], c0, p)
    use_peep = peep is not None
    peep = np.zeros((p.dirs, 3 * p.hidden), p.dtype) if peep is None else _contiguous(peep)
    y = _output(outputs[0], p)
    x, w = _contiguous(x), _contiguous(w)
    xw = _projection(x, w, lambda: bias[:, :gh] + bias[:, gh:], p.blas)
    _lstm(x, w, _contiguous(r), bias, *xw, h, c, peep, use_peep, y, p.reverse, p.layout, p.half)
    _finish(outputs, y, (h, c), p.layout)
    return True


@override(xp_rnn_kernels["GRU"], _prepare(GRU_CELL))
def gru(state, ctx, inputs, outputs, attrs) -> bool:
    p = state
    x, w, r = inputs[:3]
    bias, lens, h0 = (list(inputs[3:]) + [None] * 3)[:3]
    if lens is not None and not _full_lengths(lens, p.steps):
        return False
    hidden = p.hidden
    gh = 3 * hidden
    if bias is None:
        bias = np.zeros((p.dirs, 2 * gh), p.dtype)
    folded = bias[:, :gh] + bias[:, gh:]
    if p.linear:  # the reset gate scales Rbh: it stays out of the projection
        folded[:, 2 * hidden:] = bias[:, 2 * hidden:gh]
    rb_h = np.ascontiguousarray(bias[:, gh + 2 * hidden:])
    outputs = list(outputs) + [None] * (2 - len(outputs))
    h = _states(outputs[1], h0, p)
    y = _output(outputs[0], p)
    x, w = _contiguous(x), _contiguous(w)
    _gru(x, w, _contiguous(r), folded, *_projection(x, w, lambda: folded, p.blas), rb_h,
         p.linear, h, y, p.reverse, p.layout, p.half)
    _finish(outputs, y, (h,), p.layout)
    return True


kernels = {"LSTM": lstm, "GRU": gru}
