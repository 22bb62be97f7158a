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

from portable.ir.graph import Graph, TensorType
from portable.ops import registry
from portable.passes.infer import TypeInfo, infer_node, infer_types
from portable.passes.pack_weights import PASS_NAME as PACK_PASS_NAME
from portable.passes.pack_weights import pack_sub_byte_weights

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
    # (the widened weights are never computed, not even once)
    info = infer_types(graph, fold_limit=limit, skip=widened_per_use(graph, holds))
    known = info.values
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


def widened_per_use(graph: Graph, holds: Callable[[np.dtype], bool]) -> set[str]:
    """The values left to compute per use so that weights stay as stored: the outputs of a
    ``widens_weights`` node that reads only initializers, the first a weight of a dtype the
    device ``holds``, and makes more bytes of it; and every value computed from them (in graph
    order, which is topological). The node's type comes from its own rule over the
    initializers, so finding them costs no inference of the graph."""
    widened: set[str] = set()
    for node in graph.nodes:
        if any(name in widened for name in node.inputs if name):
            widened.update(name for name in node.outputs if name)
            continue
        facets = registry.ops.get(node.op)
        if facets is None or not facets.widens_weights or not node.inputs or not all(
                not name or name in graph.initializers for name in node.inputs):
            continue
        weight = graph.initializers[node.inputs[0]]
        if not holds(weight.dtype):
            continue
        local = TypeInfo({name: TensorType(graph.initializers[name].shape,
                                           graph.initializers[name].dtype)
                          for name in node.inputs if name})
        infer_node(node, local, fold_limit=0)
        out = local.types.get(node.outputs[0])
        if out is not None and out.is_static and out.nbytes > weight.nbytes:
            widened.update(name for name in node.outputs if name)
    return widened


def within_bytes(max_bytes: int) -> int:
    """The element limit that keeps every folded value within ``max_bytes`` (elements of up
    to 8 bytes; never more than ``DEFAULT_LIMIT``)."""
    return max(min(int(max_bytes) // _WIDEST_ITEM, DEFAULT_LIMIT), 0)


def bounded_pipeline(passes: Iterable[Any], max_bytes: int | None = None,
                     holds: Callable[[np.dtype], bool] = lambda dtype: True) -> tuple:
    """``passes`` (``portable.passes.pipeline.PIPELINE`` or a list like it) with the
    fold-constants pass folding no value over ``max_bytes`` (a value that large could never
    fit a budget of ``max_bytes``, so it is left to the memory plan to refuse, unallocated) and
    keeping as stored (and packed) only the weights of dtypes the device ``holds``."""
    limit = DEFAULT_LIMIT if max_bytes is None else within_bytes(max_bytes)
    steps = {PASS_NAME: lambda graph, keep: fold_constants(graph, limit, holds),
             PACK_PASS_NAME: lambda graph, keep: pack_sub_byte_weights(graph, holds)}
    return tuple(dataclasses.replace(step, run=steps[step.name]) if step.name in steps else step
                 for step in passes)
