"""SqueezeNet 1.0 and 1.1 (MXNet 1.x ``gluon.model_zoo.vision.squeezenet``), from
"SqueezeNet: AlexNet-level accuracy with 50x fewer parameters and <0.5MB model size"
(Iandola et al., 2016); 1.1 is the official repository's cheaper variant.

Example:
    >>> net = squeezenet1_1(classes=10)
"""
from __future__ import annotations

from typing import Any

from portable.errors import PortableError
from portable.gluon.block import HybridBlock
from portable.gluon.model_zoo.model_store import get_model_file
from portable.gluon.contrib.nn import HybridConcurrent
from portable.gluon.nn import (Activation, AvgPool2D, Conv2D, Dropout, Flatten,
                               HybridSequential, MaxPool2D)

__all__ = ["SqueezeNet", "squeezenet1_0", "squeezenet1_1"]

# (squeeze, expand 1x1, expand 3x3) channels of the fire modules, "pool" for a 3x3/2 max pool
_FIRES = {"1.0": [(16, 64, 64), (16, 64, 64), (32, 128, 128), "pool", (32, 128, 128),
                  (48, 192, 192), (48, 192, 192), (64, 256, 256), "pool", (64, 256, 256)],
          "1.1": [(16, 64, 64), (16, 64, 64), "pool", (32, 128, 128), (32, 128, 128), "pool",
                  (48, 192, 192), (48, 192, 192), (64, 256, 256), (64, 256, 256)]}


def _make_fire_conv(channels: int, kernel_size: int, padding: int = 0) -> HybridSequential:
    out = HybridSequential(prefix="")
    out.add(Conv2D(channels, kernel_size, padding=padding))
    out.add(Activation("relu"))
    return out


def _make_fire(squeeze: int, expand1x1: int, expand3x3: int) -> HybridSequential:
    """A fire module: a 1x1 squeeze, then 1x1 and 3x3 expansions concatenated."""
    out = HybridSequential(prefix="")
    out.add(_make_fire_conv(squeeze, 1))
    paths = HybridConcurrent(axis=1, prefix="")
    paths.add(_make_fire_conv(expand1x1, 1))
    paths.add(_make_fire_conv(expand3x3, 3, 1))
    out.add(paths)
    return out


def _pool() -> MaxPool2D:
    return MaxPool2D(pool_size=3, strides=2, ceil_mode=True)


class SqueezeNet(HybridBlock):
    """SqueezeNet: a stem convolution, fire modules with max pools, Dropout(0.5), and a 1x1
    convolution per class with ReLU averaged over a 13x13 map (224x224 inputs).

    Args:
        version: ``'1.0'`` or ``'1.1'``.
        classes: output classes.

    Example:
        >>> net = SqueezeNet("1.1", classes=10)
    """

    def __init__(self, version: str, classes: int = 1000, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if version not in _FIRES:
            raise PortableError(f"Unsupported SqueezeNet version {version}: 1.0 or 1.1 "
                                f"expected")
        with self.name_scope():
            self.features = HybridSequential(prefix="")
            if version == "1.0":
                self.features.add(Conv2D(96, kernel_size=7, strides=2))
            else:
                self.features.add(Conv2D(64, kernel_size=3, strides=2))
            self.features.add(Activation("relu"))
            self.features.add(_pool())
            for fire in _FIRES[version]:
                self.features.add(_pool() if fire == "pool" else _make_fire(*fire))
            self.features.add(Dropout(0.5))
            self.output = HybridSequential(prefix="")
            self.output.add(Conv2D(classes, kernel_size=1))
            self.output.add(Activation("relu"))
            self.output.add(AvgPool2D(13))
            self.output.add(Flatten())

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return self.output(self.features(x))


def get_squeezenet(version: str, pretrained: bool = False, ctx: Any = None,
                   root: str | None = None, **kwargs: Any) -> SqueezeNet:
    """A SqueezeNet of MXNet's model zoo.

    Args:
        version: ``'1.0'`` or ``'1.1'``.
        pretrained: load ``<root>/squeezenet<version>-<hash>.params`` (never downloaded).
        ctx: the device to load the pretrained parameters on (default the CPU).
        root: the folder of pretrained files (default ``$MXNET_HOME/models``).
        **kwargs: ``classes``, ``prefix``, ``params``.

    Returns:
        The network.
    """
    net = SqueezeNet(version, **kwargs)
    if pretrained:
        net.load_parameters(get_model_file(f"squeezenet{version}", root=root), ctx=ctx)
    return net


def squeezenet1_0(**kwargs: Any) -> SqueezeNet:
    """SqueezeNet 1.0 (MXNet's ``squeezenet1_0``); keyword arguments as
    :func:`get_squeezenet`."""
    return get_squeezenet("1.0", **kwargs)


def squeezenet1_1(**kwargs: Any) -> SqueezeNet:
    """SqueezeNet 1.1 (MXNet's ``squeezenet1_1``); keyword arguments as
    :func:`get_squeezenet`."""
    return get_squeezenet("1.1", **kwargs)
