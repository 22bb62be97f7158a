"""Mirror (recompute) mode: trade compute for memory in a training graph (Chen et al. 2016,
"Training deep nets with sublinear memory cost"; MXNet's mirror).

A training graph keeps every forward value its gradient reads alive from the forward pass to
the backward pass. Stages of ``mirror``: (1) cut the forward nodes into segments of about
equal activation bytes (``sqrt(n)`` segments by default); (2) the checkpoints are the values
that later forward segments read, the graph outputs, and the outputs of random ops (a second
draw would differ); (3) every other forward value that the backward reads is recomputed from
the checkpoints: the nodes of its segment that it needs are copied, renamed, just before the
first backward node that reads one of that segment's values, and the backward reads the
copies. The forward values then die inside the forward pass, and only one segment's
recomputed values are alive at a time in the backward pass.

Example:
    >>> cheaper, report = mirror(training_graph, forward_nodes=120)  # doctest: +SKIP
    >>> report.recomputed_nodes                                      # doctest: +SKIP
    96
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from portable.ir.graph import Graph, Node
from portable.ops import registry
from portable.passes.infer import TypeInfo, infer_types

MIRROR_SUFFIX = "/mirror"


@dataclass(frozen=True)
class MirrorReport:
    """What mirroring changed: segments, checkpoints, and the nodes computed twice."""

    segments: int
    checkpoints: int
    recomputed_nodes: int
    forward_nodes: int

    @property
    def extra_compute(self) -> float:
        """Recomputed forward nodes per forward node (an upper bound on the extra forward
        work; the time it costs is measured by the benchmarks)."""
        return self.recomputed_nodes / max(self.forward_nodes, 1)


def _segments(forward: list[Node], info: TypeInfo, count: int) -> list[int]:
    """Segment index of each forward node: cut where the running activation bytes pass each
    multiple of total / count."""
    sizes = [sum(info.types[o].nbytes for o in node.outputs if o and o in info.types)
             for node in forward]
    total = max(sum(sizes), 1)
    result, running = [], 0
    for size in sizes:
        result.append(min(count - 1, running * count // total))
        running += size
    return result


def mirror(graph: Graph, forward_nodes: int, segments: int | None = None,
           info: TypeInfo | None = None) -> tuple[Graph, MirrorReport]:
    """Recompute, in the backward pass, the forward values that are not checkpoints.

    Args:
        graph: a training graph: the forward nodes first, then the gradient (and update) nodes.
        forward_nodes: how many of ``graph.nodes`` form the forward pass.
        segments: number of forward segments (default ``ceil(sqrt(forward nodes))``).
        info: the graph's type analysis (computed when None).

    Returns:
        The mirrored graph (same inputs and outputs) and a MirrorReport.
    """
    info = info if info is not None else infer_types(graph)
    forward, backward = list(graph.nodes[:forward_nodes]), list(graph.nodes[forward_nodes:])
    count = segments or max(1, math.ceil(math.sqrt(len(forward))))
    segment_of_node = _segments(forward, info, count)
    segment_of: dict[str, int] = {}
    producer: dict[str, Node] = {}
    random_values: set[str] = set()
    for node, seg in zip(forward, segment_of_node):
        for out in node.outputs:
            if out:
                segment_of[out] = seg
                producer[out] = node
        if registry.get(node.op, node=node).random:
            random_values.update(o for o in node.outputs if o)
    checkpoints = set(graph.outputs) | random_values
    for node, seg in zip(forward, segment_of_node):
        for name in node.inputs:
            if name in segment_of and segment_of[name] != seg:
                checkpoints.add(name)
    # forward values the backward reads, by segment, that must be recomputed
    wanted: dict[int, set[str]] = {}
    for node in backward:
        for name in node.inputs:
            if name in segment_of and name not in checkpoints and name not in info.values:
                wanted.setdefault(segment_of[name], set()).add(name)
    recompute: dict[int, list[Node]] = {}
    renames: dict[str, str] = {}
    for seg, values in wanted.items():
        needed, stack = set(), list(values)
        while stack:
            name = stack.pop()
            if name in needed:
                continue
            needed.add(name)
            for source in producer[name].inputs:
                if (source in segment_of and segment_of[source] == seg
                        and source not in checkpoints and source not in info.values):
                    stack.append(source)
        nodes = []
        for node, s in zip(forward, segment_of_node):
            if s == seg and any(o in needed for o in node.outputs):
                for out in node.outputs:
                    if out:
                        renames[out] = f"{out}{MIRROR_SUFFIX}"
                nodes.append(node)
        recompute[seg] = nodes
    copies = {seg: [_copy(node, renames) for node in nodes] for seg, nodes in recompute.items()}
    # the backward reads the copies of the values it wanted (checkpoints stay as they are)
    reads = {v: renames[v] for values in wanted.values() for v in values}
    new_backward: list[Node] = []
    pending = dict(copies)
    for node in backward:
        for seg in sorted({segment_of[n] for n in node.inputs if n in reads}, reverse=True):
            new_backward.extend(pending.pop(seg, ()))
        new_backward.append(node.replace(inputs=tuple(reads.get(n, n) for n in node.inputs)))
    report = MirrorReport(segments=count, checkpoints=len(checkpoints & set(segment_of)),
                          recomputed_nodes=sum(len(v) for v in copies.values()),
                          forward_nodes=len(forward))
    return graph.replace(nodes=tuple(forward + new_backward)), report


def _copy(node: Node, renames: dict[str, str]) -> Node:
    return Node(node.op, tuple(renames.get(n, n) for n in node.inputs),
                tuple(renames.get(o, o) if o else o for o in node.outputs), dict(node.attrs),
                f"{node.name}{MIRROR_SUFFIX}")
