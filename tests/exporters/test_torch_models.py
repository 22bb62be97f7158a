"""Models exported by PyTorch's ONNX exporter import and match PyTorch's outputs within 1e-4:
MLP, CNN, ResNet-style with BatchNorm, depthwise MobileNet block, Transformer encoder, LSTM and
an embedding classifier (batch axis exported as dynamic; run at two batch sizes)."""
import io
import warnings

import numpy as np
import pytest

from tests.exporters.helpers import onnx  # noqa: F401  (skips without onnx)

torch = pytest.importorskip("torch", reason="PyTorch is not installed "
                                            "(pip install torch==2.13.0)")
nn = torch.nn

from exporters.onnx import backend, import_graph  # noqa: E402


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2)
        self.fc = nn.Linear(16 * 7 * 7, 10)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.relu(self.conv2(nn.functional.pad(x, (1, 1, 1, 1))))
        return self.fc(torch.flatten(x, 1))


class BasicBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        return torch.relu(x + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(16), nn.ReLU())
        self.blocks = nn.Sequential(BasicBlock(16), BasicBlock(16))
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        pooled = nn.functional.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1)
        return self.head(pooled.flatten(1))


class MobileNetBlock(nn.Module):
    """Inverted residual: 1x1 expand, 3x3 depthwise, 1x1 project (ReLU6 = Clip)."""

    def __init__(self):
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(8, 32, 1, bias=False), nn.BatchNorm2d(32),
                                    nn.ReLU6())
        self.depthwise = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False),
                                       nn.BatchNorm2d(32), nn.ReLU6())
        self.project = nn.Sequential(nn.Conv2d(32, 8, 1, bias=False), nn.BatchNorm2d(8))

    def forward(self, x):
        return x + self.project(self.depthwise(self.expand(x)))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x):
        return self.encoder(x)


class LSTMNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(6, 12, num_layers=2, batch_first=True)
        self.fc = nn.Linear(12, 3)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.fc(y[:, -1])


class EmbeddingClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(50, 8)
        self.fc = nn.Linear(8, 4)

    def forward(self, ids):
        return self.fc(self.embedding(ids).mean(dim=1))


MODELS = {
    "mlp": (MLP, lambda n: torch.randn(n, 20)),
    "cnn": (CNN, lambda n: torch.randn(n, 1, 28, 28)),
    "resnet": (ResNet, lambda n: torch.randn(n, 3, 16, 16)),
    "mobilenet_block": (MobileNetBlock, lambda n: torch.randn(n, 8, 12, 12)),
    "transformer_encoder": (Encoder, lambda n: torch.randn(n, 7, 16)),
    "lstm": (LSTMNet, lambda n: torch.randn(n, 5, 6)),
    "embedding_classifier": (EmbeddingClassifier, lambda n: torch.randint(0, 50, (n, 9))),
}


def _exported(model, example) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # The TorchScript exporter: the dynamo one needs onnxscript, which may be absent.
        torch.onnx.export(model, (example,), buffer, dynamo=False, input_names=["x"],
                          output_names=["y"], opset_version=17,
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    return buffer.getvalue()


def build(name):
    """The model (seed 0, non-trivial BatchNorm statistics) and its input maker."""
    torch.manual_seed(0)
    make, inputs = MODELS[name]
    model = make().eval()
    for module in model.modules():  # non-trivial running statistics
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 1.5)
    return model, inputs


@pytest.mark.parametrize("name", sorted(MODELS))
def test_pytorch_export_imports_and_matches(name):
    model, inputs = build(name)
    data = _exported(model, inputs(2))
    graph, _ = import_graph(data)
    assert graph.input_types["x"].shape[0] is None  # the dynamic batch axis
    rep = backend.prepare(data)
    for batch in (2, 3):
        x = inputs(batch)
        with torch.no_grad():
            expected = model(x).numpy()
        (got,) = rep.run([x.numpy()])
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
