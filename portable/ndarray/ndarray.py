"""NDArray: an asynchronous tensor on a device (MXNet 1.x ``mx.nd.NDArray``).

Every NDArray owns a backend array and an engine var. Operations are pushed to the dependency
engine and return at once; reads (``asnumpy``, ``wait_to_read``) wait for the writes they depend
on, and mutations (``x[:] = ...``, ``x += y``) are write dependencies.

Example:
    >>> import portable as pt
    >>> x = pt.nd.array([[1, 2], [3, 4]])
    >>> (x * 2 + 1).asnumpy().tolist()
    [[3.0, 5.0], [7.0, 9.0]]
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from portable.device import Device, as_device
from portable.engine import get_engine
from portable.engine.base import INLINE, INLINE_ELEMENTS


# One Device instance per device for every array (``cpu()`` makes a new one per call): the op
# path then tells "same device" by identity and keys caches by it, where comparing or hashing
# a Device (a dataclass) would cost about as much as a tiny kernel.
_kept: dict[Device, Device] = {}
_kept_ids: set[int] = set()  # ids of _kept's values, which live as long as the process


def kept_device(spec: "Device | str | None") -> Device:
    """The one Device instance that arrays on the device ``spec`` names keep."""
    device = as_device(spec)
    kept = _kept.setdefault(device, device)
    _kept_ids.add(id(kept))
    return kept


class NDArray:
    """A multi-dimensional array on a device.

    This module holds the data and its movement only; the methods that run ops (operators,
    ``astype``, indexing, ``backward``) are attached by ``functions.install_operators``, which
    sits above ``invoke`` and ``autograd``, so the array layer imports neither.
    """

    __slots__ = ("_data", "_device", "_var", "_host_value", "_grad", "_grad_req", "_entry",
                 "__weakref__")
    __array_priority__ = 100.0  # make NumPy defer to our reflected operators

    def __init__(self, data: Any, device: Device | None = None, var: Any = None) -> None:
        self._data = data
        self._device = device if id(device) in _kept_ids else kept_device(device)
        self._var = var if var is not None else get_engine().new_var("ndarray")
        self._host_value = None  # set for small constants so type rules need not wait
        self._grad = None
        self._grad_req = "null"
        self._entry = None  # (tape entry, output index) while autograd records

    # -- properties ------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._data.shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self._data.dtype)

    @property
    def device(self) -> Device:
        return self._device

    context = ctx = device  # MXNet 1.x names

    @property
    def ndim(self) -> int:
        return len(self._data.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def grad(self) -> "NDArray | None":
        """The gradient buffer attached by ``attach_grad``."""
        return self._grad

    # -- synchronisation and host access ----------------------------------------------------
    def wait_to_read(self) -> "NDArray":
        """Block until every pending write to this array is done (re-raising its failure)."""
        get_engine().wait_for_var(self._var)
        return self

    @property
    def data(self) -> Any:
        """The backend array, after pending writes."""
        self.wait_to_read()
        return self._data

    def asnumpy(self) -> np.ndarray:
        """A NumPy copy of the data on the host."""
        return np.array(self._device.backend.to_numpy(self.data), copy=True)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.asnumpy()
        return out if dtype is None else out.astype(dtype)

    def asscalar(self) -> Any:
        if self.size != 1:
            raise ValueError(f"asscalar needs a one-element array, got shape {self.shape}")
        return self.asnumpy().reshape(()).item()

    item = asscalar

    def __float__(self) -> float:
        return float(self.asscalar())

    def __int__(self) -> int:
        return int(self.asscalar())

    def __bool__(self) -> bool:
        return bool(self.asscalar())

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"\n{self.asnumpy()!r}\n<NDArray {'x'.join(map(str, self.shape))} @{self._device}>"

    # -- DLPack ----------------------------------------------------------------------------
    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self.data.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> Any:
        return self._data.__dlpack_device__()

    def to_dlpack_for_read(self) -> Any:
        return self.__dlpack__()

    # -- copies between arrays and devices -------------------------------------------------
    def copyto(self, other: "NDArray | Device | str") -> "NDArray":
        """Copy into another NDArray of the same shape, or onto a device (an engine op)."""
        if not isinstance(other, NDArray):
            other = empty(self.shape, as_device(other), self.dtype)
        elif other.shape != self.shape:
            raise ValueError(f"copyto: shapes differ, {self.shape} -> {other.shape}")
        source, target = self, other
        src_backend, dst_backend = source._device.backend, target._device.backend

        def copy() -> None:
            if source._device == target._device:
                dst_backend.copy_into(target._data, source._data)
            else:
                dst_backend.copy_into(target._data,
                                      dst_backend.from_numpy(src_backend.to_numpy(source._data)))

        get_engine().push(copy, reads=[source._var], writes=[target._var],
                          device=target._device, name="copyto")
        return other

    def as_in_context(self, device: "Device | str") -> "NDArray":
        device = as_device(device)
        return self if device == self._device else self.copyto(device)

    as_in_ctx = as_in_context

    def copy(self) -> "NDArray":
        return self.copyto(self._device)

    # -- autograd --------------------------------------------------------------------------
    def attach_grad(self, grad_req: str = "write", stype: Any = None) -> None:
        """Allocate a gradient buffer; ``backward`` writes (or adds, ``grad_req='add'``) it."""
        if grad_req not in ("write", "add", "null"):
            raise ValueError(f"grad_req must be write, add or null, got {grad_req!r}")
        self._grad = zeros(self.shape, self._device, self.dtype)
        self._grad_req = grad_req
        self._entry = None

    def detach(self) -> "NDArray":
        return NDArray(self._data, self._device, var=self._var)

    def as_np_ndarray(self) -> Any:
        """This array as an ``mx.np.ndarray`` (NumPy semantics), sharing its storage: the
        NumPy layer, built on this one, installs it when ``mx.np`` is first used."""
        raise AttributeError("as_np_ndarray needs MXNet's NumPy interface: use mx.np (import "
                             "portable.numpy) before converting")


def _from_host(host: np.ndarray, device: Device) -> NDArray:
    out = NDArray(device.backend.from_numpy(host), device)
    if host.size <= 64 and host.dtype.kind in "iub":
        out._host_value = host  # small integer constants: shapes, axes, indices
    return out


def array(source: Any, device: "Device | str | None" = None, dtype: Any = None,
          ctx: Any = None) -> NDArray:
    """An NDArray holding a copy of ``source``: float32 unless ``dtype`` says otherwise or
    ``source`` is an NDArray (which keeps its dtype), as MXNet 1.x's ``nd.array`` (NumPy data
    of any dtype become float32 too)."""
    device = as_device(device if device is not None else ctx)
    if isinstance(source, NDArray):
        dtype = source.dtype if dtype is None else dtype
        source = source.asnumpy()
    if dtype is None:
        dtype = np.float32
    return _from_host(np.array(source, dtype=dtype, copy=True), device)


def empty(shape: Any, device: "Device | str | None" = None, dtype: Any = "float32",
          ctx: Any = None) -> NDArray:
    device = as_device(device if device is not None else ctx)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    return NDArray(device.backend.empty(shape, np.dtype(dtype)), device)


def full(shape: Any, val: Any, device: "Device | str | None" = None, dtype: Any = "float32",
         ctx: Any = None) -> NDArray:
    out = empty(shape, device, dtype, ctx)
    data = out._data

    def fill() -> None:
        data[...] = val

    small = math.prod(out.shape) <= INLINE_ELEMENTS  # (run where pushed, as small ops are)
    get_engine().push(fill, writes=[out._var], device=INLINE if small else out.device,
                      name="full")
    return out


def zeros(shape: Any, device: "Device | str | None" = None, dtype: Any = "float32",
          ctx: Any = None) -> NDArray:
    return full(shape, 0, device, dtype, ctx)


def ones(shape: Any, device: "Device | str | None" = None, dtype: Any = "float32",
         ctx: Any = None) -> NDArray:
    return full(shape, 1, device, dtype, ctx)


def arange(start: float, stop: float | None = None, step: float = 1.0,
           device: "Device | str | None" = None, dtype: Any = "float32",
           ctx: Any = None) -> NDArray:
    if stop is None:
        start, stop = 0, start
    return array(np.arange(start, stop, step, dtype=dtype), device=device, ctx=ctx)


def contiguous_zeros(shapes: Any, device: "Device | str | None" = None,
                     dtype: Any = "float32") -> list[NDArray]:
    """Zero arrays of the given shapes that lie back to back in one buffer, in order (each is
    an NDArray of its own for the engine). A distributed store reduces such neighbours as one
    range in a few large calls instead of one call, or one packing copy, per array: what
    ``gluon.Trainer`` gives its gradients under ``dist_sync`` (PyTorch DDP's
    ``gradient_as_bucket_view``)."""
    device = as_device(device)
    dtype = np.dtype(dtype)
    shapes = [(s,) if isinstance(s, (int, np.integer)) else tuple(s) for s in shapes]
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    arena = device.backend.arena(sum(sizes) * dtype.itemsize)
    out, offset = [], 0
    for shape, size in zip(shapes, sizes):
        array_ = NDArray(device.backend.view(arena, offset, shape, dtype), device)
        data = array_._data

        def fill(data: Any = data) -> None:
            data[...] = 0

        get_engine().push(fill, writes=[array_._var], device=device, name="contiguous_zeros")
        out.append(array_)
        offset += size * dtype.itemsize
    return out


def zeros_like(other: NDArray) -> NDArray:
    return zeros(other.shape, other.device, other.dtype)


def ones_like(other: NDArray) -> NDArray:
    return ones(other.shape, other.device, other.dtype)


def from_dlpack(source: Any, device: "Device | str | None" = None) -> NDArray:
    """Wrap a DLPack-capable array (NumPy, PyTorch, ...) without copying on the CPU."""
    host = np.from_dlpack(source)
    return NDArray(as_device(device).backend.from_numpy(host), as_device(device))


def waitall() -> None:
    """Wait for every pushed operation (raising the first failure)."""
    get_engine().wait_all()
