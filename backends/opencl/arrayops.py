"""NumPy-style functions and operators on CLArrays, run as generated OpenCL kernels.

This is the array namespace (``backend.xp``) that the executor and the kernels use (optimizer
updates are ops with kernels of their own, ``kernels/optim.py``): elementwise functions with
broadcasting and ``out=`` come from the op table (``optable.TABLE``), reductions from
``reduction``, ``matmul`` from ``gemm``. Host data given to a function is uploaded; a function
never silently runs on the host.

The NumPy-like methods of ``CLArray`` itself are attached by ``install_operators()``, which
the package ``__init__`` calls once (``allocator`` explains why).

Example:
    >>> xp = ArrayNamespace(runtime)                         # doctest: +SKIP
    >>> y = xp.clip(xp.asarray([-2.0, 0.5, 3.0]), -1, 1)     # doctest: +SKIP
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from portable.errors import BackendError

from backends.opencl.allocator import CLArray, basic_getitem, empty, from_numpy, to_numpy
from backends.opencl.elementwise import (apply, assign, astype, copy, device_operand,
                                         upload_into)
from backends.opencl.gather import gather_axis
from backends.opencl.gemm import gemm
from backends.opencl.reduction import reduce


# -- advanced indexing -------------------------------------------------------------------------


def is_advanced(key: Any) -> bool:
    """Whether ``key`` indexes with arrays (NumPy's advanced indexing)."""
    parts = key if isinstance(key, tuple) else (key,)
    return any(isinstance(k, (CLArray, np.ndarray, list)) for k in parts)


def _selects_all(key: Any) -> bool:
    if key is Ellipsis or key == ():
        return True
    return isinstance(key, slice) and key == slice(None)


def getitem(x: CLArray, key: Any) -> CLArray:
    """``x[key]``: a view for basic keys, a gathered copy for an integer array."""
    return advanced_getitem(x, key) if is_advanced(key) else basic_getitem(x, key)


def setitem(x: CLArray, key: Any, value: Any) -> None:
    """``x[key] = value`` (broadcast, converted to x's dtype)."""
    if is_advanced(key):
        advanced_setitem(x, key, value)
        return
    assign(x if _selects_all(key) else basic_getitem(x, key), value)


def advanced_getitem(x: CLArray, key: Any) -> CLArray:
    """``x[index_array]`` along axis 0 (the only advanced form the engine uses)."""
    if isinstance(key, tuple):
        raise BackendError("advanced indexing on OpenCL arrays supports one integer array "
                           "along axis 0")
    index = device_operand(np.asarray(key) if isinstance(key, list) else key, x.runtime)
    if index.dtype.kind not in "iu":
        raise BackendError(f"array indices must be integers, got {index.dtype}")
    out = empty(x.runtime, index.shape + x.shape[1:], x.dtype)
    gather_axis(x, index, 0, out)
    return out


def advanced_setitem(x: CLArray, key: Any, value: Any) -> None:
    """``x[index_arrays] = value``, through a host copy (the engine never needs it fast)."""
    host = to_numpy(x)
    key = tuple(to_numpy(k) if isinstance(k, CLArray) else k
                for k in (key if isinstance(key, tuple) else (key,)))
    host[key if len(key) > 1 else key[0]] = to_numpy(value) \
        if isinstance(value, CLArray) else value
    upload_into(x, host)


# -- operators ---------------------------------------------------------------------------------


def _binary(op_name: str, reverse: bool = False):
    def method(self: CLArray, other: Any) -> Any:
        if isinstance(other, (list, tuple)) or (isinstance(other, np.ndarray) and other.ndim):
            other = device_operand(np.asarray(other), self.runtime)
        return apply(op_name, other, self) if reverse else apply(op_name, self, other)
    return method


def _inplace(op_name: str):
    def method(self: CLArray, other: Any) -> CLArray:
        apply(op_name, self, other, out=self)
        return self
    return method


def _unary(op_name: str):
    def method(self: CLArray) -> CLArray:
        return apply(op_name, self)
    return method


def _reduction(op_name: str):
    def method(self: CLArray, axis: Any = None, dtype: Any = None, out: Any = None,
               keepdims: bool = False) -> CLArray:
        return reduce(self, _axes(axis, self.ndim), op_name, keepdims, out, dtype)
    return method


def _axes(axis: Any, rank: int):
    if axis is None:
        return None
    return (int(axis),) if isinstance(axis, (int, np.integer)) else tuple(int(a) for a in axis)


def _any(self: CLArray, axis: Any = None, keepdims: bool = False) -> CLArray:
    return reduce(apply("NotEqual", self, 0), _axes(axis, self.ndim), "max", keepdims)


def _all(self: CLArray, axis: Any = None, keepdims: bool = False) -> CLArray:
    return reduce(apply("NotEqual", self, 0), _axes(axis, self.ndim), "min", keepdims)


def _arg(op_name: str):
    def method(self: CLArray, axis: Any = None, keepdims: bool = False) -> CLArray:
        x = self if axis is not None else self.reshape(-1)
        return reduce(x, (0 if axis is None else int(axis),), op_name, keepdims)
    return method


def matmul(a: CLArray, b: CLArray, out: CLArray | None = None) -> CLArray:
    """NumPy's matmul (1-D operands promoted and the added axis dropped)."""
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    b2 = b.reshape(-1, 1) if b.ndim == 1 else b
    batch = tuple(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]))
    shape = batch + (a2.shape[-2], b2.shape[-1])
    final = (shape[:-2] + (() if a.ndim == 1 else shape[-2:-1])
             + (() if b.ndim == 1 else shape[-1:]))
    dtype = np.result_type(a.dtype, b.dtype)
    target = out if out is not None else empty(a.runtime, final, dtype)
    view = target.reshape(shape) if target.is_contiguous else None
    if view is None or a2.dtype != target.dtype or b2.dtype != target.dtype:
        result = empty(a.runtime, shape, target.dtype)
        gemm(astype(a2, target.dtype, copy=False), astype(b2, target.dtype, copy=False),
             result)
        assign(target, result.reshape(final))
    else:
        gemm(a2, b2, view)
    return target


