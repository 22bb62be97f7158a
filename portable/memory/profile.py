"""Memory profiles of prediction and of training: the graph prepared as it would run, planned
with every strategy, then (optionally) run once and measured.

Prediction: fold constants (weights built by constant subgraphs count as weights), optimise
to the chosen level, plan. A graph with values known only at run time (NonZero, Unique, a
Reshape target computed from data) is planned in segments (``portable.executor.segments``):
the report is the first segment's plan, and ``extra["tensors"]`` says which values were
planned (``planned``; ``planned_per_shape`` by the later segments, once a run gave their
shapes) and which were allocated at run time (``runtime``).

Training: one SGD step (``portable.memory.training``), optionally mirrored, planned with the
weight and momentum updates in place.

Example:
    >>> report = prediction_profile(graph, level="all", batch=8)      # doctest: +SKIP
    >>> report = training_profile(*builtin_training_graph("resnet18", 32))  # doctest: +SKIP
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from portable.device import Device
from portable.errors import PortableError
from portable.ir.graph import Graph
from portable.memory.measure import measure
from portable.memory.report import MemoryReport, memory_report
from portable.executor.segments import split_graph
from portable.memory.training import training_graph
from portable.passes.fold_constants import fold_constants
from portable.passes.pipeline import optimize
from portable.passes.set_batch import set_batch


def random_feeds(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """An array per graph input: floats in [0.05, 0.15) (positive: variances, logs and square
    roots stay finite), integers and booleans zero."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, type_ in graph.inputs:
        if type_.dtype.kind == "f":
            feeds[name] = rng.uniform(0.05, 0.15, type_.shape).astype(type_.dtype)
        else:
            feeds[name] = np.zeros(type_.shape, type_.dtype)
    return feeds


def _check_batch(batch: int | None) -> None:
    if batch is not None and batch < 1:
        raise PortableError(f"batch size must be positive, got {batch}")


def prediction_profile(graph: Graph, *, model: str = "", batch: int | None = None,
                       level: str = "all", strategy: str = "both", run: bool = True,
                       device: Device | None = None, repeats: int = 1) -> MemoryReport:
    """Plan (and measure) prediction with ``graph``.

    Args:
        graph: the model; its initializers are the weights.
        model: a label.
        batch: a batch size to set (default: the graph's).
        level: optimisation level (constants are folded at every level).
        strategy: the memory strategy to run.
        run: measure one run too.
        device: where to run.
        repeats: runs to measure (the peak is over all; the time the fastest).

    Returns:
        The MemoryReport (``measured_peak_bytes`` set when ``run``).
    """
    _check_batch(batch)
    if batch is not None:
        graph = set_batch(graph, batch)
    if not split_graph(graph).static:
        return _segmented_profile(graph, model=model, batch=batch, level=level,
                                  strategy=strategy, run=run, device=device)
    graph = optimize(fold_constants(graph), level)
    report = memory_report(graph, model=model, strategy=strategy, device=device,
                           batch=batch or _batch_of(graph))
    report.extra["level"] = level
    report.extra["nodes"] = len(graph.nodes)
    report.extra["tensors"] = {"planned": sorted(report_planned(graph)), "runtime": [],
                               "planned_per_shape": []}
    if run:
        report.measured = measure(graph, random_feeds(graph), device=device, strategy=strategy,
                                  repeats=repeats)
        report.measured_peak_bytes = report.measured["measured_peak_bytes"]
    return report


def report_planned(graph: Graph) -> set[str]:
    """The values a plan of ``graph`` places: everything its nodes compute (constants folded
    while planning aside)."""
    from portable.passes.infer import infer_types

    known = infer_types(graph).values
    return {out for node in graph.nodes for out in node.outputs if out and out not in known}


