"""OpenCL kernels: the optimizer update ops (``portable/ops/optim.py`` gives the formulas).

Each update is ONE generated elementwise kernel (``codegen.run_elementwise``) that reads the
weight, the gradient and the state and writes the new weight and state, element by element,
into the outputs, which may be the inputs themselves (``Optimizer.push_update`` passes them as
``out=``): a work-item loads every operand before it stores. The expression is built from the
op table's C expressions, step for step the operations of the NumPy kernels; its scalars
(learning rate, weight decay, rescale, clip bounds, decay rates, Adam's bias-corrected step
size) are host scalars, hence kernel arguments: a new learning rate every step reuses the
compiled program. Only the structure (momentum buffer or not, weight decay or not, clipping or
not) selects among a few programs, each compiled once and cached like every generated kernel.
Intermediates stay in registers in the compute type (float for float16 storage).
"""
from __future__ import annotations

from typing import Any

from backends.opencl.codegen import Fused
from backends.opencl.elementwise import run_elementwise
from backends.opencl.kernels.table import kernel_table
from backends.opencl.optable import TABLE
from portable.backend import KernelContext
from backends.opencl.allocator import host_value
from portable.ops.optim import bias_corrected_lr, onnx_adam_step_size, training_groups

kernels, kernel = kernel_table()

Ref = tuple[str, int]


class _Update:
    """One fused update expression: operands (device arrays, host scalars) and its steps."""

    def __init__(self) -> None:
        self.operands: list[Any] = []
        self.fused = Fused(0)

    def value(self, operand: Any) -> Ref:
        """An operand: a device array, or a host scalar passed as a kernel argument."""
        self.operands.append(float(operand) if isinstance(operand, (int, float)) else operand)
        return self.fused.input(len(self.operands) - 1)

    def __call__(self, op_name: str, *args: Ref) -> Ref:
        return self.fused.add(TABLE[op_name], *args)

    def scratch_grad(self, grad: Any, attrs: dict) -> Ref:
        """``clip(rescale_grad * grad)``: np.clip's max-then-min; the buffer is only read."""
        g = self("Mul", self.value(grad), self.value(attrs["rescale_grad"]))
        clip = attrs["clip_gradient"]
        if clip is not None:
            g = self("Min", self("Max", g, self.value(-clip)), self.value(clip))
        return g

    def weight_decay(self, g: Ref, w: Ref, wd: float) -> Ref:
        """``g + wd * w``; skipped at 0, as the NumPy kernels skip it."""
        return self("Add", g, self("Mul", self.value(wd), w)) if wd else g

    def store(self, results: list[tuple[Ref, Any]]) -> None:
        """Run the expression, writing each ``(step, output array)`` (None: a scratch one).
        The generator stores the last steps, so each result is copied into one, in order."""
        for ref, _ in results:
            self("Identity", ref)
        run_elementwise(self.fused.steps, self.operands, [out for _, out in results])


def _output(outputs: list, index: int) -> Any:
    return outputs[index] if index < len(outputs) else None


@kernel("portable.SGDUpdate", half="native")
def sgd_update(ctx: KernelContext, inputs: list, outputs: list, attrs: dict) -> None:
    weight, grad, mom = (list(inputs) + [None])[:3]
    e = _Update()
    w = e.value(weight)
    g = e("Mul", e.weight_decay(e.scratch_grad(grad, attrs), w, attrs["wd"]),
          e.value(attrs["lr"]))
    if mom is None:
        e.store([(e("Sub", w, g), _output(outputs, 0))])
        return
    m = e("Sub", e("Mul", e.value(mom), e.value(attrs["momentum"])), g)
    e.store([(e("Add", w, m), _output(outputs, 0)), (m, _output(outputs, 1))])


@kernel("portable.NAGUpdate", half="native")
def nag_update(ctx: KernelContext, inputs: list, outputs: list, attrs: dict) -> None:
    weight, grad, mom = (list(inputs) + [None])[:3]
    e = _Update()
    w = e.value(weight)
    g = e.weight_decay(e.scratch_grad(grad, attrs), w, attrs["wd"])
    results = []
    if mom is not None:
        momentum = e.value(attrs["momentum"])
        m = e("Add", e("Mul", e.value(mom), momentum), g)
        g = e("Add", g, e("Mul", momentum, m))
        results.append((m, _output(outputs, 1)))
    w = e("Sub", w, e("Mul", g, e.value(attrs["lr"])))
    e.store([(w, _output(outputs, 0))] + results)


@kernel("portable.AdamUpdate", half="native")
def adam_update(ctx: KernelContext, inputs: list, outputs: list, attrs: dict) -> None:
    weight, grad, mean, var = inputs[:4]
    lr, wd, b1, b2 = attrs["lr"], attrs["wd"], attrs["beta1"], attrs["beta2"]
    e = _Update()
    w = e.value(weight)
    g = e.scratch_grad(grad, attrs)
    if wd and attrs["decoupled_wd"]:
        w = e("Mul", w, e.value(1.0 - lr * wd))
    else:
        g = e.weight_decay(g, w, wd)
    m = e("Add", e("Mul", e.value(mean), e.value(b1)), e("Mul", e.value(1.0 - b1), g))
    v = e("Add", e("Mul", e.value(var), e.value(b2)),
          e("Mul", e("Mul", e.value(1.0 - b2), g), g))
    denom = e("Add", e("Sqrt", v), e.value(attrs["epsilon"]))
    # (ONNX's Adam passes its own step size: uncorrected at T = 0)
    size = attrs["step_size"] if "step_size" in attrs else bias_corrected_lr(lr, attrs["t"],
                                                                             b1, b2)
    step = e("Div", e("Mul", e.value(size), m), denom)
    e.store([(e("Sub", w, step), _output(outputs, 0)), (m, _output(outputs, 1)),
             (v, _output(outputs, 2))])


