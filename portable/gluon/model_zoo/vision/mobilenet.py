"""MobileNet and MobileNetV2 (MXNet 1.x ``gluon.model_zoo.vision.mobilenet``), from
"MobileNets: Efficient Convolutional Neural Networks for Mobile Vision Applications" (Howard et
al., 2017) and "Inverted Residuals and Linear Bottlenecks" (Sandler et al., 2018).

``multiplier`` scales every layer's channels (``int(c * multiplier)``, as MXNet truncates).

Example:
    >>> net = mobilenet0_25(classes=10)
    >>> net = mobilenet_v2_0_5()
"""
from __future__ import annotations

from typing import Any

from portable.gluon.block import HybridBlock
from portable.gluon.model_zoo.model_store import get_model_file
from portable.gluon.nn import (Activation, BatchNorm, Conv2D, Dense, Flatten, GlobalAvgPool2D,
                               HybridSequential)

__all__ = ["MobileNet", "MobileNetV2", "mobilenet1_0", "mobilenet_v2_1_0", "mobilenet0_75",
           "mobilenet_v2_0_75", "mobilenet0_5", "mobilenet_v2_0_5", "mobilenet0_25",
           "mobilenet_v2_0_25", "get_mobilenet", "get_mobilenet_v2"]


class RELU6(HybridBlock):
    """``min(max(x, 0), 6)``, the activation of MobileNetV2."""

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return F.clip(x, 0.0, 6.0)


def _add_conv(out: HybridSequential, channels: int = 1, kernel: int = 1, stride: int = 1,
              pad: int = 0, num_group: int = 1, active: bool = True,
              relu6: bool = False) -> None:
    """Append conv (no bias) - BN - ReLU/ReLU6 (no activation when ``active`` is False)."""
    out.add(Conv2D(channels, kernel, stride, pad, groups=num_group, use_bias=False))
    out.add(BatchNorm(scale=True))
    if active:
        out.add(RELU6() if relu6 else Activation("relu"))


def _add_conv_dw(out: HybridSequential, dw_channels: int, channels: int, stride: int,
                 relu6: bool = False) -> None:
    """Append a depthwise 3x3 convolution and a pointwise 1x1 one."""
    _add_conv(out, channels=dw_channels, kernel=3, stride=stride, pad=1,
              num_group=dw_channels, relu6=relu6)
    _add_conv(out, channels=channels, relu6=relu6)


