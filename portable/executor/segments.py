"""Graphs whose shapes depend on values: planned segments with run-time allocation between them.

A memory plan needs every shape before it runs. Some values are only known when the graph runs:
the outputs of ``dynamic_outputs`` ops (NonZero, Unique, Loop's scan outputs, sequences,
optionals), and the values that an op's type rule must read (a Reshape target, a TopK k) when
they are computed at run time. Instead of giving up planning for the whole graph,
``compile_graph`` splits it, for the concrete input types of a call:

1. Scan (``split_graph``): infer types node by node. A node reading nothing of later segments
   whose outputs are static tensors is planned now (the *head*). A ``dynamic_outputs`` node whose
   outputs are not static tensors runs *between* the segments: its kernel is called with None for
   each output the planner cannot place and returns what it made (``portable/backend.py``); a
   chain of dynamic nodes runs there one after the other. A node whose type rule needs a value
   known only at run time (it asks ``ctx.value`` for it, or reads it at a ``shape_inputs``
   position) is planned *later*, with that value; so is every node that reads a value of a
   later node or of a between node (unless it is itself a dynamic op reading only between
   values).
2. The head is one ``CompiledGraph`` (as any graph without dynamic nodes: ``compile_graph``
   then returns a plain CompiledGraph, planned exactly as before). Its outputs are the values
   the later nodes and the caller read, so they stay valid while the rest runs.
3. The later nodes form one graph whose inputs are what they read (graph inputs, head outputs,
   between values) and whose plan is made with the concrete types (and needed values) of a run:
   recursively through ``compile_graph``, so it may split again. Plans are cached per shape
   signature (types, and the bytes of the values planned with), least recently used dropped
   beyond ``plans_kept``.

Sequences and optionals (``portable.ir.types``) are never planned: they live only between
segments and as inputs of later ones (read by dynamic ops).

Example:
    >>> plan = compile_graph(graph, cpu(), {"x": TensorType((4, 5), "float32")})  # doctest: +SKIP
    >>> idx, = plan.run({"x": x})                                                # doctest: +SKIP
    >>> plan.placement()["runtime"]                                              # doctest: +SKIP
    ['idx']
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from portable import profiler, random
from portable.backend import KernelContext
from portable.device import Device
from portable.errors import BindError, PortableError, ShapeError
from portable.executor.compiled import CompiledGraph
from portable.ir.graph import Graph, Node, TensorType
from portable.ir.types import is_tensor, type_of_value
from portable.ops import registry
from portable.passes.infer import FOLD_LIMIT, TypeInfo, infer_node, infer_types

# Plans of later segments kept per segmented graph (one per shape signature seen).
PLANS_KEPT = 16


def plannable(type_: Any) -> bool:
    """Whether a value of this type can be placed in a memory plan: a tensor of known shape."""
    return is_tensor(type_) and type_.is_static


class _NeedsValue(Exception):
    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


class _Probe(registry.InferContext):
    """An InferContext that reports which input's value a rule asked for and lacked."""

    def value(self, index: int) -> np.ndarray:
        if not self.known(index):
            raise _NeedsValue(index)
        return self.values[index]


@dataclass
class Split:
    """Where a graph splits for one set of input types: node indices planned now (``head``),
    run between the segments (``between``), planned later (``later``); the values whose
    run-time values later plans are made with (``needs_value``); the types known now."""

    head: list[int] = field(default_factory=list)
    between: list[int] = field(default_factory=list)
    later: list[int] = field(default_factory=list)
    needs_value: set[str] = field(default_factory=set)
    info: TypeInfo = field(default_factory=TypeInfo)

    @property
    def static(self) -> bool:
        return not self.between and not self.later


