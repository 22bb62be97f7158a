"""The NumPy backend: the reference semantics of every op, on the host CPU.

Its kernel table is ``backends.xp``'s, written against the array namespace ``ctx.xp`` in
destination-passing style, which a CuPy backend reuses unchanged.
"""
from __future__ import annotations

import numpy as np

from backends.xp.kernels import kernels
from portable.backend import Backend
from portable.device import Device


class NumpyBackend(Backend):
    """Host CPU backend; arrays are ``numpy.ndarray``."""

    name = "numpy"
    xp = np
    string_tensors = True

    def describe(self) -> str:
        return f"NumPy {np.__version__} on the host CPU, {len(self.kernels)} kernels"


def create_backend(device: Device) -> NumpyBackend:
    return NumpyBackend(device, kernels)
