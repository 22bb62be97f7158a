"""OpenCL device discovery and selection.

Devices are numbered across platforms in the order the ICD loader lists them (platform by
platform, device by device); ``portable.opencl(i)`` is device ``i`` of that list. The
environment variable ``PORTABLE_OPENCL_DEVICE`` narrows and reorders it: a comma-separated list
of device indices or case-insensitive name fragments (matched against ``"platform: device"``),
so ``PORTABLE_OPENCL_DEVICE=nvidia`` makes ``opencl(0)`` the first NVIDIA device and
``PORTABLE_OPENCL_DEVICE=2,0`` makes ``opencl(0)`` device 2 and ``opencl(1)`` device 0.

Device limits: what passes on a desktop (or on PoCL, a CPU) must also run on a phone GPU
(Adreno, Mali): work-groups of at most 256 work-items (often fewer), at most 32 KB of local
memory, no float64, at most 1024 bytes of kernel arguments (CL_DEVICE_MAX_PARAMETER_SIZE: the
least a full-profile device may report; PoCL reports far more). ``PORTABLE_OPENCL_LIMITS``
(or ``impose_limits``) makes the backend behave as if the device had such limits: a profile
name from ``PROFILES`` (``phone``, ``phone-small``) and/or ``key=value`` items, e.g.
``PORTABLE_OPENCL_LIMITS=phone,wg=128``. The runtime then checks every built kernel and every
launch against the caps (``runtime``), and refuses any float64 kernel, naming the op.

Example:
    >>> from backends.opencl.device import list_devices  # doctest: +SKIP
    >>> [name for name, _ in list_devices()]              # doctest: +SKIP
    ['Portable Computing Language: pthread-AMD EPYC']
"""
from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from typing import Any

from portable.errors import BackendError

ENV_DEVICE = "PORTABLE_OPENCL_DEVICE"
ENV_LIMITS = "PORTABLE_OPENCL_LIMITS"


@dataclass(frozen=True)
class Limits:
    """Caps a device is made to respect, tighter than what it reports (None: keep its own).

    Attributes:
        name: the profile's name, shown in errors and ``describe()``.
        max_work_group: work-items per work-group, at most.
        local_mem: bytes of ``__local`` memory a kernel may use, at most.
        fp64: False refuses every float64 kernel and array (phone GPUs have no cl_khr_fp64).
        max_parameter: bytes of arguments a kernel may take, at most.
        gpu: True tunes as for a GPU (launch shapes, GEMM tiles) even on a CPU runtime, so the
            GPU code paths run on PoCL.
    """

    name: str = "custom"
    max_work_group: int | None = None
    local_mem: int | None = None
    fp64: bool | None = None
    gpu: bool = False
    max_parameter: int | None = None


# Adreno 6xx/7xx and Mali-G7x: 256 work-items (Mali's 384 rounded down), 32 KB local memory.
# phone-small: the tightest seen (older Mali, PowerVR): 64 work-items, 16 KB. Both take
# kernel arguments of 1024 bytes at most, the full profile's minimum, which they report.
PROFILES = {
    "phone": Limits("phone", max_work_group=256, local_mem=32 << 10, fp64=False, gpu=True,
                    max_parameter=1024),
    "phone-small": Limits("phone-small", max_work_group=64, local_mem=16 << 10, fp64=False,
                          gpu=True, max_parameter=1024),
}
_KEYS = {"wg": "max_work_group", "local": "local_mem", "fp64": "fp64", "gpu": "gpu",
         "param": "max_parameter"}


def parse_limits(spec: str) -> Limits | None:
    """Limits from a ``PORTABLE_OPENCL_LIMITS`` value: profile names and ``key=value`` items
    (keys ``wg``, ``local`` in bytes or with a ``k`` suffix, ``fp64``, ``gpu``, ``param`` in
    bytes), comma-separated, later items overriding earlier ones; ``""`` or ``"none"`` gives
    None.

    Example:
        >>> parse_limits("phone,wg=64").max_work_group
        64
    """
    limits, named = None, []
    for part in (p.strip() for p in spec.split(",")):
        if not part or part.lower() == "none":
            continue
        if "=" not in part:
            if part.lower() not in PROFILES:
                raise BackendError(f"{ENV_LIMITS}={spec!r}: unknown profile {part!r}; "
                                   f"profiles: {', '.join(PROFILES)}")
            limits = PROFILES[part.lower()]
            named.append(part.lower())
            continue
        key, _, value = (s.strip().lower() for s in part.partition("="))
        if key not in _KEYS:
            raise BackendError(f"{ENV_LIMITS}={spec!r}: unknown key {key!r}; keys: "
                               f"{', '.join(_KEYS)}")
        try:
            if key in ("fp64", "gpu"):
                parsed: object = value in ("1", "true", "yes", "on")
            else:
                parsed = int(value[:-1]) << 10 if value.endswith("k") else int(value)
        except ValueError:
            raise BackendError(f"{ENV_LIMITS}={spec!r}: {key}={value!r} is not a number") \
                from None
        limits = dataclasses.replace(limits or Limits(), **{_KEYS[key]: parsed})
        named.append(part)
    if limits is None:
        return None
    return dataclasses.replace(limits, name=",".join(named))


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


