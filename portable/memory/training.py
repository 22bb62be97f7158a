"""One training step as one graph: forward, gradient and an SGD-with-momentum update.

Stages of ``training_graph``: switch the forward graph to training mode (BatchNormalization's
running statistics become extra outputs); append the gradient graph of the loss with respect to
the parameters (``portable.passes.autodiff``); optionally mirror it (recompute, see
``portable.passes.mirror``); append ``m = momentum * m + g; w = w - lr * m`` for every
parameter, whose new values are state updates: the planner writes them into the weight's and
the momentum's own buffers, as an in-place optimizer does. Every value gets a category
(activations, gradients, optimizer state; weights, optimizer state and inputs for the graph
inputs) for the memory report.

Example:
    >>> step = training_graph(loss_graph, params=["fc1_weight", "fc1_bias"])  # doctest: +SKIP
    >>> plan_memory(step.graph, state_updates=step.state_updates)             # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from portable.errors import GraphError
from portable.ir.graph import Graph, Node, TensorType
from portable.passes.autodiff import HEAD_GRAD_SUFFIX, differentiate
from portable.passes.mirror import MIRROR_SUFFIX, MirrorReport, mirror
from portable.passes.training import set_training_mode

MOMENTUM_SUFFIX = "_momentum"


@dataclass
class TrainingGraph:
    """A training step as a graph, and what the memory planner needs to know about it.

    Attributes:
        graph: forward, gradient and update nodes, in that order.
        forward_nodes: how many nodes form the forward pass.
        params: the trained parameters (graph inputs).
        state_updates: ``state input -> new value`` (weights, momenta, running statistics).
        categories: category of every input and computed value.
        mirror: what mirroring changed (None without mirroring).
    """

    graph: Graph
    forward_nodes: int
    params: list[str]
    state_updates: dict[str, str]
    categories: dict[str, str] = field(default_factory=dict)
    mirror: MirrorReport | None = None


def training_graph(graph: Graph, params: Sequence[str], *, learning_rate: float = 0.01,
                   momentum: float = 0.9, mirror_segments: int | None = None,
                   use_mirror: bool = False) -> TrainingGraph:
    """Build one SGD training step of ``graph``, whose first output is the scalar loss.

    Args:
        graph: the forward graph; its inputs include ``params``.
        params: the inputs to train.
        learning_rate, momentum: SGD settings (constants of the graph).
        use_mirror: recompute forward values in the backward pass (Chen et al. 2016).
        mirror_segments: forward segments for mirroring (default sqrt of the forward nodes).

    Returns:
        A TrainingGraph.
    """
    if not graph.outputs:
        raise GraphError(f"graph {graph.name!r} has no output to use as the loss")
    loss = graph.outputs[0]
    missing = [p for p in params if p not in graph.input_names]
    if missing:
        raise GraphError(f"graph {graph.name!r}: parameters {missing[:3]} are not inputs")
    forward, running_stats = set_training_mode(graph, True)
    forward = forward.replace(outputs=(loss,) + tuple(running_stats.values()))
    forward_nodes = len(forward.nodes)
    full, grads = differentiate(forward, list(params), heads=[loss])
    report = None
    if use_mirror:
        full, report = mirror(full, forward_nodes, mirror_segments)
    types = dict(full.inputs)
    dtype = types[params[0]].dtype if params else np.dtype(np.float32)
    lr, mu = "sgd/learning_rate", "sgd/momentum"
    constants = {lr: np.asarray(learning_rate, dtype), mu: np.asarray(momentum, dtype)}
    # each update runs as soon as its gradient is complete and nothing reads the weight any
    # more, so the gradient dies there and the weight may be overwritten in place
    last_use = {}
    for index, node in enumerate(full.nodes):
        for name in node.inputs:
            last_use[name] = index
        for name in node.outputs:
            last_use.setdefault(name, index)
    after: dict[int, list[Node]] = {}
    inputs, updates, update_values = [], dict(running_stats), set()
    for p in params:
        m = f"{p}{MOMENTUM_SUFFIX}"
        inputs.append((m, types[p]))
        scaled, m_new, step, p_new = (f"{p}/sgd/{s}" for s in ("scaled", "m", "step", "w"))
        nodes = [Node("Mul", (m, mu), (scaled,), name=f"{p}/sgd/decay"),
                 Node("Add", (scaled, grads[p]), (m_new,), name=f"{p}/sgd/accumulate"),
                 Node("Mul", (m_new, lr), (step,), name=f"{p}/sgd/scale"),
                 Node("Sub", (p, step), (p_new,), name=f"{p}/sgd/update")]
        position = max(last_use.get(grads[p], -1), last_use.get(p, -1))
        after.setdefault(position, []).extend(nodes)
        update_values.update((scaled, m_new, step, p_new))
        updates[p], updates[m] = p_new, m_new
    ordered = list(after.get(-1, []))
    for index, node in enumerate(full.nodes):
        ordered.append(node)
        ordered.extend(after.get(index, []))
    outputs = (loss,) + tuple(running_stats.values()) + tuple(
        updates[x] for p in params for x in (p, f"{p}{MOMENTUM_SUFFIX}"))
    step_graph = full.replace(nodes=tuple(ordered), inputs=full.inputs + tuple(inputs),
                              outputs=outputs, initializers={**full.initializers, **constants})
    activations = {o for node in forward.nodes for o in node.outputs if o}
    categories = _categories(step_graph, params, running_stats, activations, update_values)
    return TrainingGraph(step_graph, forward_nodes, list(params), updates, categories, report)


def _categories(graph: Graph, params, running_stats, activations, update_values):
    categories: dict[str, str] = {}
    for name, _ in graph.inputs:
        if name.endswith(MOMENTUM_SUFFIX):
            categories[name] = "optimizer_state"
        elif name in params or name in running_stats:
            categories[name] = "weights"
        else:
            categories[name] = "inputs"
    for node in graph.nodes:
        for out in node.outputs:
            if out:  # recomputed (mirrored) forward values are activations too
                categories[out] = ("optimizer_state" if out in update_values else
                                   "activations" if out in activations
                                   or out.endswith(MIRROR_SUFFIX) else "gradients")
    return categories


def head_gradients(graph: Graph) -> dict[str, TensorType]:
    """The head-gradient inputs autodiff added (fed with ones for a loss)."""
    return {name: type_ for name, type_ in graph.inputs if name.endswith(HEAD_GRAD_SUFFIX)}
