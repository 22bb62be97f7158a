"""One network, three ways: imperative (autograd), hybridized (CachedOp) and through the Symbol
executor give the same outputs and gradients, and all agree with central finite differences
(float64 networks, so the differences are accurate to ~1e-8)."""
import numpy as np
import pytest

import portable as pt
from portable import autograd
from portable.gluon import nn

SEED = 7


def mlp():
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Dense(6, activation="tanh"), nn.BatchNorm(), nn.Dropout(0.3), nn.Dense(3))
    return net


def convnet():
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Conv2D(3, kernel_size=3, padding=1, activation="relu"),
                nn.MaxPool2D(pool_size=2), nn.Dense(4))
    return net


CASES = {"mlp": (mlp, (5, 4)), "convnet": (convnet, (2, 2, 6, 6))}


def _setup(kind):
    build, shape = CASES[kind]
    rng = np.random.default_rng(0)
    net = build()
    net.cast("float64")
    pt.random.seed(1)
    net.initialize(pt.init.Xavier())
    x = rng.standard_normal(shape)
    net(pt.nd.array(x, dtype="float64"))  # finish deferred initialisation
    params = {name: p.data().asnumpy() for name, p in net.collect_params().items()}
    head = rng.standard_normal(net(pt.nd.array(x, dtype="float64")).shape)
    return net, x, params, head


def _restore(net, params):
    for name, p in net.collect_params().items():
        p.set_data(params[name])


def _gluon_run(net, x, head, training, hybridize):
    """Outputs, parameter gradients and the input gradient through autograd."""
    net.hybridize(hybridize)
    data = pt.nd.array(x, dtype="float64")
    data.attach_grad()
    pt.random.seed(SEED)  # the same Dropout mask in every run
    with autograd.record(train_mode=training):
        out = net(data)
        loss = (out * pt.nd.array(head, dtype="float64")).sum()
    loss.backward()
    grads = {n: p.grad().asnumpy() for n, p in net.collect_params().items()
             if p.grad_req != "null"}
    states = {n: p.data().asnumpy() for n, p in net.collect_params().items()
              if p.grad_req == "null"}
    return out.asnumpy(), grads, data.grad.asnumpy(), states


def _executor_run(net, x, head, training):
    symbol = net(pt.sym.var("data"))
    params = net.collect_params()
    aux_names = symbol.list_auxiliary_states()
    args = {"data": pt.nd.array(x, dtype="float64")}
    args.update({n: params[n].data() for n in symbol.list_arguments() if n != "data"})
    aux = {n: params[n].data() for n in aux_names}
    exe = symbol.bind(pt.cpu(), args=args, grad_req="write", aux_states=aux)
    pt.random.seed(SEED)
    out = exe.forward(is_train=training)[0].asnumpy()
    states = {n: a.asnumpy() for n, a in aux.items()}
    if not training:  # an executor differentiates only in training mode (as MXNet's)
        return out, None, None, states
    exe.backward(pt.nd.array(head, dtype="float64"))
    grads = {n: exe.grad_dict[n].asnumpy() for n in args if n != "data"}
    return out, grads, exe.grad_dict["data"].asnumpy(), states


def _loss_at(net, x, head, training):
    pt.random.seed(SEED)
    with autograd.train_mode() if training else autograd.predict_mode():
        out = net(pt.nd.array(x, dtype="float64")).asnumpy()
    return float((out * head).sum())


def _finite_differences(net, x, head, training, params, eps=1e-6):
    net.hybridize(False)
    grads = {}
    for name, p in net.collect_params().items():
        if p.grad_req == "null":
            continue
        value = params[name]
        grad = np.zeros_like(value)
        for index in np.ndindex(value.shape):
            for sign in (1, -1):
                bumped = value.copy()
                bumped[index] += sign * eps
                p.set_data(bumped)
                grad[index] += sign * _loss_at(net, x, head, training) / (2 * eps)
        p.set_data(value)
        grads[name] = grad
    data_grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        for sign in (1, -1):
            bumped = x.copy()
            bumped[index] += sign * eps
            data_grad[index] += sign * _loss_at(net, bumped, head, training) / (2 * eps)
    return grads, data_grad


@pytest.mark.parametrize("training", [True, False], ids=["train", "predict"])
@pytest.mark.parametrize("kind", sorted(CASES))
def test_imperative_hybridized_and_executor_agree_with_finite_differences(kind, training):
    net, x, params, head = _setup(kind)
    results = {}
    for mode in ("imperative", "hybridized", "executor"):
        _restore(net, params)
        if mode == "executor":
            results[mode] = _executor_run(net, x, head, training)
        else:
            results[mode] = _gluon_run(net, x, head, training, mode == "hybridized")
    reference = results["imperative"]
    for mode in ("hybridized", "executor"):
        out, grads, data_grad, states = results[mode]
        np.testing.assert_allclose(out, reference[0], rtol=1e-10, atol=1e-12, err_msg=mode)
        for name in states:  # running statistics updated alike (training) or untouched
            np.testing.assert_allclose(states[name], reference[3][name], rtol=1e-12,
                                       err_msg=f"{mode}: {name}")
        if grads is None:
            continue
        assert grads.keys() == reference[1].keys()
        for name in grads:
            np.testing.assert_allclose(grads[name], reference[1][name], rtol=1e-9, atol=1e-12,
                                       err_msg=f"{mode}: {name}")
        np.testing.assert_allclose(data_grad, reference[2], rtol=1e-9, atol=1e-12)
    _restore(net, params)
    fd_grads, fd_data = _finite_differences(net, x, head, training, params)
    for name, grad in fd_grads.items():
        np.testing.assert_allclose(reference[1][name], grad, rtol=1e-5, atol=1e-7,
                                   err_msg=f"finite differences: {name}")
    np.testing.assert_allclose(reference[2], fd_data, rtol=1e-5, atol=1e-7)
