"""Gluon models (MLP, LeNet, ResNet-style with BatchNorm, small Transformer encoder), trained a
few steps, export through ``HybridBlock.export_onnx``: onnxruntime reproduces our outputs within
1e-4, and ``SymbolBlock.imports`` of the file, then a second export, give them again."""
import numpy as np
import pytest

from tests.exporters.helpers import ort_run, onnx

gluon = pytest.importorskip("portable.gluon", reason="portable.gluon is not available")

import portable as pt  # noqa: E402
from portable import autograd  # noqa: E402
from portable.gluon import nn  # noqa: E402

from exporters.onnx import export_model, import_model  # noqa: E402


class Residual(nn.HybridBlock):
    def __init__(self, channels, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.conv1 = nn.Conv2D(channels, 3, padding=1, use_bias=False)
            self.bn1 = nn.BatchNorm()
            self.conv2 = nn.Conv2D(channels, 3, padding=1, use_bias=False)
            self.bn2 = nn.BatchNorm()

    def hybrid_forward(self, F, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(F.add(x, self.bn2(self.conv2(y))))


class EncoderLayer(nn.HybridBlock):
    """Post-norm self-attention + feed-forward, with dropout (stripped on export)."""

    def __init__(self, dim=16, heads=2, **kwargs):
        super().__init__(**kwargs)
        self.dim, self.heads = dim, heads
        with self.name_scope():
            self.q, self.k, self.v, self.out = (nn.Dense(dim, flatten=False) for _ in range(4))
            self.ln1, self.ln2 = nn.LayerNorm(), nn.LayerNorm()
            self.ff1 = nn.Dense(32, flatten=False, activation="relu")
            self.ff2 = nn.Dense(dim, flatten=False)
            self.drop = nn.Dropout(0.1)

    def hybrid_forward(self, F, x):
        head = self.dim // self.heads
        split = np.array([0, 0, self.heads, head], np.int64)
        q, k, v = (F.transpose(F.reshape(layer(x), split), perm=[0, 2, 1, 3])
                   for layer in (self.q, self.k, self.v))
        scores = F.matmul(q, F.transpose(k, perm=[0, 1, 3, 2])) * (1.0 / np.sqrt(head))
        context = F.matmul(F.softmax(scores, axis=-1), v)
        merged = F.reshape(F.transpose(context, perm=[0, 2, 1, 3]),
                           np.array([0, 0, -1], np.int64))
        x = self.ln1(x + self.drop(self.out(merged)))
        return self.ln2(x + self.drop(self.ff2(self.ff1(x))))


def _sequential(*layers):
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(*layers)
    return net


MODELS = {
    "mlp": (lambda: _sequential(nn.Dense(32, activation="relu"), nn.Dropout(0.2),
                                nn.Dense(10)), (4, 20)),
    "lenet": (lambda: _sequential(nn.Conv2D(6, 3, padding=1, activation="relu"),
                                  nn.MaxPool2D(2), nn.Conv2D(8, 3, padding=1,
                                                             activation="relu"),
                                  nn.MaxPool2D(2), nn.Dense(10)), (2, 1, 16, 16)),
    "resnet": (lambda: _sequential(nn.Conv2D(8, 3, padding=1, use_bias=False), nn.BatchNorm(),
                                   nn.Activation("relu"), Residual(8), Residual(8),
                                   nn.GlobalAvgPool2D(), nn.Dense(10)), (2, 3, 8, 8)),
    "transformer": (lambda: _sequential(EncoderLayer(), EncoderLayer(), nn.Dense(10)),
                    (2, 5, 16)),
}


def _trained(net, shape, steps=3):
    pt.random.seed(0)
    rng = np.random.default_rng(0)
    net.initialize(pt.init.Xavier())
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for _ in range(steps):
        x = pt.nd.array(rng.normal(size=shape).astype(np.float32))
        y = pt.nd.array(rng.integers(0, 10, shape[0]))
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(shape[0])
    return net


@pytest.mark.parametrize("name", sorted(MODELS))
def test_gluon_round_trip(name, tmp_path):
    build, shape = MODELS[name]
    net = _trained(build(), shape)
    x = np.random.default_rng(1).normal(size=shape).astype(np.float32)
    ours = net(pt.nd.array(x)).asnumpy()

    path = str(tmp_path / f"{name}.onnx")
    model = net.export_onnx(path, pt.nd.array(x))
    onnx.checker.check_model(model, full_check=True)
    onnx.shape_inference.infer_shapes(model, strict_mode=True)
    data = model.graph.input[0].name
    np.testing.assert_allclose(ort_run(path, {data: x})[0], ours, rtol=1e-4, atol=1e-4)

    block = gluon.SymbolBlock.imports(path, [data])
    np.testing.assert_allclose(block(pt.nd.array(x)).asnumpy(), ours, rtol=1e-5, atol=1e-6)
    symbol, arg_params, aux_params = import_model(path)
    again = export_model(symbol, (arg_params, aux_params), tmp_path / "again.onnx",
                         input_shapes={data: shape})
    np.testing.assert_allclose(ort_run(again, {data: x})[0], ours, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_dynamic_batch_export_traced_on_one_sample_runs_any_batch(name, tmp_path):
    """``dynamic_batch=True``: traced on a batch of 1, the file runs batches of 1, 3 and 7 in
    onnxruntime, each giving our outputs on that batch."""
    build, shape = MODELS[name]
    net = _trained(build(), shape)
    rng = np.random.default_rng(2)
    path = str(tmp_path / f"{name}.onnx")
    model = net.export_onnx(path, pt.nd.array(rng.normal(size=(1, *shape[1:]))
                                              .astype(np.float32)), dynamic_batch=True)
    onnx.checker.check_model(model, full_check=True)
    data = model.graph.input[0]
    assert data.type.tensor_type.shape.dim[0].dim_param == "batch"
    assert model.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    for batch in (1, 3, 7):
        x = rng.normal(size=(batch, *shape[1:])).astype(np.float32)
        np.testing.assert_allclose(ort_run(path, {data.name: x})[0],
                                   net(pt.nd.array(x)).asnumpy(), rtol=1e-4, atol=1e-4)


def test_without_dynamic_batch_the_file_keeps_the_example_batch(tmp_path):
    build, shape = MODELS["mlp"]
    net = _trained(build(), shape)
    model = net.export_onnx(str(tmp_path / "m.onnx"), pt.nd.array(np.zeros(shape, np.float32)))
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == shape[0]
