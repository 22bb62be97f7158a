"""The NumPy backend: the reference semantics of every op, on the host CPU.

Its kernel table is ``backends.xp``'s, written against the array namespace ``ctx.xp`` in
destination-passing style, which a CuPy backend reuses unchanged. With numba installed, a
compiled tier (``backends.numpy.jit``) overrides the sliding-window kernels NumPy is slow at
(pools, their gradients, depthwise Conv); PORTABLE_JIT=0 turns it off.
"""
from __future__ import annotations

import numpy as np

from backends.numpy import jit, threads
from backends.xp.kernels import kernels as xp_kernels
from portable.backend import Backend
from portable.device import Device


class NumpyBackend(Backend):
    """Host CPU backend; arrays are ``numpy.ndarray``."""

    name = "numpy"
    xp = np
    string_tensors = True

    def step_threads(self, op, input_types, output_types, attrs):
        return threads.step_threads(op, input_types, output_types, attrs)

    def threads_allowed(self) -> int:
        return threads.blas_threads.begin()

    def use_threads(self, count: int) -> None:
        threads.blas_threads.use(count)

    def describe(self) -> str:
        tier = ("on (numba)" if any(self.kernels.get(op) is k for op, k in jit.kernels.items())
                else "off" + ("" if jit.available() else " (numba is not installed)"))
        return (f"NumPy {np.__version__} on the host CPU, {len(self.kernels)} kernels, "
                f"compiled tier {tier}")


def kernel_table(compiled: bool | None = None) -> dict:
    """The NumPy kernel table: the xp kernels, with the compiled overrides when ``compiled``
    (default: ``jit.enabled()``, numba installed and PORTABLE_JIT not 0)."""
    if compiled is None:
        compiled = jit.enabled()
    return {**xp_kernels, **jit.kernels} if compiled else dict(xp_kernels)


def create_backend(device: Device) -> NumpyBackend:
    return NumpyBackend(device, kernel_table())
