"""OpenCL kernels of the control-flow ops (If, Loop, Scan): the backend-neutral runner of
``portable/executor/control_flow.py``, registered as it is.

Each body is compiled for the OpenCL device and its kernels run there; between iterations
the runner only moves device arrays (``copy_into``, basic slicing) and reads the condition and
trip count, one scalar each, through the host (they decide whether the next iteration runs, so
they must reach it). ``half="native"``: the runner computes nothing, float16 values move as
they are and the body's own kernels handle them.
"""
from __future__ import annotations

from portable.executor.control_flow import KERNELS

from backends.opencl.kernels.table import kernel_table

kernels, kernel = kernel_table()

for _name, _fn in KERNELS.items():
    kernel(_name, half="native")(_fn)
