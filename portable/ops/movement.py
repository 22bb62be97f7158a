"""Movement ops: reshaping, transposing, joining, slicing, gathering, padding, shape queries.

Inputs that carry shapes, axes, pads or slice bounds must be known while planning (constants or
values folded from static shapes): output shapes depend on them. The helpers ``slice_bounds``,
``split_sizes``, ``pad_widths``, ``shape_range``, ``constant_value`` and ``range_values`` hold
the ONNX semantics once; type rules, gradient rules and kernels all call them.
"""
from __future__ import annotations

import functools
from typing import Any, Sequence

import numpy as np

from portable.ir.graph import TensorType
from portable.ops.registry import Attr, declare
from portable.ops.rules import (broadcast_shapes, dtypes_of, normalize_axes, normalize_axis,
                                same_dtype)

INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
PAD_MODES = ("constant", "reflect", "edge", "wrap")


def ints(values: Any) -> list[int]:
    """A host array (or sequence) of integers as a flat list of Python ints (no overflow)."""
    array = values if isinstance(values, np.ndarray) else np.asarray(values)
    flat = array.ravel().tolist()  # Python ints already for integer arrays (kernels' hot path)
    return flat if array.dtype.kind in "iu" else [int(v) for v in flat]


def _const_ints(g, values: Sequence[int]):
    return g.const(np.asarray(values, np.int64))


def _reshape(g, x, shape: Sequence[int]):
    return g.emit("Reshape", x, _const_ints(g, shape))


def _zeros(g, shape: Sequence[int], dtype: np.dtype):
    return g.emit("ConstantOfShape", _const_ints(g, shape), value=np.zeros(1, dtype))


def _value_or_none(g, handle):
    return None if handle is None else g.value(handle)


def _reshape_back_grad(g, dys):
    """Gradient of every pure reshape (Reshape, Flatten, Squeeze, Unsqueeze)."""
    return [_reshape(g, dys[0], g.shape(g.inputs[0]))] + [None] * (len(g.inputs) - 1)


def _checked(ctx, fn, *args):
    """Call a semantics helper, turning its ValueError into a ShapeError naming the node."""
    try:
        return fn(*args)
    except ValueError as exc:
        ctx.fail(str(exc))


# -- reshapes (views) ------------------------------------------------------------------------


def _reshape_infer(ctx):
    shape = ints(ctx.value(1))
    src = ctx.shape(0)
    allowzero = ctx.attrs["allowzero"]
    out = []
    for i, d in enumerate(shape):
        if d == 0 and not allowzero:
            if i >= len(src):
                ctx.fail(f"shape {shape}: 0 at axis {i} copies an axis the input lacks")
            d = src[i]
        out.append(d)
    total = int(np.prod(src, dtype=np.int64))
    if out.count(-1) > 1:
        ctx.fail(f"shape {shape} has more than one -1")
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        if known == 0 or total % known:
            ctx.fail(f"cannot reshape {src} to {shape}")
        out[out.index(-1)] = total // known
    if int(np.prod(out, dtype=np.int64)) != total:
        ctx.fail(f"cannot reshape {src} ({total} elements) to {tuple(out)}")
    return [TensorType(out, ctx.dtype(0))]


declare("Reshape", inputs=("data", "shape"), outputs=("reshaped",), infer=_reshape_infer,
        attrs={"allowzero": Attr("int", 0)}, onnx_since=25, grad=_reshape_back_grad,
        view=True, nondiff_inputs=(1,))


def _flatten_infer(ctx):
    shape = ctx.shape(0)
    axis = ctx.attrs["axis"]
    if not -len(shape) <= axis <= len(shape):
        ctx.fail(f"axis {axis} is out of range [-{len(shape)}, {len(shape)}]")
    axis += len(shape) if axis < 0 else 0
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    return [TensorType((outer, int(np.prod(shape[axis:], dtype=np.int64))), ctx.dtype(0))]


declare("Flatten", inputs=("input",), outputs=("output",), infer=_flatten_infer,
        attrs={"axis": Attr("int", 1)}, onnx_since=25, grad=_reshape_back_grad, view=True)


