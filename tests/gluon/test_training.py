"""An imperative LeNet-style network trained with autograd on the digits data reaches >= 97%
test accuracy, imperatively and hybridized (plain SGD written here; ~10 s per run)."""
import contextlib

import numpy as np
import pytest

import portable as pt
from portable import autograd, gluon
from portable.gluon import nn

EPOCHS, BATCH, LR = 6, 32, 0.5


def lenet():
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Conv2D(16, kernel_size=3, padding=1, activation="relu"), nn.MaxPool2D(2),
                nn.Conv2D(32, kernel_size=3, padding=1, activation="relu"), nn.MaxPool2D(2),
                nn.Dense(64, activation="relu"), nn.Dense(10))
    return net


def _one_blas_thread():
    # Small GEMMs gain nothing from a second BLAS thread, and on a busy CI machine the
    # threads' spinning costs a lot; the figures of benchmarks/hybridize.py cover threads.
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(1)


def train(hybridize: bool) -> float:
    from portable.data.digits import load_digits_split

    split = load_digits_split(seed=0)  # standardised with the training mean and std
    pt.random.seed(0)
    net = lenet()
    net.initialize(pt.init.Xavier(magnitude=2.0))
    net.hybridize(hybridize)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]
    rng = np.random.default_rng(0)
    count = len(split.y_train)
    for _ in range(EPOCHS):
        order = rng.permutation(count)
        for start in range(0, count - BATCH + 1, BATCH):
            index = order[start:start + BATCH]
            x, y = pt.nd.array(split.x_train[index]), pt.nd.array(split.y_train[index])
            with autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            for p in params:  # SGD on the mean loss: the summed gradient scaled by 1/batch
                p.data()[:] = p.data() - (LR / BATCH) * p.grad()
    scores = net(pt.nd.array(split.x_test)).asnumpy()
    return float(np.mean(scores.argmax(axis=1) == split.y_test))


@pytest.mark.parametrize("hybridize", [False, True], ids=["imperative", "hybridized"])
def test_lenet_reaches_97_percent_on_digits(hybridize):
    pytest.importorskip("sklearn", reason="the digits data comes with scikit-learn")
    with _one_blas_thread():
        accuracy = train(hybridize)
    assert accuracy >= 0.97, f"test accuracy {accuracy:.3f}"
