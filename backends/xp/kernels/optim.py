"""NumPy kernels: the optimizer update ops (``portable/ops/optim.py`` gives the formulas).

Each kernel first makes every output hold its input (nothing to do when the output is the
input itself, as in ``Optimizer.push_update``, or a planner's in-place copy of it) and from
then on reads and writes the outputs only, so an output placed over its input is safe. The
gradient is rescaled into a scratch array and never written. The step's scalars are Python
floats (each rounded once to the arrays' dtype) and the operations run in one fixed order,
which the OpenCL kernels follow step for step, so float32 results agree between backends.
"""
from __future__ import annotations

from typing import Any

from portable.backend import KernelContext, kernel_table
from portable.ops.optim import bias_corrected_lr, onnx_adam_step_size, training_groups

kernels, kernel = kernel_table()


def _own(value: Any, outputs: list, index: int) -> Any:
    """Output ``index`` holding ``value`` (a scratch copy when that output is not requested)."""
    out = outputs[index] if index < len(outputs) else None
    if out is None:
        return value.copy()
    if out is not value:
        out[...] = value
    return out


def _scratch_grad(xp: Any, grad: Any, attrs: dict) -> Any:
    """``clip(rescale_grad * grad)`` in a fresh array: the gradient buffer stays untouched."""
    g = grad * attrs["rescale_grad"]
    clip = attrs["clip_gradient"]
    if clip is not None:
        xp.clip(g, -clip, clip, out=g)
    return g


def _add_weight_decay(g: Any, weight: Any, wd: float) -> None:
    if wd:  # skipped at 0 so that an infinite weight does not turn g into NaN
        g += wd * weight


@kernel("portable.SGDUpdate")
def sgd_update(ctx: KernelContext, inputs: list, outputs: list, attrs: dict) -> None:
    weight, grad, mom = (list(inputs) + [None])[:3]
    w = _own(weight, outputs, 0)
    g = _scratch_grad(ctx.xp, grad, attrs)
    _add_weight_decay(g, w, attrs["wd"])
    g *= attrs["lr"]
    if mom is not None:
        m = _own(mom, outputs, 1)
        m *= attrs["momentum"]
        m -= g
        w += m
    else:
        w -= g


@kernel("portable.NAGUpdate")
def nag_update(ctx: KernelContext, inputs: list, outputs: list, attrs: dict) -> None:
    weight, grad, mom = (list(inputs) + [None])[:3]
    w = _own(weight, outputs, 0)
    g = _scratch_grad(ctx.xp, grad, attrs)
    _add_weight_decay(g, w, attrs["wd"])
    if mom is not None:
        momentum = attrs["momentum"]
        m = _own(mom, outputs, 1)
        m *= momentum
        m += g
        g += momentum * m
    g *= attrs["lr"]
    w -= g


@kernel("portable.AdamUpdate")
def adam_update(ctx: KernelContext, inputs: list, outputs: list, attrs: dict) -> None:
    xp = ctx.xp
    weight, grad, mean_in, var_in = inputs[:4]
    w = _own(weight, outputs, 0)
    g = _scratch_grad(xp, grad, attrs)
    lr, wd, b1, b2 = attrs["lr"], attrs["wd"], attrs["beta1"], attrs["beta2"]
    if wd and attrs["decoupled_wd"]:
        w *= 1.0 - lr * wd
    else:
        _add_weight_decay(g, w, wd)
    mean, var = _own(mean_in, outputs, 1), _own(var_in, outputs, 2)
    mean *= b1
    mean += (1.0 - b1) * g
    var *= b2
    var += (1.0 - b2) * g * g
    denom = xp.sqrt(var)
    denom += attrs["epsilon"]
    # (ONNX's Adam passes its own step size: uncorrected at T = 0)
    step = attrs["step_size"] if "step_size" in attrs else bias_corrected_lr(lr, attrs["t"],
                                                                             b1, b2)
    w -= step * mean / denom


