"""A graph compiled for one device and one set of input types: a flat list of kernel calls.

Stages of ``CompiledGraph.__init__``: infer types and the values known while planning; drop the
nodes whose outputs are all known (they were evaluated while planning, so constants fold for
free); give every remaining computed value a buffer (view ops alias their input instead); bind
each node to its kernel. ``run`` then only looks up buffers and calls kernels, which write into
preallocated outputs (destination-passing style).

Example:
    >>> plan = CompiledGraph(graph, cpu())  # doctest: +SKIP
    >>> y, = plan.run({"x": x})            # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from portable import random
from portable.backend import KernelContext
from portable.device import Device
from portable.errors import BindError, PortableError, ShapeError
from portable.ir.graph import Graph, Node, TensorType
from portable.ops import registry
from portable.passes.infer import TypeInfo, infer_types


@dataclass(frozen=True)
class Step:
    """One kernel call: the node, its kernel (None for a view), resolved attributes."""

    node: Node
    kernel: Any
    attrs: dict
    view: bool
    index: int  # position of the node in the graph


class CompiledGraph:
    """``graph`` planned for ``device`` with the given input types.

    Args:
        graph: the graph to run.
        device: where it runs.
        input_types: concrete types for the graph inputs (defaults: the declared ones).
        constant_inputs: input values fixed at compile time (folded like initializers).
    """

    def __init__(self, graph: Graph, device: Device,
                 input_types: Mapping[str, TensorType] | None = None,
                 constant_inputs: Mapping[str, np.ndarray] | None = None) -> None:
        self.graph = graph
        self.device = device
        self.backend = device.backend
        self.info: TypeInfo = infer_types(graph, input_types, constant_inputs)
        for name, type_ in graph.inputs:
            if not self.info.types[name].is_static:
                raise BindError(f"graph {graph.name!r}: input {name!r} has shape "
                                f"{self.info.types[name]!r}; give a concrete shape to run it")
        known = self.info.values
        self.constants = {name: self.backend.from_numpy(np.require(value, requirements='C'))
                          for name, value in known.items()
                          if name not in graph.input_names or name in (constant_inputs or {})}
        self.steps: list[Step] = []
        self.buffers: dict[str, Any] = {}
        for index, node in enumerate(graph.nodes):
            if all(not out or out in known for out in node.outputs):
                continue  # fully evaluated while planning
            op = registry.get(node.op, node=node)
            attrs = op.resolve_attrs(node)
            if op.view:
                self.steps.append(Step(node, None, attrs, True, index))
                continue
            kernel = self.backend.kernel(node.op)
            for out in node.outputs:
                if out:
                    type_ = self.info.types[out]
                    self.buffers[out] = self.backend.empty(type_.shape, type_.dtype)
            self.steps.append(Step(node, kernel, attrs, False, index))

    def type_of(self, name: str) -> TensorType:
        return self.info.types[name]

    def step_of_node(self, node_index: int) -> int:
        """The first step that runs node ``node_index`` or a later one (for running segments)."""
        return next((i for i, step in enumerate(self.steps) if step.index >= node_index),
                    len(self.steps))

    def bind(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """An environment holding constants, the fed inputs and the plan's buffers."""
        env: dict[str, Any] = dict(self.constants)
        for name, _ in self.graph.inputs:
            if name in env:
                continue
            if name not in feeds:
                raise BindError(f"graph {self.graph.name!r}: input {name!r} was not given")
            array = feeds[name]
            if tuple(array.shape) != self.info.types[name].shape:
                raise BindError(f"graph {self.graph.name!r}: input {name!r} has shape "
                                f"{tuple(array.shape)}, the plan was compiled for "
                                f"{self.info.types[name].shape}")
            env[name] = array
        env.update(self.buffers)
        return env

    def execute(self, env: dict[str, Any], start: int = 0, stop: int | None = None) -> None:
        """Run steps ``start:stop`` in ``env``."""
        ctx = KernelContext(self.backend.xp, random.generator(), self.backend)
        for step in self.steps[start:stop]:
            node = step.node
            if step.view:
                out_type = self.info.types[node.outputs[0]]
                env[node.outputs[0]] = self.backend.xp.reshape(env[node.inputs[0]],
                                                               out_type.shape)
                continue
            ctx.node = node
            inputs = [env[name] if name else None for name in node.inputs]
            outputs = [env[name] if name else None for name in node.outputs]
            try:
                step.kernel(ctx, inputs, outputs, step.attrs)
            except PortableError:
                raise
            except Exception as exc:
                shapes = ", ".join(str(tuple(a.shape)) if a is not None else "-"
                                   for a in inputs)
                raise ShapeError(f"node {node.name!r} (op {node.op}) failed on device "
                                 f"{self.device} with input shapes [{shapes}]: "
                                 f"{type(exc).__name__}: {exc}") from exc

    def run(self, feeds: Mapping[str, Any]) -> list[Any]:
        """Run the whole plan on device arrays ``feeds`` (by input name); returns the outputs.

        Returned arrays are the plan's own buffers: the next run overwrites them.
        """
        env = self.bind(feeds)
        self.execute(env)
        return [env[name] for name in self.graph.outputs]