def install_operators() -> None:
    """Attach to CLArray the methods that compute on the device: copies, item assignment,
    advanced indexing, NumPy's operators and reduction methods.

    CLArray sits below every module that computes (``allocator``), so it cannot import them;
    they are attached here instead, once, by the package ``__init__``. Running it again
    attaches the same functions (harmless).
    """
    CLArray.copy = copy
    CLArray.astype = astype
    CLArray.fill = assign
    CLArray.__getitem__ = getitem
    CLArray.__setitem__ = setitem
    pairs = {"add": "Add", "sub": "Sub", "mul": "Mul", "truediv": "Div", "pow": "Pow"}
    for dunder, op in pairs.items():
        setattr(CLArray, f"__{dunder}__", _binary(op))
        setattr(CLArray, f"__r{dunder}__", _binary(op, reverse=True))
        setattr(CLArray, f"__i{dunder}__", _inplace(op))
    for dunder, op in (("gt", "Greater"), ("lt", "Less"), ("ge", "GreaterOrEqual"),
                       ("le", "LessOrEqual"), ("eq", "Equal"), ("ne", "NotEqual"),
                       ("and", "And"), ("or", "Or"), ("xor", "Xor")):
        setattr(CLArray, f"__{dunder}__", _binary(op))
    CLArray.__hash__ = None  # == is elementwise, as for NumPy arrays
    CLArray.__neg__ = _unary("Neg")
    CLArray.__abs__ = _unary("Abs")
    CLArray.__pos__ = lambda self: self
    CLArray.__invert__ = _unary("Not")
    CLArray.__matmul__ = lambda self, other: matmul(self, device_operand(other, self.runtime))
    CLArray.__rmatmul__ = lambda self, other: matmul(device_operand(other, self.runtime), self)
    for name in ("sum", "mean", "max", "min", "prod"):
        setattr(CLArray, name, _reduction(name))
    CLArray.any = _any
    CLArray.all = _all
    CLArray.argmax = _arg("argmax")
    CLArray.argmin = _arg("argmin")


# -- the namespace ------------------------------------------------------------------------------

_ELEMENTWISE = {
    "add": "Add", "subtract": "Sub", "multiply": "Mul", "divide": "Div", "true_divide": "Div",
    "power": "Pow", "maximum": "Max", "minimum": "Min", "negative": "Neg", "absolute": "Abs",
    "abs": "Abs", "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "tanh": "Tanh",
    "reciprocal": "Reciprocal", "square": "Square", "sign": "Sign", "greater": "Greater",
    "less": "Less", "greater_equal": "GreaterOrEqual", "less_equal": "LessOrEqual",
    "equal": "Equal", "not_equal": "NotEqual", "logical_not": "Not", "logical_and": "And",
    "logical_or": "Or", "logical_xor": "Xor", "isnan": "IsNaN",
}


