"""Elementwise functions and reductions of ``mx.np``, each one declared op (or a few), with
MXNet NumPy's dtypes: a reduction without ``axis`` gives a 0-d array; ``sum`` of int32 is
int32 and of bool int64; ``mean``, ``std`` and ``var`` of integers are float32; ``argmax`` is
int64; elementwise float functions of integers keep the integer dtype (MXNet's ``sqrt`` of
int32 is int32).

Example:
    >>> import portable as mx
    >>> x = mx.np.array([[1, 2], [3, 4]])
    >>> float(mx.np.mean(x)), mx.np.argmax(x).item()
    (2.5, 3)
"""
from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from portable.ndarray.invoke import invoke
from portable.ndarray.ndarray import NDArray, array as nd_array
from portable.numpy.multiarray import (binary, cast, compare, fresh, ndarray, operands,
                                       scalar_like, to_array, unary_float)

# -- elementwise ----------------------------------------------------------------------------


def _float_function(op_name: str, doc: str):
    def function(x: Any, out: Any = None, **kwargs: Any) -> ndarray:
        return unary_float(op_name, x)
    function.__name__ = op_name.lower()
    function.__doc__ = f"{doc}, elementwise (integers are computed as float32, cast back)."
    return function


exp = _float_function("Exp", "e to the power x")
log = _float_function("Log", "The natural logarithm")
sqrt = _float_function("Sqrt", "The square root")
tanh = _float_function("Tanh", "The hyperbolic tangent")
sin = _float_function("Sin", "The sine")
cos = _float_function("Cos", "The cosine")
tan = _float_function("Tan", "The tangent")
arcsin = _float_function("Asin", "The inverse sine")
arccos = _float_function("Acos", "The inverse cosine")
arctan = _float_function("Atan", "The inverse tangent")
sinh = _float_function("Sinh", "The hyperbolic sine")
cosh = _float_function("Cosh", "The hyperbolic cosine")
floor = _float_function("Floor", "The floor")
ceil = _float_function("Ceil", "The ceiling")
sigmoid = _float_function("Sigmoid", "The logistic function")


def log1p(x: Any, out: Any = None, **kwargs: Any) -> ndarray:
    """``log(1 + x)``, elementwise."""
    x = to_array(x)
    return unary_float("Log", binary("Add", x, 1))


def expm1(x: Any, out: Any = None, **kwargs: Any) -> ndarray:
    """``exp(x) - 1``, elementwise."""
    return binary("Sub", exp(x), 1)


def log2(x: Any, out: Any = None, **kwargs: Any) -> ndarray:
    return binary("Div", log(x), float(np.log(2.0)))


def log10(x: Any, out: Any = None, **kwargs: Any) -> ndarray:
    return binary("Div", log(x), float(np.log(10.0)))


def square(x: Any, out: Any = None, **kwargs: Any) -> ndarray:
    """``x * x``, elementwise."""
    x = to_array(x)
    return fresh(invoke("Mul", [x, x]))


def abs(x: Any, out: Any = None, **kwargs: Any) -> ndarray:  # noqa: A001 - NumPy's name
    return fresh(invoke("Abs", [to_array(x)]))


absolute = abs


def sign(x: Any, out: Any = None, **kwargs: Any) -> ndarray:
    return fresh(invoke("Sign", [to_array(x)]))


def negative(x: Any, out: Any = None, **kwargs: Any) -> ndarray:
    return fresh(invoke("Neg", [to_array(x)]))


def reciprocal(x: Any, out: Any = None, **kwargs: Any) -> ndarray:
    return binary("Div", 1.0, to_array(x))


def round(x: Any, decimals: int = 0, out: Any = None) -> ndarray:  # noqa: A001
    """Round half to even (as NumPy), to ``decimals`` places."""
    x = to_array(x)
    if decimals == 0:
        return unary_float("Round", x)
    scale = 10.0 ** decimals
    return binary("Div", unary_float("Round", binary("Mul", x, scale)), scale)


around = round


def _binary_function(op_name: str, doc: str):
    def function(x1: Any, x2: Any, out: Any = None, **kwargs: Any) -> ndarray:
        return binary(op_name, x1, x2, out=out)
    function.__name__ = op_name.lower()
    function.__doc__ = f"{doc}, elementwise with broadcasting."
    return function


