"""A kept launch: a call's kernel, work shape and arguments, reused by the next call with the
same layout.

Working an elementwise launch out (result types, broadcasting, merged axes, the kernel and its
arguments) takes tens of microseconds of Python: several times what PoCL takes to enqueue a
kernel and, on arrays of a few hundred thousand elements, longer than the kernel runs. Between
the calls of a compiled plan's step (and imperative calls on arrays of the same shapes) only
the arrays' buffers and offsets change, so ``elementwise.run_elementwise`` keeps what it worked
out as a ``Launch``, keyed by the layout, and fills those two in at the next call. The GEMM
keeps its packing and multiply launches the same way (``gemm``).

Example:
    >>> launch = Launch.flat(runtime, kernel, count)     # doctest: +SKIP
    >>> launch.add(count); launch.array(0, out); launch.array(1, x)
    >>> launch.run(runtime, [out, x])                     # later: [other_out, other_x]
"""
from __future__ import annotations

from typing import Any, Sequence

from portable.errors import BackendError

from backends.opencl.runtime import MAX_INDEX, plain_args

KEPT = 1024  # launches a memo keeps before it starts again (shapes that vary without end)


def keep(memo: dict, layout: Any, launch: Any) -> Any:
    """Store ``launch`` under ``layout`` in ``memo`` (emptied first when full); returns it."""
    if len(memo) >= KEPT:
        memo.clear()
    memo[layout] = launch
    return launch


class Launch:
    """A launch of ``kernel`` whose arguments name arrays by index (for an elementwise call:
    its results first, then its array operands, in order).

    Attributes:
        outs: the (shape, dtype) of each result (set by the caller, to allocate them).
    """

    __slots__ = ("kernel", "global_size", "local_size", "args", "slots", "outs", "own",
                 "last")

    def __init__(self, runtime: Any, kernel: Any, global_size: Sequence[int],
                 local_size: Sequence[int] | None) -> None:
        self.kernel = kernel
        self.global_size, self.local_size = runtime.work_shape(kernel, global_size, local_size)
        self.args: list[Any] = []
        self.slots: list[tuple[int, int, bool]] = []  # (argument, array, is its offset)
        self.outs: list[tuple[tuple[int, ...], Any]] = []
        self.own: Any = None   # a clone of the kernel whose arguments this launch set
        self.last: list[Any] = []  # the slots' values set on it (buffers by their handle)

    @classmethod
    def flat(cls, runtime: Any, kernel: Any, count: int) -> "Launch":
        """One work-item per index ``i < count``, in the runtime's 1-D work-groups (as
        ``Runtime.launch1d``)."""
        if count > MAX_INDEX:
            raise BackendError(f"{count} elements exceed the OpenCL backend's 32-bit indexing")
        return cls(runtime, kernel, (count,), (runtime.local_size,))

    def add(self, *values: Any) -> None:
        """Arguments every call passes alike (sizes, strides, scalars, op codes)."""
        self.args += plain_args(values)

    def array(self, index: int, array: Any, offset: bool = True) -> None:
        """The buffer of array ``index`` (and, unless ``offset`` is false, its offset in
        elements) as the next arguments; ``array`` is this call's."""
        self.slots.append((len(self.args), index, False))
        self.args.append(array.buffer)
        if offset:
            self.slots.append((len(self.args), index, True))
            self.args.append(int(array.offset))

    def run(self, runtime: Any, arrays: Sequence[Any]) -> Any:
        """Enqueue the kernel on ``arrays`` (results, then array operands).

        The launch sets its arguments on a kernel object of its own, so a call on the same
        offsets (a compiled plan's step, whose arena views do not move) sets only the buffers
        that changed and enqueues (about 1.5 us on PoCL against 4-7 us for pyopencl's
        invoker setting every argument)."""
        if not all(self.global_size):
            return None
        own, slots = self.own, self.slots
        if own is not None:
            with runtime.lock:
                last = self.last
                for j, (position, index, is_offset) in enumerate(slots):
                    array = arrays[index]
                    if is_offset:
                        if array.offset != last[j]:
                            break  # (an offset moved: every argument is set again below)
                    else:
                        buffer = array.buffer
                        handle = buffer.int_ptr
                        if handle != last[j]:
                            own.set_arg(position, buffer)
                            last[j] = handle
                else:
                    return runtime.enqueue_set(own, self.global_size, self.local_size)
        args = list(self.args)
        last = []
        for position, index, is_offset in slots:
            array = arrays[index]
            args[position] = value = array.offset if is_offset else array.buffer
            last.append(value if is_offset else value.int_ptr)
        with runtime.lock:
            if own is None:
                own = self.own = self.kernel.clone()
                own.set_scalar_arg_dtypes(self.kernel.arg_dtypes)
            self.last = last
            return runtime.enqueue(own, self.global_size, self.local_size, args)
