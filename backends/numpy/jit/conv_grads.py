"""Compiled gradients of a dense 2-D Conv (group 1): ConvTranspose (dX) and ConvGradWeight (dW).

The xp kernels (backends/xp/kernels/conv_grads.py) run both through copies and sgemm: dX as
im2col of dY plus a GEMM of the flipped weights (stride 1) or a GEMM plus col2im, dW as
im2col of X plus a GEMM. On the layers of the LeNet and the CIFAR ResNet-18 the copies and
sgemm's packing cost as much as the products (benchmarks/conv_grads.py). Here:

- dX at stride 1 is the forward Conv of dY with the flipped, transposed weights (head pad
  ``extent - 1 - head``), run by the row-stacked dot products of the forward Conv
  (``stacked_conv.conv_stacked``): a copy of dY kh times, no im2col, no col2im; or, where
  the forward Winograd takes that Conv (``winograd_conv.applies``), by Winograd. At stride s
  each of the s * s phases of dX (positions ``a::s, b::s``) is such a Conv with the taps
  of W that reach it (``phase_taps``), written to scratch and then into its phase. The
  weights are reordered on every call (they change in training): one pass over W.
- dW is Winograd F(3x3, 4x4) (``winograd_weight_grad``) where the forward Winograd takes
  the Conv, else the dot products of dY's rows with shifted runs of X
  (``grad_weight_runs``): a copy of X (kh copies on small planes) and one of dY, no im2col.

Each takes the shapes where it was measured to win (``DX_RUN_MIN``, ``dw_loop``), on one
thread: a step large enough to get every allowed BLAS thread leaves its GEMM to sgemm while
the run allows several (``threads.several_threads``). Every other call goes to the depthwise
kernels' override (``depthwise.py``), which hands what it does not take to the xp kernels.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from backends.numpy.jit import depthwise
from backends.numpy.jit.grad_weight_runs import (batch_run_tiles, copy_rows,
                                                 grad_weight_tiles, phase_layout, row_layout,
                                                 split_phases, widen_rows,
                                                 widen_rows_by_channel)
from backends.numpy.jit.stacked_conv import conv_stacked
from backends.numpy.jit import winograd_conv
from backends.numpy.jit.winograd_weight_grad import WeightGradPlan
from backends.numpy.jit.support import JIT, contiguous, floats, override, window_tuple
from backends.numpy.threads import several_threads, step_threads
from backends.xp.kernels.im2col import scratch
from portable.ops.conv import Geometry, transpose_geometry, window_attrs

# -- dX: ConvTranspose as stacked Convs, one per stride phase ---------------------------------

# The fewest dX channels the stacked loop takes: its tiles are 4 output channels wide, so a
# few channels waste most of them: at batch 64 LeNet's first Conv (1 channel; no training
# step asks for that dX) took 1.8 ms against 1.2 through sgemm and col2im, and at batch 32
# the ResNet stem's (3 channels of 32x32) 3.6 against 2.2.
DX_CHANNELS = 8
# The shortest window run (M * kh * kw) it takes: stacked_conv.STACK_K's measure.
DX_RUN_MIN = 128


@numba.njit(**JIT)
def reorder_taps(w, rows, cols, packed):
    """packed (C, len(cols) * len(rows) * M)[c, (b, a, m)] = w (M, C, kh, kw)[m, c, rows[a],
    cols[b]]: the weights of one stride phase of dX as the stacked loop reads them (at
    stride 1, rows and cols reversed: W flipped and transposed)."""
    m, c = w.shape[:2]
    for ch in range(c):
        out = packed[ch]
        t = 0
        for jw in cols:
            for jh in rows:
                for o in range(m):
                    out[np.uint64(t)] = w[o, ch, jh, jw]
                    t += 1


def phase_taps(kernel: int, stride: int, dilation: int, head: int, phase: int):
    """The Conv over dY that gives dX's positions ``phase``, ``phase + stride``, ... along one
    axis: (its taps of W, last first; its head pad; its dilation), or None where it is no
    Conv the stacked loop runs (a head pad below zero).

    dX[t] sums w[j] * dY[(t + head - j * dilation) / stride] over the taps j that divide
    evenly; for t = u * stride + phase that is dY[u + offset_j], offsets that fall by
    ``dilation / gcd`` as j rises: a correlation with the taps reversed. A phase no tap
    reaches has an empty tap list (its dX is zero)."""
    taps = [j for j in reversed(range(kernel)) if (phase + head - j * dilation) % stride == 0]
    if not taps:
        return [], 0, 1
    offsets = [(phase + head - j * dilation) // stride for j in taps]
    step = offsets[1] - offsets[0] if len(taps) > 1 else 1
    return (taps, -offsets[0], step) if offsets[0] <= 0 else None


def _transpose_parts(geom, m: int):
    """Per stride phase (ph, pw) of dX: (ph, pw, rows, cols, g, stacked shape, phase size), or
    None where a phase is no stacked Conv (its kernel columns dilated, a head pad below
    zero)."""
    (sh, sw), (height, width) = geom.strides, geom.out
    parts = []
    for a in range(sh):
        for b in range(sw):
            along = [phase_taps(k, s, d, h, e) for k, s, d, h, e in zip(
                geom.kernel, geom.strides, geom.dilations, geom.head, (a, b))]
            if along[0] is None or along[1] is None:
                return None
            (rows, top, dh), (cols, left, dw) = along
            size = (-(-(height - a) // sh), -(-(width - b) // sw))
            if rows and cols and dw != 1:
                return None
            g = (len(rows), len(cols), 1, 1, dh, dw, top, left) + size
            stacked = (size[0], size[1] + len(cols) - 1, len(rows), m)
            parts.append((a, b, np.array(rows, np.int64), np.array(cols, np.int64), g,
                          stacked, size))
    return parts


def _prepare_transpose(input_types, output_types, attrs):
    """(parts, stride, image copy shape, zero) for a dense ConvTranspose the stacked loop
    takes, else None: one part at stride 1, one per stride phase above it."""
    dy, w, dx = input_types[0], input_types[1], output_types[0]
    bias = input_types[2] if len(input_types) > 2 else None
    if not (floats(dy, w, dx) and (bias is None or bias.dtype == dy.dtype)
            and attrs["group"] == 1 and w.shape[0] == dy.shape[1]):
        return None
    geom = transpose_geometry(dy.shape[2:], w.shape[2:], attrs)
    m, c, kh, kw = w.shape
    if (kh * kw == 1 or c < DX_CHANNELS or m * kh * kw < DX_RUN_MIN
            or tuple(geom.out) != tuple(dx.shape[2:])):
        return None
    parts = _transpose_parts(geom, m)
    if parts is None:
        return None
    image = tuple(dy.shape[2:]) + (m,)
    threaded = step_threads("ConvTranspose", input_types, output_types, attrs)
    winograd = _winograd(dy.shape, (c, m, kh, kw), parts, dy.dtype)
    if winograd is not None:  # (its products are sgemm, on every allowed thread)
        threaded = False
    return parts, geom.strides, image, dy.dtype.type(0), threaded, winograd


def _winograd(dy_shape, flipped_shape, parts, dtype):
    """A ``winograd_conv.WinogradPlan`` for dX at stride 1 where the forward Conv of dY
    with the flipped, transposed weights is one it takes (3x3, the same size, enough
    channels and tiles), else None. Its scratch comes from the context on demand, as the
    stacked loop's does here."""
    if len(parts) != 1 or parts[0][:2] != (0, 0):
        return None
    if not winograd_conv.takes(dy_shape, flipped_shape, parts[0][4], dtype):
        return None
    need = {"columns": winograd_conv.scratch_bytes(dy_shape, flipped_shape)}
    return winograd_conv.WinogradPlan(dy_shape, flipped_shape, need)


