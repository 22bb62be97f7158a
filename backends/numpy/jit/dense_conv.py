"""Compiled dense Conv for the FusedConv (``fused_conv.py``) and the plain Conv
(``plain_conv.py``): the 2-D Convs of group 1 past the small loop, fixed per shape by
``DensePlan``. A plain Conv takes the plan only where it beats the xp kernel
(``DensePlan.for_plain_conv``, the table above it).

Per shape: a compiled padded copy and im2col, then either sgemm on the columns or
register-tiled dot products on the windows laid out pixel by pixel, which need no packing of
W (the table above ``DOT_CHANNELS`` has the measurements); or, for window runs of at least
``stacked_conv.STACK_K``, the stacked loop (``stacked_conv.StackedPlan``); or, for float32
on images whose rows are long enough, the flat products (``flat_conv.FlatPlan``); or
Winograd (``winograd_conv``); or, for a 1x1 Conv at stride 1 without padding, sgemm on X
itself.
"""
from __future__ import annotations

import numba
import numpy as np

from backends.numpy.jit.flat_conv import FlatPlan
from backends.numpy.jit.recurrent_math import matmul_nt
from backends.numpy.jit.small_conv import prepare_small
from backends.numpy.jit.stacked_conv import StackedPlan
from backends.numpy.jit.winograd_conv import WinogradPlan, applies as winograd_applies
from backends.numpy.jit.support import JIT, floats, read_only, window_tuple
from backends.xp.kernels.conv_plan import BATCH_POSITIONS
from backends.xp.kernels.fused import conv_workspace
from backends.xp.kernels.im2col import border_kept, mark_border, padding_layout, scratch
from portable.ops.conv import window_geometry


# -- compiled im2col, then one product per image ---------------------------------------------
# Measured on 2 shared cores (load 3.5-5), one thread, float32, per 3x3 Conv of ResNet-18's
# small-image layers at batch 1; times in us, the window copy (from a padded copy) + product:
#   (C, H, M, stride)       columns + sgemm     pixel rows + dot products
#   128, 4x4, 128, 1            11 + 50              11 + 30
#   64, 8x8, 64, 1               6 + 43              20 + 25
#   64, 16x16, 128, 2            9 + 88              20 + 50
#   32, 32x32, 64, 2            15 + 99              41 + 53
#   32, 16x16, 32, 1             6 + 46              41 + 29
#   16, 32x32, 16, 1            10 + 51              85 + 34
# (NumPy's copy through a 6-D window view took 17-39 us for the columns.) sgemm packs all of
# W for a product only P = H * W columns wide, so a few columns cost nearly as much as many;
# the register-tiled dot products (``recurrent_math.matmul_nt``) pack nothing and run
# 1.5-1.8x faster, but read the windows pixel-major (each pixel's C * kh * kw values in a
# row), a gather of kw-element runs: it pays from ``DOT_CHANNELS`` output channels, over
# which that gather is shared, and not for a 1x1 kernel (a downsample: K too short for the
# dot products; 11 us through sgemm against 18 for 64 -> 128 channels on 8x8).
DOT_CHANNELS = 64
# Output positions per image up to which the dot products are taken: up to 64 (8x8) they won
# at every load; at 256 (the 32x32 stride-2 layer) they won at load 4 and tied at load 1 (30
# against 31 us), and on larger images sgemm's packing is paid back, and sgemm, unlike the
# compiled products, may run on several threads (backends/numpy/threads.py).
DOT_POSITIONS = 64
# Input channels up to which a Conv the stacked loop would take runs as bands of im2col
# columns, each followed by its sgemm while it is in cache (``BAND_BYTES`` of columns): an
# RGB stem's window runs (3 x 7 x 7 = 147) are too short for the stacked loop's dot
# products. The 7x7 stride-2 stem (3 -> 64 on 224x224) took 5.7-6.5 ms stacked, 4.7-5.7 ms
# as one im2col and sgemm, 3.6-3.8 ms as bands (onnxruntime 2.4-2.8), one thread.
BAND_CHANNELS = 3
BAND_BYTES = 1 << 19
# Input and output channels from which Winograd (``winograd_conv``) is taken over the flat
# products (``flat_conv``) where both apply. Measured at one thread, batch 1, ms (Winograd /
# flat): 64 -> 64 on 28x28 0.45 / 0.61, 64 -> 192 on 56x56 4.6 / 7.2, 128 -> 128 on 28x28
# 1.66 / 2.57; but 32 -> 128 on 27x27 0.56 / 0.53: with few channels on either side
# Winograd's transforms outweigh the multiplies it saves. DenseNet-121's growth Convs (128 ->
# 32 on 56x56) took 1.8-2.0 / 2.2 alone, X in cache, but 2.8-3.2 / 2.45 in the model (steps
# timed in alternated runs of the two trees): the rule follows the model.
WINOGRAD_OVER_FLAT = 64


