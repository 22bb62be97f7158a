"""The per-device runtime: program cache, memory pool, and kernel launches on one queue.

Engine integration: every kernel of a device goes to that device's single in-order queue, so
kernels run in the order the dependency engine released them. An engine op must still not
complete before its kernels have, so a launch (or device copy) waits for its event before
returning, unless it happens inside a ``deferred()`` block: then launches only enqueue, and the
block waits once, for the last event of its thread, when it ends. An op kernel runs inside
such a block (one wait per op, not per launch); so may a whole compiled segment, which lets
the host keep the queue fed instead of idling between kernels.

Launches hold a lock: setting a kernel's arguments and enqueueing it must not interleave with
another engine worker thread using the same cl.Kernel object.

Every kernel built and every launch is held to the device's caps (``limits``): work-group size,
local memory, float64; errors name the op running (``op_scope``).
"""
from __future__ import annotations

import collections
import threading
from typing import Any, Sequence

import numpy as np

from portable.errors import BackendError

from backends.opencl.device import CLDevice
from backends.opencl.limits import KernelLimits
from backends.opencl.program_cache import ProgramCache

MAX_INDEX = 2**31 - 1  # kernels index with 32-bit ints
_MIRROR_SIZE = 64       # elements: small arrays (shapes, axes, pads, ratios) keep a host copy
_MIRRORS = 4096         # at most this many host copies per device


def plain_args(args: Sequence[Any]) -> list[Any]:
    """Kernel arguments with NumPy scalars as Python ones, which pyopencl's typed invoker
    takes fastest."""
    return [a.item() if isinstance(a, np.generic) and a.dtype.names is None else a
            for a in args]


