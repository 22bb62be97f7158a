"""Switch a graph between training and inference behaviour, and expose state updates.

Ops whose behaviour depends on the mode (BatchNormalization, Dropout) declare a
``training_mode`` facet; this pass applies it to every node. In training mode, each ``mutates``
pair ``(o, i)`` of an op names an output that carries the new value of a state input (running
statistics); the pass makes sure that output exists and returns the map
``state input name -> updated value name`` so an executor can write it back after a run.
"""
from __future__ import annotations

from portable.ir.graph import Graph
from portable.ops import registry


def set_training_mode(graph: Graph, training: bool) -> tuple[Graph, dict[str, str]]:
    """Returns the rewritten graph and the state updates (empty in inference mode)."""
    nodes = []
    updates: dict[str, str] = {}
    for node in graph.nodes:
        op = registry.get(node.op, node=node)
        if op.training_mode is not None:
            node = op.training_mode(node, training)
            op = registry.get(node.op, node=node)
        if training and op.mutates:
            outputs = list(node.outputs)
            for out_index, in_index in op.mutates:
                state = node.inputs[in_index] if in_index < len(node.inputs) else ""
                if not state:
                    continue
                while len(outputs) <= out_index:
                    outputs.append("")
                if not outputs[out_index]:
                    outputs[out_index] = f"{node.name}/updated_{state}"
                updates[state] = outputs[out_index]
            node = node.replace(outputs=tuple(outputs))
        nodes.append(node)
    return graph.replace(nodes=tuple(nodes)), updates
