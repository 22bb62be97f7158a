"""What the CUDA backend changes in the shared kernel table, and why: the reviewed list.

The shared kernels (``backends/xp/kernels``) run on CUDA as they are, with ``xp = cupy``. This
module names the exceptions, each with its reason:

- ``OVERRIDDEN``: ops whose shared kernel uses a NumPy feature CuPy lacks; the CUDA backend
  registers its own kernel for them (``override_kernels``);
- ``REFUSED``: ops the CUDA backend does not run; their kernel raises MissingKernelError with
  the reason, and the user runs them on ``cpu()``;
- ``UNSUPPORTED_DTYPES``: element types CuPy arrays cannot hold; the backend refuses to
  allocate them, whatever the op.

It imports no CuPy, so ``tests/backends/test_xp_namespace.py`` reads it on a machine without a
GPU: that test runs every op-table case through a namespace that refuses NumPy-only features
and fails when a shared kernel not listed here uses one, or when a listed entry is no longer
needed (stale).
"""
from __future__ import annotations

from typing import Callable

from portable.backend import Kernel
from portable.dtypes import LOW_PRECISION
from portable.errors import MissingKernelError

# op -> why its shared kernel cannot run on CuPy (the replacement is in ``override_kernels``)
OVERRIDDEN: dict[str, str] = {
    "ScatterElements": "reduction='mul' calls multiply.at; CuPy's ufuncs offer .at only for "
                       "add, subtract, maximum, minimum and the bitwise ops. The override "
                       "multiplies repeated targets in rounds of distinct ones",
}

_STRINGS = "string tensors: CuPy arrays hold numbers only"
# op -> why the CUDA backend does not run it (run it on cpu())
REFUSED: dict[str, str] = {
    "portable.Custom": "runs the user's Python forward on host arrays",
    "portable.CustomGrad": "runs the user's Python backward on host arrays",
    "RegexFullMatch": _STRINGS,
    "StringConcat": _STRINGS,
    "StringNormalizer": _STRINGS,
    "StringSplit": _STRINGS,
    "ai.onnx.ml.CategoryMapper": _STRINGS,
}

# element type (as ``strict_xp.dtype_refusal`` names it) -> why CuPy cannot hold it
UNSUPPORTED_DTYPES: dict[str, str] = {
    "string": _STRINGS,
    **{name: "an ml_dtypes storage format; CuPy arrays hold NumPy's built-in types only"
       for name in LOW_PRECISION.values()},
}


def refusal(op: str, reason: str) -> Kernel:
    """A kernel that refuses ``op`` on CUDA, naming the reason."""
    def refuse(ctx, inputs, outputs, attrs):
        raise MissingKernelError(f"op {op} does not run on CUDA ({reason}); run it on "
                                 f"cpu()")

    refuse.__name__ = f"refuse_{op.rsplit('.', 1)[-1]}"
    return refuse


def override_kernels() -> dict[str, Kernel]:
    """The replacements of the ``OVERRIDDEN`` ops, keyed by op name."""
    from backends.cupy import scatter  # (written over ctx.xp; imports no CuPy either)

    return dict(scatter.kernels)


def cuda_kernels(shared: dict[str, Kernel],
                 extra: Callable[[], dict[str, Kernel]] | None = None) -> dict[str, Kernel]:
    """The CUDA kernel table: ``shared`` with the overrides and refusals applied.

    Args:
        shared: the shared table (``backends.xp.kernels.kernels``).
        extra: returns faster CuPy-only kernels (RawKernel, cupyx) to lay over the result.
    """
    table = dict(shared)
    overrides = override_kernels()
    if set(overrides) != set(OVERRIDDEN):
        raise ValueError(f"OVERRIDDEN and override_kernels disagree: "
                         f"{sorted(set(overrides) ^ set(OVERRIDDEN))}")
    table.update(overrides)
    table.update({op: refusal(op, why) for op, why in REFUSED.items()})
    if extra is not None:
        table.update(extra())
    return table
