"""``mx.np.ndarray``: an NDArray with NumPy semantics (MXNet 1.9's NumPy interface).

The type is a subclass of ``nd.NDArray`` with no state of its own: it runs on the same engine,
ops and autograd tape, and only the methods whose semantics differ are overridden
(comparisons give bool arrays, reductions and full indexing give 0-d arrays, arithmetic
follows MXNet's NumPy dtype rules). Results of ops are freshly made NDArrays, so they become
``ndarray`` by changing their class in place: no copy, and the tape keeps its identities.

Converting an array somebody else holds (``as_np``/``as_nd``) makes a second object over the
same storage and engine var. While autograd records and the array needs a gradient, the
second object is the output of a (view) Identity op instead, so the gradient flows back
through the conversion.

Example:
    >>> import portable as mx
    >>> x = mx.np.array([[1, 2], [3, 4]])
    >>> (x > 2).dtype, x.sum().shape
    (dtype('bool'), ())
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.dtypes import to_onnx
from portable.ndarray.invoke import invoke
from portable.ndarray.ndarray import NDArray, array as nd_array
from portable.tape import is_recording, needs_grad


class ndarray(NDArray):  # noqa: N801 - MXNet's (and NumPy's) name
    """A multi-dimensional array with NumPy semantics (``mx.np.ndarray``).

    Example:
        >>> import portable as mx
        >>> mx.np.ones((2, 3)).T.shape
        (3, 2)
    """

    __slots__ = ()

    # -- conversions -------------------------------------------------------------------------
    def as_nd_ndarray(self) -> NDArray:
        """This array as an ``nd.NDArray`` (MXNet 1.x semantics), sharing its storage."""
        return as_nd(self)

    def as_np_ndarray(self) -> "ndarray":
        return self

    def asnumpy(self) -> np.ndarray:
        return super().asnumpy()

    def item(self, *args: Any) -> Any:
        """The element as a Python scalar (``item(i)``: the i-th of the flattened array)."""
        host = self.asnumpy()
        return host.item(*args)

    def tolist(self) -> Any:
        return self.asnumpy().tolist()

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object (a 0-d array)")
        return self.shape[0]

    def __index__(self) -> int:
        if self.dtype.kind not in "iub" or self.size != 1:
            raise TypeError(f"only integer scalar arrays can be converted to a scalar index, "
                            f"got {self.dtype} of shape {self.shape}")
        return int(self.item())

    def __repr__(self) -> str:
        text = repr(self.asnumpy())
        if self.dtype == np.float32:  # MXNet's default dtype goes unnamed, as float64 in NumPy
            text = text.replace(", dtype=float32)", ")")
        if not str(self.device).startswith("cpu"):
            text = text[:-1] + f", ctx={self.device})"
        return text

    def __str__(self) -> str:
        return str(self.asnumpy())

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        # NumPy functions given our arrays work on host copies (as NumPy's own do).
        host = [a.asnumpy() if isinstance(a, NDArray) else a for a in args]
        return func(*host, **kwargs)

    # -- copies between arrays and devices -----------------------------------------------------
    def copyto(self, other: Any) -> Any:
        result = super().copyto(other)
        return result if isinstance(other, NDArray) else fresh(result)

    def copy(self) -> "ndarray":
        return fresh(super().copyto(self.device))

    def as_in_context(self, device: Any) -> "ndarray":
        return fresh(super().as_in_context(device))

    as_in_ctx = to_device = as_in_context

    def detach(self) -> "ndarray":
        return ndarray(self._data, self._device, var=self._var)

    # -- autograd ------------------------------------------------------------------------------
    def attach_grad(self, grad_req: str = "write", stype: Any = None) -> None:
        super().attach_grad(grad_req, stype)
        self._grad = fresh(self._grad)

    @property
    def grad(self) -> "ndarray | None":
        """The gradient buffer attached by ``attach_grad``, as an ``ndarray``."""
        grad = self._grad
        return grad if grad is None or isinstance(grad, ndarray) else as_np(grad)

    # -- shape -------------------------------------------------------------------------------
    @property
    def T(self) -> "ndarray":  # noqa: N802 - NumPy's name
        return fresh(invoke("Transpose", [self]))


# -- conversions ------------------------------------------------------------------------------


def fresh(result: Any) -> Any:
    """Op results (new NDArrays nobody else holds) as ``ndarray``: their class is changed in
    place. Lists and tuples are converted item by item."""
    if isinstance(result, (list, tuple)):
        return type(result)(fresh(r) for r in result)
    if isinstance(result, NDArray) and not isinstance(result, ndarray):
        result.__class__ = ndarray
    return result


def _convert(x: NDArray, cls: type) -> Any:
    if is_recording() and needs_grad(x):
        out = invoke("Identity", [x])  # the tape's route back to x
        out.__class__ = cls
        return out
    out = cls(x._data, x._device, var=x._var)
    out._host_value = x._host_value
    if x._entry is None and x._grad_req != "null":  # a leaf: its gradient buffer is shared
        out._grad, out._grad_req = x._grad, x._grad_req
    return out


def as_np(x: Any) -> Any:
    """``x`` (an NDArray, or a list/tuple/dict of them) as ``ndarray``, sharing storage;
    anything else is returned unchanged."""
    if isinstance(x, ndarray):
        return x
    if isinstance(x, NDArray):
        return _convert(x, ndarray)
    if isinstance(x, (list, tuple)):
        return type(x)(as_np(v) for v in x)
    if isinstance(x, dict):
        return {k: as_np(v) for k, v in x.items()}
    return x


def as_nd(x: Any) -> Any:
    """``x`` (an ``ndarray``, or a list/tuple of them) as ``nd.NDArray``, sharing storage."""
    if isinstance(x, ndarray):
        return _convert(x, NDArray)
    if isinstance(x, (list, tuple)):
        return type(x)(as_nd(v) for v in x)
    return x


# -- dtype rules ------------------------------------------------------------------------------


def promote(a: np.dtype, b: np.dtype) -> np.dtype:
    """MXNet NumPy's type of a binary op on two arrays: a float beats an integer or bool and
    keeps its own width (int32 with float16 is float16); otherwise NumPy's rule."""
    if a == b:
        return a
    if a.kind == "f" and b.kind != "f":
        return a
    if b.kind == "f" and a.kind != "f":
        return b
    return np.result_type(a, b)


