"""Compiled LSTM and GRU forward (inference) ops: the whole time loop of a direction in one
numba call.

The xp kernel (``backends/xp/recurrence.py``) runs each time step as a Python iteration of a
dozen NumPy calls on [B, H] arrays; at the sizes of exported models (hidden 64, batch 1) those
calls' overhead and temporaries are nearly all of the time. Here:

1. The input projection X @ W^T of every step and direction stays one NumPy matmul (plus the
   folded biases), as in the xp kernel: [T, B, D, gates * H] (layout 0) or [B, T, D, ...].
2. Per direction, one compiled loop walks the steps in its order (reverse: T - 1 down to 0).
   Each step does the recurrent matmul H @ R^T with ``np.dot`` (BLAS, through numba's scipy
   binding), then the gates element by element, updating the states in place and writing
   Y's row of the step's own time index, so no reordering pass is needed afterwards.
3. The final states go to Y_h / Y_c in the node's layout.

Configurations taken: batch * hidden <= MAX_STEP_ELEMENTS (the small, overhead-bound steps:
see its comment), float32/float64, the default activations (LSTM: Sigmoid, Tanh, Tanh; GRU:
Sigmoid, Tanh), no ``clip``, ``input_forget=0``, every direction and layout, optional bias,
initial states and peepholes, both GRU ``linear_before_reset`` values, and ``sequence_lens``
only when every length is T (checked per call; the xp kernel runs any other call, and a
compile then happens on the first full-length call, not at plan time). Everything else is the
xp kernel's.

The gates are computed with the xp kernel's formulas in its order of operations (sigmoid as
0.5 * tanh(0.5 * a) + 0.5, constants of the array's dtype so float32 stays float32), so results
differ from it only by libm's tanh against NumPy's and BLAS blocking: a few ulps per step.

Why BLAS for H @ R^T: measured against explicit axpy loops (R^T rows contiguous, vectorised)
on 2 shared cores, one BLAS thread: batch 1 / hidden 64 float32 0.95 us vs 1.38 us per step,
batch 16 / hidden 256 271 us vs 333 us (float64: 1.96 vs 2.76 us, 320 vs 698 us); at batch 1
a gemv (see ``_hidden_product``). numba's
``np.dot`` needs scipy; without it the xp kernel runs (a loop compiled with both paths would
not compile, and one taking the matmul as an argument cannot be cached on disk).
"""
from __future__ import annotations

import importlib.util

import numba
import numpy as np

from backends.numpy.jit.support import FLOATS, JIT, override
from backends.xp.kernels.rnn import kernels as xp_rnn_kernels
from portable.ops.rnn import GRU_CELL, LSTM_CELL, SEQUENCE_LENS, Cell, resolve_activations

_BLAS = importlib.util.find_spec("scipy") is not None

# Batch * hidden above which the xp kernel runs. The loops' gates call libm's scalar tanh
# (numba has no vector math library without Intel's SVML), NumPy's float32 tanh is SIMD: past
# a few hundred elements a step, that outweighs the per-step call overhead the loops save.
# Measured (T 16, input = hidden, one BLAS thread, 2 shared cores; xp / compiled time):
# batch 1 x hidden 64: LSTM 3.4-3.6, GRU 3.8-4.1; 1 x 256: 1.2-1.5; float32 4 x 128 and
# 16 x 64: 0.67-0.78, 16 x 256: 0.55-0.6; float64 stays about even up to 16 x 256 (0.89-1.3).
MAX_STEP_ELEMENTS = 256


@numba.njit(inline="always", **JIT)
def _sigmoid(a, half):
    return half * np.tanh(half * a) + half


@numba.njit(inline="always", **JIT)
def _hidden_product(h, r, rt, out):
    """out = h @ r^T. One item: a gemv on R as it is (a gemm would pack all of R every step:
    2x slower at hidden 1024). Several: a gemm on R^T ([H, G], contiguous)."""
    if h.shape[0] == 1:
        np.dot(r, h[0], out[0])
    else:
        np.dot(h, rt, out)


