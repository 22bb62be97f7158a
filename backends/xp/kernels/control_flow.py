"""Kernels of the control-flow ops (If, Loop, Scan): the backend-neutral runner of
``portable/executor/control_flow.py``, registered as it is. A body runs as its own compiled
plan on this backend, so nothing here depends on the array namespace."""
from __future__ import annotations

from portable.backend import kernel_table
from portable.executor.control_flow import KERNELS

kernels, kernel = kernel_table()

for _name, _fn in KERNELS.items():
    kernel(_name)(_fn)
