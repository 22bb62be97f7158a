"""NumPy kernels: SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss and their gradients.

Scores (N, C, D1, ...) are viewed as (N, C, D) and labels as (N, D), D the product of the
trailing axes (1 for 2-D scores), so one code path covers every rank.
"""
from __future__ import annotations

from backends.xp.kernels.nn import log_softmax, softmax
from portable.backend import kernel_table

kernels, kernel = kernel_table()


class _Targets:
    """Labels flattened to (N, D), with the per-element weights that ``ignore_index`` and the
    class ``weights`` give (None: every weight is 1)."""

    def __init__(self, xp, scores, labels, weights, attrs) -> None:
        n, c = scores.shape[:2]
        self.shape = (n, c, scores.size // max(n * c, 1))
        self.labels = labels.reshape(self.shape[0], self.shape[2])
        self.weights = None
        ignore_index = attrs["ignore_index"]
        if ignore_index is not None:
            ignored = self.labels == ignore_index
            # an ignored label may lie outside [0, C); any valid class stands in for it
            self.labels = xp.where(ignored, 0, self.labels)
        if weights is not None:
            self.weights = xp.take(weights, self.labels)
        if ignore_index is not None:
            kept = 1 if self.weights is None else self.weights
            self.weights = xp.where(ignored, 0, kept).astype(scores.dtype)

    def pick(self, xp, values):
        """values[n, label[n, d], d] for (N, C, D) values: shape (N, D)."""
        return xp.take_along_axis(values, self.labels[:, None, :], axis=1)[:, 0, :]

    def one_hot(self, xp):
        """Boolean (N, C, D): True where the class is the label."""
        classes = xp.arange(self.shape[1]).reshape(1, -1, 1)
        return classes == self.labels[:, None, :]

    def reduce(self, xp, losses, reduction, out):
        """Weight the (N, D) per-element ``losses`` and reduce them into ``out``."""
        if self.weights is not None:
            losses = losses * self.weights
        if reduction == "none":
            out[...] = losses.reshape(out.shape)
        elif reduction == "sum":
            out[...] = xp.sum(losses)
        elif self.weights is None:
            out[...] = xp.mean(losses)
        else:
            out[...] = xp.sum(losses) / xp.sum(self.weights)

    def coefficients(self, xp, d_loss, reduction):
        """dLoss / d(unweighted per-element loss), broadcastable against (N, C, D)."""
        if reduction == "none":
            coef = d_loss.reshape(self.labels.shape)
        elif reduction == "sum" or self.weights is not None:
            coef = d_loss
        else:
            coef = d_loss / self.labels.size
        if self.weights is not None:
            if reduction == "mean":
                coef = coef / xp.sum(self.weights)
            coef = coef * self.weights
        # (N, D) -> (N, 1, D) to broadcast over classes; a scalar broadcasts as it is
        return coef[:, None, :] if coef.ndim == 2 else coef


@kernel("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    scores, labels = inputs[:2]
    weights = inputs[2] if len(inputs) > 2 else None
    targets = _Targets(xp, scores, labels, weights, attrs)
    log_prob = log_softmax(xp, scores, axis=1)
    losses = -targets.pick(xp, log_prob.reshape(targets.shape))
    targets.reduce(xp, losses, attrs["reduction"], outputs[0])
    if len(outputs) > 1 and outputs[1] is not None:
        outputs[1][...] = log_prob


@kernel("portable.SoftmaxCrossEntropyLossGrad")
def softmax_cross_entropy_loss_grad(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    d_loss, scores, labels = inputs[:3]
    weights, d_log_prob = (inputs + [None, None])[3:5]
    targets = _Targets(xp, scores, labels, weights, attrs)
    prob = softmax(xp, scores, axis=1).reshape(targets.shape)
    coef = targets.coefficients(xp, d_loss, attrs["reduction"])
    # d(-log softmax[label]) / d scores = softmax - one_hot
    grad = (prob - targets.one_hot(xp)) * coef
    if d_log_prob is not None:
        d_lp = d_log_prob.reshape(targets.shape)
        grad = grad + d_lp - prob * xp.sum(d_lp, axis=1, keepdims=True)
    outputs[0][...] = grad.reshape(scores.shape)


@kernel("NegativeLogLikelihoodLoss")
def negative_log_likelihood_loss(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    x, target = inputs[:2]
    weight = inputs[2] if len(inputs) > 2 else None
    targets = _Targets(xp, x, target, weight, attrs)
    losses = -targets.pick(xp, x.reshape(targets.shape))
    targets.reduce(xp, losses, attrs["reduction"], outputs[0])


@kernel("portable.NegativeLogLikelihoodLossGrad")
def negative_log_likelihood_loss_grad(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    d_loss, x, target = inputs[:3]
    weight = inputs[3] if len(inputs) > 3 else None
    targets = _Targets(xp, x, target, weight, attrs)
    coef = targets.coefficients(xp, d_loss, attrs["reduction"])
    outputs[0][...] = (targets.one_hot(xp) * -coef).reshape(x.shape)
