"""The interface a gradient rule is written against, shared by symbolic autodiff and autograd.

A gradient rule is a function ``rule(g: GradContext, dys) -> [dx or None per input]``. It builds
the gradient out of ops only (``g.emit("Mul", a, b)``), never out of array code, so the same rule
appends nodes to a graph (``portable.passes.autodiff``) or runs them eagerly on NDArrays
(``portable.autograd``). Handles are opaque: value names in one, NDArrays in the other.

Example (the rule of Mul):
    >>> def mul_grad(g, dys):  # doctest: +SKIP
    ...     a, b = g.inputs
    ...     return [g.sum_to(g.emit("Mul", dys[0], b), a), g.sum_to(g.emit("Mul", dys[0], a), b)]
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Sequence

import numpy as np

from portable.ir.graph import Node
from portable.ops.registry import OpDef

Handle = Any


class GradContext(ABC):
    """What a gradient rule sees: the forward node's attributes, input and output handles, and
    a way to emit ops and constants."""

    def __init__(self, node: Node, op: OpDef, attrs: dict[str, Any],
                 inputs: Sequence[Handle | None], outputs: Sequence[Handle | None]) -> None:
        self.node = node
        self.op = op
        self.attrs = attrs
        self.inputs = list(inputs)
        self.outputs = list(outputs)

    @abstractmethod
    def emit(self, op: str, *inputs: Handle | None, num_outputs: int = 1,
             **attrs: Any) -> Handle | tuple[Handle, ...]:
        """Apply ``op``; returns one handle, or a tuple when ``num_outputs > 1``."""

    @abstractmethod
    def const(self, value: Any, dtype: Any = None) -> Handle:
        """A constant tensor."""

    @abstractmethod
    def shape(self, handle: Handle) -> tuple[int, ...]:
        """The static shape of a handle."""

    @abstractmethod
    def dtype(self, handle: Handle) -> np.dtype:
        """The dtype of a handle."""

    @abstractmethod
    def value(self, handle: Handle) -> np.ndarray:
        """The value of a handle that is a constant (e.g. a Reduce's axes); raises otherwise."""

    # -- helpers shared by many rules -------------------------------------------------------

    def scalar(self, value: float, like: Handle) -> Handle:
        """A 0-d constant with ``like``'s dtype (for broadcasting arithmetic)."""
        return self.const(np.asarray(value, dtype=self.dtype(like)))

    def sum_to(self, grad: Handle, like: Handle) -> Handle:
        """Undo broadcasting: sum ``grad`` down to the shape of ``like``."""
        target, shape = self.shape(like), self.shape(grad)
        if target == shape:
            return grad
        lead = len(shape) - len(target)
        axes = list(range(lead)) + [lead + i for i, d in enumerate(target)
                                    if d == 1 and shape[lead + i] != 1]
        if axes:
            grad = self.emit("ReduceSum", grad, self.const(np.asarray(axes, np.int64)),
                             keepdims=1)
        return self.emit("Reshape", grad, self.const(np.asarray(target, np.int64)))

    def zeros_like(self, like: Handle) -> Handle:
        """Zeros of ``like``'s shape and dtype (not ``like * 0``, which turns inf into nan)."""
        return self.emit("ConstantOfShape", self.const(np.asarray(self.shape(like), np.int64)),
                         value=np.zeros(1, self.dtype(like)))
