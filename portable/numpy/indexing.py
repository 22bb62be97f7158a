"""NumPy indexing of ``mx.np.ndarray``: through ops, so autograd sees every read.

- basic keys (ints, slices, None, Ellipsis): ``nd``'s Slice-and-Reshape indexing, reshaped
  to NumPy's result shape (a full index gives a 0-d array);
- one integer array (or list, or range) for one axis, the others whole: a Gather on it;
- integer arrays for the leading axes together (``y_hat[range(n), y]``): the flat positions
  are worked out on the host and gathered from the array with those axes merged;
- a boolean mask over the leading axes: its True positions (read on the host: the result's
  shape depends on them), gathered the same way.

Float index arrays are accepted (``np.array([0, 1])`` is float32 in MXNet) and truncated.

Example:
    >>> import portable as mx
    >>> x = mx.np.array([[1, 2], [3, 4]])
    >>> x[1, 0].shape, x[x > 2].tolist()
    ((), [3.0, 4.0])
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.ndarray.indexing import getitem as nd_getitem, setitem as nd_setitem
from portable.ndarray.invoke import invoke
from portable.ndarray.ndarray import NDArray, array as nd_array
from portable.numpy.multiarray import fresh, ndarray


def _ints(values: Any, like: NDArray) -> NDArray:
    return nd_array(np.asarray(values, np.int64).reshape(-1), device=like.device,
                    dtype=np.int64)


def _reshape(x: NDArray, shape: Any) -> NDArray:
    if tuple(shape) == x.shape:
        return x
    return invoke("Reshape", [x, _ints(list(shape), x)])


def _is_array_key(key: Any) -> bool:
    return isinstance(key, (NDArray, np.ndarray, list, range))


def _host_key(key: Any) -> np.ndarray:
    """An array key on the host: bool stays bool, anything else becomes int64."""
    host = key.asnumpy() if isinstance(key, NDArray) else np.asarray(key)
    if host.dtype.kind == "b":
        return host
    if host.dtype.kind not in "iuf":
        raise IndexError(f"arrays used as indices must be of integer or boolean type, got "
                         f"{host.dtype}")
    return host.astype(np.int64)


def _basic_shape(shape: tuple, key: Any) -> tuple:
    """NumPy's result shape of a basic index, worked out on a zero-byte broadcast view."""
    probe = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), shape=shape,
                                            strides=(0,) * len(shape))
    return probe[key].shape


def _gather_leading(x: NDArray, positions: np.ndarray, count: int) -> NDArray:
    """Elements at ``positions`` (an int array of any shape, indices into the first ``count``
    axes flattened) of ``x``, each with the trailing axes."""
    rest = x.shape[count:]
    flat = _reshape(x, (int(np.prod(x.shape[:count], dtype=np.int64)),) + rest)
    index = nd_array(positions.reshape(-1), device=x.device, dtype=np.int64)
    gathered = invoke("Gather", [flat, index], {"axis": 0})
    return _reshape(gathered, positions.shape + rest)


def _check_bounds(index: np.ndarray, size: int, axis: int) -> np.ndarray:
    if index.size and (index.min() < -size or index.max() >= size):
        bad = index[(index < -size) | (index >= size)][0]
        raise IndexError(f"index {int(bad)} is out of bounds for axis {axis} with size {size}")
    return np.where(index < 0, index + size, index)


def getitem(x: ndarray, key: Any) -> ndarray:
    """``x[key]`` with NumPy's semantics."""
    parts = key if isinstance(key, tuple) else (key,)
    if not any(_is_array_key(k) for k in parts):
        result = nd_getitem(x, key)
        return fresh(_reshape(result, _basic_shape(x.shape, key)))
    arrays = [i for i, k in enumerate(parts) if _is_array_key(k)]
    if len(parts) == 1:
        host = _host_key(parts[0])
        if host.dtype.kind == "b":
            if host.shape != x.shape[:host.ndim]:
                raise IndexError(f"boolean index of shape {host.shape} does not match the "
                                 f"array's leading axes {x.shape[:host.ndim]}")
            return fresh(_gather_leading(x, np.flatnonzero(host), host.ndim))
        host = _check_bounds(host, x.shape[0], 0) if x.ndim else host
        return fresh(_gather_leading(x, host, 1))
    if arrays == list(range(len(parts))):  # integer arrays for the leading axes
        hosts = [_host_key(k) for k in parts]
        if any(h.dtype.kind == "b" for h in hosts) or len(hosts) > x.ndim:
            raise IndexError(f"unsupported index {key!r} for an array of shape {x.shape}")
        hosts = [_check_bounds(h, x.shape[a], a) for a, h in enumerate(hosts)]
        hosts = np.broadcast_arrays(*hosts)
        positions = np.ravel_multi_index(tuple(hosts), x.shape[:len(hosts)])
        return fresh(_gather_leading(x, np.asarray(positions), len(hosts)))
    if len(arrays) == 1 and all(k == slice(None) for i, k in enumerate(parts)
                                if i != arrays[0]):
        axis = arrays[0]
        host = _host_key(parts[axis])
        if host.dtype.kind == "b":
            host = np.flatnonzero(host)
        host = _check_bounds(host, x.shape[axis], axis)
        index = nd_array(host, device=x.device, dtype=np.int64)
        return fresh(invoke("Gather", [x, index], {"axis": axis}))
    raise IndexError(f"unsupported index {key!r} for an array of shape {x.shape}: combine "
                     f"integer arrays only for the leading axes, or with whole slices")


def setitem(x: ndarray, key: Any, value: Any) -> None:
    """``x[key] = value`` with NumPy's semantics (an engine op writing ``x``)."""
    parts = key if isinstance(key, tuple) else (key,)
    parts = tuple(_host_key(k) if _is_array_key(k) else k for k in parts)
    nd_setitem(x, parts if isinstance(key, tuple) else parts[0], value)


ndarray.__getitem__ = getitem
ndarray.__setitem__ = setitem
