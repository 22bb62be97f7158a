"""Resize (ONNX 19): nearest, linear and cubic interpolation, one axis at a time.

Interpolation is separable, so every backend runs the same plan: for each resized axis,
``out = sum_k weight[:, k] * take(x, index[:, k], axis)`` over the kernel's taps (1 chosen
neighbour for nearest, 2 for linear, 4 for cubic), indices clamped to the axis (edge padding)
and, for ``tf_crop_and_resize``, positions outside the crop set to ``extrapolation_value``.
:func:`axis_plan` computes those indices and weights on the host, with NumPy, from the
attributes and the axis lengths alone. Antialiased downsampling (``antialias=1``, linear and
cubic) widens the kernel by 1/scale, so an axis then has more taps, normalised to sum to one,
as onnx.reference's ``op_resize.py`` does. Not differentiable.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from portable.ir.graph import TensorType
from portable.ops.registry import Attr, declare

MODES = ("nearest", "linear", "cubic")
COORDINATES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
               "asymmetric", "tf_crop_and_resize")
NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


@dataclass(frozen=True)
class AxisPlan:
    """How one axis is resized: ``index`` and ``weight`` (out_len, taps); ``outside``
    (out_len,) marks positions that take ``extrapolation_value`` (None: none do)."""

    axis: int
    index: np.ndarray
    weight: np.ndarray
    outside: np.ndarray | None


def _source_coordinates(mode: str, out_len: int, in_len: int, scale: float,
                        roi: tuple[float, float] | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Where each output position lies on the input axis, and which fall outside a crop."""
    y = np.arange(out_len, dtype=np.float64)
    width = scale * in_len  # the (fractional) output length the scale implies
    if mode == "asymmetric":
        return y / scale, None
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5, None
    if mode == "pytorch_half_pixel":
        return ((y + 0.5) / scale - 0.5) if width != 1 else np.full(out_len, -0.5), None
    if mode == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / width)
        return offset + (y + 0.5) / scale - 0.5, None
    if mode == "align_corners":
        return (y * (in_len - 1) / (width - 1)) if width != 1 else np.zeros(out_len), None
    start, end = roi if roi is not None else (0.0, 1.0)  # tf_crop_and_resize
    if width == 1:
        x = np.full(out_len, (end - start) * (in_len - 1) / 2)
    else:
        x = y * (end - start) * (in_len - 1) / (width - 1)
    x = x + start * (in_len - 1)
    return x, (x < 0) | (x > in_len - 1)


