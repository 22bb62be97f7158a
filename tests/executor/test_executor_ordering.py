"""A bound executor's passes against what is pushed around them, never waiting in between:
an optimizer's in-place update pushed right after ``backward()`` (the gradient segment reads the
bound weights and data through the forward pass's buffers), and a view of an output taken right
after ``forward()``. Both raced before, giving other numbers from run to run."""
from __future__ import annotations

import numpy as np

import portable as mx
from portable import nd


def numpy_sgd(x, y, w1, w2, lr, steps, batch):
    for step in range(steps):
        xb = x[step % 4 * batch:(step % 4 + 1) * batch]
        yb = y[step % 4 * batch:(step % 4 + 1) * batch].astype(int)
        hidden = np.tanh(xb @ w1.T)
        scores = hidden @ w2.T
        p = np.exp(scores - scores.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(len(yb)), yb] -= 1                    # SoftmaxOutput's gradient
        g2 = p.T @ hidden
        g1 = ((p @ w2) * (1 - hidden ** 2)).T @ xb
        w1, w2 = w1 - lr * g1, w2 - lr * g2
    return w1, w2


def test_sgd_on_a_bound_executor_matches_numpy_without_waiting_between_steps():
    rng = np.random.RandomState(0)
    batch, steps, lr = 64, 40, 0.01
    x = rng.normal(size=(4 * batch, 256)).astype(np.float32)
    y = rng.randint(0, 10, size=4 * batch).astype(np.float32)
    w1 = rng.normal(0, 0.1, (512, 256)).astype(np.float32)
    w2 = rng.normal(0, 0.1, (10, 512)).astype(np.float32)

    data = mx.sym.var("data")
    hidden = mx.sym.Activation(mx.sym.FullyConnected(data, num_hidden=512, no_bias=True,
                                                     name="fc1"), act_type="tanh")
    scores = mx.sym.FullyConnected(hidden, num_hidden=10, no_bias=True, name="fc2")
    net = mx.sym.SoftmaxOutput(scores, name="softmax")
    exe = net.simple_bind(mx.cpu(), data=(batch, 256), grad_req="write")
    exe.arg_dict["fc1_weight"][:] = nd.array(w1)
    exe.arg_dict["fc2_weight"][:] = nd.array(w2)
    for step in range(steps):
        exe.arg_dict["data"][:] = nd.array(x[step % 4 * batch:(step % 4 + 1) * batch])
        exe.arg_dict["softmax_label"][:] = nd.array(y[step % 4 * batch:(step % 4 + 1) * batch])
        exe.forward(is_train=True)
        exe.backward()
        for name in ("fc1_weight", "fc2_weight"):
            exe.arg_dict[name][:] -= lr * exe.grad_dict[name]

    want1, want2 = numpy_sgd(x.astype(np.float64), y, w1.astype(np.float64),
                             w2.astype(np.float64), lr, steps, batch)
    np.testing.assert_allclose(exe.arg_dict["fc1_weight"].asnumpy(), want1, atol=2e-4)
    np.testing.assert_allclose(exe.arg_dict["fc2_weight"].asnumpy(), want2, atol=2e-4)


def test_a_view_of_an_output_taken_right_after_forward_sees_its_values():
    """``out[:n]`` (Module.predict's pad trimming) is taken when it is pushed, before the
    forward pass has run: it must still see what the pass writes."""
    rng = np.random.RandomState(1)
    x = rng.normal(size=(256, 1024)).astype(np.float32)
    w = rng.normal(0, 0.05, (1024, 1024)).astype(np.float32)
    net = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=1024, no_bias=True, name="fc")
    exe = net.simple_bind(mx.cpu(), data=x.shape, grad_req="null")
    exe.arg_dict["fc_weight"][:] = nd.array(w)
    for round_ in range(3):
        exe.arg_dict["data"][:] = nd.array(x + round_)
        head = exe.forward(is_train=False)[0][:5]
        np.testing.assert_allclose(head.asnumpy(), (x[:5] + round_) @ w.T, rtol=1e-4,
                                   atol=1e-3)
