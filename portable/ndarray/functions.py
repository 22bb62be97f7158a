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
from portable.errors import OpError, ShapeError
from portable.ndarray.indexing import getitem, setitem
from portable.ndarray.invoke import constant_like, invoke, plain_calls, run_plain
from portable.ndarray.ndarray import NDArray, array
from portable.ops import registry
from portable.ops.naming import generate, mxnet_attributes, place_keyword_inputs


# (type, value, dtype, device's id, engine) -> the constant NDArray a Python scalar operand
# becomes: made once, as a new array per ``x + 1`` cost a fifth of a tiny op. Kernels never
# write their inputs, and the arrays never reach the user, so sharing them is safe. An array's
# Device is the one instance kept for its device (``ndarray.kept_device``): its id names the
# device without hashing the dataclass, and the cached array holds it, so no other object can
# take the id while the entry lives. The engine is the one whose var the constant holds: it is
# stored under the engine that made it, and looked up under the engine of the other operand's
# var (no get_engine call), which is the engine the op runs on whenever the op can run at all.
_scalars: dict[Any, NDArray] = {}
_SCALAR_TYPES = (int, float, bool)


def _as_input(value: Any, like: NDArray | None) -> Any:
    if value is None or isinstance(value, NDArray):
        return value
    if like is not None and type(value) in _SCALAR_TYPES:
        cached = _scalars.get(_scalar_key(value, like, like._var._owner))
        if cached is None:
            if len(_scalars) >= 1024:  # (NaN never matches itself: keep the table bounded)
                _scalars.clear()
            cached = _as_array(value, like)
            if value or type(value) is not float:  # (0.0 == -0.0: a key cannot tell them)
                _scalars[_scalar_key(value, like, cached._var._owner)] = cached
        return cached
    return _as_array(value, like)


def _operand(value: Any, like: NDArray) -> Any:
    """The other operand of an arithmetic operator on ``like``, as an NDArray. An int or bool
    (Python's or NumPy's) beside an integer array takes the array's dtype, as MXNet's scalar
    operators (``_plus_scalar`` and its family) cast the scalar to the array's type: int32 +
    1 is int32. (``_as_input`` keeps it int64 for the generated functions, whose integer
    inputs, such as TopK's K, must be.) Other values are ``_as_input``'s.

    Raises:
        OpError: the int does not fit the array's dtype (uint8 - 1 has no uint8 operand).
    """
    if isinstance(value, (int, np.integer, np.bool_)) and like._data.dtype.kind in "iu":
        try:
            host = np.array(value, dtype=like._data.dtype)
        except OverflowError:
            raise OpError(f"the operand {value!r} does not fit the array's dtype "
                          f"{like._data.dtype}; cast the array first (astype)") from None
        return array(host, device=like.device, dtype=host.dtype)
    return _as_input(value, like)


def _scalar_key(value: Any, like: NDArray, engine: Any) -> tuple:
    return (type(value), value, like._data.dtype, id(like._device), engine)


def _as_array(value: Any, like: NDArray | None) -> NDArray:
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

    def fn(*inputs: Any, out: NDArray | None = None, num_outputs: int | None = None,
           **kwargs: Any) -> Any:
        inputs = place_keyword_inputs(op, list(inputs), kwargs)  # (data=, lhs=, X= ...)
        like = next((x for x in inputs if isinstance(x, NDArray)), None)
        arrays = [_as_input(x, like) for x in inputs]
        while arrays and arrays[-1] is None:
            arrays.pop()
        return invoke(op_name, arrays, mxnet_attributes(op, kwargs), num_outputs=num_outputs,
                      out=out)
    return fn


def generated_functions() -> dict[str, Callable[..., Any]]:
    """snake_case name -> imperative function, for every ONNX-domain op in the table."""
    return generate(_make, "Imperative")


# -- operators ----------------------------------------------------------------------------------


def _binary(op_name: str, reverse: bool = False, inplace: bool = False):
    if inplace:
        def method(self: NDArray, other: Any) -> Any:
            other = _operand(other, self) if not isinstance(other, NDArray) else other
            return invoke(op_name, [self, other], out=self)
        return method

    # ``x + y`` is the commonest imperative call: the scalar constant and the per-signature
    # call (``invoke.plain_calls``, keyed as invoke keys it) are looked up here, inline, and
    # each is kept with what it was found for: a run of ops of one signature (the usual case)
    # finds them by identity tests and two shape comparisons, without building and hashing a
    # key. (Each memo is replaced as one tuple: threads may share the method. The scalar's is
    # keyed by the Python object itself: 0.0 and -0.0 are two, and a held object keeps its id.)
    last = [((), None, (), None, None)]  # (shape a, dtype a, shape b, dtype b, plain call)
    last_scalar = [(None, None, None, None, None)]  # (value, dtype, device, engine, constant)

    def method(self: NDArray, other: Any) -> Any:
        if type(other) in _SCALAR_TYPES:
            value, dtype, device, engine, constant = last_scalar[0]
            if (other is not value or self._data.dtype is not dtype
                    or self._device is not device or self._var._owner is not engine):
                constant = None if self._data.dtype.kind in "iu" else _scalars.get(
                    (type(other), other, self._data.dtype, id(self._device),
                     self._var._owner))  # (_scalar_key; an integer array's is its own)
                if constant is None:
                    constant = _operand(other, self)
                last_scalar[0] = (other, self._data.dtype, self._device, self._var._owner,
                                  constant)
            other = constant
        elif not isinstance(other, NDArray):
            other = _operand(other, self)
            if other is None:
                return invoke(op_name, [None, self] if reverse else [self, None])
        a, b = (other, self) if reverse else (self, other)
        data_a, data_b = a._data, b._data
        shape_a, dtype_a, shape_b, dtype_b, call = last[0]
        if (data_a.dtype is not dtype_a or data_b.dtype is not dtype_b
                or data_a.shape != shape_a or data_b.shape != shape_b):
            call = plain_calls.get((op_name, (), None, ((data_a.shape, data_a.dtype),
                                                       (data_b.shape, data_b.dtype))))
            if not call:
                return invoke(op_name, [a, b])
            last[0] = (data_a.shape, data_a.dtype, data_b.shape, data_b.dtype, call)
        return run_plain(call, op_name, [a, b])
    return method