def _squeeze_infer(ctx):
    shape = ctx.shape(0)
    if ctx.has(1):
        axes = normalize_axes(ctx, ints(ctx.value(1)), len(shape))
        wide = [a for a in axes if shape[a] != 1]
        if wide:
            ctx.fail(f"cannot squeeze axes {wide} of shape {shape}: their size is not 1")
    else:
        axes = [i for i, d in enumerate(shape) if d == 1]
    return [TensorType([d for i, d in enumerate(shape) if i not in axes], ctx.dtype(0))]


declare("Squeeze", inputs=("data", "axes?"), outputs=("squeezed",), infer=_squeeze_infer,
        onnx_since=25, grad=_reshape_back_grad, view=True, nondiff_inputs=(1,))


def _unsqueeze_infer(ctx):
    shape = ctx.shape(0)
    values = ints(ctx.value(1))
    axes = normalize_axes(ctx, values, len(shape) + len(values))
    dims = iter(shape)
    out = [1 if i in axes else next(dims) for i in range(len(shape) + len(values))]
    return [TensorType(out, ctx.dtype(0))]


declare("Unsqueeze", inputs=("data", "axes"), outputs=("expanded",), infer=_unsqueeze_infer,
        onnx_since=25, grad=_reshape_back_grad, view=True, nondiff_inputs=(1,))

# -- Expand, Transpose, Tile -----------------------------------------------------------------


def _expand_infer(ctx):
    target = tuple(ints(ctx.value(1)))
    return [TensorType(broadcast_shapes(ctx, [ctx.shape(0), target]), ctx.dtype(0))]


def _expand_grad(g, dys):
    return [g.sum_to(dys[0], g.inputs[0]), None]


declare("Expand", inputs=("input", "shape"), outputs=("output",), infer=_expand_infer,
        onnx_since=13, grad=_expand_grad, nondiff_inputs=(1,))


def _transpose_infer(ctx):
    shape = ctx.shape(0)
    perm = ctx.attrs["perm"]
    perm = tuple(reversed(range(len(shape)))) if perm is None else tuple(perm)
    if sorted(perm) != list(range(len(shape))):
        ctx.fail(f"perm {perm} is not a permutation of the {len(shape)} axes")
    return [TensorType([shape[p] for p in perm], ctx.dtype(0))]


def _transpose_grad(g, dys):
    rank = len(g.shape(g.inputs[0]))
    perm = g.attrs["perm"]
    perm = list(reversed(range(rank))) if perm is None else list(perm)
    return [g.emit("Transpose", dys[0], perm=[int(i) for i in np.argsort(perm)])]


declare("Transpose", inputs=("data",), outputs=("transposed",), infer=_transpose_infer,
        attrs={"perm": Attr("ints", None)}, onnx_since=25, grad=_transpose_grad)


def _tile_infer(ctx):
    shape = ctx.shape(0)
    repeats = ints(ctx.value(1))
    if len(repeats) != len(shape) or any(r < 0 for r in repeats):
        ctx.fail(f"repeats {repeats} must hold one non-negative count per axis of {shape}")
    return [TensorType([d * r for d, r in zip(shape, repeats)], ctx.dtype(0))]


def _tile_grad(g, dys):
    x = g.inputs[0]
    shape = g.shape(x)
    repeats = ints(g.value(g.inputs[1]))
    if all(r == 1 for r in repeats):
        return [dys[0], None]
    # Output axis k holds repeats[k] copies of x's axis k: split it in two and sum the copies.
    split = [v for r, d in zip(repeats, shape) for v in (r, d)]
    copies = _const_ints(g, range(0, len(split), 2))
    return [g.emit("ReduceSum", _reshape(g, dys[0], split), copies, keepdims=0), None]


declare("Tile", inputs=("input", "repeats"), outputs=("output",), infer=_tile_infer,
        onnx_since=13, grad=_tile_grad, nondiff_inputs=(1,))

# -- Concat and Split ------------------------------------------------------------------------