@numba.njit(**JIT)
def _lstm_direction(xw, d, layout, reverse, r, rt, h, c, peep, use_peep, y, half):
    """One direction of an LSTM over all steps.

    xw: [T, B, D, 4H] (layout 0) or [B, T, D, 4H], X @ W^T + Wb + Rb; r, rt: R[d] [4H, H]
    and (used when B > 1) its transpose;
    h, c: [B, H] states, updated in place; peep: [3H] (i, o, f); y: Y, [T, D, B, H] or
    [B, T, D, H].
    """
    steps = xw.shape[0] if layout == 0 else xw.shape[1]
    batch, hidden = h.shape
    a = np.empty((batch, 4 * hidden), h.dtype)
    for s in range(steps):
        t = steps - 1 - s if reverse else s
        _hidden_product(h, r, rt, a)
        for b in range(batch):
            xr = xw[t, b, d] if layout == 0 else xw[b, t, d]
            yr = y[t, d, b] if layout == 0 else y[b, t, d]
            ar, hr, cr = a[b], h[b], c[b]
            for k in range(hidden):
                c_prev = cr[k]
                a_i = xr[k] + ar[k]
                a_o = xr[hidden + k] + ar[hidden + k]
                a_f = xr[2 * hidden + k] + ar[2 * hidden + k]
                a_c = xr[3 * hidden + k] + ar[3 * hidden + k]
                if use_peep:
                    a_i += peep[k] * c_prev
                    a_f += peep[2 * hidden + k] * c_prev
                i = _sigmoid(a_i, half)
                cell = _sigmoid(a_f, half) * c_prev + i * np.tanh(a_c)
                if use_peep:
                    a_o += peep[hidden + k] * cell
                out = _sigmoid(a_o, half) * np.tanh(cell)
                cr[k] = cell
                hr[k] = out
                yr[k] = out


@numba.njit(**JIT)
def _gru_direction(xw, d, layout, reverse, r, rt, r_h, rt_h, rb_h, linear, h, y, half):
    """One direction of a GRU over all steps.

    xw: [T, B, D, 3H] (layout 0) or [B, T, D, 3H], X @ W^T plus every bias but Rbh under
    linear_before_reset; r: R[d], all three blocks [3H, H] when ``linear``, else the z and r
    blocks [2H, H] with the h block in ``r_h`` [H, H]; rt, rt_h: their transposes (used when
    B > 1); rb_h: Rbh [H] (``linear`` only);
    h: [B, H] state, updated in place; y: Y, [T, D, B, H] or [B, T, D, H].
    """
    steps = xw.shape[0] if layout == 0 else xw.shape[1]
    batch, hidden = h.shape
    a = np.empty((batch, r.shape[0]), h.dtype)    # H @ R^T: z, r (and h when linear)
    reset_h = np.empty((batch, hidden), h.dtype)  # r * H, then (r * H) @ Rh^T
    a_h = np.empty((batch, hidden), h.dtype)
    for s in range(steps):
        t = steps - 1 - s if reverse else s
        _hidden_product(h, r, rt, a)
        for b in range(batch):
            xr = xw[t, b, d] if layout == 0 else xw[b, t, d]
            ar, hr = a[b], h[b]
            for k in range(hidden):
                ar[k] = _sigmoid(xr[k] + ar[k], half)                  # z, kept in place
                reset = _sigmoid(xr[hidden + k] + ar[hidden + k], half)
                if linear:
                    a_h[b, k] = xr[2 * hidden + k] + reset * (ar[2 * hidden + k] + rb_h[k])
                else:
                    reset_h[b, k] = reset * hr[k]
        if not linear:
            _hidden_product(reset_h, r_h, rt_h, a_h)
        for b in range(batch):
            xr = xw[t, b, d] if layout == 0 else xw[b, t, d]
            yr = y[t, d, b] if layout == 0 else y[b, t, d]
            ar, hr = a[b], h[b]
            for k in range(hidden):
                pre = a_h[b, k] if linear else xr[2 * hidden + k] + a_h[b, k]
                n = np.tanh(pre)
                new = n + ar[k] * (hr[k] - n)
                hr[k] = new
                yr[k] = new


# -- plan time ----------------------------------------------------------------------------------


