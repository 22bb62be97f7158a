"""Kernels of the sequence and optional ops (``portable/ops/sequence.py``).

A sequence is a Python list of the backend's arrays, an optional None or its value. These
kernels only move arrays: they go through the backend's allocator (``empty``, ``copy_into``),
basic slicing and ``ctx.xp.reshape``, which every backend's arrays support, so the OpenCL
table registers these same functions (``backends/opencl/kernels/sequence.py``).

Every op is ``dynamic_outputs``: a kernel returns one value per output (``returned_outputs``),
and writes into an output only where the executor placed one (a SequenceAt whose elements all
have one shape). A tensor put into a sequence is copied: the sequence outlives the step, while
the tensor may be a planned buffer that a later step reuses. Sequences are never changed in
place: each op returns a new list (the arrays of the old one are shared, never written).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.backend import kernel_table, output_array, returned_outputs
from portable.errors import ShapeError
from portable.ops.sequence import position_index, sequence_map_layout, split_sizes

kernels, kernel = kernel_table()


def _copy(ctx, x: Any) -> Any:
    """A copy of ``x`` in a new array of the backend's."""
    y = ctx.backend.empty(tuple(x.shape), x.dtype)
    ctx.backend.copy_into(y, x)
    return y


def _host_int(ctx, x: Any) -> int:
    """A scalar int input (a position, or a split) read on the host."""
    return int(np.asarray(ctx.backend.to_numpy(x)).reshape(-1)[0])


def _sequence(ctx, value: Any, what: str = "input_sequence") -> list:
    """A sequence input as a list; anything else is refused naming the node."""
    if not isinstance(value, (list, tuple)):
        name = getattr(ctx.node, "name", "?")
        raise ShapeError(f"node {name!r} (op {getattr(ctx.node, 'op', '?')}): {what} must be "
                         f"a sequence (a list of tensors), got {type(value).__name__}")
    return list(value)


def _index(ctx, seq: list, position: Any, insert: bool = False) -> int:
    """The list index of a position input (absent: the end, as ONNX defines)."""
    if position is None:
        return len(seq) if insert else len(seq) - 1
    try:
        return position_index(_host_int(ctx, position), len(seq), insert=insert)
    except IndexError as exc:
        raise ShapeError(f"node {ctx.node.name!r} (op {ctx.node.op}): {exc}") from None


def _scalar(ctx, outputs: list, value: Any, dtype: Any) -> list:
    """A scalar output: written into the planned buffer, or returned as a new array."""
    array = ctx.backend.from_numpy(np.asarray(value, dtype=dtype))
    if outputs[0] is not None:
        ctx.backend.copy_into(outputs[0], array)
        return [None]
    return [array]


def _input(inputs: list, index: int) -> Any:
    return inputs[index] if len(inputs) > index else None


@kernel("SequenceEmpty")
def sequence_empty(ctx, inputs, outputs, attrs):
    return [[]]  # (an empty list has no dtype: its type, from the 'dtype' attribute, says it)


@kernel("SequenceConstruct")
def sequence_construct(ctx, inputs, outputs, attrs):
    return [[_copy(ctx, x) for x in inputs]]


@kernel("SequenceAt")
def sequence_at(ctx, inputs, outputs, attrs):
    seq = _sequence(ctx, inputs[0])
    item = seq[_index(ctx, seq, inputs[1])]
    out = output_array(ctx, outputs, 0, tuple(item.shape), item.dtype)
    ctx.backend.copy_into(out, item)
    return returned_outputs(outputs, [out])


@kernel("SequenceInsert")
def sequence_insert(ctx, inputs, outputs, attrs):
    seq = _sequence(ctx, inputs[0])
    index = _index(ctx, seq, _input(inputs, 2), insert=True)
    return [seq[:index] + [_copy(ctx, inputs[1])] + seq[index:]]


@kernel("SequenceErase")
def sequence_erase(ctx, inputs, outputs, attrs):
    seq = _sequence(ctx, inputs[0])
    if not seq:
        raise ShapeError(f"node {ctx.node.name!r} (op {ctx.node.op}): cannot erase from an "
                         f"empty sequence")
    index = _index(ctx, seq, _input(inputs, 1))
    return [seq[:index] + seq[index + 1:]]


@kernel("SequenceLength")
def sequence_length(ctx, inputs, outputs, attrs):
    return _scalar(ctx, outputs, len(_sequence(ctx, inputs[0])), np.int64)


