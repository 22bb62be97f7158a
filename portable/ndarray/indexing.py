"""NDArray indexing: reads through ops (so autograd sees them), writes as engine ops.

Basic keys (ints, slices, None, Ellipsis) become one Slice plus a Reshape view; an integer
array key becomes a Gather along axis 0. Slice assignment is an engine op writing the array.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.engine import get_engine
from portable.ndarray.invoke import invoke
from portable.ndarray.ndarray import NDArray, array


def getitem(x: Any, key: Any) -> Any:
    if isinstance(key, (NDArray, np.ndarray, list)):
        host = None if isinstance(key, NDArray) else np.asarray(key)
        index = key if host is None else array(host, x.device, dtype=host.dtype)
        if index.dtype.kind not in "iu":
            raise IndexError(f"array indices must be integers, got {index.dtype}")
        return invoke("Gather", [x, index], {"axis": 0})
    parts = key if isinstance(key, tuple) else (key,)
    if any(isinstance(k, (NDArray, np.ndarray, list)) for k in parts):
        raise IndexError("mixing array indices with other indices is not supported; index "
                         "one axis at a time")
    if sum(k is Ellipsis for k in parts) > 1:
        raise IndexError("an index can only have a single ellipsis")
    used = sum(1 for k in parts if k is not None and k is not Ellipsis)
    if used > x.ndim:
        raise IndexError(f"too many indices ({used}) for an array of shape {x.shape}")
    expanded = []
    for k in parts:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (x.ndim - used))
        else:
            expanded.append(k)
    expanded.extend([slice(None)] * (x.ndim - sum(1 for k in expanded if k is not None)))

    starts, ends, axes, steps, out_shape = [], [], [], [], []
    axis = 0
    for k in expanded:
        if k is None:
            out_shape.append(1)
            continue
        size = x.shape[axis]
        if isinstance(k, (int, np.integer)):
            i = int(k)
            if not -size <= i < size:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {size}")
            i %= size
            starts.append(i), ends.append(i + 1), axes.append(axis), steps.append(1)
        elif isinstance(k, slice):
            start, stop, step = k.indices(size)
            length = len(range(start, stop, step))
            if (start, stop, step) != (0, size, 1):
                # Slice's end is exclusive and clamped; for negative steps past the front
                # use a sentinel below -size.
                end = stop if stop >= 0 else -size - 1
                starts.append(start), ends.append(end), axes.append(axis), steps.append(step)
            out_shape.append(length)
        else:
            raise IndexError(f"unsupported index {k!r}")
        axis += 1
    if not out_shape:
        out_shape = [1]  # MXNet 1.x has no 0-d arrays: one element keeps one axis
    result = x
    if axes:
        consts = [array(np.asarray(v, np.int64), x.device) for v in (starts, ends, axes, steps)]
        result = invoke("Slice", [x, *consts])
    if tuple(out_shape) != result.shape:
        result = invoke("Reshape", [result, array(np.asarray(out_shape, np.int64), x.device)])
    return result


def setitem(x: Any, key: Any, value: Any) -> None:
    if isinstance(key, NDArray):
        key = key.asnumpy()
    if isinstance(key, tuple):
        key = tuple(k.asnumpy() if isinstance(k, NDArray) else k for k in key)
    target = x._data
    backend = x.device.backend
    reads = []
    if isinstance(value, NDArray):
        source = value if value.device == x.device else value.copyto(x.device)
        reads.append(source._var)

        def assign() -> None:
            target[key] = source._data
    else:
        host = np.asarray(value)
        payload = backend.from_numpy(host.astype(x.dtype, copy=False)) if host.ndim else host

        def assign() -> None:
            target[key] = payload

    # Writing part of an array keeps the rest: the op reads the var too (an in-place update).
    get_engine().push(assign, reads=reads + [x._var], writes=[x._var], device=x.device,
                      name="setitem")