def _needed_value(node: Node, op: registry.OpDef, info: TypeInfo) -> str | None:
    """The input whose value the node's type rule needs but lacks (None: it needs none)."""
    types = [info.types.get(name) if name else None for name in node.inputs]
    values = [info.values.get(name) if name else None for name in node.inputs]
    try:
        op.infer(_Probe(node, op, types, values))
    except _NeedsValue as need:
        return node.inputs[need.index]
    except Exception:  # noqa: BLE001 - any other failure is the rule's own, reported by caller
        pass
    for index in op.shape_inputs:
        if index < len(node.inputs) and node.inputs[index] and values[index] is None:
            return node.inputs[index]
    return None


def split_graph(graph: Graph, input_types: Mapping[str, Any] | None = None,
                input_values: Mapping[str, np.ndarray] | None = None,
                fold_limit: int = FOLD_LIMIT) -> Split:
    """Where ``graph`` splits into planned segments for these input types (see the module
    docstring). A graph whose every value is a static tensor gives ``Split.static``."""
    try:  # the common case, one (remembered) inference: nothing is dynamic
        info = infer_types(graph, input_types, input_values, fold_limit=fold_limit)
        if all(plannable(info.types.get(out)) for node in graph.nodes
               for out in node.outputs if out) and all(
                   is_tensor(info.types.get(name)) for name, _ in graph.inputs):
            return Split(head=list(range(len(graph.nodes))), info=info)
    except PortableError:
        pass
    split = Split()
    info = split.info
    for name, type_ in graph.inputs:
        info.types[name] = (input_types or {}).get(name, type_)
    for name, array in graph.initializers.items():
        info.types[name] = TensorType(array.shape, array.dtype)
        info.values[name] = array
    for name, array in (input_values or {}).items():
        info.values[name] = np.asarray(array)
    later: set[str] = set()
    between: set[str] = {name for name, _ in graph.inputs if not is_tensor(info.types[name])}
    for index, node in enumerate(graph.nodes):
        op = registry.get(node.op, node=node)
        read = [name for name in node.inputs if name]
        outputs = [name for name in node.outputs if name]
        if any(name in later for name in read):
            split.later.append(index)
            later.update(outputs)
            continue
        if any(name in between for name in read):
            if op.dynamic_outputs:
                split.between.append(index)
                between.update(outputs)
            else:
                # (a sequence or optional stays one however late the node is planned: refuse
                # now, naming the node, rather than deferring it again and again)
                held = [(i, name) for i, name in enumerate(node.inputs) if name in between
                        and name in info.types and not is_tensor(info.types[name])]
                if held:
                    i, name = held[0]
                    raise ShapeError(f"node {node.name!r} (op {node.op}): input {name!r} "
                                     f"(#{i}) is {info.types[name]!r}; op {node.op} takes "
                                     f"tensors only")
                split.later.append(index)
                later.update(outputs)
            continue
        try:
            infer_node(node, info, fold_limit)
        except ShapeError:
            needed = _needed_value(node, op, info)
            if needed is None:
                raise
            split.needs_value.add(needed)
            split.later.append(index)
            later.update(outputs)
            continue
        if all(plannable(info.types.get(name)) for name in outputs):
            split.head.append(index)
            continue
        if op.dynamic_outputs:
            split.between.append(index)
            between.update(outputs)
            continue
        needed = _needed_value(node, op, info)
        if needed is None:
            unknown = [f"{name!r}: {info.types.get(name)!r}" for name in outputs
                       if not plannable(info.types.get(name))]
            raise ShapeError(f"node {node.name!r} (op {node.op}): output {', '.join(unknown)} "
                             f"has a shape known only at run time, but op {node.op} is not "
                             f"declared dynamic_outputs, so the executor cannot run it between "
                             f"planned segments")
        split.needs_value.add(needed)
        split.later.append(index)
        later.update(outputs)
    return split


