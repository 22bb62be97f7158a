"""Plans of Conv's two gradient kernels, ConvTranspose (Conv's dX) and ConvGradWeight (its dW),
written against ``xp``: the formulation is chosen from the shapes once per plan step (the
kernel's plan-time part, DESIGN.md section 8), so a run only copies and multiplies.

ConvTranspose Y = Conv^T(X, W), with X (N, C, *in), W (C, M/group, *kernel), Y (N, M, *out),
has four formulations (``geom`` is the Conv whose input gradient it is: Y is its input, X its
output):
- ``scatter``: per image, one GEMM W^T (M*kernel, C) @ X[n] (C, in) into columns, then col2im:
  each kernel offset's columns added into the output elements it reaches (one strided add per
  offset). Works for every geometry; its GEMMs are short (K = C/group) and its columns hold
  prod(kernel) times the output's elements.
- ``scatter_batch``: the same with one GEMM over the whole batch (X laid out (C, N * in)): wins
  where each image's GEMM is too small for BLAS to run at speed (deep, small layers).
- ``flip``: at stride 1 the adjoint is itself a Conv: Y = Conv(X, flip(W^T)) with head pad
  ``extent - 1 - head``. One im2col of X and GEMMs with K = C/group * prod(kernel) (the
  forward Conv's shape), no col2im; W^T is flipped into scratch on every run (weights change
  in training), which costs one pass over W.
- ``flip_batch``: ``flip`` with one GEMM over the batch, the im2col laid out (C*kernel, N*in)
  and the product (M, N*out) copied into Y: deep layers with few output positions.
Winograd (opt-in, ``winograd.transpose_tile``) keeps its place ahead of these for 3x3 stride 1:
the plan records its tile and the kernel (conv.py) calls it.

ConvGradWeight dW = dY (M, N*out) @ columns(X)^T (N*out, C/group * kernel) keeps its one
formulation, already a GEMM over the whole batch (on ResNet-18 and LeNet it runs at 0.5-1.4x
PyTorch's time, benchmarks/conv_grads.py); its geometry is now fixed at plan time and dY's
transposed copy goes to scratch instead of a fresh array.

The rules in ``transpose_path`` come from benchmarks/conv_grads.py at one BLAS thread; every
formulation is exact up to float rounding, so the choice changes speed only.
"""
from __future__ import annotations

import math

from portable.ops.conv import Geometry, transpose_geometry, window_attrs

from backends.xp.kernels.conv_plan import BATCH_POSITIONS, batch_conv, batch_major
from backends.xp.kernels.im2col import clipped_offsets, padded_windows, scratch, window_view
from backends.xp.kernels.winograd import transpose_tile

TRANSPOSE_PATHS = ("scatter", "scatter_batch", "flip", "flip_batch")


def flip_geometry(geom: Geometry, in_shape) -> Geometry | None:
    """The Conv geometry of ``flip``: windows over X (spatial ``in_shape``) that produce Y.
    None where there is none: a stride above 1, or a head pad beyond the kernel's extent
    (the windows would start inside X; rare enough to leave to ``scatter``)."""
    if any(s != 1 for s in geom.strides):
        return None
    head = tuple(e - 1 - h for e, h in zip(geom.extent, geom.head))
    if any(h < 0 for h in head):
        return None
    out = tuple(geom.out)
    tail = tuple(o - 1 + e - n - h for o, e, n, h in zip(out, geom.extent, in_shape, head))
    return Geometry(geom.kernel, geom.strides, geom.dilations, head, tail, out)


