"""Signal ops: DFT and STFT (complex numbers as a trailing axis of 2: real, imaginary; a real
signal has a trailing axis of 1), and the generators HannWindow, HammingWindow, BlackmanWindow
and MelWeightMatrix.

The ONNX semantics live once, in host helpers that the type rules, gradient rules and kernels
share: ``dft_geometry`` (which lengths a DFT reads and writes), ``dft_matrix`` (the DFT as a
real matrix over (sample, component) pairs, for backends that run it as a GEMM),
``stft_geometry``, ``window_values`` and ``mel_weight_matrix``.

DFT and STFT are linear in the signal, so their gradients are adjoint DFTs, written with DFT
itself (see ``_dft_adjoint``).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from portable.dtypes import from_onnx
from portable.errors import ShapeError
from portable.ir.graph import TensorType
from portable.ops.movement import INDEX_DTYPES, ints
from portable.ops.registry import Attr, declare
from portable.ops.rules import require_float


def _checked(ctx, fn, *args):
    """Call a semantics helper, turning its ValueError into a ShapeError naming the node."""
    try:
        return fn(*args)
    except ValueError as exc:
        ctx.fail(str(exc))


def _scalar_int(value: Any, what: str) -> int:
    flat = ints(value)
    if len(flat) != 1:
        raise ValueError(f"{what} must be one integer, got {len(flat)} values")
    return flat[0]


# -- DFT -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DftGeometry:
    """What one DFT node reads and writes.

    ``axis``: the signal axis (non-negative); ``length``: the input's extent along it; ``n``:
    the transform length; ``used``: input rows that reach the result (the rest are cut, and
    missing rows count as zeros); ``bins``: the output's extent along the axis; ``cin`` /
    ``cout``: 1 (real) or 2 (complex) trailing components.
    """

    shape: tuple[int, ...]
    axis: int
    length: int
    n: int
    used: int
    bins: int
    cin: int
    cout: int
    inverse: bool
    onesided: bool

    @property
    def out_shape(self) -> tuple[int, ...]:
        shape = list(self.shape)
        shape[self.axis], shape[-1] = self.bins, self.cout
        return tuple(shape)

    @property
    def irfft(self) -> bool:
        """One-sided spectrum in, real signal out (numpy.fft.irfft)."""
        return self.inverse and self.onesided


def dft_geometry(shape, dft_length: Any, axis: Any, inverse: int,
                 onesided: int) -> DftGeometry:
    """DFT-20's geometry for an input of ``shape`` (``dft_length``/``axis``: the optional
    inputs' values or None). Raises ValueError on a malformed node."""
    shape = tuple(int(d) for d in shape)
    rank = len(shape)
    if rank < 2 or shape[-1] not in (1, 2):
        raise ValueError(f"input {shape} must be [..., signal..., 1 or 2] (real or complex "
                         f"trailing components)")
    axis = -2 if axis is None else _scalar_int(axis, "axis")
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        raise ValueError(f"axis {axis} must be in [-{rank}, -2] or [0, {rank - 2}] (the last "
                         f"axis holds the components)")
    axis %= rank
    length = shape[axis]
    inverse, onesided = bool(inverse), bool(onesided)
    if dft_length is None:
        n = 2 * (length - 1) if inverse and onesided else length
    else:
        n = _scalar_int(dft_length, "dft_length")
    if n < 1:
        raise ValueError(f"dft_length {n} must be positive")
    half = n // 2 + 1
    used = min(length, half if inverse and onesided else n)
    bins = half if onesided and not inverse else n
    cout = 1 if inverse and onesided else 2
    return DftGeometry(shape, axis, length, n, used, bins, shape[-1], cout, inverse, onesided)


def _irfft_weights(n: int, count: int) -> np.ndarray:
    """How often bin t of a one-sided spectrum counts in a real signal of length n: once for
    the DC bin and (n even) the Nyquist bin, twice (with its mirror) for the others."""
    t = np.arange(count)
    return np.where((t == 0) | (2 * t == n), 1.0, 2.0)


