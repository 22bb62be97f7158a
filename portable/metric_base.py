"""The metric base class (``mx.metric.EvalMetric``) and the name registry that
``portable.metric.create`` reads; the metrics themselves live in ``metrics_classification``,
``metrics_regression`` and ``metric``.

A metric accumulates ``sum_metric`` over ``num_inst`` instances twice: locally (``reset_local``
clears it, as MXNet's Module does after each log line) and globally (``reset`` clears both).

Example:
    >>> class Hits(EvalMetric):
    ...     def _batch(self, label, pred):
    ...         return float((label == pred).sum()), label.size
    >>> m = Hits("hits"); m.update([np.array([1, 2])], [np.array([1, 3])]); m.get()
    ('hits', 0.5)
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from portable.errors import ShapeError

# lower-case name or alias -> metric class (filled by the ``register`` decorator)
METRICS: dict[str, Callable[..., "EvalMetric"]] = {}


def register(*aliases: str) -> Callable[[type], type]:
    """Class decorator: make a metric creatable by its lower-cased class name and ``aliases``."""
    def wrap(cls: type) -> type:
        for name in (cls.__name__, *aliases):
            METRICS[name.lower()] = cls
        return cls
    return wrap


def host(value: Any) -> np.ndarray:
    """A NumPy copy of an NDArray (waits for the ops producing it) or array-like."""
    if hasattr(value, "asnumpy"):
        return value.asnumpy()
    return np.asarray(value)


def as_list(value: Any) -> list:
    """``value`` itself when it is a list or tuple, else a one-item list (MXNet's ``wrap``)."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


def pairs(metric: str, labels: Any, preds: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """(label, prediction) NumPy pairs of one update; the two lists must be equally long."""
    labels, preds = as_list(labels), as_list(preds)
    if len(labels) != len(preds):
        raise ShapeError(f"metric {metric}: {len(labels)} label arrays but {len(preds)} "
                         f"prediction arrays")
    return [(host(label), host(pred)) for label, pred in zip(labels, preds)]


class EvalMetric:
    """Base class: ``get()`` is ``sum_metric / num_inst`` (NaN before any update).

    Subclasses either implement ``_batch(label, pred) -> (sum, count)`` for one array pair, or
    override ``update``.

    Args:
        name: the metric's name in ``get()``.
        output_names, label_names: the keys ``update_dict`` takes (all, in order, by default).
    """

    def __init__(self, name: str, output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None, **kwargs: Any) -> None:
        self.name = str(name)
        self.output_names = output_names
        self.label_names = label_names
        self._has_global_stats = kwargs.pop("has_global_stats", True)
        self._kwargs = kwargs
        self.reset()

    def reset(self) -> None:
        """Forget everything accumulated, local and global."""
        self.num_inst = 0
        self.sum_metric = 0.0
        self.global_num_inst = 0
        self.global_sum_metric = 0.0

    def reset_local(self) -> None:
        """Forget the local accumulation only (``get_global`` keeps counting)."""
        self.num_inst = 0
        self.sum_metric = 0.0

    def _add(self, total: float, count: int | float) -> None:
        self.sum_metric += total
        self.global_sum_metric += total
        self.num_inst += count
        self.global_num_inst += count

    def update(self, labels: Any, preds: Any) -> None:
        """Accumulate a batch: ``labels`` and ``preds`` are arrays or lists of arrays."""
        for label, pred in pairs(self.name, labels, preds):
            self._add(*self._batch(label, pred))

    def update_dict(self, label: dict, pred: dict) -> None:
        """Update from name -> array dicts, picking ``output_names``/``label_names``."""
        preds = [pred[n] for n in self.output_names] if self.output_names is not None \
            else list(pred.values())
        labels = [label[n] for n in self.label_names] if self.label_names is not None \
            else list(label.values())
        self.update(labels, preds)

    def _batch(self, label: np.ndarray, pred: np.ndarray) -> tuple[float, int]:
        """(sum of the per-instance metric, number of instances) of one array pair."""
        raise NotImplementedError(f"{type(self).__name__} defines neither update nor _batch")

    def _value(self, total: float, count: float) -> float:
        return total / count

    def get(self) -> tuple[Any, Any]:
        """``(name, value)``; the value is NaN before any update."""
        if self.num_inst == 0:
            return self.name, float("nan")
        return self.name, self._value(self.sum_metric, self.num_inst)

    def get_global(self) -> tuple[Any, Any]:
        """``(name, value)`` over everything since the last ``reset``."""
        if not self._has_global_stats:
            return self.get()
        if self.global_num_inst == 0:
            return self.name, float("nan")
        return self.name, self._value(self.global_sum_metric, self.global_num_inst)

    def get_name_value(self) -> list[tuple[str, float]]:
        """``[(name, value), ...]`` (one pair for simple metrics)."""
        return _zip_pairs(*self.get())

    def get_global_name_value(self) -> list[tuple[str, float]]:
        return _zip_pairs(*self.get_global())

    def get_config(self) -> dict:
        """The arguments that ``portable.metric.create(**config)`` rebuilds this metric from."""
        config = dict(self._kwargs)
        config.update({"metric": type(self).__name__, "name": self.name,
                       "output_names": self.output_names, "label_names": self.label_names})
        return config

    def __str__(self) -> str:
        return f"EvalMetric: {dict(self.get_name_value())}"


def _zip_pairs(name: Any, value: Any) -> list[tuple[str, float]]:
    names = name if isinstance(name, list) else [name]
    values = value if isinstance(value, list) else [value]
    return list(zip(names, values))
