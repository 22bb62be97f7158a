"""Array creation in ``mx.np``: MXNet NumPy's defaults, float32 unless told otherwise
(``np.array([1, 2])`` and ``np.arange(5)`` are float32; NumPy data keep their dtype).

Example:
    >>> import portable as mx
    >>> mx.np.array([1, 2]).dtype, mx.np.arange(3).dtype
    (dtype('float32'), dtype('float32'))
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.ndarray.ndarray import NDArray
from portable.ndarray.ndarray import array as nd_array, empty as nd_empty, full as nd_full
from portable.numpy.multiarray import fresh, ndarray

_DEFAULT = np.float32


def _dtype(dtype: Any, default: Any = _DEFAULT) -> np.dtype:
    return np.dtype(default if dtype is None else dtype)


def _shape(shape: Any) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)


def array(object: Any, dtype: Any = None, ctx: Any = None,  # noqa: A002 - NumPy's name
          device: Any = None) -> ndarray:
    """A new array holding a copy of ``object``: an array or NumPy data keep their dtype,
    Python numbers and lists become float32 (bools too), as MXNet NumPy makes them.

    Args:
        object: an array, NumPy array, (nested) list or number.
        dtype: the element type (None: as above).
        ctx: the device.

    Returns:
        an ``ndarray``.

    Example:
        >>> import portable as mx
        >>> mx.np.array([[1.5, 2]]).shape
        (1, 2)
    """
    device = device if device is not None else ctx
    if isinstance(object, NDArray):
        if device is None:
            device = object.device
        object = object.asnumpy()
    elif not isinstance(object, np.ndarray):
        object = np.asarray(object)
        if dtype is None and object.dtype.kind in "fiub":
            dtype = _DEFAULT
    dtype = object.dtype if dtype is None else np.dtype(dtype)
    return fresh(nd_array(np.array(object, dtype=dtype, copy=True), device=device,
                           dtype=dtype))


asarray = array


def empty(shape: Any, dtype: Any = None, order: str = "C", ctx: Any = None,
          device: Any = None) -> ndarray:
    """An uninitialised array of ``shape``."""
    return fresh(nd_empty(_shape(shape), device if device is not None else ctx,
                           _dtype(dtype)))


def full(shape: Any, fill_value: Any, dtype: Any = None, order: str = "C", ctx: Any = None,
         device: Any = None, out: Any = None) -> ndarray:
    """An array of ``shape`` filled with ``fill_value`` (float32 by default; an array's
    dtype when ``fill_value`` is an array)."""
    if isinstance(fill_value, NDArray):
        dtype = fill_value.dtype if dtype is None else dtype
        fill_value = fill_value.asnumpy()
    return fresh(nd_full(_shape(shape), fill_value, device if device is not None else ctx,
                          _dtype(dtype)))


def zeros(shape: Any, dtype: Any = None, order: str = "C", ctx: Any = None,
          device: Any = None) -> ndarray:
    """An array of zeros (float32 by default)."""
    return full(shape, 0, dtype, order, ctx, device)


def ones(shape: Any, dtype: Any = None, order: str = "C", ctx: Any = None,
         device: Any = None) -> ndarray:
    """An array of ones (float32 by default)."""
    return full(shape, 1, dtype, order, ctx, device)


def _like(a: NDArray, value: Any, dtype: Any, ctx: Any) -> ndarray:
    return full(a.shape, value, a.dtype if dtype is None else dtype,
                ctx=a.device if ctx is None else ctx)


def zeros_like(a: NDArray, dtype: Any = None, order: str = "C", ctx: Any = None,
               out: Any = None) -> ndarray:
    return _like(a, 0, dtype, ctx)


def ones_like(a: NDArray, dtype: Any = None, order: str = "C", ctx: Any = None,
              out: Any = None) -> ndarray:
    return _like(a, 1, dtype, ctx)


def full_like(a: NDArray, fill_value: Any, dtype: Any = None, order: str = "C",
              ctx: Any = None, out: Any = None) -> ndarray:
    return _like(a, fill_value, dtype, ctx)


def empty_like(prototype: NDArray, dtype: Any = None, order: str = "C",
               subok: bool = False, shape: Any = None) -> ndarray:
    return empty(prototype.shape if shape is None else shape,
                 prototype.dtype if dtype is None else dtype, ctx=prototype.device)


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None,
           ctx: Any = None, device: Any = None) -> ndarray:
    """Evenly spaced values in ``[start, stop)``; float32 by default, as MXNet NumPy's."""
    if stop is None:
        start, stop = 0, start
    host = np.arange(start, stop, step, dtype=np.float64 if dtype is None else dtype)
    return array(host, dtype=_dtype(dtype), ctx=ctx, device=device)


def linspace(start: float, stop: float, num: int = 50, endpoint: bool = True,
             retstep: bool = False, dtype: Any = None, axis: int = 0,
             ctx: Any = None) -> Any:
    """``num`` evenly spaced values from ``start`` to ``stop`` (float32 by default)."""
    host, step = np.linspace(start, stop, int(num), endpoint=endpoint, retstep=True,
                             axis=axis)
    result = array(host, dtype=_dtype(dtype), ctx=ctx)
    return (result, step) if retstep else result


def eye(N: int, M: int | None = None, k: int = 0, dtype: Any = None,  # noqa: N803
        ctx: Any = None) -> ndarray:
    """A 2-d array with ones on the ``k``-th diagonal."""
    return array(np.eye(N, M, k), dtype=_dtype(dtype), ctx=ctx)


def identity(n: int, dtype: Any = None, ctx: Any = None) -> ndarray:
    return eye(n, dtype=dtype, ctx=ctx)