def _axes(axis: Any, like: NDArray) -> Any:
    if axis is None:
        return None
    axes = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    return array(np.asarray(axes, np.int64), device=like.device, dtype=np.int64)


def _reduce(op_name: str):
    def method(self: NDArray, axis: Any = None, keepdims: bool = False) -> NDArray:
        out = invoke(op_name, [self, _axes(axis, self)], {"keepdims": int(keepdims)})
        return _one_axis(out)
    method.__name__ = op_name
    return method


def _one_axis(out: NDArray) -> NDArray:
    """MXNet 1.x has no 0-d arrays: a single value keeps one axis, shape (1,)."""
    if out.ndim:
        return out
    return invoke("Reshape", [out, array(np.asarray([1], np.int64), device=out.device,
                                             dtype=np.int64)])


def _compare(op_name: str, negate: bool = False):
    """A comparison as MXNet 1.x makes it: 0 or 1 in the first operand's dtype (so that
    ``(pred == label).mean()`` is the accuracy), not booleans."""
    def method(self: NDArray, other: Any) -> NDArray:
        if not isinstance(other, NDArray):  # (a Python number compares in self's dtype)
            other = array(np.asarray(other).astype(self.dtype), device=self.device,
                          dtype=self.dtype)
        result = invoke(op_name, [self, other])
        if negate:
            result = invoke("Not", [result])
        return invoke("Cast", [result], {"to": to_onnx(self.dtype)})
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
    """MXNet 1.x's argmax/argmin: without an axis the index into the flattened array, shape
    (1,); the indices as float32."""
    def method(self: NDArray, axis: int | None = None, keepdims: bool = False) -> NDArray:
        data = self
        if axis is None:
            data = invoke("Reshape", [self, array(np.asarray([-1], np.int64),
                                                  device=self.device, dtype=np.int64)])
        index = invoke(op_name, [data], {"axis": 0 if axis is None else axis,
                                         "keepdims": int(keepdims or axis is None)})
        return invoke("Cast", [index], {"to": to_onnx(np.float32)})
    return method


def split(data: NDArray, num_outputs: int, axis: int = 1, squeeze_axis: bool = False) -> Any:
    """MXNet 1.x's ``nd.split``: ``num_outputs`` equal parts along ``axis`` (a list; one
    array when ``num_outputs`` is 1), each without that axis when ``squeeze_axis``."""
    num_outputs = int(num_outputs)
    size = data.shape[axis] if -data.ndim <= axis < data.ndim else None
    if size is None or num_outputs < 1 or size % num_outputs:
        raise ShapeError(f"split: cannot cut axis {axis} of shape {data.shape} into "
                         f"{num_outputs} equal parts")
    parts = invoke("Split", [data], {"axis": axis, "num_outputs": num_outputs},
                   num_outputs=num_outputs)
    parts = list(parts) if isinstance(parts, (list, tuple)) else [parts]
    if squeeze_axis:
        parts = [invoke("Squeeze", [p, _axes(axis, p)]) for p in parts]
    return parts[0] if num_outputs == 1 else parts


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
        setattr(NDArray, f"__{dunder}__", _compare(op))
    NDArray.__ne__ = _compare("Equal", negate=True)
    NDArray.__ge__ = _compare("Less", negate=True)
    NDArray.__le__ = _compare("Greater", negate=True)
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
    NDArray.norm = lambda self: _one_axis(invoke("Sqrt", [invoke("ReduceSum", [self * self],
                                                                  {"keepdims": 0})]))
    NDArray.clip = lambda self, a_min, a_max: invoke(
        "Clip", [self, constant_like(a_min, self), constant_like(a_max, self)])
    NDArray.softmax = lambda self, axis=-1: invoke("Softmax", [self], {"axis": axis})


def mxnet_aliases() -> dict[str, Callable[..., Any]]:
    """Functions under MXNet 1.x names that differ from the ONNX-derived ones."""
    return {
        "dot": lambda a, b: invoke("MatMul", [a, b]),
        "argmax": lambda x, axis=None, keepdims=False: x.argmax(axis, keepdims),
        "argmin": lambda x, axis=None, keepdims=False: x.argmin(axis, keepdims),
        "split": split,
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