@functools.lru_cache(maxsize=64)
def _dft_matrix(n, used, bins, cin, cout, inverse, irfft):
    t = np.arange(used)[:, None]
    k = np.arange(bins)[None, :]
    theta = 2 * np.pi * ((t * k) % n) / n  # reduced first: exact angles for long transforms
    cos, sin = np.cos(theta), np.sin(theta)
    w = np.zeros((used, cin, bins, cout))
    if irfft:  # y[k] = sum_t c_t / n (Re X_t cos - Im X_t sin)
        scale = (_irfft_weights(n, used) / n)[:, None]
        w[:, 0, :, 0] = scale * cos
        if cin == 2:
            w[:, 1, :, 0] = -scale * sin
    else:  # forward: X e^{-i theta}; inverse: X e^{+i theta} / n
        sign, scale = (1.0, 1.0 / n) if inverse else (-1.0, 1.0)
        w[:, 0, :, 0] = scale * cos
        w[:, 0, :, 1] = sign * scale * sin
        if cin == 2:
            w[:, 1, :, 0] = -sign * scale * sin
            w[:, 1, :, 1] = scale * cos
    w = w.reshape(used * cin, bins * cout)
    w.setflags(write=False)
    return w


def dft_matrix(geometry: DftGeometry) -> np.ndarray:
    """The DFT as a real float64 matrix W of shape (used * cin, bins * cout): the rows of the
    input along the axis, components interleaved, times W give the output's rows."""
    g = geometry
    return _dft_matrix(g.n, g.used, g.bins, g.cin, g.cout, g.inverse, g.irfft)


def _dft_values(ctx):
    dft_length = ctx.value(1) if ctx.has(1) else None
    axis = ctx.value(2) if ctx.has(2) else None
    return dft_length, axis


def _dft_infer(ctx):
    require_float(ctx, 0)
    for i in (1, 2):
        if ctx.has(i) and (ctx.dtype(i) not in INDEX_DTYPES or len(ctx.shape(i)) > 1):
            ctx.fail(f"{ctx.op.input_name(i)} must be an int32 or int64 scalar, got "
                     f"{ctx.type(i)!r}")
    geometry = _checked(ctx, dft_geometry, ctx.shape(0), *_dft_values(ctx),
                        ctx.attrs["inverse"], ctx.attrs["onesided"])
    return [TensorType(geometry.out_shape, ctx.dtype(0))]


def _ints_const(g, values):
    return g.const(np.asarray(values, np.int64))


def _fit(g, value, axis: int, size: int):
    """``value`` cut or zero-padded along ``axis`` to ``size`` (Pad takes negative widths)."""
    have = g.shape(value)[axis]
    if have == size:
        return value
    rank = len(g.shape(value))
    pads = [0] * (2 * rank)
    pads[rank + axis] = size - have
    return g.emit("Pad", value, _ints_const(g, pads))


def _along(g, values: np.ndarray, axis: int, like):
    """A constant holding ``values`` along ``axis`` of ``like``'s rank (1 elsewhere)."""
    shape = [1] * len(g.shape(like))
    shape[axis] = len(values)
    return g.const(np.asarray(values, g.dtype(like)).reshape(shape))


