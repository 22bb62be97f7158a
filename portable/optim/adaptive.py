"""Adaptive optimizers: ``Adam``, ``AdamW``, ``RMSProp``, ``AdaGrad``.

Formulas (``g`` is the rescaled, clipped gradient; ``t`` the parameter's update count):

* Adam (MXNet): ``g += wd * w; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
  w -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)``. PyTorch adds ``eps`` after
  the bias correction instead, so the two agree up to ``eps / sqrt(1 - b2^t)`` in the
  denominator: a difference far below float32 rounding unless ``v`` is tiny.
* AdamW: decoupled weight decay ``w *= 1 - lr * wd`` (the scheduled learning rate, as
  PyTorch's ``AdamW``), then the Adam step without ``wd`` in the gradient.
* RMSProp (PyTorch's formula; MXNet 1.x names ``gamma1``/``gamma2`` are accepted for
  ``rho``/``momentum``): ``g += wd * w; v = rho v + (1 - rho) g^2``; centered:
  ``a = rho a + (1 - rho) g; d = g / (sqrt(v - a^2) + eps)``, else ``d = g / (sqrt(v) + eps)``;
  with momentum ``buf = momentum buf + d; w -= lr * buf``, else ``w -= lr * d``.
* AdaGrad (PyTorch's formula, as MXNet 2): ``g += wd * w; h += g^2;
  w -= lr * g / (sqrt(h) + eps)``.

Each update is one private op whose kernels compute these formulas (``portable/ops/optim.py``):
``portable.AdamUpdate`` (AdamW: ``decoupled_wd=1``), ``portable.RMSPropUpdate`` and
``portable.AdaGradUpdate``.

Example:
    >>> import portable as pt
    >>> opt = pt.optim.create("adam", learning_rate=1e-3)
    >>> w = pt.nd.ones((2,)); state = opt.create_state(0, w)
    >>> opt.update(0, w, pt.nd.ones((2,)), state)
"""
from __future__ import annotations

from typing import Any

from portable.optim.optimizer import Optimizer, register, zeros_state


@register
class Adam(Optimizer):
    """Adam (Kingma and Ba), MXNet's form; weight decay is added to the gradient (L2).

    Args:
        learning_rate: step size (default 0.001).
        beta1, beta2: decay rates of the first and second moment estimates.
        epsilon: added to ``sqrt(v)`` for numerical stability.
        lazy_update: accepted for MXNet compatibility (dense updates only).
        **kwargs: the common arguments of :class:`Optimizer`.
    """

    default_learning_rate = 0.001
    hyper_names = ("beta1", "beta2", "epsilon")
    update_op = "portable.AdamUpdate"
    decoupled_wd = False

    def __init__(self, learning_rate: float | None = None, beta1: float = 0.9,
                 beta2: float = 0.999, epsilon: float = 1e-8, lazy_update: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.beta1, self.beta2, self.epsilon = float(beta1), float(beta2), float(epsilon)

    def create_state(self, index: Any, weight: Any) -> Any:
        return zeros_state(weight, 2)

    def update_attrs(self, index: Any) -> dict:
        return {**super().update_attrs(index), "t": self.count_of(index), "beta1": self.beta1,
                "beta2": self.beta2, "epsilon": self.epsilon,
                "decoupled_wd": int(self.decoupled_wd)}


@register
class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov and Hutter; PyTorch's ``AdamW``).

    Args:
        learning_rate: step size (default 0.001).
        wd: the decoupled decay coefficient (PyTorch's ``weight_decay``; default 0.01).
        **kwargs: as :class:`Adam`.
    """

    decoupled_wd = True

    def __init__(self, learning_rate: float | None = None, wd: float = 0.01,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, wd=wd, **kwargs)


@register
class RMSProp(Optimizer):
    """RMSProp (Tieleman and Hinton), plain or centered (Graves), optionally with momentum.

    Args:
        learning_rate: step size (default 0.001).
        rho: decay of the squared-gradient average (MXNet 1.x ``gamma1``).
        momentum: momentum of the update (MXNet 1.x ``gamma2``; 0 keeps no buffer).
        epsilon: added to the root mean square.
        centered: normalise by the gradient's estimated variance instead of its second moment.
        clip_weights: clip the weights to ``[-clip_weights, clip_weights]`` after the update.
        **kwargs: the common arguments of :class:`Optimizer`.
    """

    default_learning_rate = 0.001
    hyper_names = ("rho", "momentum", "epsilon", "centered", "clip_weights")
    update_op = "portable.RMSPropUpdate"

    def __init__(self, learning_rate: float | None = None, rho: float | None = None,
                 momentum: float | None = None, epsilon: float = 1e-8, centered: bool = False,
                 clip_weights: float | None = None, gamma1: float | None = None,
                 gamma2: float | None = None, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.rho = float(rho if rho is not None else gamma1 if gamma1 is not None else 0.9)
        self.momentum = float(momentum if momentum is not None
                              else gamma2 if gamma2 is not None else 0.0)
        self.epsilon = float(epsilon)
        self.centered = bool(centered)
        self.clip_weights = None if clip_weights is None else float(clip_weights)

    def create_state(self, index: Any, weight: Any) -> Any:
        count = 1 + int(self.centered) + int(self.momentum != 0.0)
        state = zeros_state(weight, count)
        return state if count > 1 else (state,)

    def update_attrs(self, index: Any) -> dict:
        return {**super().update_attrs(index), "rho": self.rho, "momentum": self.momentum,
                "epsilon": self.epsilon, "clip_weights": self.clip_weights}

    def update_states(self, states: list) -> list:
        # (var, mean if centered, buffer if momentum) -> the op's (var, mean?, mom?)
        rest = list(states[1:])
        mean = rest.pop(0) if self.centered else None
        return [states[0], mean, rest[0] if rest else None]


@register
class AdaGrad(Optimizer):
    """AdaGrad (Duchi et al.): per-coordinate steps shrinking with the summed squared gradient.

    Args:
        learning_rate: step size (default 0.01).
        epsilon: added to the root of the history (MXNet's ``float_stable_eps``; alias ``eps``).
        **kwargs: the common arguments of :class:`Optimizer`.
    """

    hyper_names = ("epsilon",)
    update_op = "portable.AdaGradUpdate"

    def __init__(self, learning_rate: float | None = None, epsilon: float = 1e-7,
                 eps: float | None = None, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.epsilon = float(eps if eps is not None else epsilon)

    def create_state(self, index: Any, weight: Any) -> Any:
        return zeros_state(weight, 1)

    def update_attrs(self, index: Any) -> dict:
        return {**super().update_attrs(index), "epsilon": self.epsilon}