@override(depthwise.conv_transpose, _prepare_transpose)
def _dense_transpose(state, ctx, inputs, outputs, attrs) -> bool:
    dy, w = inputs[:2]
    bias = inputs[2] if len(inputs) > 2 else None
    dx = outputs[0]
    parts, (sh, sw), image, zero, threaded, winograd = state
    if (threaded and several_threads()) or not contiguous(dy, w, dx, bias):
        return False  # (sgemm on every allowed thread: this loop runs one)
    dtype = dy.dtype
    n, c = dx.shape[:2]
    if winograd is not None:
        flipped = scratch(ctx, "flipped", (c, w.shape[0], 3, 3), dtype)
        np.copyto(flipped, w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])
        winograd.conv(ctx, dy, flipped, dx)
        if bias is not None:
            dx += bias.reshape(1, -1, 1, 1)
        return True
    nhwc = scratch(ctx, "gathered", image, dtype)
    whole = sh == 1 and sw == 1
    for a, b, rows, cols, g, stacked, size in parts:
        target = dx[:, :, a::sh, b::sw]
        if not len(rows) or not len(cols):
            target[...] = 0
            continue
        packed = scratch(ctx, "flipped", (c, len(rows) * len(cols) * w.shape[0]), dtype)
        reorder_taps(w, rows, cols, packed)
        t = scratch(ctx, "columns", stacked, dtype)
        out = dx if whole else scratch(ctx, "phase", (n, c) + size, dtype)
        conv_stacked(dy, packed, out.reshape(n, c, -1), nhwc, t, g, zero)
        if not whole:
            target[...] = out
    if bias is not None:
        dx += bias.reshape(1, -1, 1, 1)
    return True


