"""Devices and the backend registry.

A Device names where data lives and kernels run (``cpu(0)``, ``opencl(1)``, ``cuda(0)``). The
backend behind a device type is found through a name -> module table and imported on first use,
so ``import portable`` never imports pyopencl or cupy; a missing optional dependency becomes a
MissingDependencyError naming the extra to install.

Example:
    >>> import portable
    >>> portable.cpu().backend.name
    'numpy'
"""
from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from portable.errors import BackendError, MissingDependencyError

if TYPE_CHECKING:
    from portable.backend import Backend

# device type -> (module that provides ``create_backend(device)``, pip extra that installs it)
BACKEND_MODULES: dict[str, tuple[str, str]] = {
    "cpu": ("backends.numpy", ""),
    "null": ("backends.null", ""),
    "opencl": ("backends.opencl", "opencl"),
    "cuda": ("backends.cupy", "cuda"),
}

_backends: dict["Device", "Backend"] = {}


@dataclass(frozen=True)
class Device:
    """A device: a type (``cpu``, ``opencl``, ``cuda``, ``null``) and an index."""

    device_type: str
    device_id: int = 0

    def __post_init__(self) -> None:
        if self.device_type not in BACKEND_MODULES:
            raise BackendError(f"unknown device type {self.device_type!r}; "
                               f"known: {', '.join(BACKEND_MODULES)}")

    def __str__(self) -> str:
        return f"{self.device_type}({self.device_id})"

    __repr__ = __str__

    @property
    def backend(self) -> "Backend":
        """The backend instance serving this device, created on first use."""
        # Kept on the instance too: this runs on every imperative op, and hashing a Device
        # for the table costs more than the op's bookkeeping around it.
        backend = self.__dict__.get("_backend")
        if backend is None:
            backend = _backends.get(self)
            if backend is None:
                backend = _backends[self] = _load_backend(self)
            object.__setattr__(self, "_backend", backend)  # (frozen: a cache, not a field)
        return backend


def _load_backend(device: Device) -> "Backend":
    module_name, extra = BACKEND_MODULES[device.device_type]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if getattr(exc, "name", None) == module_name:
            raise BackendError(f"the {device.device_type} backend ({module_name}) is not part "
                               f"of this portable installation") from exc
        hint = f" Install it with: pip install 'portable[{extra}]'" if extra else ""
        raise MissingDependencyError(
            f"the {device.device_type} backend ({module_name}) cannot be loaded: {exc}.{hint}"
        ) from exc
    return module.create_backend(device)


def cpu(device_id: int = 0) -> Device:
    """The host CPU (NumPy kernels)."""
    return Device("cpu", device_id)


def opencl(device_id: int = 0) -> Device:
    """An OpenCL device through pyopencl (``pip install 'portable[opencl]'``)."""
    return Device("opencl", device_id)


def cuda(device_id: int = 0) -> Device:
    """A CUDA GPU through CuPy (``pip install 'portable[cuda]'``)."""
    return Device("cuda", device_id)


def null(device_id: int = 0) -> Device:
    """A device that allocates and runs nothing, for engine and scheduling tests."""
    return Device("null", device_id)


class _DefaultDevice(threading.local):
    """The device of arrays made with no device named in this thread: the CPU (None), or the
    one ``with mx.Context(...)`` (portable.context) makes current. A class default, so that
    reading it on a thread that never set it raises and catches nothing."""

    device = None


_default = _DefaultDevice()


# The CPU device that ``as_device(None)`` gives when no other default is set: one instance (a
# Device is immutable), as making and hashing a new one on every call to find the instance
# arrays keep (``ndarray.kept_device``) cost more than the small ops that asked.
_HOST = Device("cpu", 0)


def default_device() -> Device:
    """The device ``as_device(None)`` gives in this thread (the CPU unless changed)."""
    return _default.device or _HOST


def set_default_device(device: "Device | None") -> "Device | None":
    """Make ``device`` this thread's default (None: the CPU); returns the previous setting."""
    previous = _default.device
    _default.device = device
    return previous


def as_device(spec: "Device | str | None") -> Device:
    """Accept a Device, ``None`` (the default device: the CPU unless a ``with mx.Context``
    block names another) or a string like ``"cpu"``, ``"opencl:1"``, ``"cuda(0)"``."""
    if spec is None:
        return default_device()
    if isinstance(spec, Device):
        return spec
    text = str(spec).strip().lower().replace("(", ":").rstrip(")")
    kind, _, index = text.partition(":")
    try:
        return Device(kind, int(index) if index else 0)
    except ValueError:
        raise BackendError(f"cannot parse device {spec!r}; use e.g. 'cpu', 'opencl:0'") from None


def available_devices() -> list[tuple[Device, str]]:
    """Every device whose backend loads here, with a one-line description (or why not)."""
    found = []
    for kind in BACKEND_MODULES:
        device = Device(kind, 0)
        try:
            found.append((device, device.backend.describe()))
        except BackendError as exc:
            found.append((device, f"unavailable: {exc}"))
    return found