def cast(x: NDArray, dtype: Any) -> NDArray:
    """``x`` as ``dtype`` (itself when it already is)."""
    dtype = np.dtype(dtype)
    return x if x.dtype == dtype else invoke("Cast", [x], {"to": to_onnx(dtype)})


def scalar_like(value: Any, like: NDArray, dtype: Any = None) -> NDArray:
    """A Python number as a 0-d array on ``like``'s device, in ``dtype`` (default
    ``like``'s: MXNet NumPy casts a scalar to the array's dtype, ``int_array * 1.5`` stays
    integer)."""
    dtype = np.dtype(dtype or like.dtype)
    return nd_array(np.asarray(value).astype(dtype), device=like.device, dtype=dtype)


def to_array(value: Any, like: NDArray | None = None) -> NDArray:
    """An operand as an NDArray: arrays as they are, host data as ``np.array`` makes it."""
    if isinstance(value, NDArray):
        return value
    host = np.asarray(value)
    if not isinstance(value, np.ndarray):
        host = host.astype(np.float32) if host.dtype.kind in "fiub" else host
    return nd_array(host, device=None if like is None else like.device, dtype=host.dtype)


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (bool, int, float, np.generic))


def operands(a: Any, b: Any) -> tuple[NDArray, NDArray]:
    """Two operands of an elementwise op, cast to their common type (a scalar takes the
    array's dtype; a bool array with a scalar counts as int64)."""
    if _is_scalar(b) and isinstance(a, NDArray):
        if a.dtype.kind == "b":
            a = cast(a, np.int64)
        return a, scalar_like(b, a)
    if _is_scalar(a) and isinstance(b, NDArray):
        if b.dtype.kind == "b":
            b = cast(b, np.int64)
        return scalar_like(a, b), b
    like = a if isinstance(a, NDArray) else b if isinstance(b, NDArray) else None
    a, b = to_array(a, like), to_array(b, like)
    dtype = promote(a.dtype, b.dtype)
    return cast(a, dtype), cast(b, dtype)


