"""Regression and likelihood metrics with MXNet 1.x's definitions (``mx.metric.MAE``, ``MSE``,
``RMSE``, ``CrossEntropy``, ``NegativeLogLikelihood``, ``Perplexity``,
``PearsonCorrelation``); ``portable.metric`` re-exports them.

MAE, MSE and RMSE average over every element of an array pair, and then over the pairs: each
(label, prediction) pair is one instance, as in MXNet 1.x.

Example:
    >>> import numpy as np
    >>> m = MSE(); m.update([np.array([1., 2.])], [np.array([1., 4.])]); m.get()
    ('mse', 2.0)
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from portable.errors import PortableError, ShapeError
from portable.metric_base import EvalMetric, pairs, register


def _column(metric: str, label: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """``label - pred`` with 1-d arrays as columns, as MXNet's regression metrics do."""
    label = label.reshape(label.shape[0], 1) if label.ndim == 1 else label
    pred = pred.reshape(pred.shape[0], 1) if pred.ndim == 1 else pred
    try:
        return label - pred
    except ValueError:
        raise ShapeError(f"metric {metric}: labels {list(label.shape)} and predictions "
                         f"{list(pred.shape)} do not broadcast") from None


@register()
class MAE(EvalMetric):
    """Mean absolute error."""

    def __init__(self, name: str = "mae", output_names: Any = None,
                 label_names: Any = None) -> None:
        super().__init__(name, output_names, label_names)

    def _batch(self, label, pred):
        return float(np.abs(_column(self.name, label, pred)).mean()), 1


@register()
class MSE(EvalMetric):
    """Mean squared error."""

    def __init__(self, name: str = "mse", output_names: Any = None,
                 label_names: Any = None) -> None:
        super().__init__(name, output_names, label_names)

    def _batch(self, label, pred):
        return float((_column(self.name, label, pred) ** 2.0).mean()), 1


@register()
class RMSE(EvalMetric):
    """Root mean squared error of each array pair, averaged over the pairs."""

    def __init__(self, name: str = "rmse", output_names: Any = None,
                 label_names: Any = None) -> None:
        super().__init__(name, output_names, label_names)

    def _batch(self, label, pred):
        return float(np.sqrt((_column(self.name, label, pred) ** 2.0).mean())), 1


def _true_class_probability(metric: str, label: np.ndarray, pred: np.ndarray) -> np.ndarray:
    label = label.ravel()
    if label.shape[0] != pred.shape[0]:
        raise ShapeError(f"metric {metric}: {pred.shape[0]} predictions {list(pred.shape)} "
                         f"for {label.shape[0]} labels")
    return pred[np.arange(label.shape[0]), np.int64(label)]


@register("ce")
class CrossEntropy(EvalMetric):
    """Mean negative log of the probability given to the true class (``preds`` are
    probabilities, e.g. a softmax output).

    Args:
        eps: added to the probability before the log.
    """

    def __init__(self, eps: float = 1e-12, name: str = "cross-entropy",
                 output_names: Any = None, label_names: Any = None) -> None:
        self.eps = eps
        super().__init__(name, output_names, label_names, eps=eps)

    def _batch(self, label, pred):
        prob = _true_class_probability(self.name, label, pred)
        return float((-np.log(prob + self.eps)).sum()), prob.shape[0]


@register("nll_loss")
class NegativeLogLikelihood(CrossEntropy):
    """Mean negative log-likelihood of the true class (the same sum as CrossEntropy)."""

    def __init__(self, eps: float = 1e-12, name: str = "nll-loss",
                 output_names: Any = None, label_names: Any = None) -> None:
        super().__init__(eps, name, output_names, label_names)