def transpose_path(batch: int, channels: int, filters: int, group: int, kernel, in_shape,
                   out_shape, flippable: bool) -> str:
    """The formulation of a ConvTranspose with X (batch, channels, *in_shape), Y (batch,
    filters, *out_shape), from benchmarks/conv_grads.py (one BLAS thread).

    ``flip`` copies C * kernel * out elements into its columns where ``scatter`` writes
    M * kernel * in of them, for the same multiply-adds; with those within 2x of each other
    (a Conv's dX at stride 1 with C close to M: 1.3-1.5x faster on ResNet-18's 3x3 layers) its one
    longer GEMM and no col2im win; with many more (LeNet's 5x5 layers, where Y is larger than
    X, and a stem's dX with 3 channels) ``scatter`` does. A 1x1 kernel keeps ``scatter``: it
    has no col2im to save. The batch-wide GEMMs win where an image's GEMM is short: ``flip``'s
    (the forward Conv's shape) at up to ``BATCH_POSITIONS`` outputs (1.5x at 4x4), and
    ``scatter``'s, whose K is only C, at up to 64 inputs (1.2-2.4x at 8x8 and 4x4) or where an
    image's GEMM is tiny overall (LeNet: 1.1-1.4x)."""
    positions, taps = math.prod(in_shape), math.prod(kernel)
    if taps == 1:
        return "scatter"
    if flippable and channels * math.prod(out_shape) <= 2 * filters * positions:
        return "flip_batch" if math.prod(out_shape) <= BATCH_POSITIONS else "flip"
    per_image = channels // group * filters * taps * positions
    small = positions <= 64 or per_image < 1_000_000
    return "scatter_batch" if small and batch > 1 else "scatter"


