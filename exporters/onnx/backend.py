"""The ``onnx.backend`` interface over portable: ``prepare`` a model once, ``run`` it many times.

``prepare`` imports the model with every initializer as a constant; each distinct set of input
shapes is then planned once: constants are folded (weights that the model computes, such as
ConstantOfShape outputs, included), the planned memory is checked against the machine, and the
graph is compiled for the device (``portable.executor.segments.compile_graph``: one
``CompiledGraph``, or, where values decide shapes at run time (NonZero, Unique, a Reshape
target computed from data), planned segments with run-time allocation between them).

portable plans shapes ahead of running, so an input whose *value* decides shapes (a Reshape
target, Slice bounds, reduction axes fed at run time) is best known while planning: small
integer inputs (at most ``SPECIALISE_LIMIT`` elements, rank <= 1) and scalars are planned as
constants, and the plan is keyed by their values as well as by the shapes. Any other value a
type rule needs (a TopK k computed from data) splits the plan: what follows it is planned once
a run has computed it, per value (``portable.executor.segments``).

Example:
    >>> import exporters.onnx.backend as backend
    >>> rep = backend.prepare("model.onnx", device="CPU")      # doctest: +SKIP
    >>> outputs = rep.run([x])                                  # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep, namedtupledict

from portable.device import Device, as_device
from portable.errors import BindError, PortableError, ShapeError
from portable.executor.compiled import CompiledGraph
from portable.executor.feeds import check_feeds, fed_type, to_device
from portable.executor.segments import SegmentedGraph, compile_graph, plannable, split_graph
from portable.ir.graph import Graph, TensorType
from portable.predict.resident import machine_bytes

from portable.io.onnx.importer import import_graph
from portable.io.onnx import versions

# Constant subgraphs whose outputs hold up to this many elements are evaluated once when a
# plan is made (onnxruntime folds them too); larger ones run on every call.
FOLD_LIMIT = 1 << 27
# A plan may use at most this share of the machine's physical memory.
MEMORY_SHARE = 0.8
# Integer inputs of rank <= 1 with at most this many elements (and every scalar) are planned
# with their values; at most PLANS_KEPT plans are cached per prepared model.
SPECIALISE_LIMIT = 64
PLANS_KEPT = 8


def device_of(device: Any) -> Device:
    """A portable Device from an onnx.backend device string ("CPU", "CUDA:1", "OPENCL")."""
    if isinstance(device, Device):
        return device
    return as_device(str(device).strip().lower())


class PortableRep(BackendRep):
    """A prepared model: ``run(inputs)`` returns the outputs as NumPy arrays.

    Args:
        graph: the imported graph, its initializers all constants.
        device: where it runs.
        optimize: the optimisation level of ``portable.passes.pipeline`` (none, basic, all).
    """

    def __init__(self, graph: Graph, device: Device, optimize: str = "all") -> None:
        self.graph = graph
        self.device = device
        self.optimize = optimize
        self.input_names = [name for name, _ in graph.inputs]
        self.output_names = list(graph.outputs)
        self._plans: dict[tuple, CompiledGraph | SegmentedGraph] = {}
        self._shape_feeds = _shape_feeds(graph)
        self._outputs_type = None
        # The last call's input signature and plan (see ``_repeat``), or None.
        self._last: tuple | None = None

    def _feeds(self, inputs: Any) -> dict[str, np.ndarray]:
        return check_feeds(inputs, self.graph.input_types, label=f"graph {self.graph.name!r}")

    def plan(self, feeds: Mapping[str, np.ndarray]) -> CompiledGraph | SegmentedGraph:
        """The compiled plan for these inputs' shapes (and specialised values), made on first
        use: a SegmentedGraph when values decide shapes (NonZero, a run-time Reshape target),
        whose later segments are planned per shape signature as they come."""
        declared = self.graph.input_types
        # (sequences and optionals are never planned with their values: fed_type keys them)
        values = {name: array for name, array in feeds.items() if isinstance(array, np.ndarray)
                  and (specialised(array) or name in self._shape_feeds)}
        types = {name: fed_type(array, declared[name]) for name, array in feeds.items()}
        key = tuple((types[name], _value_key(array) if name in values else None)
                    for name, array in feeds.items())
        plan = self._plans.pop(key, None)
        if plan is None:
            folded = fold_constants(self.graph, types, values)
            try:
                plan = compile_graph(folded, self.device, folded.input_types,
                                     optimize=self.optimize)
            except MemoryError as exc:
                raise ShapeError(f"graph {self.graph.name!r}: out of memory while planning for "
                                 f"input types {types}") from exc
            while len(self._plans) >= PLANS_KEPT:
                self._plans.pop(next(iter(self._plans)))
        self._plans[key] = plan  # most recently used last
        return plan

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Run on ``inputs`` (a list in input order, a dict by name, or one array)."""
        last = self._last
        if last is not None:
            placed = self._repeat(last, inputs)
            if placed is not None:
                return self._execute(last[1], placed)
        feeds = self._feeds(inputs)
        plan = self.plan(feeds)
        # (inputs planned with their values are constants of the plan: not copied again)
        running = frozenset(plan.graph.input_names)
        self._remember(feeds, plan, running)
        backend = self.device.backend
        return self._execute(plan, {name: to_device(backend, array)
                                    for name, array in feeds.items() if name in running})

    def _remember(self, feeds: Mapping[str, Any], plan: Any, running: frozenset) -> None:
        """Keep this call's signature for ``_repeat`` when the plan depends on nothing but
        the inputs' shapes and dtypes: every input a numeric array, none planned with its
        value. Each entry is (name, shape, dtype, whether the plan takes it)."""
        signature = []
        for name, array in feeds.items():
            if (not isinstance(array, np.ndarray) or array.dtype.kind in "OSUV"
                    or specialised(array) or name in self._shape_feeds):
                self._last = None
                return
            signature.append((name, array.shape, array.dtype, name in running))
        self._last = (tuple(signature), plan, self.device.backend.from_numpy,
                      tuple(entry[0] for entry in signature))

    @staticmethod
    def _repeat(last: tuple, inputs: Any) -> dict | None:
        """The plan's device feeds when ``inputs`` are C-ordered NumPy arrays of exactly the
        last call's names, shapes and dtypes (``last``: what ``_remember`` kept), else None.
        A model called again and again on one shape (the common case) then skips the general
        checks and the plan lookup: about 5 us of a batch-1 call that onnxruntime finishes in
        4 us whole. Any difference takes the general path, which checks the inputs and raises
        its errors as before."""
        signature, _, place, names = last
        kind = type(inputs)
        if kind is dict:
            if len(inputs) != len(signature):
                return None
            values = map(inputs.get, names)
        elif kind is np.ndarray:
            if len(signature) != 1:
                return None
            values = (inputs,)
        elif kind is list or kind is tuple:
            values = inputs
            if len(values) != len(signature):
                return None
        else:
            return None
        placed = {}
        for value, (name, shape, dtype, taken) in zip(values, signature):
            # (a dtype compares by identity first: NumPy hands out one object per builtin
            # dtype, and == costs more than the rest of the check)
            if (type(value) is not np.ndarray or value.shape != shape
                    or (value.dtype is not dtype and value.dtype != dtype)
                    or not value.flags.c_contiguous):
                return None
            if taken:
                placed[name] = place(value)
        return placed

    def _execute(self, plan: Any, placed: dict) -> tuple[np.ndarray, ...]:
        """``plan`` run on its device feeds ``placed``; the outputs as the caller's copies."""
        backend = self.device.backend
        try:
            outputs = plan.run(placed)
            backend.synchronize()
            host = [_host(backend, out) for out in outputs]
        except MemoryError as exc:
            raise ShapeError(f"graph {self.graph.name!r}: out of memory while running") from exc
        if self._outputs_type is None:  # (onnx's namedtupledict builds a class: once)
            self._outputs_type = namedtupledict("Outputs", self.output_names)
        return self._outputs_type(*host)


