"""Holding kernels and launches to the device's caps (its own, or those ``impose_limits`` set).

A phone GPU rejects, at build or launch time and with terse driver codes, what a desktop or
PoCL accepts: a float64 kernel without cl_khr_fp64, a work-group larger than the device's (or
the kernel's) maximum, more ``__local`` memory than it has, more bytes of kernel arguments than
its CL_DEVICE_MAX_PARAMETER_SIZE. ``KernelLimits`` checks each of these where the backend can
name what is at fault, so that the same checks run on PoCL under a phone profile
(``PORTABLE_OPENCL_LIMITS=phone``) prove the caps hold:

- before a kernel is first built: a source that computes in double is refused when the device
  has no float64, naming the op and the dtype;
- after it is built: its ``__local`` bytes (CL_KERNEL_LOCAL_MEM_SIZE) must fit the device's
  local memory, and its arguments (pointers of the device's address size, scalars and vectors
  of their own, from the signature) the device's parameter size; its own work-group maximum
  (CL_KERNEL_WORK_GROUP_SIZE, lower than the device's for kernels heavy in registers) is
  recorded;
- at each launch: the work-group must fit both; a 1-D launch shrinks to fit (kernels check
  their bounds), a shaped one is refused.

``stats`` keeps the largest work-group launched, the largest ``__local`` use and the largest
argument list built, which tests compare with the caps.

No kernel of this backend declares ``__local`` memory today (GEMM keeps its tiles in registers,
reductions and pooling walk their windows per work-item), so none has a tile to size; one that
does must size it from ``runtime.device.local_mem`` (the capped value), and ``check`` refuses
it otherwise. Every launch passes an explicit work-group shape (``Runtime.launch1d``, GEMM's
``work_group``); a launch without one would leave the choice to the driver, unchecked.
"""
from __future__ import annotations

import math
import re
import threading
from typing import Any, Sequence

import numpy as np

from portable.errors import BackendError

# ``double`` (scalar or vector) or the fp64 pragma, outside comments.
_FLOAT64 = re.compile(r"\bdouble(?:2|3|4|8|16)?\b|\bcl_khr_fp64\b")
_COMMENTS = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def uses_float64(source: str) -> bool:
    """Whether an OpenCL C source computes in (or enables) double precision."""
    return _FLOAT64.search(_COMMENTS.sub(" ", source)) is not None


class KernelLimits:
    """The checks of one device (see the module docstring).

    Attributes:
        stats: ``work_group`` (largest launched), ``local_mem`` (largest ``__local`` bytes of
            a built kernel), ``parameters`` (largest argument bytes of a built kernel),
            ``kernels`` (kernels checked), ``shrunk`` (1-D launches whose work-group was cut to
            a kernel's own maximum).
    """

    def __init__(self, device: Any) -> None:
        self.device = device
        self._local = threading.local()
        self._kernel_max: dict[Any, int] = {}
        self.stats = {"work_group": 0, "local_mem": 0, "parameters": 0, "kernels": 0,
                      "shrunk": 0}

    # -- which op is running (errors name it) -------------------------------------------------
    @property
    def op(self) -> str | None:
        return getattr(self._local, "op", None)

    @op.setter
    def op(self, value: str | None) -> None:
        self._local.op = value

    def _where(self, name: str) -> str:
        op = self.op
        return f"op {op} (kernel {name!r})" if op else f"kernel {name!r}"

    # -- hooks of ProgramCache ----------------------------------------------------------------
    def vet(self, source: str, name: str) -> None:
        """Refuse, before building, a float64 kernel on a device without float64."""
        if not self.device.fp64 and uses_float64(source):
            raise BackendError(
                f"{self._where(name)} computes in float64, which {self.device.label} does not "
                f"support (no cl_khr_fp64): run float64 work on the cpu device, or cast it "
                f"to float32")

    def check(self, kernel: Any, name: str, arguments: Sequence[Any]) -> None:
        """Check a freshly built kernel's ``__local`` memory and argument bytes (``arguments``:
        per argument None for a pointer, else its dtype); record its work-group maximum."""
        import pyopencl as cl

        parameters = sum(self.device.address_bytes if dtype is None else
                         np.dtype(dtype).itemsize for dtype in arguments)
        if parameters > self.device.max_parameter:
            raise BackendError(f"{self._where(name)} takes {parameters} bytes of arguments; "
                               f"{self.device.label} allows {self.device.max_parameter}")

        info = cl.kernel_work_group_info
        local = int(kernel.get_work_group_info(info.LOCAL_MEM_SIZE, self.device.device))
        most = int(kernel.get_work_group_info(info.WORK_GROUP_SIZE, self.device.device))
        if local > self.device.local_mem:
            raise BackendError(f"{self._where(name)} uses {local} bytes of local memory; "
                               f"{self.device.label} has {self.device.local_mem}")
        self.stats["kernels"] += 1
        self.stats["local_mem"] = max(self.stats["local_mem"], local)
        self.stats["parameters"] = max(self.stats["parameters"], parameters)
        self._kernel_max[kernel] = min(most, self.device.max_work_group)

    # -- launches -------------------------------------------------------------------------------
    def work_group(self, kernel: Any, local_size: Sequence[int]) -> Sequence[int]:
        """``local_size``, or a smaller 1-D one, within the device's and the kernel's
        maximum."""
        most = self._kernel_max.get(kernel, self.device.max_work_group)
        size = math.prod(local_size)
        if size > most:
            if len(local_size) != 1:
                raise BackendError(
                    f"{self._where(getattr(kernel, 'function_name', '?'))}: a work-group of "
                    f"{tuple(local_size)} ({size} work-items) exceeds the {most} that "
                    f"{self.device.label} allows for it")
            size = 1 << (most.bit_length() - 1)  # the largest power of two that fits
            local_size = (size,)
            self.stats["shrunk"] += 1
        if size > self.stats["work_group"]:
            self.stats["work_group"] = size
        return local_size