# -- dW: ConvGradWeight as dot products of shifted runs ----------------------------------------

# Output positions per image from which dW runs image by image (``grad_weight_tiles``: runs
# of oh * wide per image, summed in registers), and below which it runs one run over the
# whole batch (``batch_run_tiles``: the image rows one after another, kh copies of X; on
# small planes the per-image runs are too short for the vector loop, whose reduction into
# 16 sums then dominates). Measured at one thread, float32, against the xp kernel (im2col +
# sgemm), in ms, batch 32 (ResNet-18) or 64 (LeNet), on a loaded machine:
#   plane (C -> M, kernel, stride)     xp     per image    whole batch
#   32x32 (64 -> 64, 3x3)            30.4        13.9
#   16x16 (64 -> 128, 3x3, 2)        14.6         9.7
#   16x16 (128 -> 128, 3x3)          25.5        15.7          19.2
#   24x24 (1 -> 20, 5x5; LeNet)      1.39        0.37
#   8x8 (20 -> 50, 5x5; LeNet)       3.49        3.1           1.7
#   8x8 (256 -> 256, 3x3)            22.5         32           17-20
#   8x8 (128 -> 256, 3x3, 2)         11.8         26           10.6-12
#   4x4 (512 -> 512, 3x3)            22          148           18
#   8x8 (128 -> 256, 1x1, 2)         1.61       2.15           1.35
# With the machine's own sgemm kernel (AVX-512 on an EPYC, 2026-12-03, quiet, 5 rounds), the
# whole-batch loop still wins where dW is small (LeNet's 8x8: 4.6 against 6.7 ms; 128 -> 256
# 1x1 on 8x8: 2.7 against 3.0) and loses where it is large and sgemm's GEMM is too (256 -> 256
# 3x3 on 8x8: 42 against 33; 512 -> 512 3x3 on 4x4: 40 against 32; 256 -> 512 1x1 on 4x4:
# 2.1 against 2.0): above DW_BATCH_MAX_WEIGHTS weights sgemm keeps the small planes.
DW_POSITIONS = 256
DW_BATCH_MAX_WEIGHTS = 64 << 10
# Below this many output positions per image neither loop was measured: sgemm keeps them.
DW_MIN_POSITIONS = 4


def dw_loop(positions: int, weights: int) -> str | None:
    """The dW loop for ``positions`` output positions per image and a dW of ``weights``
    elements: "image", "batch" or None (the xp kernel)."""
    if positions >= DW_POSITIONS:
        return "image"
    if positions < DW_MIN_POSITIONS or weights > DW_BATCH_MAX_WEIGHTS:
        return None
    return "batch"


