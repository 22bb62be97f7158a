"""OpenCL device discovery and selection.

Devices are numbered across platforms in the order the ICD loader lists them (platform by
platform, device by device); ``portable.opencl(i)`` is device ``i`` of that list. The
environment variable ``PORTABLE_OPENCL_DEVICE`` narrows and reorders it: a comma-separated list
of device indices or case-insensitive name fragments (matched against ``"platform: device"``),
so ``PORTABLE_OPENCL_DEVICE=nvidia`` makes ``opencl(0)`` the first NVIDIA device and
``PORTABLE_OPENCL_DEVICE=2,0`` makes ``opencl(0)`` device 2 and ``opencl(1)`` device 0.

Example:
    >>> from backends.opencl.device import list_devices  # doctest: +SKIP
    >>> [name for name, _ in list_devices()]              # doctest: +SKIP
    ['Portable Computing Language: pthread-AMD EPYC']
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from portable.errors import BackendError

ENV_DEVICE = "PORTABLE_OPENCL_DEVICE"


def _cl():
    import pyopencl as cl

    return cl


def list_devices() -> list[tuple[str, Any]]:
    """Every OpenCL device here as ``("platform: device", cl.Device)``, in ICD order.

    Raises:
        BackendError: when no OpenCL platform is installed.
    """
    cl = _cl()
    try:
        platforms = cl.get_platforms()
    except cl.Error as exc:  # no ICD loader entries: PLATFORM_NOT_FOUND_KHR
        platforms, reason = [], str(exc)
    else:
        reason = ""
    found = []
    for platform in platforms:
        try:
            devices = platform.get_devices()
        except cl.Error:  # a platform without devices reports DEVICE_NOT_FOUND
            continue
        found.extend((f"{platform.name.strip()}: {d.name.strip()}", d) for d in devices)
    if not found:
        raise BackendError("no OpenCL platform with a device was found"
                           + (f" ({reason})" if reason else "") + "; install a driver or, "
                           "for the CPU, pip install pocl-binary-distribution")
    return found


def _selected(found: list[tuple[str, Any]], spec: str) -> list[tuple[str, Any]]:
    chosen = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if part.isdigit():
            if int(part) >= len(found):
                raise BackendError(f"{ENV_DEVICE}={spec!r}: device {part} does not exist; "
                                   f"{_listing(found)}")
            chosen.append(found[int(part)])
            continue
        matches = [entry for entry in found if part.lower() in entry[0].lower()]
        if not matches:
            raise BackendError(f"{ENV_DEVICE}={spec!r}: no device name contains {part!r}; "
                               f"{_listing(found)}")
        chosen.extend(matches)
    return chosen


def _listing(found: list[tuple[str, Any]]) -> str:
    return "devices here: " + "; ".join(f"{i}: {name}" for i, (name, _) in enumerate(found))


def select_device(index: int) -> tuple[str, Any]:
    """Device ``index`` of the list, after ``PORTABLE_OPENCL_DEVICE`` narrowed it."""
    found = list_devices()
    spec = os.environ.get(ENV_DEVICE, "").strip()
    candidates = _selected(found, spec) if spec else found
    if not 0 <= index < len(candidates):
        narrowed = f" ({ENV_DEVICE}={spec!r})" if spec else ""
        raise BackendError(f"opencl({index}) does not exist: {len(candidates)} OpenCL "
                           f"device(s) available{narrowed}; {_listing(found)}")
    return candidates[index]


@dataclass
class CLDevice:
    """One OpenCL device with its context and in-order command queue.

    Attributes:
        name: ``"platform: device"``.
        alignment: base-address alignment of buffers and sub-buffers, in bytes
            (CL_DEVICE_MEM_BASE_ADDR_ALIGN is given in bits).
        fp64, fp16: whether double arithmetic / half arithmetic (cl_khr_fp16) is available;
            half *storage* (vload_half/vstore_half) is core OpenCL and always is.
    """

    name: str
    device: Any
    context: Any
    queue: Any
    alignment: int
    fp64: bool
    fp16: bool
    is_cpu: bool
    max_work_group: int
    local_mem: int
    compute_units: int
    global_mem: int

    @classmethod
    def open(cls, index: int) -> "CLDevice":
        cl = _cl()
        name, device = select_device(index)
        context = cl.Context([device])
        queue = cl.CommandQueue(context, device)
        extensions = device.extensions.split()
        return cls(name=name, device=device, context=context, queue=queue,
                   alignment=max(int(device.mem_base_addr_align) // 8, 1),
                   fp64="cl_khr_fp64" in extensions or bool(device.double_fp_config),
                   fp16="cl_khr_fp16" in extensions,
                   is_cpu=bool(device.type & cl.device_type.CPU),
                   max_work_group=int(device.max_work_group_size),
                   local_mem=int(device.local_mem_size),
                   compute_units=int(device.max_compute_units),
                   global_mem=int(device.global_mem_size))

    @property
    def identity(self) -> str:
        """What a compiled binary depends on: platform, device and driver versions."""
        d = self.device
        parts = (self.name, d.platform.version, d.version, d.driver_version)
        return "|".join(str(v) for v in parts)

    def describe(self) -> str:
        kinds = ["float32", "float16 storage"] + (["float64"] if self.fp64 else [])
        return (f"{self.name} ({self.device.version.strip()}, {self.compute_units} compute "
                f"units, {self.global_mem >> 20} MiB, {', '.join(kinds)})")
