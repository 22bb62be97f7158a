"""Ops whose output shapes depend on input values: NonZero, Unique, Compress and
NonMaxSuppression (the detection op beside RoiAlign and MaxRoiPool).

All four are ``dynamic_outputs`` ops (``portable/ops/registry.py``): while planning, their type
rules give None for the counts they cannot know, and exact shapes when the values they depend on
are known (a constant condition, a constant input), so a graph that reads only constants folds
or plans them like any other op. Otherwise the executor runs them between planned segments
(``portable/executor/segments.py``): their kernels are called with None for the outputs the
planner could not place and return the arrays they made (``portable.backend.output_array``).

The host-side selection logic that every backend shares (NMS's greedy suppression, Unique's
first-occurrence order) lives here, over NumPy, so the NumPy and OpenCL kernels give the same
answers.
"""
from __future__ import annotations

import numpy as np

from portable.ir.graph import TensorType
from portable.ops.registry import Attr, declare
from portable.ops.rules import dtypes_of, normalize_axis

# -- NonZero --------------------------------------------------------------------------------


def _nonzero_infer(ctx):
    count = int(np.count_nonzero(ctx.value(0))) if ctx.known(0) else None
    return [TensorType((ctx.type(0).rank, count), np.int64)]


def nonzero_indices(x: np.ndarray) -> np.ndarray:
    """ONNX NonZero of a host array: (rank, count) int64 indices in row-major order (a
    scalar has no axes: (0, 1) when it is non-zero, (0, 0) otherwise)."""
    if x.ndim == 0:
        return np.zeros((0, int(bool(x))), np.int64)
    return np.asarray(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


declare("NonZero", inputs=("X",), outputs=("Y",), infer=_nonzero_infer, onnx_since=13,
        dynamic_outputs=True, dtype_rule=dtypes_of(np.int64, inputs=()),
        doc="Indices of the non-zero elements, one row per axis: (rank, count).")


# -- Unique ---------------------------------------------------------------------------------


def _unique_infer(ctx):
    x = ctx.type(0)
    axis = ctx.attrs["axis"]
    if axis is not None:
        axis = normalize_axis(ctx, axis, x.rank)
    count = None
    if ctx.known(0):
        count = len(unique(np.asarray(ctx.value(0)), axis, 1)[3])
    if axis is None:
        y = TensorType((count,), x.dtype)
        inverse = x.size if x.is_static else None
    else:
        y = TensorType(x.shape[:axis] + (count,) + x.shape[axis + 1:], x.dtype)
        inverse = x.shape[axis]
    index = TensorType((count,), np.int64)
    return [y, index, TensorType((inverse,), np.int64), index]


def unique(x: np.ndarray, axis: int | None, sorted_: int):
    """ONNX Unique of a host array: (values, first indices, inverse indices, counts), in
    ascending order when ``sorted_`` else in order of first occurrence; along ``axis`` the
    unique slices."""
    flat = x.reshape(-1) if axis is None else x
    axis = None if axis is None else axis % x.ndim
    values, first, inverse, counts = np.unique(flat, return_index=True, return_inverse=True,
                                               return_counts=True, axis=axis)
    inverse = np.asarray(inverse).reshape(-1)
    if not sorted_:  # renumber the unique values by first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        first, counts, inverse = first[order], counts[order], rank[inverse]
        values = np.take(flat, first, axis=0 if axis is None else axis)
    return (values, first.astype(np.int64), inverse.astype(np.int64),
            counts.astype(np.int64))


declare("Unique", inputs=("X",), outputs=("Y", "indices?", "inverse_indices?", "counts?"),
        infer=_unique_infer, onnx_since=11, dynamic_outputs=True,
        attrs={"axis": Attr("int", None), "sorted": Attr("int", 1)},
        dtype_rule=dtypes_of("data", np.int64, np.int64, np.int64),
        doc="The unique elements (or slices along axis), with first indices, inverse indices "
            "and counts.")


# -- Compress -------------------------------------------------------------------------------


def _compress_infer(ctx):
    x, condition = ctx.type(0), ctx.type(1)
    if condition.rank != 1 or condition.dtype != np.bool_:
        ctx.fail(f"condition must be a 1-D bool tensor, got {condition!r}")
    axis = ctx.attrs["axis"]
    length = (x.size if x.is_static else None) if axis is None else \
        x.shape[normalize_axis(ctx, axis, x.rank)]
    if condition.shape[0] is not None and length is not None and condition.shape[0] > length:
        ctx.fail(f"condition has {condition.shape[0]} entries, more than the {length} "
                 f"{'elements' if axis is None else f'slices along axis {axis}'} it selects from")
    count = None
    if ctx.known(1):
        count = int(np.count_nonzero(np.asarray(ctx.value(1))[:length]))
    if axis is None:
        return [TensorType((count,), x.dtype)]
    axis = normalize_axis(ctx, axis, x.rank)
    return [TensorType(x.shape[:axis] + (count,) + x.shape[axis + 1:], x.dtype)]


def compress_positions(condition: np.ndarray, length: int) -> np.ndarray:
    """The selected positions (int64) of a Compress condition over ``length`` slices: entries
    past the condition's end are not selected."""
    return np.flatnonzero(np.asarray(condition, bool).reshape(-1)[:length]).astype(np.int64)


def _compress_grad(g, dys):
    """Each selected slice takes its gradient back (a scatter into zeros): x's slices are
    Gathered by the selected positions, so the gradient is their ScatterND."""
    dy = dys[0]
    if dy is None:
        return [None, None]
    x, condition = g.inputs[0], g.inputs[1]
    axis, shape = g.attrs["axis"], tuple(g.shape(x))
    if axis is None:  # the flattened input's elements
        front, grad = (int(np.prod(shape, dtype=np.int64)),), dy
    else:  # the selected axis first, so that ScatterND writes whole slices
        perm = _to_front(axis, len(shape))
        front, grad = tuple(shape[p] for p in perm), g.emit("Transpose", dy, perm=perm)
    zeros = g.emit("ConstantOfShape", g.const(np.asarray(front, np.int64)),
                   value=np.zeros(1, g.dtype(x)))
    index = g.emit("Transpose", g.emit("NonZero", condition), perm=[1, 0])  # (count, 1)
    scattered = g.emit("ScatterND", zeros, index, grad)
    if axis is None:
        return [g.emit("Reshape", scattered, g.const(np.asarray(shape, np.int64))), None]
    return [g.emit("Transpose", scattered, perm=_from_front(axis, len(shape))), None]


def _to_front(axis: int, rank: int) -> list[int]:
    axis %= rank
    return [axis] + [d for d in range(rank) if d != axis]


def _from_front(axis: int, rank: int) -> list[int]:
    return [int(d) for d in np.argsort(_to_front(axis, rank))]


declare("Compress", inputs=("input", "condition"), outputs=("output",), infer=_compress_infer,
        onnx_since=11, dynamic_outputs=True, attrs={"axis": Attr("int", None)},
        nondiff_inputs=(1,), grad=_compress_grad, dtype_rule=dtypes_of("data", inputs=(0,)),
        doc="The slices along axis (elements of the flattened input) where condition is true.")


# -- NonMaxSuppression ----------------------------------------------------------------------


def _scalar(value, default):
    """An optional scalar input of NMS (absent, or an empty tensor: the default)."""
    if value is None:
        return default
    flat = np.asarray(value).reshape(-1)
    return flat[0].item() if flat.size else default


def _nms_infer(ctx):
    boxes, scores = ctx.type(0), ctx.type(1)
    if boxes.rank != 3 or boxes.shape[2] not in (4, None):
        ctx.fail(f"boxes must be (batches, boxes, 4), got {boxes!r}")
    if scores.rank != 3:
        ctx.fail(f"scores must be (batches, classes, boxes), got {scores!r}")
    for b, s, what in ((boxes.shape[0], scores.shape[0], "batches"),
                       (boxes.shape[1], scores.shape[2], "boxes")):
        if b is not None and s is not None and b != s:
            ctx.fail(f"boxes and scores disagree on the number of {what}: {b} vs {s}")
    if ctx.attrs["center_point_box"] not in (0, 1):
        ctx.fail(f"center_point_box must be 0 or 1, got {ctx.attrs['center_point_box']}")
    count = None
    present = [i for i in range(len(ctx)) if ctx.has(i)]
    if all(ctx.known(i) for i in present):
        values = [np.asarray(ctx.value(i)) if ctx.has(i) else None for i in range(5)]
        count = len(non_max_suppression(*values, ctx.attrs["center_point_box"]))
    return [TensorType((count, 3), np.int64)]


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """(n, 4) boxes as (y_min, x_min, y_max, x_max), whichever corners or centre form."""
    boxes = boxes.astype(np.float64)
    if center_point_box:
        x, y, w, h = boxes.T
        return np.stack([y - h / 2, x - w / 2, y + h / 2, x + w / 2], axis=1)
    y1, x1, y2, x2 = boxes.T
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2),
                     np.maximum(x1, x2)], axis=1)


