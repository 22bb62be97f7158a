"""What a Conv step's shapes and attributes fix, built once per plan step (the kernel's
plan-time part, DESIGN.md section 8), so that a run only copies and multiplies.

A small Conv spent most of its 28-32 us rebuilding its geometry, its padding and its strided
window view on every call. The plan holds the geometry, the GEMM's shapes and the path
(pointwise, im2col, im2col batch-wide for outputs of at most ``BATCH_POSITIONS`` positions,
Winograd) from the start; the views into the padded input and the column buffer are made on
the first run and kept while the run hands the same buffers again, which a compiled plan does
(its scratch and arena are allocated once). Buffers a call allocates itself (an imperative
call's scratch) are never kept, so no plan holds memory past its call. A kept
run then copies the input into the padded copy's interior, the windows into the columns, and
multiplies: the border is zeroed again only when another layout (a Conv of another padding, a
MaxPool's -inf) went through the shared padded buffer since (``im2col.border_kept``).
"""
from __future__ import annotations

import math
import weakref

from portable.ops.conv import Geometry, window_geometry

from backends.xp.kernels.im2col import (border_kept, interior, mark_border, padded_windows,
                                           padding_layout, scratch, window_view)
from backends.xp.kernels.winograd import conv2d, tile_size

# Output positions per image up to which GEMMs over several images beat one per image: the
# per-image GEMM's N dimension is too short for BLAS (benchmarks/conv_grads.py, one thread:
# ResNet-18's 4x4 layers at batch 32 1.2-1.5x faster; at 8x8 it is a tie or a loss).
BATCH_POSITIONS = 16
# Columns of each batch-wide GEMM: wide enough for BLAS, and its product stays small.
BATCH_COLUMNS = 256


def batch_major(rank: int) -> tuple[int, ...]:
    """The axes of a window view (N, C, *kernel, *out) in the order (C, *kernel, N, *out), in
    which a batch-wide GEMM's contraction or column axis (N, out) is contiguous."""
    return (1,) + tuple(range(2, 2 + rank)) + (0,) + tuple(range(2 + rank, 2 + 2 * rank))


