"""OpenCL kernels of the Python custom ops (``portable.Custom``, ``portable.CustomGrad``): a
refusal naming the op_type and the device.

The user's ``forward`` / ``backward`` compute with NumPy-backed NDArrays on the host, so they
cannot run on device buffers. Only when the user allowed the explicit CPU fallback
(``PORTABLE_OPENCL_FALLBACK=1``) does the op run there, with copies, recorded by the fallback.
"""
from __future__ import annotations

from backends.opencl.fallback import host_only_kernel
from backends.opencl.kernels.table import kernel_table

kernels, kernel = kernel_table()

for _op in ("portable.Custom", "portable.CustomGrad"):
    kernel(_op, half="native")(host_only_kernel(
        _op, lambda attrs, op=_op: f"custom op {attrs['op_type']!r} ({op}) runs Python code "
                                   f"on host arrays"))
