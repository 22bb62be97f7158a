"""Data and helpers shared by the rank scripts and the tests that check their results.

The rank scripts import this file by path (they run under ``mpiexec`` with the repository on
``sys.path``); the tests import it as ``tests.kvstore.mpi_scripts.common``.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

LINEAR = {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01}
PER_RANK_BATCH = 4


def linear_problem(workers: int, seed: int = 0):
    """A least-squares problem: initial weight (3, 4) and a global batch of 4 rows per worker."""
    rng = np.random.default_rng(seed)
    w0 = rng.normal(size=(3, 4)).astype(np.float32)
    x = rng.normal(size=(PER_RANK_BATCH * workers, 4)).astype(np.float32)
    t = rng.normal(size=(PER_RANK_BATCH * workers, 3)).astype(np.float32)
    return w0, x, t


def shard_rows(rank: int, workers: int, length: int) -> np.ndarray:
    return np.arange(rank, length, workers)


def compression_data(rank: int, round_: int, size: int = 1000) -> np.ndarray:
    return (0.3 * np.random.default_rng(1000 + 17 * rank + round_).normal(size=size)
            ).astype(np.float32)


def write_result(out_dir: str, rank: int, result: dict) -> None:
    path = os.path.join(out_dir, f"rank{rank}.json")
    with open(path + ".tmp", "w") as handle:
        json.dump(result, handle)
    os.replace(path + ".tmp", path)


def read_results(out_dir: str, ranks: int) -> list[dict]:
    results = []
    for rank in range(ranks):
        with open(os.path.join(out_dir, f"rank{rank}.json")) as handle:
            results.append(json.load(handle))
    return results


def repo_on_path() -> None:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    if root not in sys.path:
        sys.path.insert(0, root)


# -- an MLP on digits (the rank scripts that train one) ----------------------------------------
def digits_mlp(hidden: int):
    """Dense(hidden, relu) -> Dense(10), Xavier-initialised (from portable's seed), hybridized."""
    from portable import gluon, init

    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(hidden, activation="relu"), gluon.nn.Dense(10))
    net.initialize(init.Xavier())
    net.hybridize()
    return net


def train_digits(net, trainer, x: np.ndarray, y: np.ndarray, epochs: int, seed: int,
                 summed: int = 1, batch: int = 32) -> None:
    """``epochs`` over this rank's rows in an order seeded by ``seed`` (full batches only);
    ``summed``: how many workers' gradients a push sums (the step divides by their batch)."""
    import portable as pt
    from portable import gluon

    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    order = np.random.default_rng(seed)
    for _ in range(epochs):
        perm = order.permutation(len(x))
        for start in range(0, len(x) - batch + 1, batch):
            rows = perm[start:start + batch]
            with pt.autograd.record():
                loss = loss_fn(net(pt.nd.array(x[rows])), pt.nd.array(y[rows]))
            loss.backward()
            trainer.step(batch * summed)


def held_out_accuracy(net, split) -> float:
    """The share of the held-out digits ``net`` classifies right."""
    import portable as pt

    logits = net(pt.nd.array(split.x_test)).asnumpy()
    return float((logits.argmax(1) == split.y_test).mean())


# -- EASGD and local SGD on a quadratic (tests/kvstore/test_easgd.py) -------------------------
QUADRATIC_LR = 0.1
QUADRATIC_SHAPES = {"w": (3, 4), "b": (5,)}  # two keys: each follows its own counter


def quadratic_start() -> dict:
    """The keys' initial values (float64), the same on every rank."""
    rng = np.random.default_rng(7)
    return {k: rng.normal(size=shape) for k, shape in QUADRATIC_SHAPES.items()}


def quadratic_target(rank: int) -> dict:
    """Worker ``rank``'s minimum m: its loss is 0.5 * ||x - m||^2, its gradient x - m."""
    rng = np.random.default_rng(100 + rank)
    return {k: 3.0 * rng.normal(size=shape) for k, shape in QUADRATIC_SHAPES.items()}
