"""The on-device predictor: load a model in little memory, plan it once, run it many times.

Stages of ``Predictor.__init__``: read the graph (``formats.load_graph``: ONNX through the
dependency-light wire-format reader, or the deployment format, whose weights stay in the
memory-mapped file); give the batch to the inputs' leading dims; compile for the device with
the optimisation pipeline and the memory plan (``compile_graph``: one ``CompiledGraph``, or
planned segments around ops whose output shapes depend on values), which refuses a plan over
the memory budget before allocating anything: inputs over the budget before the graph is
optimised, constant folding never computes a value larger than the budget (it is left to the
plan), and weights are copied (a constant-filled weight made dense) only once the plan, the
weights and the inputs are known to fit. ``predict`` only checks the inputs, runs the
plan's kernels in its preallocated arena and copies the outputs out.

Symbolic dims (a sequence length, a batch left open with ``batch_size=None``): each call is
planned for its concrete shapes, and plans are cached per shape signature (the
``plans_kept`` most recently used). With ``max_shapes`` (``{"input_ids": (1, 512)}``) the
plan for the largest shapes is made at load, so a ``memory_budget`` it would exceed is
refused before anything runs, and a call with larger shapes is refused naming the input.

Resident memory is then the arena and workspace, the weights the kernels touch (pages of the
mapped file, shared with the page cache) and the few values folded at load (a Conv's weights
after a BatchNormalization is folded into them).

Example:
    >>> p = Predictor("runs/lenet.portable", memory_budget="64MB")   # doctest: +SKIP
    >>> probabilities, = p.predict(images)                           # doctest: +SKIP
    >>> p.memory["total_bytes"]                                      # doctest: +SKIP
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from portable.device import Device, as_device
from portable.errors import BindError, PortableError, ShapeError
from collections import OrderedDict
from typing import Mapping, Sequence

from portable.executor.compiled import CompiledGraph
from portable.executor.feeds import check_feeds
from portable.executor.segments import SegmentedGraph, compile_graph, placement
from portable.ir.graph import Graph, TensorType
from portable.passes.set_batch import set_batch
from portable.predict.deployment import is_mapped
from portable.predict.formats import load_graph
from portable.sizes import parse_size


class Predictor:
    """A model compiled for one device and batch size, within an optional memory budget.

    Args:
        model: an ONNX file or a deployment file (``portable export --format portable``).
        device: ``"cpu"``, ``"opencl"``, ``"opencl:1"``... or a Device.
        batch_size: the leading dim of every input of rank >= 1 (a model saved with another
            fixed batch is rebatched, including Reshape targets that baked the batch in);
            None leaves a symbolic leading dim open (planned per call, as any symbolic dim).
        memory_budget: None, bytes, or a size such as ``"64MB"``: a model whose plan, weights
            and inputs need more is refused (MemoryBudgetError) before anything runs.
        optimize: the optimisation level, ``none``, ``basic`` or ``all``.
        max_shapes: the largest shape each input with symbolic dims will be given, by name:
            planned at load (and held against ``memory_budget``); larger calls are refused.
        plans_kept: plans cached per shape signature (least recently used dropped).

    Example:
        >>> p = Predictor("lenet.onnx", batch_size=4)     # doctest: +SKIP
        >>> logits, = p.predict(np.zeros((4, 1, 28, 28), np.float32))  # doctest: +SKIP
        >>> lm = Predictor("gpt.onnx", memory_budget="64MB",
        ...                max_shapes={"input_ids": (1, 512)})  # doctest: +SKIP
    """

    def __init__(self, model: str | os.PathLike, device: str | Device = "cpu",
                 batch_size: int | None = 1, memory_budget: int | str | None = None,
                 optimize: str = "all",
                 max_shapes: Mapping[str, Sequence[int]] | None = None,
                 plans_kept: int = 8) -> None:
        self.model_path = os.fspath(model)
        self.device = as_device(device)
        if batch_size is not None and (isinstance(batch_size, bool)
                                       or not isinstance(batch_size, int) or batch_size < 1):
            raise PortableError(f"batch_size must be a positive int or None, got "
                                f"{batch_size!r}")
        if isinstance(plans_kept, bool) or not isinstance(plans_kept, int) or plans_kept < 1:
            raise PortableError(f"plans_kept must be a positive int, got {plans_kept!r}")
        self.batch_size = batch_size
        self.budget_bytes = None if memory_budget is None else parse_size(memory_budget)
        name = os.path.basename(self.model_path)
        self._label = name
        graph = _with_batch(load_graph(self.model_path), batch_size, name)
        self._graph = graph
        self._optimize = optimize
        self.input_types: dict[str, TensorType] = graph.input_types
        self.input_names = list(self.input_types)
        self.output_names = list(graph.outputs)
        self.plans_kept = plans_kept
        self._plans: OrderedDict[tuple, CompiledGraph | SegmentedGraph] = OrderedDict()
        self.plans_made = 0
        self.max_shapes = _max_shapes(max_shapes or {}, self.input_types, name)
        symbolic = [n for n, t in self.input_types.items() if not t.is_static]
        if not symbolic:  # one plan, made now (as always)
            self._plan = self._plan_for(self.input_types)
        elif set(symbolic) <= set(self.max_shapes):  # the largest plan, made (and held) now
            self._plan = self._plan_for({n: TensorType(self.max_shapes.get(n, t.shape),
                                                       t.dtype)
                                         for n, t in self.input_types.items()})
        else:
            self._plan = None  # planned on the first call

    def _plan_for(self, types: Mapping[str, TensorType]) -> CompiledGraph | SegmentedGraph:
        """The plan for these concrete input types, from the cache or made (and cached)."""
        key = tuple(types[name].shape for name in self.input_names)
        plan = self._plans.pop(key, None)
        if plan is None:
            try:
                plan = compile_graph(self._graph, self.device, dict(types),
                                     optimize=self._optimize, memory_budget=self.budget_bytes,
                                     plans_kept=self.plans_kept)
            except PortableError as exc:
                raise type(exc)(f"{self._label}: {exc}") from exc
            except MemoryError as exc:
                raise ShapeError(f"{self._label}: out of memory while planning for input "
                                 f"shapes {dict(zip(self.input_names, key))}") from exc
            self.plans_made += 1
            while len(self._plans) >= self.plans_kept:
                self._plans.popitem(last=False)
        self._plans[key] = plan  # most recently used last
        return plan

    @property
    def output_types(self) -> dict[str, TensorType]:
        """The type of each output of one ``predict`` call (of the latest plan), by name:
        dims that depend on values or on symbolic input dims are None."""
        if self._plan is None:
            from portable.passes.infer import infer_types

            return {name: infer_types(self._graph).types.get(name)
                    for name in self.output_names}
        return {name: self._plan.type_of(name) for name in self.output_names}

    @property
    def memory(self) -> dict[str, int | None]:
        """Bytes the predictor holds: ``plan_bytes`` (arena, kernel workspace and what kernels
        keep, e.g. a reordered weight), ``weights_bytes`` (constants the kernels read),
        ``mapped_weights_bytes`` (those read straight from the memory-mapped file),
        ``io_bytes`` (inputs), ``total_bytes`` and ``budget_bytes``, for the latest plan (the
        largest one, with ``max_shapes``, until a call); ``plans`` (plans cached) and
        ``runtime_tensors``: the values allocated at run time (outputs of ops whose shapes
        depend on values), which no plan holds."""
        plan = self._plan
        if plan is None:
            return {"plan_bytes": None, "weights_bytes": None, "mapped_weights_bytes": None,
                    "io_bytes": None, "total_bytes": None, "budget_bytes": self.budget_bytes,
                    "plans": 0, "runtime_tensors": []}
        head = plan.head if isinstance(plan, SegmentedGraph) else plan
        if head is None:
            planned = weights = inputs = mapped = 0
        else:
            planned = head.plan.arena_bytes + head.workspace_bytes + head.held_bytes
            weights, inputs = head.constant_bytes, head.input_bytes
            mapped = sum(int(v.nbytes) for v in head.constants.values() if is_mapped(v))
        return {
            "plan_bytes": planned,
            "weights_bytes": weights,
            "mapped_weights_bytes": mapped,
            "io_bytes": inputs,
            "total_bytes": planned + weights + inputs,
            "budget_bytes": self.budget_bytes,
            "plans": len(self._plans),
            "runtime_tensors": placement(plan)["runtime"],
        }

    def tensors(self) -> dict[str, list[str]]:
        """Which values the latest plan placed in its arena (``planned``), which its later
        segments plan per shape (``planned_per_shape``) and which are allocated at run time
        (``runtime``)."""
        return placement(self._plan) if self._plan is not None else \
            {"planned": [], "runtime": [], "planned_per_shape": []}

    def predict(self, inputs: Any) -> list[np.ndarray]:
        """Run the model.

        Args:
            inputs: one array (one-input models), a list in input order, or a dict by name;
                floats of another precision are converted, other dtypes must match.

        Returns:
            The outputs in ``output_names`` order, as NumPy arrays the caller owns.
        """
        feeds = check_feeds(inputs, self.input_types, cast=True, label=self._label)
        for name, limit in self.max_shapes.items():
            shape = feeds[name].shape
            if any(d > m for d, m in zip(shape, limit)):
                raise BindError(f"{self._label}: input {name!r} has shape {shape}, larger than "
                                f"its declared maximum {tuple(limit)} (max_shapes)")
        plan = self._plan
        if plan is None or any(feeds[name].shape != plan_type.shape for name, plan_type in
                               ((n, self._planned_type(plan, n)) for n in self.input_names)):
            plan = self._plan = self._plan_for({name: TensorType(array.shape, array.dtype)
                                                for name, array in feeds.items()})
        backend = plan.backend
        try:
            outputs = plan.run({name: backend.from_numpy(array)
                                for name, array in feeds.items()})
            backend.synchronize()
            return [_host(backend, out) for out in outputs]
        except MemoryError as exc:
            raise ShapeError(f"{self._label}: out of memory while running") from exc

    @staticmethod
    def _planned_type(plan: CompiledGraph | SegmentedGraph, name: str) -> TensorType:
        if isinstance(plan, SegmentedGraph):
            return plan.input_types[name]
        return plan.info.types[name]

    def __repr__(self) -> str:
        return (f"Predictor({self.model_path!r}, device={self.device}, "
                f"batch_size={self.batch_size}, inputs={self.input_types})")


def _host(backend, value):
    """An output as the caller owns it: a NumPy copy (a list of them for a sequence, None for
    an empty optional)."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [_host(backend, item) for item in value]
    return np.array(backend.to_numpy(value), copy=True)