def _taps(kernel: str, ratio: np.ndarray, nearest_mode: str, a: float) -> np.ndarray:
    """The weights of the taps left of and right of each position (ratio in (0, 1])."""
    if kernel == "linear":
        return np.stack([1 - ratio, ratio], axis=1)
    if kernel == "nearest":
        whole = ratio == 1
        right = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                 "floor": np.zeros_like(whole), "ceil": np.ones_like(whole)}[nearest_mode]
        right = right | whole
        return np.stack([~right, right], axis=1).astype(np.float64)
    r = ratio  # cubic convolution (Keys), taps at -1, 0, 1, 2 from the left neighbour
    s = 1 - r
    return np.stack([((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
                     ((a + 2) * r - (a + 3)) * r * r + 1,
                     ((a + 2) * s - (a + 3)) * s * s + 1,
                     ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a], axis=1)


def _antialias_taps(kernel: str, ratio: np.ndarray, scale: float, a: float) -> np.ndarray:
    """The linear (triangle) or cubic kernel stretched by 1/scale when downsampling, sampled
    at every input position it reaches: ``2 * ceil(reach / scale)`` taps, the first one
    ``-(taps // 2 - 1)`` positions from the left neighbour, each row normalised to sum 1."""
    scale = min(scale, 1.0)
    reach = 1 if kernel == "linear" else 2  # the kernel's support is [-reach, reach]
    start = int(np.floor(-reach / scale) + 1)
    offsets = np.arange(start, 2 - start, dtype=np.float64)
    t = np.abs((offsets[None, :] - ratio[:, None]) * scale)
    if kernel == "linear":
        weight = np.clip(1 - t, 0, 1)
    else:
        weight = np.where(t <= 1, ((a + 2) * t - (a + 3)) * t * t + 1,
                          np.where(t < 2, ((a * t - 5 * a) * t + 8 * a) * t - 4 * a, 0.0))
    return weight / weight.sum(axis=1, keepdims=True)


def axis_plan(attrs: dict, axis: int, in_len: int, out_len: int, scale: float,
              roi: tuple[float, float] | None = None) -> AxisPlan:
    """The indices and weights that resize one axis from ``in_len`` to ``out_len``."""
    x, outside = _source_coordinates(attrs["coordinate_transformation_mode"], out_len, in_len,
                                     scale, roi)
    left = np.floor(x)
    ratio = np.where(x == left, 1.0, x - left)  # an exact position counts from its left
    left = (x - ratio).round().astype(np.int64)
    if attrs["antialias"] and attrs["mode"] != "nearest":
        weight = _antialias_taps(attrs["mode"], ratio, scale, attrs["cubic_coeff_a"])
    else:
        weight = _taps(attrs["mode"], ratio, attrs["nearest_mode"], attrs["cubic_coeff_a"])
    taps = weight.shape[1]
    index = left[:, None] + np.arange(taps)[None, :] - (taps // 2 - 1)
    if attrs["exclude_outside"]:
        weight = np.where((index < 0) | (index >= in_len), 0.0, weight)
        total = weight.sum(axis=1, keepdims=True)
        weight = weight / np.where(total == 0, 1.0, total)
    index = np.clip(index, 0, in_len - 1)
    if taps == 2 and attrs["mode"] == "nearest":  # one tap: the chosen neighbour
        pick = weight[:, 1] > 0
        index = np.where(pick, index[:, 1], index[:, 0])[:, None]
        weight = weight.sum(axis=1, keepdims=True)
    if outside is not None and not outside.any():
        outside = None
    return AxisPlan(axis, index, weight, outside)


def resize_layout(attrs: dict, shape: tuple[int, ...], roi, scales, sizes
                  ) -> tuple[list[int], list[float], list[tuple[float, float] | None]]:
    """Output shape, per-axis scale and per-axis crop (``roi``) from the inputs' values.

    Raises:
        ValueError: for inconsistent inputs (the message names what is wrong).
    """
    rank = len(shape)
    axes = [int(a) % rank for a in (attrs["axes"] or range(rank))]
    if len(set(axes)) != len(axes):
        raise ValueError(f"axes {attrs['axes']} repeat an axis")
    roi = None if roi is None or np.asarray(roi).size == 0 else np.asarray(roi, np.float64)
    crops: list[tuple[float, float] | None] = [None] * rank
    if roi is not None:
        if roi.size != 2 * len(axes):
            raise ValueError(f"roi needs {2 * len(axes)} values (starts, then ends), got "
                             f"{roi.size}")
        for k, axis in enumerate(axes):
            crops[axis] = (float(roi[k]), float(roi[len(axes) + k]))
    factors = [1.0] * rank
    out = list(shape)
    if sizes is not None and np.asarray(sizes).size:
        sizes = [int(v) for v in np.asarray(sizes).ravel()]
        if len(sizes) != len(axes):
            raise ValueError(f"sizes has {len(sizes)} values for {len(axes)} axes")
        for axis, size in zip(axes, sizes):
            factors[axis] = size / shape[axis] if shape[axis] else 1.0
            out[axis] = size
        policy = attrs["keep_aspect_ratio_policy"]
        if policy != "stretch":
            chosen = [factors[a] for a in axes]
            scale = min(chosen) if policy == "not_larger" else max(chosen)
            for axis in axes:
                factors[axis] = scale
                out[axis] = int(scale * shape[axis] + 0.5)
    elif scales is not None and np.asarray(scales).size:
        given = [float(v) for v in np.asarray(scales).ravel()]
        if len(given) != len(axes) or any(v <= 0 for v in given):
            raise ValueError(f"scales {given} must hold one positive value per axis {axes}")
        for axis, scale in zip(axes, given):
            factors[axis] = scale
            out[axis] = int(np.floor(shape[axis] * scale))
    else:
        raise ValueError("one of scales and sizes must be given")
    return out, factors, crops


def plans(attrs: dict, shape: tuple[int, ...], roi, scales, sizes) -> list[AxisPlan]:
    """The plan of every axis that changes, first axis first (as ONNX's reference goes)."""
    out, factors, crops = resize_layout(attrs, shape, roi, scales, sizes)
    return [axis_plan(attrs, axis, shape[axis], out[axis], factors[axis], crops[axis])
            for axis in range(len(shape))
            if out[axis] != shape[axis] or factors[axis] != 1.0 or crops[axis] is not None]


def _check_attrs(ctx) -> None:
    attrs = ctx.attrs
    for name, choices in (("mode", MODES), ("coordinate_transformation_mode", COORDINATES),
                          ("nearest_mode", NEAREST),
                          ("keep_aspect_ratio_policy", ("stretch", "not_larger",
                                                        "not_smaller"))):
        if attrs[name] not in choices:
            ctx.fail(f"{name}={attrs[name]!r} is not one of {list(choices)}")
    if attrs["antialias"] and attrs["mode"] == "nearest":
        ctx.fail("antialias=1 filters linear and cubic resizing; mode 'nearest' has no "
                 "antialiased form")


def _resize_infer(ctx):
    _check_attrs(ctx)
    known = [ctx.value(i) if ctx.has(i) else None for i in (1, 2, 3)]
    try:
        out, _, _ = resize_layout(ctx.attrs, ctx.shape(0), *known)
    except ValueError as exc:
        ctx.fail(str(exc))
    return [TensorType(out, ctx.dtype(0))]


declare("Resize", inputs=("X", "roi?", "scales?", "sizes?"), outputs=("Y",),
        infer=_resize_infer, onnx_since=19, nondiff_inputs=(1, 2, 3), shape_inputs=(1, 2, 3),
        attrs={"mode": Attr("string", "nearest"),
               "coordinate_transformation_mode": Attr("string", "half_pixel"),
               "nearest_mode": Attr("string", "round_prefer_floor"),
               "cubic_coeff_a": Attr("float", -0.75), "exclude_outside": Attr("int", 0),
               "extrapolation_value": Attr("float", 0.0), "antialias": Attr("int", 0),
               "axes": Attr("ints", None), "keep_aspect_ratio_policy": Attr("string", "stretch")})
