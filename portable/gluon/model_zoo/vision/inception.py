"""Inception v3 (MXNet 1.x ``gluon.model_zoo.vision.inception``), from "Rethinking the Inception
Architecture for Computer Vision" (Szegedy et al., 2015); 299x299 inputs.

The mixed blocks are HybridConcurrents of branches; each branch is an optional pool followed by
conv-BN(eps 1e-3)-ReLU units, written as (channels, kernel, stride, padding) settings where
None keeps the Conv2D default. The auxiliary classifier of the paper is not part of the net
(``make_aux`` builds it, as in MXNet).

Example:
    >>> net = inception_v3(classes=10)
"""
from __future__ import annotations

from typing import Any

from portable.gluon.block import HybridBlock
from portable.gluon.model_zoo.model_store import get_model_file
from portable.gluon.contrib.nn import HybridConcurrent
from portable.gluon.nn import (Activation, AvgPool2D, BatchNorm, Conv2D, Dense, Dropout, Flatten,
                               HybridSequential, MaxPool2D)

__all__ = ["Inception3", "inception_v3", "make_aux"]

_SETTING_NAMES = ("channels", "kernel_size", "strides", "padding")


def _make_basic_conv(**kwargs: Any) -> HybridSequential:
    out = HybridSequential(prefix="")
    out.add(Conv2D(use_bias=False, **kwargs))
    out.add(BatchNorm(epsilon=0.001))
    out.add(Activation("relu"))
    return out


def _make_branch(use_pool: str | None, *conv_settings: tuple) -> HybridSequential:
    out = HybridSequential(prefix="")
    if use_pool == "avg":
        out.add(AvgPool2D(pool_size=3, strides=1, padding=1))
    elif use_pool == "max":
        out.add(MaxPool2D(pool_size=3, strides=2))
    for setting in conv_settings:
        kwargs = {name: value for name, value in zip(_SETTING_NAMES, setting)
                  if value is not None}
        out.add(_make_basic_conv(**kwargs))
    return out


def _concurrent(prefix: str, *branches: tuple) -> HybridConcurrent:
    """A mixed block: each branch is ``(use_pool, *conv_settings)``."""
    out = HybridConcurrent(axis=1, prefix=prefix)
    with out.name_scope():
        for branch in branches:
            out.add(_make_branch(*branch))
    return out


def _make_A(pool_features: int, prefix: str) -> HybridConcurrent:
    return _concurrent(prefix,
                       (None, (64, 1, None, None)),
                       (None, (48, 1, None, None), (64, 5, None, 2)),
                       (None, (64, 1, None, None), (96, 3, None, 1), (96, 3, None, 1)),
                       ("avg", (pool_features, 1, None, None)))


def _make_B(prefix: str) -> HybridConcurrent:
    return _concurrent(prefix,
                       (None, (384, 3, 2, None)),
                       (None, (64, 1, None, None), (96, 3, None, 1), (96, 3, 2, None)),
                       ("max",))


def _make_C(channels_7x7: int, prefix: str) -> HybridConcurrent:
    c = channels_7x7
    return _concurrent(prefix,
                       (None, (192, 1, None, None)),
                       (None, (c, 1, None, None), (c, (1, 7), None, (0, 3)),
                        (192, (7, 1), None, (3, 0))),
                       (None, (c, 1, None, None), (c, (7, 1), None, (3, 0)),
                        (c, (1, 7), None, (0, 3)), (c, (7, 1), None, (3, 0)),
                        (192, (1, 7), None, (0, 3))),
                       ("avg", (192, 1, None, None)))


def _make_D(prefix: str) -> HybridConcurrent:
    return _concurrent(prefix,
                       (None, (192, 1, None, None), (320, 3, 2, None)),
                       (None, (192, 1, None, None), (192, (1, 7), None, (0, 3)),
                        (192, (7, 1), None, (3, 0)), (192, 3, 2, None)),
                       ("max",))


def _split_3x3(first: HybridSequential) -> HybridSequential:
    """``first``, then 1x3 and 3x1 convolutions side by side (the E block's split)."""
    out = HybridSequential(prefix="")
    out.add(first)
    split = HybridConcurrent(axis=1, prefix="")
    split.add(_make_branch(None, (384, (1, 3), None, (0, 1))))
    split.add(_make_branch(None, (384, (3, 1), None, (1, 0))))
    out.add(split)
    return out


def _make_E(prefix: str) -> HybridConcurrent:
    out = HybridConcurrent(axis=1, prefix=prefix)
    with out.name_scope():
        out.add(_make_branch(None, (320, 1, None, None)))
        out.add(_split_3x3(_make_branch(None, (384, 1, None, None))))
        out.add(_split_3x3(_make_branch(None, (448, 1, None, None), (384, 3, None, 1))))
        out.add(_make_branch("avg", (192, 1, None, None)))
    return out


def make_aux(classes: int) -> HybridSequential:
    """The auxiliary classifier head of Inception v3 (not used by :class:`Inception3`)."""
    out = HybridSequential(prefix="")
    out.add(AvgPool2D(pool_size=5, strides=3))
    out.add(_make_basic_conv(channels=128, kernel_size=1))
    out.add(_make_basic_conv(channels=768, kernel_size=5))
    out.add(Flatten())
    out.add(Dense(classes))
    return out


class Inception3(HybridBlock):
    """Inception v3 for 299x299 inputs.

    Args:
        classes: output classes.

    Example:
        >>> net = Inception3(classes=10)
    """

    def __init__(self, classes: int = 1000, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        with self.name_scope():
            self.features = HybridSequential(prefix="")
            self.features.add(_make_basic_conv(channels=32, kernel_size=3, strides=2))
            self.features.add(_make_basic_conv(channels=32, kernel_size=3))
            self.features.add(_make_basic_conv(channels=64, kernel_size=3, padding=1))
            self.features.add(MaxPool2D(pool_size=3, strides=2))
            self.features.add(_make_basic_conv(channels=80, kernel_size=1))
            self.features.add(_make_basic_conv(channels=192, kernel_size=3))
            self.features.add(MaxPool2D(pool_size=3, strides=2))
            self.features.add(_make_A(32, "A1_"))
            self.features.add(_make_A(64, "A2_"))
            self.features.add(_make_A(64, "A3_"))
            self.features.add(_make_B("B_"))
            self.features.add(_make_C(128, "C1_"))
            self.features.add(_make_C(160, "C2_"))
            self.features.add(_make_C(160, "C3_"))
            self.features.add(_make_C(192, "C4_"))
            self.features.add(_make_D("D_"))
            self.features.add(_make_E("E1_"))
            self.features.add(_make_E("E2_"))
            self.features.add(AvgPool2D(pool_size=8))
            self.features.add(Dropout(0.5))
            self.output = Dense(classes)

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return self.output(self.features(x))


def inception_v3(pretrained: bool = False, ctx: Any = None, root: str | None = None,
                 **kwargs: Any) -> Inception3:
    """Inception v3 of MXNet's model zoo (model-zoo name ``'inceptionv3'``).

    Args:
        pretrained: load ``<root>/inceptionv3-ed47ec45.params`` (never downloaded).
        ctx: the device to load the pretrained parameters on (default the CPU).
        root: the folder of pretrained files (default ``$MXNET_HOME/models``).
        **kwargs: ``classes``, ``prefix``, ``params``.

    Returns:
        The network.
    """
    net = Inception3(**kwargs)
    if pretrained:
        net.load_parameters(get_model_file("inceptionv3", root=root), ctx=ctx)
    return net