def compile_graph(graph: Graph, device: Device, input_types: Mapping[str, Any] | None = None,
                  constant_inputs: Mapping[str, np.ndarray] | None = None, *,
                  optimize: str = "none", plan: str = "both",
                  memory_budget: int | None = None,
                  plans_kept: int = PLANS_KEPT) -> "CompiledGraph | SegmentedGraph":
    """A plain ``CompiledGraph`` when every value of ``graph`` has a static shape for these
    input types, else a ``SegmentedGraph``. Both run with ``run(feeds) -> outputs``."""
    for name, type_ in graph.inputs:
        type_ = (input_types or {}).get(name, type_)
        if is_tensor(type_) and not type_.is_static and name not in (constant_inputs or {}):
            raise BindError(f"graph {graph.name!r}: input {name!r} has shape {type_!r}; "
                            f"give a concrete shape to run it")
    declared = dict(graph.inputs)
    if input_types and any(declared.get(name, type_) != type_
                           for name, type_ in input_types.items()):
        # the concrete types become the graph's own, so that the types inferred here are
        # remembered for this very graph object, which the plan's passes then start from
        graph = graph.replace(inputs=tuple((name, input_types.get(name, type_))
                                           for name, type_ in graph.inputs))
    input_types = None
    options = dict(optimize=optimize, plan=plan, memory_budget=memory_budget)
    if not any(registry.get(node.op, node=node).dynamic_outputs for node in graph.nodes) and \
            all(is_tensor(type_) for _, type_ in graph.inputs):
        # The common case, exactly as before: one CompiledGraph (no scan). Only a type rule
        # asking for a value known at run time (a TopK k computed from data) fails there.
        try:
            return CompiledGraph(graph, device, None, constant_inputs, **options)
        except ShapeError:
            split = split_graph(graph, None, constant_inputs)
            if split.static:
                raise
    else:
        split = split_graph(graph, None, constant_inputs)
    if split.static:
        return CompiledGraph(graph, device, None, constant_inputs, **options)
    return SegmentedGraph(graph, device, split, input_types, constant_inputs, optimize=optimize,
                          plan=plan, memory_budget=memory_budget, plans_kept=plans_kept)


