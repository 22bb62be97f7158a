"""``nd.random``: MXNet 1.x's samplers, pushed to the engine and serialised on one random var so
that the same ``portable.random.seed`` gives the same numbers whatever the thread schedule.

Every distribution takes its parameters either as Python numbers (samples of ``shape``, default
``(1,)``, dtype float32) or as NDArrays of one shape (one block of ``shape`` samples per element:
the result has shape ``param.shape + shape``, float32 by default too), as MXNet's
``_random_*`` and ``_sample_*`` operators do. Samplers are not differentiable (MXNet's are not).

Example:
    >>> import portable as pt
    >>> pt.random.seed(0)
    >>> pt.nd.random.uniform(shape=(2,)).shape
    (2,)
    >>> pt.nd.random.normal(pt.nd.zeros((3,)), pt.nd.ones((3,)), shape=2).shape
    (3, 2)
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from portable import random as _random
from portable.device import as_device
from portable.engine import get_engine
from portable.errors import OpError, ShapeError
from portable.ndarray.invoke import rng_var
from portable.ndarray.ndarray import NDArray, empty

Draw = Callable[[np.random.Generator, list, tuple], np.ndarray]


def _shape(shape: Any) -> tuple[int, ...]:
    if shape is None:
        return ()
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)


def _push(out: NDArray, params: Sequence[NDArray], name: str,
          produce: Callable[[np.random.Generator, list], np.ndarray]) -> NDArray:
    """Push one sampling op writing ``out``, reading the array parameters ``params``."""
    backend, data = out.device.backend, out._data
    param_data = [(p.device.backend, p._data) for p in params]
    # The generator is taken now, not when the op runs, so that a ``seed`` call made while
    # samples are still queued does not change what those draw.
    generator = _random.generator()

    def run() -> None:
        host = [b.to_numpy(d) for b, d in param_data]
        data[...] = backend.from_numpy(np.asarray(produce(generator, host), dtype=data.dtype))

    get_engine().push(run, reads=[rng_var()] + [p._var for p in params],
                      writes=[out._var, rng_var()], device=out.device, name=name)
    return out


def _target(shape: tuple, dtype: Any, device: Any, out: NDArray | None, name: str) -> NDArray:
    if out is None:
        return empty(shape, as_device(device), dtype)
    if out.shape != shape:
        raise ShapeError(f"{name}: out has shape {out.shape}, the samples {shape}")
    return out


def _sample(name: str, params: Sequence[Any], shape: Any, dtype: Any, device: Any,
            out: NDArray | None, draw: Draw, default_dtype: Any = "float32") -> NDArray:
    """MXNet's ``_random_helper``: numbers -> ``_random_<name>``, NDArrays -> ``_sample_<name>``.

    ``draw(rng, values, shape)`` returns samples of ``shape`` for parameter values that are
    scalars or arrays broadcast against the leading axes.
    """
    if isinstance(params[0], NDArray):
        if not all(isinstance(p, NDArray) and p.shape == params[0].shape for p in params):
            raise OpError(f"random.{name}: the distribution parameters must all be NDArrays of "
                          f"one shape, got {[getattr(p, 'shape', type(p)) for p in params]}")
        base = params[0].shape
        extra = _shape(shape)
        dtype = "float32" if dtype is None else dtype  # (MXNet's, whatever the params')
        result = _target(base + extra, dtype, params[0].device, out, f"sample_{name}")

        def produce(rng: np.random.Generator, host: list) -> np.ndarray:
            values = [h.astype(np.float64).reshape(base + (1,) * len(extra)) for h in host]
            return draw(rng, values, base + extra)
        return _push(result, params, f"sample_{name}", produce)
    if not all(isinstance(p, (int, float, np.integer, np.floating)) for p in params):
        raise OpError(f"random.{name}: distribution parameters must be NDArrays or numbers, "
                      f"got {[type(p).__name__ for p in params]}")
    if shape is None:
        shape = out.shape if out is not None else (1,)
    shape = _shape(shape)
    result = _target(shape, default_dtype if dtype is None else dtype, device, out,
                     f"random_{name}")
    values = [float(p) for p in params]
    return _push(result, [], f"random_{name}", lambda rng, host: draw(rng, values, shape))


def _gen_neg_binomial(rng: np.random.Generator, mu: Any, alpha: Any, size: tuple) -> np.ndarray:
    """Poisson with a gamma(1/alpha, alpha*mu) rate: mean mu, variance mu + alpha mu^2."""
    mu, alpha = np.broadcast_to(mu, size), np.broadcast_to(alpha, size)
    safe = np.where(alpha > 0, alpha, 1.0)
    rate = np.where(alpha > 0, rng.gamma(1.0 / safe, safe * mu, size=size), mu)
    return rng.poisson(rate)


def uniform(low: Any = 0, high: Any = 1, shape: Any = None, dtype: Any = None,
            ctx: Any = None, out: NDArray | None = None, device: Any = None) -> NDArray:
    """Samples from [low, high).

    Example:
        >>> uniform(-1, 1, shape=(2, 3)).shape
        (2, 3)
    """
    return _sample("uniform", [low, high], shape, dtype, device or ctx, out,
                   lambda rng, v, s: rng.uniform(v[0], v[1], size=s))


def normal(loc: Any = 0, scale: Any = 1, shape: Any = None, dtype: Any = None,
           ctx: Any = None, out: NDArray | None = None, device: Any = None) -> NDArray:
    """Samples from a normal distribution of mean ``loc`` and standard deviation ``scale``."""
    return _sample("normal", [loc, scale], shape, dtype, device or ctx, out,
                   lambda rng, v, s: rng.normal(v[0], v[1], size=s))


def randn(*shape: int, loc: Any = 0, scale: Any = 1, dtype: Any = None, ctx: Any = None,
          out: NDArray | None = None, device: Any = None) -> NDArray:
    """Normal samples of shape ``shape`` given positionally: ``randn(2, 3)``."""
    return normal(loc, scale, shape, dtype, ctx, out, device)


def exponential(scale: Any = 1, shape: Any = None, dtype: Any = None, ctx: Any = None,
                out: NDArray | None = None, device: Any = None) -> NDArray:
    """Samples from an exponential distribution of mean ``scale`` (rate ``1/scale``)."""
    lam = 1.0 / scale  # (MXNet's operators take the rate; an NDArray gives an NDArray)
    return _sample("exponential", [lam], shape, dtype, device or ctx, out,
                   lambda rng, v, s: rng.exponential(1.0 / np.asarray(v[0]), size=s))


def gamma(alpha: Any = 1, beta: Any = 1, shape: Any = None, dtype: Any = None,
          ctx: Any = None, out: NDArray | None = None, device: Any = None) -> NDArray:
    """Samples from a gamma distribution of shape ``alpha`` and scale ``beta``."""
    return _sample("gamma", [alpha, beta], shape, dtype, device or ctx, out,
                   lambda rng, v, s: rng.gamma(v[0], v[1], size=s))


def poisson(lam: Any = 1, shape: Any = None, dtype: Any = None, ctx: Any = None,
            out: NDArray | None = None, device: Any = None) -> NDArray:
    """Poisson counts of rate ``lam`` (float32 by default, as MXNet's)."""
    return _sample("poisson", [lam], shape, dtype, device or ctx, out,
                   lambda rng, v, s: rng.poisson(v[0], size=s))


def negative_binomial(k: Any = 1, p: Any = 1, shape: Any = None, dtype: Any = None,
                      ctx: Any = None, out: NDArray | None = None,
                      device: Any = None) -> NDArray:
    """Failures before the ``k``-th success of trials succeeding with probability ``p``."""
    return _sample("negative_binomial", [k, p], shape, dtype, device or ctx, out,
                   lambda rng, v, s: rng.negative_binomial(v[0], v[1], size=s))


def generalized_negative_binomial(mu: Any = 1, alpha: Any = 1, shape: Any = None,
                                  dtype: Any = None, ctx: Any = None,
                                  out: NDArray | None = None, device: Any = None) -> NDArray:
    """Counts of mean ``mu`` and variance ``mu + alpha * mu**2``."""
    return _sample("generalized_negative_binomial", [mu, alpha], shape, dtype, device or ctx,
                   out, lambda rng, v, s: _gen_neg_binomial(rng, v[0], v[1], s))


def randint(low: int, high: int, shape: Any = None, dtype: Any = None, ctx: Any = None,
            out: NDArray | None = None, device: Any = None) -> NDArray:
    """Integers from [low, high), int32 by default."""
    if isinstance(low, NDArray) or isinstance(high, NDArray):
        raise OpError("random.randint: low and high must be numbers (MXNet has no array form)")
    return _sample("randint", [low, high], shape, dtype, device or ctx, out,
                   lambda rng, v, s: rng.integers(int(v[0]), int(v[1]), size=s),
                   default_dtype="int32")


def multinomial(data: NDArray, shape: Any = None, get_prob: bool = False,
                out: NDArray | None = None, dtype: Any = "int32") -> Any:
    """Category indices drawn from the probabilities on ``data``'s last axis.

    Returns samples of shape ``data.shape[:-1] + shape``; with ``get_prob`` also the log
    probability of each sample (``[samples, log_prob]``).
    """
    extra = _shape(shape)
    base = data.shape[:-1]
    if not base and not extra:  # one distribution, no shape: one sample of shape (1,)
        extra = (1,)
    samples = _target(base + extra, dtype, data.device, out, "sample_multinomial")
    log_prob = empty(base + extra, data.device, data.dtype) if get_prob else None
    backend, sample_data = samples.device.backend, samples._data
    data_backend, source = data.device.backend, data._data
    prob_data = None if log_prob is None else log_prob._data
    generator = _random.generator()

    def run() -> None:
        probs = data_backend.to_numpy(source).astype(np.float64).reshape(-1, data.shape[-1])
        count = int(np.prod(extra, dtype=np.int64))
        cumulative = np.cumsum(probs, axis=1)
        draws = generator.random((probs.shape[0], count))
        index = np.stack([np.searchsorted(c, d, side="right") for c, d in
                          zip(cumulative, draws)]) if len(probs) else np.zeros((0, count))
        index = np.minimum(index, probs.shape[1] - 1).astype(np.int64)
        sample_data[...] = backend.from_numpy(index.reshape(base + extra).astype(samples.dtype))
        if prob_data is not None:
            picked = np.take_along_axis(probs, index, axis=1)
            prob_data[...] = backend.from_numpy(
                np.log(picked).reshape(base + extra).astype(log_prob.dtype))

    writes = [samples._var, rng_var()] + ([log_prob._var] if log_prob is not None else [])
    get_engine().push(run, reads=[rng_var(), data._var], writes=writes, device=data.device,
                      name="sample_multinomial")
    return [samples, log_prob] if get_prob else samples


def shuffle(data: NDArray, out: NDArray | None = None) -> NDArray:
    """``data`` with its first axis randomly permuted."""
    result = _target(data.shape, data.dtype, data.device, out, "shuffle")
    return _push(result, [data], "shuffle", lambda rng, host: rng.permutation(host[0]))


def _exponential_rate(lam: Any = 1, **kwargs: Any) -> NDArray:
    """MXNet's ``random_exponential``/``sample_exponential`` take the rate ``lam``."""
    return exponential(1.0 / lam, **kwargs)


LEGACY_FUNCTIONS = {  # nd.<name>: MXNet 1.x's operator names for the same samplers
    "random_uniform": uniform, "uniform": uniform, "sample_uniform": uniform,
    "random_normal": normal, "normal": normal, "sample_normal": normal,
    "random_gamma": gamma, "sample_gamma": gamma,
    "random_exponential": _exponential_rate, "sample_exponential": _exponential_rate,
    "random_poisson": poisson, "sample_poisson": poisson,
    "random_negative_binomial": negative_binomial,
    "sample_negative_binomial": negative_binomial,
    "random_generalized_negative_binomial": generalized_negative_binomial,
    "sample_generalized_negative_binomial": generalized_negative_binomial,
    "random_randint": randint, "sample_multinomial": multinomial, "shuffle": shuffle,
    "random_shuffle": shuffle,
}
