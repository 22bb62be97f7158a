"""``mx.np.random``: ``nd.random``'s samplers, with MXNet
NumPy's signatures: ``size`` instead of ``shape``, ``size=None`` draws one value as a 0-d
array, float32 by default and int64 for ``randint``.

Example:
    >>> import portable as mx
    >>> mx.np.random.seed(0)
    >>> mx.np.random.normal(0, 1, (2, 3)).shape, mx.np.random.randint(0, 5, (2,)).dtype
    ((2, 3), dtype('int64'))
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable import random as _random
from portable.ndarray.ndarray import NDArray, array as nd_array
from portable.ndarray import random as _nd_random
from portable.numpy.multiarray import fresh, ndarray


def _size(size: Any) -> tuple[int, ...]:
    if size is None:
        return ()
    return (int(size),) if isinstance(size, (int, np.integer)) else tuple(int(s) for s in size)


def _device(ctx: Any, device: Any) -> Any:
    return device if device is not None else ctx


def seed(seed: int, ctx: Any = "all") -> None:
    """Reseed the generator behind every random op (``mx.np.random.seed``)."""
    _random.seed(seed)


def uniform(low: float = 0.0, high: float = 1.0, size: Any = None, dtype: Any = None,
            ctx: Any = None, out: Any = None, device: Any = None) -> ndarray:
    """Samples from the uniform distribution on ``[low, high)``."""
    return fresh(_nd_random.uniform(low, high, shape=_size(size), dtype=dtype or np.float32,
                                    ctx=_device(ctx, device)))


def normal(loc: float = 0.0, scale: float = 1.0, size: Any = None, dtype: Any = None,
           ctx: Any = None, out: Any = None, device: Any = None) -> ndarray:
    """Samples from the normal distribution with mean ``loc`` and deviation ``scale``."""
    return fresh(_nd_random.normal(loc, scale, shape=_size(size), dtype=dtype or np.float32,
                                   ctx=_device(ctx, device)))


def randint(low: int, high: int | None = None, size: Any = None, dtype: Any = None,
            ctx: Any = None, out: Any = None, device: Any = None) -> ndarray:
    """Integers from ``[low, high)`` (``[0, low)`` without ``high``), int64 by default."""
    if high is None:
        low, high = 0, low
    return fresh(_nd_random.randint(low, high, shape=_size(size), dtype=dtype or np.int64,
                                    ctx=_device(ctx, device)))


def rand(*size: int, **kwargs: Any) -> ndarray:
    """Uniform samples on ``[0, 1)`` of shape ``size``."""
    return uniform(size=size, **kwargs)


def randn(*size: int, **kwargs: Any) -> ndarray:
    """Standard normal samples of shape ``size``."""
    return normal(size=size, **kwargs)


def random_sample(size: Any = None, ctx: Any = None) -> ndarray:
    return uniform(size=size, ctx=ctx)


def choice(a: Any, size: Any = None, replace: bool = True, p: Any = None,
           ctx: Any = None, out: Any = None) -> ndarray:
    """Samples of ``a`` (an array, or ``arange(a)`` for an int), with probabilities ``p``.
    Drawn on the host (the generator is the one every random op shares)."""
    host_p = None if p is None else np.asarray(p.asnumpy() if isinstance(p, NDArray) else p,
                                               np.float64)
    if host_p is not None:
        host_p = host_p / host_p.sum()
    if isinstance(a, (int, np.integer)):
        drawn = _random.generator().choice(int(a), _size(size), replace, host_p)
        return fresh(nd_array(np.asarray(drawn, np.int64), device=ctx, dtype=np.int64))
    host = a.asnumpy() if isinstance(a, NDArray) else np.asarray(a)
    drawn = _random.generator().choice(host, _size(size), replace, host_p)
    device = a.device if isinstance(a, NDArray) and ctx is None else ctx
    return fresh(nd_array(np.asarray(drawn), device=device, dtype=host.dtype))


def shuffle(x: NDArray) -> None:
    """Shuffle ``x`` in place along its first axis."""
    host = x.asnumpy()
    _random.generator().shuffle(host)
    x[...] = host