def flipped_weights(ctx, w, group: int):
    """W (C, M/group, *kernel) as the Conv weights (M, C/group, *kernel) of ``flip``: per group
    the two channel axes swapped and every spatial axis reversed (in scratch)."""
    c, per_group = w.shape[:2]
    kernel = tuple(w.shape[2:])
    out = scratch(ctx, "flipped", (group * per_group, c // group) + kernel, w.dtype)
    view = w.reshape((group, c // group, per_group) + kernel).swapaxes(1, 2)
    out.reshape((group, per_group, c // group) + kernel)[...] = \
        view[(Ellipsis,) + (slice(None, None, -1),) * len(kernel)]
    return out


class TransposePlan:
    """One ConvTranspose step: ``run(ctx, x, w, y)`` writes ConvTranspose(X, W) (no bias) into
    the C-contiguous ``y`` by the formulation chosen here (``path``)."""

    def __init__(self, backend, input_types: list, attrs: dict, path: str | None = None):
        x, w = input_types[0], input_types[1]
        in_shape = tuple(x.shape[2:])
        self.geom = geom = transpose_geometry(in_shape, w.shape[2:], attrs)
        self.group = group = attrs["group"]
        self.rank = len(in_shape)
        self.flip = flip_geometry(geom, in_shape)
        self.tile = transpose_tile(backend, x, w, geom, group)
        n, c = x.shape[:2]
        m = w.shape[1] * group
        self.path = path or transpose_path(n, c, m, group, geom.kernel, in_shape, geom.out,
                                           self.flip is not None)
        if self.path.startswith("flip") and self.flip is None:
            raise ValueError(f"ConvTranspose formulation {self.path!r} needs stride 1 and pads "
                             f"within the kernel's extent; strides {geom.strides}, pads "
                             f"{geom.head}")
        self.bias_shape = (1, -1) + (1,) * self.rank

    def run(self, ctx, x, w, y) -> None:
        """By ``path``; Winograd (``tile`` > 0) is the kernel's to call (conv.py)."""
        getattr(self, "_" + self.path)(ctx, x, w, y)

    # -- col2im forms --------------------------------------------------------------------------

    def _col2im(self, y, cols) -> None:
        """Y = the sum of each kernel offset's columns ``cols`` (N, M, *kernel, *in) where the
        offset's windows reach (what falls into the pads is never computed)."""
        in_shape = cols.shape[2 + self.rank:]
        offsets = clipped_offsets(self.geom, in_shape, y.shape[2:])
        y[...] = 0
        for k, windows, index in offsets:
            y[index] += cols[(slice(None), slice(None)) + k][windows]

    def _scatter(self, ctx, x, w, y) -> None:
        n, c = x.shape[:2]
        group, kernel = self.group, self.geom.kernel
        per_group = w.shape[1] * math.prod(kernel)
        weights = w.reshape(group, c // group, per_group).transpose(0, 2, 1)
        cols = scratch(ctx, "columns", (n, group, per_group, math.prod(x.shape[2:])), x.dtype)
        ctx.xp.matmul(weights, x.reshape(n, group, c // group, -1), out=cols)
        self._col2im(y, cols.reshape((n, y.shape[1]) + kernel + tuple(x.shape[2:])))

    def _scatter_batch(self, ctx, x, w, y) -> None:
        n, c = x.shape[:2]
        group, kernel, rank = self.group, self.geom.kernel, self.rank
        in_shape = tuple(x.shape[2:])
        per_group = w.shape[1] * math.prod(kernel)
        weights = w.reshape(group, c // group, per_group).transpose(0, 2, 1)
        gathered = scratch(ctx, "gathered", (c, n) + in_shape, x.dtype)
        gathered[...] = x.swapaxes(0, 1)
        cols = scratch(ctx, "columns", (group, per_group, n * math.prod(in_shape)), x.dtype)
        ctx.xp.matmul(weights, gathered.reshape(group, c // group, -1), out=cols)
        # (M, *kernel, N, *in) seen as (N, M, *kernel, *in)
        order = (rank + 1, 0) + tuple(range(1, rank + 1)) + tuple(range(rank + 2, 2 * rank + 2))
        self._col2im(y, cols.reshape((y.shape[1],) + kernel + (n,) + in_shape).transpose(order))

    # -- Conv forms (stride 1) -----------------------------------------------------------------

    def _flip(self, ctx, x, w, y) -> None:
        n, c = x.shape[:2]
        group, geom = self.group, self.flip
        m = y.shape[1]
        weights = flipped_weights(ctx, w, group)
        cols = scratch(ctx, "columns", x.shape[:2] + geom.kernel + tuple(geom.out), x.dtype)
        cols[...] = window_view(ctx.xp, padded_windows(ctx, x, geom), geom)
        rows = c // group * math.prod(geom.kernel)
        ctx.xp.matmul(weights.reshape(group, m // group, rows), cols.reshape(n, group, rows, -1),
                      out=y.reshape(n, group, m // group, -1))

    def _flip_batch(self, ctx, x, w, y) -> None:
        c, group, geom = x.shape[1], self.group, self.flip
        weights = flipped_weights(ctx, w, group)
        rows = c // group * math.prod(geom.kernel)
        batch_conv(ctx, x, weights.reshape(group, y.shape[1] // group, rows), geom, group, y)


class GradWeightPlan:
    """One ConvGradWeight step: ``run(ctx, x, dy, dw)`` writes dW into the C-contiguous
    ``dw``: dY (M, N * out) @ columns(X)^T (N * out, C/group * kernel), per group, one GEMM
    that sums over images and windows together."""

    def __init__(self, backend, input_types: list, attrs: dict) -> None:
        dy = input_types[1]
        kernel = tuple(attrs["kernel_shape"])
        strides, dilations, head, tail, _ = window_attrs(attrs, kernel)
        self.geom = Geometry(kernel, strides, dilations, head, tail, tuple(dy.shape[2:]))
        self.group = attrs["group"]
        self.rank = len(kernel)

    def run(self, ctx, x, dy, dw) -> None:
        xp, geom, group, rank = ctx.xp, self.geom, self.group, self.rank
        n, c = x.shape[:2]
        m = dy.shape[1]
        view = window_view(xp, padded_windows(ctx, x, geom), geom)
        order = batch_major(rank)
        cols = scratch(ctx, "columns", tuple(view.shape[i] for i in order), x.dtype)
        cols[...] = view.transpose(order)
        cols = xp.swapaxes(cols.reshape(group, c // group * math.prod(geom.kernel), -1), 1, 2)
        grads = scratch(ctx, "gathered", (m, n, math.prod(dy.shape[2:])), dy.dtype)
        grads[...] = dy.reshape(n, m, -1).swapaxes(0, 1)
        shape = (group, m // group, -1)
        xp.matmul(grads.reshape(shape), cols, out=dw.reshape(shape))
