"""``nd.random``: sampling pushed to the engine, serialised on one random var so that the same
``portable.random.seed`` gives the same numbers whatever the thread schedule.

Example:
    >>> import portable as pt
    >>> pt.random.seed(0)
    >>> pt.nd.random.uniform(shape=(2,)).shape
    (2,)
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from portable import random as _random
from portable.device import as_device
from portable.engine import get_engine
from portable.ndarray.invoke import rng_var
from portable.ndarray.ndarray import NDArray, empty


def _sample(shape: Any, dtype: Any, device: Any, name: str,
            draw: Callable[[np.random.Generator, tuple], np.ndarray]) -> NDArray:
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    out = empty(shape, as_device(device), dtype)
    backend, data = out.device.backend, out._data

    def run() -> None:
        data[...] = backend.from_numpy(np.asarray(draw(_random.generator(), shape), dtype=dtype))

    get_engine().push(run, reads=[rng_var()], writes=[out._var, rng_var()], device=out.device,
                      name=name)
    return out


def uniform(low: float = 0.0, high: float = 1.0, shape: Any = (1,), dtype: Any = "float32",
            device: Any = None, ctx: Any = None) -> NDArray:
    return _sample(shape, dtype, device or ctx, "random.uniform",
                   lambda rng, s: rng.uniform(low, high, size=s))


def normal(loc: float = 0.0, scale: float = 1.0, shape: Any = (1,), dtype: Any = "float32",
           device: Any = None, ctx: Any = None) -> NDArray:
    return _sample(shape, dtype, device or ctx, "random.normal",
                   lambda rng, s: rng.normal(loc, scale, size=s))


def randint(low: int, high: int, shape: Any = (1,), dtype: Any = "int32", device: Any = None,
            ctx: Any = None) -> NDArray:
    return _sample(shape, dtype, device or ctx, "random.randint",
                   lambda rng, s: rng.integers(low, high, size=s))
