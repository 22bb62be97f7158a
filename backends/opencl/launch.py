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

    __slots__ = ("kernel", "global_size", "local_size", "args", "slots", "outs")

    def __init__(self, runtime: Any, kernel: Any, global_size: Sequence[int],
                 local_size: Sequence[int] | None) -> None:
        self.kernel = kernel
        self.global_size, self.local_size = runtime.work_shape(kernel, global_size, local_size)
        self.args: list[Any] = []
        self.slots: list[tuple[int, int, bool]] = []  # (argument, array, is its offset)
        self.outs: list[tuple[tuple[int, ...], Any]] = []

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
        """Enqueue the kernel on ``arrays`` (results, then array operands)."""
        args = list(self.args)
        for position, index, is_offset in self.slots:
            array = arrays[index]
            args[position] = array.offset if is_offset else array.buffer
        if not all(self.global_size):
            return None
        return runtime.enqueue(self.kernel, self.global_size, self.local_size, args)
