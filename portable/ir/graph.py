"""The graph IR: immutable Values, Nodes and Graphs with ONNX operator semantics.

A Graph is a topologically ordered tuple of Nodes. Values are referred to by name, as in ONNX; the
empty name ``""`` marks an absent optional input or output. Graph inputs carry a declared
TensorType (or a SequenceType / OptionalType of ``portable.ir.types``: values that are never
planned); every other Value's type is an analysis (see ``portable.passes.infer``), kept in a side
table rather than written onto nodes, so passes stay pure functions ``Graph -> Graph``.

Subgraphs (control flow): a node attribute may hold a Graph (If's branches, Loop's and Scan's
body). A body may read values of the scopes around it by name (ONNX outer-scope references).
The importer makes those references explicit, once: each body's free names (read but not
defined in it, through nested bodies too) are appended, in one order, both as extra trailing
inputs of the node and as extra trailing inputs of the body, whose ``captures`` lists them. So
dependency order, pruning, CSE, the verifier and the memory planner see them as ordinary
inputs of the node, and the runner binds a body's inputs by position, never by looking up
names in an enclosing scope (a pass that renames the outer value renames only the node's
input). The ONNX exporter drops them again: the body keeps referring to the names it captured.
An If's two branches capture the same list (the union of both).

Example:
    >>> from portable.ir import Graph, Node, TensorType
    >>> g = Graph(nodes=(Node("Relu", ("x",), ("y",)),),
    ...           inputs=(("x", TensorType((2, 3), "float32")),), outputs=("y",))
    >>> g.producer("y").op
    'Relu'
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping

import numpy as np

Dim = int
PRIVATE_DOMAIN = "portable"
# Standard ONNX domains besides ai.onnx: their ops are ONNX ops (imported and exported with
# their domain and its opset), named "<domain>.<op>" like private ones ("ai.onnx.ml.Binarizer").
ONNX_EXTRA_DOMAINS = ("ai.onnx.ml", "ai.onnx.preview.training", "ai.onnx.preview")


@dataclass(frozen=True)
class TensorType:
    """A tensor's static type: shape (a tuple of ints; None entries are unknown) and dtype."""

    shape: tuple[int | None, ...]
    dtype: np.dtype

    def __init__(self, shape: Iterable[int | None], dtype: Any = "float32") -> None:
        object.__setattr__(self, "shape", tuple(None if d is None else int(d) for d in shape))
        object.__setattr__(self, "dtype", np.dtype(dtype))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(d is not None for d in self.shape)

    @property
    def size(self) -> int:
        """Elements of a static type, as an exact Python int: a shape that a file declares
        cannot wrap around to a small count, as an int64 product would."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __repr__(self) -> str:
        dims = "x".join("?" if d is None else str(d) for d in self.shape)
        return f"{self.dtype.name}[{dims}]"


def _freeze(value: Any) -> Any:
    """Make an attribute value hashable and immutable (lists become tuples, arrays read-only)."""
    if isinstance(value, np.ndarray):
        frozen = value.copy()
        frozen.setflags(write=False)
        return frozen
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    return value


@dataclass(frozen=True)
class Node:
    """One op application. ``op`` is the qualified op name: ``"Conv"`` for ONNX ops,
    ``"portable.ConvWeightGrad"`` for ops of the private domain."""

    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    name: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        frozen = {k: _freeze(v) for k, v in dict(self.attrs).items()}
        object.__setattr__(self, "attrs", MappingProxyType(frozen))
        if not self.name:
            first = next((o for o in self.outputs if o), "?")
            object.__setattr__(self, "name", f"{self.op.rsplit('.', 1)[-1]}:{first}")

    # Nodes are compared by identity of content; attrs may hold arrays, so hash the names only.
    def __hash__(self) -> int:
        return hash((self.op, self.inputs, self.outputs, self.name))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Node):
            return NotImplemented
        return (self.op, self.inputs, self.outputs, self.name) == (
            other.op, other.inputs, other.outputs, other.name) and attrs_equal(
                self.attrs, other.attrs)

    @property
    def domain(self) -> str:
        return self.op.rsplit(".", 1)[0] if "." in self.op else ""

    def replace(self, **changes: Any) -> "Node":
        fields = dict(op=self.op, inputs=self.inputs, outputs=self.outputs,
                      attrs=dict(self.attrs), name=self.name)
        fields.update(changes)
        return Node(**fields)


def attrs_equal(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray)
                    and x.dtype == y.dtype and np.array_equal(x, y)):
                return False
        elif x != y:
            return False
    return True


@dataclass(frozen=True)
class Graph:
    """An immutable, topologically ordered computation graph.

    Args:
        nodes: nodes in topological order.
        inputs: ``(name, TensorType)`` pairs for values fed from outside (data and parameters).
        outputs: names of the values the graph returns.
        initializers: constant tensors by name (weights, folded constants); read-only arrays.
        name: a label for messages.
        captures: the trailing inputs that stand for values of an enclosing scope (a subgraph's
            outer-scope references, see the module docstring); empty for a top-level graph.
    """

    nodes: tuple[Node, ...]
    inputs: tuple[tuple[str, TensorType], ...]
    outputs: tuple[str, ...]
    initializers: Mapping[str, np.ndarray] = field(default_factory=dict)
    name: str = "graph"
    captures: tuple[str, ...] = ()

    # Graphs are compared by content (``graph_equal``): initializers hold arrays, which the
    # generated __eq__ cannot compare. The hash covers what equal graphs share by name only,
    # so that equal graphs hash alike (as Node's does).
    def __hash__(self) -> int:
        return hash((self.name, self.input_names, self.outputs, self.captures, len(self.nodes)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return graph_equal(self, other)

    def __post_init__(self) -> None:
        object.__setattr__(self, "captures", tuple(self.captures))
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "inputs", tuple((n, t) for n, t in self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        frozen = {}
        for key, value in dict(self.initializers).items():
            arr = np.asarray(value)
            if arr.flags.writeable:
                arr = arr.copy()
                arr.setflags(write=False)
            frozen[key] = arr
        object.__setattr__(self, "initializers", MappingProxyType(frozen))

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.inputs)

    @property
    def input_types(self) -> dict[str, TensorType]:
        return dict(self.inputs)

    def producers(self) -> dict[str, Node]:
        """Map every value name computed by a node to that node."""
        return {out: node for node in self.nodes for out in node.outputs if out}

    def producer(self, value: str) -> Node | None:
        return self.producers().get(value)

    def consumers(self) -> dict[str, list[Node]]:
        """Map every value name to the nodes that read it, in graph order."""
        users: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in node.inputs:
                if name:
                    users.setdefault(name, []).append(node)
        return users

    def replace(self, **changes: Any) -> "Graph":
        fields = dict(nodes=self.nodes, inputs=self.inputs, outputs=self.outputs,
                      initializers=self.initializers, name=self.name, captures=self.captures)
        fields.update(changes)
        return Graph(**fields)

    def __str__(self) -> str:
        from portable.ir.printer import format_graph

        return format_graph(self)


def graph_equal(a: Graph, b: Graph) -> bool:
    """Whether two graphs hold the same nodes, interface and constants (names included)."""
    if a is b:
        return True
    if (a.nodes, a.inputs, a.outputs, a.name, a.captures) != (
            b.nodes, b.inputs, b.outputs, b.name, b.captures):
        return False
    return a.initializers.keys() == b.initializers.keys() and all(
        attrs_equal({"v": a.initializers[k]}, {"v": b.initializers[k]})
        for k in a.initializers)


_counter = itertools.count()


def fresh_name(prefix: str) -> str:
    """A value or node name that no other call returns in this process."""
    return f"{prefix}_{next(_counter)}"
