"""OpenCL kernels of the Python custom ops (``portable.Custom``, ``portable.CustomGrad``): a
refusal naming the op_type and the device.

The user's ``forward`` / ``backward`` compute with NumPy-backed NDArrays on the host, so they
cannot run on device buffers. Only when the user allowed the explicit CPU fallback
(``PORTABLE_OPENCL_FALLBACK=1``) does the op run there, with copies, recorded by the fallback.
"""
from __future__ import annotations

from portable.errors import BackendError

from backends.opencl.kernels.table import kernel_table

kernels, kernel = kernel_table()


def _host_only(op: str):
    def run(ctx, inputs, outputs, attrs):
        fallback = getattr(ctx.backend, "fallback", None)
        if fallback is not None:  # the user asked for host runs with copies
            fallback.kernel(op)(ctx, inputs, outputs, attrs)
            return
        raise BackendError(f"custom op {attrs['op_type']!r} ({op}) runs Python code on host "
                           f"arrays; it cannot run on device {ctx.backend.device} (backend "
                           f"opencl): run it on the CPU (mx.cpu()), or set "
                           f"PORTABLE_OPENCL_FALLBACK=1 to run it there with copies")
    run.__name__ = f"refuse_{op.rsplit('.', 1)[-1]}"
    return run


for _op in ("portable.Custom", "portable.CustomGrad"):
    kernel(_op, half="native")(_host_only(_op))