@register()
class Perplexity(EvalMetric):
    """``exp`` of the mean negative log-probability of the true labels.

    Args:
        ignore_label: a label value whose positions are not counted (None counts all).
        axis: the class axis of the predictions.

    Example:
        >>> p = Perplexity(ignore_label=None)
        >>> p.update([np.array([0, 1, 1])], [np.array([[.3, .7], [0, 1.], [.4, .6]])])
        >>> round(p.get()[1], 6)
        1.771098
    """

    def __init__(self, ignore_label: int | None, axis: int = -1, name: str = "perplexity",
                 output_names: Any = None, label_names: Any = None) -> None:
        self.ignore_label = ignore_label
        self.axis = axis
        super().__init__(name, output_names, label_names, ignore_label=ignore_label)

    def _batch(self, label, pred):
        classes = pred.shape[self.axis]
        if label.size * classes != pred.size:
            raise ShapeError(f"metric {self.name}: labels {list(label.shape)} do not match "
                             f"predictions {list(pred.shape)} (class axis {self.axis})")
        label = label.reshape(-1)
        scores = np.moveaxis(pred, self.axis, -1).reshape(-1, classes)
        # MXNet's pick clips out-of-range indices
        picked = scores[np.arange(label.size), np.clip(label.astype(np.int32), 0, classes - 1)]
        count = label.size
        if self.ignore_label is not None:
            ignore = (label == self.ignore_label).astype(picked.dtype)
            count -= int(ignore.sum())
            picked = picked * (1 - ignore) + ignore
        loss = -float(np.log(np.maximum(picked.dtype.type(1e-10), picked)).sum())
        return loss, count

    def _value(self, total, count):
        return math.exp(total / count)


@register("pearsonr")
class PearsonCorrelation(EvalMetric):
    """Pearson correlation of predictions and labels.

    Args:
        average: ``macro`` (mean of the per-batch correlations) or ``micro`` (one correlation
            of all values seen, from running means and sums of squares).
    """

    def __init__(self, name: str = "pearsonr", output_names: Any = None,
                 label_names: Any = None, average: str = "macro") -> None:
        if average not in ("macro", "micro"):
            raise PortableError(f"metric {name}: average must be 'macro' or 'micro', got "
                                f"{average!r}")
        self.average = average
        super().__init__(name, output_names, label_names)

    def reset(self) -> None:
        super().reset()
        # running (count, mean, sum of squared deviations) of labels and predictions, and the
        # co-moment; used by 'micro'
        self._labels = (0, 0.0, 0.0)
        self._preds = (0, 0.0, 0.0)
        self._comoment = 0.0

    @staticmethod
    def _welford(values: np.ndarray, state: tuple) -> tuple:
        count, mean, m2 = state
        count += len(values)
        delta = values - mean
        mean += float(np.sum(delta / count))
        m2 += float(np.sum(delta * (values - mean)))
        return count, mean, m2

    def update(self, labels: Any, preds: Any) -> None:
        for label, pred in pairs(self.name, labels, preds):
            if label.shape != pred.shape:
                raise ShapeError(f"metric {self.name}: labels {list(label.shape)} and "
                                 f"predictions {list(pred.shape)} differ")
            label = label.ravel().astype(np.float64)
            pred = pred.ravel().astype(np.float64)
            if self.average == "macro":
                self._add(float(np.corrcoef(pred, label)[0, 1]), 1)
                continue
            self._add(0.0, 1)
            self._labels = self._welford(label, self._labels)
            # the co-moment uses the updated label mean and the previous prediction mean
            self._comoment += float(np.sum((label - self._labels[1]) * (pred - self._preds[1])))
            self._preds = self._welford(pred, self._preds)

    def get(self):
        if self.num_inst == 0 or self.average == "macro":
            return super().get()
        n = self._labels[0]
        spread = math.sqrt(self._preds[2] / (n - 1)) * math.sqrt(self._labels[2] / (n - 1))
        return self.name, self._comoment / ((n - 1) * spread)


__all__ = ["CrossEntropy", "MAE", "MSE", "NegativeLogLikelihood", "PearsonCorrelation",
           "Perplexity", "RMSE"]