def _prepare(cell: Cell):
    """The plan-time check of ``cell``: the state tuple for a configuration the loops take,
    else None (the xp kernel is prepared instead)."""
    defaults = [name.lower() for name in cell.activations]

    def prepare(input_types, output_types, attrs):
        types = list(input_types) + [None] * (len(cell.inputs) - len(input_types))
        floats = [t for k, t in enumerate(types) if t is not None and k != SEQUENCE_LENS]
        if (not _BLAS or floats[0].dtype not in FLOATS
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
        hidden, batch = types[2].shape[2], types[0].shape[1 - int(attrs["layout"])]
        if batch * hidden > MAX_STEP_ELEMENTS:
            return None
        dirs = len(activations)
        reverse = tuple(d == 1 or attrs["direction"] == "reverse" for d in range(dirs))
        linear = bool(attrs["linear_before_reset"]) if cell is GRU_CELL else False
        return reverse, int(attrs["layout"]), linear
    return prepare


# -- run time -----------------------------------------------------------------------------------


def _full_lengths(lens, steps: int) -> bool:
    """Whether ``sequence_lens`` is absent or every length is T (the xp kernel's fast path)."""
    return lens is None or bool(np.all(np.asarray(lens) == steps))


def _time_major(a, layout: int):
    """[B, D, H] (layout 1) as a [D, B, H] view."""
    return a if layout == 0 else a.swapaxes(0, 1)


def _states(given, dirs: int, batch: int, hidden: int, layout: int, dtype):
    """A writable C-contiguous [D, B, H] copy of an initial state (zeros when absent)."""
    if given is None:
        return np.zeros((dirs, batch, hidden), dtype)
    return np.array(_time_major(given, layout), dtype, order="C")  # a copy: never the input


def _projection(x, w, bias, layout: int):
    """X @ W^T + bias of every step and direction: [T, B, D, G] (layout 0) or [B, T, D, G]."""
    dirs, gates = w.shape[:2]
    xw = x.reshape(-1, x.shape[-1]) @ w.reshape(dirs * gates, -1).T
    xw = xw.reshape(x.shape[:2] + (dirs, gates))
    xw += bias
    return xw


def _blocks(r, batch: int):
    """A block of R as the loops take it: (rows [G, H], transpose [H, G]), both contiguous;
    at batch 1 the transpose is not used and not made."""
    r = np.ascontiguousarray(r)
    return r, (r if batch == 1 else np.ascontiguousarray(r.T))


def _output(y, shape, dtype):
    """Where the loops write Y: the output itself when C-contiguous, else scratch."""
    if y is not None and y.flags.c_contiguous:
        return y
    return np.empty(shape, dtype)


def _finish(outputs, y, y_out, finals, layout: int) -> None:
    """Copy Y out of scratch (when it was used) and the final states into Y_h / Y_c."""
    if y is not None and y_out is not y:
        y[...] = y_out
    for out, final in zip(outputs[1:], finals):
        if out is not None:
            _time_major(out, layout)[...] = final


@override(xp_rnn_kernels["LSTM"], _prepare(LSTM_CELL))
def lstm(state, ctx, inputs, outputs, attrs) -> bool:
    reverse, layout, _ = state
    inputs = list(inputs) + [None] * (len(LSTM_CELL.inputs) - len(inputs))
    outputs = list(outputs) + [None] * (3 - len(outputs))
    x, w, r, bias, lens, h0, c0, peep = inputs
    steps, batch = x.shape[:2] if layout == 0 else x.shape[1::-1]
    if not _full_lengths(lens, steps):
        return False
    dirs, hidden, dtype = w.shape[0], r.shape[2], x.dtype
    gh = 4 * hidden
    folded = np.zeros((dirs, gh), dtype) if bias is None else bias[:, :gh] + bias[:, gh:]
    xw = _projection(x, w, folded, layout)
    h = _states(h0, dirs, batch, hidden, layout, dtype)
    c = _states(c0, dirs, batch, hidden, layout, dtype)
    use_peep = peep is not None
    peep = np.zeros((dirs, 3 * hidden), dtype) if peep is None else np.ascontiguousarray(peep)
    shape = (steps, dirs, batch, hidden) if layout == 0 else (batch, steps, dirs, hidden)
    y = _output(outputs[0], shape, dtype)
    for d in range(dirs):
        _lstm_direction(xw, d, layout, reverse[d], *_blocks(r[d], batch), h[d], c[d], peep[d],
                        use_peep, y, dtype.type(0.5))
    _finish(outputs, outputs[0], y, (h, c), layout)
    return True


@override(xp_rnn_kernels["GRU"], _prepare(GRU_CELL))
def gru(state, ctx, inputs, outputs, attrs) -> bool:
    reverse, layout, linear = state
    inputs = list(inputs) + [None] * (len(GRU_CELL.inputs) - len(inputs))
    outputs = list(outputs) + [None] * (2 - len(outputs))
    x, w, r, bias, lens, h0 = inputs
    steps, batch = x.shape[:2] if layout == 0 else x.shape[1::-1]
    if not _full_lengths(lens, steps):
        return False
    dirs, hidden, dtype = w.shape[0], r.shape[2], x.dtype
    gh = 3 * hidden
    if bias is None:
        bias = np.zeros((dirs, 2 * gh), dtype)
    folded = bias[:, :gh] + bias[:, gh:]
    if linear:  # the reset gate scales Rbh: it stays out of the projection
        folded[:, 2 * hidden:] = bias[:, 2 * hidden:gh]
    xw = _projection(x, w, folded, layout)
    rb_h = np.ascontiguousarray(bias[:, gh + 2 * hidden:])
    h = _states(h0, dirs, batch, hidden, layout, dtype)
    shape = (steps, dirs, batch, hidden) if layout == 0 else (batch, steps, dirs, hidden)
    y = _output(outputs[0], shape, dtype)
    for d in range(dirs):
        if linear:
            blocks = _blocks(r[d], batch) * 2  # the h block is not used alone
        else:
            blocks = _blocks(r[d, :2 * hidden], batch) + _blocks(r[d, 2 * hidden:], batch)
        _gru_direction(xw, d, layout, reverse[d], *blocks, rb_h[d], linear, h[d], y,
                       dtype.type(0.5))
    _finish(outputs, outputs[0], y, (h,), layout)
    return True


kernels = {"LSTM": lstm, "GRU": gru}
