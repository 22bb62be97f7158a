"""Stochastic gradient descent: ``SGD`` (momentum, weight decay) and ``NAG`` (Nesterov).

Both follow MXNet 1.x. With ``g = clip(rescale_grad * grad) + wd * weight``:

* SGD without momentum: ``weight -= lr * g``.
* SGD with momentum (the state holds the learning-rate-scaled velocity, as MXNet's does):
  ``mom = momentum * mom - lr * g; weight += mom``. For a constant learning rate this is
  PyTorch's ``SGD(momentum=..., weight_decay=...)`` with ``mom = -lr * buf``.
* NAG: ``mom = momentum * mom + g; weight -= lr * (g + momentum * mom)``, which is PyTorch's
  ``SGD(nesterov=True)``.

Each update is one private op (``portable.SGDUpdate``, ``portable.NAGUpdate``; see
``portable/ops/optim.py``).

Example:
    >>> import portable as pt
    >>> opt = pt.optim.SGD(learning_rate=0.1, momentum=0.9, wd=1e-4)
    >>> w = pt.nd.ones((3,)); state = opt.create_state(0, w)
    >>> opt.update(0, w, pt.nd.ones((3,)), state)
"""
from __future__ import annotations

from typing import Any

from portable.optim.optimizer import Optimizer, register, zeros_state


@register
class SGD(Optimizer):
    """SGD with optional momentum and weight decay.

    Args:
        learning_rate: step size (default 0.01).
        momentum: momentum coefficient (0: plain SGD, no state).
        lazy_update: accepted for MXNet compatibility (dense updates only).
        **kwargs: the common arguments of :class:`Optimizer` (wd, rescale_grad, ...).
    """

    hyper_names = ("momentum",)
    update_op = "portable.SGDUpdate"

    def __init__(self, learning_rate: float | None = None, momentum: float = 0.0,
                 lazy_update: bool = False, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.momentum = float(momentum)

    def create_state(self, index: Any, weight: Any) -> Any:
        return zeros_state(weight, 1) if self.momentum != 0.0 else None

    def update_attrs(self, index: Any) -> dict:
        return {**super().update_attrs(index), "momentum": self.momentum}


@register
class NAG(SGD):
    """Nesterov accelerated gradient (MXNet 1.x ``NAG``; PyTorch ``SGD(nesterov=True)``).

    Args:
        learning_rate: step size (default 0.01).
        momentum: momentum coefficient.
        **kwargs: the common arguments of :class:`Optimizer`.
    """

    update_op = "portable.NAGUpdate"

    def __init__(self, learning_rate: float | None = None, momentum: float = 0.9,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, momentum=momentum, **kwargs)