add = _binary_function("Add", "x1 + x2")
subtract = _binary_function("Sub", "x1 - x2")
multiply = _binary_function("Mul", "x1 * x2")
divide = true_divide = _binary_function("Div", "x1 / x2 (integers divide as float32)")
power = _binary_function("Pow", "x1 ** x2")
mod = remainder = _binary_function("Mod", "x1 % x2 (the divisor's sign)")
maximum = _binary_function("Max", "The larger of x1 and x2")
minimum = _binary_function("Min", "The smaller of x1 and x2")


def _comparison(op_name: str, negate: bool = False):
    def function(x1: Any, x2: Any, out: Any = None) -> ndarray:
        return compare(op_name, x1, x2, negate)
    return function


equal = _comparison("Equal")
not_equal = _comparison("Equal", negate=True)
greater = _comparison("Greater")
less = _comparison("Less")
greater_equal = _comparison("Less", negate=True)
less_equal = _comparison("Greater", negate=True)


def clip(a: Any, a_min: Any, a_max: Any, out: Any = None) -> ndarray:
    """``a`` limited to ``[a_min, a_max]`` (None: no limit on that side)."""
    a = to_array(a)
    low = None if a_min is None else scalar_like(a_min, a)
    high = None if a_max is None else scalar_like(a_max, a)
    return fresh(invoke("Clip", [a, low, high]))


def where(condition: Any, x: Any = None, y: Any = None) -> Any:
    """``x`` where ``condition`` holds, else ``y`` (one argument: the indices of nonzeros)."""
    if x is None and y is None:
        return nonzero(condition)
    like = next((v for v in (x, y, condition) if isinstance(v, NDArray)), None)
    condition = cast(to_array(condition, like), np.bool_)
    x, y = operands(x, y)
    return fresh(invoke("Where", [condition, x, y]))


def nonzero(a: Any) -> tuple:
    """The indices of the nonzero elements, one int64 array per axis (read on the host)."""
    host = to_array(a).asnumpy()
    device = a.device if isinstance(a, NDArray) else None
    return tuple(fresh(nd_array(i, device=device, dtype=np.int64)) for i in np.nonzero(host))


def isnan(x: Any, out: Any = None) -> ndarray:
    return fresh(invoke("IsNaN", [to_array(x)]))


def isinf(x: Any, out: Any = None) -> ndarray:
    return fresh(invoke("IsInf", [to_array(x)]))


def isfinite(x: Any, out: Any = None) -> ndarray:
    x = to_array(x)
    return fresh(invoke("Not", [invoke("Or", [invoke("IsNaN", [x]), invoke("IsInf", [x])])]))


def logical_not(x: Any, out: Any = None) -> ndarray:
    return fresh(invoke("Not", [cast(to_array(x), np.bool_)]))


# -- reductions -----------------------------------------------------------------------------


def _axes(axis: Any, like: NDArray) -> NDArray | None:
    if axis is None:
        return None
    axes = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    return nd_array(np.asarray(axes, np.int64), device=like.device, dtype=np.int64)


def _reduce(op_name: str, a: Any, axis: Any, keepdims: bool) -> NDArray:
    a = to_array(a)
    return invoke(op_name, [a, _axes(axis, a)], {"keepdims": int(bool(keepdims))})


def _summing_dtype(a: NDArray, dtype: Any) -> np.dtype:
    if dtype is not None:
        return np.dtype(dtype)
    return np.dtype(np.int64) if a.dtype.kind == "b" else a.dtype


def sum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None,  # noqa: A001
        keepdims: bool = False, initial: Any = None) -> ndarray:
    """The sum over ``axis`` (all axes: a 0-d array); bool sums as int64."""
    a = to_array(a)
    result = _reduce("ReduceSum", cast(a, _summing_dtype(a, dtype)), axis, keepdims)
    return fresh(result if initial is None else binary("Add", result, initial))


def prod(a: Any, axis: Any = None, dtype: Any = None, out: Any = None,
         keepdims: bool = False, initial: Any = None) -> ndarray:
    """The product over ``axis``."""
    a = to_array(a)
    result = _reduce("ReduceProd", cast(a, _summing_dtype(a, dtype)), axis, keepdims)
    return fresh(result if initial is None else binary("Mul", result, initial))


def _float_input(a: Any, dtype: Any) -> NDArray:
    a = to_array(a)
    if dtype is not None:
        return cast(a, dtype)
    return a if a.dtype.kind == "f" else cast(a, np.float32)