@kernel("portable.RMSPropUpdate", half="native")
def rmsprop_update(ctx: KernelContext, inputs: list, outputs: list, attrs: dict) -> None:
    weight, grad, var, mean, mom = (list(inputs) + [None, None])[:5]
    rho = attrs["rho"]
    e = _Update()
    w = e.value(weight)
    g = e.weight_decay(e.scratch_grad(grad, attrs), w, attrs["wd"])
    v = e("Add", e("Mul", e.value(var), e.value(rho)),
          e("Mul", e("Mul", e.value(1.0 - rho), g), g))
    results = [(v, _output(outputs, 1))]
    if mean is not None:  # centered: normalise by the estimated variance
        a = e("Add", e("Mul", e.value(mean), e.value(rho)), e("Mul", e.value(1.0 - rho), g))
        root = e("Sqrt", e("Sub", v, e("Mul", a, a)))
        results.append((a, _output(outputs, 2)))
    else:
        root = e("Sqrt", v)
    g = e("Div", g, e("Add", root, e.value(attrs["epsilon"])))
    if mom is not None:
        g = e("Add", e("Mul", e.value(mom), e.value(attrs["momentum"])), g)
        results.append((g, _output(outputs, 3)))
    w = e("Sub", w, e("Mul", e.value(attrs["lr"]), g))
    bound = attrs["clip_weights"]
    if bound is not None:
        w = e("Min", e("Max", w, e.value(-bound)), e.value(bound))
    e.store([(w, _output(outputs, 0))] + results)


@kernel("portable.AdaGradUpdate", half="native")
def adagrad_update(ctx: KernelContext, inputs: list, outputs: list, attrs: dict) -> None:
    weight, grad, history = inputs[:3]
    e = _Update()
    w = e.value(weight)
    g = e.weight_decay(e.scratch_grad(grad, attrs), w, attrs["wd"])
    h = e("Add", e.value(history), e("Mul", g, g))
    g = e("Div", g, e("Add", e("Sqrt", h), e.value(attrs["epsilon"])))
    w = e("Sub", w, e("Mul", g, e.value(attrs["lr"])))
    e.store([(w, _output(outputs, 0)), (h, _output(outputs, 1))])


# -- the ONNX training ops: each tensor group through the private update's expression -------


def _training_split(inputs: list, outputs: list, states: int):
    """``(r, t, [(x, g, states...), ...], [(x_out, states_out...), ...])``."""
    n = training_groups(len(inputs) - 2, states)
    r = float(host_value(inputs[0]).reshape(-1)[0])
    t = int(host_value(inputs[1]).reshape(-1)[0])
    tensors = inputs[2:]
    ins = [[tensors[group * n + k] for group in range(2 + states)] for k in range(n)]
    outs = [[outputs[group * n + k] for group in range(1 + states)] for k in range(n)]
    return r, t, ins, outs


_PLAIN = {"rescale_grad": 1.0, "clip_gradient": None}


@kernel("ai.onnx.preview.training.Adagrad", half="native")
def onnx_adagrad(ctx: KernelContext, inputs: list, outputs: list, attrs: dict) -> None:
    r, t, ins, outs = _training_split(inputs, outputs, 1)
    step = {"lr": r / (1.0 + t * attrs["decay_factor"]), "wd": attrs["norm_coefficient"],
            "epsilon": attrs["epsilon"], **_PLAIN}
    for group_in, group_out in zip(ins, outs):
        adagrad_update(ctx, group_in, group_out, step)


@kernel("ai.onnx.preview.training.Adam", half="native")
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
            e = _Update()
            e.store([(e("Mul", e.value(group_out[0]), e.value(1.0 - post)), group_out[0])])


@kernel("ai.onnx.preview.training.Momentum", half="native")
def onnx_momentum(ctx: KernelContext, inputs: list, outputs: list, attrs: dict) -> None:
    r, t, ins, outs = _training_split(inputs, outputs, 1)
    alpha = attrs["alpha"]
    beta = attrs["beta"] if t > 0 else 1.0  # the first update takes the whole gradient
    for (weight, grad, velocity), (x_out, v_out) in zip(ins, outs):
        e = _Update()
        x = e.value(weight)
        g = e.weight_decay(e.value(grad), x, attrs["norm_coefficient"])
        v = e("Add", e("Mul", e.value(velocity), e.value(alpha)), e("Mul", e.value(beta), g))
        if attrs["mode"] == "nesterov":
            g = e("Add", g, e("Mul", e.value(alpha), v))
        else:
            g = v
        e.store([(e("Sub", x, e("Mul", e.value(r), g)), x_out), (v, v_out)])
