"""gluon.rnn LSTM/GRU against a NumPy transcription of MXNet's cell equations (gate order
LSTM i, f, g, o; GRU r, z, n), and against PyTorch (same parameter layout) when installed."""
import numpy as np
import pytest

import portable as pt
from portable import autograd
from portable.gluon import rnn


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _lstm_cell(x, h, c, wi, wh, bi, bh):
    i, f, g, o = np.split(x @ wi.T + bi + h @ wh.T + bh, 4, axis=-1)
    c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
    return _sigmoid(o) * np.tanh(c), c


def _gru_cell(x, h, _, wi, wh, bi, bh):
    xr, xz, xn = np.split(x @ wi.T + bi, 3, axis=-1)
    hr, hz, hn = np.split(h @ wh.T + bh, 3, axis=-1)
    r, z = _sigmoid(xr + hr), _sigmoid(xz + hz)
    n = np.tanh(xn + r * hn)
    return (1 - z) * n + z * h, None


def _reference(mode, params, x, states, layers, directions):
    """x: (T, N, C); states: [h] or [h, c] of (layers * directions, N, H)."""
    cell = _lstm_cell if mode == "lstm" else _gru_cell
    finals = [[], []]
    for layer in range(layers):
        outputs = []
        for d, tag in enumerate("lr"[:directions]):
            w = [params[f"{tag}{layer}_{k}"] for k in
                 ("i2h_weight", "h2h_weight", "i2h_bias", "h2h_bias")]
            h = states[0][layer * directions + d]
            c = states[1][layer * directions + d] if mode == "lstm" else None
            steps = range(len(x)) if tag == "l" else reversed(range(len(x)))
            ys = [None] * len(x)
            for t in steps:
                h, c = cell(x[t], h, c, *w)
                ys[t] = h
            outputs.append(np.stack(ys))
            finals[0].append(h)
            finals[1].append(c)
        x = np.concatenate(outputs, axis=-1)
    result = [np.stack(finals[0])] + ([np.stack(finals[1])] if mode == "lstm" else [])
    return x, result


CONFIGS = [("lstm", 2, False, "TNC"), ("lstm", 1, True, "NTC"), ("gru", 2, True, "TNC"),
           ("gru", 1, False, "NTC")]


def _build(mode, layers, bidirectional, layout, dtype="float32"):
    cls = rnn.LSTM if mode == "lstm" else rnn.GRU
    layer = cls(4, num_layers=layers, bidirectional=bidirectional, layout=layout)
    layer.cast(dtype)
    pt.random.seed(0)
    layer.initialize(pt.init.Uniform(0.5))
    return layer


@pytest.mark.parametrize("hybridize", [False, True], ids=["imperative", "hybridized"])
@pytest.mark.parametrize("mode,layers,bidirectional,layout", CONFIGS)
def test_matches_numpy_reference(mode, layers, bidirectional, layout, hybridize):
    rng = np.random.default_rng(1)
    T, N, C, H, D = 5, 3, 3, 4, 2 if bidirectional else 1
    layer = _build(mode, layers, bidirectional, layout, "float64")
    layer.hybridize(hybridize)
    x = rng.standard_normal((T, N, C))
    states = [rng.standard_normal((layers * D, N, H)) for _ in range(2 if mode == "lstm" else 1)]
    feed = x if layout == "TNC" else x.transpose(1, 0, 2)
    out, new_states = layer(pt.nd.array(feed, dtype="float64"),
                            [pt.nd.array(s, dtype="float64") for s in states])
    layer(pt.nd.array(feed, dtype="float64"))  # without states: the output alone
    params = {k[len(layer.prefix):]: p.data().asnumpy()
              for k, p in layer.collect_params().items()}
    ref_out, ref_states = _reference(mode, params, x, states, layers, D)
    if layout == "NTC":
        ref_out = ref_out.transpose(1, 0, 2)
    np.testing.assert_allclose(out.asnumpy(), ref_out, rtol=1e-10, atol=1e-12)
    for got, want in zip(new_states, ref_states):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-10, atol=1e-12)


def test_deferred_input_size_and_parameter_names():
    layer = rnn.LSTM(6, num_layers=2, bidirectional=True)
    layer.initialize()
    out = layer(pt.nd.ones((3, 2, 5)))
    assert out.shape == (3, 2, 12)
    shapes = {k[len(layer.prefix):]: p.shape for k, p in layer.collect_params().items()}
    assert shapes["l0_i2h_weight"] == (24, 5) and shapes["r1_i2h_weight"] == (24, 12)
    assert shapes["l1_h2h_bias"] == (24,)
    assert [s.shape for s in layer.begin_state(2)] == [(4, 2, 6)] * 2


@pytest.mark.parametrize("mode,layers,bidirectional,layout", CONFIGS)
def test_matches_pytorch_outputs_and_gradients(mode, layers, bidirectional, layout):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    rng = np.random.default_rng(2)
    T, N, C, H = 5, 3, 3, 4
    layer = _build(mode, layers, bidirectional, layout)
    layer.hybridize()
    shape = (T, N, C) if layout == "TNC" else (N, T, C)
    x = rng.standard_normal(shape).astype(np.float32)
    head = rng.standard_normal((T, N, H * (2 if bidirectional else 1))).astype(np.float32)
    if layout == "NTC":
        head = head.transpose(1, 0, 2).copy()
    data = pt.nd.array(x)
    data.attach_grad()
    with autograd.record():
        out = layer(data)
        (out * pt.nd.array(head)).sum().backward()
    cls = torch.nn.LSTM if mode == "lstm" else torch.nn.GRU
    reference = cls(C, H, num_layers=layers, bidirectional=bidirectional,
                    batch_first=layout == "NTC")
    params = layer.collect_params()
    names = {}
    for layer_index in range(layers):
        for tag, suffix in zip("lr", ("", "_reverse")[:2 if bidirectional else 1]):
            for ours, theirs in (("i2h_weight", "weight_ih"), ("h2h_weight", "weight_hh"),
                                 ("i2h_bias", "bias_ih"), ("h2h_bias", "bias_hh")):
                names[f"{layer.prefix}{tag}{layer_index}_{ours}"] = \
                    f"{theirs}_l{layer_index}{suffix}"
    with torch.no_grad():
        for ours, theirs in names.items():
            getattr(reference, theirs).copy_(torch.from_numpy(params[ours].data().asnumpy()))
    tx = torch.from_numpy(x).requires_grad_()
    tout, _ = reference(tx)
    (tout * torch.from_numpy(head)).sum().backward()
    np.testing.assert_allclose(out.asnumpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(data.grad.asnumpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    for ours, theirs in names.items():
        np.testing.assert_allclose(params[ours].grad().asnumpy(),
                                   getattr(reference, theirs).grad.numpy(), rtol=1e-4,
                                   atol=1e-5, err_msg=ours)
