"""MXNet 1.x contexts (``mx.Context``, ``mx.cpu``, ``mx.gpu``, ``mx.current_context``) as a thin
layer over ``portable.device``: a Context *is* a portable Device (``cpu`` -> the NumPy backend,
``gpu`` -> the CUDA/CuPy backend), so it goes wherever a device does, and it prints, compares
and names its type as MXNet does (``gpu(0)``, ``device_type == 'gpu'``).

``with ctx:`` makes ``ctx`` the device of the arrays created in the block without a device
named, in this thread.

Example:
    >>> import portable as mx
    >>> with mx.cpu(0):
    ...     mx.current_context()
    cpu(0)
    >>> mx.gpu(1) == mx.Context("gpu", 1), str(mx.gpu(1))
    (True, 'gpu(1)')
"""
from __future__ import annotations

from typing import Any

from portable.device import Device, cuda, default_device, set_default_device
from portable.errors import BackendError, MissingDependencyError

# MXNet's device type names -> the portable device type that runs them. Pinned and shared CPU
# memory are plain host memory here.
_PORTABLE_TYPES = {"cpu": "cpu", "gpu": "cuda", "cpu_pinned": "cpu", "cpu_shared": "cpu"}
_MXNET_TYPES = {"cpu": "cpu", "cuda": "gpu"}


class Context(Device):
    """A device named the MXNet way.

    Args:
        device_type: ``'cpu'``, ``'gpu'``, ``'cpu_pinned'``, ``'cpu_shared'``, or a Context /
            Device to copy.
        device_id: the device index.

    Example:
        >>> Context("gpu", 2)
        gpu(2)
    """

    devtype2str = {1: "cpu", 2: "gpu", 3: "cpu_pinned", 5: "cpu_shared"}
    devstr2type = {"cpu": 1, "gpu": 2, "cpu_pinned": 3, "cpu_shared": 5}

    def __init__(self, device_type: "str | Device", device_id: int = 0) -> None:
        if isinstance(device_type, Device):
            device_id = device_type.device_id
            device_type = getattr(device_type, "_mx_type", None) or \
                _MXNET_TYPES.get(device_type.device_type, device_type.device_type)
        if device_type not in _PORTABLE_TYPES:
            raise BackendError(f"unknown context type {device_type!r}; known: "
                               f"{', '.join(_PORTABLE_TYPES)} (or a portable Device)")
        # the dataclass is frozen: set its fields the way its own __init__ does
        object.__setattr__(self, "device_type", device_type)
        object.__setattr__(self, "device_id", int(device_id))
        object.__setattr__(self, "_mx_type", device_type)
        object.__setattr__(self, "_old", None)

    @property
    def device(self) -> Device:
        """The portable Device that runs this context's work."""
        return Device(_PORTABLE_TYPES[self.device_type], self.device_id)

    @property
    def device_typeid(self) -> int:
        return self.devstr2type[self.device_type]

    @property
    def backend(self):
        return self.device.backend

    def _key(self) -> tuple[str, int]:
        return self.device.device_type, self.device_id

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, Context):
            return (self.device_type, self.device_id) == (other.device_type, other.device_id)
        if isinstance(other, Device):
            return self._key() == (other.device_type, other.device_id)
        return NotImplemented

    def __hash__(self) -> int:
        # equal to the hash of the Device it runs on, so either finds the other in a dict
        return hash(self._key())

    def __str__(self) -> str:
        return f"{self.device_type}({self.device_id})"

    __repr__ = __str__

    def __enter__(self) -> "Context":
        object.__setattr__(self, "_old", set_default_device(self))
        return self

    def __exit__(self, *exc: Any) -> None:
        set_default_device(self._old)

    def empty_cache(self) -> None:
        """Release cached, unused device memory (a no-op on the CPU)."""
        if self.device.device_type == "cuda":
            _cupy().get_default_memory_pool().free_all_blocks()


def cpu(device_id: int = 0) -> Context:
    """The CPU context ``cpu(device_id)``."""
    return Context("cpu", device_id)


def gpu(device_id: int = 0) -> Context:
    """GPU ``device_id`` (run by the CUDA backend, ``pip install 'portable[cuda]'``); making
    the context needs no GPU, using it does."""
    return Context("gpu", device_id)


def cpu_pinned(device_id: int = 0) -> Context:
    """Pinned host memory (plain host memory here)."""
    return Context("cpu_pinned", device_id)


def current_context() -> Context:
    """The context of arrays created with none named: ``cpu(0)`` unless inside ``with ctx``."""
    device = default_device()
    return device if isinstance(device, Context) else Context(device)


def _cupy() -> Any:
    try:
        import cupy
    except ImportError as exc:
        raise MissingDependencyError(f"GPU queries need CuPy ({exc}); install it with: pip "
                                     f"install 'portable[cuda]'") from exc
    return cupy


def num_gpus() -> int:
    """How many CUDA GPUs are visible: 0 when CuPy or a CUDA driver is missing."""
    try:
        return int(_cupy().cuda.runtime.getDeviceCount())
    except Exception:  # noqa: BLE001 - no CuPy, no driver or no device all mean "none"
        return 0


def gpu_memory_info(device_id: int = 0) -> tuple[int, int]:
    """``(free, total)`` bytes of GPU ``device_id``.

    Raises:
        MissingDependencyError: CuPy is not installed.
        BackendError: there is no such GPU.
    """
    cupy = _cupy()
    count = num_gpus()
    if not 0 <= device_id < count:
        raise BackendError(f"gpu_memory_info: no GPU {device_id} (this machine has {count})")
    with cupy.cuda.Device(device_id):
        free, total = cupy.cuda.runtime.memGetInfo()
    return int(free), int(total)


__all__ = ["Context", "cpu", "cpu_pinned", "cuda", "current_context", "gpu",
           "gpu_memory_info", "num_gpus"]
