"""The OpenCL backend (pyopencl): any OpenCL 1.2+ device, PoCL on the CPU in CI.

``create_backend(device)`` opens ``portable.opencl(i)`` (see ``backends.opencl.device`` for
selection and ``PORTABLE_OPENCL_DEVICE``). Arrays are ``CLArray`` views of device buffers;
kernels are generated (elementwise, reductions) or hand-written (GEMM, convolution, pooling,
normalisation, movement, recurrent cells, losses) and compiled once per device (programs are
cached on disk between runs).

Layers, each importing only those above it in this list (``tests/test_layering.py`` keeps the
import graph free of circles):

- ``device``, ``limits``, ``program_cache``, ``runtime``, ``formats``, ``scalars``: one device
  (and the phone-GPU limits it can be held to), its queue, compiled programs, the storage
  formats without a C type (bfloat16, float8...), and how dtypes look in C;
- ``allocator``: ``CLArray``, a typed strided view of a buffer, with host copies;
- ``codegen`` (the elementwise op and its C rendering), then ``optable`` (the table of ops);
- ``families``, then ``elementwise``: launching elementwise work, and the copies built on it;
  ``convert``: ONNX Cast's conversion between every pair of element types;
- ``gemm``, ``reduction``, ``gather``: the hand-written launches;
- ``arrayops``: the array namespace (``backend.xp``) and CLArray's NumPy-like methods, which
  this package attaches once at import (``arrayops.install_operators``); ``fallback``, the
  opt-in CPU fallback;
- ``kernels/``: one module per op family, registering the op kernels; then this package.

Engine integration: all kernels of a device go to its one in-order queue; an op kernel
enqueues its launches and waits once, for the last, before returning, so the engine op that
called it completes only when the device has finished (``runtime`` explains the deferred
blocks that let a whole compiled segment wait once).

Honest placement: an op without an OpenCL kernel raises MissingKernelError naming the op and
the device. Setting ``PORTABLE_OPENCL_FALLBACK=1`` before the device is first used (or
``create_backend(device, fallback=True)``) runs such ops with the NumPy reference on the host
instead, copying their inputs and outputs; ``backend.fallback_report()`` lists every op that
ran there and the bytes copied.

Example:
    >>> import portable as pt                                  # doctest: +SKIP
    >>> x = pt.nd.array([[1.0, -2.0]], device=pt.opencl(0))    # doctest: +SKIP
    >>> pt.nd.relu(x).asnumpy()                                # doctest: +SKIP
    array([[1., 0.]], dtype=float32)
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator

import numpy as np

from portable.backend import Backend, Kernel
from portable.device import Device
from portable.errors import BackendError, MissingDependencyError, MissingKernelError

from backends.opencl import arrayops
from backends.opencl.allocator import CLArray, arena, arena_view, empty, from_numpy, to_numpy
from backends.opencl.device import CLDevice
from backends.opencl.elementwise import assign
from backends.opencl.fallback import FallbackRecorder
from backends.opencl.kernels import kernels
from backends.opencl.runtime import Runtime
from backends.opencl.scalars import ctype

# CLArray is the bottom layer and imports nothing that computes; its copies, item assignment
# and NumPy operators are attached here, once, before any array exists (see ``allocator``).
arrayops.install_operators()

ENV_FALLBACK = "PORTABLE_OPENCL_FALLBACK"


class OpenCLBackend(Backend):
    """Kernels on one OpenCL device; arrays are ``CLArray``."""

    name = "opencl"

    def __init__(self, device: Device, runtime: Any, kernels: dict[str, Kernel],
                 fallback: bool = False) -> None:
        super().__init__(device, kernels)
        self.runtime = runtime
        self._opened = runtime.device  # what ``limited`` imposes on (blocks do not compound)
        self.xp = arrayops.ArrayNamespace(runtime)
        self.alignment = runtime.device.alignment
        self.fallback = FallbackRecorder(self) if fallback else None
        self._wrapped: dict[str, Kernel] = {}

    def kernel(self, op: str) -> Kernel:
        """The kernel of ``op``, wrapped so that the engine op calling it completes only when
        the device has finished its commands (unless a deferred segment waits once at its
        end). Without an OpenCL kernel: the CPU fallback when allowed, else
        MissingKernelError."""
        wrapped = self._wrapped.get(op)
        if wrapped is not None:
            return wrapped
        fn = self.kernels.get(op)
        if fn is None:
            if self.fallback is None:
                raise MissingKernelError(
                    f"op {op} has no kernel on device {self.device} (backend opencl, "
                    f"{self.runtime.device.name}); set {ENV_FALLBACK}=1 to run it on the "
                    f"CPU with copies")
            fn = self.fallback.kernel(op)
        runtime = self.runtime

        def guarded(call):
            def run(ctx, inputs, outputs, attrs):
                for out in outputs:
                    if out is not None:
                        runtime.touch(out)
                with runtime.op_scope(op), runtime.deferred():  # one wait, at the block's end
                    # (a dynamic_outputs kernel returns the values it made: pass them on)
                    return call(ctx, inputs, outputs, attrs)
            run.__name__ = getattr(fn, "__name__", op)
            return run

        run = guarded(fn)
        bind = getattr(fn, "bind", None)
        if bind is not None:  # a prepared kernel: its plan-time part runs once per step
            def bind_guarded(backend, input_types, output_types, attrs):
                with runtime.op_scope(op):
                    return guarded(bind(backend, input_types, output_types, attrs))
            run.bind = bind_guarded
        if getattr(fn, "workspace", None) is not None:  # scratch the memory plan counts
            run.workspace = fn.workspace
        self._wrapped[op] = run
        return run

    def describe(self) -> str:
        return (f"OpenCL on {self.runtime.device.describe()}, {len(self.kernels)} kernels"
                + (", CPU fallback on" if self.fallback is not None else ""))

    def fallback_report(self) -> dict:
        """Ops that ran on the CPU fallback: ``{"ops": {op: calls}, "bytes_copied": n}``."""
        if self.fallback is None:
            return {"enabled": False, "ops": {}, "bytes_copied": 0}
        return self.fallback.report()

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Run a segment of kernels without a wait per kernel; one wait at the end."""
        with self.runtime.deferred():
            yield

    @contextlib.contextmanager
    def limited(self, limits: Any) -> Iterator["OpenCLBackend"]:
        """Run, inside the block, as if the device had ``limits`` (a ``Limits`` or a
        ``PORTABLE_OPENCL_LIMITS`` string; see ``device``): a fresh runtime on the same context
        and queue, with its own programs, launch shapes and checks; the previous one returns
        when the block ends. Arrays made inside stay valid after it. The limits apply to the
        device as opened (a block inside another does not add the outer block's limits).

        Example:
            >>> with pt.opencl(0).backend.limited("phone"):     # doctest: +SKIP
            ...     y = pt.nd.relu(x)                            # 256 work-items at most
        """
        from backends.opencl.device import impose_limits, parse_limits

        if isinstance(limits, str):
            limits = parse_limits(limits)
        saved = self.runtime, self.xp, self._wrapped
        self.runtime = Runtime(impose_limits(self._opened, limits))
        self.xp = arrayops.ArrayNamespace(self.runtime)
        self._wrapped = {}  # (the wrappers hold the runtime they launch on)
        try:
            yield self
        finally:
            self.runtime.finish()
            self.runtime, self.xp, self._wrapped = saved

    # -- allocator -------------------------------------------------------------------------
    def dtype_problem(self, dtype: Any) -> str | None:
        """Why this backend cannot hold ``dtype``, or None. Every numeric ONNX element type is
        held: bfloat16, float8, float4 and the 4- and 2-bit integers as storage formats
        (``formats``)."""
        try:
            ctype(dtype)
        except BackendError:
            return (f"backend {self.name} (device {self.runtime.device.name}) cannot hold "
                    f"element type {np.dtype(dtype).name}: run it on the cpu device")
        return None

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        return empty(self.runtime, shape, dtype)

    def arena(self, nbytes: int) -> Any:
        return arena(self.runtime, nbytes)

    def view(self, arena: Any, offset: int, shape: tuple[int, ...], dtype: Any) -> Any:
        return arena_view(arena, offset, shape, dtype)

    def from_numpy(self, array: np.ndarray) -> Any:
        return from_numpy(self.runtime, array)

    def to_numpy(self, array: Any) -> np.ndarray:
        return to_numpy(array) if isinstance(array, CLArray) else np.asarray(array)

    def copy_into(self, dst: Any, src: Any) -> None:
        assign(dst, src)

    def synchronize(self) -> None:
        self.runtime.finish()


def create_backend(device: Device, fallback: bool | None = None,
                   limits: Any = None) -> OpenCLBackend:
    """Open ``device`` (``portable.opencl(i)``), under ``limits`` when given (a ``Limits`` or a
    ``PORTABLE_OPENCL_LIMITS`` string; None reads that variable: see ``device``).

    Raises:
        MissingDependencyError: pyopencl is not installed.
        BackendError: no OpenCL platform/device, or index ``i`` does not exist.
    """
    try:
        import pyopencl  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(
            f"the OpenCL backend needs pyopencl ({exc}); install it with: "
            f"pip install 'portable[opencl]'") from exc
    runtime = Runtime(CLDevice.open_limited(device.device_id, limits))
    if fallback is None:
        fallback = os.environ.get(ENV_FALLBACK, "0") not in ("", "0")
    return OpenCLBackend(device, runtime, kernels, fallback)
