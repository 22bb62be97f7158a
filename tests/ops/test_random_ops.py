"""The random ops' draws: statistics within bounds (a margin of several standard errors, so a
correct generator fails less than once in a million runs), and seeds (the same ``seed``
attribute gives the same values on every run; without one, ``portable.random.seed`` decides).
The op table (``cases_random.py``) checks shapes, dtypes and the certain configurations."""
from __future__ import annotations

import numpy as np
import pytest

import portable as pt
from portable.errors import PortableError
from tests.ops.harness import Case, run_ours

N = 200_000
SIGMAS = 6.0  # margin in standard errors


def _draw(op, inputs=(), **attrs):
    return run_ours(Case(op, list(inputs), attrs, grad=False))[0]


def _mean_within(values, mean, std):
    assert abs(values.mean() - mean) < SIGMAS * std / np.sqrt(values.size), values.mean()


def test_random_normal_mean_and_variance():
    x = _draw("RandomNormal", shape=[N], mean=2.0, scale=3.0).astype(np.float64)
    _mean_within(x, 2.0, 3.0)
    # the sample variance's standard error is about sigma^2 sqrt(2 / n)
    assert abs(x.var() - 9.0) < SIGMAS * 9.0 * np.sqrt(2.0 / N)


def test_random_uniform_range_mean_and_variance():
    x = _draw("RandomUniform", shape=[N], low=-1.0, high=3.0, dtype=11)
    assert x.dtype == np.float64 and x.min() >= -1.0 and x.max() < 3.0
    width = 4.0
    _mean_within(x, 1.0, width / np.sqrt(12))
    assert abs(x.var() - width ** 2 / 12) < SIGMAS * width ** 2 / np.sqrt(180 * N)


def test_like_ops_take_the_input_shape_and_dtype():
    x = np.zeros((300, 400), np.float16)
    y = _draw("RandomUniformLike", [x], low=5.0, high=6.0)
    assert y.shape == x.shape and y.dtype == np.float16
    assert 5.0 <= float(y.min()) and float(y.max()) <= 6.0
    z = _draw("RandomNormalLike", [x], dtype=1).astype(np.float64)
    assert z.dtype == np.float64 and z.shape == x.shape
    _mean_within(z, 0.0, 1.0)


def test_bernoulli_frequencies():
    p = np.tile(np.array([0.0, 0.1, 0.5, 0.9, 1.0], np.float32), (N // 5, 1))
    y = _draw("Bernoulli", [p])
    assert y.dtype == np.float32 and set(np.unique(y)) <= {0.0, 1.0}
    for column, prob in enumerate([0.0, 0.1, 0.5, 0.9, 1.0]):
        frequency = y[:, column].astype(np.float64)
        _mean_within(frequency, prob, max(np.sqrt(prob * (1 - prob)), 1e-12))


def test_bernoulli_refuses_probabilities_outside_0_1():
    with pytest.raises((PortableError, ValueError), match="probabilities"):
        _draw("Bernoulli", [np.array([0.5, 1.5], np.float32)])


def test_multinomial_counts_follow_the_softmax():
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    logits = np.log(probs * 7.0)[None].astype(np.float32)  # unnormalised on purpose
    y = _draw("Multinomial", [logits], sample_size=N, dtype=7)
    assert y.shape == (1, N) and y.dtype == np.int64
    counts = np.bincount(y[0], minlength=4)
    assert counts.sum() == N
    for count, prob in zip(counts, probs):
        assert abs(count / N - prob) < SIGMAS * np.sqrt(prob * (1 - prob) / N)


@pytest.mark.parametrize("op, inputs, attrs", [
    ("RandomNormal", [], {"shape": [50]}),
    ("RandomUniform", [], {"shape": [50]}),
    ("RandomNormalLike", [np.zeros(50, np.float32)], {}),
    ("RandomUniformLike", [np.zeros(50, np.float32)], {}),
    ("Bernoulli", [np.full(50, 0.5, np.float32)], {}),
    ("Multinomial", [np.zeros((2, 5), np.float32)], {"sample_size": 25}),
])
def test_seeds(op, inputs, attrs):
    first = _draw(op, inputs, seed=7.0, **attrs)
    assert np.array_equal(first, _draw(op, inputs, seed=7.0, **attrs)), "same seed, new values"
    assert not np.array_equal(first, _draw(op, inputs, seed=8.0, **attrs))
    pt.random.seed(3)
    unseeded = _draw(op, inputs, **attrs)
    assert not np.array_equal(unseeded, _draw(op, inputs, **attrs)), "draws repeat"
    pt.random.seed(3)
    assert np.array_equal(unseeded, _draw(op, inputs, **attrs)), "portable.random.seed ignored"


def test_random_ops_are_never_folded():
    """Two RandomUniform nodes with equal attributes are not merged, nor computed once while
    planning: each run draws anew."""
    from portable.executor.compiled import CompiledGraph
    from portable.ir import GraphBuilder

    b = GraphBuilder("two_draws")
    a = b.op("RandomUniform", shape=[64])
    c = b.op("RandomUniform", shape=[64])
    plan = CompiledGraph(b.build([a, c]), pt.cpu())
    first, second = (pt.cpu().backend.to_numpy(o).copy() for o in plan.run({}))
    assert not np.array_equal(first, second)
    again = pt.cpu().backend.to_numpy(plan.run({})[0]).copy()
    assert not np.array_equal(first, again)
