"""OpenCL kernels of the sequence and optional ops: the NumPy table's functions
(``backends/xp/kernels/sequence.py``), registered here as they are.

They only move arrays, through what CLArray supports: the backend's allocator (``empty``,
``copy_into``: the generated strided copy), basic slicing (SplitToSequence's pieces and
ConcatFromSequence's destinations are strided views, as the OpenCL Split and Concat use) and
``reshape``. A sequence is a Python list of CLArrays; a position or split is read through the
host (its value decides which arrays move, so it has to reach the host anyway).
"""
from __future__ import annotations

from backends.opencl.kernels.table import kernel_table
from backends.xp.kernels import sequence as host_table

kernels, kernel = kernel_table()

# (half="native": nothing here computes, so float16 elements move as they are)
for _name, _fn in host_table.kernels.items():
    kernel(_name, half="native")(_fn)
