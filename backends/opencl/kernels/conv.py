"""OpenCL kernels: Conv, ConvTranspose and the weight gradient ConvGradWeight.

Conv is im2col + the packed GEMM (weights packed once per group, columns per image), a 1x1
stride-1 unpadded Conv multiplies the input directly, and thin convolutions (depthwise: one
input channel per group) run the direct kernel instead, where im2col would copy the input
K times for a handful of multiply-adds. Through the GEMM the bias (and a FusedConv's residual
and Relu or Clip) are added in its store (``gemm.Epilogue``), not in passes over Y.
ConvTranspose is GEMM to columns then col2im in gather form (each output element sums the
columns that reach it: no atomics), with the bias folded in. ConvGradWeight is im2col laid
out (C*K, N*out) times dY as (M, N*out): one GEMM per group that sums over images and windows
together.
"""
from __future__ import annotations

import math

import numpy as np

from portable.errors import BackendError
from portable.ops.conv import Geometry, transpose_geometry, window_attrs, window_geometry

from backends.opencl.allocator import CLArray, arena_view, empty
from backends.opencl.elementwise import assign
from backends.opencl.gemm import (NO_EPILOGUE, Epilogue, a_operand, gemm, gemm_packed,
                                  tile_shape, work_group)
from backends.opencl.kernels.table import kernel_table
from backends.opencl.kernels.row_windows import direct_source
from backends.opencl.kernels.window import (PANEL_RUN, Window, packed_columns_source, run_items,
                                            window_shape, window_source)
from backends.opencl.launch import Launch, keep
from backends.opencl.scalars import ctype, preamble

kernels, kernel = kernel_table()

_DIRECT_LIMIT = 16  # C/group * kernel size at or below which the direct kernel runs
_WIDEST_PANEL = 16  # the largest NR of any device and dtype (gemm.tile_shape)


def direct_kernel(runtime, dtype, win: Window):
    """``conv_direct`` for ``dtype`` and windows of ``win``'s shape, strides and dilations."""
    memo = runtime.memo("direct_kernels")
    key = (np.dtype(dtype).name, win.kernel, win.strides, win.dilations, runtime.row_run)
    kernel = memo.get(key)
    if kernel is None:
        c = ctype(dtype)
        source = preamble([dtype]) + direct_source(
            c.storage, c.compute, lambda p, i: f"{p}[{i}]",
            lambda p, i, v: f"{p}[{i}] = ({c.storage})({v})", window_shape(win),
            runtime.row_run)
        kernel = memo[key] = runtime.kernel(source, "conv_direct")
    return kernel


def window_kernel(runtime, dtype, name: str):
    """Kernel ``name`` of the window program (im2col, col2im) for ``dtype``."""
    memo = runtime.memo("window_kernels")
    key = (np.dtype(dtype).name, name)
    kernel = memo.get(key)
    if kernel is None:
        c = ctype(dtype)
        source = preamble([dtype]) + window_source(
            c.storage, c.compute, lambda p, i: f"{p}[{i}]",
            lambda p, i, v: f"{p}[{i}] = ({c.storage})({v})")
        kernel = memo[key] = runtime.kernel(source, name)
    return kernel



