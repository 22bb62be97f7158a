"""The NumPy backend: the reference semantics of every op, on the host CPU.

Kernels are written against the array namespace ``ctx.xp`` in destination-passing style, so a
CuPy backend can reuse them unchanged.
"""
from __future__ import annotations

import numpy as np

from portable.backend import Backend
from portable.device import Device


class NumpyBackend(Backend):
    """Host CPU backend; arrays are ``numpy.ndarray``."""

    name = "numpy"
    xp = np

    def describe(self) -> str:
        return f"NumPy {np.__version__} on the host CPU, {len(self.kernels)} kernels"


def create_backend(device: Device) -> NumpyBackend:
    from backends.numpy.kernels import kernels

    return NumpyBackend(device, kernels)
