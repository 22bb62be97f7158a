"""Zoo models: output shapes on 8x8 and 28x28 inputs, and one training step each."""
from __future__ import annotations

import numpy as np
import pytest

import portable as pt
from portable.errors import PortableError
from portable.gluon import Trainer
from portable.gluon.loss import SoftmaxCrossEntropyLoss
from portable.models.zoo import get_model


def _images(size, n=4):
    return pt.nd.array(np.random.default_rng(0).normal(size=(n, 1, size, size)),
                       dtype=np.float32)


@pytest.mark.parametrize("name", ["mlp", "lenet", "resnet-small"])
def test_mnist_sized_inputs(name):
    net = get_model(name)
    net.initialize()
    assert net(_images(28, 2)).shape == (2, 10)


@pytest.mark.parametrize("name", ["mlp", "lenet", "resnet-small"])
def test_shapes_and_one_training_step(name):
    pt.random.seed(0)
    net = get_model(name, num_classes=7)
    net.initialize(pt.init.Xavier())
    net.hybridize()
    x = _images(8)
    y = pt.nd.array(np.array([0, 1, 2, 3]), dtype=np.int64)
    assert net(x).shape == (4, 7)
    trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    before = {k: p.data().asnumpy() for k, p in net.collect_params().items()}
    with pt.autograd.record():
        loss = SoftmaxCrossEntropyLoss()(net(x), y)
    loss.backward()
    trainer.step(4)
    changed = [k for k, p in net.collect_params().items()
               if not np.array_equal(before[k], p.data().asnumpy())]
    trainable = [k for k, p in net.collect_params().items() if p.grad_req != "null"]
    assert set(trainable) <= set(changed)


def test_unknown_model():
    with pytest.raises(PortableError, match="resnet-small"):
        get_model("vgg")


def test_cifar_resnet18_has_the_published_size():
    """``resnet_small(10, (64, 128, 256, 512), blocks=2)`` is the CIFAR ResNet-18 of He et al.
    as commonly trained (3x3 stem, no max pool): 11,173,962 trainable parameters, with the
    resolution halved at the first block of stages 2-4 (32 -> 4 before pooling)."""
    from portable.models.zoo import resnet_small

    net = resnet_small(10, (64, 128, 256, 512), blocks=2)
    net.initialize()
    x = pt.nd.array(np.zeros((1, 3, 32, 32), np.float32))
    assert net(x).shape == (1, 10)
    trainable = sum(int(np.prod(p.shape)) for p in net.collect_params().values()
                    if p.grad_req != "null")
    assert trainable == 11_173_962
    assert net[:-3](x).shape == (1, 512, 4, 4)  # the last block's output, before pooling
