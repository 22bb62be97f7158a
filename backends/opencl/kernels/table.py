"""Building the OpenCL kernel table: ``kernels, kernel = kernel_table()``.

A kernel registered with ``half="upcast"`` computes float16 tensors in float32: its float16
inputs are converted to float32 copies and its float16 outputs written through float32
temporaries (float16 is a storage format here; arithmetic is float32). Kernels registered with
``half="native"`` (the generated elementwise ones) load and store half directly.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from portable.backend import kernel_table as core_kernel_table

from backends.opencl.elementwise import assign

_HALF = np.dtype(np.float16)


def _upcast(fn: Callable) -> Callable:
    def run(ctx, inputs, outputs, attrs):
        if not any(getattr(a, "dtype", None) == _HALF for a in list(inputs) + list(outputs)):
            return fn(ctx, inputs, outputs, attrs)
        wide_in = [a.astype(np.float32) if getattr(a, "dtype", None) == _HALF else a
                   for a in inputs]
        wide_out = [ctx.backend.empty(o.shape, np.float32)
                    if getattr(o, "dtype", None) == _HALF else o for o in outputs]
        fn(ctx, wide_in, wide_out, attrs)
        for target, value in zip(outputs, wide_out):
            if target is not None and target is not value:
                assign(target, value)
    run.__name__ = fn.__name__
    return run


def _wrap(fn: Callable, half: str = "upcast") -> Callable:
    return _upcast(fn) if half == "upcast" else fn


def kernel_table() -> tuple[dict[str, Callable], Callable]:
    """A dict and a decorator ``@kernel("Op", "portable.OtherOp", half=...)`` filling it."""
    return core_kernel_table(_wrap)
