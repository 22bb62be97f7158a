"""NumPy kernels: loss ops."""
from __future__ import annotations

from backends.numpy.kernels.table import kernel_table

kernels, kernel = kernel_table()