class LinearBottleneck(HybridBlock):
    """MobileNetV2's inverted residual: expand 1x1 (x t), depthwise 3x3 (stride), linear
    project 1x1, plus the input when the shapes allow.

    Args:
        in_channels: input channels.
        channels: output channels.
        t: expansion ratio.
        stride: stride of the depthwise convolution.
    """

    def __init__(self, in_channels: int, channels: int, t: int, stride: int,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.use_shortcut = stride == 1 and in_channels == channels
        with self.name_scope():
            self.out = HybridSequential()
            _add_conv(self.out, in_channels * t, relu6=True)
            _add_conv(self.out, in_channels * t, kernel=3, stride=stride, pad=1,
                      num_group=in_channels * t, relu6=True)
            _add_conv(self.out, channels, active=False, relu6=True)

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        out = self.out(x)
        return F.add(out, x) if self.use_shortcut else out


class MobileNet(HybridBlock):
    """MobileNet (v1): a 3x3/2 stem, 13 depthwise-separable layers, global average pooling
    and a Dense output.

    Args:
        multiplier: channel width multiplier (at least 0.25).
        classes: output classes.

    Example:
        >>> net = MobileNet(0.5, classes=10)
    """

    def __init__(self, multiplier: float = 1.0, classes: int = 1000, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        with self.name_scope():
            self.features = HybridSequential(prefix="")
            with self.features.name_scope():
                _add_conv(self.features, channels=int(32 * multiplier), kernel=3, pad=1,
                          stride=2)
                dw_channels = [int(x * multiplier) for x in
                               [32, 64] + [128] * 2 + [256] * 2 + [512] * 6 + [1024]]
                channels = [int(x * multiplier) for x in
                            [64] + [128] * 2 + [256] * 2 + [512] * 6 + [1024] * 2]
                strides = [1, 2] * 3 + [1] * 5 + [2, 1]
                for dwc, c, s in zip(dw_channels, channels, strides):
                    _add_conv_dw(self.features, dw_channels=dwc, channels=c, stride=s)
                self.features.add(GlobalAvgPool2D())
                self.features.add(Flatten())
            self.output = Dense(classes)

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return self.output(self.features(x))


class MobileNetV2(HybridBlock):
    """MobileNetV2: a 3x3/2 stem, 17 linear bottlenecks, a 1x1 conv to 1280 channels (more
    for multipliers above 1), global average pooling, and a 1x1 conv (no bias) per class.

    Args:
        multiplier: channel width multiplier.
        classes: output classes.

    Example:
        >>> net = MobileNetV2(0.25, classes=10)
    """

    def __init__(self, multiplier: float = 1.0, classes: int = 1000, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        with self.name_scope():
            self.features = HybridSequential(prefix="features_")
            with self.features.name_scope():
                _add_conv(self.features, int(32 * multiplier), kernel=3, stride=2, pad=1,
                          relu6=True)
                in_channels_group = [int(x * multiplier) for x in
                                     [32] + [16] + [24] * 2 + [32] * 3 + [64] * 4 + [96] * 3
                                     + [160] * 3]
                channels_group = [int(x * multiplier) for x in
                                  [16] + [24] * 2 + [32] * 3 + [64] * 4 + [96] * 3 + [160] * 3
                                  + [320]]
                ts = [1] + [6] * 16
                strides = [1, 2] * 2 + [1, 1, 2] + [1] * 6 + [2] + [1] * 3
                for in_c, c, t, s in zip(in_channels_group, channels_group, ts, strides):
                    self.features.add(LinearBottleneck(in_channels=in_c, channels=c, t=t,
                                                       stride=s))
                last_channels = int(1280 * multiplier) if multiplier > 1.0 else 1280
                _add_conv(self.features, last_channels, relu6=True)
                self.features.add(GlobalAvgPool2D())
            self.output = HybridSequential(prefix="output_")
            with self.output.name_scope():
                self.output.add(Conv2D(classes, 1, use_bias=False, prefix="pred_"), Flatten())

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return self.output(self.features(x))


def _version_suffix(multiplier: float) -> str:
    """MXNet's file-name spelling of a multiplier: 1.0, 0.75, 0.5, 0.25."""
    suffix = f"{multiplier:.2f}"
    return suffix[:-1] if suffix in ("1.00", "0.50") else suffix


def get_mobilenet(multiplier: float, pretrained: bool = False, ctx: Any = None,
                  root: str | None = None, **kwargs: Any) -> MobileNet:
    """A MobileNet of MXNet's model zoo.

    Args:
        multiplier: channel width multiplier (1.0, 0.75, 0.5, 0.25 have pretrained files).
        pretrained: load ``<root>/mobilenet<multiplier>-<hash>.params`` (never downloaded).
        ctx: the device to load the pretrained parameters on (default the CPU).
        root: the folder of pretrained files (default ``$MXNET_HOME/models``).
        **kwargs: ``classes``, ``prefix``, ``params``.

    Returns:
        The network.
    """
    net = MobileNet(multiplier, **kwargs)
    if pretrained:
        net.load_parameters(get_model_file(f"mobilenet{_version_suffix(multiplier)}",
                                           root=root), ctx=ctx)
    return net


def get_mobilenet_v2(multiplier: float, pretrained: bool = False, ctx: Any = None,
                     root: str | None = None, **kwargs: Any) -> MobileNetV2:
    """A MobileNetV2 of MXNet's model zoo.

    Args:
        multiplier: channel width multiplier (1.0, 0.75, 0.5, 0.25 have pretrained files).
        pretrained: load ``<root>/mobilenetv2_<multiplier>-<hash>.params`` (never
            downloaded).
        ctx: the device to load the pretrained parameters on (default the CPU).
        root: the folder of pretrained files (default ``$MXNET_HOME/models``).
        **kwargs: ``classes``, ``prefix``, ``params``.

    Returns:
        The network.
    """
    net = MobileNetV2(multiplier, **kwargs)
    if pretrained:
        net.load_parameters(get_model_file(f"mobilenetv2_{_version_suffix(multiplier)}",
                                           root=root), ctx=ctx)
    return net


def _constructor(multiplier: float, version: int) -> Any:
    getter = get_mobilenet if version == 1 else get_mobilenet_v2

    def build(**kwargs: Any) -> HybridBlock:
        return getter(multiplier, **kwargs)

    digits = str(multiplier).replace(".", "_")
    build.__name__ = build.__qualname__ = (f"mobilenet{digits}" if version == 1
                                           else f"mobilenet_v2_{digits}")
    build.__doc__ = (f"{'MobileNet' if version == 1 else 'MobileNetV2'} with width "
                     f"multiplier {multiplier} (MXNet's ``{build.__name__}``); keyword "
                     f"arguments as :func:`{getter.__name__}`.")
    return build


mobilenet1_0 = _constructor(1.0, 1)
mobilenet0_75 = _constructor(0.75, 1)
mobilenet0_5 = _constructor(0.5, 1)
mobilenet0_25 = _constructor(0.25, 1)
mobilenet_v2_1_0 = _constructor(1.0, 2)
mobilenet_v2_0_75 = _constructor(0.75, 2)
mobilenet_v2_0_5 = _constructor(0.5, 2)
mobilenet_v2_0_25 = _constructor(0.25, 2)
