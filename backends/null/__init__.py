"""The null backend: allocates nothing and runs nothing, for engine and scheduling tests.

Arrays are shape-and-dtype placeholders; every kernel is a no-op, so a plan's scheduling and
bookkeeping can be exercised (and timed) without doing arithmetic.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.backend import Backend
from portable.device import Device


class NullArray:
    """A placeholder with a shape and a dtype and no data."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple[int, ...], dtype: Any) -> None:
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, key: Any) -> "NullArray":
        return self

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def reshape(self, *shape: Any) -> "NullArray":
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        return NullArray(shape, self.dtype)


class _NullNamespace:
    """Just enough of an array namespace for the executor's view handling."""

    @staticmethod
    def reshape(array: NullArray, shape: tuple[int, ...]) -> NullArray:
        return NullArray(shape, array.dtype)


def _no_op(ctx: Any, inputs: list, outputs: list, attrs: dict) -> None:
    """Runs nothing."""


class _EveryOp(dict):
    def __missing__(self, key: str):
        return _no_op

    def __contains__(self, key: object) -> bool:
        return True


class NullBackend(Backend):
    """Every op has a no-op kernel; allocation returns placeholders."""

    name = "null"
    xp = _NullNamespace()

    def __init__(self, device: Device) -> None:
        super().__init__(device, _EveryOp())

    def kernel(self, op: str):
        return _no_op

    def describe(self) -> str:
        return "null backend: allocates and runs nothing (scheduling tests)"

    def empty(self, shape, dtype):
        return NullArray(shape, dtype)

    def arena(self, nbytes):
        return NullArray((max(int(nbytes), 1),), np.uint8)

    def view(self, arena, offset, shape, dtype):
        return NullArray(shape, dtype)

    def from_numpy(self, array):
        array = np.asarray(array)
        return NullArray(array.shape, array.dtype)

    def to_numpy(self, array):
        return np.zeros(array.shape, array.dtype)


def create_backend(device: Device) -> NullBackend:
    return NullBackend(device)