def mean(a: Any, axis: Any = None, dtype: Any = None, out: Any = None,
         keepdims: bool = False) -> ndarray:
    """The mean over ``axis``; integers and bools average as float32."""
    return fresh(_reduce("ReduceMean", _float_input(a, dtype), axis, keepdims))


def var(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: int = 0,
        keepdims: bool = False) -> ndarray:
    """The variance over ``axis`` (``ddof``: delta degrees of freedom)."""
    a = _float_input(a, dtype)
    deviation = invoke("Sub", [a, _reduce("ReduceMean", a, axis, True)])
    result = _reduce("ReduceMean", invoke("Mul", [deviation, deviation]), axis, keepdims)
    if ddof:
        count = a.size // builtins.max(result.size, 1) if keepdims or axis is not None \
            else a.size
        result = invoke("Mul", [result, scalar_like(count / builtins.max(count - ddof, 0),
                                                    result)])
    return fresh(result)


def std(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: int = 0,
        keepdims: bool = False) -> ndarray:
    """The standard deviation over ``axis``."""
    return fresh(invoke("Sqrt", [var(a, axis, dtype, None, ddof, keepdims)]))


def max(a: Any, axis: Any = None, out: Any = None,  # noqa: A001 - NumPy's name
        keepdims: bool = False) -> ndarray:
    """The largest element over ``axis``."""
    return fresh(_reduce("ReduceMax", a, axis, keepdims))


def min(a: Any, axis: Any = None, out: Any = None,  # noqa: A001 - NumPy's name
        keepdims: bool = False) -> ndarray:
    """The smallest element over ``axis``."""
    return fresh(_reduce("ReduceMin", a, axis, keepdims))


amax, amin = max, min


def _arg(op_name: str, a: Any, axis: int | None, keepdims: bool) -> ndarray:
    a = to_array(a)
    if axis is None:
        flat = invoke("Reshape", [a, nd_array(np.asarray([-1], np.int64), device=a.device,
                                              dtype=np.int64)])
        return fresh(invoke(op_name, [flat], {"axis": 0, "keepdims": 0}))
    return fresh(invoke(op_name, [a], {"axis": int(axis), "keepdims": int(keepdims)}))


def argmax(a: Any, axis: int | None = None, out: Any = None, keepdims: bool = False) -> ndarray:
    """The int64 index of the largest element (into the flattened array without ``axis``)."""
    return _arg("ArgMax", a, axis, keepdims)


def argmin(a: Any, axis: int | None = None, out: Any = None, keepdims: bool = False) -> ndarray:
    """The int64 index of the smallest element."""
    return _arg("ArgMin", a, axis, keepdims)


def _logical_reduce(op_name: str, a: Any, axis: Any, keepdims: bool) -> ndarray:
    as_int = cast(cast(to_array(a), np.bool_), np.int32)
    return fresh(cast(_reduce(op_name, as_int, axis, keepdims), np.bool_))


def all(a: Any, axis: Any = None, out: Any = None,  # noqa: A001 - NumPy's name
        keepdims: bool = False) -> ndarray:
    """True where every element over ``axis`` is nonzero (a bool array)."""
    return _logical_reduce("ReduceMin", a, axis, keepdims)


def any(a: Any, axis: Any = None, out: Any = None,  # noqa: A001 - NumPy's name
        keepdims: bool = False) -> ndarray:
    """True where some element over ``axis`` is nonzero (a bool array)."""
    return _logical_reduce("ReduceMax", a, axis, keepdims)


def cumsum(a: Any, axis: int | None = None, dtype: Any = None, out: Any = None) -> ndarray:
    """Running sums along ``axis`` (the flattened array without one)."""
    a = to_array(a)
    a = cast(a, _summing_dtype(a, dtype))
    if axis is None:
        a = invoke("Reshape", [a, nd_array(np.asarray([-1], np.int64), device=a.device,
                                           dtype=np.int64)])
        axis = 0
    where = nd_array(np.asarray(axis, np.int64), device=a.device, dtype=np.int64)
    return fresh(invoke("CumSum", [a, where]))


def _install_methods() -> None:
    for name in ("sum", "prod", "mean", "var", "std", "max", "min", "argmax", "argmin",
                 "all", "any", "cumsum", "round", "clip", "sign", "abs", "square", "sqrt",
                 "exp", "log", "tanh", "sigmoid"):
        setattr(ndarray, name, globals()[name])


_install_methods()