class SegmentedGraph:
    """A graph run as a planned head, dynamic nodes between, and later segments planned per
    shape signature (see the module docstring). Use ``compile_graph`` to make one.

    Returned arrays are views into the plans' arenas or arrays made at run time: the next run
    may overwrite them, as with ``CompiledGraph.run``.
    """

    def __init__(self, graph: Graph, device: Device, split: Split,
                 input_types: Mapping[str, Any] | None = None,
                 constant_inputs: Mapping[str, np.ndarray] | None = None, *,
                 optimize: str = "none", plan: str = "both", memory_budget: int | None = None,
                 plans_kept: int = PLANS_KEPT) -> None:
        self.graph = graph
        self.device = device
        self.backend = device.backend
        self.split = split
        self._options = dict(optimize=optimize, plan=plan, memory_budget=memory_budget)
        self.plans_kept = max(1, int(plans_kept))
        types = {name: (input_types or {}).get(name, type_) for name, type_ in graph.inputs}
        for name, type_ in types.items():
            if is_tensor(type_) and not type_.is_static:
                raise BindError(f"graph {graph.name!r}: input {name!r} has shape {type_!r}; "
                                f"give a concrete shape to run it")
        self.input_types = types
        nodes = graph.nodes
        head = [nodes[i] for i in split.head]
        self.between = [nodes[i] for i in split.between]
        later = [nodes[i] for i in split.later]
        made_head = {out for node in head for out in node.outputs if out}
        made_later = {out for node in later for out in node.outputs if out}
        read_after = {name for node in self.between + later for name in node.inputs if name}
        head_outputs = [name for name in dict.fromkeys(list(graph.outputs) + sorted(read_after))
                        if name in made_head]
        self.head: CompiledGraph | None = None
        constants = dict(constant_inputs or {})
        if head_outputs:
            head_read = {name for node in head for name in node.inputs if name}
            head_graph = Graph(
                head, [(name, types[name]) for name, _ in graph.inputs
                       if name in head_read and name not in constants],
                head_outputs, _initializers(graph, head_read, constants),
                f"{graph.name}:head")
            self.head = CompiledGraph(head_graph, device, optimize=optimize, plan=plan,
                                      memory_budget=memory_budget)
        self._between_attrs = [registry.get(n.op, node=n).resolve_attrs(n)
                               for n in self.between]
        self._between_kernels = [self.backend.kernel(n.op) for n in self.between]
        between_read = {name for node in self.between for name in node.inputs if name}
        # constants the between nodes (or the caller, as graph outputs) read, on the device
        held = _initializers(graph, between_read | set(graph.outputs), constants)
        self._constants = {name: self.backend.from_numpy(np.require(value, requirements="CA"))
                           for name, value in held.items()}
        later_read = {name for node in later for name in node.inputs if name}
        self._later_initializers = _initializers(graph, later_read, constants)
        self._later_inputs = [name for name in dict.fromkeys(
            name for node in later for name in node.inputs if name)
            if name not in made_later and name not in self._later_initializers]
        self._later_nodes = later
        self._later_outputs = [name for name in dict.fromkeys(graph.outputs)
                               if name in made_later]
        self._wanted_values = set(split.needs_value) | {
            node.inputs[index] for node in later
            for index in registry.get(node.op, node=node).shape_inputs
            if index < len(node.inputs) and node.inputs[index]}
        self._tails: OrderedDict[tuple, Any] = OrderedDict()
        self.plans_made = 0  # later-segment plans made (a miss of the shape-signature cache)

    # -- running ---------------------------------------------------------------------------
    def run(self, feeds: Mapping[str, Any]) -> list[Any]:
        """Run on device arrays (and sequences / optionals) ``feeds``; returns the outputs."""
        env: dict[str, Any] = dict(self._constants)
        for name, _ in self.graph.inputs:
            if name in env:
                continue
            if name not in feeds:
                raise BindError(f"graph {self.graph.name!r}: input {name!r} was not given")
            env[name] = feeds[name]
        if self.head is not None:
            head_feeds = {name: env[name] for name in self.head.graph.input_names}
            env.update(zip(self.head.graph.outputs, self.head.run(head_feeds)))
        self._run_between(env)
        if self._later_nodes:
            tail_feeds = {name: env[name] for name in self._later_inputs}
            tail = self.tail(tail_feeds)
            running = tail.graph.input_names
            outputs = tail.run({name: tail_feeds[name] for name in running})
            env.update(zip(tail.graph.outputs, outputs))
        return [env[name] for name in self.graph.outputs]

    def _run_between(self, env: dict[str, Any]) -> None:
        """Run the dynamic nodes, each output not given a buffer (None) made by its kernel."""
        ctx = KernelContext(self.backend.xp, random.generator(), self.backend)
        for node, kernel, attrs in zip(self.between, self._between_kernels,
                                       self._between_attrs):
            ctx.node = node
            inputs = [env[name] if name else None for name in node.inputs]
            started = profiler.op_started()
            try:
                made = kernel(ctx, inputs, [None] * len(node.outputs), attrs)
            except PortableError:
                raise
            except Exception as exc:
                shapes = ", ".join(_describe(a) for a in inputs)
                raise ShapeError(f"node {node.name!r} (op {node.op}) failed on device "
                                 f"{self.device} with inputs [{shapes}]: "
                                 f"{type(exc).__name__}: {exc}") from exc
            if started:
                profiler.op_finished(node.op, started)
            if made is None or len(made) != len(node.outputs):
                raise ShapeError(f"node {node.name!r} (op {node.op}): its kernel on device "
                                 f"{self.device} returned {_describe(made)}, not one value per "
                                 f"output ({len(node.outputs)}), as a dynamic_outputs kernel "
                                 f"must")
            for name, value in zip(node.outputs, made):
                if name:
                    env[name] = value

    def tail(self, feeds: Mapping[str, Any]) -> "CompiledGraph | SegmentedGraph":
        """The plan of the later segments for the values ``feeds`` (made on first use of their
        shape signature, least recently used dropped beyond ``plans_kept``)."""
        types = {name: type_of_value(value) for name, value in feeds.items()}
        values = {name: np.asarray(self.backend.to_numpy(feeds[name]))
                  for name in self._value_inputs(types)}
        key = tuple((name, types[name], values[name].tobytes() if name in values else None)
                    for name in self._later_inputs)
        plan = self._tails.pop(key, None)
        if plan is None:
            initializers = dict(self._later_initializers)
            initializers.update(values)
            inputs = [(name, types[name]) for name in self._later_inputs if name not in values]
            graph = Graph(self._later_nodes, inputs, self._later_outputs, initializers,
                          f"{self.graph.name}:later")
            plan = compile_graph(graph, self.device, optimize=self._options["optimize"],
                                 plan=self._options["plan"],
                                 memory_budget=self._tail_budget(), plans_kept=self.plans_kept)
            self.plans_made += 1
            while len(self._tails) >= self.plans_kept:
                self._tails.popitem(last=False)
        self._tails[key] = plan  # most recently used last
        return plan

    def _value_inputs(self, types: Mapping[str, Any]) -> list[str]:
        """Later-segment inputs planned with their values: those a type rule asked for, and
        those read at a ``shape_inputs`` position."""
        return [name for name in self._later_inputs
                if name in self._wanted_values and is_tensor(types.get(name))]

    def _tail_budget(self) -> int | None:
        budget = self._options["memory_budget"]
        if budget is None or self.head is None:
            return budget
        return max(0, budget - planned_bytes(self.head))

    # -- reports ---------------------------------------------------------------------------
    def placement(self) -> dict[str, list[str]]:
        """Which values were planned (placed in an arena: the head's, and the later plans made
        so far) and which were allocated at run time (the between nodes' outputs)."""
        planned = list(self.head.plan.offsets) if self.head is not None else []
        runtime = [out for node in self.between for out in node.outputs if out]
        for plan in self._tails.values():
            inner = placement(plan)
            planned += [name for name in inner["planned"] if name not in planned]
            runtime += [name for name in inner["runtime"] if name not in runtime]
        later = [out for node in self._later_nodes for out in node.outputs if out]
        return {"planned": planned, "runtime": runtime,
                "planned_per_shape": [name for name in later if name not in runtime]}

    def type_of(self, name: str) -> Any:
        return self.split.info.types.get(name)


def placement(plan: "CompiledGraph | SegmentedGraph") -> dict[str, list[str]]:
    """``{"planned": [...], "runtime": [...], "planned_per_shape": [...]}`` for either kind of
    plan: a CompiledGraph plans every value it computes."""
    if isinstance(plan, SegmentedGraph):
        return plan.placement()
    return {"planned": list(plan.plan.offsets), "runtime": [], "planned_per_shape": []}


def planned_bytes(plan: "CompiledGraph | SegmentedGraph") -> int:
    """Arena, workspace, constants and inputs a plan holds (the head's for a segmented one)."""
    if isinstance(plan, SegmentedGraph):
        return 0 if plan.head is None else planned_bytes(plan.head)
    return (plan.plan.arena_bytes + plan.workspace_bytes + plan.constant_bytes
            + plan.input_bytes)


def _initializers(graph: Graph, read: set[str],
                  constants: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    found = {name: value for name, value in graph.initializers.items() if name in read}
    found.update({name: np.asarray(value) for name, value in constants.items() if name in read})
    return found


def _describe(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(_describe(v) for v in value)}]"
    shape = getattr(value, "shape", None)
    return f"{tuple(shape)} {getattr(value, 'dtype', '')}" if shape is not None \
        else type(value).__name__
