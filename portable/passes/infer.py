"""Shape and dtype inference, with the constant propagation that planning needs.

Stages: (1) seed types from graph inputs and initializers, and values from initializers; (2) for
each node in order, run its op's type rule; (3) record output values that are known while
planning: from the op's fold rule (Shape needs only a type), or by evaluating the reference
kernel when every input value is known and the outputs are small. Values known this way let
rules such as Reshape's read a shape that a Shape -> Gather -> Concat chain computes.

The result is an analysis (a side table), not a change to the graph. Graphs and nodes are
immutable, so the analysis is remembered per object: a graph inferred before (with no overrides)
returns a copy of its table at once, and in a new graph each node whose input types and values
are those it was last inferred with reuses its outputs. A pass that changes three nodes of a
model therefore re-infers those three and what they feed, not the whole graph again.
``inference_counts`` counts the inferences that actually ran.

Example:
    >>> info = infer_types(graph)  # doctest: +SKIP
    >>> info.types["y"]            # doctest: +SKIP
    float32[2x3]
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

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

    def copy(self) -> "TypeInfo":
        """A table that can be extended without touching this one (the arrays are shared)."""
        return TypeInfo(dict(self.types), dict(self.values))


# Inferences that actually ran (not answered from what was remembered): whole graphs and
# single nodes. Tests and benchmarks read them to check that passes do not re-infer.
inference_counts = {"graphs": 0, "nodes": 0}


@dataclass(frozen=True)
class _NodeResult:
    """A node's last inference: what it read (types, and the identity of known values) and
    what it wrote."""

    node: weakref.ref
    fold_limit: int
    fold_size: int | None  # the output size held against the limit (None: it decided nothing)
    in_types: tuple
    in_values: tuple  # weak references to the known input values (None where unknown)
    out_types: tuple
    out_values: tuple

    def answers(self, node: Node, fold_limit: int, in_types: tuple, in_values: tuple) -> bool:
        return (self.node() is node and self._same_under(fold_limit)
                and self.in_types == in_types and len(self.in_values) == len(in_values)
                and all((r is None) == (v is None) and (r is None or r() is v)
                        for r, v in zip(self.in_values, in_values)))


    def _same_under(self, fold_limit: int) -> bool:
        """Whether ``fold_limit`` decides as the remembered limit did."""
        return self.fold_size is None or (
            (self.fold_size <= fold_limit) == (self.fold_size <= self.fold_limit))


# id(object) -> (weak reference, ...): the entry dies with its graph or node.
_graph_results: dict[int, tuple[weakref.ref, int, TypeInfo]] = {}
_node_results: dict[int, _NodeResult] = {}


def _forget(table: dict, key: int) -> Any:
    return lambda _ref: table.pop(key, None)


def _weak(value: Any) -> Any:
    return None if value is None else weakref.ref(value)


def infer_node(node: Node, info: TypeInfo, fold_limit: int = FOLD_LIMIT,
               skip: frozenset = frozenset()) -> int | None:
    """Infer one node's output types (and values when computable) into ``info``; returns the
    output size that was held against ``fold_limit``, or None when the limit decided nothing."""
    inference_counts["nodes"] += 1
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
    if skip and any(name in skip for name in node.outputs):
        return None
    return _propagate_values(node, op, ctx, out_types, info, fold_limit)


def _propagate_values(node, op, ctx, out_types, info, fold_limit) -> int | None:
    """Record the outputs' values where they are known now; returns the output size that was
    held against ``fold_limit`` (None when the limit decided nothing)."""
    if op.random:
        return None
    size = None
    if op.fold is not None:
        folded = op.fold(ctx)
    else:
        needed = [i for i, name in enumerate(node.inputs)
                  if name and i not in op.ignored_inputs]
        if not all(name in info.values for name in
                   (node.inputs[i] for i in needed)) or not needed:
            return None
        present = [t for t in out_types[:len(node.outputs)] if t is not None]
        if any(not t.is_static for t in present):
            return None
        size = max((t.size for t in present), default=0)
        if size > fold_limit:
            return size
        folded = evaluate_node(node, op, ctx.attrs,
                               [info.values.get(name) if name else None for name in node.inputs],
                               out_types)
    for name, value in zip(node.outputs, folded):
        if name and value is not None:
            info.values[name] = value
    return size


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
                fold_limit: int = FOLD_LIMIT, skip: Iterable[str] = ()) -> TypeInfo:
    """Infer the type of every value in ``graph``.

    Args:
        graph: the graph.
        input_types: overrides for the declared input types (e.g. concrete batch size).
        input_values: input values known while planning (treated like constants).
        fold_limit: largest output (in elements) evaluated while planning.
        skip: values never evaluated while planning (their types are inferred): weights that
            stay as stored and are widened per use (``fold_constants.widened_per_use``).

    Returns:
        A TypeInfo with ``types`` for every value and ``values`` for those known.
    """
    declared = dict(graph.inputs)
    input_types = {name: type_ for name, type_ in (input_types or {}).items()
                   if declared.get(name) != type_}  # overrides that override nothing: none
    skip = frozenset(skip)
    remember = not input_types and not input_values and not skip
    if remember:
        known = _graph_results.get(id(graph))
        if known is not None and known[0]() is graph and known[1] == fold_limit:
            return known[2].copy()
    inference_counts["graphs"] += 1
    info = TypeInfo()
    for name, type_ in graph.inputs:
        info.types[name] = type_
    for name, type_ in input_types.items():
        info.types[name] = type_
    for name, array in graph.initializers.items():
        info.types[name] = TensorType(array.shape, array.dtype)
        info.values[name] = array
    for name, array in (input_values or {}).items():
        info.values[name] = np.asarray(array)
    for node in graph.nodes:
        if skip:  # (a value left unevaluated must not be remembered as one that cannot be)
            infer_node(node, info, fold_limit, skip)
        else:
            _infer_or_recall(node, info, fold_limit)
    for name in graph.outputs:
        if name not in info.types:
            raise ShapeError(f"graph {graph.name!r}: output {name!r} is never computed")
    if remember:
        _graph_results[id(graph)] = (weakref.ref(graph, _forget(_graph_results, id(graph))),
                                     fold_limit, info.copy())
    return info


def _infer_or_recall(node: Node, info: TypeInfo, fold_limit: int) -> None:
    """``infer_node``, or the node's remembered outputs when it reads what it read then."""
    in_types = tuple(info.types.get(name) if name else None for name in node.inputs)
    in_values = tuple(info.values.get(name) if name else None for name in node.inputs)
    known = _node_results.get(id(node))
    if known is not None and known.answers(node, fold_limit, in_types, in_values):
        for name, type_, value in zip(node.outputs, known.out_types, known.out_values):
            if type_ is not None:
                info.types[name] = type_
            if value is not None:
                info.values[name] = value
        return
    fold_size = infer_node(node, info, fold_limit)
    try:
        weak_values = tuple(_weak(v) for v in in_values)
    except TypeError:  # a value that cannot be weakly referenced: not remembered
        return
    _node_results[id(node)] = _NodeResult(
        weakref.ref(node, _forget(_node_results, id(node))), fold_limit, fold_size, in_types,
        weak_values,
        tuple(info.types.get(name) if name else None for name in node.outputs),
        tuple(info.values.get(name) if name else None for name in node.outputs))
