"""CenterCropPad: crop or zero-pad chosen axes to a given length, keeping the centre.

Where one element of a crop or pad cannot be split evenly, the extra one goes at the end (the
start is ``(larger - smaller) // 2``). The per-axis windows are computed once, here, by
:func:`crop_pad_slices`; every backend copies ``X[crop]`` into ``Y[pad]`` over zeros. The
gradient is the same op back to X's lengths: cropping and padding by the same start are each
other's adjoints.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from portable.ir.graph import TensorType
from portable.ops.registry import Attr, declare
from portable.ops.rules import normalize_axes


def crop_pad_slices(in_shape: Sequence[int], out_shape: Sequence[int]
                    ) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
    """``(crop, pad)``: Y[pad] = X[crop], Y zero elsewhere, for centred crops and pads."""
    crop, pad = [], []
    for n, m in zip(in_shape, out_shape):
        start = abs(n - m) // 2
        crop.append(slice(start, start + m) if m < n else slice(0, n))
        pad.append(slice(start, start + n) if m > n else slice(0, m))
    return tuple(crop), tuple(pad)


def center_crop_pad_shape(in_shape: Sequence[int | None], lengths: Sequence[int],
                          axes: Sequence[int] | None) -> tuple[int | None, ...]:
    """The output shape: ``lengths`` on ``axes`` (non-negative, default every axis)."""
    out = list(in_shape)
    for axis, length in zip(range(len(in_shape)) if axes is None else axes, lengths):
        out[axis] = int(length)
    return tuple(out)


def _center_crop_pad_infer(ctx):
    shape = ctx.shape(0)
    if ctx.dtype(1).kind not in "iu" or len(ctx.shape(1)) != 1:
        ctx.fail(f"shape must be a 1-D integer tensor, got {ctx.type(1)!r}")
    axes = ctx.attrs["axes"]
    axes = None if axes is None else normalize_axes(ctx, axes, len(shape))
    lengths = [int(v) for v in np.asarray(ctx.value(1)).reshape(-1)]
    count = len(shape) if axes is None else len(axes)
    if len(lengths) != count or any(v < 0 for v in lengths):
        ctx.fail(f"shape {lengths} must hold {count} non-negative lengths (one per "
                 f"{'axis' if axes is None else f'axis of axes {list(axes)}'})")
    return [TensorType(center_crop_pad_shape(shape, lengths, axes), ctx.dtype(0))]


def _center_crop_pad_grad(g, dys):
    x = g.inputs[0]
    lengths = np.asarray(g.shape(x), np.int64)
    attrs = {}
    if g.attrs["axes"] is not None:
        rank = len(lengths)
        axes = [int(a) % rank for a in g.attrs["axes"]]
        lengths, attrs = lengths[axes], {"axes": axes}
    return [g.emit("CenterCropPad", dys[0], g.const(lengths), **attrs), None]


declare("CenterCropPad", inputs=("input_data", "shape"), outputs=("output_data",),
        infer=_center_crop_pad_infer, onnx_since=18, nondiff_inputs=(1,), shape_inputs=(1,),
        attrs={"axes": Attr("ints", None)}, grad=_center_crop_pad_grad)
