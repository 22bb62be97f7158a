"""Imperative automatic differentiation (MXNet 1.x ``mx.autograd``).

While ``record()`` is active, every op applied to arrays that need a gradient is put on a tape
(``portable.tape``: the op, its resolved attributes, its inputs and outputs). ``backward`` walks the tape from the
heads in reverse and applies each op's gradient rule through a GradContext whose ``emit`` runs
ops imperatively: the very rules that the symbolic autodiff pass appends as graph nodes.

Example:
    >>> import portable as pt
    >>> x = pt.nd.array([1.0, 2.0]); x.attach_grad()
    >>> with pt.autograd.record():
    ...     y = (x * x).sum()
    >>> y.backward(); x.grad.asnumpy().tolist()
    [2.0, 4.0]
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from portable.errors import NotDifferentiableError, PortableError
from portable.ir.graph import Node
from portable.ndarray.invoke import invoke
from portable.ndarray.ndarray import NDArray, array, ones_like, zeros_like
from portable.ops.gradients import GradContext
from portable.tape import (TapeEntry, is_recording, is_training, needs_grad, pause,
                           predict_mode, record, record_op, scope, set_recording, set_training,
                           train_mode)

__all__ = ["TapeEntry", "backward", "grad", "is_recording", "is_training", "needs_grad",
           "pause", "predict_mode", "record", "record_op", "set_recording", "set_training",
           "train_mode"]


class _ImperativeGradContext(GradContext):
    """Runs gradient rules eagerly: handles are NDArrays."""

    def __init__(self, entry: TapeEntry) -> None:
        node = Node(entry.op_name, (), (), {}, name=entry.op_name)
        super().__init__(node, entry.op, entry.attrs, entry.inputs, entry.outputs)

    def emit(self, op: str, *inputs: Any, num_outputs: int = 1, **attrs: Any) -> Any:
        return invoke(op, list(inputs), attrs, num_outputs=num_outputs)

    def const(self, value: Any, dtype: Any = None) -> Any:
        value = np.asarray(value, dtype=dtype)
        device = next((x.device for x in self.inputs if x is not None), None)
        return array(value, device=device, dtype=value.dtype)

    def shape(self, handle: Any) -> tuple[int, ...]:
        return handle.shape

    def dtype(self, handle: Any) -> np.dtype:
        return handle.dtype

    def value(self, handle: Any) -> np.ndarray:
        return handle._host_value if handle._host_value is not None else handle.asnumpy()


def _topological_entries(heads: Sequence[Any]) -> list[TapeEntry]:
    """Tape entries reachable from ``heads``, producers before consumers."""
    order: list[TapeEntry] = []
    seen: set[int] = set()
    stack = [(h._entry[0], False) for h in heads if h._entry is not None]
    while stack:
        entry, expanded = stack.pop()
        if expanded:
            order.append(entry)
            continue
        if id(entry) in seen:
            continue
        seen.add(id(entry))
        stack.append((entry, True))
        for x in entry.inputs:
            if x is not None and x._entry is not None and id(x._entry[0]) not in seen:
                stack.append((x._entry[0], False))
    return order


def _accumulate(grads: dict, array: Any, grad: Any) -> None:
    key = id(array)
    if key in grads:
        grads[key] = (array, grads[key][1] + grad)
    else:
        grads[key] = (array, grad)


def _run_backward(heads: Sequence[Any], head_grads: Sequence[Any] | None,
                  create_graph: bool, training: bool) -> dict[int, tuple[Any, Any]]:
    heads = list(heads)
    head_grads = [None] * len(heads) if head_grads is None else list(head_grads)
    if len(head_grads) != len(heads):
        raise PortableError(f"backward got {len(head_grads)} head gradients for "
                            f"{len(heads)} heads")
    grads: dict[int, tuple[Any, Any]] = {}
    for head, grad in zip(heads, head_grads):
        if head._entry is None and head._grad_req == "null":
            raise PortableError("cannot differentiate: the head was not computed from an "
                                "array with attach_grad() inside autograd.record()")
        _accumulate(grads, head, ones_like(head) if grad is None else grad)
    with scope(create_graph, training):
        for entry in reversed(_topological_entries(heads)):
            if not any(o is not None and id(o) in grads for o in entry.outputs):
                continue
            needs = [i for i, x in enumerate(entry.inputs)
                     if needs_grad(x) and i not in entry.op.nondiff_inputs
                     and x.dtype.kind == "f"]
            if not needs:
                continue
            if entry.op.grad is None:
                raise NotDifferentiableError(f"op {entry.op_name} has no gradient rule, but a "
                                             f"recorded gradient must flow through it")
            ctx = _ImperativeGradContext(entry)
            dys = [None if o is None else
                   grads.pop(id(o))[1] if id(o) in grads else ctx.zeros_like(o)
                   for o in entry.outputs]
            for index, dx in enumerate(entry.op.grad(ctx, dys)):
                if dx is not None and index in needs:
                    _accumulate(grads, entry.inputs[index], dx)
    return grads


def backward(heads: Sequence[Any], head_grads: Sequence[Any] | None = None,
             retain_graph: bool = False, train_mode: bool = True) -> None:
    """Compute gradients of ``heads`` into the ``.grad`` of every array with attach_grad."""
    grads = _run_backward(heads, head_grads, False, train_mode)
    for array, grad in grads.values():
        if array._grad is None or array._grad_req == "null":
            continue
        if array._grad_req == "add":
            array._grad += grad
        else:
            grad.copyto(array._grad)
    if not retain_graph:
        for head in heads:
            _clear_tape(head)


def _clear_tape(head: Any) -> None:
    for entry in _topological_entries([head]):
        for out in entry.outputs:
            if out is not None:
                out._entry = None


def grad(heads: Any, variables: Any, head_grads: Any = None, retain_graph: bool | None = None,
         create_graph: bool = False, train_mode: bool = True) -> list:
    """Gradients of ``heads`` with respect to ``variables``, returned rather than stored.

    With ``create_graph=True`` the gradient computation is itself recorded, so the result can
    be differentiated again.
    """
    heads = [heads] if isinstance(heads, NDArray) else list(heads)
    single = isinstance(variables, NDArray)
    variables = [variables] if single else list(variables)
    if head_grads is not None and isinstance(head_grads, NDArray):
        head_grads = [head_grads]
    grads = _run_backward(heads, head_grads, create_graph, train_mode)
    result = [grads[id(v)][1] if id(v) in grads else zeros_like(v) for v in variables]
    if not (create_graph if retain_graph is None else retain_graph):
        for head in heads:
            _clear_tape(head)
    return result
