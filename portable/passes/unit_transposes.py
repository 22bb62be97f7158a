"""Transposes that move only size-1 axes become Reshapes (``UNIT_TRANSPOSES``).

A Transpose whose permutation keeps the axes longer than 1 in their order moves no element:
its output holds the input's values in the same memory order. A Reshape to the output shape
computes the same tensor, and a Reshape is a view, which the memory planner aliases to its
input: no kernel runs and nothing is copied. PyTorch's exported attention layers (sequence
first) write such transposes at batch 1: ``(1, seq, d) -> (seq, 1, d)`` before the QKV
projection and back after the output projection.

The rule needs the input's shape known (the Reshape's target is a constant) and leaves
tensors with no elements alone (a 0 in a Reshape target means "copy the input's dim").

Example:
    >>> graph = rewrite(graph, UNIT_TRANSPOSES)  # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from portable.ir.graph import Node
from portable.passes.rewriter import Match, Pattern, Rewrite, Rule


def moves_only_unit_axes(shape: tuple[int, ...], perm: tuple[int, ...]) -> bool:
    """Whether transposing ``shape`` by ``perm`` keeps every axis longer than 1 in order."""
    longer = [axis for axis in perm if shape[axis] != 1]
    return longer == sorted(longer)


def _as_reshape(m: Match) -> Rewrite | None:
    node = m["transpose"]
    type_ = m.type(node.inputs[0])
    if not type_.is_static or 0 in type_.shape:
        return None
    shape = type_.shape
    perm = node.attrs.get("perm")
    perm = tuple(reversed(range(len(shape)))) if perm is None else tuple(int(a) for a in perm)
    if sorted(perm) != list(range(len(shape))) or not moves_only_unit_axes(shape, perm):
        return None
    target = m.fresh(f"{node.name}/shape")
    reshape = Node("Reshape", (node.inputs[0], target), (node.outputs[0],), {}, node.name)
    return Rewrite([reshape], {target: np.array([shape[a] for a in perm], dtype=np.int64)})


UNIT_TRANSPOSES = (
    Rule("unit-transpose-as-reshape", Pattern("Transpose", name="transpose"), _as_reshape),
)
