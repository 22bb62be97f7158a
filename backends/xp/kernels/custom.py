"""Kernels of the Python custom ops (``portable.Custom`` and its gradient): they hand the
buffers to the registered op's ``forward`` / ``backward`` through ``portable.ops.custom.run``.

The user's code computes with NumPy-backed NDArrays on the host, so these kernels run only where
the arrays are NumPy's; a backend reusing this table with another array namespace (CuPy) gets a
refusal naming the op_type and the device rather than a silent copy.
"""
from __future__ import annotations

import numpy as np

from portable.backend import kernel_table
from portable.errors import BackendError
from portable.ops import custom

kernels, kernel = kernel_table()


def _host_only(ctx, attrs) -> None:
    if ctx.xp is not np:
        raise BackendError(f"custom op {attrs['op_type']!r} runs Python code on host arrays; "
                           f"it cannot run on device {ctx.backend.device} (backend "
                           f"{ctx.backend.name}): run it on mx.cpu()")


@kernel("portable.Custom")
def custom_forward(ctx, inputs, outputs, attrs):
    _host_only(ctx, attrs)
    custom.run("forward", attrs, inputs, outputs, ctx.backend.device)


@kernel("portable.CustomGrad")
def custom_backward(ctx, inputs, outputs, attrs):
    _host_only(ctx, attrs)
    custom.run("backward", attrs, inputs, outputs, ctx.backend.device)