# The smallest program a device must build before portable uses it, and what each device
# (by driver identity) answered in this process: "" when it built, else the reason.
PROBE_SOURCE = "__kernel void probe(__global float* x) { x[get_global_id(0)] = 1.0f; }"
_compiles: dict[str, str] = {}


def check_compiler(context: Any, device: Any, name: str) -> None:
    """Refuse a device whose OpenCL compiler cannot build ``PROBE_SOURCE``, when it is opened
    rather than at its first kernel. PoCL is the case in point: its 3.0 wheels compile with
    LLVM 14, which names a CPU newer than itself (an AMD Zen 5, CPU family 26) "generic" and
    then refuses that name as a target, so every build fails on such a machine.

    Raises:
        BackendError: naming the device, the compiler's first error line and what to do.
    """
    cl = _cl()
    key = "|".join((name, device.platform.version, device.driver_version))
    if key not in _compiles:
        try:
            cl.Program(context, PROBE_SOURCE).build(devices=[device], cache_dir=False)
            _compiles[key] = ""
        except cl.Error as exc:
            lines = [line.strip() for line in str(exc).splitlines() if "error" in line]
            _compiles[key] = lines[-1] if lines else str(exc).strip().splitlines()[0]
    reason = _compiles[key]
    if reason:
        raise BackendError(
            f"OpenCL device {name!r} ({device.platform.version.strip()}) cannot compile "
            f"kernels on this machine: {reason}; a driver whose compiler knows this CPU "
            "(a newer PoCL build or a vendor driver) is needed")


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
        max_work_group, local_mem: the most work-items per work-group and ``__local`` bytes
            per kernel (capped by ``limits``).
        max_parameter: the most bytes of arguments a kernel may take (capped by ``limits``).
        address_bytes: the size of a pointer argument on the device.
        limits: the Limits imposed on the device (``impose_limits``), or None.
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
    max_parameter: int = 1024
    address_bytes: int = 8
    limits: Limits | None = None

    @classmethod
    def open(cls, index: int) -> "CLDevice":
        cl = _cl()
        name, device = select_device(index)
        context = cl.Context([device])
        check_compiler(context, device, name)
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
                   global_mem=int(device.global_mem_size),
                   max_parameter=int(device.max_parameter_size),
                   address_bytes=max(int(device.address_bits) // 8, 1))

    @classmethod
    def open_limited(cls, index: int, limits: Limits | str | None = None) -> "CLDevice":
        """Device ``index`` under ``limits`` (a Limits, a ``PORTABLE_OPENCL_LIMITS`` string, or
        None: that environment variable's value)."""
        if limits is None:
            limits = os.environ.get(ENV_LIMITS, "")
        if isinstance(limits, str):
            limits = parse_limits(limits)
        device = cls.open(index)
        return device if limits is None else impose_limits(device, limits)

    @functools.cached_property
    def identity(self) -> str:
        """What a compiled binary depends on: platform, device and driver versions (asked of
        the driver once: every kernel lookup keys on it)."""
        d = self.device
        parts = (self.name, d.platform.version, d.version, d.driver_version)
        return "|".join(str(v) for v in parts)

    def describe(self) -> str:
        kinds = ["float32", "float16 storage"] + (["float64"] if self.fp64 else [])
        limited = "" if self.limits is None else (
            f", limits {self.limits.name}: work-groups <= {self.max_work_group}, "
            f"local memory <= {self.local_mem >> 10} KB, arguments <= {self.max_parameter} "
            f"bytes")
        return (f"{self.name} ({self.device.version.strip()}, {self.compute_units} compute "
                f"units, {self.global_mem >> 20} MiB, {', '.join(kinds)}{limited})")

    @property
    def label(self) -> str:
        """The name errors give: with the limits profile when one is imposed."""
        return self.name if self.limits is None else f"{self.name} (limits {self.limits.name})"


def impose_limits(device: CLDevice, limits: Limits | None = None, *,
                  max_work_group: int | None = None, local_mem: int | None = None,
                  fp64: bool | None = None, max_parameter: int | None = None) -> CLDevice:
    """A copy of ``device`` that behaves as if it had ``limits`` (and the keyword caps): each
    cap is the smaller of the device's own and the imposed one. Apply it before the device's
    ``Runtime`` is made (launch shapes and kernels are chosen from these values then).

    Example:
        >>> phone = impose_limits(CLDevice.open(0), PROFILES["phone"])   # doctest: +SKIP
        >>> phone.fp64, phone.max_work_group <= 256                       # doctest: +SKIP
        (False, True)
    """
    limits = dataclasses.replace(limits or Limits(), **{
        k: v for k, v in (("max_work_group", max_work_group), ("local_mem", local_mem),
                          ("fp64", fp64), ("max_parameter", max_parameter)) if v is not None})
    return dataclasses.replace(
        device, limits=limits,
        max_work_group=min(device.max_work_group, limits.max_work_group or device.max_work_group),
        local_mem=min(device.local_mem, limits.local_mem or device.local_mem),
        max_parameter=min(device.max_parameter, limits.max_parameter or device.max_parameter),
        fp64=device.fp64 and limits.fp64 is not False,
        is_cpu=device.is_cpu and not limits.gpu)
