"""The Symbol executor: gradients against finite differences, grad_req, state updates, and
training on the bundled digits."""
import numpy as np
import pytest

import portable as pt
from portable import sym


def small_net():
    x = sym.var("data")
    h = sym.Convolution(x, kernel=(3, 3), num_filter=3, pad=(1, 1), name="conv")
    h = sym.BatchNorm(h, name="bn")
    h = sym.Activation(h, act_type="tanh", name="act")
    h = sym.Pooling(h, kernel=(2, 2), stride=(2, 2), pool_type="avg", name="pool")
    return sym.FullyConnected(h, num_hidden=2, name="fc")


def bind64(net, data_shape, seed=0, grad_req="write"):
    types = {n: np.float64 for n in net.list_arguments() + net.list_auxiliary_states()}
    exe = net.simple_bind(pt.cpu(), grad_req=grad_req, type_dict=types, data=data_shape)
    rng = np.random.default_rng(seed)
    for name, array in exe.arg_dict.items():
        array[:] = rng.standard_normal(array.shape)
    for name, array in exe.aux_dict.items():
        array[:] = 1.0 if name.endswith("var") else 0.0
    return exe


def test_executor_gradients_match_finite_differences():
    net = small_net()
    exe = bind64(net, (2, 1, 4, 4))
    head = np.random.default_rng(3).standard_normal((2, 2))

    def objective():
        return float(np.sum(exe.forward(is_train=True)[0].asnumpy() * head))

    exe.forward(is_train=True)
    exe.backward(pt.nd.array(head, dtype=np.float64))
    for name in net.list_arguments():
        analytic = exe.grad_dict[name].asnumpy()
        value = exe.arg_dict[name].asnumpy()
        numeric = np.zeros_like(value)
        flat = value.reshape(-1)
        for k in range(flat.size):
            old = flat[k]
            for sign in (1, -1):
                flat[k] = old + sign * 1e-6
                exe.arg_dict[name][:] = value
                numeric.reshape(-1)[k] += sign * objective() / 2e-6
            flat[k] = old
        exe.arg_dict[name][:] = value
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-6, err_msg=name)


def test_grad_req_add_accumulates_and_null_skips():
    net = sym.FullyConnected(sym.var("data"), num_hidden=2, name="fc")
    reqs = {"data": "null", "fc_weight": "add", "fc_bias": "write"}
    exe = net.simple_bind(pt.cpu(), grad_req=reqs, data=(3, 4))
    exe.arg_dict["data"][:] = np.ones((3, 4), np.float32)
    for _ in range(2):
        exe.forward(is_train=True)
        exe.backward()
    np.testing.assert_allclose(exe.grad_dict["fc_weight"].asnumpy(), np.full((2, 4), 6.0))
    np.testing.assert_allclose(exe.grad_dict["fc_bias"].asnumpy(), np.full((2,), 3.0))
    assert "data" not in exe.grad_dict


def test_training_forward_updates_batchnorm_moving_statistics():
    x = sym.var("data")
    net = sym.BatchNorm(x, momentum=0.9, name="bn")
    exe = net.simple_bind(pt.cpu(), data=(8, 3, 2, 2))
    exe.aux_dict["bn_moving_var"][:] = 1.0
    exe.arg_dict["bn_gamma"][:] = 1.0
    data = np.random.default_rng(0).standard_normal((8, 3, 2, 2)).astype(np.float32) * 2 + 1
    exe.forward(is_train=True, data=data)
    mean = data.mean(axis=(0, 2, 3))
    var = data.var(axis=(0, 2, 3))
    np.testing.assert_allclose(exe.aux_dict["bn_moving_mean"].asnumpy(), 0.1 * mean, rtol=1e-5)
    np.testing.assert_allclose(exe.aux_dict["bn_moving_var"].asnumpy(), 0.9 + 0.1 * var,
                               rtol=1e-5)
    # Inference uses the moving statistics and leaves them alone.
    before = exe.aux_dict["bn_moving_mean"].asnumpy()
    out = exe.forward(is_train=False, data=data)[0].asnumpy()
    np.testing.assert_array_equal(exe.aux_dict["bn_moving_mean"].asnumpy(), before)
    moving_var = exe.aux_dict["bn_moving_var"].asnumpy()
    expected = (data - before[None, :, None, None]) / np.sqrt(
        moving_var[None, :, None, None] + 1e-3)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_backward_without_training_forward_is_refused():
    exe = sym.relu(sym.var("x")).simple_bind(pt.cpu(), x=(2,))
    exe.forward(is_train=False)
    with pytest.raises(pt.errors.BindError, match="forward\\(is_train=True\\)"):
        exe.backward()


@pytest.mark.parametrize("model, epochs", [("mlp", 30), ("lenet", 8)])
def test_symbol_models_learn_the_digits(model, epochs):
    from portable.data.digits import load_digits_split
    from portable.models.symbolic import SYMBOLIC_MODELS
    from portable.models.symbolic_training import train_classifier

    result = train_classifier(SYMBOLIC_MODELS[model](), load_digits_split(seed=0),
                              epochs=epochs, seed=0)
    assert result["test_accuracy"] >= 0.95, result["history"][-1]
