"""gluon.Trainer: updates against NumPy closed forms, several devices through the local store,
update on the store, and optimizer-state files."""
from __future__ import annotations

import numpy as np
import pytest

import portable as pt
from portable.errors import PortableError, SerializationError
from portable.gluon import Parameter, Trainer


def _problem(seed=0, n=8):
    rng = np.random.default_rng(seed)
    w0 = rng.normal(size=(3, 4)).astype(np.float32)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    t = rng.normal(size=(n, 3)).astype(np.float32)
    return w0, x, t


def _grad(w, x, t):
    """d/dw of sum over the batch of 0.5 * ||x w^T - t||^2, in float64."""
    return (x.astype(np.float64) @ w.T - t).T @ x


def _param(w0, devices=None):
    p = Parameter("w", shape=w0.shape)
    p.initialize(pt.init.Zero(), device=devices)
    p.set_data(w0)
    return p


def _loss(w, x, t):
    diff = pt.nd.dot(x, w.T) - t
    return (diff * diff).sum() * 0.5


def _train(trainer, param, x, t, steps, devices=None):
    devices = devices or [None]
    for _ in range(steps):
        xs, ts = np.array_split(x, len(devices)), np.array_split(t, len(devices))
        with pt.autograd.record():
            losses = [_loss(param.data(d), pt.nd.array(xi, device=d), pt.nd.array(ti, device=d))
                      for d, xi, ti in zip(devices, xs, ts)]
        for loss in losses:
            loss.backward()
        trainer.step(len(x))


def test_sgd_momentum_step_matches_numpy():
    w0, x, t = _problem()
    param = _param(w0)
    trainer = Trainer([param], "sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01})
    _train(trainer, param, x, t, 4)
    w, mom = w0.astype(np.float64), np.zeros_like(w0, np.float64)
    for _ in range(4):
        g = _grad(w, x, t) / len(x) + 0.01 * w
        mom = 0.9 * mom - 0.1 * g
        w = w + mom
    np.testing.assert_allclose(param.data().asnumpy(), w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("update_on_kvstore", [False, True])
def test_two_devices_equal_one_device_on_the_whole_batch(update_on_kvstore):
    w0, x, t = _problem(1)
    single = _param(w0)
    single_trainer = Trainer([single], "adam", {"learning_rate": 0.05})
    _train(single_trainer, single, x, t, 3)

    devices = [pt.cpu(0), pt.cpu(1)]
    multi = _param(w0, devices)
    trainer = Trainer([multi], "adam", {"learning_rate": 0.05},
                      update_on_kvstore=update_on_kvstore)
    _train(trainer, multi, x, t, 3, devices)
    assert trainer.update_on_kvstore is update_on_kvstore
    copies = [d.asnumpy() for d in multi.list_data()]
    np.testing.assert_array_equal(copies[0], copies[1])
    np.testing.assert_allclose(copies[0], single.data().asnumpy(), rtol=1e-5, atol=1e-6)
    assert trainer.optimizer.num_update == 3  # one counted step per parameter and step


def test_allreduce_then_update_equals_step():
    w0, x, t = _problem(2)
    a, b = _param(w0), _param(w0)
    ta = Trainer([a], "rmsprop", {"learning_rate": 0.01})
    tb = Trainer([b], "rmsprop", {"learning_rate": 0.01})
    _train(ta, a, x, t, 2)
    for _ in range(2):
        with pt.autograd.record():
            loss = _loss(b.data(), pt.nd.array(x), pt.nd.array(t))
        loss.backward()
        tb.allreduce_grads()
        tb.update(len(x))
    np.testing.assert_array_equal(a.data().asnumpy(), b.data().asnumpy())


@pytest.mark.parametrize("on_store", [False, True])
def test_save_and_load_states_continue_exactly(tmp_path, on_store):
    w0, x, t = _problem(3)
    ref = _param(w0)
    ref_trainer = Trainer([ref], "adam", {"learning_rate": 0.02})
    _train(ref_trainer, ref, x, t, 5)

    p = _param(w0)
    trainer = Trainer([p], "adam", {"learning_rate": 0.02}, update_on_kvstore=on_store)
    _train(trainer, p, x, t, 3)
    trainer.save_states(tmp_path / "opt.states")
    saved_w = p.data().asnumpy()

    q = _param(saved_w)
    # the optimizer is rebuilt from the saved configuration
    resumed = Trainer([q], "sgd", {"learning_rate": 99.0}, update_on_kvstore=on_store)
    if on_store:
        resumed._init_kvstore()
    resumed.load_states(tmp_path / "opt.states")
    _train(resumed, q, x, t, 2)
    assert type(resumed.optimizer).__name__ == "Adam"
    np.testing.assert_array_equal(q.data().asnumpy(), ref.data().asnumpy())

    (tmp_path / "bad.states").write_bytes((tmp_path / "opt.states").read_bytes()[:50])
    with pytest.raises(SerializationError, match="bad.states"):
        Trainer([q], "adam").load_states(tmp_path / "bad.states")


def test_learning_rate_and_null_grad_parameters_are_skipped():
    w0, x, t = _problem(4)
    p = _param(w0)
    frozen = Parameter("frozen", shape=(2,), grad_req="null")
    frozen.initialize(pt.init.One())
    trainer = Trainer({"w": p, "frozen": frozen}, "sgd", {"learning_rate": 0.5})
    assert trainer.learning_rate == 0.5
    trainer.set_learning_rate(0.25)
    assert trainer.learning_rate == 0.25
    _train(trainer, p, x, t, 1)
    assert frozen.data().asnumpy().tolist() == [1.0, 1.0]


def test_errors():
    w0, _, _ = _problem()
    p = _param(w0)
    trainer = Trainer([p], "sgd", update_on_kvstore=True)
    with pytest.raises(PortableError, match="allreduce_grads"):
        trainer.allreduce_grads()
    with pytest.raises(PortableError, match="not a Parameter"):
        Trainer([np.zeros(2)], "sgd")
    with pytest.raises(PortableError, match="unknown optimizer"):
        Trainer([p], "sgdd")
