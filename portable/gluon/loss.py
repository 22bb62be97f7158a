"""Loss blocks (MXNet 1.x ``gluon.loss``): each returns one loss per sample, the mean over all
axes but ``batch_axis``, after multiplying by ``weight`` and ``sample_weight``.

Example:
    >>> import portable as pt
    >>> loss = SoftmaxCrossEntropyLoss()
    >>> round(float(loss(pt.nd.array([[0.0, 0.0]]), pt.nd.array([1])).asnumpy()[0]), 4)
    0.6931
"""
from __future__ import annotations

from typing import Any

from portable.errors import PortableError
from portable.gluon.block import HybridBlock

_INT64 = 7  # ONNX element type of the class indices


def _mean_except_batch(F: Any, loss: Any, batch_axis: int) -> Any:
    """The mean over every axis but ``batch_axis`` (MXNet's ``F.mean(..., exclude=True)``)."""
    if batch_axis != 0:
        ndim = getattr(loss, "ndim", None)
        if ndim is None:
            raise PortableError(f"batch_axis={batch_axis} needs the loss's rank, which a "
                                f"traced (hybridized) loss does not know; use batch_axis=0")
        perm = [batch_axis] + [a for a in range(ndim) if a != batch_axis]
        loss = F.transpose(loss, perm=perm)
    # Flatten makes any rank (N, ...) into (N, rest), so one reduction works for every rank.
    return F.reduce_mean(F.flatten(loss, axis=1), [1], keepdims=0)


def _shape_of(F: Any, x: Any) -> Any:
    """``x``'s shape: known on the host for an NDArray (no wait for its value), a Shape node
    (folded when planning) for a Symbol."""
    shape = getattr(x, "shape", None)
    return list(shape) if isinstance(shape, tuple) else F.shape(x)


def _reshape_like(F: Any, x: Any, like: Any) -> Any:
    if getattr(x, "shape", None) is not None and x.shape == getattr(like, "shape", None):
        return x
    return F.reshape(x, _shape_of(F, like))