def _concat_infer(ctx):
    present = [i for i in range(len(ctx)) if ctx.has(i)]
    shapes = [ctx.shape(i) for i in present]
    if not shapes or not shapes[0]:
        ctx.fail("Concat needs at least one input, of rank >= 1")
    rank = len(shapes[0])
    axis = normalize_axis(ctx, ctx.attrs["axis"], rank)
    for s in shapes:
        if len(s) != rank or any(a != b for k, (a, b) in enumerate(zip(s, shapes[0]))
                                 if k != axis):
            ctx.fail(f"shapes {shapes} differ outside axis {axis}")
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return [TensorType(out, same_dtype(ctx, present))]


def _concat_grad(g, dys):
    axis = g.attrs["axis"] % len(g.shape(g.inputs[0]))
    sizes = [g.shape(x)[axis] for x in g.inputs]
    if len(sizes) == 1:
        return [dys[0]]
    return list(g.emit("Split", dys[0], _const_ints(g, sizes), num_outputs=len(sizes),
                       axis=axis))


declare("Concat", inputs=("inputs*",), outputs=("concat_result",), infer=_concat_infer,
        attrs={"axis": Attr("int")}, onnx_since=13, grad=_concat_grad)


def split_sizes(dim: int, split: Sequence[int] | None, num_outputs: int | None,
                count: int) -> list[int]:
    """Sizes of Split's ``count`` outputs along an axis of size ``dim``: the ``split`` input, or
    equal parts (the last one smaller when ``dim`` does not divide). Raises ValueError."""
    if split is not None:
        if num_outputs is not None:
            raise ValueError("give either the 'split' input or the num_outputs attribute")
        if len(split) != count or sum(split) != dim or min(split, default=0) < 0:
            raise ValueError(f"split {list(split)} must be {count} non-negative sizes "
                             f"summing to {dim}")
        return list(split)
    parts = count if num_outputs is None else num_outputs
    if parts != count or parts < 1:
        raise ValueError(f"num_outputs={num_outputs} but the node has {count} outputs")
    chunk = -(-dim // parts)
    sizes = [chunk] * (parts - 1) + [dim - chunk * (parts - 1)]
    if sizes[-1] < 0:
        raise ValueError(f"cannot split size {dim} into {parts} parts of {chunk}")
    return sizes


def _split_layout(shape, attrs, split, count):
    """(axis, sizes) of a Split node. Raises ValueError."""
    axis = attrs["axis"]
    if not -len(shape) <= axis < len(shape):
        raise ValueError(f"axis {axis} is out of range for rank {len(shape)}")
    axis %= len(shape)
    return axis, split_sizes(shape[axis], split, attrs["num_outputs"], count)


def _split_infer(ctx):
    shape = ctx.shape(0)
    split = ints(ctx.value(1)) if ctx.has(1) else None
    axis, sizes = _checked(ctx, _split_layout, shape, ctx.attrs, split, len(ctx.node.outputs))
    return [TensorType(shape[:axis] + (s,) + shape[axis + 1:], ctx.dtype(0)) for s in sizes]


def _split_grad(g, dys):
    x = g.inputs[0]
    shape = g.shape(x)
    split = g.inputs[1] if len(g.inputs) > 1 else None
    split = None if split is None else ints(g.value(split))
    axis, sizes = _split_layout(shape, g.attrs, split, len(dys))
    parts = [dy if dy is not None else
             _zeros(g, shape[:axis] + (size,) + shape[axis + 1:], g.dtype(x))
             for dy, size in zip(dys, sizes)]
    dx = parts[0] if len(parts) == 1 else g.emit("Concat", *parts, axis=axis)
    return [dx] + [None] * (len(g.inputs) - 1)


declare("Split", inputs=("input", "split?"), outputs=("outputs*",), infer=_split_infer,
        attrs={"axis": Attr("int", 0), "num_outputs": Attr("int", None)}, onnx_since=18,
        grad=_split_grad, nondiff_inputs=(1,))

# -- Slice -----------------------------------------------------------------------------------


def slice_bounds(shape: Sequence[int], starts: Any, ends: Any, axes: Any = None,
                 steps: Any = None) -> tuple[tuple[int, int, int], ...]:
    """Per axis of ``shape``, the ``(start, stop, step)`` that Slice reads, with negative
    indices resolved and clamped as ONNX specifies (stop -1 means "before index 0" for negative
    steps). Raises ValueError on a malformed input.

    A negative step from a start before index 0 (``start + dim < 0``) clamps the start to 0 as
    the ONNX spec and onnxruntime do; onnx.reference, slicing with NumPy, returns nothing."""
    return _slice_bounds(tuple(shape), tuple(ints(starts)), tuple(ints(ends)),
                         None if axes is None else tuple(ints(axes)),
                         None if steps is None else tuple(ints(steps)))


@functools.lru_cache(maxsize=1024)
def _slice_bounds(shape, starts, ends, axes, steps):
    # Cached: kernels call this on every run with the same few constant inputs.
    rank = len(shape)
    axes = tuple(range(len(starts))) if axes is None else axes
    steps = (1,) * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ValueError(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} "
                         f"differ in length")
    bounds = [(0, d, 1) for d in shape]
    seen = set()
    for start, stop, axis, step in zip(starts, ends, axes, steps):
        if not -rank <= axis < rank or axis % rank in seen:
            raise ValueError(f"axes {axes} repeat an axis or leave rank {rank}")
        axis %= rank
        seen.add(axis)
        if step == 0:
            raise ValueError(f"steps {steps} hold a 0")
        dim = shape[axis]
        start += dim if start < 0 else 0
        stop += dim if stop < 0 else 0
        low, high = (0, dim) if step > 0 else (-1, dim - 1)
        bounds[axis] = (min(max(start, max(low, 0)), high), min(max(stop, low), high), step)
    return tuple(bounds)