@kernel("SplitToSequence")
def split_to_sequence(ctx, inputs, outputs, attrs):
    x = inputs[0]
    axis = attrs["axis"] % x.ndim
    split = _input(inputs, 1)
    host = None if split is None else np.asarray(ctx.backend.to_numpy(split))
    try:
        sizes = split_sizes(x.shape[axis], host)
    except ValueError as exc:
        raise ShapeError(f"node {ctx.node.name!r} (op {ctx.node.op}): {exc}") from None
    squeeze = split is None and not attrs["keepdims"]
    lead, start, pieces = (slice(None),) * axis, 0, []
    for size in sizes:
        piece = _copy(ctx, x[lead + (slice(start, start + size),)])
        if squeeze:
            piece = ctx.xp.reshape(piece, tuple(x.shape[:axis]) + tuple(x.shape[axis + 1:]))
        pieces.append(piece)
        start += size
    return [pieces]


@kernel("ConcatFromSequence")
def concat_from_sequence(ctx, inputs, outputs, attrs):
    seq = _sequence(ctx, inputs[0])
    if not seq:
        raise ShapeError(f"node {ctx.node.name!r} (op {ctx.node.op}): cannot concatenate an "
                         f"empty sequence")
    first = tuple(seq[0].shape)
    new_axis = bool(attrs["new_axis"])
    axis = attrs["axis"] % (len(first) + new_axis)
    for i, item in enumerate(seq):
        same = tuple(item.shape) == first if new_axis else (
            item.ndim == len(first) and all(a == b for k, (a, b) in
                                            enumerate(zip(item.shape, first)) if k != axis))
        if not same or item.dtype != seq[0].dtype:
            raise ShapeError(f"node {ctx.node.name!r} (op {ctx.node.op}): element {i} is "
                             f"{item.dtype}{list(item.shape)}, element 0 {seq[0].dtype}"
                             f"{list(first)}; they cannot be "
                             f"{'stacked' if new_axis else f'concatenated on axis {axis}'}")
    if new_axis:
        shape = first[:axis] + (len(seq),) + first[axis:]
    else:
        shape = first[:axis] + (sum(item.shape[axis] for item in seq),) + first[axis + 1:]
    out = output_array(ctx, outputs, 0, shape, seq[0].dtype)
    lead, start = (slice(None),) * axis, 0
    for item in seq:
        size = 1 if new_axis else item.shape[axis]
        piece = ctx.xp.reshape(item, first[:axis] + (1,) + first[axis:]) if new_axis else item
        ctx.backend.copy_into(out[lead + (slice(start, start + size),)], piece)
        start += size
    return returned_outputs(outputs, [out])


@kernel("Optional")
def optional(ctx, inputs, outputs, attrs):
    value = _input(inputs, 0)
    if value is None:
        return [None]  # (an empty optional; its type is the 'type' attribute)
    if isinstance(value, (list, tuple)):
        return [[_copy(ctx, x) for x in value]]
    return [_copy(ctx, value)]


@kernel("OptionalHasElement")
def optional_has_element(ctx, inputs, outputs, attrs):
    return _scalar(ctx, outputs, _input(inputs, 0) is not None, np.bool_)


@kernel("OptionalGetElement")
def optional_get_element(ctx, inputs, outputs, attrs):
    value = inputs[0]
    if value is None:
        raise ShapeError(f"node {ctx.node.name!r} (op {ctx.node.op}): the optional input "
                         f"{ctx.node.inputs[0]!r} is empty")
    if isinstance(value, (list, tuple)):
        return [[_copy(ctx, x) for x in value]]
    out = output_array(ctx, outputs, 0, tuple(value.shape), value.dtype)
    ctx.backend.copy_into(out, value)
    return returned_outputs(outputs, [out])


@kernel("SequenceMap")
def sequence_map(ctx, inputs, outputs, attrs):
    """Run the body once per position of the sequence inputs (additional tensors and the
    captured values are given whole each time); output j collects the body's output j."""
    from portable.executor.control_flow import body_runner, copy_value

    body = attrs["body"]
    mapped, _ = sequence_map_layout(len(inputs), body)
    lengths = {len(value) for value in inputs[:mapped] if isinstance(value, (list, tuple))}
    _sequence(ctx, inputs[0])
    if len(lengths) > 1:
        raise ShapeError(f"node {ctx.node.name!r} (op {ctx.node.op}): the sequences have "
                         f"different lengths {sorted(lengths)}")
    runner = body_runner(body, ctx.backend)
    collected: list[list] = [[] for _ in body.outputs]
    for k in range(lengths.pop()):
        values = [value[k] if i < mapped and isinstance(value, (list, tuple)) else value
                  for i, value in enumerate(inputs)]
        # (the body's results are views into its plan's arena, overwritten by the next run)
        for j, result in enumerate(runner.run(values)):
            collected[j].append(copy_value(ctx.backend, result))
    return collected
