"""OpenCL kernels: GridSample (and its gradient), AffineGrid, DeformConv, RoiAlign, MaxRoiPool
and Col2Im.

GridSample, RoiAlign, MaxRoiPool and DeformConv's sampling are small hand-written kernels, one
work-item per output element, that compute their sampling positions on the device from the
data (no host round trip). A position's taps along each axis (index, weight, derivative) come
from one C function shared by the forward and both gradients. GridSample's dX scatters
through a compare-and-swap atomic add (as PyTorch's CUDA grid_sampler backward does): sums
may round differently from run to run, by float rounding only. AffineGrid is one GEMM with
the host-built base grid, DeformConv sampled columns and a GEMM, Col2Im the col2im kernel of
ConvTranspose.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from portable.errors import BackendError
from portable.ops.sampling import (CUBIC_A, GRID_MODES, GRID_PADDINGS, affine_base_grid,
                                   col2im_geometry, deform_geometry)

from backends.opencl.allocator import empty, from_numpy, host_value
from backends.opencl.elementwise import apply, assign
from backends.opencl.gemm import gemm
from backends.opencl.kernels.conv import window_kernel
from backends.opencl.kernels.sampling_source import ATOMIC, GRID_SAMPLE, REGIONS, TAPS
from backends.opencl.kernels.table import kernel_table
from backends.opencl.kernels.window import Window
from backends.opencl.scalars import ctype, preamble

kernels, kernel = kernel_table()


@lru_cache(maxsize=None)
def _grid_source(dtype: np.dtype, grid_dtype: np.dtype) -> str:
    t, g = ctype(dtype).storage, ctype(grid_dtype).storage
    return (preamble([dtype, grid_dtype]) + f"#define T {t}\n#define G {g}\n#define R {g}\n"
            f"#define CUBIC_A {CUBIC_A}\n" + ATOMIC[t] + TAPS + GRID_SAMPLE)


def _grid_args(x_shape, grid, attrs):
    import pyopencl.cltypes as cltypes

    if len(x_shape) - 2 > 3:
        raise BackendError(f"GridSample over {len(x_shape) - 2} spatial axes (X {x_shape}): "
                           f"the OpenCL kernel supports at most 3; run it on the CPU")
    spatial = tuple(x_shape[2:]) + (1,) * (3 - len(x_shape[2:]))
    points = int(np.prod(grid.shape[1:-1]))
    return (np.int32(points), np.int32(int(np.prod(x_shape[2:]))), np.int32(len(x_shape) - 2),
            cltypes.make_int4(*spatial, 0), np.int32(GRID_MODES.index(attrs["mode"])),
            np.int32(GRID_PADDINGS.index(attrs["padding_mode"])),
            np.int32(bool(attrs["align_corners"])))


def _contiguous_target(y):
    return y if y.is_contiguous else empty(y.runtime, y.shape, y.dtype)


def _finish(target, y):
    if target is not y:
        assign(y, target)


@kernel("GridSample")
def grid_sample(ctx, inputs, outputs, attrs):
    x, grid = (v.contiguous() for v in inputs)
    y, runtime = outputs[0], x.runtime
    target = _contiguous_target(y)
    points, size, dims, shape, mode, padding, align = _grid_args(x.shape, grid, attrs)
    if size == 0:
        assign(y, 0)
        return
    source = _grid_source(x.dtype, grid.dtype)
    runtime.launch1d(runtime.kernel(source, "grid_sample"), target.size, np.int32(target.size),
                     np.int32(x.shape[1]), points, size, dims, shape, mode, padding, align,
                     x.buffer, np.int32(x.offset), grid.buffer, np.int32(grid.offset),
                     target.buffer, np.int32(target.offset))
    _finish(target, y)


@kernel("portable.GridSampleGrad")
def grid_sample_grad(ctx, inputs, outputs, attrs):
    dy, x, grid = (v.contiguous() for v in inputs)
    dx, dgrid = outputs
    runtime = x.runtime
    args = _grid_args(x.shape, grid, attrs)
    source = _grid_source(x.dtype, grid.dtype)
    dx_target, dg_target = _contiguous_target(dx), _contiguous_target(dgrid)
    assign(dx_target, 0)
    channels = np.int32(x.shape[1])
    runtime.launch1d(runtime.kernel(source, "grid_sample_dx"), dy.size, np.int32(dy.size),
                     channels, *args, dy.buffer, np.int32(dy.offset), grid.buffer,
                     np.int32(grid.offset), dx_target.buffer, np.int32(dx_target.offset))
    total = int(np.prod(grid.shape[:-1]))
    runtime.launch1d(runtime.kernel(source, "grid_sample_dgrid"), total, np.int32(total),
                     channels, *args, dy.buffer, np.int32(dy.offset), x.buffer,
                     np.int32(x.offset), grid.buffer, np.int32(grid.offset), dg_target.buffer,
                     np.int32(dg_target.offset))
    _finish(dx_target, dx)
    _finish(dg_target, dgrid)


@kernel("AffineGrid")
def affine_grid(ctx, inputs, outputs, attrs):
    theta, grid = inputs[0], outputs[0]
    runtime = theta.runtime
    base = affine_base_grid(grid.shape[1:-1], bool(attrs["align_corners"]))
    n, rank = theta.shape[0], theta.shape[1]
    target = empty(runtime, (n, base.shape[0], rank), theta.dtype)
    gemm(from_numpy(runtime, base.astype(theta.dtype)),
         theta.contiguous().transpose(0, 2, 1), target)
    assign(grid, target.reshape(grid.shape))


@kernel("Col2Im")
def col2im(ctx, inputs, outputs, attrs):
    """The col2im kernel of ConvTranspose: each image element sums the columns that reach it."""
    x, y = inputs[0].contiguous(), outputs[0]
    image, block = ([int(v) for v in np.asarray(host_value(a)).reshape(-1)] for a in inputs[1:])
    geom = col2im_geometry(image, block, attrs)
    win = Window.of(geom, image)
    target = _contiguous_target(y)
    runtime = y.runtime
    runtime.launch1d(window_kernel(runtime, x.dtype, "col2im"), target.size,
                     np.int32(target.size), np.int32(y.shape[1]), *win.args, x.buffer,
                     np.int32(x.offset), x.buffer, np.int32(x.offset), np.int32(0),
                     target.buffer, np.int32(target.offset))
    _finish(target, y)


# -- DeformConv, RoiAlign and MaxRoiPool ---------------------------------------------------------


@lru_cache(maxsize=None)
def _regions_source(dtype: np.dtype) -> str:
    t = ctype(dtype).storage
    # (scalar arguments spelled out: the program cache reads their types off the signature)
    return (preamble([dtype]) + f"#define T {t}\n#define R {t}\n"
            + REGIONS.replace("const R scale", f"const {t} scale"))


def _int4(values, fill):
    import pyopencl.cltypes as cltypes

    values = [int(v) for v in values]
    return cltypes.make_int4(*(values + [fill] * (4 - len(values))))


def deform_columns(x, offset, mask, geom, groups: int):
    """DeformConv's sampled columns (N, C, K, P) on the device."""
    runtime = x.runtime
    n, c = x.shape[:2]
    dims = x.ndim - 2
    if dims > 3:
        raise BackendError(f"DeformConv over {dims} spatial axes (X {x.shape}): the OpenCL "
                           f"kernel supports at most 3; run it on the CPU")
    k, p = int(np.prod(geom.kernel)), int(np.prod(geom.out))
    cols = empty(runtime, (n, c, k, p), x.dtype)
    has_mask = mask is not None
    mask = mask.contiguous() if has_mask else x
    runtime.launch1d(runtime.kernel(_regions_source(x.dtype), "deform_columns"), cols.size,
                     np.int32(cols.size), np.int32(c), np.int32(k), np.int32(p),
                     np.int32(groups), np.int32(dims), _int4(x.shape[2:], 1),
                     _int4(geom.kernel, 1), _int4(geom.out, 1), _int4(geom.strides, 1),
                     _int4(geom.dilations, 1), _int4(geom.head, 0), np.int32(has_mask),
                     x.buffer, np.int32(x.offset), offset.buffer, np.int32(offset.offset),
                     mask.buffer, np.int32(mask.offset), cols.buffer, np.int32(cols.offset))
    return cols


