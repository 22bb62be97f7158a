"""Constant folding: evaluate every node whose inputs are all constants, once, at compile time.

Stages: (1) infer types with constant propagation up to ``limit`` elements per value, which
evaluates (with the reference kernels) every node whose inputs' values are known and whose
outputs, by their inferred types, are within the limit, and applies fold rules (Shape of a
static shape); random ops are never evaluated; (2) drop the nodes whose outputs are all known;
(3) the known values that remaining nodes or graph outputs read become initializers.

Weights stay as stored: a node of an op declared ``widens_weights`` (DequantizeLinear, Cast)
that reads a graph initializer and makes it wider (int8 or int4 to float32, bfloat16 to float32)
is not folded, nor is anything computed from its output. The weight keeps its stored size in
memory and is widened per use into planned workspace, as onnxruntime leaves a QDQ model's
DequantizeLinear nodes to run; folding them would make a quantized model's resident weights
four or eight times its file.
Weights built by a constant subgraph (ConstantOfShape, Reshape of a constant) become plain
initializers, counted as weights by the memory planner.

The limit is checked from the inferred output type before a node is evaluated, so a tiny
model whose constant subgraph would compute gigabytes (an Expand or an Add of a large
ConstantOfShape) allocates nothing here: the node is left to run, and the memory plan (with a
budget, ``CompiledGraph``'s check) sees what it costs. ``within_bytes`` turns a byte budget into
such a limit, and ``bounded_pipeline`` gives a pipeline whose folding holds to it.

Example:
    >>> folded = fold_constants(graph)  # doctest: +SKIP
    >>> passes = bounded_pipeline(PIPELINE, 64 << 20)  # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable

import numpy as np

from portable.dtypes import PACKED_BITS, is_low_precision, is_string, to_onnx
from portable.ir.graph import Graph
from portable.ops import registry
from portable.passes.infer import infer_types

# The name the optimisation pipeline gives this pass.
PASS_NAME = "fold-constants"
# Largest value (in elements) folded when no budget says otherwise: the ONNX backend's limit,
# 1 GiB of float64. A value beyond it is computed when the graph runs, like any other.
DEFAULT_LIMIT = 1 << 27
UNLIMITED = 1 << 62  # for a caller that means to fold everything, whatever it costs
# Bytes per element assumed when a byte budget becomes an element limit: int64 and float64,
# the widest numeric dtypes models compute constants in.
_WIDEST_ITEM = 8


def fold_constants(graph: Graph, limit: int = DEFAULT_LIMIT,
                   holds: Callable[[np.dtype], bool] = lambda dtype: True) -> Graph:
    """Returns ``graph`` with its constant subgraphs replaced by initializers.

    Args:
        graph: the graph.
        limit: largest value (in elements) to fold; a node with a larger output is not
            evaluated (``within_bytes`` gives the limit for a byte budget).
        holds: whether the device holds a dtype: a weight it cannot hold (bfloat16 or int4 on
            OpenCL) is widened here, once, instead of per use.

    Returns:
        The folded graph (``graph`` itself when nothing folds).
    """
    info = infer_types(graph, fold_limit=limit)
    widened = _widened_per_use(graph, info, holds)
    known = {name: value for name, value in info.values.items() if name not in widened}
    nodes = tuple(node for node in graph.nodes
                  if not all(not out or out in known for out in node.outputs))
    if len(nodes) == len(graph.nodes):
        return graph
    read = {name for node in nodes for name in node.inputs if name} | set(graph.outputs)
    inputs = set(graph.input_names)
    initializers = dict(graph.initializers)
    for name in read:
        if name in known and name not in inputs and name not in initializers:
            value = np.asarray(known[name])
            value.setflags(write=False)  # so Graph keeps it as is instead of copying it
            initializers[name] = value
    return graph.replace(nodes=nodes, initializers=initializers)


def _widened_per_use(graph: Graph, info: Any, holds: Callable[[np.dtype], bool]) -> set[str]:
    """The values left to compute per use so that weights stay as stored: the outputs of a
    ``widens_weights`` node that widens a graph initializer of a dtype the device ``holds``,
    and every value computed from them (in graph order, which is topological)."""
    widened: set[str] = set()
    for node in graph.nodes:
        facets = registry.ops.get(node.op)
        source = node.inputs[0] if node.inputs else ""
        stored = info.types.get(source) if source in graph.initializers else None
        out = info.types.get(node.outputs[0]) if node.outputs and node.outputs[0] else None
        if (facets is not None and facets.widens_weights and stored is not None
                and out is not None and holds(stored.dtype)
                and out.dtype.itemsize * 8 > stored_bits(stored.dtype)) \
                or any(name in widened for name in node.inputs if name):
            widened.update(name for name in node.outputs if name)
    return widened


def stored_bits(dtype: np.dtype) -> int:
    """Bits per element as a file stores them (the 4- and 2-bit types take a byte in memory)."""
    if is_string(dtype):
        return 0
    return PACKED_BITS.get(to_onnx(dtype), 8 * dtype.itemsize) if is_low_precision(dtype) \
        else 8 * dtype.itemsize


def within_bytes(max_bytes: int) -> int:
    """The element limit that keeps every folded value within ``max_bytes`` (elements of up
    to 8 bytes; never more than ``DEFAULT_LIMIT``)."""
    return max(min(int(max_bytes) // _WIDEST_ITEM, DEFAULT_LIMIT), 0)


def bounded_pipeline(passes: Iterable[Any], max_bytes: int | None = None,
                     holds: Callable[[np.dtype], bool] = lambda dtype: True) -> tuple:
    """``passes`` (``portable.passes.pipeline.PIPELINE`` or a list like it) with the
    fold-constants pass folding no value over ``max_bytes`` (a value that large could never
    fit a budget of ``max_bytes``, so it is left to the memory plan to refuse, unallocated) and
    keeping as stored only the weights of dtypes the device ``holds``."""
    limit = DEFAULT_LIMIT if max_bytes is None else within_bytes(max_bytes)
    return tuple(dataclasses.replace(step, run=lambda graph, keep: fold_constants(graph, limit,
                                                                                  holds))
                 if step.name == PASS_NAME else step for step in passes)