def slice_length(start: int, stop: int, step: int) -> int:
    return max(0, -(-(stop - start) // step))


@functools.lru_cache(maxsize=1024)
def slices_of(bounds: tuple[tuple[int, int, int], ...]) -> tuple[slice, ...]:
    """Python slices for ``slice_bounds`` (a stop of -1 becomes None: before index 0)."""
    return tuple(slice(start, stop if stop >= 0 else None, step)
                 for start, stop, step in bounds)


def _bounds_of(ctx, shape):
    values = [ctx.value(i) if ctx.has(i) else None for i in range(1, 5)]
    return _checked(ctx, slice_bounds, shape, *values)


def _slice_infer(ctx):
    bounds = _bounds_of(ctx, ctx.shape(0))
    return [TensorType([slice_length(*b) for b in bounds], ctx.dtype(0))]


def _slice_grad(g, dys):
    x = g.inputs[0]
    shape = g.shape(x)
    given = list(g.inputs[1:]) + [None] * (5 - len(g.inputs))
    bounds = slice_bounds(shape, *(_value_or_none(g, h) for h in given))
    nones = [None] * (len(g.inputs) - 1)
    if any(step != 1 for _, _, step in bounds):
        return [g.emit("portable.SliceGrad", dys[0], *g.inputs[1:], shape=list(shape))] + nones
    # Unit steps: the gradient is dy padded with zeros back to x's shape (an ONNX op).
    before = [start for start, _, _ in bounds]
    after = [d - b[0] - slice_length(*b) for d, b in zip(shape, bounds)]
    return [g.emit("Pad", dys[0], _const_ints(g, before + after))] + nones


declare("Slice", inputs=("data", "starts", "ends", "axes?", "steps?"), outputs=("output",),
        infer=_slice_infer, onnx_since=13, grad=_slice_grad, nondiff_inputs=(1, 2, 3, 4))


def _slice_grad_infer(ctx):
    shape = tuple(ctx.attrs["shape"])
    expected = tuple(slice_length(*b) for b in _bounds_of(ctx, shape))
    if ctx.shape(0) != expected:
        ctx.fail(f"dy has shape {ctx.shape(0)}, slicing {shape} gives {expected}")
    return [TensorType(shape, ctx.dtype(0))]


def _slice_grad_grad(g, dys):
    return [g.emit("Slice", dys[0], *g.inputs[1:])] + [None] * (len(g.inputs) - 1)


declare("SliceGrad", domain="portable", inputs=("dy", "starts", "ends", "axes?", "steps?"),
        outputs=("dx",), infer=_slice_grad_infer, attrs={"shape": Attr("ints")},
        grad=_slice_grad_grad, nondiff_inputs=(1, 2, 3, 4),
        doc="Zeros of `shape` with dy written where Slice (same inputs) reads.")

# -- Gather ----------------------------------------------------------------------------------


def _gathered_shape(ctx, shape, indices_type, axis):
    if indices_type.dtype not in INDEX_DTYPES:
        ctx.fail(f"indices must be int32 or int64, got {indices_type.dtype.name}")
    if not shape:
        ctx.fail("data must have rank >= 1")
    axis = normalize_axis(ctx, axis, len(shape))
    return axis, shape[:axis] + indices_type.shape + shape[axis + 1:]


def _gather_infer(ctx):
    _, shape = _gathered_shape(ctx, ctx.shape(0), ctx.type(1), ctx.attrs["axis"])
    return [TensorType(shape, ctx.dtype(0))]


def _gather_grad(g, dys):
    x, indices = g.inputs
    return [g.emit("portable.GatherGrad", dys[0], indices, axis=g.attrs["axis"],
                   shape=list(g.shape(x))), None]


declare("Gather", inputs=("data", "indices"), outputs=("output",), infer=_gather_infer,
        attrs={"axis": Attr("int", 0)}, onnx_since=13, grad=_gather_grad, nondiff_inputs=(1,))


def _gather_grad_infer(ctx):
    shape = tuple(ctx.attrs["shape"])
    _, expected = _gathered_shape(ctx, shape, ctx.type(1), ctx.attrs["axis"])
    if ctx.shape(0) != expected:
        ctx.fail(f"dy has shape {ctx.shape(0)}, gathering from {shape} gives {expected}")
    return [TensorType(shape, ctx.dtype(0))]


def _gather_grad_grad(g, dys):
    return [g.emit("Gather", dys[0], g.inputs[1], axis=g.attrs["axis"]), None]


declare("GatherGrad", domain="portable", inputs=("dy", "indices"), outputs=("dx",),
        infer=_gather_grad_infer, attrs={"axis": Attr("int", 0), "shape": Attr("ints")},
        grad=_gather_grad_grad, nondiff_inputs=(1,),
        doc="Scatter-add dy into zeros of `shape` at Gather's indices (repeats accumulate).")

# -- Pad -------------------------------------------------------------------------------------


def pad_widths(shape: Sequence[int], pads: Any,
               axes: Any = None) -> tuple[tuple[int, int], ...]:
    """``(before, after)`` per axis of ``shape`` from Pad's ``pads`` and ``axes`` inputs.
    Raises ValueError on a malformed input."""
    return _pad_widths(len(shape), tuple(ints(pads)), None if axes is None else tuple(ints(axes)))


@functools.lru_cache(maxsize=1024)
def _pad_widths(rank, pads, axes):
    # Cached: kernels call this on every run with the same constant inputs.
    axes = tuple(range(rank)) if axes is None else axes
    if len(pads) != 2 * len(axes):
        raise ValueError(f"pads {list(pads)} must hold 2 values per axis of {list(axes)}")
    if any(not -rank <= a < rank for a in axes) or len({a % rank for a in axes}) < len(axes):
        raise ValueError(f"axes {list(axes)} repeat an axis or leave rank {rank}")
    widths = [(0, 0)] * rank
    for i, axis in enumerate(axes):
        widths[axis % rank] = (pads[i], pads[i + len(axes)])
    return tuple(widths)


def _pad_infer(ctx):
    shape = ctx.shape(0)
    mode = ctx.attrs["mode"]
    if mode not in PAD_MODES:
        ctx.fail(f"mode {mode!r} is not one of {PAD_MODES}")
    widths = _checked(ctx, pad_widths, shape, ctx.value(1),
                      ctx.value(3) if ctx.has(3) else None)
    out = [d + b + e for d, (b, e) in zip(shape, widths)]
    if min(out, default=0) < 0:
        ctx.fail(f"pads {widths} remove more than the input holds")
    if mode != "constant" and any(b < 0 or e < 0 or ((b or e) and d == 0)
                                  for d, (b, e) in zip(shape, widths)):
        ctx.fail(f"mode {mode!r} needs non-negative pads {widths} of non-empty axes")
    if ctx.has(2):
        if ctx.dtype(2) != ctx.dtype(0) or int(np.prod(ctx.shape(2))) != 1:
            ctx.fail("constant_value must be one value of the data's dtype")
    return [TensorType(out, ctx.dtype(0))]


def _pad_grad(g, dys):
    x = g.inputs[0]
    shape = g.shape(x)
    given = list(g.inputs) + [None] * (4 - len(g.inputs))
    widths = pad_widths(shape, g.value(given[1]), _value_or_none(g, given[3]))
    if g.attrs["mode"] != "constant":
        return [_pad_source_grad(g, dys[0], shape, widths), None, None, None][:len(g.inputs)]
    # x's gradient is the interior of dy; negative pads cropped x, so pad those parts back.
    starts = [max(b, 0) for b, _ in widths]
    kept = [d - max(-b, 0) - max(-e, 0) for d, (b, e) in zip(shape, widths)]
    inner = g.emit("Slice", dys[0], _const_ints(g, starts),
                   _const_ints(g, [s + k for s, k in zip(starts, kept)]))
    crops = [max(-b, 0) for b, _ in widths] + [max(-e, 0) for _, e in widths]
    dx = g.emit("Pad", inner, _const_ints(g, crops)) if any(crops) else inner
    dvalue = None
    if given[2] is not None and g.dtype(given[2]).kind == "f":
        # constant_value fills every output element outside the interior.
        total = g.emit("Sub", g.emit("ReduceSum", dys[0], keepdims=0),
                       g.emit("ReduceSum", inner, keepdims=0))
        dvalue = _reshape(g, total, g.shape(given[2]))
    return [dx, None, dvalue, None][:len(g.inputs)]


def _pad_source_grad(g, dy, shape, widths):
    """reflect/edge/wrap padding along one axis is a Gather of the source indices that
    ``numpy.pad`` yields for ``arange``, so the gradient is one GatherGrad per padded axis."""
    current = list(g.shape(dy))
    for axis, (before, after) in enumerate(widths):
        if before or after:
            index = np.pad(np.arange(shape[axis], dtype=np.int64), (before, after),
                           mode=g.attrs["mode"])
            current[axis] = shape[axis]
            dy = g.emit("portable.GatherGrad", dy, g.const(index), axis=axis,
                        shape=list(current))
    return dy


declare("Pad", inputs=("data", "pads", "constant_value?", "axes?"), outputs=("output",),
        infer=_pad_infer, attrs={"mode": Attr("string", "constant")}, onnx_since=25,
        grad=_pad_grad, nondiff_inputs=(1, 3))

# -- shape queries and constants -------------------------------------------------------------


def shape_range(rank: int, start: int, end: int | None) -> slice:
    """The axes Shape reports: ``start``/``end`` resolved and clamped to [0, rank]."""
    def clamp(axis):
        return min(max(axis + rank if axis < 0 else axis, 0), rank)
    return slice(clamp(start), rank if end is None else clamp(end))


def _shape_dims(ctx):
    shape = ctx.shape(0)
    return shape[shape_range(len(shape), ctx.attrs["start"], ctx.attrs["end"])]


def _shape_infer(ctx):
    return [TensorType((len(_shape_dims(ctx)),), np.int64)]


def _shape_fold(ctx):
    dims = _shape_dims(ctx)
    return [None if None in dims else np.asarray(dims, np.int64)]


declare("Shape", inputs=("data",), outputs=("shape",), infer=_shape_infer, fold=_shape_fold,
        attrs={"start": Attr("int", 0), "end": Attr("int", None)}, onnx_since=25,
        ignored_inputs=(0,), dtype_rule=dtypes_of(np.int64, inputs=()))


def _constant_of_shape_infer(ctx):
    shape = ints(ctx.value(0))
    if any(d < 0 for d in shape):
        ctx.fail(f"shape {shape} has a negative dimension")
    value = ctx.attrs["value"]
    dtype = np.float32 if value is None else np.asarray(value).dtype
    return [TensorType(shape, dtype)]


def _constant_of_shape_fold(ctx):
    # One element seen through zero strides: a large constant-filled tensor (a mask, or a
    # model's weights filled with one value) costs no memory until a kernel needs it dense.
    if ctx.values[0] is None:
        return [None]
    value = ctx.attrs["value"]
    value = np.zeros((), np.float32) if value is None else np.asarray(value).reshape(())
    return [np.broadcast_to(value, ints(ctx.value(0)))]


declare("ConstantOfShape", inputs=("input",), outputs=("output",),
        infer=_constant_of_shape_infer, fold=_constant_of_shape_fold,
        attrs={"value": Attr("tensor", None)}, onnx_since=25,
        dtype_rule=lambda ctx: [np.float32 if ctx.attrs["value"] is None
                                else np.asarray(ctx.attrs["value"]).dtype])

# Constant's value_* attributes and the dtype ONNX gives each.
CONSTANT_DTYPES = {"value": None, "value_float": np.float32, "value_floats": np.float32,
                   "value_int": np.int64, "value_ints": np.int64, "value_string": np.str_,
                   "value_strings": np.str_}
_CONSTANT_KINDS = {"value": "tensor", "value_float": "float", "value_floats": "floats",
                   "value_int": "int", "value_ints": "ints", "value_string": "string",
                   "value_strings": "strings"}


def constant_value(attrs: dict) -> np.ndarray:
    """Constant's value from whichever single value* attribute is set. Raises ValueError."""
    given = [key for key in CONSTANT_DTYPES if attrs.get(key) is not None]
    if len(given) != 1:
        raise ValueError(f"exactly one of {sorted(CONSTANT_DTYPES)} must be set, got {given} "
                         f"(sparse_value is not supported)")
    return np.asarray(attrs[given[0]], dtype=CONSTANT_DTYPES[given[0]])


def _constant_infer(ctx):
    value = _checked(ctx, constant_value, ctx.attrs)
    return [TensorType(value.shape, value.dtype)]


def _constant_fold(ctx):
    return [constant_value(ctx.attrs)]


declare("Constant", inputs=(), outputs=("output",), infer=_constant_infer,
        fold=_constant_fold, onnx_since=25,
        attrs={key: Attr(kind, None) for key, kind in _CONSTANT_KINDS.items()},
        dtype_rule=lambda ctx: [_checked(ctx, constant_value, ctx.attrs).dtype])

# -- Range -----------------------------------------------------------------------------------

_STASH_DTYPES = {1: np.dtype(np.float32), 11: np.dtype(np.float64)}


def range_values(start: Any, limit: Any, delta: Any, stash_type: int = 1) -> np.ndarray:
    """Range's output on the host: float16 counts in ``stash_type``, other floats in float64
    (as onnx.reference does), integers exactly. Raises ValueError."""
    start, limit, delta = (np.asarray(v).reshape(()) for v in (start, limit, delta))
    if delta == 0:
        raise ValueError("delta must not be 0")
    dtype = start.dtype
    if dtype == np.float16:
        if stash_type not in _STASH_DTYPES:
            raise ValueError(f"stash_type {stash_type} is not FLOAT (1) or DOUBLE (11)")
        stash = _STASH_DTYPES[stash_type]
        return np.arange(start.astype(stash).item(), float(limit), float(delta),
                         dtype=stash).astype(dtype)
    return np.arange(start.item(), limit.item(), delta.item()).astype(dtype)


def _range_infer(ctx):
    if any(ctx.shape(i) not in ((), (1,)) for i in range(3)):
        ctx.fail("start, limit and delta must be scalars")
    dtype = same_dtype(ctx, (0, 1, 2))
    values = _checked(ctx, range_values, ctx.value(0), ctx.value(1), ctx.value(2),
                      ctx.attrs["stash_type"])
    return [TensorType(values.shape, dtype)]


declare("Range", inputs=("start", "limit", "delta"), outputs=("output",), infer=_range_infer,
        attrs={"stash_type": Attr("int", 1)}, onnx_since=27)
