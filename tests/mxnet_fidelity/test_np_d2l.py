"""Dive into Deep Learning (MXNet edition), chapter 3: linear regression from scratch and its
concise Gluon version, run unchanged on ``mx.np``/``mx.npx`` with ``mxnet`` -> ``portable``.

The expected values are the closed form: the true ``w = [2, -3.4]`` and ``b = 4.2`` that the
synthetic data were made from; the book's training recovers them to about 1e-3 (the noise's
deviation is 0.01), so a tolerance of 0.02 fails any real error.
"""
from __future__ import annotations

import random

import numpy
import pytest

import portable as mx
from portable import autograd, gluon, init, np, npx
from portable.gluon import nn

TRUE_W, TRUE_B = [2, -3.4], 4.2
TOLERANCE = 0.02


@pytest.fixture(autouse=True)
def numpy_mode():
    npx.set_np()
    mx.random.seed(7)
    random.seed(7)
    yield
    npx.reset_np()


def synthetic_data(w, b, num_examples):
    """y = Xw + b + noise (the book's ``d2l.synthetic_data``)."""
    X = np.random.normal(0, 1, (num_examples, len(w)))
    y = np.dot(X, w) + b
    y += np.random.normal(0, 0.01, y.shape)
    return X, y.reshape((-1, 1))


def test_linear_regression_from_scratch_recovers_w_and_b():
    true_w = np.array(TRUE_W)
    features, labels = synthetic_data(true_w, TRUE_B, 1000)

    def data_iter(batch_size, features, labels):
        num_examples = len(features)
        indices = list(range(num_examples))
        random.shuffle(indices)
        for i in range(0, num_examples, batch_size):
            batch_indices = np.array(indices[i: min(i + batch_size, num_examples)])
            yield features[batch_indices], labels[batch_indices]

    w = np.random.normal(0, 0.01, (2, 1))
    b = np.zeros(1)
    w.attach_grad()
    b.attach_grad()

    def linreg(X, w, b):
        return np.dot(X, w) + b

    def squared_loss(y_hat, y):
        return (y_hat - y.reshape(y_hat.shape)) ** 2 / 2

    def sgd(params, lr, batch_size):
        for param in params:
            param[:] = param - lr * param.grad / batch_size

    lr, num_epochs, batch_size = 0.03, 3, 10
    for _ in range(num_epochs):
        for X, y in data_iter(batch_size, features, labels):
            with autograd.record():
                loss = squared_loss(linreg(X, w, b), y)
            loss.backward()
            sgd([w, b], lr, batch_size)
    train_loss = squared_loss(linreg(features, w, b), labels)

    assert isinstance(w, np.ndarray) and isinstance(w.grad, np.ndarray)
    assert train_loss.mean().shape == ()
    assert float(train_loss.mean()) < 1e-3  # the noise's variance / 2 is 5e-5
    numpy.testing.assert_allclose(w.reshape(true_w.shape).asnumpy(), TRUE_W, atol=TOLERANCE)
    numpy.testing.assert_allclose(float(b[0]), TRUE_B, atol=TOLERANCE)


def test_linear_regression_concise_recovers_w_and_b():
    true_w = np.array(TRUE_W)
    features, labels = synthetic_data(true_w, TRUE_B, 1000)

    def load_array(data_arrays, batch_size, is_train=True):
        dataset = gluon.data.ArrayDataset(*data_arrays)
        return gluon.data.DataLoader(dataset, batch_size, shuffle=is_train)

    data_iter = load_array((features, labels), 10)
    net = nn.Sequential()
    net.add(nn.Dense(1))
    net.initialize(init.Normal(sigma=0.01))
    loss = gluon.loss.L2Loss()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.03})
    for _ in range(3):
        for X, y in data_iter:
            assert isinstance(X, np.ndarray)
            with autograd.record():
                l = loss(net(X), y)  # noqa: E741 - the book's name
            l.backward()
            trainer.step(10)
    l = loss(net(features), labels)  # noqa: E741

    assert isinstance(l, np.ndarray) and l.shape == (1000,)
    assert float(l.mean()) < 1e-3
    w, b = net[0].weight.data(), net[0].bias.data()
    assert isinstance(w, np.ndarray) and isinstance(net[0].weight.grad(), np.ndarray)
    numpy.testing.assert_allclose(w.reshape(true_w.shape).asnumpy(), TRUE_W, atol=TOLERANCE)
    numpy.testing.assert_allclose(b.asnumpy(), [TRUE_B], atol=TOLERANCE)


def test_numpy_mode_is_switched_off_by_reset():
    npx.reset_np()
    assert not npx.is_np_array() and not npx.is_np_shape()
    net = nn.Dense(2)
    net.initialize()
    assert type(net(mx.nd.ones((1, 3)))) is mx.nd.NDArray
