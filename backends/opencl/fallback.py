"""Explicit CPU fallback: run an op without an OpenCL kernel on the NumPy reference.

Only used when the user allows it (``PORTABLE_OPENCL_FALLBACK=1`` or
``create_backend(device, fallback=True)``); every call copies the op's inputs to the host and
its outputs back, and is counted so ``fallback_report()`` shows where each op ran and what it
cost in copies. The NumPy kernels are reached through the device registry (``cpu()``), never
by importing another backend.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np

from portable.backend import KernelContext
from portable.device import cpu
from portable.errors import BackendError

from backends.opencl.allocator import CLArray, to_numpy
from backends.opencl.elementwise import assign


def host_only_kernel(op: str, why: Callable[[dict], str]) -> Callable:
    """The OpenCL kernel of an op that has none by design: it runs on the host through the
    explicit fallback when the user allowed it, and is otherwise refused with ``why(attrs)``
    (what the op is, in the user's terms) and the device."""
    def run(ctx, inputs, outputs, attrs):
        fallback = getattr(ctx.backend, "fallback", None)
        if fallback is not None:  # the user asked for host runs with copies
            fallback.kernel(op)(ctx, inputs, outputs, attrs)
            return
        raise BackendError(f"{why(attrs)}: it cannot run on device {ctx.backend.device} "
                           f"(backend opencl); run it on the CPU (mx.cpu()), or set "
                           f"PORTABLE_OPENCL_FALLBACK=1 to run it there with copies")
    run.__name__ = f"refuse_{op.rsplit('.', 1)[-1]}"
    return run


class FallbackRecorder:
    """Builds host-running kernels for one OpenCL backend and records their cost."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self._lock = threading.Lock()
        self.calls: dict[str, int] = {}
        self.bytes_copied = 0

    def kernel(self, op: str):
        host_backend = cpu().backend
        host_kernel = host_backend.kernel(op)  # MissingKernelError if NumPy lacks it too

        def run(ctx, inputs, outputs, attrs):
            copied = 0
            host_in = []
            for x in inputs:
                if isinstance(x, CLArray):
                    host_in.append(to_numpy(x))
                    copied += x.nbytes
                else:
                    host_in.append(x)
            host_out = [None if o is None else np.empty(o.shape, o.dtype) for o in outputs]
            host_ctx = KernelContext(np, ctx.rng, host_backend, ctx.node)
            host_kernel(host_ctx, host_in, host_out, attrs)
            for target, value in zip(outputs, host_out):
                if target is not None:
                    assign(target, value)
                    copied += target.nbytes
            with self._lock:
                self.calls[op] = self.calls.get(op, 0) + 1
                self.bytes_copied += copied

        run.__name__ = f"fallback_{op}"
        return run

    def report(self) -> dict:
        with self._lock:
            return {"enabled": True, "ops": dict(self.calls), "bytes_copied": self.bytes_copied}
