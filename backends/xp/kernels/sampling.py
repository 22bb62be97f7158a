"""NumPy kernels: GridSample (and its gradient), AffineGrid, DeformConv, RoiAlign, MaxRoiPool
and Col2Im, written against ``ctx.xp`` (NumPy or CuPy).

GridSample and DeformConv interpolate separably: along each spatial axis a position has a few
taps (1 for nearest, 2 for linear, 4 for cubic), each an input index, a weight and a validity
(zeros padding); the loop runs over the combinations of taps across axes (4 for bilinear,
64 for tricubic), each one gather over every (image, channel, position) at once. Gradients
reuse the taps: dX scatters with a weighted bincount (deterministic, no atomics) and dgrid
takes the weights' derivatives. RoiAlign and MaxRoiPool loop over the regions on the host
(their sampling grids differ per region); Col2Im walks the kernel offsets as ConvTranspose does.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from portable.ops.sampling import (CUBIC_A, affine_base_grid, col2im_geometry,
                                   deform_geometry)

from backends.xp.kernels.im2col import clipped_offsets
from portable.backend import kernel_table

kernels, kernel = kernel_table()


def _compute_dtype(dtype):
    return np.float32 if np.dtype(dtype) == np.float16 else np.dtype(dtype)


# -- GridSample ----------------------------------------------------------------------------------


def _reflect(xp, x, low: float, high: float):
    """Reflect ``x`` (outside [low, high]) by the borders until inside, as onnx.reference and
    PyTorch do; returns the position and d(position)/dx (+1 or -1)."""
    span = high - low
    if span <= 0:
        return xp.full_like(x, low), xp.zeros_like(x)
    below = x < low
    distance = xp.where(below, low - x, x - high)
    flips = xp.floor(distance / span)
    rest = distance - flips * span
    even = (flips % 2) == 0
    near, far = xp.where(below, low + rest, high - rest), xp.where(below, high - rest, low + rest)
    return xp.where(even, near, far), xp.where(even, -1.0, 1.0).astype(x.dtype)


def _cubic(t):
    """Keys cubic weights of the taps at -1, 0, 1, 2 from floor(x), t = x - floor(x), and
    their derivatives with respect to t."""
    a, u, s, v = CUBIC_A, t + 1, 1 - t, 2 - t
    weights = [((a * u - 5 * a) * u + 8 * a) * u - 4 * a, ((a + 2) * t - (a + 3)) * t * t + 1,
               ((a + 2) * s - (a + 3)) * s * s + 1, ((a * v - 5 * a) * v + 8 * a) * v - 4 * a]
    slopes = [(3 * a * u - 10 * a) * u + 8 * a, (3 * (a + 2) * t - 2 * (a + 3)) * t,
              -((3 * (a + 2) * s - 2 * (a + 3)) * s), -((3 * a * v - 10 * a) * v + 8 * a)]
    return weights, slopes


def _pixel(xp, index, size: int, padding: str, low: float, high: float):
    """Input index (clipped into range) and validity of integer positions ``index``."""
    if padding == "zeros":
        valid = (index >= 0) & (index < size)
    else:
        valid = None
        if padding == "reflection":
            index = xp.trunc(_reflect(xp, index.astype(np.float64), low, high)[0]).astype(
                np.int64)
    return xp.clip(index, 0, size - 1), valid


def _axis_taps(xp, n, size: int, attrs):
    """The taps of one spatial axis for normalised coordinates ``n``: a list of (index,
    validity or None, weight, d weight / d n)."""
    align, padding, mode = attrs["align_corners"], attrs["padding_mode"], attrs["mode"]
    if align:
        x, scale, low, high = (n + 1) / 2.0 * (size - 1), (size - 1) / 2.0, 0.0, size - 1.0
    else:
        x, scale, low, high = ((n + 1) * size - 1) / 2.0, size / 2.0, -0.5, size - 0.5
    if mode == "nearest":
        x = xp.rint(x)  # half to even, as PyTorch (and onnx.reference) round
    slope = xp.full_like(x, scale)
    outside = (x < low) | (x > high)
    if padding == "border":
        x = xp.where(outside, xp.clip(x, 0, size - 1), x)
        slope = xp.where(outside, 0.0, slope).astype(x.dtype)
    elif padding == "reflection":
        reflected, sign = _reflect(xp, x, low, high)
        x = xp.where(outside, reflected, x)
        slope = xp.where(outside, sign * slope, slope).astype(x.dtype)
    if mode == "nearest":
        index, valid = _pixel(xp, x.astype(np.int64), size, padding, low, high)
        return [(index, valid, xp.ones_like(x), xp.zeros_like(x))]
    floor = xp.floor(x)
    t = x - floor
    if mode == "linear":
        offsets, weights, slopes = (0, 1), [1 - t, t], [-slope, slope]
    else:
        offsets, (weights, slopes) = (-1, 0, 1, 2), _cubic(t)
        slopes = [s * slope for s in slopes]
    base = floor.astype(np.int64)
    return [(*_pixel(xp, base + k, size, padding, low, high), w, s)
            for k, w, s in zip(offsets, weights, slopes)]


def _grid_taps(xp, x_shape, grid, attrs):
    """Per combination of taps across the spatial axes: flat input index (N, P), weight
    (N, P) (zero where padding reads zeros), and per axis the weight's derivative."""
    spatial = tuple(x_shape[2:])
    rank = len(spatial)
    dtype = _compute_dtype(grid.dtype)
    coords = grid.reshape(grid.shape[0], -1, rank).astype(dtype)
    # grid's last axis lists coordinates innermost axis first: (x, y[, z]).
    per_axis = [_axis_taps(xp, coords[:, :, rank - 1 - d], size, attrs)
                for d, size in enumerate(spatial)]
    strides = [math.prod(spatial[d + 1:]) for d in range(rank)]
    for combo in itertools.product(*per_axis):
        flat, weight, valid = 0, 1, None
        for (index, ok, w, _), stride in zip(combo, strides):
            flat = flat + index * stride
            weight = weight * w
            if ok is not None:
                valid = ok if valid is None else valid & ok
        if valid is not None:
            weight = xp.where(valid, weight, 0)
        slopes = []
        for d, (_, ok, _, s) in enumerate(combo):
            part = s
            for e, (_, _, w, _) in enumerate(combo):
                if e != d:
                    part = part * w
            slopes.append(part if valid is None else xp.where(valid, part, 0))
        yield flat, weight, slopes