@kernel("portable.RMSPropUpdate")
def rmsprop_update(ctx: KernelContext, inputs: list, outputs: list, attrs: dict) -> None:
    xp = ctx.xp
    weight, grad, var_in, mean_in, mom = (list(inputs) + [None, None])[:5]
    w = _own(weight, outputs, 0)
    g = _scratch_grad(xp, grad, attrs)
    rho = attrs["rho"]
    _add_weight_decay(g, w, attrs["wd"])
    var = _own(var_in, outputs, 1)
    var *= rho
    var += (1.0 - rho) * g * g
    if mean_in is not None:  # centered: normalise by the estimated variance
        mean = _own(mean_in, outputs, 2)
        mean *= rho
        mean += (1.0 - rho) * g
        denom = xp.sqrt(var - mean * mean)
    else:
        denom = xp.sqrt(var)
    denom += attrs["epsilon"]
    g /= denom
    if mom is not None:
        buf = _own(mom, outputs, 3)
        buf *= attrs["momentum"]
        buf += g
        w -= attrs["lr"] * buf
    else:
        w -= attrs["lr"] * g
    bound = attrs["clip_weights"]
    if bound is not None:
        xp.clip(w, -bound, bound, out=w)


@kernel("portable.AdaGradUpdate")
def adagrad_update(ctx: KernelContext, inputs: list, outputs: list, attrs: dict) -> None:
    xp = ctx.xp
    weight, grad, history_in = inputs[:3]
    w = _own(weight, outputs, 0)
    g = _scratch_grad(xp, grad, attrs)
    _add_weight_decay(g, w, attrs["wd"])
    history = _own(history_in, outputs, 1)
    history += g * g
    denom = xp.sqrt(history)
    denom += attrs["epsilon"]
    g /= denom
    g *= attrs["lr"]
    w -= g


# -- the ONNX training ops: each tensor group through the private update's steps ------------


def _training_split(inputs: list, outputs: list, states: int):
    """``(r, t, [(x, g, states...), ...], [(x_out, states_out...), ...])``."""
    n = training_groups(len(inputs) - 2, states)
    r, t = float(inputs[0].reshape(-1)[0]), int(inputs[1].reshape(-1)[0])
    tensors = inputs[2:]
    ins = [[tensors[group * n + k] for group in range(2 + states)] for k in range(n)]
    outs = [[outputs[group * n + k] for group in range(1 + states)] for k in range(n)]
    return r, t, ins, outs


_PLAIN = {"rescale_grad": 1.0, "clip_gradient": None}


@kernel("ai.onnx.preview.training.Adagrad")
def onnx_adagrad(ctx: KernelContext, inputs: list, outputs: list, attrs: dict) -> None:
    r, t, ins, outs = _training_split(inputs, outputs, 1)
    step = {"lr": r / (1.0 + t * attrs["decay_factor"]), "wd": attrs["norm_coefficient"],
            "epsilon": attrs["epsilon"], **_PLAIN}
    for group_in, group_out in zip(ins, outs):
        adagrad_update(ctx, group_in, group_out, step)


@kernel("ai.onnx.preview.training.Adam")
def onnx_adam(ctx: KernelContext, inputs: list, outputs: list, attrs: dict) -> None:
    r, t, ins, outs = _training_split(inputs, outputs, 2)
    alpha, beta = attrs["alpha"], attrs["beta"]
    step = {"lr": r, "wd": attrs["norm_coefficient"], "decoupled_wd": 0, "t": t,
            "beta1": alpha, "beta2": beta, "epsilon": attrs["epsilon"],
            "step_size": onnx_adam_step_size(r, t, alpha, beta), **_PLAIN}
    post = attrs["norm_coefficient_post"]
    for group_in, group_out in zip(ins, outs):
        adam_update(ctx, group_in, group_out, step)
        if post:
            group_out[0] *= 1.0 - post


@kernel("ai.onnx.preview.training.Momentum")
def onnx_momentum(ctx: KernelContext, inputs: list, outputs: list, attrs: dict) -> None:
    r, t, ins, outs = _training_split(inputs, outputs, 1)
    alpha, nc = attrs["alpha"], attrs["norm_coefficient"]
    beta = attrs["beta"] if t > 0 else 1.0  # the first update takes the whole gradient
    for (weight, grad, velocity), group_out in zip(ins, outs):
        x = _own(weight, group_out, 0)
        g = grad * 1.0
        _add_weight_decay(g, x, nc)
        v = _own(velocity, group_out, 1)
        v *= alpha
        v += beta * g
        if attrs["mode"] == "nesterov":
            g += alpha * v
            x -= r * g
        else:
            x -= r * v
