"""Change a graph's batch size: the leading dimension of its data inputs.

Models exported with a fixed batch of 1 often also bake that batch into the target shape of a
Reshape (``[1, 9216]``). Where a constant target shape starts with the old batch and the
reshaped value's leading dimension is the batch, the pass writes 0 there instead (ONNX
Reshape: copy that dimension from the input), so the reshape follows the batch. The ops whose
input is a target shape are listed in ``SHAPE_INPUTS``.

Example:
    >>> graph8 = set_batch(graph, 8)  # doctest: +SKIP
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from portable.errors import GraphError
from portable.ir.graph import Graph, TensorType
from portable.passes.infer import infer_types

# op -> index of its input that is a target shape whose entry 0 means "copy the input's"
SHAPE_INPUTS = {"Reshape": 1}


def set_batch(graph: Graph, batch: int, inputs: Iterable[str] | None = None) -> Graph:
    """Returns ``graph`` with batch size ``batch``.

    Args:
        graph: the graph.
        batch: the new leading dimension.
        inputs: the graph inputs that carry the batch (default: every input of rank >= 1).

    Returns:
        The graph with new input types and batch-following reshapes.
    """
    if batch < 1:
        raise GraphError(f"graph {graph.name!r}: batch size must be positive, got {batch}")
    names = set(graph.input_names if inputs is None else inputs)
    unknown = names - set(graph.input_names)
    if unknown:
        raise GraphError(f"graph {graph.name!r}: no input(s) {sorted(unknown)}")
    old_batches = {t.shape[0] for n, t in graph.inputs if n in names and t.rank}
    info = infer_types(graph)
    initializers = dict(graph.initializers)
    nodes = []
    for node in graph.nodes:
        index = SHAPE_INPUTS.get(node.op)
        target = node.inputs[index] if index is not None and index < len(node.inputs) else ""
        shape = info.values.get(target)
        data = info.types.get(node.inputs[0]) if node.inputs else None
        if (target in initializers and shape is not None and shape.ndim == 1 and shape.size
                and int(shape[0]) in old_batches and data is not None and data.rank
                and data.shape[0] in old_batches and not node.attrs.get("allowzero", 0)):
            fixed = np.array(shape, copy=True)
            fixed[0] = 0
            name = f"{target}/batch"
            initializers[name] = fixed
            node = node.replace(inputs=tuple(name if i == index else v
                                             for i, v in enumerate(node.inputs)))
        nodes.append(node)
    new_inputs = tuple((n, TensorType((batch,) + t.shape[1:], t.dtype) if n in names and t.rank
                        else t) for n, t in graph.inputs)
    return graph.replace(nodes=tuple(nodes), inputs=new_inputs, initializers=initializers)