@numba.njit(**JIT)
def pad_into(x, padded, ph, pw, border):
    """padded (N, C, Hp, Wp) = x placed at (ph, pw), zeros around it when ``border`` (else
    the border is taken to hold them already); rows and columns past Wp, Hp are cropped."""
    n, c, height, width = x.shape
    tall, wide = padded.shape[2], padded.shape[3]
    bottom, right = min(height, tall - ph), min(width, wide - pw)
    zero = x.dtype.type(0)
    for i in range(n):
        for ch in range(c):
            out = padded[i, ch]
            if border:
                for r in range(tall):
                    for q in range(wide):
                        out[r, q] = zero
            plane = x[i, ch]
            for r in range(bottom):
                dst, src = out[r + ph], plane[r]
                for q in range(right):
                    dst[np.uint64(q + pw)] = src[np.uint64(q)]


@numba.njit(**JIT)
def columns_from_padded(padded, cols, g):
    """cols (N, C * kh * kw, rows * cols)[i, (c, jh, jw), (r, q)] = padded[i, c, r * sh + jh
    * dh, q * sw + jw * dw]: the im2col copy from a copy padded as far as the windows reach
    (or from X itself where they stay inside it), with no bounds to test. Flat indices: a
    view per row made the short rows of small images cost 1.5-3x more."""
    for i in range(cols.shape[0]):
        columns_band(padded, cols[i], g, i, 0)


@numba.njit(**JIT)
def columns_band(padded, cols, g, image, top):
    """cols (C * kh * kw, rows * out_w) = ``columns_from_padded``'s columns of the output rows
    top .. top + rows of one image: a band that stays in cache for the product after it."""
    kh, kw, sh, sw, dh, dw, _, _, out_h, out_w = g
    n, c, tall, wide = padded.shape
    rows = cols.shape[1] // out_w
    src, dst = padded.reshape(-1), cols.reshape(-1)
    plane = tall * wide
    t = 0
    for ch in range(c):
        for jh in range(kh):
            for jw in range(kw):
                start = (image * c + ch) * plane + jh * dh * wide + jw * dw
                for r in range(top, top + rows):
                    at = start + r * sh * wide
                    for q in range(out_w):
                        dst[np.uint64(t + q)] = src[np.uint64(at + q * sw)]
                    t += out_w


@numba.njit(**JIT)
def rows_from_padded(padded, rows, g):
    """rows (N, rows * cols, C * kh * kw): each output pixel's window in W's order (channel,
    kernel row, kernel column), read as ``columns_from_padded`` reads it."""
    kh, kw, sh, sw, dh, dw, _, _, out_h, out_w = g
    n, c, tall, wide = padded.shape
    src, dst = padded.reshape(-1), rows.reshape(-1)
    plane = tall * wide
    t = 0
    for i in range(n):
        for r in range(out_h):
            for q in range(out_w):
                corner = i * c * plane + r * sh * wide + q * sw
                for ch in range(c):
                    for jh in range(kh):
                        at = corner + ch * plane + jh * dh * wide
                        for jw in range(kw):
                            dst[np.uint64(t)] = src[np.uint64(at + jw * dw)]
                            t += 1


# The compiled FusedConv's choice where both the small loop and the stacked one take a Conv
# (padded, at most SMALL_WORK, K = C * kh * kw >= stacked_conv.STACK_K): the stacked loop.
# Measured on an AVX-512 machine (2 shared cores, load 0.7), one thread, float32 + Relu,
# times in us: the small loop with its bias and bounds (``conv_small_bounded``) against the
# stacked loop then ``fused_conv.bias_and_bounds``:
#   (N, C, H, M, kernel, pad)     K      small    stacked + pass
#   1, 16, 4, 16, 3x3, 1        144       6.7        2.5
#   1, 16, 8, 16, 3x3, 1        144       9.4        4.3
#   1, 16, 6, 32, 3x3, 1        144      15.0        4.7
#   1, 32, 4, 32, 3x3, 1        288      23.0        3.8
#   1, 6, 10, 6, 5x5, 2         150       5.4        5.2
#   1, 6, 14, 16, 5x5, 0        150      12.6        7.9   (LeNet's second Conv; unpadded,
#   8, 6, 14, 16, 5x5, 0        150      96.6       52.2    so the small loop never takes it)
# The small loop's passes over a short output run cost about the same per kernel offset
# whatever the channel count; the stacked loop's dot products grow with K.


