"""NumPy/CuPy kernels: DFT and STFT through ``xp.fft`` (in the signal's precision, as ONNX's
reference computes them), windows and MelWeightMatrix (fixed by their
scalar inputs: computed on the host and copied in)."""
from __future__ import annotations

from portable.ops.signal import (WINDOWS, dft_geometry, mel_weight_matrix, stft_geometry,
                                 window_values)

from portable.backend import kernel_table

kernels, kernel = kernel_table()


def _host(ctx, value):
    return None if value is None else ctx.backend.to_numpy(value)


def _optional(inputs, index):
    return inputs[index] if len(inputs) > index else None


def _complex(xp, x):
    """The signal without its component axis, complex (or real) in the input's precision
    (float16 in float32), as ONNX's reference transforms it."""
    wide = x.astype(xp.float64 if x.dtype == xp.float64 else xp.float32, copy=False)
    if x.shape[-1] == 1:
        return wide[..., 0]
    return wide[..., 0] + 1j * wide[..., 1]


def _transform(xp, signal, geometry):
    """The DFT of ``signal`` (components already folded in) along the geometry's axis: a
    complex array (a real one for irfft)."""
    g = geometry
    if g.irfft:
        return xp.fft.irfft(signal, n=g.n, axis=g.axis)
    if g.inverse:
        return xp.fft.ifft(signal, n=g.n, axis=g.axis)
    spectrum = xp.fft.fft(signal, n=g.n, axis=g.axis)
    if g.onesided:
        spectrum = xp.take(spectrum, xp.arange(g.bins), axis=g.axis)
    return spectrum


def _write(out, result):
    if out.shape[-1] == 1:
        out[..., 0] = result.real if result.dtype.kind == "c" else result
    else:
        out[..., 0] = result.real
        out[..., 1] = result.imag


@kernel("DFT")
def dft(ctx, inputs, outputs, attrs):
    x = inputs[0]
    geometry = dft_geometry(x.shape, _host(ctx, _optional(inputs, 1)),
                            _host(ctx, _optional(inputs, 2)), attrs["inverse"],
                            attrs["onesided"])
    _write(outputs[0], _transform(ctx.xp, _complex(ctx.xp, x), geometry))


@kernel("STFT")
def stft(ctx, inputs, outputs, attrs):
    xp, x = ctx.xp, inputs[0]
    window = _optional(inputs, 2)
    geo = stft_geometry(x.shape, _host(ctx, inputs[1]),
                        None if window is None else window.shape[0],
                        _host(ctx, _optional(inputs, 3)), attrs["onesided"])
    frames = xp.take(_complex(xp, x), xp.asarray(geo.positions), axis=1)
    frames = frames.reshape(x.shape[0], geo.count, geo.length)
    if window is not None:
        frames = frames * window.astype(frames.real.dtype, copy=False)
    _write(outputs[0], _transform(xp, frames, geo.dft))


def _window_kernel(op):
    def run(ctx, inputs, outputs, attrs):
        out = outputs[0]
        out[...] = ctx.xp.asarray(window_values(op, _host(ctx, inputs[0]), attrs["periodic"],
                                                out.dtype))
    run.__name__ = op.lower()
    return run


for _op in WINDOWS:
    kernel(_op)(_window_kernel(_op))


@kernel("MelWeightMatrix")
def mel_weight_matrix_kernel(ctx, inputs, outputs, attrs):
    out = outputs[0]
    out[...] = ctx.xp.asarray(mel_weight_matrix(*(_host(ctx, v) for v in inputs), out.dtype))