def binary(op_name: str, a: Any, b: Any, out: Any = None) -> ndarray:
    """An elementwise binary op with MXNet NumPy's broadcasting and dtype rules."""
    x, y = operands(a, b)
    if op_name == "Div" and x.dtype.kind != "f":  # true division of integers: float32
        x, y = cast(x, np.float32), cast(y, np.float32)
    if op_name == "Mod" and x.dtype.kind == "f":
        # Python's and NumPy's modulo takes the divisor's sign: x - floor(x / y) * y
        quotient = invoke("Floor", [invoke("Div", [x, y])])
        result = invoke("Sub", [x, invoke("Mul", [quotient, y])])
        return _into(result, out)
    if out is not None and out.dtype != x.dtype:
        result = invoke(op_name, [x, y])
        return _into(cast(result, out.dtype), out)
    return fresh(invoke(op_name, [x, y], out=out))


def _into(result: NDArray, out: Any) -> Any:
    if out is None:
        return fresh(result)
    result.copyto(out)
    return out


def compare(op_name: str, a: Any, b: Any, negate: bool = False) -> ndarray:
    """A comparison: a bool array (a float scalar against integers compares as floats)."""
    if isinstance(b, float) and isinstance(a, NDArray) and a.dtype.kind != "f":
        a = cast(a, np.float32)
    if isinstance(a, float) and isinstance(b, NDArray) and b.dtype.kind != "f":
        b = cast(b, np.float32)
    x, y = operands(a, b)
    result = invoke(op_name, [x, y])
    return fresh(invoke("Not", [result]) if negate else result)


def unary_float(op_name: str, x: Any) -> ndarray:
    """A float function of an array; integer input is computed as float32 and cast back
    (MXNet NumPy's ``sqrt`` of int32 is int32)."""
    x = to_array(x)
    if x.dtype.kind == "f":
        return fresh(invoke(op_name, [x]))
    return fresh(cast(invoke(op_name, [cast(x, np.float32)]), x.dtype))


def _install_operators() -> None:
    def binary_method(op_name: str, reverse: bool = False, inplace: bool = False):
        def method(self: ndarray, other: Any) -> Any:
            if reverse:
                return binary(op_name, other, self)
            return binary(op_name, self, other, out=self if inplace else None)
        return method

    for dunder, op in (("add", "Add"), ("sub", "Sub"), ("mul", "Mul"), ("truediv", "Div"),
                       ("pow", "Pow"), ("mod", "Mod")):
        setattr(ndarray, f"__{dunder}__", binary_method(op))
        setattr(ndarray, f"__r{dunder}__", binary_method(op, reverse=True))
        setattr(ndarray, f"__i{dunder}__", binary_method(op, inplace=True))
    for dunder, op, negate in (("eq", "Equal", False), ("ne", "Equal", True),
                               ("gt", "Greater", False), ("lt", "Less", False),
                               ("ge", "Less", True), ("le", "Greater", True)):
        setattr(ndarray, f"__{dunder}__",
                lambda self, other, op=op, negate=negate: compare(op, self, other, negate))
    ndarray.__hash__ = object.__hash__
    ndarray.__neg__ = lambda self: fresh(invoke("Neg", [self]))
    ndarray.__pos__ = lambda self: self
    ndarray.__abs__ = lambda self: fresh(invoke("Abs", [self]))
    ndarray.__invert__ = lambda self: fresh(invoke("Not", [cast(self, np.bool_)]))
    ndarray.__matmul__ = lambda self, other: fresh(invoke("MatMul", list(operands(self, other))))
    ndarray.__rmatmul__ = lambda self, other: fresh(invoke("MatMul",
                                                           list(operands(other, self))))
    ndarray.__float__ = lambda self: float(self.item())
    ndarray.__int__ = lambda self: int(self.item())
    ndarray.__bool__ = lambda self: bool(self.item())


_install_operators()
NDArray.as_np_ndarray = as_np  # (nd.NDArray's hook, see there)
