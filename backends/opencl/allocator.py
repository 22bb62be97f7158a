"""The OpenCL array: a typed, strided view of a device buffer, and host copies in and out.

A ``CLArray`` is (buffer, element offset, shape, element strides, dtype). Views — reshape of
a contiguous array, transpose, basic slicing, the planner's views into one arena — share the
buffer and differ only in offset and strides; kernels take buffer + offset, so no sub-buffer
(and no sub-buffer alignment rule) is involved.

This module is the bottom of the backend's array layers: it knows buffers, views and host
copies, and never imports what computes on the device. The methods that do (``copy``,
``astype``, ``fill``, item assignment, advanced indexing, arithmetic operators, reductions,
``@``) are attached by ``backends.opencl.arrayops.install_operators()``, which the package
``__init__`` calls once, so they exist before any array does. (A strided view is made
contiguous with ``copy`` before it is reshaped or read to the host.)

Example:
    >>> x = from_numpy(runtime, np.arange(6.0).reshape(2, 3))  # doctest: +SKIP
    >>> to_numpy(x.T[1:])                                       # doctest: +SKIP
    array([[1., 4.], [2., 5.]])
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from portable.errors import BackendError

from backends.opencl.scalars import ctype, storage_view_dtype


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= max(int(dim), 1)
    return tuple(reversed(strides))


def normalize_shape(shape: Any, size: int) -> tuple[int, ...]:
    """A reshape target with one -1 resolved; raises ValueError when sizes differ."""
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    shape = [int(d) for d in shape]
    if shape.count(-1) > 1:
        raise ValueError(f"shape {tuple(shape)} has more than one -1")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape {size} elements into {tuple(shape)}")
        shape[shape.index(-1)] = size // known
    if math.prod(shape) != size:
        raise ValueError(f"cannot reshape {size} elements into {tuple(shape)}")
    return tuple(shape)


class _Flags:
    __slots__ = ("c_contiguous",)

    def __init__(self, c_contiguous: bool) -> None:
        self.c_contiguous = c_contiguous


class CLArray:
    """A strided view of an OpenCL buffer.

    Attributes:
        runtime: the device runtime the buffer belongs to.
        buffer: the cl.Buffer (or pooled buffer) holding the elements.
        offset: index of element [0, ..., 0] in the buffer, in elements.
        strides: per axis, in elements (NumPy's are in bytes); 0 for broadcast axes.
    """

    __slots__ = ("runtime", "buffer", "shape", "dtype", "strides", "offset")
    __array_ufunc__ = None  # NumPy operators defer to ours (np.float32(2) * x -> x.__rmul__)
    __array_priority__ = 1000.0

    def __init__(self, runtime: Any, buffer: Any, shape: Sequence[int], dtype: Any,
                 strides: Sequence[int] | None = None, offset: int = 0) -> None:
        self.runtime = runtime
        self.buffer = buffer
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.strides = contiguous_strides(self.shape) if strides is None else \
            tuple(int(s) for s in strides)
        self.offset = int(offset)

    # -- properties --------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def is_contiguous(self) -> bool:
        expected = 1
        for dim, stride in zip(reversed(self.shape), reversed(self.strides)):
            if dim != 1 and stride != expected:
                return False
            expected *= dim
        return True

    @property
    def flags(self) -> _Flags:
        return _Flags(self.is_contiguous)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"CLArray({to_numpy(self)!r}, device={self.runtime.device.name!r})"

    # -- views -------------------------------------------------------------------------------
    def _view(self, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> "CLArray":
        """A view of this buffer; ``shape`` and ``strides`` are tuples of Python ints (built
        without the constructor's conversions: kernels make several views per call)."""
        view = object.__new__(CLArray)
        view.runtime, view.buffer, view.dtype = self.runtime, self.buffer, self.dtype
        view.shape, view.strides, view.offset = shape, strides, offset
        return view

    def reshape(self, *shape: Any, order: str = "C") -> "CLArray":
        """A view when the array is contiguous, else a contiguous copy reshaped."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        if shape == self.shape:
            return self
        shape = normalize_shape(shape, self.size)
        if shape == self.shape:
            return self
        source = self.contiguous()
        return source._view(shape, contiguous_strides(shape), source.offset)

    def ravel(self) -> "CLArray":
        return self.reshape(-1)

    def flatten(self) -> "CLArray":
        return self.copy().reshape(-1)

    def transpose(self, *axes: Any) -> "CLArray":
        if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = axes[0]
        axes = tuple(range(self.ndim))[::-1] if axes in ((), None) else \
            tuple(int(a) % max(self.ndim, 1) for a in axes)
        if sorted(axes) != list(range(self.ndim)):
            raise ValueError(f"axes {axes} are not a permutation of {self.ndim} axes")
        return self._view(tuple(self.shape[a] for a in axes),
                          tuple(self.strides[a] for a in axes), self.offset)

    @property
    def T(self) -> "CLArray":  # noqa: N802 (NumPy's name)
        return self.transpose()

    def swapaxes(self, a: int, b: int) -> "CLArray":
        axes = list(range(self.ndim))
        axes[a], axes[b] = axes[b], axes[a]
        return self.transpose(axes)

    def broadcast_to(self, shape: Sequence[int]) -> "CLArray":
        """A stride-0 view of this array broadcast to ``shape`` (NumPy's rules)."""
        shape = tuple(int(d) for d in shape)
        if shape == self.shape:
            return self
        lead = len(shape) - self.ndim
        if lead < 0:
            raise ValueError(f"cannot broadcast {self.shape} to {shape}")
        strides = [0] * lead
        for dim, have, stride in zip(shape[lead:], self.shape, self.strides):
            if have == dim:
                strides.append(stride)
            elif have == 1:
                strides.append(0)
            else:
                raise ValueError(f"cannot broadcast {self.shape} to {shape}")
        return self._view(shape, tuple(strides), self.offset)

    def __getitem__(self, key: Any) -> "CLArray":
        """A view for basic keys; ``install_operators()`` adds integer-array keys."""
        return basic_getitem(self, key)

    # -- device copies: attached by arrayops.install_operators() ------------------------------
    # Declared here so that the array's interface reads in one place (and ``contiguous``
    # below can call ``copy``); a call before the package ``__init__`` ran is a wiring bug.
    def copy(self) -> "CLArray":
        """A contiguous copy on the device."""
        raise _not_installed("copy")

    def astype(self, dtype: Any, copy: bool = True) -> "CLArray":
        """A copy converted to ``dtype`` (this array when ``copy=False`` and dtypes match)."""
        raise _not_installed("astype")

    def fill(self, value: Any) -> None:
        """Set every element to ``value``."""
        raise _not_installed("fill")

    def __setitem__(self, key: Any, value: Any) -> None:
        raise _not_installed("__setitem__")

    def contiguous(self) -> "CLArray":
        """This array when its elements lie in row-major order, else a contiguous copy (what
        a kernel indexing by flat offsets needs)."""
        return self if self.is_contiguous else self.copy()

    # -- host copies -----------------------------------------------------------------------
    def get(self) -> np.ndarray:
        """A host copy (waits for pending writes: the copy is queued behind them)."""
        return to_numpy(self)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        host = to_numpy(self)
        return host if dtype is None else host.astype(dtype)

    def item(self) -> Any:
        if self.size != 1:
            raise ValueError(f"item() needs a one-element array, got shape {self.shape}")
        return to_numpy(self).reshape(()).item()

    def __bool__(self) -> bool:
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())


def _not_installed(method: str) -> BackendError:
    return BackendError(f"CLArray.{method} is attached by backends.opencl.arrayops."
                        f"install_operators(), which importing backends.opencl runs")


def basic_getitem(array: CLArray, key: Any) -> CLArray:
    """``array[key]`` for basic keys (ints, slices, None, ...): a view sharing the buffer."""
    shape, strides, offset = basic_index(array.shape, array.strides, array.offset, key)
    return CLArray(array.runtime, array.buffer, shape, array.dtype, strides, offset)


def basic_index(shape: Sequence[int], strides: Sequence[int], offset: int,
                key: Any) -> tuple[list[int], list[int], int]:
    """Shape, strides and offset of ``view[key]`` for basic keys (ints, slices, None, ...)."""
    parts = list(key) if isinstance(key, tuple) else [key]
    if sum(k is Ellipsis for k in parts) > 1:
        raise IndexError("an index can only have a single ellipsis")
    used = sum(1 for k in parts if k is not None and k is not Ellipsis)
    if used > len(shape):
        raise IndexError(f"too many indices ({used}) for an array of shape {tuple(shape)}")
    if Ellipsis in parts:
        at = parts.index(Ellipsis)
        parts[at:at + 1] = [slice(None)] * (len(shape) - used)
    parts += [slice(None)] * (len(shape) - sum(1 for k in parts if k is not None))
    out_shape, out_strides, axis = [], [], 0
    for k in parts:
        if k is None:
            out_shape.append(1)
            out_strides.append(0)
            continue
        dim, stride = shape[axis], strides[axis]
        if isinstance(k, (bool, np.bool_)):
            raise IndexError("boolean scalar indices are not supported")
        if isinstance(k, (int, np.integer)):
            i = int(k)
            if not -dim <= i < dim:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {dim}")
            offset += (i % dim) * stride
        elif isinstance(k, slice):
            start, stop, step = k.indices(dim)
            length = len(range(start, stop, step))
            if length:
                offset += start * stride
            out_shape.append(length)
            out_strides.append(stride * step)
        else:
            raise IndexError(f"unsupported index {k!r}")
        axis += 1
    return out_shape, out_strides, offset


# -- allocation and host copies ------------------------------------------------------------------


def empty(runtime: Any, shape: Sequence[int], dtype: Any) -> CLArray:
    """An uninitialised contiguous array."""
    dtype = np.dtype(dtype)
    ctype(dtype)  # unsupported dtypes fail here, naming the dtype
    if dtype.kind == "f" and dtype.itemsize == 8 and not runtime.device.fp64:
        op = getattr(getattr(runtime, "limits", None), "op", None)
        raise BackendError(("" if op is None else f"op {op}: ") + f"float64 needs the "
                           f"cl_khr_fp64 extension, which {runtime.device.label} lacks: run "
                           f"float64 work on the cpu device, or cast it to float32")
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise BackendError(f"negative dimension in shape {shape}")
    return CLArray(runtime, runtime.alloc(math.prod(shape) * dtype.itemsize), shape, dtype)


def from_numpy(runtime: Any, host: Any) -> CLArray:
    """A device copy of a host array (the upload completes before this returns)."""
    host = np.require(np.asarray(host), requirements="C")  # keeps 0-d arrays 0-d
    out = empty(runtime, host.shape, host.dtype)
    upload(out, host)
    runtime.remember(out, host)
    return out


def upload(target: CLArray, host: np.ndarray) -> None:
    """Copy ``host`` (C-contiguous, of the target's shape and dtype) into a contiguous
    ``target``; the copy completes before this returns."""
    import pyopencl as cl

    target.runtime.touch(target)
    if host.nbytes:
        host = host.view(storage_view_dtype(host.dtype))  # (ml_dtypes' types: as bytes)
        with target.runtime.lock:
            event = cl.enqueue_copy(target.runtime.queue, target.buffer, host,
                                    dst_offset=target.offset * target.itemsize,
                                    is_blocking=True)
        target.runtime.record(event)


def host_value(array: CLArray) -> np.ndarray:
    """``array`` on the host: its remembered copy when current (small integer arrays uploaded
    from the host: axes, pads, bounds), else a copy from the device. Do not modify it."""
    mirror = array.runtime.mirror(array)
    return mirror if mirror is not None else to_numpy(array)


def to_numpy(array: CLArray) -> np.ndarray:
    """A host copy of ``array``; it waits for the commands queued before it."""
    import pyopencl as cl

    mirror = array.runtime.mirror(array)
    if mirror is not None:
        return mirror.copy()
    source = array.contiguous()
    host = np.empty(array.shape, array.dtype)
    if host.nbytes:
        with source.runtime.lock:
            event = cl.enqueue_copy(source.runtime.queue,
                                    host.view(storage_view_dtype(host.dtype)), source.buffer,
                                    src_offset=source.offset * source.itemsize,
                                    is_blocking=True)
        source.runtime.record(event)
    return host


def arena(runtime: Any, nbytes: int) -> CLArray:
    """One buffer for a whole memory plan, as bytes."""
    return CLArray(runtime, runtime.alloc(nbytes), (max(int(nbytes), 1),), np.uint8)


def arena_view(arena_array: CLArray, offset: int, shape: Sequence[int], dtype: Any) -> CLArray:
    """A typed array at byte ``offset`` of an arena; the offset must be a multiple of the
    element size (planners align to ``runtime.device.alignment``, which is)."""
    dtype = np.dtype(dtype)
    offset = int(offset) + arena_array.offset
    if offset % dtype.itemsize:
        raise BackendError(f"arena offset {offset} is not a multiple of the {dtype} element "
                           f"size {dtype.itemsize}")
    count = math.prod(shape) * dtype.itemsize
    if offset + count > arena_array.size + arena_array.offset:
        raise BackendError(f"a view of {count} bytes at offset {offset} overruns an arena of "
                           f"{arena_array.size} bytes")
    return CLArray(arena_array.runtime, arena_array.buffer, shape, dtype,
                   offset=offset // dtype.itemsize)
