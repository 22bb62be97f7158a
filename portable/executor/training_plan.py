"""A graph planned for training or inference, split into a forward and a gradient segment.

Shared by the Symbol executor and hybridized gluon blocks: apply the training-mode rewrite
(state updates become extra outputs), append the gradient graph, prune gradients nobody asked
for, keep the forward values the gradient segment reads, and compile.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from portable.device import Device
from portable.executor.compiled import CompiledGraph
from portable.ir.graph import Graph
from portable.passes.autodiff import HEAD_GRAD_SUFFIX, differentiate
from portable.passes.prune import prune
from portable.passes.training import set_training_mode


@dataclass
class TrainingPlan:
    """A graph compiled for training or inference: the forward segment (steps ``[0, split)``),
    the gradient segment (``[split, end)``), where state updates and gradients are found.

    Attributes:
        compiled: the compiled graph.
        heads: the graph's own outputs (state updates and gradients follow them).
        updates: state input name -> value holding its new value (training only).
        grads: differentiated input name -> value holding its gradient.
        split: the first step of the gradient segment.
        head_grads: output name -> the graph input that receives its head gradient.
    """

    compiled: CompiledGraph
    heads: tuple[str, ...]
    updates: dict[str, str]
    grads: dict[str, str]
    split: int
    head_grads: dict[str, str] = field(default_factory=dict)


def build_plan(graph: Graph, device: Device, training: bool,
               wrt: Sequence[str] = ()) -> TrainingPlan:
    """Rewrite ``graph`` for the mode, append the gradient w.r.t. ``wrt`` and compile it.

    The forward values that the gradient segment reads are kept valid after a run, so the
    gradient segment can run more than once (``retain_graph``).

    Args:
        graph: the forward graph.
        device: where it runs.
        training: training-mode behaviour (batch statistics, dropout, state updates).
        wrt: input names to differentiate with respect to (none: forward only).

    Returns:
        The TrainingPlan.

    Example:
        >>> plan = build_plan(graph, pt.cpu(), True, ["w"])      # doctest: +SKIP
        >>> env = plan.compiled.bind(feeds)                       # doctest: +SKIP
        >>> plan.compiled.execute(env, 0, plan.split)             # doctest: +SKIP
    """
    graph, updates = set_training_mode(graph, training)
    heads = tuple(graph.outputs)
    graph = graph.replace(outputs=heads + tuple(updates.values()))
    forward = {id(node) for node in graph.nodes}
    grads: dict[str, str] = {}
    if wrt:
        graph, grads = differentiate(graph, list(wrt), heads=list(heads))
    # Gradient rules emit the gradient of every float input of an op (a first layer's dX);
    # the ones nothing asked for are dropped here.
    graph = prune(graph)
    first_backward = next((i for i, node in enumerate(graph.nodes) if id(node) not in forward),
                          len(graph.nodes))
    computed = {out for node in graph.nodes[:first_backward] for out in node.outputs if out}
    saved = {name for node in graph.nodes[first_backward:] for name in node.inputs
             if name in computed}
    compiled = CompiledGraph(graph, device, keep=saved, state_updates=updates)
    inputs = set(compiled.graph.input_names)
    head_grads = {h: f"{h}{HEAD_GRAD_SUFFIX}" for h in heads
                  if f"{h}{HEAD_GRAD_SUFFIX}" in inputs}
    return TrainingPlan(compiled, heads, updates, grads, compiled.step_of_node(first_backward),
                        head_grads)


def written_values(compiled: CompiledGraph, start: int, stop: int | None) -> set[str]:
    """Values that a kernel (not a view) of steps ``start:stop`` writes into its own buffer:
    a caller may place such a value's buffer wherever it wants the result. Not a Concat's
    output or inputs where the plan computed the inputs in their slices of the output: its
    step writes nothing, and an input moved elsewhere would leave its slice unwritten."""
    nodes = compiled.graph.nodes
    sliced = {name for index in compiled.plan.concats
              for name in (*nodes[index].inputs, *nodes[index].outputs)}
    return {out for step in compiled.steps[start:stop] if not step.view
            for out in step.node.outputs
            if out and out in compiled.buffers and out not in sliced}
