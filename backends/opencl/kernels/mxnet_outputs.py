"""OpenCL kernels of MXNet's loss-output ops (``portable/ops/mxnet_outputs.py``):
SoftmaxOutput, the regression outputs and their gradients, matching the NumPy reference
(``backends/xp/kernels/mxnet_outputs.py``) term by term.

- Forwards: ``softmax_into`` along axis 1 of the op's view (``softmax_view``), a copy, or the
  table's Sigmoid.
- ``SoftmaxOutputGrad`` with class labels is one generated elementwise expression over the
  output viewed as (N, C, D), the labels as (N, 1, D) and the class indices (1, C, 1):
  ``(ignored ? 0 : out - target) * coef * head``. Labels are truncated to integers inside the
  expression (MXNet's ``static_cast<int>``); ``target`` is 1 / 0 for the label's class (or
  the smoothed ``1 - alpha`` / ``alpha / (C - 1)``); ``head`` is the output with ``out_grad``
  (MXNet 1.9.1's quirk), else 1. ``coef`` is ``grad_scale / count``: a host scalar for
  ``null`` and ``batch``; for ``valid`` it is computed on the device from the device-side
  count of ignored labels (never read back).
- A label of the output's shape is a probability target: ``(out - label) * grad_scale * head``.
- ``RegressionOutputGrad``: ``(out - label) * scale`` (``sign`` with sign(0) = -1 for mae),
  ``scale = grad_scale / num_output`` known from shapes.
"""
from __future__ import annotations

from backends.opencl.allocator import empty
from backends.opencl.codegen import EwOp
from backends.opencl.elementwise import apply, assign, run_expression
from backends.opencl.kernels.loss import _classes
from backends.opencl.kernels.nn import softmax_into
from backends.opencl.kernels.table import kernel_table
from backends.opencl.reduction import reduce
from portable.ops.mxnet_outputs import softmax_view

kernels, kernel = kernel_table()


def _first_cast(template: str):
    """An expression template in which ``{T}`` is the compute type of operand 0 (the label
    operand {1} is converted to it first, as the reference casts labels to the data's dtype)."""
    return lambda first, *rest: template.replace("{T}", first.compute)


# operands: label (N, 1, D), class indices (1, C, 1), out (N, C, D), ignore label, coef
_CLASS_GRAD = EwOp(
    "SoftmaxOutputClassGrad",
    "(({use_ignore} != 0 && (long){0} == {3}) ? L(0.0) "
    ": {2} - ((long){0} == {1} ? {on} : {off})) * {4} * ({out_grad} != 0 ? {2} : L(1.0))",
    5, promote=(2, 4), params=("on", "off", "use_ignore", "out_grad"))
# operands: out, label (probabilities)
_PROBABILITY_GRAD = EwOp(
    "SoftmaxOutputProbabilityGrad",
    _first_cast("({0} - ({T}){1}) * {scale} * ({out_grad} != 0 ? {0} : L(1.0))"),
    2, result="first", promote=(0,), params=("scale", "out_grad"))
# operands: label; whether it is the ignore label (after truncation)
_IS_IGNORED = EwOp("SoftmaxOutputIgnored", "(long){0} == {1}", 2, result="bool", promote=())
# operands: the number of ignored labels; grad_scale / max(valid count, 1)
_VALID_SCALE = EwOp("SoftmaxOutputValidScale", "{scale} / fmax({total} - {0}, L(1.0))", 1,
                    result="given", promote=(), params=("scale", "total"))
_REGRESSION_GRAD = EwOp("RegressionOutputGrad", _first_cast("({0} - ({T}){1}) * {scale}"), 2,
                        result="first", promote=(0,), params=("scale",))
# MXNet's minus_sign: -1 where out == label
_MAE_GRAD = EwOp("MAERegressionOutputGrad",
                 _first_cast("(({0} - ({T}){1}) > 0 ? {scale} : -{scale})"), 2,
                 result="first", promote=(0,), params=("scale",))


def _writable(out, shape):
    """``out`` viewed as ``shape`` when it is contiguous, else a scratch to assign back."""
    return out.reshape(shape) if out.is_contiguous else empty(out.runtime, shape, out.dtype)


def _view(shape, attrs) -> tuple[int, ...]:
    return softmax_view(tuple(shape), bool(attrs["multi_output"]),
                        bool(attrs["preserve_shape"]))


@kernel("portable.SoftmaxOutput", half="native")
def softmax_output(ctx, inputs, outputs, attrs):
    data, out = inputs[0], outputs[0]
    if data.size == 0:
        return
    view = _view(data.shape, attrs)
    target = _writable(out, view)
    softmax_into(data.reshape(view), 1, target)
    if not out.is_contiguous:
        assign(out, target.reshape(out.shape))


def _class_coefficient(label, ignore: int, scale: float, count: int, attrs, dtype):
    """grad_scale / count, as a host float; for ``valid`` a one-element device array."""
    if attrs["normalization"] != "valid":
        return scale / count
    ignored = run_expression(_IS_IGNORED, [label, ignore])
    n_ignored = reduce(ignored, None, "sum")
    return run_expression(_VALID_SCALE, [n_ignored], params=(scale, float(label.size)),
                          dtype=dtype).reshape(1, 1, 1)


@kernel("portable.SoftmaxOutputGrad", half="native")
def softmax_output_grad(ctx, inputs, outputs, attrs):
    out, label = inputs[:2]
    grad = outputs[0]
    if grad.size == 0:
        return
    scale = float(attrs["grad_scale"])
    out_grad = float(bool(attrs["out_grad"]))
    if tuple(label.shape) == tuple(out.shape):  # probabilities as the target: no normalising
        run_expression(_PROBABILITY_GRAD, [out, label], out=grad, params=(scale, out_grad))
        return
    multi = bool(attrs["multi_output"])
    view = _view(out.shape, attrs)
    shape = view if multi else view + (1,)  # (N, C, D); D is 1 for one output
    n, classes, depth = shape
    labels = label.reshape(n, 1, depth)
    alpha = float(attrs["smooth_alpha"])
    on, off = (1.0 - alpha, alpha / (classes - 1)) if alpha and not multi else (1.0, 0.0)
    normalization = attrs["normalization"]
    count = n if normalization == "batch" else 1
    if multi and normalization != "valid":
        count *= depth
    ignore = int(attrs["ignore_label"])
    coef = _class_coefficient(labels, ignore, scale, count, attrs, out.dtype)
    target = _writable(grad, shape)
    run_expression(_CLASS_GRAD, [labels, _classes(out.runtime, classes), out.reshape(shape),
                                 ignore, coef], out=target,
                   params=(on, off, float(bool(attrs["use_ignore"])), out_grad))
    if not grad.is_contiguous:
        assign(grad, target.reshape(grad.shape))


@kernel("portable.LinearRegressionOutput", "portable.MAERegressionOutput", half="native")
def identity_output(ctx, inputs, outputs, attrs):
    assign(outputs[0], inputs[0])


@kernel("portable.LogisticRegressionOutput", half="native")
def logistic_output(ctx, inputs, outputs, attrs):
    apply("Sigmoid", inputs[0], out=outputs[0])


@kernel("portable.RegressionOutputGrad", half="native")
def regression_output_grad(ctx, inputs, outputs, attrs):
    out, label = inputs
    num_output = label.size // max(label.shape[0], 1)
    scale = float(attrs["grad_scale"]) / max(num_output, 1)
    op = _MAE_GRAD if attrs["kind"] == "mae" else _REGRESSION_GRAD
    run_expression(op, [out, label.reshape(out.shape)], out=outputs[0], params=(scale,))
