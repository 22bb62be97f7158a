"""autograd: closed forms, accumulation, higher order, modes, and agreement with the symbolic
executor and finite differences."""
import numpy as np
import pytest

import portable as pt
from portable import autograd, nd, sym


def test_gradient_of_a_broadcast_expression_matches_the_closed_form():
    a = np.random.default_rng(0).standard_normal((3, 4))
    b = np.random.default_rng(1).standard_normal((4,))
    x, y = nd.array(a, dtype=np.float64), nd.array(b, dtype=np.float64)
    x.attach_grad()
    y.attach_grad()
    with autograd.record():
        z = (x * y + x.exp()).sum()
    z.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), np.broadcast_to(b, a.shape) + np.exp(a))
    np.testing.assert_allclose(y.grad.asnumpy(), a.sum(axis=0))


def test_grad_req_add_accumulates_across_backward_calls():
    x = nd.array([1.0, 2.0])
    x.attach_grad(grad_req="add")
    for _ in range(3):
        with autograd.record():
            y = (x * x).sum()
        y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), [6.0, 12.0])


def test_head_gradients_and_autograd_grad():
    x = nd.array([1.0, -2.0, 3.0])
    x.attach_grad()
    with autograd.record():
        y = x * 3
    (gx,) = autograd.grad(y, [x], head_grads=nd.array([1.0, 10.0, 100.0]))
    np.testing.assert_allclose(gx.asnumpy(), [3.0, 30.0, 300.0])
    np.testing.assert_array_equal(x.grad.asnumpy(), [0.0, 0.0, 0.0])  # grad() does not store


def test_second_order_gradient_with_create_graph():
    x = nd.array([1.5, -2.0], dtype=np.float64)
    x.attach_grad()
    with autograd.record():
        y = (x * x * x).sum()
        (dx,) = autograd.grad(y, [x], create_graph=True)
        z = dx.sum()
    z.backward()
    np.testing.assert_allclose(dx.asnumpy(), 3 * np.array([1.5, -2.0]) ** 2)
    np.testing.assert_allclose(x.grad.asnumpy(), 6 * np.array([1.5, -2.0]))


def test_recording_and_training_flags():
    assert not autograd.is_recording() and not autograd.is_training()
    with autograd.record():
        assert autograd.is_recording() and autograd.is_training()
        with autograd.pause():
            assert not autograd.is_recording() and not autograd.is_training()
        with autograd.predict_mode():
            assert autograd.is_recording() and not autograd.is_training()
    with autograd.train_mode():
        assert autograd.is_training() and not autograd.is_recording()


def test_dropout_is_identity_outside_training_and_masks_inside():
    x = nd.ones((100,))
    np.testing.assert_array_equal(nd.dropout(x, np.float32(0.5)).asnumpy(), np.ones(100))
    pt.random.seed(0)
    with autograd.train_mode():
        y = nd.dropout(x, np.float32(0.5)).asnumpy()
    assert set(np.unique(y)) <= {0.0, 2.0} and 20 < (y == 0).sum() < 80


def test_paused_ops_are_not_differentiated():
    x = nd.array([2.0])
    x.attach_grad()
    with autograd.record():
        y = x * x
        with autograd.pause():
            c = x * 10  # a constant as far as the tape knows
        z = y + c
    z.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), [4.0])


def test_backward_without_recording_is_refused():
    x = nd.array([1.0])
    with pytest.raises(pt.errors.PortableError, match="attach_grad"):
        (x * 2).backward()


def _mlp_symbol():
    h = sym.FullyConnected(sym.var("data"), num_hidden=5, name="fc1")
    h = sym.Activation(h, act_type="tanh")
    return sym.FullyConnected(h, num_hidden=3, name="fc2")


def test_imperative_and_symbolic_gradients_agree_with_finite_differences():
    rng = np.random.default_rng(0)
    net = _mlp_symbol()
    shapes = dict(zip(net.list_arguments(), net.infer_shape(data=(4, 6))[0]))
    values = {n: rng.standard_normal(s) for n, s in shapes.items()}
    head = rng.standard_normal((4, 3))

    exe = net.bind(pt.cpu(), {n: nd.array(v, dtype=np.float64) for n, v in values.items()})
    exe.forward(is_train=True)
    exe.backward(nd.array(head, dtype=np.float64))
    symbolic = {n: exe.grad_dict[n].asnumpy() for n in values}

    params = {n: nd.array(v, dtype=np.float64) for n, v in values.items()}
    for p in params.values():
        p.attach_grad()

    def forward(p):
        h = nd.gemm(nd.flatten(p["data"], axis=1), p["fc1_weight"], p["fc1_bias"], transB=1)
        return nd.gemm(nd.tanh(h), p["fc2_weight"], p["fc2_bias"], transB=1)

    with autograd.record():
        out = forward(params)
    out.backward(nd.array(head, dtype=np.float64))
    for name, value in values.items():
        np.testing.assert_allclose(params[name].grad.asnumpy(), symbolic[name], rtol=1e-10,
                                   err_msg=name)
        numeric = np.zeros_like(value)
        for k in range(value.size):
            for sign in (1, -1):
                shifted = {n: v.copy() for n, v in values.items()}
                shifted[name].reshape(-1)[k] += sign * 1e-6
                arrays = {n: nd.array(v, dtype=np.float64) for n, v in shifted.items()}
                numeric.reshape(-1)[k] += sign * float(
                    (forward(arrays).asnumpy() * head).sum()) / 2e-6
        np.testing.assert_allclose(symbolic[name], numeric, rtol=1e-6, atol=1e-7, err_msg=name)
