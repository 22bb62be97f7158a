"""Block mechanics: names, parameters, deferred initialisation, hybridize's per-signature
tracing, BatchNorm running statistics, and layers against NumPy."""
import numpy as np
import pytest

import portable as pt
from portable import autograd
from portable.errors import PortableError
from portable.gluon import DeferredInitializationError, HybridBlock, Parameter, nn

RNG = np.random.default_rng(5)


class Model(HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.body = nn.Dense(4, activation="relu")
            self.head = nn.Dense(2)
            self.scale = self.params.get("scale", shape=(1,), init="ones")
        self.traces = 0

    def hybrid_forward(self, F, x, scale):
        if F is pt.sym:
            self.traces += 1
        return F.mul(self.head(self.body(x)), scale)


def test_mxnet_names_and_collect_params():
    a, b = Model(), Model()
    assert b.prefix == f"model{int(a.prefix[5:-1]) + 1}_"
    names = list(a.collect_params().keys())
    assert names == [f"{a.prefix}scale", f"{a.prefix}dense0_weight", f"{a.prefix}dense0_bias",
                     f"{a.prefix}dense1_weight", f"{a.prefix}dense1_bias"]
    assert list(a.collect_params(".*weight").keys()) == names[1::2]
    assert list(a._collect_params_with_prefix()) == [
        "scale", "body.weight", "body.bias", "head.weight", "head.bias"]
    assert Parameter("x").var().name == "x"


def test_deferred_initialisation_imperative_and_hybridized():
    for hybridize in (False, True):
        net = nn.HybridSequential()
        net.add(nn.Dense(3), nn.BatchNorm(), nn.Dense(2))
        net.initialize()
        with pytest.raises(DeferredInitializationError, match="deferred"):
            net[0].weight.data()
        net.hybridize(hybridize)
        out = net(pt.nd.ones((4, 7)))
        assert out.shape == (4, 2)
        assert net[0].weight.shape == (3, 7) and net[1].gamma.shape == (3,)
        assert net[2].weight.data().shape == (2, 3)


def test_uninitialized_parameter_error_names_it():
    net = nn.Dense(2, in_units=3)
    with pytest.raises(PortableError, match="not been initialized"):
        net(pt.nd.ones((1, 3)))


def test_hybridize_traces_once_per_signature():
    net = Model()
    net.initialize()
    net.hybridize()
    x = pt.nd.ones((2, 5))
    net(x), net(x)
    assert net.traces == 1
    net(pt.nd.ones((3, 5)))  # new shape: a new trace
    assert net.traces == 2
    net(x)
    assert net.traces == 2
    with autograd.record():  # training mode with gradients: another plan
        net(x)
    assert net.traces == 3
    net(pt.nd.ones((2, 5), dtype="float64").astype("float32"))
    assert net.traces == 3
    assert len(net._cached_op.calls) == 3


def test_hybridized_and_imperative_agree_on_nested_outputs():
    class TwoHeads(HybridBlock):
        def hybrid_forward(self, F, x, pair):
            return F.relu(x), (F.add(pair[0], pair[1]), [F.neg(x)])

    block = TwoHeads()
    x, y = (pt.nd.array(RNG.standard_normal((2, 3)).astype(np.float32)) for _ in range(2))
    eager = block(x, [y, x])
    block.hybridize()
    compiled = block(x, [y, x])
    assert isinstance(compiled[1], tuple) and isinstance(compiled[1][1], list)
    for a, b in zip((eager[0], eager[1][0], eager[1][1][0]),
                    (compiled[0], compiled[1][0], compiled[1][1][0])):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())