def _gather(xp, flat_x, flat):
    """flat_x (N, C, S) read at flat (N, P) for every channel: (N, C, P)."""
    return xp.take_along_axis(flat_x, flat[:, None, :], axis=2)


@kernel("GridSample")
def grid_sample(ctx, inputs, outputs, attrs):
    xp, (x, grid), y = ctx.xp, inputs, outputs[0]
    n, c = x.shape[:2]
    dtype = _compute_dtype(x.dtype)
    flat_x = x.reshape(n, c, -1).astype(dtype, copy=False)
    total = xp.zeros((n, c, math.prod(y.shape[2:])), dtype)
    if total.size and flat_x.shape[2]:
        for flat, weight, _ in _grid_taps(xp, x.shape, grid, attrs):
            total += weight.astype(dtype, copy=False)[:, None, :] * _gather(xp, flat_x, flat)
    y[...] = total.reshape(y.shape)


@kernel("portable.GridSampleGrad")
def grid_sample_grad(ctx, inputs, outputs, attrs):
    xp, (dy, x, grid) = ctx.xp, inputs
    dx, dgrid = outputs
    n, c = x.shape[:2]
    size, rank = math.prod(x.shape[2:]), x.ndim - 2
    dtype = _compute_dtype(x.dtype)
    flat_x = x.reshape(n, c, -1).astype(dtype, copy=False)
    flat_dy = dy.reshape(n, c, -1).astype(dtype, copy=False)
    # Scatter target: (image, channel) planes laid end to end, one bincount for every tap.
    plane = (xp.arange(n * c, dtype=np.int64) * size).reshape(n, c, 1)
    points, weights = [], []
    dcoords = xp.zeros(grid.shape[:1] + (flat_dy.shape[2], rank), dtype)
    for flat, weight, slopes in _grid_taps(xp, x.shape, grid, attrs):
        points.append((plane + flat[:, None, :]).reshape(-1))
        weights.append((flat_dy * weight.astype(dtype, copy=False)[:, None, :]).reshape(-1))
        seen = xp.sum(flat_dy * _gather(xp, flat_x, flat), axis=1)  # (N, P)
        for d, s in enumerate(slopes):
            dcoords[:, :, rank - 1 - d] += seen * s.astype(dtype, copy=False)
    if points and size:
        scattered = xp.bincount(xp.concatenate(points), weights=xp.concatenate(weights),
                                minlength=n * c * size)
        dx[...] = scattered.reshape(dx.shape)
    else:
        dx[...] = 0
    dgrid[...] = dcoords.reshape(dgrid.shape)


# -- AffineGrid ----------------------------------------------------------------------------------


