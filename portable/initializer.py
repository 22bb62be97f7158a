"""Parameter initializers with MXNet 1.x names (``portable.init.Xavier`` ...), seeded by
``portable.random.seed``.

An initializer is called with a parameter name and an NDArray and fills it in place. The
default dispatch follows MXNet: names ending in ``bias``/``beta``/``moving_mean`` become zeros,
``gamma``/``moving_var`` ones, anything else uses the initializer's own rule.

Example:
    >>> import portable as pt
    >>> w = pt.nd.zeros((4, 3))
    >>> pt.init.Xavier()("fc_weight", w)
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from portable import random


class Initializer:
    """Base class: ``init(name, array)`` fills ``array`` in place."""

    def __call__(self, name: str, array: Any) -> None:
        lowered = name.lower()
        if lowered.endswith(("bias", "beta", "moving_mean", "running_mean")):
            values = np.zeros(array.shape)
        elif lowered.endswith(("gamma", "moving_var", "running_var")):
            values = np.ones(array.shape)
        else:
            values = self.sample(tuple(array.shape))
        array[:] = np.asarray(values, dtype=array.dtype)

    def sample(self, shape: tuple[int, ...]) -> np.ndarray:
        raise NotImplementedError

    def dumps(self) -> str:
        return type(self).__name__.lower()


class Zero(Initializer):
    def sample(self, shape):
        return np.zeros(shape)


class One(Initializer):
    def sample(self, shape):
        return np.ones(shape)


class Constant(Initializer):
    def __init__(self, value: float) -> None:
        self.value = value

    def sample(self, shape):
        return np.full(shape, self.value)


class Uniform(Initializer):
    """Uniform in ``[-scale, scale]``."""

    def __init__(self, scale: float = 0.07) -> None:
        self.scale = scale

    def sample(self, shape):
        return random.generator().uniform(-self.scale, self.scale, size=shape)


class Normal(Initializer):
    """Normal with mean 0 and standard deviation ``sigma``."""

    def __init__(self, sigma: float = 0.01) -> None:
        self.sigma = sigma

    def sample(self, shape):
        return random.generator().normal(0.0, self.sigma, size=shape)


class Xavier(Initializer):
    """Glorot/Xavier: ``rnd_type`` uniform or gaussian, ``factor_type`` avg, in or out."""

    def __init__(self, rnd_type: str = "uniform", factor_type: str = "avg",
                 magnitude: float = 3.0) -> None:
        self.rnd_type, self.factor_type, self.magnitude = rnd_type, factor_type, magnitude

    def sample(self, shape):
        if len(shape) < 2:
            fan_in = fan_out = shape[0] if shape else 1
        else:
            receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
            fan_in, fan_out = shape[1] * receptive, shape[0] * receptive
        factor = {"avg": (fan_in + fan_out) / 2.0, "in": fan_in, "out": fan_out}[self.factor_type]
        scale = math.sqrt(self.magnitude / factor)
        if self.rnd_type == "uniform":
            return random.generator().uniform(-scale, scale, size=shape)
        return random.generator().normal(0.0, scale, size=shape)
