"""The on-device predictor: load a model in little memory, plan it once, run it many times.

Stages of ``Predictor.__init__``: read the graph (``formats.load_graph``: ONNX through the
dependency-light wire-format reader, or the deployment format, whose weights stay in the
memory-mapped file); give the batch to the inputs' leading dims; compile for the device with
the optimisation pipeline and the memory plan (``CompiledGraph``), which refuses a plan over
the memory budget before allocating anything: inputs over the budget before the graph is
optimised, constant folding never computes a value larger than the budget (it is left to the
plan), and weights are copied (a constant-filled weight made dense) only once the plan, the
weights and the inputs are known to fit. ``predict`` only checks the inputs, runs the
plan's kernels in its preallocated arena and copies the outputs out.

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
from portable.executor.compiled import CompiledGraph
from portable.executor.feeds import check_feeds
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
            fixed batch is rebatched, including Reshape targets that baked the batch in).
        memory_budget: None, bytes, or a size such as ``"64MB"``: a model whose plan, weights
            and inputs need more is refused (MemoryBudgetError) before anything runs.
        optimize: the optimisation level, ``none``, ``basic`` or ``all``.

    Example:
        >>> p = Predictor("lenet.onnx", batch_size=4)     # doctest: +SKIP
        >>> logits, = p.predict(np.zeros((4, 1, 28, 28), np.float32))  # doctest: +SKIP
    """

    def __init__(self, model: str | os.PathLike, device: str | Device = "cpu",
                 batch_size: int = 1, memory_budget: int | str | None = None,
                 optimize: str = "all") -> None:
        self.model_path = os.fspath(model)
        self.device = as_device(device)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise PortableError(f"batch_size must be a positive int, got {batch_size!r}")
        self.batch_size = batch_size
        self.budget_bytes = None if memory_budget is None else parse_size(memory_budget)
        name = os.path.basename(self.model_path)
        graph = _with_batch(load_graph(self.model_path), batch_size, name)
        self.input_types: dict[str, TensorType] = graph.input_types
        self.input_names = list(self.input_types)
        self.output_names = list(graph.outputs)
        try:
            self._plan = CompiledGraph(graph, self.device, self.input_types, optimize=optimize,
                                       memory_budget=self.budget_bytes)
        except PortableError as exc:
            raise type(exc)(f"{name}: {exc}") from exc
        except MemoryError as exc:
            raise ShapeError(f"{name}: out of memory while planning for batch size "
                             f"{batch_size}") from exc
        self._label = name

    @property
    def output_types(self) -> dict[str, TensorType]:
        """The type of each output of one ``predict`` call, by name."""
        return {name: self._plan.type_of(name) for name in self.output_names}

    @property
    def memory(self) -> dict[str, int | None]:
        """Bytes the predictor holds: ``plan_bytes`` (arena + kernel workspace),
        ``weights_bytes`` (constants the kernels read), ``mapped_weights_bytes`` (those read
        straight from the memory-mapped file), ``io_bytes`` (inputs), ``total_bytes`` and
        ``budget_bytes``."""
        plan = self._plan
        planned = plan.plan.arena_bytes + plan.workspace_bytes
        return {
            "plan_bytes": planned,
            "weights_bytes": plan.constant_bytes,
            "mapped_weights_bytes": sum(int(v.nbytes) for v in plan.constants.values()
                                        if is_mapped(v)),
            "io_bytes": plan.input_bytes,
            "total_bytes": planned + plan.constant_bytes + plan.input_bytes,
            "budget_bytes": self.budget_bytes,
        }

    def predict(self, inputs: Any) -> list[np.ndarray]:
        """Run the model.

        Args:
            inputs: one array (one-input models), a list in input order, or a dict by name;
                floats of another precision are converted, other dtypes must match.

        Returns:
            The outputs in ``output_names`` order, as NumPy arrays the caller owns.
        """
        feeds = check_feeds(inputs, self.input_types, cast=True, label=self._label)
        backend = self._plan.backend
        try:
            outputs = self._plan.run({name: backend.from_numpy(array)
                                      for name, array in feeds.items()})
            backend.synchronize()
            return [np.array(backend.to_numpy(out), copy=True) for out in outputs]
        except MemoryError as exc:
            raise ShapeError(f"{self._label}: out of memory while running") from exc

    def __repr__(self) -> str:
        return (f"Predictor({self.model_path!r}, device={self.device}, "
                f"batch_size={self.batch_size}, inputs={self.input_types})")


def _with_batch(graph: Graph, batch: int, label: str) -> Graph:
    """``graph`` with concrete input types: leading dims set to ``batch``; any other unknown
    dim is refused, naming the input."""
    for name, type_ in graph.inputs:
        unknown = [axis for axis, dim in enumerate(type_.shape) if dim is None and axis > 0]
        if unknown:
            raise BindError(f"{label}: input {name!r} ({type_!r}) has unknown dims at axes "
                            f"{unknown}; portable plans memory ahead and needs every dim but "
                            f"the batch (export the model with fixed sizes)")
    batched = [name for name, type_ in graph.inputs if type_.rank]
    if all(type_.shape[0] == batch for name, type_ in graph.inputs if type_.rank):
        return graph
    if any(type_.shape[0] is None for name, type_ in graph.inputs if type_.rank):
        inputs = tuple((name, TensorType((batch,) + type_.shape[1:], type_.dtype)
                        if type_.rank else type_) for name, type_ in graph.inputs)
        return graph.replace(inputs=inputs)
    return set_batch(graph, batch, batched)

