"""Concat without a copy: each input of a Concat computed straight into its slice of the output.

A Concat along an axis whose leading dimensions are all 1 (the channels of a batch-1 NCHW
tensor, or axis 0) lays its inputs one after another in memory, so its output's storage can
hold each input at a byte offset, and the producers can write there instead of into buffers
of their own that the Concat then copies. At batch 1 that is every Concat of SqueezeNet's
fire modules, Inception's branches and DenseNet's dense blocks, and the memory of the copy goes
too: input and output are no longer alive side by side.

The planner (``portable.passes.plan_memory``) asks ``concat_slices`` which values go where
before its scan: a value with a spot lives in the storage of its outermost Concat's output at
that offset. A Concat is taken only when every input can go in place, so that its step has
nothing left to do (the executor then calls no kernel for it); an input can when:

- a step computes it (not a graph input, a constant or a view of another value), in a
  numeric type that is the Concat's, and it is not a state input or its update;
- it is read by this Concat once, and by no other Concat taken (a value has one place);
- its offset is a multiple of the plan's alignment (kernels and devices may assume it).

A Concat's output may be an input of a later Concat (DenseNet: each layer concatenates the one
before's output with its new features): the later one is decided first, and the earlier one's
inputs are placed inside its slice, so a whole dense block is written into one buffer.

Example:
    >>> slices = concat_slices(nodes, types, views={"Reshape"}, excluded=set(), alignment=64)
    >>> slices.spots["branch_2"]        # doctest: +SKIP
    ('concat_out', 802816)
"""
from __future__ import annotations

import math
from typing import Collection, Mapping, NamedTuple

from portable.dtypes import STRING
from portable.ir.graph import Node, TensorType

__all__ = ["ConcatSlices", "concat_slices"]


class ConcatSlices(NamedTuple):
    """Where the inputs of the Concats taken live.

    Attributes:
        spots: value -> (the outermost taken Concat output holding it, byte offset in it);
            each taken Concat's output is here too (at offset 0 of itself when outermost).
        steps: positions (in the planned steps) of the Concats taken: nothing to do at run time.
    """

    spots: dict[str, tuple[str, int]]
    steps: frozenset[int]


def concat_slices(nodes: list[Node], types: Mapping[str, TensorType], *,
                  views: Collection[str], excluded: Collection[str],
                  alignment: int) -> ConcatSlices:
    """The spots of the values that go straight into a Concat's output (see the module).

    Args:
        nodes: the steps that run, in order.
        types: every value's inferred type.
        views: op names whose output is a view of their first input.
        excluded: values that must keep a storage of their own (state inputs and updates).
        alignment: every offset given is a multiple of this many bytes.
    """
    producer: dict[str, str] = {}
    for node in nodes:
        for name in node.outputs:
            if name:
                producer[name] = node.op
    spots: dict[str, tuple[str, int]] = {}
    taken: list[int] = []
    for position in range(len(nodes) - 1, -1, -1):  # the outer Concats first
        node = nodes[position]
        if node.op != "Concat" or not node.outputs or not node.outputs[0]:
            continue
        out = node.outputs[0]
        top, base = spots.get(out, (out, 0))
        offsets = _input_offsets(node, types, producer, views, excluded, spots)
        if offsets is None or any((base + at) % alignment for at in offsets):
            continue
        spots[out] = (top, base)
        for name, at in zip(node.inputs, offsets):
            spots[name] = (top, base + at)
        taken.append(position)
    return ConcatSlices(spots, frozenset(taken))


def _input_offsets(node: Node, types: Mapping[str, TensorType], producer: Mapping[str, str],
                   views: Collection[str], excluded: Collection[str],
                   spots: Mapping[str, tuple[str, int]]) -> list[int] | None:
    """The byte offset of each input of ``node`` (a Concat) in its output, or None when the
    inputs are not consecutive ranges of it or one of them cannot go in place."""
    out = node.outputs[0]
    out_type = types.get(out)
    if out_type is None or not out_type.is_static or out_type.dtype == STRING:
        return None
    rank, axis = len(out_type.shape), node.attrs.get("axis")
    if out in excluded or not isinstance(axis, int) or not -rank <= axis < rank:
        return None
    if math.prod(out_type.shape[:axis % rank]) != 1:
        return None  # (the inputs interleave along the leading dimensions)
    if not node.inputs or len(set(node.inputs)) != len(node.inputs):
        return None
    offsets, at = [], 0
    for name in node.inputs:
        type_ = types.get(name)
        if (not name or name in spots or name in excluded or type_ is None
                or producer.get(name) in (None, *views) or type_.dtype != out_type.dtype
                or not type_.is_static):
            return None
        nbytes = math.prod(type_.shape) * type_.dtype.itemsize
        if not nbytes:
            return None
        offsets.append(at)
        at += nbytes
    if at != math.prod(out_type.shape) * out_type.dtype.itemsize:
        return None  # (the types disagree: leave it to the kernel to say so)
    return offsets
