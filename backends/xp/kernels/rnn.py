"""NumPy kernels: RNN, LSTM and GRU and their backward ops, the shared recurrence of
``backends/xp/recurrence.py`` with gate activations written against ``ctx.xp``."""
from __future__ import annotations

from typing import Any

import numpy as np

from backends.xp.recurrence import RnnHooks, register_rnn_kernels
from portable.backend import kernel_table

kernels, kernel = kernel_table()

# -- activations: name -> (f(xp, x, alpha, beta), f'(xp, x, y, alpha, beta) from x and y=f(x))


def _sigmoid(xp, x):
    return 0.5 * xp.tanh(0.5 * x) + 0.5  # no exp overflow for large |x|


def _scaled_tanh_grad(xp, x, y, a, b):
    t = xp.tanh(b * x)
    return a * b * (1 - t * t)


def _indicator(cond, like):
    return cond.astype(like.dtype)


_ACTIVATIONS = {
    "sigmoid": (lambda xp, x, a, b: _sigmoid(xp, x), lambda xp, x, y, a, b: y * (1 - y)),
    "tanh": (lambda xp, x, a, b: xp.tanh(x), lambda xp, x, y, a, b: 1 - y * y),
    "relu": (lambda xp, x, a, b: xp.maximum(x, 0),
             lambda xp, x, y, a, b: _indicator(x > 0, x)),
    "affine": (lambda xp, x, a, b: a * x + b, lambda xp, x, y, a, b: xp.full_like(x, a)),
    "leakyrelu": (lambda xp, x, a, b: xp.where(x >= 0, x, a * x),
                  lambda xp, x, y, a, b: xp.where(x >= 0, 1, a).astype(x.dtype)),
    "thresholdedrelu": (lambda xp, x, a, b: xp.where(x > a, x, 0),
                        lambda xp, x, y, a, b: _indicator(x > a, x)),
    "scaledtanh": (lambda xp, x, a, b: a * xp.tanh(b * x), _scaled_tanh_grad),
    "hardsigmoid": (lambda xp, x, a, b: xp.clip(a * x + b, 0, 1),
                    lambda xp, x, y, a, b: a * _indicator((y > 0) & (y < 1), x)),
    "elu": (lambda xp, x, a, b: xp.where(x >= 0, x, a * (xp.exp(xp.minimum(x, 0)) - 1)),
            lambda xp, x, y, a, b: xp.where(x >= 0, 1, y + a).astype(x.dtype)),
    "softsign": (lambda xp, x, a, b: x / (1 + xp.abs(x)),
                 lambda xp, x, y, a, b: 1 / ((1 + xp.abs(x)) * (1 + xp.abs(x)))),
    "softplus": (lambda xp, x, a, b: xp.logaddexp(0, x), lambda xp, x, y, a, b: _sigmoid(xp, x)),
}


class _Activation:
    """One gate activation with its parameters and the cell clip applied to its input."""

    def __init__(self, xp, name: str, alpha: float, beta: float, clip) -> None:
        self.xp, self.alpha, self.beta, self.clip = xp, alpha, beta, clip
        self.fn, self.grad_fn = _ACTIVATIONS[name]

    def clipped(self, a):
        return a if self.clip is None else self.xp.clip(a, -self.clip, self.clip)

    def __call__(self, a):
        return self.fn(self.xp, self.clipped(a), self.alpha, self.beta)

    def backward(self, a, y, dy):
        """Gradient w.r.t. the pre-clip input ``a`` given the output ``y`` and its gradient."""
        grad = dy * self.grad_fn(self.xp, self.clipped(a), y, self.alpha, self.beta)
        if self.clip is not None:
            grad = grad * (self.xp.abs(a) < self.clip)
        return grad


def _to_host(array: Any) -> np.ndarray:
    """The array's values as a NumPy array (a CuPy array copies itself down with ``get``)."""
    get = getattr(array, "get", None)
    return get() if callable(get) else np.asarray(array)


register_rnn_kernels(kernel, RnnHooks(_Activation, _to_host))
