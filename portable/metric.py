"""Evaluation metrics with MXNet 1.x names (``mx.metric``): ``update(labels, preds)``,
``get()``, ``reset()``, ``get_name_value()``, ``create(name)``.

Labels and predictions may be NDArrays, NumPy arrays or lists of them (one per device or
output); NDArrays are read on the host, which waits for the ops that produce them. The
classification and regression metrics live in ``metrics_classification`` and
``metrics_regression``; this module holds the composite, loss and custom metrics and
``create``, and re-exports every metric under ``portable.metric``.

Example:
    >>> import numpy
    >>> acc = create("acc")
    >>> acc.update([numpy.array([0, 1])], [numpy.array([[0.9, 0.1], [0.3, 0.7]])])
    >>> acc.get()
    ('accuracy', 1.0)
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from portable.errors import PortableError
from portable.metric_base import METRICS, EvalMetric, as_list, host, pairs, register
from portable.metrics_classification import F1, MCC, PCC, Accuracy, TopKAccuracy
from portable.metrics_regression import (MAE, MSE, RMSE, CrossEntropy, NegativeLogLikelihood,
                                         PearsonCorrelation, Perplexity)


@register("composite")
class CompositeEvalMetric(EvalMetric):
    """Several metrics updated together; ``get()`` returns lists of names and values.

    Args:
        metrics: metrics or anything ``create`` accepts.
    """

    def __init__(self, metrics: Sequence[Any] | None = None, name: str = "composite",
                 output_names: Any = None, label_names: Any = None) -> None:
        super().__init__(name, output_names, label_names)
        self.metrics = [create(m) for m in (metrics or [])]

    def add(self, metric: Any) -> None:
        """Add a child metric (anything ``create`` accepts)."""
        self.metrics.append(create(metric))

    def get_metric(self, index: int) -> EvalMetric:
        if not -len(self.metrics) <= index < len(self.metrics):
            raise PortableError(f"metric index {index} is out of range: the composite holds "
                                f"{len(self.metrics)} metrics")
        return self.metrics[index]

    def update_dict(self, labels: dict, preds: dict) -> None:
        if self.label_names is not None:
            labels = {k: v for k, v in labels.items() if k in self.label_names}
        if self.output_names is not None:
            preds = {k: v for k, v in preds.items() if k in self.output_names}
        for metric in self.metrics:
            metric.update_dict(labels, preds)

    def update(self, labels: Any, preds: Any) -> None:
        for metric in self.metrics:
            metric.update(labels, preds)

    def reset(self) -> None:
        for metric in getattr(self, "metrics", []):
            metric.reset()

    def reset_local(self) -> None:
        for metric in self.metrics:
            metric.reset_local()

    def _gather(self, method: str) -> tuple[list, list]:
        names, values = [], []
        for metric in self.metrics:
            name, value = getattr(metric, method)()
            names.extend(name if isinstance(name, list) else [name])
            values.extend(value if isinstance(value, list) else [value])
        return names, values

    def get(self) -> tuple[list, list]:
        return self._gather("get")

    def get_global(self) -> tuple[list, list]:
        return self._gather("get_global")

    def get_config(self) -> dict:
        config = super().get_config()
        config["metrics"] = [m.get_config() for m in self.metrics]
        return config


@register()
class Loss(EvalMetric):
    """Mean of a loss already computed per element (``preds`` are loss values; labels are
    ignored)."""

    def __init__(self, name: str = "loss", output_names: Any = None,
                 label_names: Any = None) -> None:
        super().__init__(name, output_names, label_names)

    def update(self, _: Any, preds: Any) -> None:
        for pred in as_list(preds):
            values = host(pred)
            self._add(float(values.sum()), int(values.size))


@register()
class Torch(Loss):
    """Loss under the name ``torch`` (MXNet's dummy metric for Torch criterions)."""

    def __init__(self, name: str = "torch", output_names: Any = None,
                 label_names: Any = None) -> None:
        super().__init__(name, output_names, label_names)


@register()
class Caffe(Loss):
    """Loss under the name ``caffe`` (MXNet's dummy metric for Caffe criterions)."""

    def __init__(self, name: str = "caffe", output_names: Any = None,
                 label_names: Any = None) -> None:
        super().__init__(name, output_names, label_names)


@register()
class CustomMetric(EvalMetric):
    """A metric from ``feval(label, pred)`` on NumPy arrays, returning either a value (one
    instance) or ``(sum_metric, num_inst)``.

    Args:
        feval: the function; a lambda's metric is named ``custom(<lambda>)``.
        allow_extra_outputs: allow more prediction arrays than labels (RNN states).
    """

    def __init__(self, feval: Callable[[Any, Any], Any], name: str | None = None,
                 allow_extra_outputs: bool = False, output_names: Any = None,
                 label_names: Any = None) -> None:
        if name is None:
            name = feval.__name__
            if "<" in name:
                name = f"custom({name})"
        self._feval = feval
        self._allow_extra_outputs = allow_extra_outputs
        super().__init__(name, output_names, label_names, feval=feval,
                         allow_extra_outputs=allow_extra_outputs)

    def update(self, labels: Any, preds: Any) -> None:
        if self._allow_extra_outputs:
            # extra prediction arrays (RNN states) are dropped by zip
            found = [(host(l), host(p)) for l, p in zip(as_list(labels), as_list(preds))]
        else:
            found = pairs(self.name, labels, preds)
        for label, pred in found:
            value = self._feval(label, pred)
            if isinstance(value, tuple):
                self._add(value[0], value[1])
            else:
                self._add(value, 1)

    def get_config(self) -> dict:
        raise PortableError(f"CustomMetric {self.name!r} cannot be serialized: it holds a "
                            f"Python function")


def np(numpy_feval: Callable[[Any, Any], Any], name: str | None = None,
       allow_extra_outputs: bool = False) -> CustomMetric:
    """A CustomMetric from a function of NumPy label and prediction arrays (``mx.metric.np``).

    Example:
        >>> m = np(lambda label, pred: float(abs(label - pred).mean()), name="l1")
    """
    def feval(label, pred):
        return numpy_feval(label, pred)
    feval.__name__ = numpy_feval.__name__
    return CustomMetric(feval, name, allow_extra_outputs)


def create(metric: Any, *args: Any, **kwargs: Any) -> EvalMetric:
    """A metric from a name (``acc``, ``top_k_accuracy``, ``f1``, ``mcc``, ``perplexity``,
    ``ce``, ``nll_loss``, ``pearsonr``, ``mae``, ``mse``, ``rmse``, ``loss`` ... or a class
    name), a callable ``feval(label, pred)``, an EvalMetric, or a list (composite).

    Example:
        >>> create(["acc", "ce"]).get()[0]
        ['accuracy', 'cross-entropy']
    """
    if isinstance(metric, EvalMetric):
        return metric
    if callable(metric) and not isinstance(metric, type):
        return CustomMetric(metric, *args, **kwargs)
    if isinstance(metric, list):
        composite = CompositeEvalMetric()
        for child in metric:
            composite.add(create(child, *args, **kwargs))
        return composite
    if isinstance(metric, type) and issubclass(metric, EvalMetric):
        return metric(*args, **kwargs)
    if isinstance(metric, str):
        factory = METRICS.get(metric.lower())
        if factory is None:
            raise PortableError(f"unknown metric {metric!r}; known: {', '.join(sorted(METRICS))}")
        return factory(*args, **kwargs)
    raise PortableError(f"cannot make a metric from {type(metric).__name__}")


__all__ = ["Accuracy", "Caffe", "CompositeEvalMetric", "CrossEntropy", "CustomMetric",
           "EvalMetric", "F1", "Loss", "MAE", "MCC", "MSE", "NegativeLogLikelihood", "PCC",
           "PearsonCorrelation", "Perplexity", "RMSE", "TopKAccuracy", "Torch", "create", "np"]