def batch_conv(ctx, x, weights, geom: Geometry, group: int, y) -> None:
    """Y = Conv(X, W) (no bias) with GEMMs over several images at once: the im2col copy laid
    out (C/group * kernel, N * out) per group, multiplied ``BATCH_COLUMNS`` columns (whole
    images) at a time into a small product (M, images * out) in scratch, which is copied into
    ``y`` (N, M, *out). Chunks keep that scratch small (the memory plan does not count it) and
    are wide enough for BLAS to run at full speed. ``weights`` is W as
    (group, M/group, C/group * prod(kernel))."""
    xp = ctx.xp
    n, rank = x.shape[0], len(geom.kernel)
    m, positions = weights.shape[0] * weights.shape[1], math.prod(geom.out)
    view = window_view(xp, padded_windows(ctx, x, geom), geom)
    order = batch_major(rank)
    cols = scratch(ctx, "columns", tuple(view.shape[i] for i in order), x.dtype)
    cols[...] = view.transpose(order)
    cols = cols.reshape(group, weights.shape[2], n * positions)
    step = min(n, max(1, -(-BATCH_COLUMNS // positions)))  # images per GEMM
    product = scratch(ctx, "product", (m, step, positions), x.dtype)
    out = y.reshape(n, m, positions)
    for start in range(0, n, step):
        stop = min(n, start + step)
        part = product[:, :stop - start]
        xp.matmul(weights, cols[:, :, start * positions:stop * positions],
                  out=part.reshape(group, m // group, -1))
        out[start:stop] = part.swapaxes(0, 1)


def is_pointwise(geom: Geometry, in_shape) -> bool:
    """A 1x1 stride-1 unpadded Conv: the GEMM reads the input itself."""
    return (all(k == 1 for k in geom.kernel) and all(s == 1 for s in geom.strides)
            and not any(geom.head) and tuple(geom.out) == tuple(in_shape))


class ConvPlan:
    """One Conv step: ``forward(ctx, x, w, y)`` writes Conv(X, W) (no bias) into ``y``."""

    def __init__(self, backend, input_types: list, attrs: dict) -> None:
        x, w = input_types[0], input_types[1]
        self.geom = geom = window_geometry(x.shape[2:], w.shape[2:], attrs)
        self.group = group = attrs["group"]
        self.tile = tile_size(backend, x, w, geom, group)  # 0: im2col
        n, c = x.shape[:2]
        m, rows = w.shape[0], c // group * math.prod(geom.kernel)
        self.pointwise = is_pointwise(geom, x.shape[2:])
        self.batched = (not self.tile and not self.pointwise and n > 1
                        and math.prod(geom.out) <= BATCH_POSITIONS)
        self.weights_shape = (group, m // group, rows)
        self.columns_shape = (n, group, rows, math.prod(geom.out))
        self.window_shape = tuple(x.shape[:2]) + tuple(geom.kernel) + tuple(geom.out)
        self.y_shape = (n, group, m // group, math.prod(geom.out))
        self.bias_shape = (1, -1) + (1,) * (len(x.shape) - 2)
        self._kept = None  # the last run's buffers, then the views kept into them

    def forward(self, ctx, x, w, y) -> None:
        if self.tile:
            conv2d(ctx, x, w, self.geom, self.tile, y)
            return
        if self.batched:
            batch_conv(ctx, x, w.reshape(self.weights_shape), self.geom, self.group, y)
            return
        kept = self._kept
        if kept is not None and kept[0] is w and kept[1] is y:
            workspace = ctx.workspace
            _, _, padded, columns, ref, fill, inner, layout, window, cols, gemm, weights, out = kept
            if (workspace.get("columns") is columns and workspace.get("padded") is padded
                    and (inner is not None or ref() is x)):
                if inner is not None:
                    if not border_kept(padded, layout):  # another layout was padded since
                        fill[...] = 0
                        mark_border(padded, layout)
                    inner[...] = x
                cols[...] = window
                ctx.xp.matmul(weights, gemm, out=out)
                return
        cols = x.reshape(self.columns_shape) if self.pointwise else self._columns(ctx, x, w, y)
        ctx.xp.matmul(w.reshape(self.weights_shape), cols, out=y.reshape(self.y_shape))

    def _columns(self, ctx, x, w, y):
        """The im2col copy of ``x``. Keeps the views of this run (into the padded copy, the
        column buffer, the weights and the output) for the next runs when they are handed the
        same buffers; a padded copy's border is then written again only when a padding of
        another layout went through the buffer in between (``im2col.border_kept``)."""
        workspace = ctx.workspace
        padded, columns = workspace.get("padded"), workspace.get("columns")
        cols = scratch(ctx, "columns", self.window_shape, x.dtype)
        source = padded_windows(ctx, x, self.geom)  # (pads into scratch: the copy is done)
        window = window_view(ctx.xp, source, self.geom)
        cols[...] = window
        gemm = cols.reshape(self.columns_shape)
        # Views are kept only into buffers the run owns and handed in (a plan's workspace,
        # neither made nor replaced by this call), and only when the input is padded, not
        # cropped: then the padded copy is all scratch and can be written again.
        cropped = any(t < 0 for t in self.geom.fit_tail(x.shape[2:]))
        fill = source if source is not x else None
        owned = (columns is not None and workspace.get("columns") is columns
                 and (fill is None or (padded is not None and workspace.get("padded") is padded)))
        if owned and not cropped and y.flags.c_contiguous:
            try:  # (held weakly: the input may be the caller's array)
                ref = weakref.ref(x)
            except TypeError:  # an array type without weak references: nothing is kept
                return gemm
            inner = layout = None
            if fill is not None:
                inner = fill[interior(self.geom.head, x.shape[2:])]
                layout = padding_layout(fill, self.geom.head, 0)
            self._kept = (w, y, padded, columns, ref, fill, inner, layout, window, cols, gemm,
                          w.reshape(self.weights_shape), y.reshape(self.y_shape))
        return gemm
