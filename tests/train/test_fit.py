"""fit: the epoch loop, callbacks, early stopping, checkpoints, and exact in-process resume."""
from __future__ import annotations

import numpy as np
import pytest

import portable as pt
from portable.data import ArrayDataset, DataLoader
from portable.fit import Callback, EarlyStopping, evaluate, fit
from portable.gluon import Trainer
from portable.models.zoo import get_model


def _setup(seed=0, n=96):
    pt.random.seed(seed)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 1, 4, 4)).astype(np.float32)
    y = (x.reshape(n, -1).sum(1) > 0).astype(np.int64)
    train = DataLoader(ArrayDataset(x, y), batch_size=16, shuffle=True)
    net = get_model("mlp", num_classes=2, hidden=(16,))
    net.initialize(pt.init.Xavier())
    trainer = Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
    return net, trainer, train, DataLoader(ArrayDataset(x, y), batch_size=32)


class _Recorder(Callback):
    def __init__(self):
        self.events = []

    def on_train_begin(self, state):
        self.events.append("begin")

    def on_epoch_end(self, record):
        self.events.append(record["epoch"])

    def on_train_end(self, result):
        self.events.append("end")


def test_fit_records_history_calls_callbacks_and_learns():
    net, trainer, train, val = _setup()
    recorder, seen = _Recorder(), []
    result = fit(net, train, val, trainer=trainer, epochs=4, progress=False,
                 callbacks=[recorder, seen.append])
    assert recorder.events == ["begin", 1, 2, 3, 4, "end"]
    assert [r["epoch"] for r in seen] == [1, 2, 3, 4]
    history = result["history"]
    assert result["epochs"] == 4 and result["steps"] == 4 * len(train)
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert {"train_accuracy", "val_accuracy", "val_loss", "learning_rate"} <= set(history[-1])
    assert evaluate(net, val)["accuracy"] == pytest.approx(history[-1]["val_accuracy"])


def test_early_stopping_stops_when_the_monitor_stalls():
    stop = EarlyStopping("train_loss", patience=2, min_delta=1e9)  # nothing counts as better
    net, trainer, train, _ = _setup()
    result = fit(net, train, trainer=trainer, epochs=10, early_stopping=stop, progress=False)
    assert result["stopped_early"] and result["epochs"] == 3
    with pytest.raises(pt.errors.PortableError, match="monitors 'val_acc'"):
        EarlyStopping("val_acc").update({"train_loss": 1.0})


class _Crash(Callback):
    def __init__(self, at_step):
        self.at_step = at_step

    def on_batch_end(self, state):
        if state["step"] == self.at_step:
            raise KeyboardInterrupt("simulated crash")


def test_crash_mid_epoch_then_resume_gives_identical_parameters(tmp_path):
    net, trainer, train, _ = _setup(seed=5)
    fit(net, train, trainer=trainer, epochs=3, progress=False)
    expected = [p.data().asnumpy() for p in net.collect_params().values()]

    net, trainer, train, _ = _setup(seed=5)
    with pytest.raises(KeyboardInterrupt):
        fit(net, train, trainer=trainer, epochs=3, progress=False, checkpoint_dir=tmp_path,
            checkpoint_steps=4, callbacks=[_Crash(at_step=10)])
    net, trainer, train, _ = _setup(seed=99)  # a fresh process would not share this state
    result = fit(net, train, trainer=trainer, epochs=3, progress=False, checkpoint_dir=tmp_path,
                 resume=True)
    assert result["resumed_from"].endswith("ckpt-e0001-s00000008.json")
    got = [p.data().asnumpy() for p in net.collect_params().values()]
    for a, b in zip(expected, got):
        np.testing.assert_array_equal(a, b)


def test_checkpoint_every_n_epochs_and_keep(tmp_path):
    net, trainer, train, _ = _setup()
    result = fit(net, train, trainer=trainer, epochs=5, progress=False, checkpoint_dir=tmp_path,
                 checkpoint_every=2, keep_checkpoints=2)
    names = sorted(p.name for p in tmp_path.glob("*.json"))
    assert names == ["ckpt-e0004-s00000024.json", "ckpt-e0005-s00000030.json"]
    assert result["checkpoint"].endswith("ckpt-e0005-s00000030.json")
