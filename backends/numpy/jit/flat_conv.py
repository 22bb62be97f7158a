"""Compiled dense Conv as one implicit GEMM over the flattened padded image, with the sums of
a 16-channel by 16-position block held in vector registers.

Pad the image to (C, Hp, Wp) and read it as one flat array. At stride 1, output pixel (r, q)
is then the flat position p = r * Wp + q, and its tap (c, jh, jw) sits at p + offset[c, jh,
jw] with offset = c * Hp * Wp + jh * dh * Wp + jw * dw: every tap is the same shift for every
pixel. So Y[m, p] = sum_k W[m, k] * Xflat[p + offset[k]] is a GEMM whose right operand is
read straight from the padded copy, 16 consecutive positions a vector load, with nothing
packed or copied kh * kw times. The positions past each row (q >= the output width: Wp - ow
of every Wp) are computed too and dropped when the products are copied into Y (``compact``):
2 of 57 on a 55x55 image. At stride s the padded image is first dealt out into s x s phase
planes by the remainder of its rows and columns modulo s (``split_phases``), where every
tap is again one shift of one plane: an RGB stem's 7x7 stride-2 windows the same way.

``flat_products`` holds 16 x 16 sums while it walks the taps (16 vectors of 16 float32),
each step one vector load of X, 16 broadcasts of W and 16 fused multiply-adds. Measured at one
thread on an AVX-512 machine (2 shared cores), float32, ms (the products alone / the stacked
loop's or Winograd's Conv / onnxruntime's whole Conv), 3x3 pad 1:

    (C, H, M)        flat products    before             onnxruntime
    16, 55x55, 64        0.53           0.89 stacked        0.50
    32, 27x27, 128       0.51           0.64 Winograd       0.48
    256, 14x14, 256      2.33           3.2 stacked         2.2

(blocks of 4, 6, 8, 12 or 24 channels by 16 or 32 positions ran 8-30% slower; 32 channels
spill). The stacked loop's dot products reduce 16 vectors across their lanes per block, which
short runs of taps (K = 144) do not pay back. Where the plan takes this loop: the table
above ``MIN_KEPT``.

The block is written out as named locals (``products_source``): numba runs LLVM's loop
vectoriser, which cannot keep a 2-D block of sums in registers, and leaves the SLP vectoriser
off by default; this one loop is compiled with it on (``compile_vectorised``), into
numba's disk cache (the source is written once to a file in the cache folder, so that numba
can key it), about 6 s the first time on a machine.
"""
from __future__ import annotations

import importlib.util
import os
import sys

import numba
import numpy as np
from numba import types

from backends.numpy.jit.depthwise import bound
from backends.numpy.jit.support import JIT, read_only
from backends.numpy.jit.winograd_conv import cut_scratch

TILE = 16  # (output channels, and positions, of one block of sums)


def products_source(tile: int = TILE) -> str:
    """The module that defines ``flat_products`` for ``tile`` x ``tile`` blocks, each sum a
    named local so that the SLP vectoriser packs a channel's ``tile`` positions into one
    vector. A last block of channels or positions that would run past the end starts
    earlier instead (overlapping the one before: the same sums again)."""
    lanes, rows = range(tile), range(tile)
    lines = [
        "import numba",
        "import numpy as np",
        "",
        "",
        "@numba.njit(cache=True, nogil=True, error_model='numpy', boundscheck=False,",
        "            fastmath={'contract'})",
        "def flat_products(x, w, y, offsets, positions, stride):",
        f'    """y[m * stride + p] = sum_j w[m, j] * x[p + offsets[j]] for p < positions, in '
        f'blocks of {tile} x {tile}."""',
        "    m, k = w.shape",
        "    weights = w.reshape(-1)",
        "    zero = x.dtype.type(0)",
        f"    for block in range(0, m, {tile}):",
        f"        m0 = min(block, m - {tile})",
        *[f"        w{i} = (m0 + {i}) * k" for i in rows],
        f"        for start in range(0, positions, {tile}):",
        f"            p0 = min(start, positions - {tile})",
        *[f"            s{i}_{j} = zero" for i in rows for j in lanes],
        "            for t in range(k):",
        "                at = p0 + offsets[t]",
        *[f"                v{j} = x[np.uint64(at + {j})]" for j in lanes],
        *[f"                a{i} = weights[np.uint64(w{i} + t)]" for i in rows],
        *[f"                s{i}_{j} += a{i} * v{j}" for i in rows for j in lanes],
        *[f"            y[np.uint64((m0 + {i}) * stride + p0 + {j})] = s{i}_{j}"
          for i in rows for j in lanes],
    ]
    return "\n".join(lines) + "\n"


