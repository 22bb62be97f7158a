"""Classification metrics with MXNet 1.x's definitions (``mx.metric.Accuracy``, ``TopKAccuracy``,
``F1``, ``MCC``, ``PCC``); ``portable.metric`` re-exports them.

F1 and MCC are binary: the prediction is the argmax over axis 1 of the scores, class 1 is the
positive class. ``average='macro'`` averages the per-batch scores, ``'micro'`` scores all
batches' counts together.

Example:
    >>> import numpy as np
    >>> f1 = F1(); f1.update([np.array([0, 1, 1])], [np.array([[.3, .7], [0, 1], [.4, .6]])])
    >>> round(f1.get()[1], 4)
    0.8
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from portable.errors import PortableError, ShapeError
from portable.metric_base import EvalMetric, pairs, register


@register("acc")
class Accuracy(EvalMetric):
    """Fraction of correct class predictions (``preds`` are scores unless shaped like labels).

    Args:
        axis: the class axis of the scores.
    """

    def __init__(self, axis: int = 1, name: str = "accuracy", output_names: Any = None,
                 label_names: Any = None) -> None:
        self.axis = axis
        super().__init__(name, output_names, label_names, axis=axis)

    def _batch(self, label, pred):
        if pred.shape != label.shape:
            pred = pred.argmax(axis=self.axis)
        # MXNet compares int32 class indices, flattened
        pred, label = pred.astype(np.int32).ravel(), label.astype(np.int32).ravel()
        if pred.size != label.size:
            raise ShapeError(f"metric {self.name}: {pred.size} predictions for {label.size} "
                             f"labels")
        return int((pred == label).sum()), label.size


@register("top_k_accuracy", "top_k_acc")
class TopKAccuracy(EvalMetric):
    """Fraction of instances whose label is among the ``top_k`` highest scores.

    Args:
        top_k: how many of the highest scores count (> 1; use Accuracy for 1). The name
            gets ``_<top_k>`` appended.
    """

    def __init__(self, top_k: int = 1, name: str = "top_k_accuracy", output_names: Any = None,
                 label_names: Any = None) -> None:
        if top_k <= 1:
            raise PortableError(f"TopKAccuracy needs top_k > 1 (got {top_k}); use Accuracy "
                                f"for top_k 1")
        self.top_k = int(top_k)
        super().__init__(name, output_names, label_names, top_k=top_k)
        self.name += f"_{self.top_k}"

    def _batch(self, label, pred):
        if pred.ndim > 2:
            raise ShapeError(f"metric {self.name}: predictions {list(pred.shape)} have more "
                             f"than 2 dimensions")
        # the top_k largest scores end up in the last top_k columns, in no particular order
        ranked = np.argpartition(pred.astype(np.float32), -self.top_k)
        label = label.astype(np.int32)
        if ranked.shape[0] != label.shape[0]:
            raise ShapeError(f"metric {self.name}: {ranked.shape[0]} predictions for "
                             f"{label.shape[0]} labels")
        if ranked.ndim == 1:
            return int((ranked.ravel() == label.ravel()).sum()), ranked.shape[0]
        classes = ranked.shape[1]
        hits = sum(int((ranked[:, classes - 1 - j] == label.ravel()).sum())
                   for j in range(min(classes, self.top_k)))
        return hits, ranked.shape[0]


class BinaryCounts:
    """True/false positive/negative counts of a binary classifier, local and global."""

    FIELDS = ("tp", "fp", "fn", "tn")

    def __init__(self) -> None:
        self.local = dict.fromkeys(self.FIELDS, 0)
        self.total = dict.fromkeys(self.FIELDS, 0)

    def update(self, metric: str, label: np.ndarray, pred: np.ndarray) -> None:
        label = label.astype(np.int32).ravel()
        predicted = np.argmax(pred, axis=1)
        if predicted.shape[0] != label.shape[0]:
            raise ShapeError(f"metric {metric}: {predicted.shape[0]} predictions for "
                             f"{label.shape[0]} labels")
        if len(np.unique(label)) > 2:
            raise PortableError(f"metric {metric} supports binary classification only; the "
                                f"labels hold {len(np.unique(label))} classes")
        pos, true = predicted == 1, label == 1
        counts = {"tp": int((pos & true).sum()), "fp": int((pos & ~true).sum()),
                  "fn": int((~pos & true).sum()), "tn": int((~pos & ~true).sum())}
        for key, value in counts.items():
            self.local[key] += value
            self.total[key] += value

    def reset_local(self) -> None:
        self.local = dict.fromkeys(self.FIELDS, 0)

    def reset(self) -> None:
        self.reset_local()
        self.total = dict.fromkeys(self.FIELDS, 0)

    @staticmethod
    def examples(c: dict) -> int:
        return c["tp"] + c["fp"] + c["fn"] + c["tn"]

    @staticmethod
    def fscore(c: dict) -> float:
        precision = c["tp"] / (c["tp"] + c["fp"]) if c["tp"] + c["fp"] > 0 else 0.0
        recall = c["tp"] / (c["tp"] + c["fn"]) if c["tp"] + c["fn"] > 0 else 0.0
        if precision + recall == 0:
            return 0.0
        return 2 * precision * recall / (precision + recall)

    @staticmethod
    def matthewscc(c: dict) -> float:
        if not BinaryCounts.examples(c):
            return 0.0
        tp, fp, fn, tn = (float(c[k]) for k in ("tp", "fp", "fn", "tn"))
        # zero factors of the denominator count as 1 (MXNet's convention)
        denom = 1.0
        for term in (tp + fp, tp + fn, tn + fp, tn + fn):
            denom *= term if term != 0 else 1.0
        return (tp * tn - fp * fn) / math.sqrt(denom)


class _BinaryMetric(EvalMetric):
    """F1 and MCC: a score of the binary counts, averaged per batch or over all batches."""

    def __init__(self, name: str, output_names: Any, label_names: Any, average: str) -> None:
        if average not in ("macro", "micro"):
            raise PortableError(f"metric {name}: average must be 'macro' or 'micro', got "
                                f"{average!r}")
        self.average = average
        self.counts = BinaryCounts()
        super().__init__(name, output_names, label_names)

    def _score(self, counts: dict) -> float:
        raise NotImplementedError

    def update(self, labels: Any, preds: Any) -> None:
        for label, pred in pairs(self.name, labels, preds):
            self.counts.update(self.name, label, pred)
        local, total = self.counts.local, self.counts.total
        if self.average == "macro":
            self.sum_metric += self._score(local)
            self.global_sum_metric += self._score(total)
            self.num_inst += 1
            self.global_num_inst += 1
            self.counts.reset()
        else:
            self.sum_metric = self._score(local) * BinaryCounts.examples(local)
            self.global_sum_metric = self._score(total) * BinaryCounts.examples(total)
            self.num_inst = BinaryCounts.examples(local)
            self.global_num_inst = BinaryCounts.examples(total)

    def reset(self) -> None:
        super().reset()
        if hasattr(self, "counts"):
            self.counts.reset()

    def reset_local(self) -> None:
        super().reset_local()
        self.counts.reset_local()


@register()
class F1(_BinaryMetric):
    """F1 score (harmonic mean of precision and recall) of a binary classifier.

    Args:
        average: ``macro`` (mean of per-batch scores) or ``micro`` (one score of all counts).
    """

    def __init__(self, name: str = "f1", output_names: Any = None, label_names: Any = None,
                 average: str = "macro") -> None:
        super().__init__(name, output_names, label_names, average)

    def _score(self, counts):
        return BinaryCounts.fscore(counts)


@register()
class MCC(_BinaryMetric):
    """Matthews correlation coefficient of a binary classifier.

    Args:
        average: ``macro`` (mean of per-batch scores) or ``micro`` (one score of all counts).
    """

    def __init__(self, name: str = "mcc", output_names: Any = None, label_names: Any = None,
                 average: str = "macro") -> None:
        super().__init__(name, output_names, label_names, average)

    def _score(self, counts):
        return BinaryCounts.matthewscc(counts)


@register()
class PCC(EvalMetric):
    """Multiclass Matthews correlation from a confusion matrix that grows with the labels."""

    def __init__(self, name: str = "pcc", output_names: Any = None, label_names: Any = None,
                 has_global_stats: bool = True) -> None:
        self.k = 2
        self.local_matrix = np.zeros((2, 2))
        self.global_matrix = np.zeros((2, 2))
        super().__init__(name, output_names, label_names, has_global_stats=has_global_stats)

    def reset(self) -> None:
        super().reset()
        self.global_matrix = np.zeros((self.k, self.k))
        self.local_matrix = np.zeros((self.k, self.k))

    def reset_local(self) -> None:
        super().reset_local()
        self.local_matrix = np.zeros((self.k, self.k))

    def update(self, labels: Any, preds: Any) -> None:
        for label, pred in pairs(self.name, labels, preds):
            label = label.astype(np.int32)
            pred = pred.argmax(axis=1) if pred.shape != label.shape else pred.astype(np.int32)
            grow = int(max(pred.max(), label.max())) + 1 - self.k
            if grow > 0:
                widths = ((0, grow), (0, grow))
                self.local_matrix = np.pad(self.local_matrix, widths)
                self.global_matrix = np.pad(self.global_matrix, widths)
                self.k += grow
            batch = np.zeros((self.k, self.k))
            np.add.at(batch, (pred.ravel(), label.ravel()), 1)
            self.local_matrix += batch
            self.global_matrix += batch
        self.num_inst += 1
        self.global_num_inst += 1
        self.sum_metric = _confusion_mcc(self.local_matrix) * self.num_inst
        self.global_sum_metric = _confusion_mcc(self.global_matrix) * self.global_num_inst


def _confusion_mcc(matrix: np.ndarray) -> float:
    n = matrix.sum()
    x, y = matrix.sum(axis=1), matrix.sum(axis=0)
    cov_xx, cov_yy = np.sum(x * (n - x)), np.sum(y * (n - y))
    if cov_xx == 0 or cov_yy == 0:
        return float("nan")
    cov_xy = np.sum(matrix.diagonal() * n - x * y)
    return float(cov_xy / (cov_xx * cov_yy) ** 0.5)


__all__ = ["Accuracy", "BinaryCounts", "F1", "MCC", "PCC", "TopKAccuracy"]