# Where a plain Conv (no epilogue: a training graph's Conv before its BatchNorm) takes the plan
# instead of the xp kernel (pad, im2col through a strided view, sgemm per image, or one batch-
# wide GEMM for outputs of at most ``conv_plan.BATCH_POSITIONS`` positions). Measured at one
# thread (2 shared cores, load 0.3-0.5), float32, the weight writeable (reordered every call),
# times in ms, LeNet (batch 64) and the CIFAR ResNet-18 (batch 32):
#   (C, H, M, kernel, stride)     layout      xp    plan   (columns where not the layout)
#   1, 28x28, 20, 5x5            columns     0.58   0.45
#   20, 12x12, 50, 5x5           stacked     2.84   1.33
#   3, 32x32, 64, 3x3            columns     1.24   1.17
#   64, 32x32, 64, 3x3           stacked    25.4   14.6     (24.7)
#   64, 32x32, 128, 3x3, s2      stacked    12.1    9.5     (11.8)
#   64, 32x32, 128, 1x1, s2      columns     1.36   1.26
#   128, 16x16, 128, 3x3         stacked    23.5   11.6     (21.9)
#   128, 16x16, 256, 3x3, s2     stacked    11.4    6.7
#   128, 16x16, 256, 1x1, s2     stacked     1.21   1.27     (1.17)
#   256, 8x8, 256, 3x3           stacked    22.8   12.0
#   256, 8x8, 512, 3x3, s2       stacked    10.8    7.9     (12.6: xp's batch-wide GEMM wins)
#   256, 8x8, 512, 1x1, s2       stacked     1.24   0.97     (1.38)
#   512, 4x4, 512, 3x3           stacked    21.8   15.6     (25.4)
# float64 alike (LeNet's second Conv 5.4 -> 2.2, 64 of 32x32 54.7 -> 26.5, 512 of 4x4 41.4 ->
# 35.2). So the stacked layout is taken wherever the plan has it, and the columns wherever
# the xp kernel runs its per-image GEMMs too (the compiled window copy is the faster one).
# The rows layout lost to both at batch 4 and 32 for the runs it keeps (K < STACK_K: 32 x
# 8 x 8x8 -> 64, 0.40 against 0.24 by xp, 0.19 by columns), and a 1x1 Conv at stride 1
# without padding is one sgemm on X either way: those stay with the xp kernel.


def _window_and_out(geom) -> tuple[int, ...]:
    """(kh, kw, sh, sw, dh, dw, head_h, head_w, out_h, out_w): the geometry as the loops
    take it."""
    return (*window_tuple(geom), *geom.out)