def _prepare_grad_weight(input_types, output_types, attrs):
    """("winograd", its plan) where ``winograd_conv`` takes the forward Conv, else (loop,
    geometry, its tables, copy shapes, zero) for a dense 2-D ConvGradWeight the runs take,
    else None."""
    x, dy, dw = input_types[0], input_types[1], output_types[0]
    if not (floats(x, dy, dw) and attrs["group"] == 1 and dw.shape[1] == x.shape[1]
            and dw.shape[0] == dy.shape[1]):
        return None
    kernel_shape = tuple(attrs["kernel_shape"])
    if len(kernel_shape) != 2 or kernel_shape != tuple(dw.shape[2:]):
        return None
    strides, dilations, head, tail, _ = window_attrs(attrs, kernel_shape)
    out = tuple(dy.shape[2:])
    g = window_tuple(Geometry(kernel_shape, strides, dilations, head, tail, out))
    if winograd_conv.takes(x.shape, dw.shape, g + out, x.dtype):
        return ("winograd", WeightGradPlan(x.shape, dw.shape[0]))
    loop = dw_loop(math.prod(out), math.prod(dw.shape))
    if loop is None:
        return None
    (n, c), m, zero = x.shape[:2], dy.shape[1], x.dtype.type(0)
    threaded = step_threads("portable.ConvGradWeight", input_types, output_types, attrs)
    if loop == "image":
        rows, wide, taps = phase_layout(kernel_shape, strides, dilations, out)
        used = np.zeros(strides[0] * strides[1], np.bool_)
        used[taps[:, 0]] = True
        return (loop, g, taps, used, (len(used), n, c, rows, wide), (n, m, out[0], wide), zero,
                threaded)
    wide, _, starts = row_layout(kernel_shape, strides, dilations, c, n, out)
    used = np.zeros(strides[1], np.bool_)
    used[[(j * dilations[1]) % strides[1] for j in range(kernel_shape[1])]] = True
    copy = (strides[1], c, kernel_shape[0], n * out[0] + 1, wide)
    return loop, g, starts, used, copy, (m, n, out[0], wide), zero, threaded


@override(depthwise.conv_grad_weight, _prepare_grad_weight)
def _dense_grad_weight(state, ctx, inputs, outputs, attrs) -> bool:
    x, dy = inputs
    dw = outputs[0]
    if state[0] == "winograd":  # (its products are sgemm, on every allowed thread)
        if not contiguous(x, dy, dw):
            return False
        state[1].run(ctx, x, dy, dw)
        return True
    loop, g, table, used, copy_shape, widened, zero, threaded = state
    if (threaded and several_threads()) or not contiguous(x, dy, dw):
        return False  # (sgemm on every allowed thread: these loops run one)
    copy = scratch(ctx, "columns", copy_shape, x.dtype)
    wide_dy = scratch(ctx, "gathered", widened, dy.dtype)
    m = dw.shape[0]
    if loop == "image":
        split_phases(x, copy, used, g)
        widen_rows(dy, wide_dy)
        grad_weight_tiles(wide_dy.reshape(widened[0], m, -1), copy, table, dw.reshape(m, -1),
                          zero)
    else:
        copy_rows(x, copy, used, g)
        widen_rows_by_channel(dy, wide_dy)
        batch_run_tiles(wide_dy.reshape(m, -1), copy, table, dw.reshape(m, -1), zero)
    return True


def _tiered(dense, other):
    """``dense`` (an ``override`` kernel that falls back to ``other``), whose
    ``compiled_prepare``/``compiled_run`` (what the tests call the compiled kernel without
    its xp fallback) cover both compiled loops: the dense one, else ``other``'s."""
    def compiled_prepare(input_types, output_types, attrs):
        state = _prepare_dense(input_types, output_types, attrs)
        if state is not None:
            return True, state
        state = other.compiled_prepare(input_types, output_types, attrs)
        return None if state is None else (False, state)

    def compiled_run(state, ctx, inputs, outputs, attrs) -> bool:
        mine, inner = state
        run = dense_run if mine else other.compiled_run
        return run(inner, ctx, inputs, outputs, attrs)

    _prepare_dense, dense_run = dense.compiled_prepare, dense.compiled_run
    dense.compiled_prepare, dense.compiled_run = compiled_prepare, compiled_run
    dense.fallback = other.fallback  # (the xp kernel under both)
    return dense


conv_transpose = _tiered(_dense_transpose, depthwise.conv_transpose)
conv_grad_weight = _tiered(_dense_grad_weight, depthwise.conv_grad_weight)

kernels = {"ConvTranspose": conv_transpose, "portable.ConvGradWeight": conv_grad_weight}
