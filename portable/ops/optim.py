"""Optimizer updates: private ops that write a weight and its optimizer state in place.

One op per update rule (MXNet 1.x formulas, as ``portable.optim`` documents them); each reads
``(weight, grad, state...)`` and gives the new weight and the new state arrays. The gradient
is first rescaled and clipped into a scratch array (``g = clip(rescale_grad * grad)``, the
gradient buffer itself is never written), then:

- ``portable.SGDUpdate``: ``g += wd * w; g *= lr``; with a momentum buffer
  ``mom = momentum * mom - g; w += mom``, else ``w -= g``.
- ``portable.NAGUpdate``: ``g += wd * w``; with a buffer ``mom = momentum * mom + g;
  g += momentum * mom``; then ``w -= lr * g``.
- ``portable.AdamUpdate``: ``g += wd * w`` (or, with ``decoupled_wd``, AdamW's
  ``w *= 1 - lr * wd``); ``m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g;
  w -= lr_t m / (sqrt(v) + eps)`` with ``lr_t = lr sqrt(1 - b2^t) / (1 - b1^t)``.
- ``portable.RMSPropUpdate``: ``g += wd * w; v = rho v + (1 - rho) g g``; centered (a ``mean``
  input): ``a = rho a + (1 - rho) g; g /= sqrt(v - a a) + eps``, else ``g /= sqrt(v) + eps``;
  with a momentum buffer ``buf = momentum buf + g; w -= lr buf``, else ``w -= lr g``; then
  ``w`` is clipped to ``[-clip_weights, clip_weights]`` when given.
- ``portable.AdaGradUpdate``: ``g += wd * w; h += g g; w -= lr g / (sqrt(h) + eps)``.

A term ``wd * w`` is added only when ``wd`` is nonzero, and clipping happens only when its
bound is given, exactly as the optimizers always did.

Facets: each output ``k`` is the new value of a mutable input (``mutates``) and may be written
over it (``inplace``), which is how ``Optimizer.push_update`` runs them: ``out=`` the weight
and state arrays themselves. The step's scalars (learning rate, weight decay, step count,
gradient rescale and clip) are ``runtime_attrs``: they change on every call (learning-rate
schedules, the step count) without a new type inference or a new compiled kernel (the OpenCL
kernels take them as arguments). Not differentiable; never exported (private domain).

Example:
    >>> from portable.ndarray.invoke import invoke                          # doctest: +SKIP
    >>> invoke("portable.SGDUpdate", [w, g], {"lr": 0.1}, out=(w,))         # doctest: +SKIP
"""
from __future__ import annotations

import math

from portable.ir.graph import TensorType
from portable.ops.registry import Attr, InferContext, declare

# The scalars of one step, read by kernels only: never part of a type rule or a program.
_STEP_ATTRS = {"lr": Attr("float"), "wd": Attr("float", 0.0),
               "rescale_grad": Attr("float", 1.0), "clip_gradient": Attr("float", None)}
_RUNTIME = tuple(_STEP_ATTRS)


def bias_corrected_lr(lr: float, t: int, beta1: float, beta2: float) -> float:
    """Adam's step size ``lr * sqrt(1 - beta2^t) / (1 - beta1^t)``, in double precision on
    the host (every backend's kernel uses this one value, so they agree to the last bit).

    Args:
        lr: the learning rate of this step.
        t: the parameter's update count (1 for its first update).
        beta1, beta2: decay rates of the first and second moment estimates.

    Returns:
        The bias-corrected step size.
    """
    return lr * math.sqrt(1.0 - beta2 ** t) / (1.0 - beta1 ** t)


def _update_infer(ctx: InferContext) -> list[TensorType | None]:
    """Output 0 has the weight's type; output ``k`` the type of the state it replaces (None
    when that optional state is absent). Gradient and states must have the weight's shape."""
    weight = ctx.type(0)
    if weight.dtype.kind != "f":
        ctx.fail(f"the weight must be floating point, got {weight.dtype.name}")
    for index in range(1, len(ctx)):
        if not ctx.has(index):
            continue
        if ctx.shape(index) != weight.shape or ctx.dtype(index).kind != "f":
            ctx.fail(f"{ctx.op.input_name(index)!r} must be a floating-point array of the "
                     f"weight's shape {weight.shape}, got {ctx.type(index)!r}")
    outputs: list[TensorType | None] = [weight]
    for out_index, in_index in ctx.op.mutates[1:]:
        outputs.append(ctx.type(in_index) if ctx.has(in_index) else None)
    return outputs


def _declare_update(name: str, states: tuple[str, ...], attrs: dict, doc: str) -> None:
    """Declare ``portable.<name>``: inputs (weight, grad, *states), outputs the new weight and
    states, each mutating (and allowed to overwrite) its input."""
    outputs = ("weight_out",) + tuple(
        s.rstrip("?") + "_out" + ("?" if s.endswith("?") else "") for s in states)
    pairs = ((0, 0),) + tuple((k + 1, k + 2) for k in range(len(states)))
    declare(name, domain="portable", inputs=("weight", "grad") + states, outputs=outputs,
            infer=_update_infer, attrs={**_STEP_ATTRS, **attrs}, mutates=pairs,
            inplace=pairs, runtime_attrs=_RUNTIME + (("t",) if "t" in attrs else ()), doc=doc)


_declare_update("SGDUpdate", ("mom?",), {"momentum": Attr("float", 0.0)},
                "SGD step; with a momentum buffer, MXNet's heavy-ball form.")
_declare_update("NAGUpdate", ("mom?",), {"momentum": Attr("float", 0.0)},
                "Nesterov accelerated gradient step (PyTorch's SGD(nesterov=True)).")
_declare_update("AdamUpdate", ("mean", "var"),
                {"t": Attr("int", 1), "beta1": Attr("float", 0.9), "beta2": Attr("float", 0.999),
                 "epsilon": Attr("float", 1e-8), "decoupled_wd": Attr("int", 0)},
                "Adam step (MXNet's epsilon placement); decoupled_wd=1 is AdamW.")
_declare_update("RMSPropUpdate", ("var", "mean?", "mom?"),
                {"rho": Attr("float", 0.9), "momentum": Attr("float", 0.0),
                 "epsilon": Attr("float", 1e-8), "clip_weights": Attr("float", None)},
                "RMSProp step; centered when the gradient mean is given.")
_declare_update("AdaGradUpdate", ("history",), {"epsilon": Attr("float", 1e-7)},
                "AdaGrad step.")
