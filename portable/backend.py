"""The small fixed interface every backend implements (DESIGN.md section 8).

A backend has a device, an allocator (one arena, views at offsets, copies in and out) and a
kernel table keyed by qualified op name. Kernels use destination-passing style:

    kernel(ctx: KernelContext, inputs: list[array | None], outputs: list[array | None],
           attrs: dict) -> None

They write into ``outputs``, buffers already placed by the planner. A missing kernel raises
MissingKernelError naming the op and the device: there is no silent fallback.

Run-time outputs: an op declared ``dynamic_outputs`` (NonZero, Unique, Loop, the sequence ops)
may have outputs whose shape depends on input values, or that are not tensors (sequences,
optionals). The planner cannot place those; the executor passes None in their place and the
kernel returns a list with one value per output: the array (or sequence, optional) it made for
each output given as None, and None for each output it wrote into. ``output_array`` serves both
cases, so one kernel runs whether or not planning could fix the shape.
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from portable.device import Device
from portable.errors import MissingKernelError

Kernel = Callable[["KernelContext", list, list, dict], None]


@dataclass
class KernelContext:
    """What a kernel may use besides its arrays: the array namespace, a random generator (seeded
    through ``portable.random.seed``), the node (for error messages) and its backend."""

    xp: Any
    rng: np.random.Generator
    backend: "Backend"
    node: Any = None
    workspace: dict = field(default_factory=dict)


def output_array(ctx: KernelContext, outputs: list, index: int, shape: tuple[int, ...],
                 dtype: Any) -> Any:
    """Output ``index`` of a ``dynamic_outputs`` kernel: the planned buffer when the executor
    gave one (its shape must be ``shape``), else a new array of the backend's.

    Example:
        >>> y = output_array(ctx, outputs, 0, (2, count), np.int64)   # doctest: +SKIP
        >>> return [None if outputs[0] is not None else y]            # doctest: +SKIP
    """
    given = outputs[index]
    if given is not None:
        if tuple(given.shape) != tuple(shape):
            raise ValueError(f"output {index} was planned as {tuple(given.shape)}, the kernel "
                             f"computed {tuple(shape)}")
        return given
    return ctx.backend.empty(tuple(int(d) for d in shape), dtype)


def returned_outputs(outputs: list, made: list) -> list:
    """What a ``dynamic_outputs`` kernel returns: each made value where the executor gave no
    buffer, None where it wrote into the given one."""
    return [value if given is None else None for given, value in zip(outputs, made)]


class Backend:
    """Base class of backends. Subclasses set ``name``, ``xp`` and ``kernels``."""

    name = "abstract"
    xp: Any = None
    # Whether its arrays are host NumPy arrays, which can hold string tensors (object arrays
    # of str); a backend without them refuses a plan that would hold one on its device.
    string_tensors = False

    def __init__(self, device: Device, kernels: dict[str, Kernel]) -> None:
        self.device = device
        self.kernels = kernels

    def kernel(self, op: str) -> Kernel:
        try:
            return self.kernels[op]
        except KeyError:
            raise MissingKernelError(
                f"op {op} has no kernel on device {self.device} (backend {self.name})") from None

    def describe(self) -> str:
        return f"{self.name} backend, {len(self.kernels)} kernels"

    # -- allocator -------------------------------------------------------------------------
    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        return self.xp.empty(shape, dtype=dtype)

    def arena(self, nbytes: int) -> Any:
        """One contiguous byte buffer for a memory plan."""
        return self.xp.empty((max(int(nbytes), 1),), dtype=np.uint8)

    def view(self, arena: Any, offset: int, shape: tuple[int, ...], dtype: Any) -> Any:
        """A typed array at a byte offset inside an arena."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        raw = arena[offset:offset + count * dtype.itemsize]
        return raw.view(dtype).reshape(shape)

    def from_numpy(self, array: np.ndarray) -> Any:
        return self.xp.asarray(array)

    def to_numpy(self, array: Any) -> np.ndarray:
        return np.asarray(array)

    def copy_into(self, dst: Any, src: Any) -> None:
        dst[...] = src

    def synchronize(self) -> None:
        """Wait for all work queued on the device (no-op for synchronous backends)."""

    def deferred(self) -> Any:
        """A block around a run of kernels (a plan's steps) that may return before its
        kernels finished, and waits once for them when it ends: a backend that waits for each
        op otherwise (OpenCL) keeps its queue fed instead of idling between kernels. Host
        reads inside wait for what they read. (Synchronous backends: nothing to do.)"""
        return contextlib.nullcontext()

    # -- threads of the host math library (a CPU backend may choose them per step) ----------
    def step_threads(self, op: str, input_types: list, output_types: list,
                     attrs: dict) -> bool | None:
        """At plan time: whether a step uses every thread of the math library the run allows
        (True), one thread (False), or leaves the threads as they are (None)."""
        return None

    def threads_allowed(self) -> int:
        """At the start of a run: the thread count the process allows now (0: the backend
        switches no threads)."""
        return 0

    def use_threads(self, count: int) -> None:
        """Set the math library's thread count (only called after ``threads_allowed``)."""


