"""Evaluation metrics with MXNet 1.x names (``mx.metric``): ``update(labels, preds)``,
``get()``, ``reset()``, ``get_name_value()``.

Labels and predictions may be NDArrays, NumPy arrays or lists of them (one per device or
output); NDArrays are read on the host, which waits for the ops that produce them.

Example:
    >>> import numpy as np
    >>> acc = create("acc")
    >>> acc.update([np.array([0, 1])], [np.array([[0.9, 0.1], [0.3, 0.7]])])
    >>> acc.get()
    ('accuracy', 1.0)
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from portable.errors import PortableError, ShapeError


def _host(value: Any) -> np.ndarray:
    if hasattr(value, "asnumpy"):
        return value.asnumpy()
    return np.asarray(value)


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


class EvalMetric:
    """Base class: accumulates ``sum_metric`` over ``num_inst`` instances.

    Args:
        name: the metric's name in ``get()``.
        output_names, label_names: accepted for MXNet compatibility (``update_dict``).
    """

    def __init__(self, name: str, output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None) -> None:
        self.name = str(name)
        self.output_names = output_names
        self.label_names = label_names
        self.reset()

    def reset(self) -> None:
        """Forget everything accumulated."""
        self.num_inst = 0
        self.sum_metric = 0.0

    def update(self, labels: Any, preds: Any) -> None:
        """Accumulate a batch: ``labels`` and ``preds`` are arrays or lists of arrays."""
        labels, preds = _as_list(labels), _as_list(preds)
        if len(labels) != len(preds):
            raise ShapeError(f"metric {self.name}: {len(labels)} label arrays but "
                             f"{len(preds)} prediction arrays")
        for label, pred in zip(labels, preds):
            total, count = self._batch(_host(label), _host(pred))
            self.sum_metric += float(total)
            self.num_inst += int(count)

    def update_dict(self, labels: dict, preds: dict) -> None:
        names = self.output_names or list(preds)
        label_names = self.label_names or list(labels)
        self.update([labels[n] for n in label_names], [preds[n] for n in names])

    def _batch(self, label: np.ndarray, pred: np.ndarray) -> tuple[float, int]:
        """(sum of the per-instance metric, number of instances) of one array pair."""
        raise NotImplementedError

    def get(self) -> tuple[Any, Any]:
        """``(name, value)``; the value is NaN before any update."""
        if self.num_inst == 0:
            return self.name, float("nan")
        return self.name, self.sum_metric / self.num_inst

    def get_name_value(self) -> list[tuple[str, float]]:
        """``[(name, value), ...]`` (one pair for simple metrics)."""
        name, value = self.get()
        names, values = (name, value) if isinstance(name, list) else ([name], [value])
        return list(zip(names, values))

    def __str__(self) -> str:
        return ", ".join(f"{n}={v:.4f}" for n, v in self.get_name_value())


def _check_rows(metric: str, label: np.ndarray, pred: np.ndarray) -> None:
    if pred.shape[0] != label.reshape(-1).shape[0] and pred.shape[0] != label.shape[0]:
        raise ShapeError(f"metric {metric}: {pred.shape[0]} predictions {list(pred.shape)} "
                         f"for {label.shape[0]} labels {list(label.shape)}")


class Accuracy(EvalMetric):
    """Fraction of correct class predictions (``preds`` are scores unless shaped like labels).

    Args:
        axis: the class axis of the scores.
    """

    def __init__(self, axis: int = 1, name: str = "accuracy", **kwargs: Any) -> None:
        self.axis = axis
        super().__init__(name, **kwargs)

    def _batch(self, label, pred):
        _check_rows(self.name, label, pred)
        if pred.shape != label.shape:
            pred = pred.argmax(axis=self.axis)
        pred, label = pred.astype(np.int64).ravel(), label.astype(np.int64).ravel()
        return float((pred == label).sum()), label.size


class TopKAccuracy(EvalMetric):
    """Fraction of instances whose label is among the ``top_k`` highest scores."""

    def __init__(self, top_k: int = 1, name: str = "top_k_accuracy", **kwargs: Any) -> None:
        if top_k < 1:
            raise PortableError(f"TopKAccuracy top_k must be >= 1, got {top_k}")
        self.top_k = int(top_k)
        super().__init__(f"{name}_{top_k}" if name == "top_k_accuracy" else name, **kwargs)

    def _batch(self, label, pred):
        _check_rows(self.name, label, pred)
        label = label.astype(np.int64).ravel()
        pred = pred.reshape(len(label), -1)
        k = min(self.top_k, pred.shape[1])
        top = np.argpartition(-pred, k - 1, axis=1)[:, :k]
        return float((top == label[:, None]).any(axis=1).sum()), len(label)


class CrossEntropy(EvalMetric):
    """Mean negative log of the probability given to the true class (``preds`` are
    probabilities, e.g. a softmax output)."""

    def __init__(self, eps: float = 1e-12, name: str = "cross-entropy", **kwargs: Any) -> None:
        self.eps = eps
        super().__init__(name, **kwargs)

    def _batch(self, label, pred):
        _check_rows(self.name, label, pred)
        label = label.astype(np.int64).ravel()
        prob = pred.reshape(len(label), -1)[np.arange(len(label)), label]
        return float(-np.log(prob.astype(np.float64) + self.eps).sum()), len(label)


class _Regression(EvalMetric):
    def _errors(self, label, pred):
        label, pred = label.astype(np.float64), pred.astype(np.float64)
        if label.shape != pred.shape:
            if label.size != pred.size:
                raise ShapeError(f"metric {self.name}: labels {list(label.shape)} and "
                                 f"predictions {list(pred.shape)} differ in size")
            label = label.reshape(pred.shape)
        return label - pred


class MAE(_Regression):
    """Mean absolute error (averaged per instance, MXNet's convention)."""

    def __init__(self, name: str = "mae", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)

    def _batch(self, label, pred):
        err = self._errors(label, pred)
        return float(np.abs(err).reshape(len(err), -1).mean(axis=1).sum()), len(err)


class MSE(_Regression):
    """Mean squared error."""

    def __init__(self, name: str = "mse", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)

    def _batch(self, label, pred):
        err = self._errors(label, pred)
        return float((err ** 2).reshape(len(err), -1).mean(axis=1).sum()), len(err)


class RMSE(MSE):
    """Root of the mean squared error."""

    def __init__(self, name: str = "rmse", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)

    def get(self):
        name, value = super().get()
        return name, math.sqrt(value) if value == value else value


class Loss(EvalMetric):
    """Mean of a loss already computed per instance (``preds`` are loss values; labels are
    ignored)."""

    def __init__(self, name: str = "loss", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)

    def update(self, _: Any, preds: Any) -> None:
        for pred in _as_list(preds):
            values = _host(pred).astype(np.float64)
            self.sum_metric += float(values.sum())
            self.num_inst += int(values.size)


class CustomMetric(EvalMetric):
    """A metric from ``feval(label, pred) -> float`` (averaged over batches)."""

    def __init__(self, feval: Callable[[np.ndarray, np.ndarray], float],
                 name: str | None = None, **kwargs: Any) -> None:
        self.feval = feval
        super().__init__(name or getattr(feval, "__name__", "custom"), **kwargs)

    def _batch(self, label, pred):
        return float(self.feval(label, pred)), 1


class CompositeEvalMetric(EvalMetric):
    """Several metrics updated together; ``get()`` returns lists of names and values."""

    def __init__(self, metrics: Sequence[Any] | None = None, name: str = "composite",
                 **kwargs: Any) -> None:
        self.metrics = [create(m) for m in (metrics or [])]
        super().__init__(name, **kwargs)

    def add(self, metric: Any) -> None:
        self.metrics.append(create(metric))

    def get_metric(self, index: int) -> EvalMetric:
        return self.metrics[index]

    def reset(self) -> None:
        for metric in getattr(self, "metrics", []):
            metric.reset()

    def update(self, labels: Any, preds: Any) -> None:
        for metric in self.metrics:
            metric.update(labels, preds)

    def get(self) -> tuple[list, list]:
        pairs = [pair for metric in self.metrics for pair in metric.get_name_value()]
        return [n for n, _ in pairs], [v for _, v in pairs]


METRICS: dict[str, Callable[..., EvalMetric]] = {
    "acc": Accuracy, "accuracy": Accuracy,
    "top_k_accuracy": TopKAccuracy, "top_k_acc": TopKAccuracy,
    "ce": CrossEntropy, "cross-entropy": CrossEntropy, "crossentropy": CrossEntropy,
    "mae": MAE, "mse": MSE, "rmse": RMSE, "loss": Loss,
}


def create(metric: Any, *args: Any, **kwargs: Any) -> EvalMetric:
    """A metric from a name (``acc``, ``top_k_accuracy``, ``ce``, ``mae``, ``mse``, ``rmse``,
    ``loss``), a callable ``feval(label, pred)``, an EvalMetric, or a list (composite).

    Example:
        >>> create(["acc", "ce"]).get()[0]
        ['accuracy', 'cross-entropy']
    """
    if isinstance(metric, EvalMetric):
        return metric
    if isinstance(metric, (list, tuple)):
        return CompositeEvalMetric([create(m, *args, **kwargs) for m in metric])
    if isinstance(metric, str):
        factory = METRICS.get(metric.lower())
        if factory is None:
            raise PortableError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")
        return factory(*args, **kwargs)
    if callable(metric):
        return CustomMetric(metric, *args, **kwargs)
    raise PortableError(f"cannot make a metric from {type(metric).__name__}")


__all__ = ["Accuracy", "CompositeEvalMetric", "CrossEntropy", "CustomMetric", "EvalMetric",
           "Loss", "MAE", "MSE", "RMSE", "TopKAccuracy", "create"]
