"""Shape and dtype inference, with the constant propagation that planning needs.

Stages: (1) seed types from graph inputs and initializers, and values from initializers; (2) for
each node in order, run its op's type rule; (3) record output values that are known while
planning: from the op's fold rule (Shape needs only a type), or by evaluating the reference
kernel when every input value is known and the outputs are small. Values known this way let
rules such as Reshape's read a shape that a Shape -> Gather -> Concat chain computes.

The result is an analysis (a side table), not a change to the graph.

Example:
    >>> info = infer_types(graph)  # doctest: +SKIP
    >>> info.types["y"]            # doctest: +SKIP
    float32[2x3]
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from portable.errors import PortableError, ShapeError
from portable.ir.graph import Graph, Node, TensorType
from portable.ops import registry

# Outputs of at most this many elements are evaluated while planning when all inputs are known.
FOLD_LIMIT = 1 << 16


@dataclass
class TypeInfo:
    """Types of every value, and the values known while planning."""

    types: dict[str, TensorType] = field(default_factory=dict)
    values: dict[str, np.ndarray] = field(default_factory=dict)


def infer_node(node: Node, info: TypeInfo, fold_limit: int = FOLD_LIMIT) -> None:
    """Infer one node's output types (and values when computable) into ``info``."""
    op = registry.get(node.op, node=node)
    op.check_arity(node)
    types = [info.types.get(name) if name else None for name in node.inputs]
    for index, (name, type_) in enumerate(zip(node.inputs, types)):
        if name and type_ is None:
            raise ShapeError(f"node {node.name!r} (op {node.op}): input {name!r} "
                             f"(#{index}) has no known type; is it defined before use?")
    values = [info.values.get(name) if name else None for name in node.inputs]
    ctx = registry.InferContext(node, op, types, values)
    try:
        out_types = list(op.infer(ctx))
    except PortableError:
        raise
    except Exception as exc:  # a bug or an unforeseen input in a rule: still name the node
        raise ShapeError(f"node {node.name!r} (op {node.op}): type inference failed: "
                         f"{type(exc).__name__}: {exc}") from exc
    for name, type_ in zip(node.outputs, out_types):
        if name and type_ is not None:
            info.types[name] = type_
    _propagate_values(node, op, ctx, out_types, info, fold_limit)


def _propagate_values(node, op, ctx, out_types, info, fold_limit) -> None:
    if op.random:
        return
    if op.fold is not None:
        folded = op.fold(ctx)
    else:
        needed = [i for i, name in enumerate(node.inputs)
                  if name and i not in op.ignored_inputs]
        if not all(name in info.values for name in
                   (node.inputs[i] for i in needed)) or not needed:
            return
        if any(t is None or not t.is_static or int(np.prod(t.shape)) > fold_limit
               for t in out_types[:len(node.outputs)] if t is not None):
            return
        folded = evaluate_node(node, op, ctx.attrs,
                               [info.values.get(name) if name else None for name in node.inputs],
                               out_types)
    for name, value in zip(node.outputs, folded):
        if name and value is not None:
            info.values[name] = value


def evaluate_node(node: Node, op: registry.OpDef, attrs: dict, inputs: list,
                  out_types: list[TensorType | None]) -> list[np.ndarray]:
    """Run one node with the reference (NumPy) kernels on host arrays."""
    from portable.backend import KernelContext
    from portable.device import cpu
    from portable import random

    backend = cpu().backend
    outputs = [np.empty(t.shape, t.dtype) if t is not None and name else None
               for name, t in zip(node.outputs, out_types)]
    kernel = backend.kernel(node.op)
    kernel(KernelContext(np, random.generator(), backend, node), list(inputs), outputs, attrs)
    return outputs


def infer_types(graph: Graph, input_types: Mapping[str, TensorType] | None = None,
                input_values: Mapping[str, np.ndarray] | None = None,
                fold_limit: int = FOLD_LIMIT) -> TypeInfo:
    """Infer the type of every value in ``graph``.

    Args:
        graph: the graph.
        input_types: overrides for the declared input types (e.g. concrete batch size).
        input_values: input values known while planning (treated like constants).
        fold_limit: largest output (in elements) evaluated while planning.

    Returns:
        A TypeInfo with ``types`` for every value and ``values`` for those known.
    """
    info = TypeInfo()
    for name, type_ in graph.inputs:
        info.types[name] = type_
    for name, type_ in (input_types or {}).items():
        info.types[name] = type_
    for name, array in graph.initializers.items():
        info.types[name] = TensorType(array.shape, array.dtype)
        info.values[name] = array
    for name, array in (input_values or {}).items():
        info.values[name] = np.asarray(array)
    for node in graph.nodes:
        infer_node(node, info, fold_limit)
    for name in graph.outputs:
        if name not in info.types:
            raise ShapeError(f"graph {graph.name!r}: output {name!r} is never computed")
    return info