@kernel("AffineGrid")
def affine_grid(ctx, inputs, outputs, attrs):
    xp, theta, grid = ctx.xp, inputs[0], outputs[0]
    spatial = grid.shape[1:-1]
    base = xp.asarray(affine_base_grid(spatial, bool(attrs["align_corners"])))
    dtype = np.float64 if theta.dtype == np.float64 else np.float32
    points = xp.matmul(base.astype(dtype)[None], xp.swapaxes(theta.astype(dtype), 1, 2))
    grid[...] = points.reshape(grid.shape)


# -- Col2Im --------------------------------------------------------------------------------------


def _host_ints(ctx, value) -> list[int]:
    return [int(v) for v in np.asarray(ctx.backend.to_numpy(value)).reshape(-1)]


@kernel("Col2Im")
def col2im(ctx, inputs, outputs, attrs):
    """Each block offset's columns add into the image elements they came from (one strided
    add per offset; what falls into the pads is never computed)."""
    x, y = inputs[0], outputs[0]
    image, block = _host_ints(ctx, inputs[1]), _host_ints(ctx, inputs[2])
    geom = col2im_geometry(image, block, attrs)
    cols = x.reshape(y.shape[:2] + tuple(block) + tuple(geom.out))
    y[...] = 0
    for k, windows, index in clipped_offsets(geom, geom.out, image):
        y[index] += cols[(slice(None), slice(None)) + k][windows]


# -- DeformConv ----------------------------------------------------------------------------------


