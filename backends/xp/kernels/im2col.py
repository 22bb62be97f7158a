"""Window helpers shared by the convolution and pooling kernels, written against ``xp``.

The layout everywhere is (N, C, D1, ..., Dn). Two ways to visit windows:
- im2col (Conv, and the argmax of MaxPool's Indices and gradient): pad the input once, then copy
  every window out through one strided view, so a GEMM or an argmax reads them contiguously;
- kernel offsets (pools, col2im): for a fixed kernel offset the windows' elements form one
  strided slice of the input, so one elementwise op handles that offset for every window at
  once; each offset's slice is clipped to the input, so nothing is padded or copied.
The loops run over kernel offsets (9 for a 3x3 kernel), never over elements or batch items.
"""
from __future__ import annotations

import itertools
import math
import weakref
from typing import Any, Sequence

import numpy as np

from portable.ops.conv import Geometry


def scratch(ctx, key: str, shape: Sequence[int], dtype):
    """A temporary array for one kernel call, carved from a byte buffer kept in the kernel
    context's workspace under ``key``: the kernels an executor runs with one context share a
    single allocation per key instead of faulting in fresh pages for every im2col copy (large
    NumPy allocations are mmap'ed and returned on free). Valid until the next call with the
    same key."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    buffer = ctx.workspace.get(key)
    if buffer is None or buffer.nbytes < nbytes:
        buffer = ctx.workspace[key] = ctx.xp.empty(max(nbytes, 1), dtype=np.uint8)
    return buffer[:nbytes].view(dtype).reshape(tuple(shape))


def pad_spatial(ctx, x, head: Sequence[int], tail: Sequence[int], value=0):
    """``x`` with ``head``/``tail`` elements of ``value`` around each spatial axis (in scratch
    memory); a negative tail crops the axis instead. Returns ``x`` itself when nothing
    changes."""
    crop = tuple(slice(0, n + min(t, 0)) for n, t in zip(x.shape[2:], tail))
    if any(t < 0 for t in tail):
        x = x[(slice(None), slice(None)) + crop]
    if not any(head) and all(t <= 0 for t in tail):
        return x
    shape = x.shape[:2] + tuple(n + h + max(t, 0) for n, h, t in zip(x.shape[2:], head, tail))
    padded = scratch(ctx, "padded", shape, x.dtype)
    padded[...] = value
    padded[interior(head, x.shape[2:])] = x
    mark_border(ctx.workspace["padded"], padding_layout(padded, head, value))
    return padded


# -- borders that stay filled ---------------------------------------------------------------
# A padded copy's border is the same for every input of one layout (shape, dtype, where the
# input sits, the pad value); only its interior changes. Writers of a workspace's "padded"
# buffer stamp it with the layout whose border they left there, so a plan's Conv, finding
# its own layout's stamp, copies only the interior. Stamps are keyed by the buffer's id and
# die with it (a weak reference checks that the id still names that buffer).
_borders: dict[int, tuple[Any, tuple]] = {}


def padding_layout(padded, head: Sequence[int], value) -> tuple:
    """What fixes a padded copy's border."""
    return (tuple(padded.shape), padded.dtype, tuple(head), float(value))


def mark_border(buffer, layout: tuple | None) -> None:
    """Record that ``buffer`` now holds the border of ``layout`` (None: of no layout)."""
    key = id(buffer)
    if layout is None:
        _borders.pop(key, None)
        return
    try:
        ref = weakref.ref(buffer, lambda _, key=key: _borders.pop(key, None))
    except TypeError:  # an array type without weak references: never stamped
        return
    _borders[key] = (ref, layout)


def border_kept(buffer, layout: tuple) -> bool:
    """Whether ``buffer``'s stamp says it holds the border of ``layout``."""
    stamp = _borders.get(id(buffer))
    return stamp is not None and stamp[0]() is buffer and stamp[1] == layout


def interior(head: Sequence[int], size: Sequence[int]) -> tuple[slice, ...]:
    """The index of the unpadded input inside a padded array."""
    return (slice(None), slice(None)) + tuple(slice(h, h + n) for h, n in zip(head, size))


def window_view(xp, padded, geom: Geometry):
    """A strided view (N, C, *kernel, *out) of every window of ``padded`` (no copy)."""
    steps = padded.strides[2:]
    shape = padded.shape[:2] + geom.kernel + tuple(geom.out)
    strides = (padded.strides[:2] + tuple(t * d for t, d in zip(steps, geom.dilations))
               + tuple(t * s for t, s in zip(steps, geom.strides)))
    return xp.lib.stride_tricks.as_strided(padded, shape=shape, strides=strides)


