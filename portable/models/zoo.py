"""Small Gluon image classifiers for NCHW inputs (8x8 digits, 28x28 MNIST): ``mlp``, ``lenet``,
``resnet-small``.

Every model infers its input size on the first forward pass (deferred initialisation), so the
same definition serves both image sizes.

Example:
    >>> import portable as pt
    >>> net = get_model("lenet"); net.initialize()
    >>> net(pt.nd.zeros((2, 1, 8, 8))).shape
    (2, 10)
"""
from __future__ import annotations

from typing import Any, Callable

from portable.errors import PortableError


def mlp(num_classes: int = 10, hidden: tuple[int, ...] = (128, 64)) -> Any:
    """A multi-layer perceptron on the flattened image (ReLU hidden layers)."""
    from portable.gluon import nn

    net = nn.HybridSequential()
    with net.name_scope():
        for units in hidden:
            net.add(nn.Dense(units, activation="relu"))
        net.add(nn.Dense(num_classes))
    return net


def lenet(num_classes: int = 10, channels: tuple[int, int] = (16, 32), hidden: int = 64) -> Any:
    """LeNet-style CNN: two 3x3 conv-ReLU-maxpool stages, then two dense layers."""
    from portable.gluon import nn

    net = nn.HybridSequential()
    with net.name_scope():
        for filters in channels:
            net.add(nn.Conv2D(filters, kernel_size=3, padding=1, activation="relu"))
            net.add(nn.MaxPool2D(pool_size=2, strides=2))
        net.add(nn.Flatten())
        net.add(nn.Dense(hidden, activation="relu"))
        net.add(nn.Dense(num_classes))
    return net


def _basic_block_class() -> type:
    from portable.gluon import HybridBlock, nn

    class BasicBlock(HybridBlock):
        """Two 3x3 conv-BN layers with an identity (or 1x1 projection) shortcut (He et al.)."""

        def __init__(self, channels: int, stride: int, project: bool, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            with self.name_scope():
                self.body = nn.HybridSequential(prefix="")
                self.body.add(nn.Conv2D(channels, 3, stride, 1, use_bias=False),
                              nn.BatchNorm(), nn.Activation("relu"),
                              nn.Conv2D(channels, 3, 1, 1, use_bias=False), nn.BatchNorm())
                self.shortcut = None
                if project:
                    self.shortcut = nn.HybridSequential(prefix="")
                    self.shortcut.add(nn.Conv2D(channels, 1, stride, use_bias=False),
                                      nn.BatchNorm())

        def hybrid_forward(self, F: Any, x: Any) -> Any:
            residual = x if self.shortcut is None else self.shortcut(x)
            return F.relu(self.body(x) + residual)

    return BasicBlock


def resnet_small(num_classes: int = 10, channels: tuple[int, ...] = (16, 32),
                 blocks: int = 1) -> Any:
    """A small ResNet: a conv-BN-ReLU stem, ``blocks`` basic blocks per stage (the later stages
    halve the resolution in their first block), global average pooling and a dense classifier.
    ``channels=(64, 128, 256, 512), blocks=2`` is the CIFAR ResNet-18 (He et al.)."""
    from portable.gluon import nn

    block = _basic_block_class()
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Conv2D(channels[0], 3, 1, 1, use_bias=False), nn.BatchNorm(),
                nn.Activation("relu"))
        previous = channels[0]
        for stage, width in enumerate(channels):
            for index in range(blocks):
                stride = 2 if stage and not index else 1
                net.add(block(width, stride, project=stride != 1 or width != previous))
                previous = width
        net.add(nn.GlobalAvgPool2D(), nn.Flatten(), nn.Dense(num_classes))
    return net


MODELS: dict[str, Callable[..., Any]] = {"mlp": mlp, "lenet": lenet,
                                         "resnet-small": resnet_small}


def get_model(name: str, **kwargs: Any) -> Any:
    """A zoo model by name (``mlp``, ``lenet``, ``resnet-small``), not yet initialised.

    Args:
        name: the model name.
        **kwargs: the model's arguments (``num_classes`` ...).
    """
    factory = MODELS.get(name)
    if factory is None:
        raise PortableError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    return factory(**kwargs)
