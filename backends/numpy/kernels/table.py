"""A tiny helper that builds a kernel table: ``kernels, kernel = kernel_table()``."""
from __future__ import annotations

from typing import Callable


def kernel_table() -> tuple[dict[str, Callable], Callable]:
    """Returns a dict and a decorator ``@kernel("Op", "portable.OtherOp")`` filling it."""
    table: dict[str, Callable] = {}

    def kernel(*names: str) -> Callable:
        def register(fn: Callable) -> Callable:
            for name in names:
                if name in table:
                    raise ValueError(f"kernel {name} is registered twice")
                table[name] = fn
            return fn
        return register

    return table, kernel