class DensePlan:
    """Y = Conv(X, W) without bias for a 2-D float Conv of group 1 that the small loop leaves
    (``prepare_small``), or that the stacked loop takes (the table above): how its windows
    are laid out and multiplied, fixed per shape.

    ``layout``: "pointwise" (1x1, stride 1, unpadded: sgemm reads X), "flat" (float32 with
    few positions dropped: ``flat_conv.FlatPlan``, the table above ``flat_conv.MIN_KEPT``),
    "winograd" (3x3 at stride 1 on large enough images, ahead of "flat" from
    ``WINOGRAD_OVER_FLAT`` channels: ``winograd_conv.WinogradPlan``), "stacked" (window
    runs of at least ``stacked_conv.STACK_K``: ``stacked_conv.StackedPlan``; of at most
    ``BAND_CHANNELS`` input channels, "bands": ``columns_band``, then sgemm), "columns"
    (``columns_from_padded``, then sgemm) or "rows" (``rows_from_padded``, then dot
    products); see the table above.
    Scratch comes from ``ctx.workspace`` under "padded" and "columns", the keys and sizes the
    xp Conv declares (``backends/xp/kernels/fused.conv_workspace``)."""

    def __init__(self, input_types, output_types, attrs) -> None:
        x, w = input_types[0], input_types[1]
        geom = window_geometry(x.shape[2:], w.shape[2:], attrs)
        n, c = x.shape[:2]
        m, positions = w.shape[0], geom.out[0] * geom.out[1]
        self.dtype = x.dtype
        self.weights = (m, c * geom.kernel[0] * geom.kernel[1])
        self.columns = (n, self.weights[1], positions)
        self.product = (n, m, positions)
        self.g = _window_and_out(geom)
        tail = geom.fit_tail(x.shape[2:])
        self.head = tuple(geom.head)
        self.padded = (n, c) + tuple(d + h + t for d, h, t in zip(x.shape[2:], geom.head, tail))
        unpadded = not any(geom.head) and all(t <= 0 for t in tail)
        self.stacked = self.winograd = self.flat = None
        workspace = conv_workspace(input_types, output_types, attrs)
        if (unpadded and all(k == 1 for k in geom.kernel) and all(s == 1 for s in geom.strides)
                and tuple(geom.out) == tuple(x.shape[2:])):
            self.layout = "pointwise"
        elif (FlatPlan.applies(x.shape, w.shape, self.g, x.dtype, workspace)
              and FlatPlan.preferred(x.shape, w.shape, self.g)
              and not (min(c, m) >= WINOGRAD_OVER_FLAT
                       and winograd_applies(x.shape, w.shape, self.g, x.dtype, workspace))):
            self.layout = "flat"
            self.flat = FlatPlan(x.shape, w.shape, self.g)
        elif winograd_applies(x.shape, w.shape, self.g, x.dtype, workspace):
            self.layout = "winograd"
            self.winograd = WinogradPlan(x.shape, w.shape, workspace)
        elif DensePlan.stacks(input_types, output_types, attrs) and c <= BAND_CHANNELS:
            self.layout = "bands"
            out_w = geom.out[1]
            self.band_rows = max(1, BAND_BYTES // (self.weights[1] * out_w * x.dtype.itemsize))
        elif DensePlan.stacks(input_types, output_types, attrs):
            self.layout = "stacked"
            self.stacked = StackedPlan(x.shape, w.shape, self.g, x.dtype, workspace)
        elif (m >= DOT_CHANNELS and positions <= DOT_POSITIONS
              and geom.kernel[0] * geom.kernel[1] > 1):
            self.layout = "rows"
        else:
            self.layout = "columns"
        self.unpadded = unpadded  # (the windows read X itself: no padded copy)
        self.zero = x.dtype.type(0)
        self._kept = None  # (w, y, the workspace's buffers, then the views made into them)
        self._layout = None  # (the padded copy's border stamp, made once)

    @property
    def workspace(self) -> dict[str, int]:
        """Scratch beside the xp Conv's (``conv_workspace``): the stacked loop's, if any."""
        return self.stacked.workspace if self.layout == "stacked" else {}

    @property
    def held_bytes(self) -> int:
        """Bytes this Conv keeps for the plan's life (the stacked loop's reordered weight)."""
        return self.stacked.held_bytes if self.layout == "stacked" else 0

    @staticmethod
    def applies(input_types, output_types, attrs) -> bool:
        """Whether this plan takes the Conv: a dense 2-D float Conv that the small loop does
        not take, or that the stacked loop takes (it beats the small loop wherever both
        apply: the table above this class)."""
        x, w, y = input_types[0], input_types[1], output_types[0]
        return (attrs["group"] == 1 and floats(x, w, y) and min(y.shape[2:]) >= 1
                and (prepare_small(input_types, output_types, attrs) is None
                     or DensePlan.stacks(input_types, output_types, attrs)))

    @staticmethod
    def for_plain_conv(input_types, output_types, attrs) -> "DensePlan | None":
        """The plan of a plain Conv where it beats the xp kernel (the table above
        ``_window_and_out``), else None."""
        if not DensePlan.applies(input_types, output_types, attrs):
            return None
        plan = DensePlan(input_types, output_types, attrs)
        n, _, positions = plan.product
        per_image = n == 1 or positions > BATCH_POSITIONS  # (as the xp kernel's GEMMs are)
        if plan.layout in ("stacked", "winograd", "bands", "flat") or (plan.layout == "columns"
                                                               and per_image):
            return plan
        return None

    @staticmethod
    def stacks(input_types, output_types, attrs) -> bool:
        """Whether the Conv's layout is "stacked" (``StackedPlan.applies`` on its geometry)."""
        x, w = input_types[0], input_types[1]
        geom = window_geometry(x.shape[2:], w.shape[2:], attrs)
        return StackedPlan.applies(x.shape, w.shape, _window_and_out(geom), x.dtype.itemsize,
                                   conv_workspace(input_types, output_types, attrs))

    def _padded(self, ctx, x):
        """X padded as far as the windows reach, in the workspace's "padded" buffer; its
        border is written only when another layout went through the buffer since."""
        if self.unpadded:
            return x
        padded = scratch(ctx, "padded", self.padded, x.dtype)
        self._pad(ctx.workspace["padded"], padded, x)
        return padded

    def _pad(self, buffer, padded, x) -> None:
        layout = self._layout
        if layout is None or layout[0] != padded.shape:
            layout = self._layout = padding_layout(padded, self.head, 0)
        border = not border_kept(buffer, layout)
        pad_into(x, padded, self.head[0], self.head[1], border)
        if border:
            mark_border(buffer, layout)

    def conv(self, ctx, x, w, y) -> None:
        """Writes Conv(X, W) into ``y``; all three C-contiguous. A plan hands the same
        weights, output and workspace buffers to every run: the views made into them on the
        first run are kept and reused while that holds (about 3 us a call)."""
        if self.layout == "stacked":
            self.stacked.conv(ctx, x, w, y)
            return
        if self.layout == "winograd":
            self.winograd.conv(ctx, x, w, y)
            return
        if self.layout == "flat":
            self.flat.conv(ctx, x, w, y)
            return
        if self.layout == "bands":
            self._bands(ctx, x, w, y)
            return
        kept, workspace = self._kept, ctx.workspace
        if (kept is not None and kept[0] is w and kept[1] is y
                and workspace.get("columns") is kept[2] and workspace.get("padded") is kept[3]):
            _, _, _, buffer, weights, windows, padded, out = kept
            if padded is None:
                padded = x
            else:
                self._pad(buffer, padded, x)
            if self.layout == "columns":
                columns_from_padded(padded, windows, self.g)
                np.matmul(weights, windows, out=out)
            else:
                rows_from_padded(padded, windows, self.g)
                for i in range(self.columns[0]):
                    matmul_nt(weights, windows[i], out[i], self.zero)
            return
        weights, out = w.reshape(self.weights), y.reshape(self.product)
        if self.layout == "pointwise":
            np.matmul(weights, x.reshape(self.columns), out=out)
            return
        handed = (workspace.get("columns"), workspace.get("padded"))
        windows = scratch(ctx, "columns", self.columns, x.dtype)
        padded = self._padded(ctx, x)
        if self.layout == "columns":
            columns_from_padded(padded, windows, self.g)
            np.matmul(weights, windows, out=out)
        else:
            windows = windows.reshape(self.columns[0], self.columns[2], self.columns[1])
            rows_from_padded(padded, windows, self.g)
            for i in range(self.columns[0]):
                matmul_nt(weights, windows[i], out[i], self.zero)
        # Kept only when the buffers were handed in (a plan's workspace), never ones this
        # call allocated (an imperative call's scratch): no plan holds memory past its call.
        if (handed[0] is not None and workspace.get("columns") is handed[0]
                and workspace.get("padded") is handed[1]
                and (self.unpadded or handed[1] is not None)):
            self._kept = (w, y, handed[0], handed[1], weights, windows,
                          None if self.unpadded else padded, out)

    def _bands(self, ctx, x, w, y) -> None:
        """Conv(X, W) a band of output rows at a time: its columns, then their product."""
        n, k, _ = self.columns
        out_h, out_w = self.g[8], self.g[9]
        weights, out = w.reshape(self.weights), y.reshape(self.product)
        windows = scratch(ctx, "columns", (k * self.band_rows * out_w,), x.dtype)
        padded = self._padded(ctx, x)
        for i in range(n):
            for top in range(0, out_h, self.band_rows):
                count = min(self.band_rows, out_h - top)
                band = windows[:k * count * out_w].reshape(k, count * out_w)
                columns_band(padded, band, self.g, i, top)
                np.matmul(weights, band, out=out[i][:, top * out_w:(top + count) * out_w])

    def warm(self) -> None:
        """Compile (or load from numba's disk cache) the loops of this layout while planning:
        one small Conv of the same layout and dtype."""
        if self.layout == "stacked":
            self.stacked.warm()
            return
        if self.layout == "winograd":
            self.winograd.warm()
            return
        if self.layout == "flat":
            self.flat.warm()
            return
        key = (self.layout, self.unpadded, self.dtype)
        if key in _warm_layouts:
            return
        one = np.zeros((1, 1, 1, 1), self.dtype)
        g = (1, 1, 1, 1, 1, 1, 0, 0, 1, 1)
        if self.layout == "columns":
            pad_into(one, one, 0, 0, True)
            columns_from_padded(one, one[0], g)
        elif self.layout == "bands":
            pad_into(one, one, 0, 0, True)
            columns_band(one, one[0, 0], g, 0, 0)
        elif self.layout == "rows":
            pad_into(one, one, 0, 0, True)
            rows_from_padded(one, one[0], g)
            for weights in (one[0, 0], read_only(one[0, 0])):  # (a plan's weight: read only)
                matmul_nt(weights, one[0, 0], one[0, 0], self.zero)
        _warm_layouts.add(key)


_warm_layouts: set = set()