def scratch(ctx, runtime, key: str, shape, dtype):
    """A temporary carved from the plan's workspace buffer ``key`` (declared through the
    kernel's ``workspace`` rule, so the memory plan counts it), else from a buffer kept in the
    context for the next kernel of the same run."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    buffer = None if ctx is None else ctx.workspace.get(key)
    if not (isinstance(buffer, CLArray) and buffer.nbytes >= nbytes):
        buffer = empty(runtime, (max(nbytes, 1),), np.uint8)
        if ctx is not None:
            ctx.workspace[key] = buffer
    return arena_view(buffer, 0, shape, dtype)


def thin(x_shape, group: int, win: Window) -> bool:
    """Whether the direct kernel runs the Conv: a depthwise one (one input channel a group,
    any window: a 5x5 on 96x28x28 took 0.21 ms on PoCL, through the GEMM 1.6) or another
    grouped one with few multiply-adds per output. A dense Conv goes through the GEMM however
    few they are: on PoCL the direct kernel ran SqueezeNet's 16 -> 64 channel 1x1 Conv on
    55x55 in 7.5 ms, the GEMM in 0.3 ms (an RGB 1x1 Conv on 224x224: 13.3 against 0.48 ms)."""
    per_group = x_shape[1] // group
    return group > 1 and (per_group == 1 or per_group * win.kernel_size <= _DIRECT_LIMIT)


def _uses_columns(x_shape, w_shape, group: int, win: Window) -> bool:
    pointwise = (win.kernel_size == 1 and win.strides == (1, 1, 1)
                 and win.head == (0, 0, 0) and win.out == win.size)
    return not thin(x_shape, group, win) and not pointwise


def conv_workspace(input_types, output_types, attrs) -> dict[str, int]:
    """Bytes of the im2col columns a Conv (or FusedConv) takes from the workspace."""
    x, w = input_types[0], input_types[1]
    win = Window.of(window_geometry(x.shape[2:], w.shape[2:], attrs), x.shape[2:])
    if not _uses_columns(x.shape, w.shape, attrs.get("group", 1), win):
        return {}
    padded = -(-win.out_size // _WIDEST_PANEL) * _WIDEST_PANEL  # packed panels are padded
    return {"columns": x.shape[0] * x.shape[1] * win.kernel_size * padded * x.dtype.itemsize}


def im2col(x, win: Window, cols, strides) -> None:
    """Write every window of ``x`` (N, C, spatial) into ``cols`` at (n, c, k, o) * strides."""
    import pyopencl.cltypes as cltypes

    n, c = x.shape[:2]
    runtime = x.runtime
    rows = win.out[0] * win.out[1]
    if n * c * rows * win.kernel_size == 0:
        return
    runtime.launch(window_kernel(runtime, x.dtype, "im2col"), (rows, win.kernel_size, n * c),
                   work_group(runtime), np.int32(c), *win.args, x.buffer, np.int32(x.offset),
                   cols.buffer, np.int32(cols.offset), cltypes.make_int4(*strides))


def im2col_packed(ctx, x, win: Window, group: int):
    """The im2col columns of every (image, group) as the GEMM's packed B operand; returns the
    panels and their strides over the (N, group) batch axes."""
    runtime = x.runtime
    n, c = x.shape[:2]
    _, nr, _ = tile_shape(runtime, x.dtype)
    rows = c // group * win.kernel_size
    panels = -(-win.out_size // nr)
    size = panels * rows * nr
    out = scratch(ctx, runtime, "columns", (n * group * size,), x.dtype)
    memo = runtime.memo("im2col_packed_launches")
    layout = (x.dtype, x.shape, win, group)
    launch = memo.get(layout)
    if launch is None:
        launch = Launch(runtime, _packed_columns_kernel(runtime, x.dtype, win),
                        (rows, -(-panels // PANEL_RUN), n * group), work_group(runtime))
        launch.add(np.int32(c), np.int32(group), np.int32(panels), np.int32(nr), *win.args)
        launch.array(0, x)
        launch.array(1, out, offset=False)  # (the columns start their buffer)
        keep(memo, layout, launch)
    launch.run(runtime, [x, out])
    return out, [group * size, size]


def _packed_columns_kernel(runtime, dtype, win: Window):
    """``im2col_packed`` for ``dtype`` and windows of ``win``'s shape (a program each)."""
    memo = runtime.memo("packed_columns_kernels")
    key = (np.dtype(dtype).name, window_shape(win))
    kernel = memo.get(key)
    if kernel is None:
        source = preamble([dtype]) + packed_columns_source(ctype(dtype).storage,
                                                            window_shape(win))
        kernel = memo[key] = runtime.kernel(source, "im2col_packed")
    return kernel