def padded_windows(ctx, x, geom: Geometry, value=0):
    """``x`` padded exactly as far as the windows reach."""
    return pad_spatial(ctx, x, geom.head, geom.fit_tail(x.shape[2:]), value)


def clipped_offsets(geom: Geometry, count: Sequence[int], size: Sequence[int]):
    """For each kernel offset ``k``, where its window elements fall inside an unpadded array of
    spatial ``size``: yields ``(k, window_index, array_index)``, the box of ``count`` windows
    that read offset ``k`` inside the array and the (strided) elements they read there.
    Windows start at ``o * stride - head``; elements in the padding are never visited, so
    nothing needs a padded copy."""
    per_axis = []
    for i, (n, total) in enumerate(zip(size, count)):
        s, entries = geom.strides[i], []
        for j in range(geom.kernel[i]):
            shift = j * geom.dilations[i] - geom.head[i]
            low, high = max(0, -(shift // s)), min(total, (n - 1 - shift) // s + 1)
            if low < high:
                entries.append((j, slice(low, high),
                                slice(low * s + shift, (high - 1) * s + shift + 1, s)))
        per_axis.append(entries)
    every = (slice(None), slice(None))
    for combo in itertools.product(*per_axis):
        yield (tuple(c[0] for c in combo), every + tuple(c[1] for c in combo),
               every + tuple(c[2] for c in combo))


def _covers(index: tuple[slice, ...], shape: Sequence[int]) -> bool:
    """Whether a window box from ``clipped_offsets`` spans the whole (N, C, *spatial) output."""
    return all(sl.start == 0 and sl.stop == n for sl, n in zip(index[2:], shape[2:]))


def reduce_windows(xp, x, geom: Geometry, y, combine, empty) -> None:
    """``y`` = ``combine`` of every window's elements inside ``x`` (padding skipped), one
    strided elementwise op per kernel offset. An offset whose elements cover every window
    initialises ``y``; otherwise ``y`` starts as ``empty``."""
    offsets = list(clipped_offsets(geom, y.shape[2:], x.shape[2:]))
    first = next((i for i, (_, out, _) in enumerate(offsets) if _covers(out, y.shape)), None)
    if first is None:
        y[...] = empty
    else:
        y[...] = x[offsets.pop(first)[2]]
    for _, out, inp in offsets:
        combine(y[out], x[inp], out=y[out])


def lowest(dtype) -> float | int:
    """The padding value that never wins a max."""
    dtype = np.dtype(dtype)
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def window_argmax(xp, padded, geom: Geometry, y):
    """Writes each window's maximum into ``y`` and returns the offset (row-major over the
    kernel) of its first maximum, as onnx.reference's MaxPool scans it."""
    rank = len(geom.kernel)
    order = (0, 1) + tuple(range(2 + rank, 2 + 2 * rank)) + tuple(range(2, 2 + rank))
    cols = window_view(xp, padded, geom).transpose(order).reshape(
        y.shape + (math.prod(geom.kernel),))
    arg = xp.argmax(cols, axis=-1)
    y[...] = xp.take_along_axis(cols, arg[..., None], axis=-1)[..., 0]
    return arg


def input_index(xp, arg, geom: Geometry, in_shape: Sequence[int], column_major: bool = False):
    """Flat indices into an (N, C, *in_shape[2:]) input of the window elements at offsets
    ``arg``; -1 where the element is padding. ``column_major`` orders the spatial axes as
    MaxPool's storage_order=1 does."""
    spatial = tuple(in_shape[2:])
    rank = len(spatial)
    offsets, rem = [], arg
    for size in reversed(geom.kernel):
        offsets.append(rem % size)
        rem = rem // size
    offsets.reverse()
    flat = xp.zeros(arg.shape, np.int64)
    valid = xp.ones(arg.shape, bool)
    axes = range(rank - 1, -1, -1) if column_major else range(rank)
    for i in axes:
        shape = [1] * arg.ndim
        shape[2 + i] = geom.out[i]
        start = xp.arange(geom.out[i], dtype=np.int64).reshape(shape) * geom.strides[i]
        pos = start + offsets[i] * geom.dilations[i] - geom.head[i]
        valid &= (pos >= 0) & (pos < spatial[i])
        flat = flat * spatial[i] + pos
    channel = xp.arange(in_shape[0] * in_shape[1], dtype=np.int64).reshape(
        (in_shape[0], in_shape[1]) + (1,) * rank)
    return xp.where(valid, flat + channel * math.prod(spatial), -1)
