"""Symbolic autodiff: append the gradient graph built from the ops' gradient rules.

Stages: (1) find the nodes on a path from a ``wrt`` value to an output (only they need a
gradient); (2) walk them in reverse order, and for each node whose outputs received gradients,
call its op's rule through a GradContext that appends nodes (types inferred as they are
appended, so rules can ask for shapes); (3) sum the contributions each value received. Head
gradients become new graph inputs named ``<output>_head_grad``.

The rules are the same ones ``portable.autograd`` runs eagerly on NDArrays.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from portable.errors import GraphError, NotDifferentiableError, ShapeError
from portable.ir.graph import Graph, Node, TensorType
from portable.ops import registry
from portable.ops.gradients import GradContext
from portable.passes.infer import TypeInfo, infer_node, infer_types

HEAD_GRAD_SUFFIX = "_head_grad"


class _GraphGradContext(GradContext):
    """Emits gradient nodes into a growing node list, inferring types as it goes."""

    def __init__(self, builder: "_Appender", node: Node, op: registry.OpDef) -> None:
        attrs = op.resolve_attrs(node)
        super().__init__(node, op, attrs, [i or None for i in node.inputs],
                         [o or None for o in node.outputs])
        self._builder = builder

    def emit(self, op: str, *inputs: Any, num_outputs: int = 1, **attrs: Any) -> Any:
        return self._builder.emit(op, inputs, num_outputs, attrs, origin=self.node.name)

    def const(self, value: Any, dtype: Any = None) -> str:
        return self._builder.const(np.asarray(value, dtype=dtype))

    def shape(self, handle: str) -> tuple[int, ...]:
        return self._builder.info.types[handle].shape

    def dtype(self, handle: str) -> np.dtype:
        return self._builder.info.types[handle].dtype

    def value(self, handle: str) -> np.ndarray:
        try:
            return self._builder.info.values[handle]
        except KeyError:
            raise ShapeError(f"node {self.node.name!r} (op {self.node.op}): the gradient rule "
                             f"needs the value of {handle!r}, which is not a constant") from None


class _Appender:
    def __init__(self, graph: Graph, info: TypeInfo) -> None:
        self.info = info
        self.nodes: list[Node] = []
        self.initializers: dict[str, np.ndarray] = {}
        taken = set(info.types) | set(graph.initializers)
        self._taken = taken
        self._count = 0

    def fresh(self, prefix: str) -> str:
        while True:
            self._count += 1
            name = f"{prefix}_g{self._count}"
            if name not in self._taken:
                self._taken.add(name)
                return name

    def emit(self, op: str, inputs: Sequence[Any], num_outputs: int, attrs: dict,
             origin: str) -> Any:
        short = op.rsplit(".", 1)[-1]
        outs = tuple(self.fresh(f"{origin}/{short}") for _ in range(num_outputs))
        node = Node(op, tuple(i or "" for i in inputs), outs, attrs,
                    name=f"{origin}/grad/{short}{self._count}")
        infer_node(node, self.info)
        self.nodes.append(node)
        return outs[0] if num_outputs == 1 else outs

    def const(self, value: np.ndarray) -> str:
        name = self.fresh("const")
        self.initializers[name] = value
        self.info.types[name] = TensorType(value.shape, value.dtype)
        self.info.values[name] = value
        return name

    def add_all(self, terms: list[str], origin: str) -> str:
        total = terms[0]
        for term in terms[1:]:
            total = self.emit("Add", (total, term), 1, {}, origin)
        return total


def _relevant_nodes(graph: Graph, wrt: set[str], outputs: set[str]) -> list[Node]:
    """Nodes on some path from a ``wrt`` value to an output."""
    reached = set(wrt)
    forward = []
    for node in graph.nodes:
        if any(i in reached for i in node.inputs if i):
            reached.update(o for o in node.outputs if o)
            forward.append(node)
    needed = set(outputs)
    relevant = []
    for node in reversed(forward):
        if any(o in needed for o in node.outputs if o):
            needed.update(i for i in node.inputs if i)
            relevant.append(node)
    relevant.reverse()
    return relevant


def differentiate(graph: Graph, wrt: Sequence[str], info: TypeInfo | None = None,
                  heads: Sequence[str] | None = None) -> tuple[Graph, dict[str, str]]:
    """Append the gradient of ``graph``'s outputs with respect to ``wrt``.

    Args:
        graph: the forward graph.
        wrt: names of inputs (or any values) to differentiate with respect to.
        info: its type analysis (computed when not given).
        heads: the outputs whose head gradient is fed (default: all outputs).

    Returns:
        The graph with head-gradient inputs and the gradients appended as extra outputs, and a
        map ``wrt name -> gradient value name``. A ``wrt`` value that no output depends on gets
        a zero gradient.
    """
    info = info if info is not None else infer_types(graph)
    info = TypeInfo(dict(info.types), dict(info.values))
    # Only floating-point outputs carry gradients (an accuracy or an argmax does not).
    heads = [h for h in (graph.outputs if heads is None else heads)
             if info.types[h].dtype.kind == "f"]
    for name in wrt:
        if name not in info.types:
            raise GraphError(f"graph {graph.name!r}: cannot differentiate with respect to "
                             f"{name!r}: no such value")
    appender = _Appender(graph, info)
    head_inputs = []
    grads: dict[str, list[str]] = {}
    for out in heads:
        head = f"{out}{HEAD_GRAD_SUFFIX}"
        head_inputs.append((head, info.types[out]))
        info.types[head] = info.types[out]
        grads.setdefault(out, []).append(head)

    float_wrt = {w for w in wrt if info.types[w].dtype.kind == "f"}
    for node in reversed(_relevant_nodes(graph, float_wrt, set(heads))):
        if not any(o in grads for o in node.outputs if o):
            continue
        op = registry.get(node.op, node=node)
        needs = [i for i, name in enumerate(node.inputs)
                 if name and i not in op.nondiff_inputs and info.types[name].dtype.kind == "f"]
        if not needs:
            continue
        if op.grad is None:
            raise NotDifferentiableError(
                f"node {node.name!r}: op {node.op} has no gradient rule, but a gradient must "
                f"flow through it to reach {sorted(float_wrt)[:3]}")
        ctx = _GraphGradContext(appender, node, op)
        dys = []
        for out in node.outputs:
            if out and out in grads:
                dys.append(appender.add_all(grads.pop(out), node.name))
            elif out:
                dys.append(ctx.zeros_like(out))
            else:
                dys.append(None)
        dxs = list(op.grad(ctx, dys))
        for index, (name, dx) in enumerate(zip(node.inputs, dxs)):
            if name and dx is not None and index in needs:
                grads.setdefault(name, []).append(dx)

    result: dict[str, str] = {}
    for name in wrt:
        terms = grads.get(name)
        if terms:
            result[name] = appender.add_all(terms, f"{name}/grad")
        else:
            zero = np.zeros(info.types[name].shape, info.types[name].dtype)
            result[name] = appender.const(zero)
    new_graph = graph.replace(
        nodes=graph.nodes + tuple(appender.nodes),
        inputs=graph.inputs + tuple(head_inputs),
        outputs=graph.outputs + tuple(result[name] for name in wrt),
        initializers={**graph.initializers, **appender.initializers})
    return new_graph, result