_products = None  # (the compiled flat_products, once loaded)
SIGNATURE = (types.Array(types.float32, 1, "C", readonly=True),
             types.Array(types.float32, 2, "C", readonly=True),
             types.Array(types.float32, 1, "C"),
             types.Array(types.int64, 1, "C", readonly=True), types.int64, types.int64)


def flat_products():
    """The compiled ``flat_products`` (x and w read-only views, y writeable, offsets
    read-only): loaded from a module written into numba's cache folder, else (a folder that
    cannot be written) compiled from memory, uncached. Compiled for ``SIGNATURE`` only;
    any other argument types are refused, not compiled again without the SLP vectoriser."""
    global _products
    if _products is None:
        source = products_source()
        try:
            namespace = _module_from_file(source)
        except OSError:
            namespace = {}
            exec(compile(source.replace("cache=True", "cache=False"), "<flat_products>",
                         "exec"), namespace)
        dispatcher = namespace["flat_products"]
        compile_vectorised(dispatcher, SIGNATURE)
        dispatcher.disable_compile()
        _products = dispatcher
    return _products


def _module_from_file(source: str) -> dict:
    """The namespace of ``source`` imported from a file in numba's cache folder, written
    there when absent or different (so that numba can cache what it compiles from it)."""
    cache = os.environ.get("NUMBA_CACHE_DIR") or numba.config.CACHE_DIR
    if not cache:  # (numba caches beside each module then: none here to write beside)
        raise OSError("no numba cache folder")
    folder = os.path.join(cache, "generated")
    path = os.path.join(folder, f"flat_products_{TILE}.py")
    os.makedirs(folder, exist_ok=True)
    try:
        with open(path, encoding="utf-8") as file:
            current = file.read()
    except FileNotFoundError:
        current = None
    if current != source:
        partial = f"{path}.{os.getpid()}"
        with open(partial, "w", encoding="utf-8") as file:
            file.write(source)
        os.replace(partial, path)  # (atomic: another process may be importing it)
    name = f"portable_flat_products_{TILE}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (numba finds it there when it loads the cached loop)
    spec.loader.exec_module(module)
    return vars(module)


def compile_vectorised(dispatcher, signature) -> None:
    """Compile ``dispatcher`` for ``signature`` (or load it from the disk cache) with LLVM's
    SLP vectoriser on, which numba turns off by default: the setting is read when a
    function's passes are built, so it is switched on for this compile only, under numba's
    compiler lock (no other compile sees it)."""
    from numba.core import config
    from numba.core.compiler_lock import global_compiler_lock

    with global_compiler_lock:
        # The compiler reloads numba's settings from the environment when a NUMBA_ variable
        # changed since it last looked (NUMBA_CACHE_DIR, set after numba was imported):
        # that reload happens here, before the switch, not inside the compile, after it.
        config.reload_config()
        saved = config.SLP_VECTORIZE
        config.SLP_VECTORIZE = 1
        try:
            dispatcher.compile(signature)
        finally:
            config.SLP_VECTORIZE = saved


# A 1x1 Conv at stride 1 without padding is the same GEMM on X itself (offset c * P for
# channel c, no positions dropped). Measured at one thread, float32, X out of the cache (as
# after another layer), ms (sgemm / flat), (C, P, M): 16, 3025, 64 0.100 / 0.077; 512, 169,
# 1000 2.08 / 1.84 (SqueezeNet's last Conv); 256, 3136, 64 1.40 / 1.20; 128, 784, 512 1.16 /
# 1.06; 512, 784, 256 2.37 / 2.08; 256, 196, 1024 1.25 / 1.17; but 1024, 196, 256 1.16 /
# 2.32 (a block's reads of X, C cache lines, no longer fit in the L1 cache), 512, 49, 2048
# 1.45 / 1.49 (49 of 64 positions kept) and 128, 3025, 16 0.27 / 0.31 (one block of
# channels: nothing shares the loads of X). So it is taken up to ``POINTWISE_CHANNELS``
# input channels, from ``POINTWISE_OUTPUTS`` output channels, keeping ``MIN_KEPT``.
POINTWISE_CHANNELS = 512
POINTWISE_OUTPUTS = 2 * TILE


