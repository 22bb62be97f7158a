"""Train a Symbol-API classifier with plain minibatch SGD through bound executors.

This is the declarative path end to end: symbol -> executor (training plan with the gradient
graph appended) -> in-place SGD on the bound argument arrays -> a prediction executor sharing
the same arrays.

Example:
    >>> result = train_classifier(mlp(), split, epochs=2)   # doctest: +SKIP
    >>> result["test_accuracy"]                              # doctest: +SKIP
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from portable import random, symbol as sym
from portable.device import Device, cpu
from portable.initializer import Xavier


def train_classifier(logits: sym.Symbol, split: Any, epochs: int = 20, batch_size: int = 32,
                     lr: float = 0.1, seed: int = 0, device: Device | None = None,
                     on_epoch: Callable[[dict], None] | None = None) -> dict:
    """Train ``logits`` with softmax cross-entropy and SGD; returns accuracy and timings.

    Args:
        logits: a symbol with one input ``data`` producing (N, classes) scores.
        split: an object with x_train, y_train, x_test, y_test arrays.
        epochs, batch_size, lr: SGD settings (the last partial batch of an epoch is dropped).
        seed: seeds initialisation and shuffling, so a run is reproducible.
        device: where to train (default CPU).
        on_epoch: called with each epoch's record (epoch, loss, test_accuracy, seconds).

    Returns:
        ``{"test_accuracy", "train_loss", "epochs", "seconds", "history"}``.
    """
    device = device or cpu()
    random.seed(seed)
    label = sym.var("label", dtype="int64")
    loss = sym.SoftmaxCrossEntropy(logits, label, name="loss")
    sample_shape = split.x_train.shape[1:]
    trainer = loss.simple_bind(device, data=(batch_size, *sample_shape), label=(batch_size,))
    init = Xavier(magnitude=2.0)
    params = [n for n in trainer.arg_dict if n not in ("data", "label")]
    for name in params:
        init(name, trainer.arg_dict[name])
    for name, state in trainer.aux_dict.items():
        init(name, state)

    n_test = len(split.y_test)
    predict_args = {n: trainer.arg_dict[n] for n in logits.list_arguments() if n != "data"}
    from portable.ndarray import ndarray as nd

    predict_args["data"] = nd.zeros((n_test, *sample_shape), device)
    predictor = logits.bind(device, predict_args, grad_req="null", aux_states=trainer.aux_dict)

    rng = np.random.default_rng(seed)
    history = []
    start = time.perf_counter()
    n_batches = len(split.y_train) // batch_size
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(split.y_train))
        losses = []
        for b in range(n_batches):
            idx = order[b * batch_size:(b + 1) * batch_size]
            out = trainer.forward(is_train=True, data=split.x_train[idx],
                                  label=split.y_train[idx])
            trainer.backward()
            losses.append(float(out[0].asnumpy()))
            for name in params:
                weight, grad = trainer.arg_dict[name].data, trainer.grad_dict[name].data
                weight -= weight.dtype.type(lr) * grad
        scores = predictor.forward(data=split.x_test)[0].asnumpy()
        accuracy = float(np.mean(scores.argmax(axis=1) == split.y_test))
        record = {"epoch": epoch, "loss": float(np.mean(losses)), "test_accuracy": accuracy,
                  "seconds": time.perf_counter() - start}
        history.append(record)
        if on_epoch is not None:
            on_epoch(record)
    return {"test_accuracy": history[-1]["test_accuracy"], "train_loss": history[-1]["loss"],
            "epochs": epochs, "seconds": time.perf_counter() - start, "history": history}
