"""Building the OpenCL kernel table: ``kernels, kernel = kernel_table()``.

Storage-only element types are computed in a wider type, the way NumPy (ml_dtypes) computes
them: a kernel's inputs of such a type are converted to wide copies, and its outputs written
through wide temporaries, then stored (rounded) back. What a kernel handles itself is said by
its registration:

- ``half="upcast"`` (the default): float16 computes in float32 too;
- ``half="native"``: the kernel loads and stores float16 itself (the generated elementwise
  ones, reductions...), computing in float32;
- ``half="storage"``: the kernel handles every element type itself (Cast, QuantizeLinear...).

Except with ``"storage"``, ml_dtypes' types are always widened: bfloat16, float8 and float4 to
float32, the 4- and 2-bit integers to int32 (``formats`` holds their loads and stores).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from portable.backend import kernel_table as core_kernel_table
from portable.dtypes import is_float, is_low_precision

from backends.opencl.elementwise import assign

_HALF = np.dtype(np.float16)
_F32 = np.dtype(np.float32)


def _wide(dtype: Any, half: bool) -> np.dtype | None:
    """The type a storage-only ``dtype`` computes in, or None when the kernel takes it."""
    if dtype is None:
        return None
    return _wide_type(np.dtype(dtype), half)


@functools.lru_cache(maxsize=256)
def _wide_type(dtype: np.dtype, half: bool) -> np.dtype | None:
    if dtype == _HALF:
        return _F32 if half else None
    if is_low_precision(dtype):
        return _F32 if is_float(dtype) else np.dtype(np.int32)
    return None


def _upcast(fn: Callable, half: bool) -> Callable:
    def run(ctx, inputs, outputs, attrs):
        wide_in = [_wide(getattr(a, "dtype", None), half) for a in inputs]
        wide_out = [_wide(getattr(o, "dtype", None), half) for o in outputs]
        if not any(wide_in) and not any(wide_out):
            return fn(ctx, inputs, outputs, attrs)
        return _widened(fn, wide_in, wide_out)(ctx, inputs, outputs, attrs)
    run.__name__ = fn.__name__
    bind = getattr(fn, "bind", None)
    if bind is not None:  # a prepared kernel: prepared for the types it will compute in
        def bind_wide(backend, input_types, output_types, attrs):
            wide_in = [_wide(getattr(t, "dtype", None), half) for t in input_types]
            wide_out = [_wide(getattr(t, "dtype", None), half) for t in output_types]
            if not any(wide_in) and not any(wide_out):
                return bind(backend, input_types, output_types, attrs)
            bound = bind(backend, _retyped(input_types, wide_in),
                         _retyped(output_types, wide_out), attrs)
            return _widened(bound, wide_in, wide_out)
        run.bind = bind_wide
    return run


def _widened(fn: Callable, wide_in: list, wide_out: list) -> Callable:
    """``fn`` run on wide copies of the inputs where ``wide_in`` names a type, writing
    through wide temporaries where ``wide_out`` does, stored back (rounded) after it."""
    def run(ctx, inputs, outputs, attrs):
        args = [a.astype(w) if w is not None else a for a, w in zip(inputs, wide_in)]
        temps = [ctx.backend.empty(o.shape, w) if w is not None else o
                 for o, w in zip(outputs, wide_out)]
        result = fn(ctx, args, temps, attrs)
        for target, value in zip(outputs, temps):
            if target is not None and target is not value:
                assign(target, value)
        return result
    return run


def _retyped(types: list, wide: list) -> list:
    from portable.ir.graph import TensorType

    return [TensorType(t.shape, w) if w is not None else t for t, w in zip(types, wide)]


def _wrap(fn: Callable, half: str = "upcast") -> Callable:
    if half == "storage":
        return fn
    if half not in ("upcast", "native"):
        raise ValueError(f"half={half!r}: one of 'upcast', 'native', 'storage'")
    return _upcast(fn, half == "upcast")


def kernel_table() -> tuple[dict[str, Callable], Callable]:
    """A dict and a decorator ``@kernel("Op", "portable.OtherOp", half=...)`` filling it."""
    return core_kernel_table(_wrap)
