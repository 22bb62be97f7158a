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
kernels take them as arguments). Not differentiable; never exported (private domain). The
ONNX training ops (Momentum, Adagrad, Adam of ai.onnx.preview.training, at the end) share
these formulas.

Example:
    >>> from portable.ndarray.invoke import invoke                          # doctest: +SKIP
    >>> invoke("portable.SGDUpdate", [w, g], {"lr": 0.1}, out=(w,))         # doctest: +SKIP
"""
from __future__ import annotations

import math

import numpy as np

from portable.ir.graph import TensorType
from portable.ops.registry import Attr, DtypeContext, InferContext, declare

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

# -- the ONNX training ops (domain ai.onnx.preview.training) --------------------------------
#
# Momentum, Adagrad and Adam update any number of tensors at once: inputs (R, T, X1..Xn,
# G1..Gn, states1..n...) and outputs (X1_new..Xn_new, states_new...), R the learning rate and T
# the update count (scalars). Their formulas, with g = norm_coefficient * x + grad:
# - Adagrad: r = R / (1 + T decay_factor); h += g g; x -= r g / (sqrt(h) + epsilon), which is
#   ``portable.AdaGradUpdate`` with lr = r and wd = norm_coefficient;
# - Adam: v = alpha v + (1 - alpha) g; h = beta h + (1 - beta) g g; x -= r' v / (sqrt(h) +
#   epsilon), r' = bias_corrected_lr(R, T, alpha, beta) when T > 0 and R at T = 0, then
#   x *= 1 - norm_coefficient_post: ``portable.AdamUpdate``'s steps with that step size;
# - Momentum: v = alpha v + b g (b = beta, or 1 at T = 0); standard: x -= R v; nesterov:
#   x -= R (g + alpha v).
# Not differentiable. Kernels read R and T on the host (they are step scalars).

TRAINING = "ai.onnx.preview.training"


def onnx_adam_step_size(r: float, t: int, alpha: float, beta: float) -> float:
    """ONNX Adam's step size: bias-corrected from the first update on (T > 0), else R."""
    return bias_corrected_lr(r, t, alpha, beta) if t > 0 else r


def training_groups(ctx_or_count: "InferContext | int", states: int) -> int:
    """How many tensors a training op updates: its inputs after R and T come in
    ``2 + states`` groups (X, G, then each state) of that many each."""
    count = ctx_or_count if isinstance(ctx_or_count, int) else len(ctx_or_count) - 2
    per = 2 + states
    return count // per if count > 0 and count % per == 0 else 0


def _training_infer(states: int):
    def infer(ctx: InferContext) -> list[TensorType]:
        n = training_groups(ctx, states)
        if not n:
            ctx.fail(f"after R and T the inputs must be {2 + states} equal groups (X, G"
                     f"{', and the optimizer states' if states else ''}), got {len(ctx) - 2}")
        for index, what in ((0, "R (the learning rate)"), (1, "T (the update count)")):
            if ctx.type(index).size != 1:
                ctx.fail(f"{what} must be a scalar, got {ctx.type(index)!r}")
        if ctx.dtype(0).kind != "f" or ctx.dtype(1) != np.int64:
            ctx.fail(f"R must be floating point and T int64, got {ctx.dtype(0).name} and "
                     f"{ctx.dtype(1).name}")
        if len(ctx.node.outputs) != n * (1 + states):
            ctx.fail(f"{n} updated tensors need {n * (1 + states)} outputs, the node has "
                     f"{len(ctx.node.outputs)}")
        if ctx.attrs.get("mode", "standard") not in ("standard", "nesterov"):
            ctx.fail(f"mode must be 'standard' or 'nesterov', got {ctx.attrs['mode']!r}")
        outputs = []
        for k in range(n):
            x = ctx.type(2 + k)
            if x.dtype.kind != "f":
                ctx.fail(f"X{k + 1} must be floating point, got {x!r}")
            for group in range(1, 2 + states):
                other = ctx.type(2 + group * n + k)
                if other != x:
                    ctx.fail(f"input #{2 + group * n + k} {other!r} must have X{k + 1}'s type "
                             f"{x!r}")
        for group in (0,) + tuple(range(2, 2 + states)):
            outputs += [ctx.type(2 + group * n + k) for k in range(n)]
        return outputs
    return infer


def _training_dtypes(ctx: DtypeContext) -> list[np.dtype | None]:
    """Every output takes the dtype of the tensor it updates (X_k for the new X_k and its
    states); R and T keep their own."""
    n_out, n_in = len(ctx.outputs), len(ctx.inputs) - 2
    if n_out == 0 or n_in <= 0:
        return [None] * n_out
    # n tensors, each with (1 + states) outputs and (2 + states) inputs: n = n_in - n_out.
    n = n_in - n_out
    if n <= 0 or n_out % n:
        ctx.fail(f"{n_in} tensor inputs and {n_out} outputs do not form update groups")
    states = n_out // n - 1
    result: list[np.dtype | None] = []
    for k in range(n):
        ctx.unify([2 + group * n + k for group in range(2 + states)])
    for group in (0,) + tuple(range(2, 2 + states)):
        result += [ctx.dtype(2 + group * n + k) for k in range(n)]
    return result


_TRAINING_BASE = {"norm_coefficient": Attr("float", 0.0)}

declare("Adagrad", domain=TRAINING, inputs=("R", "T", "inputs*"), outputs=("outputs*",),
        infer=_training_infer(1), onnx_since=1, nondiff_inputs=(0, 1),
        dtype_rule=_training_dtypes,
        attrs={"decay_factor": Attr("float", 0.0), "epsilon": Attr("float", 1e-6),
               **_TRAINING_BASE},
        doc="ONNX Adagrad over n tensors: inputs (R, T, X.., G.., H..), outputs (X_new.., "
            "H_new..).")
declare("Adam", domain=TRAINING, inputs=("R", "T", "inputs*"), outputs=("outputs*",),
        infer=_training_infer(2), onnx_since=1, nondiff_inputs=(0, 1),
        dtype_rule=_training_dtypes,
        attrs={"alpha": Attr("float", 0.9), "beta": Attr("float", 0.999),
               "epsilon": Attr("float", 1e-6), "norm_coefficient_post": Attr("float", 0.0),
               **_TRAINING_BASE},
        doc="ONNX Adam over n tensors: inputs (R, T, X.., G.., V.., H..), outputs (X_new.., "
            "V_new.., H_new..).")
declare("Momentum", domain=TRAINING, inputs=("R", "T", "inputs*"), outputs=("outputs*",),
        infer=_training_infer(1), onnx_since=1, nondiff_inputs=(0, 1),
        dtype_rule=_training_dtypes,
        attrs={"alpha": Attr("float"), "beta": Attr("float"), "mode": Attr("string"),
               "norm_coefficient": Attr("float")},
        doc="ONNX Momentum (mode 'standard' or 'nesterov') over n tensors: inputs (R, T, "
            "X.., G.., V..), outputs (X_new.., V_new..).")
