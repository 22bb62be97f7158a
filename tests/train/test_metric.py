"""Metrics against direct NumPy computations."""
from __future__ import annotations

import numpy as np
import pytest

import portable as pt
from portable.errors import PortableError, ShapeError


def _batches(seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(3):
        labels = rng.integers(0, 5, size=7)
        logits = rng.normal(size=(7, 5))
        probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
        yield labels, probs


def test_accuracy_topk_and_cross_entropy_accumulate_over_batches():
    acc, top3, ce = pt.metric.Accuracy(), pt.metric.TopKAccuracy(3), pt.metric.CrossEntropy()
    labels, probs = zip(*_batches())
    for lab, prob in zip(labels, probs):
        for metric in (acc, top3, ce):
            metric.update([pt.nd.array(lab, dtype=np.int64)], [pt.nd.array(prob)])
    lab, prob = np.concatenate(labels), np.concatenate(probs)
    assert acc.get() == ("accuracy", pytest.approx(np.mean(prob.argmax(1) == lab)))
    ranks = (prob > prob[np.arange(len(lab)), lab][:, None]).sum(1)
    assert top3.get()[1] == pytest.approx(np.mean(ranks < 3))
    assert top3.get()[0] == "top_k_accuracy_3"
    assert ce.get()[1] == pytest.approx(-np.mean(np.log(prob[np.arange(len(lab)), lab])),
                                        rel=1e-5)


def test_regression_metrics():
    label = np.array([[1.0, 2.0], [3.0, 4.0]])
    pred = np.array([[1.5, 2.0], [2.0, 5.0]])
    mae, mse, rmse = pt.metric.MAE(), pt.metric.MSE(), pt.metric.RMSE()
    for metric in (mae, mse, rmse):
        metric.update(label, pred)
    assert mae.get()[1] == pytest.approx(np.mean(np.abs(label - pred)))
    assert mse.get()[1] == pytest.approx(np.mean((label - pred) ** 2))
    assert rmse.get()[1] == pytest.approx(np.sqrt(np.mean((label - pred) ** 2)))


def test_composite_reset_and_create():
    metric = pt.metric.create(["acc", "mse"])
    assert isinstance(metric, pt.metric.CompositeEvalMetric)
    metric.update([np.array([1, 0])], [np.array([1, 0])])
    names, values = metric.get()
    assert names == ["accuracy", "mse"] and values == [1.0, 0.0]
    assert metric.get_name_value() == [("accuracy", 1.0), ("mse", 0.0)]
    metric.reset()
    assert np.isnan(metric.get()[1][0])
    custom = pt.metric.create(lambda label, pred: float(np.sum(label == pred)), name="hits")
    custom.update([np.array([1, 2])], [np.array([1, 3])])
    assert custom.get() == ("hits", 1.0)


def test_bad_input_is_refused():
    with pytest.raises(ShapeError, match="2 label arrays"):
        pt.metric.Accuracy().update([np.zeros(2), np.zeros(2)], [np.zeros((2, 3))])
    with pytest.raises(ShapeError, match="predictions"):
        pt.metric.Accuracy().update(np.zeros(3), np.zeros((2, 3)))
    with pytest.raises(PortableError, match="unknown metric"):
        pt.metric.create("bleu")