class Loss(HybridBlock):
    """Base class of losses.

    Args:
        weight: a global scalar weight (None: 1).
        batch_axis: the axis that indexes samples.
    """

    def __init__(self, weight: float | None = None, batch_axis: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._weight, self._batch_axis = weight, batch_axis

    def _weighting(self, F: Any, loss: Any, weight: float | None, sample_weight: Any) -> Any:
        if sample_weight is not None:
            loss = F.mul(loss, sample_weight)
        if weight is not None and weight != 1.0:
            loss = F.mul(loss, float(weight))
        return loss

    def __repr__(self) -> str:
        return f"{type(self).__name__}(batch_axis={self._batch_axis}, w={self._weight})"


class L2Loss(Loss):
    """``weight / 2 * (label - pred)^2`` (label reshaped like pred)."""

    def __init__(self, weight: float = 1.0, batch_axis: int = 0, **kwargs: Any) -> None:
        super().__init__(weight, batch_axis, **kwargs)

    def hybrid_forward(self, F: Any, pred: Any, label: Any, sample_weight: Any = None) -> Any:
        diff = F.sub(_reshape_like(F, label, pred), pred)
        loss = self._weighting(F, F.mul(diff, diff), self._weight / 2, sample_weight)
        return _mean_except_batch(F, loss, self._batch_axis)


class L1Loss(Loss):
    """``weight * |label - pred|``."""

    def __init__(self, weight: float | None = None, batch_axis: int = 0, **kwargs: Any) -> None:
        super().__init__(weight, batch_axis, **kwargs)

    def hybrid_forward(self, F: Any, pred: Any, label: Any, sample_weight: Any = None) -> Any:
        loss = F.abs(F.sub(_reshape_like(F, label, pred), pred))
        loss = self._weighting(F, loss, self._weight, sample_weight)
        return _mean_except_batch(F, loss, self._batch_axis)


class SigmoidBinaryCrossEntropyLoss(Loss):
    """Binary cross-entropy of ``sigmoid(pred)`` (or of ``pred`` itself with
    ``from_sigmoid=True``) against labels in [0, 1]; ``pos_weight`` scales the positive term.

    Logits use the stable form ``relu(x) - x * z + softplus(-|x|)``.
    """

    def __init__(self, from_sigmoid: bool = False, weight: float | None = None,
                 batch_axis: int = 0, **kwargs: Any) -> None:
        super().__init__(weight, batch_axis, **kwargs)
        self._from_sigmoid = from_sigmoid

    def hybrid_forward(self, F: Any, pred: Any, label: Any, sample_weight: Any = None,
                       pos_weight: Any = None) -> Any:
        label = _reshape_like(F, label, pred)
        if not self._from_sigmoid:
            log_term = F.softplus(F.neg(F.abs(pred)))  # log(1 + exp(-|x|))
            if pos_weight is None:
                loss = F.add(F.sub(F.relu(pred), F.mul(pred, label)), log_term)
            else:
                # x - x z + (1 + (pos_weight - 1) z) (log(1 + exp(-|x|)) + relu(-x))
                log_weight = F.add(F.mul(F.sub(pos_weight, 1.0), label), 1.0)
                loss = F.add(F.sub(pred, F.mul(pred, label)),
                             F.mul(log_weight, F.add(log_term, F.relu(F.neg(pred)))))
        else:
            eps = 1e-12
            positive = F.mul(F.log(F.add(pred, eps)), label)
            if pos_weight is not None:
                positive = F.mul(positive, pos_weight)
            negative = F.mul(F.log(F.add(F.sub(1.0, pred), eps)), F.sub(1.0, label))
            loss = F.neg(F.add(positive, negative))
        loss = self._weighting(F, loss, self._weight, sample_weight)
        return _mean_except_batch(F, loss, self._batch_axis)


SigmoidBCELoss = SigmoidBinaryCrossEntropyLoss


class SoftmaxCrossEntropyLoss(Loss):
    """Softmax cross-entropy: ``-log softmax(pred)[label]`` (sparse labels, given as class
    indices of any dtype) or ``-sum(label * log softmax(pred))`` (dense labels).

    Args:
        axis: the class axis: -1 (default) or 1.
        sparse_label: labels are class indices (shape of pred without ``axis``).
        from_logits: ``pred`` already holds log-probabilities.
        weight, batch_axis: as in Loss.
    """

    def __init__(self, axis: int = -1, sparse_label: bool = True, from_logits: bool = False,
                 weight: float | None = None, batch_axis: int = 0, **kwargs: Any) -> None:
        super().__init__(weight, batch_axis, **kwargs)
        if axis not in (-1, 1):
            raise PortableError(f"SoftmaxCrossEntropyLoss(axis={axis}) is not supported; the "
                                f"class axis must be 1 or -1")
        self._axis, self._sparse_label, self._from_logits = axis, sparse_label, from_logits

    def hybrid_forward(self, F: Any, pred: Any, label: Any, sample_weight: Any = None) -> Any:
        if self._sparse_label:
            loss = self._sparse(F, pred, label)
        else:
            log_prob = pred if self._from_logits else F.log_softmax(pred, axis=self._axis)
            product = F.mul(log_prob, _reshape_like(F, label, pred))
            loss = F.neg(F.reduce_sum(product, [self._axis], keepdims=1))
        loss = self._weighting(F, loss, self._weight, sample_weight)
        return _mean_except_batch(F, loss, self._batch_axis)

    def _sparse(self, F: Any, pred: Any, label: Any) -> Any:
        """The per-element loss, with the class axis kept (size 1) as MXNet's ``pick``."""
        label = F.cast(label, to=_INT64)
        op = F.negative_log_likelihood_loss if self._from_logits else \
            F.softmax_cross_entropy_loss
        if self._axis == 1:  # the ONNX ops' own layout: (N, C, D...) with labels (N, D...)
            return F.unsqueeze(op(pred, label, reduction="none"), [1])
        # Classes last: score rows (M, C) against flat labels (M,), then back to label's shape.
        rows = F.flatten(pred, axis=-1)
        loss = op(rows, F.reshape(label, [-1]), reduction="none")
        return F.unsqueeze(F.reshape(loss, _shape_of(F, label)), [-1])


SoftmaxCELoss = SoftmaxCrossEntropyLoss

__all__ = ["L1Loss", "L2Loss", "Loss", "SigmoidBCELoss", "SigmoidBinaryCrossEntropyLoss",
           "SoftmaxCELoss", "SoftmaxCrossEntropyLoss"]