def _dft_adjoint(g, dy, geometry: DftGeometry):
    """The adjoint of the DFT ``geometry`` applied to ``dy`` (the output's gradient): with
    F the unnormalised forward transform, F^H = n * inverse DFT, so
    - forward (one-sided or not): n * IDFT(dy zero-padded to n bins);
    - inverse: DFT(dy) / n;
    - one-sided inverse (irfft): bin t gets c_t / n * rfft(dy)[t], c_t counting t's mirror;
    then cut or zero-padded back to the input's length, and its real part for a real input.
    """
    geo = geometry
    axis, n = geo.axis, geo.n
    length, axis_input = _ints_const(g, n), g.const(np.asarray(axis, np.int64))
    if geo.irfft:
        spectrum = g.emit("DFT", dy, length, axis_input, onesided=1)
        dx = g.emit("Mul", spectrum,
                    _along(g, _irfft_weights(n, n // 2 + 1) / n, axis, spectrum))
    elif geo.inverse:
        dx = g.emit("Mul", g.emit("DFT", dy, length, axis_input), g.scalar(1.0 / n, dy))
    else:
        dx = g.emit("Mul", g.emit("DFT", dy, length, axis_input, inverse=1), g.scalar(n, dy))
    dx = _fit(g, dx, axis, geo.length)
    if geo.cin == 1:
        dx = g.emit("Slice", dx, _ints_const(g, [0]), _ints_const(g, [1]),
                    _ints_const(g, [len(geo.shape) - 1]))
    return dx


def _value_or_none(g, handle):
    return None if handle is None else g.value(handle)


def _dft_grad(g, dys):
    inputs = list(g.inputs) + [None] * (3 - len(g.inputs))
    geometry = dft_geometry(g.shape(inputs[0]), _value_or_none(g, inputs[1]),
                            _value_or_none(g, inputs[2]), g.attrs["inverse"],
                            g.attrs["onesided"])
    return [_dft_adjoint(g, dys[0], geometry), None, None][:len(g.inputs)]


declare("DFT", inputs=("input", "dft_length?", "axis?"), outputs=("output",),
        infer=_dft_infer, attrs={"inverse": Attr("int", 0), "onesided": Attr("int", 0)},
        onnx_since=20, grad=_dft_grad, nondiff_inputs=(1, 2))

# -- STFT ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StftGeometry:
    """STFT's frames: ``count`` frames of ``length`` samples, ``step`` apart, each a DFT of
    ``dft`` (along axis 2 of the frames (batch, frame, sample, component))."""

    count: int
    length: int
    step: int
    dft: DftGeometry

    @property
    def positions(self) -> np.ndarray:
        """The signal sample each (frame, sample) reads, frame-major."""
        return (np.arange(self.count)[:, None] * self.step
                + np.arange(self.length)[None, :]).reshape(-1)


def stft_geometry(shape, step: Any, window_length: int | None, frame_length: Any,
                  onesided: int) -> StftGeometry:
    """STFT-17's frames for a signal of ``shape`` (batch, samples, 1 or 2). Raises
    ValueError on a malformed node."""
    shape = tuple(int(d) for d in shape)
    if len(shape) != 3 or shape[-1] not in (1, 2):
        raise ValueError(f"signal {shape} must be [batch, samples, 1 or 2]")
    step = _scalar_int(step, "frame_step")
    if step < 1:
        raise ValueError(f"frame_step {step} must be positive")
    length = None if frame_length is None else _scalar_int(frame_length, "frame_length")
    if length is not None and window_length is not None and length != window_length:
        raise ValueError(f"frame_length {length} differs from the window's {window_length}")
    length = length if length is not None else window_length
    length = shape[1] if length is None else length
    if not 1 <= length <= shape[1]:
        raise ValueError(f"frame length {length} must be in [1, {shape[1]}] (the samples)")
    count = 1 + (shape[1] - length) // step
    dft = dft_geometry((shape[0], count, length, shape[2]), None, 2, 0, onesided)
    return StftGeometry(count, length, step, dft)


def _stft_infer(ctx):
    require_float(ctx, 0)
    for i in (1, 3):
        if ctx.has(i) and (ctx.dtype(i) not in INDEX_DTYPES or len(ctx.shape(i)) > 1):
            ctx.fail(f"{ctx.op.input_name(i)} must be an int32 or int64 scalar, got "
                     f"{ctx.type(i)!r}")
    if ctx.has(2) and (len(ctx.shape(2)) != 1 or ctx.dtype(2) != ctx.dtype(0)):
        ctx.fail(f"window {ctx.type(2)!r} must be 1-D of the signal's dtype")
    geometry = _checked(ctx, stft_geometry, ctx.shape(0), ctx.value(1),
                        ctx.shape(2)[0] if ctx.has(2) else None,
                        ctx.value(3) if ctx.has(3) else None, ctx.attrs["onesided"])
    return [TensorType(geometry.dft.out_shape, ctx.dtype(0))]


def _stft_grad(g, dys):
    """y = DFT(frames * window) along the frame's samples: the frames' gradient z is the
    adjoint DFT of dy; the signal gets z * window added back where each frame read it
    (GatherGrad: overlapping frames add up), the window sum(z * frames)."""
    inputs = list(g.inputs) + [None] * (4 - len(g.inputs))
    x, window = inputs[0], inputs[2]
    geo = stft_geometry(g.shape(x), g.value(inputs[1]),
                        None if window is None else g.shape(window)[0],
                        _value_or_none(g, inputs[3]), g.attrs["onesided"])
    batch, _, comps = g.shape(x)
    frames_shape = _ints_const(g, [batch, geo.count, geo.length, comps])
    dz = _dft_adjoint(g, dys[0], geo.dft)
    d_window = None
    if window is not None:
        w = g.emit("Reshape", window, _ints_const(g, [1, 1, geo.length, 1]))
        frames = g.emit("Reshape", g.emit("Gather", x, g.const(geo.positions), axis=1),
                        frames_shape)
        d_window = g.emit("ReduceSum", g.emit("Mul", dz, frames), _ints_const(g, [0, 1, 3]),
                          keepdims=0)
        dz = g.emit("Mul", dz, w)
    flat = g.emit("Reshape", dz, _ints_const(g, [batch, geo.count * geo.length, comps]))
    dx = g.emit("portable.GatherGrad", flat, g.const(geo.positions), axis=1,
                shape=list(g.shape(x)))
    return [dx, None, d_window, None][:len(g.inputs)]


declare("STFT", inputs=("signal", "frame_step", "window?", "frame_length?"),
        outputs=("output",), infer=_stft_infer, attrs={"onesided": Attr("int", 1)},
        onnx_since=17, grad=_stft_grad, nondiff_inputs=(1, 3))

# -- windows and the mel filter bank ------------------------------------------------------------

# cos-series coefficients a_j of w[i] = sum_j a_j cos(2 pi j i / N) per window (ONNX's values)
WINDOWS = {"HannWindow": (0.5, -0.5), "HammingWindow": (25 / 46, -(1 - 25 / 46)),
           "BlackmanWindow": (0.42, -0.5, 0.08)}


def window_values(op: str, size: Any, periodic: int, dtype: Any) -> np.ndarray:
    """The window ``op`` of ``size`` samples (periodic: N = size, else N = size - 1),
    computed in float64 and cast to ``dtype``. Raises ValueError."""
    size = _scalar_int(size, "size")
    if size < 0:
        raise ValueError(f"size {size} must not be negative")
    n = size if periodic else size - 1
    i = np.arange(size, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # size 1, symmetric: 0 / 0, as ONNX
        angle = 2 * np.pi * i / n
        values = sum(a * np.cos(j * angle) for j, a in enumerate(WINDOWS[op]))
    return np.asarray(values).astype(dtype)


def _output_dtype(ctx, code: int) -> np.dtype:
    try:
        return from_onnx(code)
    except ShapeError as exc:
        ctx.fail(f"output_datatype: {exc}")


def _window_infer(ctx):
    if ctx.dtype(0) not in INDEX_DTYPES or len(ctx.shape(0)) > 1:
        ctx.fail(f"size must be an int32 or int64 scalar, got {ctx.type(0)!r}")
    size = _checked(ctx, _scalar_int, ctx.value(0), "size")
    if size < 0:
        ctx.fail(f"size {size} must not be negative")
    return [TensorType((size,), _output_dtype(ctx, ctx.attrs["output_datatype"]))]


def _attr_dtype(ctx):
    return [from_onnx(ctx.attrs["output_datatype"])]


for _name in WINDOWS:
    declare(_name, inputs=("size",), outputs=("output",), infer=_window_infer,
            attrs={"periodic": Attr("int", 1), "output_datatype": Attr("int", 1)},
            onnx_since=17, dtype_rule=_attr_dtype)


def mel_weight_matrix(num_mel_bins: Any, dft_length: Any, sample_rate: Any, lower_hertz: Any,
                      upper_hertz: Any, dtype: Any) -> np.ndarray:
    """MelWeightMatrix-17 as onnx.reference computes it: triangles over the one-sided
    spectrum's bins, (dft_length // 2 + 1, num_mel_bins). Raises ValueError."""
    bins = _scalar_int(num_mel_bins, "num_mel_bins")
    n = _scalar_int(dft_length, "dft_length")
    rate = _scalar_int(sample_rate, "sample_rate")
    low, high = (float(np.asarray(v).reshape(-1)[0]) for v in (lower_hertz, upper_hertz))
    if bins < 1 or n < 1 or rate < 1:
        raise ValueError(f"num_mel_bins {bins}, dft_length {n} and sample_rate {rate} must "
                         f"be positive")
    spectrum = n // 2 + 1
    # (the reference's exact float steps: a bin edge is a floor, one ulp can move it)
    low_mel, high_mel = (2595 * np.log1p(f / 700) / np.log(10) for f in (low, high))
    step = (high_mel - low_mel) / (bins + 2)  # (sic: ONNX's reference divides by bins + 2)
    mels = np.arange(bins + 2) * step + low_mel
    hertz = 700 * np.expm1(mels / 2595 * np.log(10))
    points = ((n + 1) * hertz // rate).astype(np.int64)
    if points.min() < 0 or points.max() >= spectrum:
        raise ValueError(f"edges {low} to {high} Hz reach bins {points.min()} to "
                         f"{points.max()}, outside the {spectrum} bins of a {n}-point spectrum")
    out = np.zeros((spectrum, bins))
    for i in range(bins):
        left, centre, right = points[i:i + 3]
        if centre == left:
            out[centre, i] = 1
        else:
            rows = np.arange(left, centre + 1)
            out[rows, i] = (rows - left) / (centre - left)
        if right > centre:
            rows = np.arange(centre, right)
            out[rows, i] = (right - rows) / (right - centre)
    return out.astype(dtype)


def _mel_infer(ctx):
    for i in range(3):
        if ctx.dtype(i) not in INDEX_DTYPES or len(ctx.shape(i)) > 1:
            ctx.fail(f"{ctx.op.input_name(i)} must be an int32 or int64 scalar, got "
                     f"{ctx.type(i)!r}")
    for i in (3, 4):
        if ctx.dtype(i).kind != "f" or len(ctx.shape(i)) > 1:
            ctx.fail(f"{ctx.op.input_name(i)} must be a float scalar, got {ctx.type(i)!r}")
    bins = _checked(ctx, _scalar_int, ctx.value(0), "num_mel_bins")
    n = _checked(ctx, _scalar_int, ctx.value(1), "dft_length")
    if bins < 1 or n < 1:
        ctx.fail(f"num_mel_bins {bins} and dft_length {n} must be positive")
    return [TensorType((n // 2 + 1, bins), _output_dtype(ctx, ctx.attrs["output_datatype"]))]


declare("MelWeightMatrix", inputs=("num_mel_bins", "dft_length", "sample_rate",
                                   "lower_edge_hertz", "upper_edge_hertz"),
        outputs=("output",), infer=_mel_infer, attrs={"output_datatype": Attr("int", 1)},
        onnx_since=17, dtype_rule=_attr_dtype, nondiff_inputs=(0, 1, 2, 3, 4))