def _segmented_profile(graph: Graph, *, model: str, batch: int | None, level: str,
                       strategy: str, run: bool, device: Device | None) -> MemoryReport:
    """The report of a graph planned in segments: its first segment's plan, which values are
    planned and which are allocated at run time (running it once, when ``run``, plans the
    later segments for the shapes that run gives)."""
    import time

    from portable.device import cpu
    from portable.executor.segments import compile_graph, placement

    device = device or cpu()
    plan = compile_graph(graph, device, optimize=level, plan=strategy)
    head = plan.head.graph if plan.head is not None else graph.replace(nodes=(), outputs=())
    report = memory_report(head, model=model, strategy=strategy, device=device,
                           batch=batch or _batch_of(graph))
    report.extra.update(level=level, nodes=len(graph.nodes), segmented=True)
    if run:
        backend = device.backend
        started = time.perf_counter()
        plan.run({name: backend.from_numpy(value)
                  for name, value in random_feeds(graph).items()})
        backend.synchronize()
        report.extra["run_seconds"] = time.perf_counter() - started
    report.extra["tensors"] = placement(plan)
    return report


def training_profile(graph: Graph, params: Sequence[str], *, model: str = "",
                     batch: int | None = None, strategy: str = "both", use_mirror: bool = False,
                     run: bool = True, device: Device | None = None,
                     repeats: int = 1) -> MemoryReport:
    """Plan (and measure) one SGD training step of ``graph`` (first output: the loss).

    With ``use_mirror`` the report's ``extra["mirror"]`` holds the recomputation's cost, and
    ``extra["without_mirror"]`` the planned bytes of the same step without it.
    """
    step = training_graph(graph, params, use_mirror=use_mirror)
    report = memory_report(step.graph, model=model, strategy=strategy, device=device,
                           categories=step.categories, state_updates=step.state_updates,
                           batch=batch or _batch_of(graph), train=True)
    report.extra["nodes"] = len(step.graph.nodes)
    report.extra["forward_nodes"] = step.forward_nodes
    if use_mirror:
        plain = training_graph(graph, params)
        base = memory_report(plain.graph, strategy=strategy, device=device,
                             categories=plain.categories, state_updates=plain.state_updates)
        report.extra["mirror"] = {
            "segments": step.mirror.segments, "checkpoints": step.mirror.checkpoints,
            "recomputed_nodes": step.mirror.recomputed_nodes,
            "extra_forward_nodes_ratio": step.mirror.extra_compute,
            "planned_bytes_without_mirror": base.planned_bytes,
            "saved_bytes": base.planned_bytes - report.planned_bytes}
    if run:
        feeds = random_feeds(step.graph)
        report.measured = measure(step.graph, feeds, device=device, strategy=strategy,
                                  state_updates=step.state_updates, repeats=repeats,
                                  categories=step.categories)
        report.measured_peak_bytes = report.measured["measured_peak_bytes"]
    return report


def _batch_of(graph: Graph) -> int | None:
    for _, type_ in graph.inputs:
        if type_.rank and type_.shape[0] is not None:
            return int(type_.shape[0])
    return None


# -- built-in models ---------------------------------------------------------------------------


def _builtin(name: str):
    from portable.models.convnets import BUILTIN_MODELS

    try:
        return BUILTIN_MODELS[name]
    except KeyError:
        raise PortableError(f"unknown model {name!r}: give an .onnx file or one of "
                            f"{sorted(BUILTIN_MODELS)}") from None


def builtin_prediction_graph(name: str, batch: int, seed: int = 0) -> Graph:
    """A built-in model's logits graph with random weights as initializers."""
    build, sample = _builtin(name)
    graph = build().to_graph({"data": (batch, *sample)})
    weights = random_feeds(graph.replace(inputs=graph.inputs[1:]), seed)
    return graph.replace(inputs=graph.inputs[:1], initializers={**graph.initializers, **weights})


def builtin_training_graph(name: str, batch: int) -> tuple[Graph, list[str]]:
    """A built-in model with a softmax cross-entropy loss; returns the graph and its trained
    parameters (every argument but the data and the label)."""
    from portable import symbol as sym

    build, sample = _builtin(name)
    loss = sym.SoftmaxCrossEntropy(build(), sym.var("label", dtype="int64"), name="loss")
    graph = loss.to_graph({"data": (batch, *sample), "label": (batch,)},
                          {"label": np.int64})
    aux = set(loss.list_auxiliary_states())
    params = [n for n in loss.list_arguments() if n not in ("data", "label") and n not in aux]
    return graph, params
