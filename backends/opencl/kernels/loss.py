"""OpenCL kernels: SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss and their gradients.

Scores (N, C, D1, ...) are viewed as (N, C, D) and labels as (N, D). The ``pick`` kernel reads
each element's label once and writes its (negated, weighted) score, its weight (0 for an
ignored label, the class weight otherwise) and the label with ignored ones replaced by class
0 (as the NumPy reference does, so an ignored label may lie outside [0, C)). Reductions and
the one-hot gradients are generated kernels on those (N, D) arrays.
"""
from __future__ import annotations

import numpy as np

from backends.opencl.allocator import empty, from_numpy
from backends.opencl.codegen import Fused
from backends.opencl.elementwise import apply, assign, run_elementwise
from backends.opencl.kernels.nn import softmax_into
from backends.opencl.kernels.table import kernel_table
from backends.opencl.optable import TABLE
from backends.opencl.reduction import reduce
from backends.opencl.scalars import ctype, preamble

kernels, kernel = kernel_table()

_PICK = """
__kernel void pick(const int n, const int classes, const int inner,
                   __global const {T}* values, const int v_off,
                   __global const {L}* labels, const int l_off,
                   __global const {T}* weights, const int w_off, const int has_weights,
                   const long ignore_index, const int has_ignore,
                   __global {T}* loss, __global {T}* weight, __global long* clean) {{
  const int i = get_global_id(0);
  if (i >= n) return;
  long label = labels[l_off + i];
  {T} w = 1;
  if (has_ignore && label == ignore_index) {{ label = 0; w = 0; }}
  else if (has_weights) w = weights[w_off + label];
  const int b = i / inner, d = i % inner;
  loss[i] = -values[v_off + (b * classes + label) * inner + d] * w;
  weight[i] = w;
  clean[i] = label;
}}
"""


class _Targets:
    """Per element (N, D): the weighted negated picked value, weight and clean label."""

    def __init__(self, values, labels, weights, attrs) -> None:
        runtime = values.runtime
        n, c = values.shape[:2]
        inner = values.size // max(n * c, 1)
        self.shape = (n, c, inner)
        values = values.contiguous()
        labels = labels.contiguous()
        count = n * inner
        self.loss = empty(runtime, (n, inner), values.dtype)
        self.weight = empty(runtime, (n, inner), values.dtype)
        self.labels = empty(runtime, (n, inner), np.int64)
        ignore = attrs["ignore_index"]
        self.weighted = weights is not None or ignore is not None
        w = weights if weights is not None else values
        code = preamble([values.dtype]) + _PICK.format(T=ctype(values.dtype).storage,
                                                       L=ctype(labels.dtype).storage)
        if count:
            runtime.launch1d(runtime.kernel(code, "pick"), count, np.int32(count), np.int32(c),
                             np.int32(inner), values.buffer, np.int32(values.offset),
                             labels.buffer, np.int32(labels.offset), w.buffer,
                             np.int32(w.offset), np.int32(weights is not None),
                             np.int64(0 if ignore is None else ignore),
                             np.int32(ignore is not None), self.loss.buffer,
                             self.weight.buffer, self.labels.buffer)

    def reduce(self, reduction: str, out) -> None:
        if reduction == "none":
            assign(out, self.loss.reshape(out.shape))
        elif reduction == "sum":
            reduce(self.loss, None, "sum", out=out)
        elif not self.weighted:
            reduce(self.loss, None, "mean", out=out)
        else:
            apply("Div", reduce(self.loss, None, "sum"), reduce(self.weight, None, "sum"),
                  out=out)

    def coefficients(self, d_loss, reduction: str):
        """dLoss / d(unweighted element loss) as (N, 1, D), for the one-hot gradients."""
        n, _, inner = self.shape
        if reduction == "none":
            coef = d_loss.reshape(n, inner)
        elif reduction == "sum" or self.weighted:
            coef = d_loss.reshape(1, 1)
        else:
            coef = apply("Div", d_loss.reshape(1, 1), n * inner)
        if self.weighted:
            if reduction == "mean":
                coef = apply("Div", coef, reduce(self.weight, None, "sum"))
            coef = apply("Mul", coef, self.weight)
        return coef.reshape(coef.shape[0], 1, coef.shape[1])

    def one_hot_grad(self, prob, coef, out, negate: bool) -> None:
        """out (N, C, D) = (prob - onehot) * coef, or -onehot * coef without prob."""
        n, c, inner = self.shape
        runtime = out.runtime
        classes = _classes(runtime, c)
        operands = [self.labels.reshape(n, 1, inner), classes, coef]
        fused = Fused(4)
        hot = fused.add(TABLE["Equal"], fused.input(0), fused.input(1))
        if negate:
            operands.append(0.0)
            fused.add(TABLE["Where"], hot, fused.add(TABLE["Neg"], fused.input(2)),
                      fused.input(3))
            run_elementwise(fused.steps, operands, [out.reshape(self.shape)], [out.dtype])
            return
        operands.append(prob)
        diff = fused.add(TABLE["Sub"], fused.input(3), hot)
        fused.add(TABLE["Mul"], diff, fused.input(2))
        run_elementwise(fused.steps, operands, [out.reshape(self.shape)], [out.dtype])