def deform_columns(xp, x, offset, mask, kernel_shape, geom, offset_group: int, dtype):
    """The sampled columns (N, C, K, P): for every channel, kernel offset and output position,
    the input interpolated (N-linearly, zeros outside) at the window position plus its offset,
    times the mask."""
    n, c = x.shape[:2]
    spatial, rank = tuple(x.shape[2:]), len(kernel_shape)
    k, p = math.prod(kernel_shape), math.prod(geom.out)
    g = offset_group
    shifts = offset.reshape(n, g, k, rank, p).astype(dtype, copy=False)
    taps = []
    for d in range(rank):
        kernel_at = np.indices(kernel_shape).reshape(rank, k)[d] * geom.dilations[d]
        out_at = np.indices(geom.out).reshape(rank, p)[d] * geom.strides[d] - geom.head[d]
        base = xp.asarray((kernel_at[:, None] + out_at[None, :]).astype(dtype))
        position = base + shifts[:, :, :, d, :]  # (N, G, K, P)
        floor = xp.floor(position)
        axis = []
        for step in (0, 1):
            index = floor.astype(np.int64) + step
            weight = 1 - xp.abs(position - index)
            valid = (index >= 0) & (index < spatial[d])
            axis.append((xp.clip(index, 0, spatial[d] - 1), xp.where(valid, weight, 0)))
        taps.append(axis)
    strides = [math.prod(spatial[d + 1:]) for d in range(rank)]
    grouped = x.reshape(n, g, c // g, -1).astype(dtype, copy=False)
    cols = 0
    for combo in itertools.product(*taps):
        flat = sum(index * s for (index, _), s in zip(combo, strides)).reshape(n, g, 1, k * p)
        weight = math.prod(w for _, w in combo).reshape(n, g, 1, k * p)
        cols = cols + weight * xp.take_along_axis(grouped, flat, axis=3)
    if mask is not None:
        cols = cols * mask.reshape(n, g, 1, k * p).astype(dtype, copy=False)
    return cols.reshape(n, c, k, p)


@kernel("DeformConv")
def deform_conv(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    x, w, offset = inputs[:3]
    bias = inputs[3] if len(inputs) > 3 else None
    mask = inputs[4] if len(inputs) > 4 else None
    y, group = outputs[0], attrs["group"]
    kernel_shape = tuple(w.shape[2:])
    geom = deform_geometry(x.shape[2:], kernel_shape, attrs)
    dtype = _compute_dtype(x.dtype)
    cols = deform_columns(xp, x, offset, mask, kernel_shape, geom, attrs["offset_group"], dtype)
    n, c, k, p = cols.shape
    m = w.shape[0]
    weights = w.reshape(group, m // group, -1).astype(dtype, copy=False)
    total = xp.matmul(weights[None], cols.reshape(n, group, c // group * k, p))
    total = total.reshape(n, m, p)
    if bias is not None:
        total = total + bias.astype(dtype, copy=False).reshape(1, m, 1)
    y[...] = total.reshape(y.shape)


# -- RoiAlign and MaxRoiPool ---------------------------------------------------------------------


def _roi_axis(start: float, bin_size: float, bins: int, samples: int, size: int):
    """One axis of a region's bilinear samples, (bins, samples) each: low and high input
    index, the weight of the low one, and validity (onnx.reference's pre-calculation)."""
    at = (start + np.arange(bins)[:, None] * bin_size
          + (np.arange(samples)[None, :] + 0.5) * bin_size / samples)
    valid = (at >= -1.0) & (at <= size)
    at = np.maximum(at, 0.0)
    low = at.astype(np.int64)
    last = low >= size - 1
    low = np.where(last, size - 1, low)
    high = np.where(last, size - 1, low + 1)
    at = np.where(last, low, at)
    return low, high, 1.0 - (at - low), valid


@kernel("RoiAlign")
def roi_align(ctx, inputs, outputs, attrs):
    xp, (x, rois, batch), y = ctx.xp, inputs, outputs[0]
    boxes = np.asarray(ctx.backend.to_numpy(rois), np.float64)
    images = np.asarray(ctx.backend.to_numpy(batch)).reshape(-1)
    height, width = x.shape[2:]
    out_h, out_w = y.shape[2:]
    half_pixel = attrs["coordinate_transformation_mode"] == "half_pixel"
    scale, ratio = attrs["spatial_scale"], attrs["sampling_ratio"]
    dtype = _compute_dtype(x.dtype)
    for r in range(boxes.shape[0]):
        x1, y1, x2, y2 = boxes[r] * scale - (0.5 if half_pixel else 0.0)
        roi_w, roi_h = x2 - x1, y2 - y1
        if not half_pixel:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        grid_h = ratio if ratio > 0 else int(math.ceil(roi_h / out_h))
        grid_w = ratio if ratio > 0 else int(math.ceil(roi_w / out_w))
        if grid_h <= 0 or grid_w <= 0:
            y[r] = 0
            continue
        ylo, yhi, wy, vy = _roi_axis(y1, roi_h / out_h, out_h, grid_h, height)
        xlo, xhi, wx, vx = _roi_axis(x1, roi_w / out_w, out_w, grid_w, width)
        valid = vy[:, :, None, None] & vx[None, None, :, :]  # (out_h, grid_h, out_w, grid_w)
        feature = x[int(images[r])].astype(dtype, copy=False)
        corners = []
        for rows, wr in ((ylo, wy), (yhi, 1 - wy)):
            for cols, wc in ((xlo, wx), (xhi, 1 - wx)):
                weight = np.where(valid, wr[:, :, None, None] * wc[None, None, :, :], 0.0)
                value = feature[:, xp.asarray(rows)[:, :, None, None],
                                xp.asarray(cols)[None, None, :, :]]
                corners.append(xp.asarray(weight.astype(dtype))[None] * value)
        if attrs["mode"] == "avg":
            y[r] = sum(corners).sum(axis=(2, 4)) / max(grid_h * grid_w, 1)
        else:  # the largest weighted corner of any sample (onnx.reference's max mode)
            best = corners[0]
            for corner in corners[1:]:
                best = xp.maximum(best, corner)
            y[r] = best.max(axis=(2, 4))


def _round_half_away(v: float) -> int:
    return int(math.floor(abs(v) + 0.5)) * (1 if v >= 0 else -1)


def max_roi_bins(roi, scale: float, pooled, height: int, width: int):
    """Per output bin (ph, pw) of one region [batch, x1, y1, x2, y2] the input rows and
    columns it covers (Caffe's ROIPooling: corners rounded, each bin at least one pixel wide
    before clipping to the image; an empty bin yields 0)."""
    x1, y1, x2, y2 = (_round_half_away(float(v) * scale) for v in roi[1:5])
    roi_h, roi_w = max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1)
    for ph in range(pooled[0]):
        h0 = min(max(math.floor(ph * roi_h / pooled[0]) + y1, 0), height)
        h1 = min(max(math.ceil((ph + 1) * roi_h / pooled[0]) + y1, 0), height)
        for pw in range(pooled[1]):
            w0 = min(max(math.floor(pw * roi_w / pooled[1]) + x1, 0), width)
            w1 = min(max(math.ceil((pw + 1) * roi_w / pooled[1]) + x1, 0), width)
            yield ph, pw, slice(h0, h1), slice(w0, w1)


@kernel("MaxRoiPool")
def max_roi_pool(ctx, inputs, outputs, attrs):
    (x, rois), y = inputs, outputs[0]
    boxes = np.asarray(ctx.backend.to_numpy(rois), np.float64)
    height, width = x.shape[2:]
    for r, roi in enumerate(boxes):
        image = x[int(roi[0])]
        for ph, pw, rows, cols in max_roi_bins(roi, attrs["spatial_scale"], y.shape[2:],
                                               height, width):
            region = image[:, rows, cols]
            y[r, :, ph, pw] = region.max(axis=(1, 2)) if region.size else 0
