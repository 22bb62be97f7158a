"""OpenCL kernels: DFT and STFT as one GEMM with the DFT's real matrix (``dft_matrix``: the
rows of the signal along its axis, components interleaved, times a cos/sin matrix), STFT's
frames gathered first; windows and MelWeightMatrix, fixed by their scalar inputs, are computed
on the host and uploaded (as Range is).

The GEMM costs O(n^2) per transform instead of an FFT's O(n log n): for the frame and
spectrogram sizes ONNX models use (n up to a few thousand) it is one well-tuned kernel rather
than log n launches.
"""
from __future__ import annotations

import math

import numpy as np

from portable.ops.signal import (WINDOWS, dft_geometry, dft_matrix, mel_weight_matrix,
                                 stft_geometry, window_values)

from backends.opencl.allocator import empty, from_numpy, host_value
from backends.opencl.arrayops import matmul
from backends.opencl.elementwise import apply, assign, upload_into
from backends.opencl.gather import gather_axis
from backends.opencl.kernels.table import kernel_table

kernels, kernel = kernel_table()


def _optional(inputs, index):
    return inputs[index] if len(inputs) > index and inputs[index] is not None else None


def _host(value):
    return None if value is None else host_value(value)


def _run_dft(x, geometry, out) -> None:
    """``out`` = the DFT ``geometry`` of ``x``: x viewed as (outer, length, inner, cin), its
    first ``used`` rows moved last, (outer * inner, used * cin) @ W, and the result's bins
    moved back between outer and inner."""
    g = geometry
    runtime = out.runtime
    outer = math.prod(g.shape[:g.axis])
    inner = math.prod(g.shape[g.axis + 1:-1])
    if out.size == 0:
        return
    if g.used == 0:  # an empty signal transforms to zeros
        assign(out, 0)
        return
    rows = x.contiguous().reshape(outer, g.length, inner, g.cin)[:, :g.used]
    lhs = rows.transpose(0, 2, 1, 3).contiguous().reshape(outer * inner, g.used * g.cin)
    weights = from_numpy(runtime, dft_matrix(g).astype(x.dtype))
    product = empty(runtime, (outer * inner, g.bins * g.cout), out.dtype)
    matmul(lhs, weights, product)
    target = out if out.is_contiguous else empty(runtime, out.shape, out.dtype)
    assign(target.reshape(outer, g.bins, inner, g.cout),
           product.reshape(outer, inner, g.bins, g.cout).transpose(0, 2, 1, 3))
    if target is not out:
        assign(out, target)


@kernel("DFT")
def dft(ctx, inputs, outputs, attrs):
    x = inputs[0]
    geometry = dft_geometry(x.shape, _host(_optional(inputs, 1)), _host(_optional(inputs, 2)),
                            attrs["inverse"], attrs["onesided"])
    _run_dft(x, geometry, outputs[0])


@kernel("STFT")
def stft(ctx, inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    window = _optional(inputs, 2)
    geo = stft_geometry(x.shape, host_value(inputs[1]),
                        None if window is None else window.shape[0],
                        _host(_optional(inputs, 3)), attrs["onesided"])
    batch, _, comps = x.shape
    frames = empty(out.runtime, (batch, geo.count * geo.length, comps), x.dtype)
    gather_axis(x, from_numpy(out.runtime, geo.positions), 1, frames)
    frames = frames.reshape(batch, geo.count, geo.length, comps)
    if window is not None:
        apply("Mul", frames, window.reshape(1, 1, geo.length, 1), out=frames)
    _run_dft(frames, geo.dft, out)


def _window_kernel(op):
    def run(ctx, inputs, outputs, attrs):
        out = outputs[0]
        upload_into(out, window_values(op, host_value(inputs[0]), attrs["periodic"],
                                       out.dtype))
    run.__name__ = op.lower()
    return run


for _op in WINDOWS:
    kernel(_op, half="native")(_window_kernel(_op))


@kernel("MelWeightMatrix", half="native")
def mel_weight_matrix_kernel(ctx, inputs, outputs, attrs):
    out = outputs[0]
    upload_into(out, mel_weight_matrix(*(host_value(v) for v in inputs), np.dtype(out.dtype)))
