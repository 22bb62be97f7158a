"""Kernels of MXNet's loss-output ops (``portable/ops/mxnet_outputs.py``): SoftmaxOutput, the
regression outputs and their gradients.

SoftmaxOutput views its data as MXNet does: (N, C, D) with ``multi_output`` (softmax along C),
(rows, last axis) with ``preserve_shape``, else (N, everything else).
"""
from __future__ import annotations

from backends.xp.kernels.nn import softmax
from portable.backend import kernel_table
from portable.ops.mxnet_outputs import softmax_view

kernels, kernel = kernel_table()


def _softmax_view(shape: tuple[int, ...], attrs: dict) -> tuple[tuple[int, ...], int]:
    """The shape SoftmaxOutput computes in and the axis of its classes."""
    return softmax_view(shape, bool(attrs["multi_output"]), bool(attrs["preserve_shape"])), 1


@kernel("portable.SoftmaxOutput")
def softmax_output(ctx, inputs, outputs, attrs):
    data = inputs[0]
    if not data.size:
        return
    view, axis = _softmax_view(data.shape, attrs)
    outputs[0][...] = softmax(ctx.xp, data.reshape(view), axis).reshape(data.shape)


@kernel("portable.SoftmaxOutputGrad")
def softmax_output_grad(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    out, label = inputs[:2]
    # MXNet 1.9.1 hands the op's output to its backward as the "output gradient", so
    # out_grad=True multiplies by the probabilities, not by the head gradient
    head = out if attrs["out_grad"] else None
    scale = float(attrs["grad_scale"])
    if tuple(label.shape) == tuple(out.shape):  # probabilities as the target: no normalising
        grad = (out - label.astype(out.dtype)) * out.dtype.type(scale)
        if head is not None:
            grad = grad * head
        outputs[0][...] = grad
        return
    view, _ = _softmax_view(out.shape, attrs)
    multi = bool(attrs["multi_output"])
    prob = out.reshape(view if multi else view + (1,))  # (N, C, D); D is 1 for one output
    n, classes, depth = prob.shape
    # MXNet truncates float labels to int (static_cast<int>)
    labels = label.reshape(n, depth) if multi else label.reshape(n, 1)
    labels = labels.astype(xp.int64)
    one_hot = xp.arange(classes).reshape(1, -1, 1) == labels[:, None, :]
    alpha = float(attrs["smooth_alpha"])
    if alpha and not multi:  # (MXNet smooths only the single-output form)
        target = xp.where(one_hot, 1.0 - alpha, alpha / (classes - 1)).astype(out.dtype)
    else:
        target = one_hot.astype(out.dtype)
    grad = prob - target
    ignored = labels == int(attrs["ignore_label"])
    if attrs["use_ignore"]:
        grad = xp.where(ignored[:, None, :], out.dtype.type(0), grad)
    normalization = attrs["normalization"]
    if normalization == "batch":
        count = n
    elif normalization == "valid":
        count = max(int(labels.size - xp.sum(ignored)), 1)
    else:
        count = 1
    if multi and normalization != "valid":
        count *= depth
    grad = grad * out.dtype.type(scale / count)
    grad = grad.reshape(out.shape)
    if head is not None:
        grad = grad * head
    outputs[0][...] = grad


@kernel("portable.LinearRegressionOutput", "portable.MAERegressionOutput")
def identity_output(ctx, inputs, outputs, attrs):
    outputs[0][...] = inputs[0]


@kernel("portable.LogisticRegressionOutput")
def logistic_output(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    outputs[0][...] = 1 / (1 + xp.exp(-inputs[0]))


@kernel("portable.RegressionOutputGrad")
def regression_output_grad(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    out, label = inputs
    diff = out - label.reshape(out.shape).astype(out.dtype)
    if attrs["kind"] == "mae":  # MXNet's minus_sign: -1 where out == label
        diff = xp.where(diff > 0, 1, -1).astype(out.dtype)
    num_output = label.size // max(label.shape[0], 1)
    outputs[0][...] = diff * out.dtype.type(float(attrs["grad_scale"]) / max(num_output, 1))