def _host(backend: Any, value: Any) -> Any:
    """An output as the caller owns it: a NumPy copy (a list of them for a sequence, None
    for an empty optional)."""
    if type(value) is np.ndarray:  # (the NumPy backend's own arrays, the common case)
        return value.copy()
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [_host(backend, item) for item in value]
    return np.array(backend.to_numpy(value), copy=True)


def _shape_feeds(graph: Graph) -> set[str]:
    """Graph inputs that some node reads at a ``shape_inputs`` position (their values decide
    shapes, so plans are made with them)."""
    from portable.ops import registry

    names = {name for name, _ in graph.inputs}
    found = set()
    for node in graph.nodes:
        for index in registry.get(node.op, node=node).shape_inputs:
            if index < len(node.inputs) and node.inputs[index] in names:
                found.add(node.inputs[index])
    return found


def _value_key(array: np.ndarray) -> Any:
    """What identifies a value planned with its value: its bytes, or for a string tensor (an
    object array, whose bytes are references) its strings."""
    return tuple(array.reshape(-1).tolist()) if array.dtype == object else array.tobytes()


def specialised(array: np.ndarray) -> bool:
    """Whether an input is planned with its value (it may decide shapes)."""
    return array.ndim == 0 or (array.ndim == 1 and array.dtype.kind in "biu"
                               and array.size <= SPECIALISE_LIMIT)