def roi_align_into(x, rois, batch, y, attrs) -> None:
    runtime = x.runtime
    if batch.dtype != np.int64:
        batch = apply("Cast", batch, dtype=np.int64)
    target = _contiguous_target(y)
    c = ctype(x.dtype)
    runtime.launch1d(runtime.kernel(_regions_source(x.dtype), "roi_align"), target.size,
                     np.int32(target.size), *(np.int32(v) for v in x.shape[1:]),
                     *(np.int32(v) for v in y.shape[2:]), c.scalar(attrs["spatial_scale"]),
                     np.int32(attrs["sampling_ratio"]),
                     np.int32(attrs["coordinate_transformation_mode"] == "half_pixel"),
                     np.int32(attrs["mode"] == "max"), x.buffer, np.int32(x.offset),
                     rois.buffer, np.int32(rois.offset), batch.buffer, np.int32(batch.offset),
                     target.buffer, np.int32(target.offset))
    _finish(target, y)


def max_roi_pool_into(x, rois, y, attrs) -> None:
    runtime = x.runtime
    target = _contiguous_target(y)
    c = ctype(x.dtype)
    runtime.launch1d(runtime.kernel(_regions_source(x.dtype), "max_roi_pool"), target.size,
                     np.int32(target.size), *(np.int32(v) for v in x.shape[1:]),
                     *(np.int32(v) for v in y.shape[2:]), c.scalar(attrs["spatial_scale"]),
                     x.buffer, np.int32(x.offset), rois.buffer, np.int32(rois.offset),
                     target.buffer, np.int32(target.offset))
    _finish(target, y)


@kernel("DeformConv")
def deform_conv(ctx, inputs, outputs, attrs):
    x, w, offset = (v.contiguous() for v in inputs[:3])
    bias = inputs[3] if len(inputs) > 3 else None
    mask = inputs[4] if len(inputs) > 4 and inputs[4] is not None else None
    y, group = outputs[0], attrs["group"]
    geom = deform_geometry(x.shape[2:], w.shape[2:], attrs)
    cols = deform_columns(x, offset, mask, geom, attrs["offset_group"])  # (N, C, K, P)
    n, c, k, p = cols.shape
    m = w.shape[0]
    target = empty(y.runtime, (n, group, m // group, p), y.dtype)
    gemm(w.reshape(group, m // group, c // group * k), cols.reshape(n, group, c // group * k, p),
         target)
    result = target.reshape(n, m, p)
    if bias is not None:
        result = apply("Add", result, bias.contiguous().reshape(1, m, 1))
    assign(y, result.reshape(y.shape))


@kernel("RoiAlign")
def roi_align(ctx, inputs, outputs, attrs):
    roi_align_into(*(v.contiguous() for v in inputs), outputs[0], attrs)


@kernel("MaxRoiPool")
def max_roi_pool(ctx, inputs, outputs, attrs):
    max_roi_pool_into(*(v.contiguous() for v in inputs), outputs[0], attrs)
