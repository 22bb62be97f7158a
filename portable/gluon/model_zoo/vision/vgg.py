"""VGG 11/13/16/19, with or without BatchNorm (MXNet 1.x ``gluon.model_zoo.vision.vgg``),
from "Very Deep Convolutional Networks for Large-Scale Image Recognition" (Simonyan and
Zisserman, 2014).

Example:
    >>> net = vgg11_bn(classes=10)
"""
from __future__ import annotations

from typing import Any

from portable.errors import PortableError
from portable.gluon.block import HybridBlock
from portable.gluon.model_zoo.model_store import get_model_file
from portable.gluon.nn import (Activation, BatchNorm, Conv2D, Dense, Dropout, HybridSequential,
                               MaxPool2D)
from portable.initializer import Xavier

__all__ = ["VGG", "vgg11", "vgg13", "vgg16", "vgg19", "vgg11_bn", "vgg13_bn", "vgg16_bn",
           "vgg19_bn", "get_vgg"]


class VGG(HybridBlock):
    """VGG: stages of 3x3 convolutions (each with ReLU, optionally BatchNorm) closed by 2x2
    max pooling, then two Dense(4096)-ReLU-Dropout(0.5) layers and a Dense output.

    Args:
        layers: convolutions per stage.
        filters: channels per stage (as many as layers).
        classes: output classes.
        batch_norm: a BatchNorm after each convolution.

    Example:
        >>> net = VGG([1, 1, 2, 2, 2], [64, 128, 256, 512, 512], classes=10)
    """

    def __init__(self, layers: list, filters: list, classes: int = 1000,
                 batch_norm: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if len(layers) != len(filters):
            raise PortableError(f"VGG: layers {list(layers)} and filters {list(filters)} "
                                f"must have the same length")
        with self.name_scope():
            self.features = self._make_features(layers, filters, batch_norm)
            for _ in range(2):
                self.features.add(Dense(4096, activation="relu", weight_initializer="normal",
                                        bias_initializer="zeros"))
                self.features.add(Dropout(rate=0.5))
            self.output = Dense(classes, weight_initializer="normal", bias_initializer="zeros")

    @staticmethod
    def _make_features(layers: list, filters: list, batch_norm: bool) -> HybridSequential:
        featurizer = HybridSequential(prefix="")
        for num, channels in zip(layers, filters):
            for _ in range(num):
                featurizer.add(Conv2D(channels, kernel_size=3, padding=1,
                                      weight_initializer=Xavier(rnd_type="gaussian",
                                                                factor_type="out",
                                                                magnitude=2),
                                      bias_initializer="zeros"))
                if batch_norm:
                    featurizer.add(BatchNorm())
                featurizer.add(Activation("relu"))
            featurizer.add(MaxPool2D(strides=2))
        return featurizer

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return self.output(self.features(x))


# depth -> (convolutions per stage, channels per stage)
vgg_spec = {11: ([1, 1, 2, 2, 2], [64, 128, 256, 512, 512]),
            13: ([2, 2, 2, 2, 2], [64, 128, 256, 512, 512]),
            16: ([2, 2, 3, 3, 3], [64, 128, 256, 512, 512]),
            19: ([2, 2, 4, 4, 4], [64, 128, 256, 512, 512])}


def get_vgg(num_layers: int, pretrained: bool = False, ctx: Any = None,
            root: str | None = None, **kwargs: Any) -> VGG:
    """A VGG of MXNet's model zoo.

    Args:
        num_layers: 11, 13, 16 or 19.
        pretrained: load ``<root>/vgg<num_layers>[_bn]-<hash>.params`` (never downloaded).
        ctx: the device to load the pretrained parameters on (default the CPU).
        root: the folder of pretrained files (default ``$MXNET_HOME/models``).
        **kwargs: ``classes``, ``batch_norm``, ``prefix``, ``params``.

    Returns:
        The network.

    Example:
        >>> net = get_vgg(11, batch_norm=True)
    """
    if num_layers not in vgg_spec:
        raise PortableError(f"Invalid number of layers: {num_layers}. Options are "
                            f"{list(vgg_spec)}")
    layers, filters = vgg_spec[num_layers]
    net = VGG(layers, filters, **kwargs)
    if pretrained:
        suffix = "_bn" if kwargs.get("batch_norm") else ""
        net.load_parameters(get_model_file(f"vgg{num_layers}{suffix}", root=root), ctx=ctx)
    return net


def _constructor(depth: int, batch_norm: bool) -> Any:
    def build(**kwargs: Any) -> VGG:
        if batch_norm:
            kwargs["batch_norm"] = True
        return get_vgg(depth, **kwargs)

    build.__name__ = build.__qualname__ = f"vgg{depth}{'_bn' if batch_norm else ''}"
    build.__doc__ = (f"VGG-{depth}{' with BatchNorm' if batch_norm else ''} (MXNet's "
                     f"``{build.__name__}``); keyword arguments as :func:`get_vgg`.")
    return build


vgg11 = _constructor(11, False)
vgg13 = _constructor(13, False)
vgg16 = _constructor(16, False)
vgg19 = _constructor(19, False)
vgg11_bn = _constructor(11, True)
vgg13_bn = _constructor(13, True)
vgg16_bn = _constructor(16, True)
vgg19_bn = _constructor(19, True)
