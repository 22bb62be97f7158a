"""DenseNet-BC 121/161/169/201 (MXNet 1.x ``gluon.model_zoo.vision.densenet``), from "Densely
Connected Convolutional Networks" (Huang et al., 2016).

Each dense layer is a HybridConcurrent of the identity and a BN-ReLU-conv1x1-BN-ReLU-conv3x3
branch, so the channels grow by ``growth_rate`` per layer; transitions halve channels and size.

Example:
    >>> net = densenet121(classes=10)
"""
from __future__ import annotations

from typing import Any

from portable.errors import PortableError
from portable.gluon.block import HybridBlock
from portable.gluon.model_zoo.model_store import get_model_file
from portable.gluon.contrib.nn import HybridConcurrent, Identity
from portable.gluon.nn import (Activation, AvgPool2D, BatchNorm, Conv2D, Dense, Dropout, Flatten,
                               HybridSequential, MaxPool2D)

__all__ = ["DenseNet", "densenet121", "densenet161", "densenet169", "densenet201"]


def _make_dense_block(num_layers: int, bn_size: int, growth_rate: int, dropout: float,
                      stage_index: int) -> HybridSequential:
    out = HybridSequential(prefix=f"stage{stage_index}_")
    with out.name_scope():
        for _ in range(num_layers):
            out.add(_make_dense_layer(growth_rate, bn_size, dropout))
    return out


def _make_dense_layer(growth_rate: int, bn_size: int, dropout: float) -> HybridConcurrent:
    new_features = HybridSequential(prefix="")
    new_features.add(BatchNorm())
    new_features.add(Activation("relu"))
    new_features.add(Conv2D(bn_size * growth_rate, kernel_size=1, use_bias=False))
    new_features.add(BatchNorm())
    new_features.add(Activation("relu"))
    new_features.add(Conv2D(growth_rate, kernel_size=3, padding=1, use_bias=False))
    if dropout:
        new_features.add(Dropout(dropout))
    out = HybridConcurrent(axis=1, prefix="")
    out.add(Identity())
    out.add(new_features)
    return out


def _make_transition(num_output_features: int) -> HybridSequential:
    out = HybridSequential(prefix="")
    out.add(BatchNorm())
    out.add(Activation("relu"))
    out.add(Conv2D(num_output_features, kernel_size=1, use_bias=False))
    out.add(AvgPool2D(pool_size=2, strides=2))
    return out


class DenseNet(HybridBlock):
    """DenseNet-BC.

    Args:
        num_init_features: channels of the 7x7/2 stem convolution.
        growth_rate: channels each dense layer adds (``k`` in the paper).
        block_config: dense layers per block.
        bn_size: bottleneck width factor (``bn_size * growth_rate`` channels).
        dropout: dropout rate after each dense layer (0: none).
        classes: output classes.

    Example:
        >>> net = DenseNet(64, 32, [6, 12, 24, 16], classes=10)
    """

    def __init__(self, num_init_features: int, growth_rate: int, block_config: list,
                 bn_size: int = 4, dropout: float = 0, classes: int = 1000,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        with self.name_scope():
            self.features = HybridSequential(prefix="")
            self.features.add(Conv2D(num_init_features, kernel_size=7, strides=2, padding=3,
                                     use_bias=False))
            self.features.add(BatchNorm())
            self.features.add(Activation("relu"))
            self.features.add(MaxPool2D(pool_size=3, strides=2, padding=1))
            num_features = num_init_features
            for i, num_layers in enumerate(block_config):
                self.features.add(_make_dense_block(num_layers, bn_size, growth_rate, dropout,
                                                    i + 1))
                num_features += num_layers * growth_rate
                if i != len(block_config) - 1:
                    self.features.add(_make_transition(num_features // 2))
                    num_features //= 2
            self.features.add(BatchNorm())
            self.features.add(Activation("relu"))
            self.features.add(AvgPool2D(pool_size=7))
            self.features.add(Flatten())
            self.output = Dense(classes)

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return self.output(self.features(x))


# depth -> (stem channels, growth rate, layers per dense block)
densenet_spec = {121: (64, 32, [6, 12, 24, 16]),
                 161: (96, 48, [6, 12, 36, 24]),
                 169: (64, 32, [6, 12, 32, 32]),
                 201: (64, 32, [6, 12, 48, 32])}


def get_densenet(num_layers: int, pretrained: bool = False, ctx: Any = None,
                 root: str | None = None, **kwargs: Any) -> DenseNet:
    """A DenseNet of MXNet's model zoo.

    Args:
        num_layers: 121, 161, 169 or 201.
        pretrained: load ``<root>/densenet<num_layers>-<hash>.params`` (never downloaded).
        ctx: the device to load the pretrained parameters on (default the CPU).
        root: the folder of pretrained files (default ``$MXNET_HOME/models``).
        **kwargs: ``bn_size``, ``dropout``, ``classes``, ``prefix``, ``params``.

    Returns:
        The network.
    """
    if num_layers not in densenet_spec:
        raise PortableError(f"Invalid number of layers: {num_layers}. Options are "
                            f"{list(densenet_spec)}")
    num_init_features, growth_rate, block_config = densenet_spec[num_layers]
    net = DenseNet(num_init_features, growth_rate, block_config, **kwargs)
    if pretrained:
        net.load_parameters(get_model_file(f"densenet{num_layers}", root=root), ctx=ctx)
    return net


def _constructor(depth: int) -> Any:
    def build(**kwargs: Any) -> DenseNet:
        return get_densenet(depth, **kwargs)

    build.__name__ = build.__qualname__ = f"densenet{depth}"
    build.__doc__ = (f"DenseNet-BC {depth} (MXNet's ``densenet{depth}``); keyword arguments "
                     f"as :func:`get_densenet`.")
    return build


densenet121 = _constructor(121)
densenet161 = _constructor(161)
densenet169 = _constructor(169)
densenet201 = _constructor(201)