def conv_forward(x, w, bias, win: Window, group: int, y, ctx=None,
                 finish: Epilogue = NO_EPILOGUE) -> None:
    """Y = Conv(X, W) + B into ``y`` (N, M, out), then ``finish``'s residual (Y's shape) and
    clamp, in the GEMM's store (a thin Conv takes no ``finish``: :func:`thin`)."""
    runtime = y.runtime
    x, w = x.contiguous(), w.contiguous()
    target = y if y.is_contiguous else empty(runtime, y.shape, y.dtype)
    n, c = x.shape[:2]
    m = w.shape[0]
    per_in = c // group
    k, o = win.kernel_size, win.out_size
    if thin(x.shape, group, win):  # (depthwise): the direct kernel
        if any(finish.flags):
            raise BackendError("conv_forward: a thin Conv runs the direct kernel, which "
                               "takes no residual or clamp")
        has_bias = bias is not None
        bias = bias.contiguous() if has_bias else w
        items = run_items(win, target.size, runtime.row_run)
        runtime.launch1d(direct_kernel(runtime, x.dtype, win), items,
                         np.int32(items), np.int32(c), np.int32(m), np.int32(group),
                         *win.args, x.buffer, np.int32(x.offset), w.buffer,
                         np.int32(w.offset), bias.buffer, np.int32(bias.offset),
                         np.int32(has_bias), target.buffer, np.int32(target.offset))
    else:
        weights = w.reshape(group, m // group, per_in * k)
        y4 = target.reshape(n, group, m // group, o)
        residual = finish.residual
        finish = finish._replace(
            bias=None if bias is None else bias.reshape(group, m // group),
            residual=None if residual is None else
            residual.contiguous().reshape(n, group, m // group, o))
        if _uses_columns(x.shape, w.shape, group, win):
            mr, _, _ = tile_shape(runtime, x.dtype)
            ap, a_bst, a_direct = a_operand(runtime, weights.broadcast_to((n,) + weights.shape),
                                            (n, group), mr)
            bp, b_bst = im2col_packed(ctx, x, win, group)
            gemm_packed(ap, a_bst, bp, b_bst, y4, per_in * k, epilogue=finish,
                        a_direct=a_direct)
        else:  # pointwise: the input is the GEMM operand
            gemm(weights, x.reshape(n, group, per_in, o), y4, epilogue=finish)
    if target is not y:
        assign(y, target)


@kernel("Conv")
def conv(ctx, inputs, outputs, attrs):
    x, w = inputs[:2]
    bias = inputs[2] if len(inputs) > 2 else None
    geom = window_geometry(x.shape[2:], w.shape[2:], attrs)
    conv_forward(x, w, bias, Window.of(geom, x.shape[2:]), attrs["group"], outputs[0], ctx)


conv.workspace = conv_workspace


@kernel("ConvTranspose")
def conv_transpose(ctx, inputs, outputs, attrs):
    """Columns (N, group, M/group * K, in) = W_g^T X_g, then col2im into Y."""
    x, w = inputs[0].contiguous(), inputs[1].contiguous()
    bias = inputs[2] if len(inputs) > 2 else None
    y, group = outputs[0], attrs["group"]
    runtime = y.runtime
    n, c = x.shape[:2]
    in_shape = x.shape[2:]
    geom = transpose_geometry(in_shape, w.shape[2:], attrs)
    # Seen as the Conv whose input gradient it is: windows sit at the input positions and
    # reach the output positions, so the Conv geometry has ``size`` = output, ``out`` = input.
    conv_geom = Geometry(geom.kernel, geom.strides, geom.dilations, geom.head, geom.tail,
                         tuple(in_shape))
    win = Window.of(conv_geom, y.shape[2:])
    per_out = w.shape[1]
    k, count = win.kernel_size, math.prod(in_shape)
    weights = w.reshape(group, c // group, per_out * k).transpose(0, 2, 1)
    cols = empty(runtime, (n, group, per_out * k, count), x.dtype)
    gemm(weights, x.reshape(n, group, c // group, count), cols)
    target = y if y.is_contiguous else empty(runtime, y.shape, y.dtype)
    has_bias = bias is not None
    bias = bias.contiguous() if has_bias else cols
    runtime.launch1d(window_kernel(runtime, x.dtype, "col2im"), target.size,
                     np.int32(target.size), np.int32(y.shape[1]), *win.args, cols.buffer,
                     np.int32(cols.offset), bias.buffer, np.int32(bias.offset),
                     np.int32(has_bias), target.buffer, np.int32(target.offset))
    if target is not y:
        assign(y, target)


@kernel("portable.ConvGradWeight")
def conv_grad_weight(ctx, inputs, outputs, attrs):
    """dW (group, M/group, C/group * K) = dY (group, M/group, N * out) @ cols^T."""
    x, dy = inputs[0].contiguous(), inputs[1].contiguous()
    dw, group = outputs[0], attrs["group"]
    runtime = dw.runtime
    kernel_shape = tuple(attrs["kernel_shape"])
    strides, dilations, head, tail, _ = window_attrs(attrs, kernel_shape)
    geom = Geometry(kernel_shape, strides, dilations, head, tail, dy.shape[2:])
    win = Window.of(geom, x.shape[2:])
    n, c = x.shape[:2]
    m = dy.shape[1]
    k, o = win.kernel_size, win.out_size
    cols = empty(runtime, (c * k, n * o), x.dtype)  # rows (c, k), columns (n, o)
    im2col(x, win, cols, (o, k * n * o, n * o, 1))
    grads = empty(runtime, (m, n, o), dy.dtype)       # dY with images inside each channel
    assign(grads, dy.reshape(n, m, o).transpose(1, 0, 2))
    per_in = c // group
    a = grads.reshape(group, m // group, n * o)
    b = cols.reshape(group, per_in * k, n * o).transpose(0, 2, 1)
    target = dw if dw.is_contiguous else empty(runtime, dw.shape, dw.dtype)
    gemm(a, b, target.reshape(group, m // group, per_in * k))
    if target is not dw:
        assign(dw, target)