def pointwise_offsets(c: int, m: int, positions: int, dtype):
    """The tap offsets of a 1x1 Conv of C -> M channels on planes of ``positions`` that
    ``flat_products`` takes (``POINTWISE_CHANNELS``), else None."""
    computed = -(-positions // TILE) * TILE
    if (np.dtype(dtype) != np.float32 or c > POINTWISE_CHANNELS or m < POINTWISE_OUTPUTS
            or positions < TILE or positions < MIN_KEPT * computed):
        return None
    return read_only(np.arange(c, dtype=np.int64) * positions)


def pointwise_views(x, w, y) -> list:
    """Per image (X read only, flat; W read only, (M, C); Y flat): the arrays
    ``pointwise_products`` hands the loop, made once per plan."""
    weights = read_only(w.reshape(w.shape[0], -1))
    return [(read_only(x[i].reshape(-1)), weights, y[i].reshape(-1))
            for i in range(x.shape[0])]


def pointwise_products(views, offsets) -> None:
    """Y = W X per image, for ``pointwise_views``."""
    products = flat_products()
    positions = len(views[0][2]) // views[0][1].shape[0]
    for x, w, y in views:
        products(x, w, y, offsets, positions, positions)


@numba.njit(**JIT)
def compact(products, y, wide, top, first):
    """Rows first .. top + rows of y (M, oh, ow) = the kept positions of ``products`` (M,
    rows * wide), the products of rows top .. top + rows: row r of channel m is
    products[m, (r - top) * wide : (r - top) * wide + ow]. The rows before ``first`` (a last
    band's overlap with the one before) are written once, by that band."""
    m, _, ow = y.shape
    rows = products.shape[1] // wide
    for o in range(m):
        source = products[o]
        for r in range(first - top, rows):
            row = y[o, top + r]
            at = r * wide
            for q in range(ow):
                row[np.uint64(q)] = source[np.uint64(at + q)]


@numba.njit(**JIT)
def compact_bounded(products, y, wide, top, first, bias, z, residual, low, high):
    """``compact`` with FusedConv's epilogue on the way: bound((p + bias[m]) + z) (z read
    only when ``residual``), in the order of ``fused_conv.bias_residual_and_bounds``. Each
    row is written once: Z may be Y itself (the plan's in-place residual)."""
    m, _, ow = y.shape
    rows = products.shape[1] // wide
    for o in range(m):
        source, b = products[o], bias[o]
        for r in range(first - top, rows):
            row, extra = y[o, top + r], z[o, top + r]
            at = r * wide
            if residual:
                for q in range(ow):
                    k = np.uint64(q)
                    row[k] = bound((source[np.uint64(at + q)] + b) + extra[k], low, high)
            else:
                for q in range(ow):
                    row[np.uint64(q)] = bound(source[np.uint64(at + q)] + b, low, high)


# Where the loop is taken over the stacked loop, the dot products or the columns: measured
# at one thread on an AVX-512 machine (2 shared cores), batch 1, float32, ms (the other
# layout / this one, X and W in cache), model-zoo Convs with the share of the positions
# computed that are kept (blocks of 16 positions, rows of Wh; 14 of 15 on 14x14):
#   (C, H, M, kernel, stride)       K    kept   other           flat
#   3, 224x224, 64, 7x7, 2        147    0.97   3.1-3.5 bands   2.5-2.8  (ResNet-50's stem)
#   16, 55x55, 64, 3x3, 1         144    0.96   0.83 stacked    0.70
#   32, 27x27, 128, 3x3, 1        288    0.93   0.56 Winograd   0.53
#   128, 56x56, 128, 3x3, 2      1152    0.96   2.84 stacked    2.58
#   3, 224x224, 64, 3x3, 2         27    0.99   0.57 columns    0.63-0.66
#   256, 28x28, 256, 3x3, 2      2304    0.88   3.24 stacked    2.63
#   96, 28x28, 96, 3x3, 2         864    0.88   0.35 stacked    0.42
#   128, 14x14, 128, 3x3, 1      1152    0.88   0.55 stacked    0.62
#   256, 14x14, 256, 3x3, 1      2304    0.88   2.65 stacked    2.47
#   128, 14x14, 32, 3x3, 1       1152    0.88   0.15 stacked    0.18
#   32, 13x13, 128, 5x5, 1        800    0.75   0.39 stacked    0.47
#   48, 6x6, 128, 5x5, 1         1200    0.56   0.12 stacked    0.21
#   96, 54x54, 256, 5x5, 2       2400    0.96   9.7 stacked     12.5     (ZFNet)
#   3, 224x224, 96, 11x11, 4      363    0.98   3.0 bands       3.3      (AlexNet's stem)
# The dot products' sums across their vector lanes cost most on short runs of taps; this
# loop's dropped positions, on small images; on 27 taps its block of sums is written out
# after too few multiply-adds; at strides past 2, or on windows past 3x3 at stride 2 over
# more than ``STRIDED_CHANNELS`` channels, a block's reads stray over too many rows of the
# phase planes. It is taken from ``MIN_TAPS`` taps where it keeps ``MIN_KEPT`` of the
# positions it computes.
MIN_KEPT = 0.9
MIN_TAPS = 64
STRIDED_CHANNELS = 3
# Products a band holds before they are copied into Y (512 KB of float32: in the L2 cache).
# Also what keeps the scratch within the im2col columns of a Conv with few taps and many
# output channels (an RGB stem's 27 taps against 64 channels).
BAND_ELEMENTS = 1 << 17


def _layout(x_shape, w_shape, g) -> tuple:
    """(Hh, Wh, positions, tap offsets of channel 0, extent): the phase planes of the padded
    image (its rows and columns dealt out by their remainder modulo the stride:
    ``split_phases``), the flat positions of the output (oh rows of Wh), each tap's offset
    into the split copy (channel c's lie ``sh * sw * Hh * Wh`` further), and one past the
    last element the products read (past the copy by the few elements the last row's
    dropped positions reach). Plan-time work the size of one channel's window only."""
    kh, kw, sh, sw, dh, dw, _, _, oh, ow = g
    c = x_shape[1]
    tall = -(-((oh - 1) * sh + (kh - 1) * dh + 1) // sh)
    wide = -(-((ow - 1) * sw + (kw - 1) * dw + 1) // sw)
    plane = tall * wide
    taps = [(jh * dh % sh * sw + jw * dw % sw) * plane + jh * dh // sh * wide + jw * dw // sw
            for jh in range(kh) for jw in range(kw)]
    positions = oh * wide
    copied = c * sh * sw * plane
    return tall, wide, positions, taps, max(copied, positions + copied - sh * sw * plane
                                            + max(taps))


@numba.njit(**JIT)
def split_phases(x, i, out, g):
    """out (C, sh, sw, Hh, Wh)[c, a, b, u, v] = image ``i`` of x (N, C, H, W) at row
    u * sh + a - ph and column v * sw + b - pw, zero outside it: the padded image with its
    rows and columns dealt out by their remainder modulo the stride, so that every tap of a
    strided window is one shift of one phase plane (at stride 1, the padded copy)."""
    sh, sw, ph, pw = g[2], g[3], g[6], g[7]
    _, c, height, width = x.shape
    tall, wide = out.shape[3], out.shape[4]
    zero = x.dtype.type(0)
    for ch in range(c):
        for a in range(sh):
            for u in range(tall):
                r = u * sh + a - ph
                for b in range(sw):
                    row = out[ch, a, b, u]
                    lo, hi = wide, wide  # (the columns v read from X: none on a padding row)
                    if 0 <= r < height:
                        lo = min(wide, max(0, -((b - pw) // sw)))
                        hi = max(lo, min(wide, (width - 1 + pw - b) // sw + 1))
                        source = x[i, ch, r]
                        for v in range(lo, hi):
                            row[np.uint64(v)] = source[np.uint64(v * sw + b - pw)]
                    for v in range(lo):
                        row[np.uint64(v)] = zero
                    for v in range(hi, wide):
                        row[np.uint64(v)] = zero


def _band_rows(m: int, wide: int, oh: int) -> int:
    """Output rows a band of products takes: at most ``BAND_ELEMENTS`` of them, the rows
    shared out evenly among the bands (the last band overlaps the one before by what is
    left over), and at least one block of positions."""
    least = min(oh, -(-TILE // wide))
    most = max(least, BAND_ELEMENTS // (m * wide))
    return max(least, -(-oh // -(-oh // most)))


class FlatPlan:
    """Conv(X, W) of one float32 Conv by ``flat_products``: the padded image split into its
    stride's phase planes (``split_phases``; at stride 1 the padded copy), with the few
    elements the last row's dropped positions read past it, and the block of products, per
    image, cut from the Conv's declared im2col columns; the tap offsets, fixed per shape."""

    def __init__(self, x_shape, w_shape, g) -> None:
        c, m = x_shape[1], w_shape[0]
        tall, wide, _, taps, extent = _layout(x_shape, w_shape, g)
        self.g = g
        self.wide, self.rows = wide, _band_rows(m, wide, g[8])
        self.phases = (c, g[2], g[3], tall, wide)
        self.copied = c * g[2] * g[3] * tall * wide
        channels = np.arange(c, dtype=np.int64)[:, None] * (g[2] * g[3] * tall * wide)
        self.offsets = read_only((channels + np.array(taps, np.int64)).reshape(-1))
        self.shapes = ((extent,), (m * self.rows * wide,))

    @staticmethod
    def preferred(x_shape, w_shape, g) -> bool:
        """Whether this loop beats the other layouts (the table above ``MIN_KEPT``): enough
        taps, and few of the positions it computes dropped."""
        positions = _layout(x_shape, w_shape, g)[2]
        c, window = x_shape[1], w_shape[2] * w_shape[3]
        strided = (g[2], g[3]) != (1, 1)
        if strided and (max(g[2], g[3]) > 2 or (window > 9 and c > STRIDED_CHANNELS)):
            return False
        return c * window >= MIN_TAPS and g[8] * g[9] >= MIN_KEPT * (-(-positions // TILE) * TILE)

    @staticmethod
    def scratch_elements(x_shape, w_shape, g) -> int:
        """float32 elements of scratch a call takes (one image at a time)."""
        _, wide, _, _, extent = _layout(x_shape, w_shape, g)
        return extent + w_shape[0] * _band_rows(w_shape[0], wide, g[8]) * wide

    @staticmethod
    def applies(x_shape, w_shape, g, dtype, workspace: dict[str, int]) -> bool:
        """Whether this loop takes the Conv: float32, at least ``TILE`` output channels and
        flat positions, and scratch within the im2col columns the Conv declares
        (``workspace``: bytes per key), so that the memory plan is unchanged."""
        if np.dtype(dtype) != np.float32 or w_shape[0] < TILE:
            return False
        if _layout(x_shape, w_shape, g)[2] < TILE:
            return False
        need = FlatPlan.scratch_elements(x_shape, w_shape, g) * 4
        return need <= workspace.get("columns", 0)

    def conv(self, ctx, x, w, y, epilogue=None) -> None:
        """Writes Conv(X, W) into ``y``; all three C-contiguous float32. The products go a
        band of ``rows`` output rows at a time, each copied into Y while in cache (a last
        band that would run past the end starts earlier, overlapping the one before), with
        FusedConv's ``epilogue`` (bias, Z or None, low, high) applied on the way."""
        products = flat_products()
        split, block = cut_scratch(ctx, "columns", self.shapes)
        phases = split[:self.copied].reshape(self.phases)
        split[self.copied:] = 0  # (finite, whatever the last call left there)
        source = read_only(split)
        weights = read_only(w.reshape(w.shape[0], -1))
        oh, wide, count = y.shape[2], self.wide, self.rows * self.wide
        table = block.reshape(w.shape[0], count)
        for i in range(x.shape[0]):
            split_phases(x, i, phases, self.g)
            for start in range(0, oh, self.rows):
                top = min(start, oh - self.rows)
                products(source[top * wide:], weights, block, self.offsets, count, count)
                if epilogue is None:
                    compact(table, y[i], wide, top, start)
                else:
                    bias, z, low, high = epilogue
                    compact_bounded(table, y[i], wide, top, start, bias,
                                    y[i] if z is None else z[i], z is not None, low, high)

    def warm(self) -> None:
        """Compile (or load) the loops while planning."""
        flat_products()
        one = np.zeros((1, 1, 1, 1, 1), np.float32)
        compact(one[0, 0, 0], one[0, 0], 1, 0, 0)
        zero = np.float32(0)
        for bias in (one[0, 0, 0, 0], read_only(one[0, 0, 0, 0])):  # (a plan's: read only)
            for z in (one[0, 0], read_only(one[0, 0])):
                compact_bounded(one[0, 0, 0], one[0, 0], 1, 0, 0, bias, z, True, zero, zero)
        split_phases(one[0], 0, one, (1, 1, 1, 1, 1, 1, 0, 0, 1, 1))