class ArrayNamespace:
    """NumPy-like functions bound to one device runtime (creation functions allocate there)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        for name, op in _ELEMENTWISE.items():
            setattr(self, name, self._elementwise(op))

    @staticmethod
    def _elementwise(op: str):
        def fn(*operands: Any, out: CLArray | None = None, dtype: Any = None) -> CLArray:
            return apply(op, *operands, out=out, dtype=dtype)
        fn.__name__ = op.lower()
        return fn

    # -- creation --------------------------------------------------------------------------
    def empty(self, shape: Any, dtype: Any = np.float32) -> CLArray:
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        return empty(self.runtime, shape, dtype)

    def full(self, shape: Any, value: Any, dtype: Any = None) -> CLArray:
        out = self.empty(shape, dtype if dtype is not None else np.asarray(value).dtype)
        assign(out, value)
        return out

    def zeros(self, shape: Any, dtype: Any = np.float32) -> CLArray:
        return self.full(shape, 0, dtype)

    def ones(self, shape: Any, dtype: Any = np.float32) -> CLArray:
        return self.full(shape, 1, dtype)

    def empty_like(self, x: CLArray, dtype: Any = None) -> CLArray:
        return empty(x.runtime, x.shape, dtype or x.dtype)

    def zeros_like(self, x: CLArray, dtype: Any = None) -> CLArray:
        return self.full(x.shape, 0, dtype or x.dtype)

    def ones_like(self, x: CLArray, dtype: Any = None) -> CLArray:
        return self.full(x.shape, 1, dtype or x.dtype)

    def full_like(self, x: CLArray, value: Any, dtype: Any = None) -> CLArray:
        return self.full(x.shape, value, dtype or x.dtype)

    def asarray(self, value: Any, dtype: Any = None) -> CLArray:
        if isinstance(value, CLArray):
            return value if dtype is None else value.astype(dtype, copy=False)
        host = np.asarray(value, dtype=dtype)
        return from_numpy(self.runtime, host)

    def arange(self, *args: Any, dtype: Any = None) -> CLArray:
        return from_numpy(self.runtime, np.arange(*args, dtype=dtype))

    def ascontiguousarray(self, x: CLArray) -> CLArray:
        return x.contiguous()

    # -- shape ----------------------------------------------------------------------------
    @staticmethod
    def reshape(x: CLArray, shape: Any) -> CLArray:
        return x.reshape(shape)

    @staticmethod
    def transpose(x: CLArray, axes: Any = None) -> CLArray:
        return x.transpose(axes)

    @staticmethod
    def swapaxes(x: CLArray, a: int, b: int) -> CLArray:
        return x.swapaxes(a, b)

    @staticmethod
    def broadcast_to(x: CLArray, shape: Any) -> CLArray:
        return x.broadcast_to(shape)

    def concatenate(self, arrays: Sequence[CLArray], axis: int = 0,
                    out: CLArray | None = None) -> CLArray:
        arrays = [self.asarray(a) for a in arrays]
        rank = arrays[0].ndim
        axis %= rank
        shape = list(arrays[0].shape)
        shape[axis] = sum(a.shape[axis] for a in arrays)
        if out is None:
            out = self.empty(shape, np.result_type(*[a.dtype for a in arrays]))
        start = 0
        for a in arrays:
            index = (slice(None),) * axis + (slice(start, start + a.shape[axis]),)
            assign(out[index], a)
            start += a.shape[axis]
        return out

    def stack(self, arrays: Sequence[CLArray], axis: int = 0) -> CLArray:
        arrays = [self.asarray(a) for a in arrays]
        axis %= arrays[0].ndim + 1
        expanded = [a.reshape(a.shape[:axis] + (1,) + a.shape[axis:]) for a in arrays]
        return self.concatenate(expanded, axis)

    # -- math -------------------------------------------------------------------------------
    def where(self, condition: Any, x: Any, y: Any, out: CLArray | None = None) -> CLArray:
        return apply("Where", condition, x, y, out=out)

    def clip(self, x: CLArray, low: Any, high: Any, out: CLArray | None = None) -> CLArray:
        result = apply("Max", x, low, out=out) if low is not None else x
        if high is not None:
            result = apply("Min", result, high, out=out)
        if result is x and out is not None:
            assign(out, x)
            return out
        return result

    def matmul(self, a: Any, b: Any, out: CLArray | None = None) -> CLArray:
        return matmul(self.asarray(a), self.asarray(b), out)

    def sum(self, x: CLArray, axis: Any = None, keepdims: bool = False, dtype: Any = None,
            out: CLArray | None = None) -> CLArray:
        return reduce(x, _axes(axis, x.ndim), "sum", keepdims, out, dtype)

    def mean(self, x: CLArray, axis: Any = None, keepdims: bool = False, dtype: Any = None,
             out: CLArray | None = None) -> CLArray:
        return reduce(x, _axes(axis, x.ndim), "mean", keepdims, out, dtype)

    def max(self, x: CLArray, axis: Any = None, keepdims: bool = False,
            out: CLArray | None = None) -> CLArray:
        return reduce(x, _axes(axis, x.ndim), "max", keepdims, out)

    def min(self, x: CLArray, axis: Any = None, keepdims: bool = False,
            out: CLArray | None = None) -> CLArray:
        return reduce(x, _axes(axis, x.ndim), "min", keepdims, out)

    def size_of(self, x: CLArray) -> int:
        return math.prod(x.shape)