def fold_constants(graph: Graph, input_types: Mapping[str, TensorType],
                   input_values: Mapping[str, np.ndarray] | None = None) -> Graph:
    """``graph`` with every node whose outputs are known for these input types (and values)
    replaced by constants, after checking that the planned tensors fit in memory. Inputs
    given values become constants too (the graph keeps only the other inputs, typed). Values
    known only at run time (``portable.executor.segments``) are left to the run."""
    info = split_graph(graph, input_types, input_values, fold_limit=FOLD_LIMIT).info
    check_memory(graph, {name: type_ for name, type_ in info.types.items() if plannable(type_)})
    fixed = set(input_values or {})
    kept = [node for node in graph.nodes
            if not all(not out or out in info.values for out in node.outputs)]
    read = {name for node in kept for name in node.inputs if name} | set(graph.outputs)
    constants = {name: value for name, value in info.values.items()
                 if name in read and (name not in graph.input_types or name in fixed)}
    inputs = tuple((name, input_types[name]) for name, _ in graph.inputs if name not in fixed)
    return graph.replace(nodes=tuple(kept), inputs=inputs, initializers=constants)


def check_memory(graph: Graph, types: Mapping[str, TensorType]) -> None:
    """Raise ShapeError when the tensors of a plan (one buffer each) cannot fit in memory."""
    total, largest = 0, ("", 0)
    for name, type_ in types.items():
        size = int(np.prod([d or 0 for d in type_.shape], dtype=object)) * type_.dtype.itemsize
        total += size
        if size > largest[1]:
            largest = (name, size)
    limit = machine_bytes() * MEMORY_SHARE
    if total > limit:
        raise ShapeError(f"graph {graph.name!r}: its tensors need {total / 2**30:.1f} GiB "
                         f"(largest: {largest[0]!r}, {types[largest[0]]!r}), more than the "
                         f"{limit / 2**30:.1f} GiB this machine can give")


class PortableBackend(Backend):
    """portable as an ``onnx.backend`` (``onnx.backend.test.BackendTest`` drives it)."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> PortableRep:
        """Import ``model`` (ModelProto, bytes or path) for repeated runs on ``device``.

        Keyword arguments: ``base_dir`` (external data folder), ``optimize`` (the level of
        ``portable.passes.pipeline``: ``none``, ``basic`` or ``all``, the default)."""
        target = device_of(device)
        target.backend  # fail now, naming the device, when its backend cannot load
        graph, _ = import_graph(model, base_dir=kwargs.get("base_dir"), params_as_inputs=False)
        return PortableRep(graph, target, kwargs.get("optimize", "all"))

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[Any, tuple[int, ...]]] | None = None,
                 **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Run one node on ``inputs`` (given for its non-empty inputs, in order)."""
        opset = int(kwargs.get("opset_version", versions.newest_opset()))
        names = [name for name in node.input if name]
        arrays = [np.asarray(a) for a in (inputs.values() if isinstance(inputs, Mapping)
                                          else inputs)]
        if len(arrays) != len(names):
            raise BindError(f"node {node.name!r} (op {node.op_type}) has {len(names)} inputs, "
                            f"got {len(arrays)} arrays")
        graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                                      a.shape) for n, a in zip(names, arrays)]
        graph_outputs = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
        model = helper.make_model(
            helper.make_graph([node], f"node_{node.op_type}", graph_inputs, graph_outputs),
            opset_imports=[helper.make_opsetid("", opset)])
        return cls.prepare(model, device).run(arrays)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """True when the device's backend loads here ("CPU", "CUDA", "OPENCL")."""
        try:
            device_of(device).backend
        except (PortableError, ValueError):
            return False
        return True


prepare = PortableBackend.prepare
run_model = PortableBackend.run_model
run_node = PortableBackend.run_node
supports_device = PortableBackend.supports_device
is_compatible = PortableBackend.is_compatible