class PreparedKernel:
    """A kernel in two parts (DESIGN.md section 8): ``prepare(backend, input_types,
    output_types, attrs) -> state`` builds what shapes and attributes fix (geometry, parsed
    attributes, views) once per plan step, or once per signature of imperative calls;
    ``run(state, ctx, inputs, outputs, attrs)`` only computes.

    Calling the kernel itself, as a call site that planned nothing does (constant folding, a
    fallback, a nested kernel), prepares and runs in one go, so every site gets the same
    answer.
    """

    def __init__(self, run: Callable, prepare: Callable) -> None:
        self.run = run
        self.prepare = prepare
        self.__name__ = getattr(run, "__name__", "kernel")
        self.__qualname__ = getattr(run, "__qualname__", self.__name__)
        self.__module__ = getattr(run, "__module__", None)
        self.__doc__ = run.__doc__

    def __call__(self, ctx: KernelContext, inputs: list, outputs: list, attrs: dict) -> Any:
        state = self.prepare(ctx.backend, array_types(inputs), array_types(outputs), attrs)
        return self.run(state, ctx, inputs, outputs, attrs)

    def bind(self, backend: "Backend", input_types: list, output_types: list,
             attrs: dict) -> Callable:
        """The run-time call of one step: ``fn(ctx, inputs, outputs, attrs)``."""
        return functools.partial(self.run, self.prepare(backend, input_types, output_types,
                                                        attrs))


def context_free(bound: Callable) -> Callable:
    """Mark a bound kernel that never reads its ``ctx`` (an elementwise op bound to its
    namespace function): an imperative call then passes None instead of taking a kernel
    context from the pool."""
    bound.context_free = True
    return bound


def needs_context(bound: Callable) -> bool:
    """Whether a bound kernel reads its ``ctx`` (every kernel not marked by
    :func:`context_free`)."""
    return not getattr(bound, "context_free", False)


def array_types(arrays: list) -> list:
    """The TensorType of each array (None where absent)."""
    from portable.ir.graph import TensorType

    return [None if a is None else TensorType(a.shape, a.dtype) for a in arrays]


def bound_kernel(kernel: Kernel, backend: "Backend", input_types: list, output_types: list,
                 attrs: dict) -> Kernel:
    """``kernel`` ready for repeated calls with these types: a prepared kernel's run-time part
    bound to its state, any other kernel as it is."""
    bind = getattr(kernel, "bind", None)
    return kernel if bind is None else bind(backend, input_types, output_types, attrs)


def kernel_table(wrap: Callable[..., Callable] | None = None
                 ) -> tuple[dict[str, Callable], Callable]:
    """A backend's kernel table and the decorator filling it: ``kernels, kernel =
    kernel_table()``, then ``@kernel("Op", "portable.OtherOp")``.

    Args:
        wrap: ``wrap(fn, **options)`` returns what is registered for ``fn``, given the
            decorator's keyword options (OpenCL's ``half=``); None registers ``fn`` itself.

    Returns:
        The dict (op name -> kernel) and the decorator, which returns the registered callable
        (attributes such as ``workspace`` go on it). The decorator's ``prepare=`` option makes
        a :class:`PreparedKernel` of ``prepare`` and the decorated ``run(state, ctx, inputs,
        outputs, attrs)``.
    """
    table: dict[str, Callable] = {}

    def kernel(*names: str, prepare: Callable | None = None, **options: Any) -> Callable:
        def register(fn: Callable) -> Callable:
            if prepare is not None:
                fn = PreparedKernel(fn, prepare)
            registered = wrap(fn, **options) if wrap is not None else fn
            for name in names:
                if name in table:
                    raise ValueError(f"kernel {name} is registered twice")
                table[name] = registered
            return registered
        return register

    return table, kernel
