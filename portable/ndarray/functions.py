"""``nd.<op>`` for every declared op, NDArray operators, and MXNet 1.x convenience names.

The op functions are generated from the op table (snake_case names, as in ``portable.sym``).
Tensor inputs may be given positionally or by their ONNX input name (``nd.reshape(x,
shape=(2, -1))``), as NDArrays or as host data, which becomes a constant on the first
input's device.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from portable import autograd
from portable.dtypes import to_onnx
from portable.ndarray.indexing import getitem, setitem
from portable.ndarray.invoke import constant_like, invoke
from portable.ndarray.ndarray import NDArray, array
from portable.ops import registry
from portable.ops.naming import generate


def _as_input(value: Any, like: NDArray | None) -> Any:
    if value is None or isinstance(value, NDArray):
        return value
    host = np.asarray(value)
    if like is None:
        return array(host, dtype=host.dtype if host.dtype.kind != "f" else np.float32)
    if host.dtype.kind in "iub" and like.dtype.kind != "f":
        return array(host, device=like.device, dtype=host.dtype)
    if host.dtype.kind in "iu" and isinstance(value, (list, tuple)):
        return array(host.astype(np.int64), device=like.device, dtype=np.int64)
    return constant_like(host, like)


def _make(op_name: str) -> Callable[..., Any]:
    op = registry.get(op_name)
    input_names = [s.rstrip("?*").lower() for s in op.inputs]

    def fn(*inputs: Any, out: NDArray | None = None, num_outputs: int | None = None,
           **kwargs: Any) -> Any:
        inputs = list(inputs)
        for key in [k for k in kwargs if k.lower() in input_names and k not in op.attrs]:
            index = input_names.index(key.lower())
            inputs.extend([None] * (index + 1 - len(inputs)))
            inputs[index] = kwargs.pop(key)
        like = next((x for x in inputs if isinstance(x, NDArray)), None)
        arrays = [_as_input(x, like) for x in inputs]
        while arrays and arrays[-1] is None:
            arrays.pop()
        return invoke(op_name, arrays, kwargs, num_outputs=num_outputs, out=out)
    return fn


def generated_functions() -> dict[str, Callable[..., Any]]:
    """snake_case name -> imperative function, for every ONNX-domain op in the table."""
    return generate(_make, "Imperative")


# -- operators ----------------------------------------------------------------------------------


def _binary(op_name: str, reverse: bool = False, inplace: bool = False):
    def method(self: NDArray, other: Any) -> Any:
        other = _as_input(other, self) if not isinstance(other, NDArray) else other
        a, b = (other, self) if reverse else (self, other)
        return invoke(op_name, [a, b], out=self if inplace else None)
    return method


def _axes(axis: Any, like: NDArray) -> Any:
    if axis is None:
        return None
    axes = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    return array(np.asarray(axes, np.int64), device=like.device, dtype=np.int64)


def _reduce(op_name: str):
    def method(self: NDArray, axis: Any = None, keepdims: bool = False) -> NDArray:
        return invoke(op_name, [self, _axes(axis, self)], {"keepdims": int(keepdims)})
    method.__name__ = op_name
    return method


def _reshape(self: NDArray, *shape: Any, **kwargs: Any) -> NDArray:
    shape = kwargs.get("shape", shape[0] if len(shape) == 1 and not isinstance(
        shape[0], (int, np.integer)) else shape)
    target = array(np.asarray(shape, np.int64), device=self.device, dtype=np.int64)
    return invoke("Reshape", [self, target])


def _transpose(self: NDArray, *axes: Any) -> NDArray:
    axes = axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else axes
    return invoke("Transpose", [self], {"perm": list(axes)} if axes else {})


def _argmax(op_name: str):
    def method(self: NDArray, axis: int = 0, keepdims: bool = False) -> NDArray:
        return invoke(op_name, [self], {"axis": axis, "keepdims": int(keepdims)})
    return method


def _unary(op_name: str):
    def method(self: NDArray) -> NDArray:
        return invoke(op_name, [self])
    method.__name__ = op_name.lower()
    return method


def _astype(self: NDArray, dtype: Any, copy: bool = True) -> NDArray:
    if not copy and np.dtype(dtype) == self.dtype:
        return self
    return invoke("Cast", [self], {"to": to_onnx(dtype)})


def _backward(self: NDArray, out_grad: NDArray | None = None, retain_graph: bool = False,
              train_mode: bool = True) -> None:
    autograd.backward([self], None if out_grad is None else [out_grad], retain_graph,
                      train_mode)


def install_operators() -> None:
    """Attach arithmetic, comparison, indexing, ``astype``, ``backward`` and MXNet-style
    methods to NDArray."""
    NDArray.astype = _astype
    NDArray.backward = _backward
    NDArray.__getitem__ = getitem
    NDArray.__setitem__ = setitem
    for dunder, op in (("add", "Add"), ("sub", "Sub"), ("mul", "Mul"), ("truediv", "Div"),
                       ("pow", "Pow")):
        setattr(NDArray, f"__{dunder}__", _binary(op))
        setattr(NDArray, f"__r{dunder}__", _binary(op, reverse=True))
        setattr(NDArray, f"__i{dunder}__", _binary(op, inplace=True))
    for dunder, op in (("gt", "Greater"), ("lt", "Less"), ("eq", "Equal")):
        setattr(NDArray, f"__{dunder}__", _binary(op))
    NDArray.__ne__ = lambda self, other: invoke("Not", [self == other])
    NDArray.__ge__ = lambda self, other: invoke("Not", [self < other])
    NDArray.__le__ = lambda self, other: invoke("Not", [self > other])
    NDArray.__hash__ = object.__hash__
    NDArray.__neg__ = _unary("Neg")
    NDArray.__abs__ = _unary("Abs")
    NDArray.__matmul__ = lambda self, other: invoke("MatMul", [self, other])
    for name, op in (("sum", "ReduceSum"), ("mean", "ReduceMean"), ("max", "ReduceMax"),
                     ("min", "ReduceMin")):
        setattr(NDArray, name, _reduce(op))
    NDArray.argmax = _argmax("ArgMax")
    NDArray.argmin = _argmax("ArgMin")
    for name, op in (("exp", "Exp"), ("log", "Log"), ("sqrt", "Sqrt"), ("abs", "Abs"),
                     ("relu", "Relu"), ("sigmoid", "Sigmoid"), ("tanh", "Tanh")):
        setattr(NDArray, name, _unary(op))
    NDArray.square = lambda self: invoke("Mul", [self, self])
    NDArray.reshape = _reshape
    NDArray.transpose = _transpose
    NDArray.T = property(lambda self: invoke("Transpose", [self]))
    NDArray.flatten = lambda self: invoke("Flatten", [self], {"axis": 1})
    NDArray.norm = lambda self: invoke("Sqrt", [invoke("ReduceSum", [self * self],
                                                       {"keepdims": 0})])
    NDArray.clip = lambda self, a_min, a_max: invoke(
        "Clip", [self, constant_like(a_min, self), constant_like(a_max, self)])
    NDArray.softmax = lambda self, axis=-1: invoke("Softmax", [self], {"axis": axis})


def mxnet_aliases() -> dict[str, Callable[..., Any]]:
    """Functions under MXNet 1.x names that differ from the ONNX-derived ones."""
    return {
        "dot": lambda a, b: invoke("MatMul", [a, b]),
        "sum": lambda x, axis=None, keepdims=False: x.sum(axis, keepdims),
        "mean": lambda x, axis=None, keepdims=False: x.mean(axis, keepdims),
        "max": lambda x, axis=None, keepdims=False: x.max(axis, keepdims),
        "min": lambda x, axis=None, keepdims=False: x.min(axis, keepdims),
        "square": lambda x: x.square(),
        "maximum": lambda a, b: invoke("Max", [a, _as_input(b, a)]),
        "minimum": lambda a, b: invoke("Min", [a, _as_input(b, a)]),
        "concatenate": lambda arrays, axis=0: invoke("Concat", list(arrays), {"axis": axis}),
        "stack": lambda arrays, axis=0: invoke(
            "Concat", [invoke("Unsqueeze", [a, _axes(axis, a)]) for a in arrays],
            {"axis": axis}),
    }