def _suppressed(corners: np.ndarray, chosen: list[int], candidate: int,
                iou_threshold: float) -> bool:
    """Whether ``candidate`` overlaps a chosen box by more than the IoU threshold (an empty
    intersection, or a box of zero area, never suppresses)."""
    if not chosen:
        return False
    a, b = corners[candidate], corners[chosen]
    height = np.minimum(a[2], b[:, 2]) - np.maximum(a[0], b[:, 0])
    width = np.minimum(a[3], b[:, 3]) - np.maximum(a[1], b[:, 1])
    inter = np.where((height > 0) & (width > 0), height * width, 0.0)
    area_a = (a[2] - a[0]) * (a[3] - a[1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a + area_b - inter
    valid = (inter > 0) & (area_a > 0) & (area_b > 0) & (union > 0)
    iou = np.where(valid, inter / np.where(union > 0, union, 1.0), 0.0)
    return bool(np.any(valid & (iou > iou_threshold)))


def non_max_suppression(boxes: np.ndarray, scores: np.ndarray, max_per_class=None,
                        iou_threshold=None, score_threshold=None,
                        center_point_box: int = 0) -> np.ndarray:
    """ONNX NonMaxSuppression on host arrays: (selected, 3) int64 rows (batch, class, box).

    Per batch and class, boxes are taken greedily by descending score (ties: the lower box
    index first), skipping those overlapping a chosen one by IoU > the threshold, at most
    ``max_per_class`` of them (absent: none); with a score threshold only boxes scoring above
    it are candidates."""
    limit = max(int(_scalar(max_per_class, 0)), 0)
    iou = float(_scalar(iou_threshold, 0.0))
    floor = _scalar(score_threshold, None)
    rows: list[tuple[int, int, int]] = []
    if limit == 0:
        return np.zeros((0, 3), np.int64)
    for batch in range(boxes.shape[0]):
        corners = _corners(boxes[batch], center_point_box)
        for cls in range(scores.shape[1]):
            score = scores[batch, cls]
            candidates = np.arange(score.size) if floor is None else \
                np.flatnonzero(score > floor)
            # descending score, ties by ascending index: a stable sort of the negated scores
            order = candidates[np.argsort(-score[candidates].astype(np.float64), kind="stable")]
            chosen: list[int] = []
            for box in order.tolist():
                if len(chosen) >= limit:
                    break
                if not _suppressed(corners, chosen, box, iou):
                    chosen.append(box)
                    rows.append((batch, cls, box))
    return np.asarray(rows, np.int64).reshape(-1, 3)


declare("NonMaxSuppression",
        inputs=("boxes", "scores", "max_output_boxes_per_class?", "iou_threshold?",
                "score_threshold?"),
        outputs=("selected_indices",), infer=_nms_infer, onnx_since=11, dynamic_outputs=True,
        attrs={"center_point_box": Attr("int", 0)},
        dtype_rule=dtypes_of(np.int64, inputs=(0, 1)),
        doc="Boxes kept per batch and class by greedy IoU suppression: (selected, 3) rows of "
            "(batch, class, box).")
