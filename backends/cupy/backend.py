"""The CUDA backend's arrays and copies: CuPy on one device.

- Kernels: the shared table with ``xp = cupy``, as ``overrides.cuda_kernels`` composes it.
- Arena: one allocation from CuPy's memory pool per plan; tensors are views at byte offsets
  (``Backend.view`` slices a uint8 array, which CuPy does without copying).
- Host copies go through pinned (page-locked) staging buffers (``cupyx.empty_pinned``), so
  transfers run at full bus speed; a staging buffer is kept per (shape, dtype) and reused.
- Element types CuPy cannot hold (``overrides.UNSUPPORTED_DTYPES``) are refused on allocation
  with a BackendError naming the type, never stored as raw bytes behind the user's back.

Every call runs inside ``cupy.cuda.Device(i)``, so ``cuda(1)`` allocates and launches on the
second visible GPU whatever the thread's current device is.
"""
from __future__ import annotations

from typing import Any

import cupy
import cupyx
import numpy as np

from backends.cupy.overrides import UNSUPPORTED_DTYPES, cuda_kernels
from backends.xp.kernels import kernels as shared_kernels
from portable.backend import Backend
from portable.device import Device
from portable.dtypes import is_low_precision
from portable.errors import BackendError


class CupyBackend(Backend):
    """Kernels on one CUDA device; arrays are ``cupy.ndarray``."""

    name = "cupy"
    xp = cupy
    string_tensors = False

    def __init__(self, device: Device) -> None:
        super().__init__(device, cuda_kernels(shared_kernels))
        self.cuda_device = cupy.cuda.Device(device.device_id)
        self._staging: dict[tuple, np.ndarray] = {}

    def describe(self) -> str:
        with self.cuda_device:
            props = cupy.cuda.runtime.getDeviceProperties(self.device.device_id)
            name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
            return (f"CuPy {cupy.__version__} on {name} (CUDA runtime "
                    f"{cupy.cuda.runtime.runtimeGetVersion()}), {len(self.kernels)} kernels")

    def _check(self, dtype: Any) -> np.dtype:
        dtype = np.dtype(dtype)
        if dtype.kind in "OUS" or is_low_precision(dtype):
            key = "string" if dtype.kind in "OUS" else dtype.name
            raise BackendError(f"{self.device} cannot hold {dtype} tensors: "
                               f"{UNSUPPORTED_DTYPES.get(key, 'not a CuPy type')}; run on cpu()")
        return dtype

    # -- allocator -------------------------------------------------------------------------
    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        with self.cuda_device:
            return cupy.empty(shape, dtype=self._check(dtype))

    def arena(self, nbytes: int) -> Any:
        """One block of the device's memory pool for a whole plan."""
        with self.cuda_device:
            return cupy.empty((max(int(nbytes), 1),), dtype=np.uint8)

    def view(self, arena: Any, offset: int, shape: tuple[int, ...], dtype: Any) -> Any:
        return super().view(arena, offset, shape, self._check(dtype))

    def _pinned(self, shape: tuple, dtype: np.dtype) -> np.ndarray:
        key = (tuple(shape), dtype.str)
        buffer = self._staging.get(key)
        if buffer is None:
            buffer = self._staging[key] = cupyx.empty_pinned(shape, dtype=dtype)
        return buffer

    def from_numpy(self, array: np.ndarray) -> Any:
        array = np.asarray(array)
        dtype = self._check(array.dtype)
        staging = self._pinned(array.shape, dtype)
        staging[...] = array
        with self.cuda_device:
            out = cupy.empty(array.shape, dtype=dtype)
            out.set(staging)
            return out

    def to_numpy(self, array: Any) -> np.ndarray:
        if not isinstance(array, cupy.ndarray):
            return np.asarray(array)
        staging = self._pinned(array.shape, array.dtype)
        with self.cuda_device:
            cupy.ascontiguousarray(array).get(out=staging)
        # (a copy: the staging buffer is reused by the next transfer of this shape)
        return staging.copy()

    def copy_into(self, dst: Any, src: Any) -> None:
        if isinstance(src, np.ndarray):
            src = self.from_numpy(src)
        with self.cuda_device:
            dst[...] = src

    def synchronize(self) -> None:
        with self.cuda_device:
            cupy.cuda.get_current_stream().synchronize()
