"""AlexNet (MXNet 1.x ``gluon.model_zoo.vision.alexnet``), from "One weird trick for
parallelizing convolutional neural networks" (Krizhevsky, 2014).

Example:
    >>> net = alexnet(classes=10)
"""
from __future__ import annotations

from typing import Any

from portable.gluon.block import HybridBlock
from portable.gluon.model_zoo.model_store import get_model_file
from portable.gluon.nn import Conv2D, Dense, Dropout, Flatten, HybridSequential, MaxPool2D

__all__ = ["AlexNet", "alexnet"]


class AlexNet(HybridBlock):
    """AlexNet: five convolutions (ReLU) with three 3x3/2 max pools, two Dense(4096)-ReLU-
    Dropout(0.5) layers and a Dense output (224x224 inputs).

    Args:
        classes: output classes.

    Example:
        >>> net = AlexNet(classes=10)
    """

    def __init__(self, classes: int = 1000, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        with self.name_scope():
            self.features = HybridSequential(prefix="")
            with self.features.name_scope():
                self.features.add(Conv2D(64, kernel_size=11, strides=4, padding=2,
                                         activation="relu"))
                self.features.add(MaxPool2D(pool_size=3, strides=2))
                self.features.add(Conv2D(192, kernel_size=5, padding=2, activation="relu"))
                self.features.add(MaxPool2D(pool_size=3, strides=2))
                self.features.add(Conv2D(384, kernel_size=3, padding=1, activation="relu"))
                self.features.add(Conv2D(256, kernel_size=3, padding=1, activation="relu"))
                self.features.add(Conv2D(256, kernel_size=3, padding=1, activation="relu"))
                self.features.add(MaxPool2D(pool_size=3, strides=2))
                self.features.add(Flatten())
                for _ in range(2):
                    self.features.add(Dense(4096, activation="relu"))
                    self.features.add(Dropout(0.5))
            self.output = Dense(classes)

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return self.output(self.features(x))


def alexnet(pretrained: bool = False, ctx: Any = None, root: str | None = None,
            **kwargs: Any) -> AlexNet:
    """AlexNet of MXNet's model zoo.

    Args:
        pretrained: load ``<root>/alexnet-44335d1f.params`` (never downloaded).
        ctx: the device to load the pretrained parameters on (default the CPU).
        root: the folder of pretrained files (default ``$MXNET_HOME/models``).
        **kwargs: ``classes``, ``prefix``, ``params``.

    Returns:
        The network.
    """
    net = AlexNet(**kwargs)
    if pretrained:
        net.load_parameters(get_model_file("alexnet", root=root), ctx=ctx)
    return net