def _max_shapes(given: Mapping[str, Sequence[int]], types: Mapping[str, TensorType],
                label: str) -> dict[str, tuple[int, ...]]:
    """``max_shapes`` checked against the inputs: known names, their ranks, positive dims
    agreeing with the dims the model fixes."""
    checked = {}
    for name, shape in given.items():
        if name not in types:
            raise BindError(f"{label}: max_shapes names {name!r}, which is not an input; its "
                            f"inputs are {list(types)}")
        shape = tuple(int(d) for d in shape)
        type_ = types[name]
        if len(shape) != type_.rank or any(d < 1 for d in shape) or any(
                fixed is not None and fixed != d for fixed, d in zip(type_.shape, shape)):
            raise BindError(f"{label}: max_shapes[{name!r}] = {shape} does not fit input "
                            f"{name!r} ({type_!r}): give its rank, positive dims, and the "
                            f"dims the model fixes as they are")
        checked[name] = shape
    return checked


def _with_batch(graph: Graph, batch: int | None, label: str) -> Graph:
    """``graph`` with the leading dims of its inputs set to ``batch`` (None: left as the model
    declares them); other symbolic dims stay symbolic (planned per call)."""
    if batch is None:
        return graph
    batched = [name for name, type_ in graph.inputs if type_.rank]
    if all(type_.shape[0] == batch for name, type_ in graph.inputs if type_.rank):
        return graph
    if any(type_.shape[0] is None for name, type_ in graph.inputs if type_.rank):
        inputs = tuple((name, TensorType((batch,) + type_.shape[1:], type_.dtype)
                        if type_.rank else type_) for name, type_ in graph.inputs)
        return graph.replace(inputs=inputs)
    return set_batch(graph, batch, batched)