def test_two_recorded_calls_before_one_backward():
    net = Model()
    net.initialize(pt.init.Xavier())
    net.hybridize()
    x1, x2 = (pt.nd.array(RNG.standard_normal((3, 5)).astype(np.float32)) for _ in range(2))
    params = net.collect_params()
    grads = {}
    for hybridize in (True, False):
        net.hybridize(hybridize)
        with autograd.record():
            loss = (net(x1) * 2).sum() + net(x2).sum()
        loss.backward()
        grads[hybridize] = {k: p.grad().asnumpy() for k, p in params.items()}
    for key in grads[True]:
        np.testing.assert_allclose(grads[True][key], grads[False][key], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("hybridize", [False, True], ids=["imperative", "hybridized"])
def test_batchnorm_running_statistics_match_numpy(hybridize):
    bn = nn.BatchNorm(momentum=0.8, epsilon=1e-3)
    bn.initialize()
    bn.hybridize(hybridize)
    x = (RNG.standard_normal((6, 3, 4, 4)) * 2 + 1).astype(np.float32)
    mean, var = np.zeros(3), np.ones(3)
    for _ in range(2):
        with autograd.record():
            y = bn(pt.nd.array(x))
        batch_mean, batch_var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
        mean = 0.8 * mean + 0.2 * batch_mean
        var = 0.8 * var + 0.2 * batch_var
        normalized = (x - batch_mean[:, None, None]) / np.sqrt(batch_var[:, None, None] + 1e-3)
        np.testing.assert_allclose(y.asnumpy(), normalized, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn.running_mean.data().asnumpy(), mean, rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.data().asnumpy(), var, rtol=1e-5)
    predicted = bn(pt.nd.array(x)).asnumpy()  # predict mode: the running statistics
    expected = (x - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-3)
    np.testing.assert_allclose(predicted, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn.running_mean.data().asnumpy(), mean, rtol=1e-5)


def test_parameter_api():
    p = Parameter("w", shape=(2, 3), lr_mult=0.5, init="ones")
    p.initialize(device=pt.cpu())
    assert p.list_data()[0] is p.data() and p.list_device() == [pt.cpu()]
    assert (p.shape, p.dtype, p.lr_mult, p.wd_mult, p.grad_req) == (
        (2, 3), np.dtype("float32"), 0.5, 1.0, "write")
    np.testing.assert_array_equal(p.data().asnumpy(), np.ones((2, 3)))
    p.grad_req = "add"
    for _ in range(2):
        with autograd.record():
            (p.data() * 3).sum().backward()
    np.testing.assert_array_equal(p.grad().asnumpy(), np.full((2, 3), 6.0))
    p.zero_grad()
    np.testing.assert_array_equal(p.list_grad()[0].asnumpy(), np.zeros((2, 3)))
    p.set_data(np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(p.data().asnumpy(), np.arange(6).reshape(2, 3))
    p.grad_req = "null"
    with pytest.raises(PortableError, match="grad_req is 'null'"):
        p.grad()
    with pytest.raises(PortableError, match="incompatible"):
        p.shape = (3, 3)


def test_plain_block_with_hybrid_children_and_lambdas():
    net = nn.Sequential()
    with net.name_scope():
        net.add(nn.Dense(4), nn.Lambda(lambda x: x * 2), nn.HybridLambda("relu"))
    net.initialize()
    x = pt.nd.array(RNG.standard_normal((2, 3)).astype(np.float32))
    eager = net(x).asnumpy()
    net.hybridize()
    assert net[0]._active and net[2]._active
    np.testing.assert_array_equal(net(x).asnumpy(), eager)
    with pytest.raises(PortableError, match="HybridSequential"):
        nn.HybridSequential().add(nn.Sequential())


def test_cast_to_float64():
    net = Model()
    net.cast("float64")
    net.initialize()
    net.hybridize()
    out = net(pt.nd.ones((2, 3), dtype="float64"))
    assert out.dtype == np.float64
    assert all(p.data().dtype == np.float64 for p in net.collect_params().values())


def test_forward_hooks():
    seen = []
    layer = nn.Activation("relu")
    layer.register_forward_pre_hook(lambda block, args: seen.append("pre"))
    handle = layer.register_forward_hook(lambda block, args, out: seen.append(out.shape))
    layer(pt.nd.ones((2,)))
    handle.detach()
    layer(pt.nd.ones((2,)))
    assert seen == ["pre", (2,), "pre"]


# -- layers against NumPy -----------------------------------------------------------------


def _eval(layer, x, hybridize):
    layer.initialize(pt.init.Uniform(0.5))
    layer.hybridize(hybridize)
    return layer(pt.nd.array(x)).asnumpy()


@pytest.mark.parametrize("hybridize", [False, True], ids=["imperative", "hybridized"])
def test_layers_match_numpy(hybridize):
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    dense = nn.Dense(4, flatten=False)
    y = _eval(dense, x, hybridize)
    np.testing.assert_allclose(y, x @ dense.weight.data().asnumpy().T +
                               dense.bias.data().asnumpy(), rtol=1e-5, atol=1e-6)
    dense = nn.Dense(4, activation="tanh")
    y = _eval(dense, x, hybridize)
    np.testing.assert_allclose(y, np.tanh(x.reshape(2, -1) @ dense.weight.data().asnumpy().T),
                               rtol=1e-5, atol=1e-6)
    emb = nn.Embedding(10, 3)
    idx = np.array([[1, 9], [0, 1]], dtype=np.float32)
    np.testing.assert_array_equal(_eval(emb, idx, hybridize),
                                  emb.weight.data().asnumpy()[idx.astype(int)])
    norm = nn.LayerNorm()
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(_eval(norm, x, hybridize), (x - mean) / np.sqrt(var + 1e-5),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(_eval(nn.Flatten(), x, hybridize), x.reshape(2, 15))
    np.testing.assert_allclose(_eval(nn.Activation("softrelu"), x, hybridize),
                               np.log1p(np.exp(x)), rtol=1e-5)


@pytest.mark.parametrize("hybridize", [False, True], ids=["imperative", "hybridized"])
def test_pooling_and_transposed_convolution_match_numpy(hybridize):
    x = RNG.standard_normal((2, 3, 4, 6)).astype(np.float32)
    pool = _eval(nn.AvgPool2D(pool_size=2, strides=1, padding=1), x, hybridize)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (2, 2), axis=(2, 3))
    np.testing.assert_allclose(pool, windows.mean(axis=(-2, -1)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_eval(nn.MaxPool2D(), x, hybridize),
                               x.reshape(2, 3, 2, 2, 3, 2).max(axis=(3, 5)))
    np.testing.assert_allclose(_eval(nn.GlobalAvgPool2D(), x, hybridize),
                               x.mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)
    deconv = nn.Conv2DTranspose(2, kernel_size=3, strides=2, padding=1, output_padding=1)
    y = _eval(deconv, x, hybridize)
    w, b = deconv.weight.data().asnumpy(), deconv.bias.data().asnumpy()
    assert w.shape == (3, 2, 3, 3)
    full = np.zeros((2, 2, 2 * 4 + 2, 2 * 6 + 2), np.float64)  # scatter every input element
    for i in range(4):
        for j in range(6):
            full[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3] += np.einsum(
                "nc,cmhw->nmhw", x[:, :, i, j], w)
    expected = full[:, :, 1:1 + 8, 1:1 + 12] + b[:, None, None]
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)
    conv = nn.Conv1D(4, kernel_size=3, in_channels=3)
    y = _eval(conv, x[:, :, 0], hybridize)
    w = conv.weight.data().asnumpy()
    windows = np.lib.stride_tricks.sliding_window_view(x[:, :, 0], 3, axis=2)
    np.testing.assert_allclose(y, np.einsum("ncok,mck->nmo", windows, w), rtol=1e-4,
                               atol=1e-5)


def test_backward_twice_with_retain_graph_through_a_hybridized_block():
    # Deep enough that the memory plan would reuse forward activations for gradient
    # temporaries, were they not kept for a second backward.
    net = nn.HybridSequential()
    for _ in range(4):
        net.add(nn.Dense(8, activation="tanh"))
    net.initialize(pt.init.Xavier())
    x = pt.nd.array(RNG.standard_normal((3, 8)).astype(np.float32))
    grads = []
    for hybridize in (True, False):
        net.hybridize(hybridize, static_alloc=True, static_shape=True)
        with autograd.record():
            loss = (net(x) * net(x)).sum()
        loss.backward(retain_graph=True)
        first = [p.grad().asnumpy() for p in net.collect_params().values()]
        loss.backward()
        for a, p in zip(first, net.collect_params().values()):
            np.testing.assert_allclose(p.grad().asnumpy(), a, rtol=1e-6, atol=1e-7)
        grads.append(first)
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_gradient_flows_through_a_hybridized_block_into_recorded_ops():
    net = Model()
    net.initialize(pt.init.Xavier())
    x_host = RNG.standard_normal((3, 5)).astype(np.float32)
    grads = []
    for hybridize in (False, True):
        net.hybridize(hybridize)
        x = pt.nd.array(x_host)
        x.attach_grad()
        with autograd.record():
            y = net(pt.nd.tanh(x) * 2)  # recorded ops before and after the block
            loss = (y * y).sum()
        loss.backward()
        grads.append(x.grad.asnumpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-6)
    assert np.abs(grads[0]).sum() > 0


def test_parameters_on_several_devices_follow_the_input():
    net = nn.HybridSequential()
    net.add(nn.Dense(3, in_units=4))
    net.initialize(device=[pt.cpu(0), pt.cpu(1)])
    weight = net[0].weight
    assert weight.list_device() == [pt.cpu(0), pt.cpu(1)] and len(weight.list_grad()) == 2
    x = pt.nd.ones((2, 4), device=pt.cpu(1))
    for hybridize in (False, True):
        net.hybridize(hybridize)
        with autograd.record():
            y = net(x)
        y.backward()
        assert y.device == pt.cpu(1)
        np.testing.assert_allclose(weight.grad(pt.cpu(1)).asnumpy(), np.full((3, 4), 2.0))
        np.testing.assert_array_equal(weight.grad(pt.cpu(0)).asnumpy(), np.zeros((3, 4)))
