"""The memory report: what every strategy plans for a graph, the liveness lower bound, the
category breakdown and the kernel workspace, predicted before anything runs.

Example:
    >>> report = memory_report(graph)            # doctest: +SKIP
    >>> report.planned_bytes, report.lower_bound_bytes  # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

from portable.device import Device, cpu
from portable.executor.compiled import kernel_held, kernel_workspace
from portable.ir.graph import Graph
from portable.passes.infer import TypeInfo, infer_types
from portable.passes.plan_memory import STRATEGIES, MemoryPlan, plan_memory

CATEGORIES = ("weights", "activations", "gradients", "optimizer_state", "workspace", "inputs")


@dataclass
class MemoryReport:
    """Predicted (and, once measured, measured) memory of one graph; bytes everywhere.

    ``naive/inplace/coshare/both_bytes`` are the arena of each strategy (every value the graph
    computes, intermediates and outputs; graph inputs and weights excluded);
    ``planned_bytes`` that of the chosen strategy. ``categories`` splits the bytes alive at
    the plan's peak step, plus the resident weights, optimizer state, inputs and workspace.
    ``kernel_held_bytes`` is what kernels keep beside the weights for the plan's life (a
    weight reordered for a compiled loop, ``kernel_held``), counted with the weights there.
    """

    model: str
    strategy: str
    batch: int | None
    train: bool
    steps: int
    naive_bytes: int
    inplace_bytes: int
    coshare_bytes: int
    both_bytes: int
    planned_bytes: int
    lower_bound_bytes: int
    weights_bytes: int
    optimizer_state_bytes: int
    inputs_bytes: int
    workspace_bytes: int
    categories: dict[str, int]
    timeline: list[int] = field(repr=False, default_factory=list)
    naive_timeline: list[int] = field(repr=False, default_factory=list)
    kernel_held_bytes: int = 0
    measured_peak_bytes: int | None = None
    measured: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def predicted_peak_bytes(self) -> int:
        """Plan + weights + optimizer state + inputs + workspace + what kernels keep: what a
        run should hold."""
        return (self.planned_bytes + self.weights_bytes + self.optimizer_state_bytes
                + self.inputs_bytes + self.workspace_bytes + self.kernel_held_bytes)

    def to_json(self, timeline: bool = False) -> dict[str, Any]:
        data = asdict(self)
        if not timeline:
            data.pop("timeline")
            data.pop("naive_timeline")
        data["predicted_peak_bytes"] = self.predicted_peak_bytes
        data["naive_over_planned"] = self.naive_bytes / max(self.planned_bytes, 1)
        data["planned_over_bound"] = self.planned_bytes / max(self.lower_bound_bytes, 1)
        if self.measured_peak_bytes is not None:
            data["measured_over_predicted"] = (self.measured_peak_bytes
                                               / max(self.predicted_peak_bytes, 1))
        return data


def _naive_timeline(plan: MemoryPlan) -> list[int]:
    """Bytes held at each step when every value keeps its own block: all allocated so far."""
    added = [0] * max(len(plan.steps), 1)
    for slot in set(plan.storage.values()):
        added[plan.lifetimes[slot][0]] += plan.storage_sizes[slot]
    total, out = 0, []
    for size in added[:len(plan.steps)]:
        total += size
        out.append(total)
    return out


def memory_report(graph: Graph, *, model: str = "", strategy: str = "both",
                  device: Device | None = None, categories: Mapping[str, str] | None = None,
                  state_updates: Mapping[str, str] | None = None, keep: Iterable[str] = (),
                  info: TypeInfo | None = None, batch: int | None = None,
                  train: bool = False) -> MemoryReport:
    """Plan ``graph`` with every strategy and report the figures.

    Args:
        graph: the graph (constants already folded: weights are its initializers, or inputs
            whose category is ``weights``).
        model: a label.
        strategy: the strategy whose plan is ``planned_bytes``.
        device: whose kernels declare the workspace (default CPU).
        categories: category of inputs and computed values (inputs default to ``inputs``,
            computed values to ``activations``).
        state_updates, keep: as ``plan_memory``.
        info: the graph's type analysis (computed when None).
        batch, train: labels for the report.

    Returns:
        A MemoryReport (not measured yet; see ``portable.memory.measure``).
    """
    info = info if info is not None else infer_types(graph)
    categories = dict(categories or {})
    backend = (device or cpu()).backend
    workspace, _ = kernel_workspace(graph, info, backend)
    held = kernel_held(graph, info, backend)
    plans = {s: plan_memory(graph, info, strategy=s, keep=keep, state_updates=state_updates,
                            categories=categories, workspace=workspace) for s in STRATEGIES}
    chosen = plans[strategy]
    resident = {"weights": 0, "optimizer_state": 0, "inputs": 0}
    for name, type_ in graph.inputs:
        kind = categories.get(name, "inputs")
        resident[kind if kind in resident else "inputs"] += type_.nbytes
    resident["weights"] += sum(a.nbytes for a in graph.initializers.values())
    at_peak = chosen.bytes_by_category()
    breakdown = {c: at_peak.get(c, 0) for c in ("activations", "gradients", "optimizer_state")}
    for kind, nbytes in resident.items():
        breakdown[kind] = breakdown.get(kind, 0) + nbytes
    breakdown["workspace"] = chosen.workspace_bytes
    breakdown["weights"] += held
    return MemoryReport(
        model=model, strategy=strategy, batch=batch, train=train, steps=len(chosen.steps),
        naive_bytes=chosen.naive_bytes, inplace_bytes=plans["inplace"].arena_bytes,
        coshare_bytes=plans["coshare"].arena_bytes, both_bytes=plans["both"].arena_bytes,
        planned_bytes=chosen.arena_bytes, lower_bound_bytes=chosen.lower_bound_bytes,
        weights_bytes=resident["weights"], optimizer_state_bytes=resident["optimizer_state"],
        inputs_bytes=resident["inputs"], workspace_bytes=chosen.workspace_bytes,
        categories={c: breakdown.get(c, 0) for c in CATEGORIES}, kernel_held_bytes=held,
        timeline=list(chosen.timeline), naive_timeline=_naive_timeline(plans["naive"]))