class Runtime:
    """Everything kernels need to run on one device.

    Attributes:
        device: the CLDevice (context, queue, capabilities).
        programs: its ProgramCache.
        local_size: the work-group size of 1-D kernels. Fixed per device, because PoCL
            compiles a kernel once per work-group size.
        per_item: elements per work-item of flat elementwise kernels.
        row_run: outputs of a row per work-item of the row window kernels.
        lock: held while enqueueing (launches and host copies; see the module docstring).
        limits: the checks of kernels and launches against the device's caps.
    """

    def __init__(self, device: CLDevice) -> None:
        import pyopencl.tools as cl_tools

        self.device = device
        self.queue = device.queue
        self.limits = KernelLimits(device)
        self.programs = ProgramCache(device, vet=self.limits.vet, check=self.limits.check)
        self.pool = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(device.queue))
        self.lock = threading.RLock()
        self._local = threading.local()
        self.local_size = min(64 if device.is_cpu else 256, device.max_work_group)
        # Elements one work-item of a flat elementwise kernel handles: CPU runtimes pay per
        # work-item (an Add of 200K elements on PoCL: 0.11-0.17 ms queued at 16, 0.06 at 64;
        # the kernel alone 38-39 us at 64, 30 at 256, 35 at 1024), GPUs want neighbouring
        # work-items on neighbouring elements.
        self.per_item = 256 if device.is_cpu else 1
        # Outputs of a row one work-item of the row window kernels computes (row_windows):
        # on CPUs the whole row (a loop the compiler vectorises), on GPUs a few.
        self.row_run = 1 << 20 if device.is_cpu else 4
        self.launches = 0
        # Host copies of small arrays uploaded from the host (axes, pads, bounds, ratios), so
        # kernels read them without a device round trip. Keyed by buffer; any write to the
        # buffer drops the copy (``touch``).
        self._mirrors: collections.OrderedDict = collections.OrderedDict()
        # Data derived from a buffer's contents (packed GEMM panels of weights), kept while
        # the buffer is not written: buffer id -> (buffer, {key: (value, nbytes)}), LRU order.
        self._derived: collections.OrderedDict = collections.OrderedDict()
        self._derived_bytes = 0
        self._seen: collections.OrderedDict = collections.OrderedDict()
        self.derived_budget = min(256 << 20, device.global_mem // 8)
        self._memos: dict[str, dict] = {}

    def memo(self, name: str) -> dict:
        """The dict ``name`` of per-device values a module caches (compiled kernels by
        signature, small constant arrays), created empty on first use."""
        return self._memos.setdefault(name, {})

    # -- host copies of small arrays ------------------------------------------------------------
    def remember(self, array: Any, host: Any) -> None:
        if host.size <= _MIRROR_SIZE:
            with self.lock:
                self._mirrors[id(array.buffer)] = (array.buffer, array.offset, array.shape,
                                                   array.strides, host.copy())
                while len(self._mirrors) > _MIRRORS:
                    self._mirrors.popitem(last=False)

    def touch(self, array: Any) -> None:
        """``array`` is about to be written: forget the host copy and derived data of its
        buffer."""
        if self._mirrors or self._derived or self._seen:
            key = id(array.buffer)
            with self.lock:
                self._mirrors.pop(key, None)
                self._seen.pop(key, None)
                entry = self._derived.pop(key, None)
                if entry is not None:
                    self._derived_bytes -= sum(n for _, n in entry[1].values())

    # -- data derived from unchanged buffers ----------------------------------------------------
    def derived(self, array: Any, key: Any) -> Any:
        """A value derived from ``array``'s buffer under ``key`` while the buffer is unwritten,
        else None. The first request of a key only marks it: values are kept from the second
        request on, so buffers rewritten every run (activations) are never cached."""
        buffer_id = id(array.buffer)
        with self.lock:
            entry = self._derived.get(buffer_id)
            if entry is not None and entry[0] is array.buffer and key in entry[1]:
                self._derived.move_to_end(buffer_id)
                return entry[1][key][0]
            return None

    def wants_derived(self, array: Any, key: Any) -> bool:
        """Whether a value computed for ``key`` should be kept (its second request)."""
        buffer_id = id(array.buffer)
        with self.lock:
            keys = self._seen.setdefault(buffer_id, set())
            self._seen.move_to_end(buffer_id)
            while len(self._seen) > _MIRRORS:
                self._seen.popitem(last=False)
            if key in keys:
                return True
            keys.add(key)
            return False

    def keep_derived(self, array: Any, key: Any, value: Any, nbytes: int) -> None:
        with self.lock:
            entry = self._derived.setdefault(id(array.buffer), (array.buffer, {}))
            entry[1][key] = (value, nbytes)
            self._derived_bytes += nbytes
            while self._derived_bytes > self.derived_budget and self._derived:
                _, (_, values) = self._derived.popitem(last=False)
                self._derived_bytes -= sum(n for _, n in values.values())

    def mirror(self, array: Any) -> Any:
        """The host copy of ``array`` when one is current, else None."""
        entry = self._mirrors.get(id(array.buffer))
        if entry is None or entry[0] is not array.buffer:
            return None
        _, offset, shape, strides, host = entry
        if (offset, shape, strides) != (array.offset, array.shape, array.strides):
            return None
        return host

    # -- memory ------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> Any:
        """A device buffer of at least ``nbytes`` (from the pool; returned when unreferenced).
        Freed buffers may be reused at once: the queue is in order, so no later command can
        overtake a pending one that still reads the old contents."""
        return self.pool.allocate(max(int(nbytes), 1))

    # -- kernels -----------------------------------------------------------------------------
    def kernel(self, source: str, name: str, options: Sequence[str] = ()) -> Any:
        return self.programs.kernel(source, name, options)

    def launch(self, kernel: Any, global_size: Sequence[int], local_size: Sequence[int] | None,
               *args: Any) -> Any:
        """Enqueue ``kernel``; global sizes are rounded up to whole work-groups (kernels check
        their bounds)."""
        global_size, local_size = self.work_shape(kernel, global_size, local_size)
        if not all(global_size):
            return None
        return self.enqueue(kernel, global_size, local_size, plain_args(args))

    def work_shape(self, kernel: Any, global_size: Sequence[int],
                   local_size: Sequence[int] | None) -> tuple[tuple, tuple | None]:
        """The global and local sizes ``launch`` enqueues ``kernel`` with: the local size
        within the device's limits and the global size rounded up to whole work-groups."""
        if local_size is not None:
            local_size = tuple(self.limits.work_group(kernel, local_size))
            global_size = tuple(-(-g // l) * l for g, l in zip(global_size, local_size))
        return tuple(global_size), local_size

    def enqueue(self, kernel: Any, global_size: tuple, local_size: tuple | None,
                args: Sequence[Any]) -> Any:
        """Enqueue ``kernel`` with sizes from ``work_shape`` and arguments from
        ``plain_args`` (a launch whose shape and arguments were worked out before)."""
        with self.lock:
            event = kernel(self.queue, global_size, local_size, *args)
            self.launches += 1
        self.record(event)
        return event

    def enqueue_set(self, kernel: Any, global_size: tuple, local_size: tuple | None) -> Any:
        """Enqueue ``kernel`` with the arguments already set on it (a kernel object of one
        caller's own: ``launch.Launch``); hold ``lock`` from setting them to this call."""
        import pyopencl as cl

        with self.lock:
            event = cl.enqueue_nd_range_kernel(self.queue, kernel, global_size, local_size)
            self.launches += 1
        self.record(event)
        return event

    def launch1d(self, kernel: Any, n: int, *args: Any) -> Any:
        """One work-item per element ``i < n`` (kernels take ``n`` and return when i >= n)."""
        if n > MAX_INDEX:
            raise BackendError(f"{n} elements exceed the OpenCL backend's 32-bit indexing")
        return self.launch(kernel, (n,), (self.local_size,), *args)

    def record(self, event: Any) -> None:
        """Note an enqueued command (a launch or a copy): outside a deferred block, wait for
        it; inside, remember it as this thread's last."""
        if event is None:
            return
        if self.is_deferred:
            self._local.event = event
        else:
            event.wait()

    def op_scope(self, op: str) -> "_OpScope":
        """Kernels built and launched inside run for ``op``: errors name it."""
        return _OpScope(self.limits, op)

    # -- synchronisation -----------------------------------------------------------------------
    @property
    def is_deferred(self) -> bool:
        return getattr(self._local, "deferred", 0) > 0

    def wait(self) -> None:
        """Wait for this thread's last enqueued command (and so, in order, for all before it)."""
        event = getattr(self._local, "event", None)
        if event is not None:
            self._local.event = None
            event.wait()

    def finish(self) -> None:
        self.queue.finish()
        self._local.event = None

    def deferred(self) -> "_Deferred":
        """Enqueue without waiting per kernel; wait once when the outermost block ends."""
        return _Deferred(self)


# The two blocks every kernel call enters, as classes: a generator-based context manager costs
# about 1.5 us per block, a noticeable part of an elementwise op's host time.
class _OpScope:
    __slots__ = ("limits", "op", "outer")

    def __init__(self, limits: Any, op: str) -> None:
        self.limits, self.op = limits, op

    def __enter__(self) -> None:
        self.outer, self.limits.op = self.limits.op, self.op

    def __exit__(self, *exc: Any) -> None:
        self.limits.op = self.outer


class _Deferred:
    __slots__ = ("runtime",)

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def __enter__(self) -> None:
        local = self.runtime._local
        local.deferred = getattr(local, "deferred", 0) + 1

    def __exit__(self, *exc: Any) -> None:
        local = self.runtime._local
        local.deferred -= 1
        if not local.deferred:
            self.runtime.wait()
