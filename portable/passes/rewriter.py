"""One rewriter for local pattern -> replacement rewrites (folding, elimination, fusion).

A ``Pattern`` describes a node and, for some of its inputs, the nodes that must produce them:
``Pattern("Relu", Pattern("Conv", name="conv"), name="act")`` matches a Relu whose input comes
from a Conv. A ``Rule`` pairs a pattern with a replacement function that receives the ``Match``
and returns a ``Rewrite`` (the nodes that now compute the root's outputs, new constants, and
value renames), or None to decline.

Stages of ``rewrite``: (1) infer types once; (2) walk the nodes in order and try every rule at
every node not touched in this sweep; a match needs each matched node except the root to feed
only the pattern (its outputs read nowhere else, not graph outputs); (3) replace matched nodes
by the rewrite's nodes at the root's position, apply renames, drop constants nothing reads any
more; (4) repeat until a sweep changes nothing (each sweep sees fresh types), at most ``max_sweeps`` times.

Example:
    >>> rules = [Rule("drop-identity", Pattern("Identity", name="id"), drop_identity)]
    >>> graph = rewrite(graph, rules)  # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from portable.errors import GraphError
from portable.ir.graph import Graph, Node, TensorType
from portable.passes.infer import TypeInfo, infer_types


@dataclass(frozen=True)
class Pattern:
    """A node pattern. ``op`` is an op name, a tuple of names, or a predicate on the Node;
    ``inputs`` gives, by input position, a sub-pattern the producer must match (None: any)."""

    op: str | tuple[str, ...] | Callable[[Node], bool]
    inputs: tuple["Pattern | None", ...] = ()
    name: str = ""

    def __init__(self, op: Any, *inputs: "Pattern | None", name: str = "") -> None:
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "inputs", tuple(inputs))
        object.__setattr__(self, "name", name)

    def accepts(self, node: Node) -> bool:
        if callable(self.op):
            return bool(self.op(node))
        if isinstance(self.op, tuple):
            return node.op in self.op
        return node.op == self.op


@dataclass
class Rewrite:
    """What replaces a match: ``nodes`` (in order; together they must compute every output of
    the root that is still read), new ``initializers``, and ``renames`` (old value -> value
    that now holds it; the root's outputs may be renamed to an existing value instead of
    being recomputed)."""

    nodes: list[Node] = field(default_factory=list)
    initializers: dict[str, np.ndarray] = field(default_factory=dict)
    renames: dict[str, str] = field(default_factory=dict)


class Match:
    """What a replacement function sees: the matched nodes by pattern name, the graph, its
    types and constants, and a source of fresh value names."""

    def __init__(self, rewriter: "_Sweep", nodes: dict[str, Node], root: Node) -> None:
        self._sweep = rewriter
        self.nodes = nodes
        self.root = root

    def __getitem__(self, name: str) -> Node:
        return self.nodes[name]

    @property
    def graph(self) -> Graph:
        return self._sweep.graph

    def type(self, value: str) -> TensorType:
        return self._sweep.info.types[value]

    def const(self, value: str) -> np.ndarray | None:
        """The value of an initializer (or a value known while planning), else None."""
        if not value:
            return None
        return self._sweep.info.values.get(value)

    def readers(self, value: str) -> int:
        """How many node inputs read ``value`` (graph outputs count as readers)."""
        return self._sweep.readers.get(value, 0)

    def fresh(self, prefix: str) -> str:
        return self._sweep.fresh(prefix)


Replace = Callable[[Match], "Rewrite | None"]


@dataclass(frozen=True)
class Rule:
    """A named pattern -> replacement rule."""

    name: str
    pattern: Pattern
    replace: Replace


class _Sweep:
    def __init__(self, graph: Graph, protected: frozenset[str]) -> None:
        self.graph = graph
        self.info: TypeInfo = infer_types(graph)
        self.producer = graph.producers()
        readers: dict[str, int] = {}
        for node in graph.nodes:
            for name in node.inputs:
                if name:
                    readers[name] = readers.get(name, 0) + 1
        for name in tuple(graph.outputs) + tuple(protected):
            readers[name] = readers.get(name, 0) + (1 << 20)  # never "read only by the pattern"
        self.readers = readers
        self.fixed = frozenset(graph.outputs) | protected
        self.taken = set(self.info.types) | set(graph.initializers)
        self.count = 0

    def fresh(self, prefix: str) -> str:
        while True:
            self.count += 1
            name = f"{prefix}_r{self.count}"
            if name not in self.taken:
                self.taken.add(name)
                return name

    def match(self, pattern: Pattern, node: Node, bound: dict[str, Node], matched: list[Node],
              touched: set[int], root: bool = True) -> bool:
        """Whether ``node`` matches ``pattern``; binds named nodes and lists every matched
        node. Nodes below the root must feed only the pattern."""
        if id(node) in touched or not pattern.accepts(node):
            return False
        if not root and (self.readers.get(node.outputs[0], 0) != 1
                         or any(out and out in self.readers for out in node.outputs[1:])):
            return False
        for index, sub in enumerate(pattern.inputs):
            if sub is None:
                continue
            if index >= len(node.inputs) or not node.inputs[index]:
                return False
            producer = self.producer.get(node.inputs[index])
            if producer is None or producer.outputs[0] != node.inputs[index]:
                return False
            if not self.match(sub, producer, bound, matched, touched, False):
                return False
        if pattern.name:
            bound[pattern.name] = node
        matched.append(node)
        return True


def rewrite(graph: Graph, rules: Sequence[Rule], protected: Sequence[str] = (),
            max_sweeps: int = 16) -> Graph:
    """Apply ``rules`` until none matches.

    Args:
        graph: the graph.
        rules: the rules, tried in order at every node.
        protected: values besides the graph outputs that must keep their name and producer.
        max_sweeps: safety bound on the number of sweeps.

    Returns:
        The rewritten graph (``graph`` itself when no rule matched).
    """
    protected = frozenset(protected)
    for _ in range(max_sweeps):
        graph, changed = _sweep_once(graph, rules, protected)
        if not changed:
            return graph
    raise GraphError(f"graph {graph.name!r}: rewriting did not settle after {max_sweeps} "
                     f"sweeps; rules {[r.name for r in rules]} keep matching")


def _sweep_once(graph: Graph, rules: Sequence[Rule], protected: frozenset[str]):
    sweep = _Sweep(graph, protected)
    touched: set[int] = set()
    replaced: dict[int, Rewrite] = {}
    initializers = dict(graph.initializers)
    renames: dict[str, str] = {}
    for node in graph.nodes:
        for rule in rules:
            bound: dict[str, Node] = {}
            matched: list[Node] = []
            if not sweep.match(rule.pattern, node, bound, matched, touched):
                continue
            result = rule.replace(Match(sweep, bound, node))
            if result is None or any(old in sweep.fixed for old in result.renames):
                continue  # declined, or it would rename a graph output
            for old in matched:
                touched.add(id(old))
                replaced[id(old)] = None  # removed
            replaced[id(node)] = result
            initializers.update(result.initializers)
            renames.update(result.renames)
            break
    if not replaced:
        return graph, False
    nodes: list[Node] = []
    for node in graph.nodes:
        if id(node) not in replaced:
            nodes.append(node)
        elif replaced[id(node)] is not None:
            nodes.extend(replaced[id(node)].nodes)
    if renames:
        nodes = [_renamed(node, renames) for node in nodes]
    outputs = tuple(_resolve(name, renames) for name in graph.outputs)
    # Constants the rewrites made dead go now, not at a later prune: folding a chain into a
    # Conv makes a new weight per step, and keeping every generation multiplies the weights'
    # memory while the pipeline runs.
    read = {name for node in nodes for name in node.inputs if name} | set(outputs) | protected
    initializers = {name: value for name, value in initializers.items() if name in read}
    return graph.replace(nodes=tuple(nodes), outputs=outputs, initializers=initializers), True


def _resolve(name: str, renames: dict[str, str]) -> str:
    seen = 0
    while name in renames and seen < 64:
        name = renames[name]
        seen += 1
    return name


def _renamed(node: Node, renames: dict[str, str]) -> Node:
    inputs = tuple(_resolve(name, renames) if name else name for name in node.inputs)
    return node if inputs == node.inputs else node.replace(inputs=inputs)