def _classes(runtime, count: int):
    """The class indices (1, C, 1) as int64, uploaded once per size."""
    memo = runtime.memo("class_indices")
    hit = memo.get(count)
    if hit is None:
        hit = memo[count] = from_numpy(runtime, np.arange(count, dtype=np.int64)
                                       .reshape(1, -1, 1))
    return hit


def _optional(inputs, index):
    return inputs[index] if len(inputs) > index else None


@kernel("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(ctx, inputs, outputs, attrs):
    scores, labels = inputs[:2]
    log_prob = outputs[1] if len(outputs) > 1 and outputs[1] is not None else \
        empty(scores.runtime, scores.shape, scores.dtype)
    softmax_into(scores, 1, log_prob, log=True)
    targets = _Targets(log_prob, labels, _optional(inputs, 2), attrs)
    targets.reduce(attrs["reduction"], outputs[0])


@kernel("portable.SoftmaxCrossEntropyLossGrad")
def softmax_cross_entropy_loss_grad(ctx, inputs, outputs, attrs):
    d_loss, scores, labels = inputs[:3]
    weights, d_log_prob = _optional(inputs, 3), _optional(inputs, 4)
    runtime = scores.runtime
    targets = _Targets(scores, labels, weights, attrs)
    prob = empty(runtime, scores.shape, scores.dtype)
    softmax_into(scores, 1, prob)
    prob3 = prob.reshape(targets.shape)
    coef = targets.coefficients(d_loss, attrs["reduction"])
    out = outputs[0]
    targets.one_hot_grad(prob3, coef, out, negate=False)
    if d_log_prob is not None:
        # + d_lp - prob * sum(d_lp over classes)
        d_lp = d_log_prob.reshape(targets.shape)
        total = reduce(d_lp, (1,), "sum", keepdims=True)
        fused = Fused(4)
        shift = fused.add(TABLE["Sub"], fused.input(1), fused.add(
            TABLE["Mul"], fused.input(2), fused.input(3)))
        fused.add(TABLE["Add"], fused.input(0), shift)
        view = out.reshape(targets.shape)
        run_elementwise(fused.steps, [view, d_lp, prob3, total], [view], [out.dtype])


@kernel("NegativeLogLikelihoodLoss")
def negative_log_likelihood_loss(ctx, inputs, outputs, attrs):
    x, target = inputs[:2]
    _Targets(x, target, _optional(inputs, 2), attrs).reduce(attrs["reduction"], outputs[0])


@kernel("portable.NegativeLogLikelihoodLossGrad")
def negative_log_likelihood_loss_grad(ctx, inputs, outputs, attrs):
    d_loss, x, target = inputs[:3]
    targets = _Targets(x, target, _optional(inputs, 3), attrs)
    coef = targets.coefficients(d_loss, attrs["reduction"])
    targets.one_hot_grad(None, coef, outputs[0], negate=True)
