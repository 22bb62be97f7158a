"""ResNets V1 and V2 (MXNet 1.x ``gluon.model_zoo.vision.resnet``).

V1 is "Deep Residual Learning for Image Recognition" (He et al., 2015, post-activation);
V2 is "Identity Mappings in Deep Residual Networks" (He et al., 2016, pre-activation). The
layer structure, and so the structural parameter names (``features.4.0.body.0.weight``,
``output.bias``), are MXNet's.

Example:
    >>> net = resnet18_v1(classes=10)
    >>> net = ResNetV2(BasicBlockV2, [2, 2, 2, 2], [8, 8, 16, 32, 64], classes=10)
"""
from __future__ import annotations

from typing import Any

from portable.errors import PortableError
from portable.gluon.block import HybridBlock
from portable.gluon.model_zoo.model_store import get_model_file
from portable.gluon.nn import (Activation, BatchNorm, Conv2D, Dense, Flatten, GlobalAvgPool2D,
                               HybridSequential, MaxPool2D)

__all__ = ["ResNetV1", "ResNetV2", "BasicBlockV1", "BasicBlockV2", "BottleneckV1",
           "BottleneckV2", "resnet18_v1", "resnet34_v1", "resnet50_v1", "resnet101_v1",
           "resnet152_v1", "resnet18_v2", "resnet34_v2", "resnet50_v2", "resnet101_v2",
           "resnet152_v2", "get_resnet"]


def _conv3x3(channels: int, stride: int, in_channels: int) -> Conv2D:
    return Conv2D(channels, kernel_size=3, strides=stride, padding=1, use_bias=False,
                  in_channels=in_channels)


def _projection(channels: int, stride: int, in_channels: int) -> HybridSequential:
    """The V1 shortcut when the shape changes: 1x1 convolution + BatchNorm."""
    out = HybridSequential(prefix="")
    out.add(Conv2D(channels, kernel_size=1, strides=stride, use_bias=False,
                   in_channels=in_channels))
    out.add(BatchNorm())
    return out


class BasicBlockV1(HybridBlock):
    """Two 3x3 conv-BN layers plus the shortcut, then ReLU (ResNet-18/34 V1).

    Args:
        channels: output channels.
        stride: stride of the first convolution (and of the projection).
        downsample: project the shortcut with a 1x1 convolution.
        in_channels: input channels (0 infers them).
    """

    def __init__(self, channels: int, stride: int, downsample: bool = False,
                 in_channels: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.body = HybridSequential(prefix="")
        self.body.add(_conv3x3(channels, stride, in_channels))
        self.body.add(BatchNorm())
        self.body.add(Activation("relu"))
        self.body.add(_conv3x3(channels, 1, channels))
        self.body.add(BatchNorm())
        self.downsample = _projection(channels, stride, in_channels) if downsample else None

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        residual = self.downsample(x) if self.downsample is not None else x
        return F.relu(F.add(residual, self.body(x)))


class BottleneckV1(HybridBlock):
    """1x1 (stride) - 3x3 - 1x1 conv-BN layers plus the shortcut, then ReLU (ResNet-50+ V1).

    Args: as BasicBlockV1.
    """

    def __init__(self, channels: int, stride: int, downsample: bool = False,
                 in_channels: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.body = HybridSequential(prefix="")
        # MXNet's V1 bottleneck gives its two 1x1 convolutions a bias: kept for the names.
        self.body.add(Conv2D(channels // 4, kernel_size=1, strides=stride))
        self.body.add(BatchNorm())
        self.body.add(Activation("relu"))
        self.body.add(_conv3x3(channels // 4, 1, channels // 4))
        self.body.add(BatchNorm())
        self.body.add(Activation("relu"))
        self.body.add(Conv2D(channels, kernel_size=1, strides=1))
        self.body.add(BatchNorm())
        self.downsample = _projection(channels, stride, in_channels) if downsample else None

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        residual = self.downsample(x) if self.downsample is not None else x
        return F.relu(F.add(self.body(x), residual))


class BasicBlockV2(HybridBlock):
    """Pre-activation basic block: BN-ReLU-conv3x3, BN-ReLU-conv3x3, plus the shortcut
    (ResNet-18/34 V2).

    Args: as BasicBlockV1.
    """

    def __init__(self, channels: int, stride: int, downsample: bool = False,
                 in_channels: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bn1 = BatchNorm()
        self.conv1 = _conv3x3(channels, stride, in_channels)
        self.bn2 = BatchNorm()
        self.conv2 = _conv3x3(channels, 1, channels)
        self.downsample = Conv2D(channels, 1, stride, use_bias=False,
                                 in_channels=in_channels) if downsample else None

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        residual = x
        x = F.relu(self.bn1(x))
        if self.downsample is not None:
            residual = self.downsample(x)  # V2 projects the pre-activated input
        x = self.conv2(F.relu(self.bn2(self.conv1(x))))
        return F.add(x, residual)


class BottleneckV2(HybridBlock):
    """Pre-activation bottleneck: BN-ReLU-conv1x1, BN-ReLU-conv3x3 (stride), BN-ReLU-conv1x1,
    plus the shortcut (ResNet-50+ V2).

    Args: as BasicBlockV1.
    """

    def __init__(self, channels: int, stride: int, downsample: bool = False,
                 in_channels: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bn1 = BatchNorm()
        self.conv1 = Conv2D(channels // 4, kernel_size=1, strides=1, use_bias=False)
        self.bn2 = BatchNorm()
        self.conv2 = _conv3x3(channels // 4, stride, channels // 4)
        self.bn3 = BatchNorm()
        self.conv3 = Conv2D(channels, kernel_size=1, strides=1, use_bias=False)
        self.downsample = Conv2D(channels, 1, stride, use_bias=False,
                                 in_channels=in_channels) if downsample else None

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        residual = x
        x = F.relu(self.bn1(x))
        if self.downsample is not None:
            residual = self.downsample(x)
        x = F.relu(self.bn2(self.conv1(x)))
        x = F.relu(self.bn3(self.conv2(x)))
        return F.add(self.conv3(x), residual)


def _make_layer(block: type, layers: int, channels: int, stride: int, stage_index: int,
                in_channels: int) -> HybridSequential:
    """One stage: ``layers`` blocks, the first one striding (and projecting if needed)."""
    layer = HybridSequential(prefix=f"stage{stage_index}_")
    with layer.name_scope():
        layer.add(block(channels, stride, channels != in_channels, in_channels=in_channels,
                        prefix=""))
        for _ in range(layers - 1):
            layer.add(block(channels, 1, False, in_channels=channels, prefix=""))
    return layer


def _add_stem(features: HybridSequential, channels: int, thumbnail: bool) -> None:
    """The stem both ResNet versions share: a 3x3 conv for small images (thumbnail), else a
    strided 7x7 conv, BatchNorm, ReLU and a 3x3 max pool."""
    if thumbnail:
        features.add(_conv3x3(channels, 1, 0))
    else:
        features.add(Conv2D(channels, 7, 2, 3, use_bias=False))
        features.add(BatchNorm())
        features.add(Activation("relu"))
        features.add(MaxPool2D(3, 2, 1))


def _check_spec(layers: list, channels: list) -> None:
    if len(layers) != len(channels) - 1:
        raise PortableError(f"ResNet: channels must have one entry more than layers, got "
                            f"layers={list(layers)} and channels={list(channels)}")


class ResNetV1(HybridBlock):
    """ResNet V1: a stem (7x7/2 conv-BN-ReLU + 3x3/2 max pool, or a 3x3 conv for
    ``thumbnail``), one stage per ``layers`` entry, global average pooling, a Dense output.

    Args:
        block: BasicBlockV1 or BottleneckV1.
        layers: blocks per stage.
        channels: stem channels followed by each stage's channels (one more than layers).
        classes: output classes.
        thumbnail: the small-image stem (3x3 conv, no pooling), for 32x32 inputs.

    Example:
        >>> net = ResNetV1(BasicBlockV1, [2, 2, 2, 2], [64, 64, 128, 256, 512])
    """

    def __init__(self, block: type, layers: list, channels: list, classes: int = 1000,
                 thumbnail: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _check_spec(layers, channels)
        with self.name_scope():
            self.features = HybridSequential(prefix="")
            _add_stem(self.features, channels[0], thumbnail)
            for i, num_layer in enumerate(layers):
                self.features.add(_make_layer(block, num_layer, channels[i + 1],
                                              1 if i == 0 else 2, i + 1, channels[i]))
            self.features.add(GlobalAvgPool2D())
            self.output = Dense(classes, in_units=channels[-1])

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return self.output(self.features(x))


class ResNetV2(HybridBlock):
    """ResNet V2: an input BatchNorm (no scale or shift), the stem, pre-activation stages, a
    final BN-ReLU, global average pooling, Flatten and a Dense output.

    Args: as ResNetV1, with ``block`` BasicBlockV2 or BottleneckV2.

    Example:
        >>> net = ResNetV2(BottleneckV2, [3, 4, 6, 3], [64, 256, 512, 1024, 2048])
    """

    def __init__(self, block: type, layers: list, channels: list, classes: int = 1000,
                 thumbnail: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _check_spec(layers, channels)
        with self.name_scope():
            self.features = HybridSequential(prefix="")
            self.features.add(BatchNorm(scale=False, center=False))
            _add_stem(self.features, channels[0], thumbnail)
            in_channels = channels[0]
            for i, num_layer in enumerate(layers):
                self.features.add(_make_layer(block, num_layer, channels[i + 1],
                                              1 if i == 0 else 2, i + 1, in_channels))
                in_channels = channels[i + 1]
            self.features.add(BatchNorm())
            self.features.add(Activation("relu"))
            self.features.add(GlobalAvgPool2D())
            self.features.add(Flatten())
            self.output = Dense(classes, in_units=in_channels)

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return self.output(self.features(x))


# depth -> (block kind, blocks per stage, channels)
resnet_spec = {18: ("basic_block", [2, 2, 2, 2], [64, 64, 128, 256, 512]),
               34: ("basic_block", [3, 4, 6, 3], [64, 64, 128, 256, 512]),
               50: ("bottle_neck", [3, 4, 6, 3], [64, 256, 512, 1024, 2048]),
               101: ("bottle_neck", [3, 4, 23, 3], [64, 256, 512, 1024, 2048]),
               152: ("bottle_neck", [3, 8, 36, 3], [64, 256, 512, 1024, 2048])}
resnet_net_versions = [ResNetV1, ResNetV2]
resnet_block_versions = [{"basic_block": BasicBlockV1, "bottle_neck": BottleneckV1},
                         {"basic_block": BasicBlockV2, "bottle_neck": BottleneckV2}]


def get_resnet(version: int, num_layers: int, pretrained: bool = False, ctx: Any = None,
               root: str | None = None, **kwargs: Any) -> HybridBlock:
    """A ResNet of MXNet's model zoo.

    Args:
        version: 1 or 2.
        num_layers: 18, 34, 50, 101 or 152.
        pretrained: load ``<root>/resnet<num_layers>_v<version>-<hash>.params`` (never
            downloaded: an error names the file if it is missing).
        ctx: the device to load the pretrained parameters on (default the CPU).
        root: the folder of pretrained files (default ``$MXNET_HOME/models``).
        **kwargs: ``classes``, ``thumbnail``, ``prefix``, ``params``.

    Returns:
        The network (parameters uninitialised unless ``pretrained``).

    Example:
        >>> net = get_resnet(1, 18, classes=10)
    """
    if num_layers not in resnet_spec:
        raise PortableError(f"Invalid number of layers: {num_layers}. Options are "
                            f"{list(resnet_spec)}")
    if version not in (1, 2):
        raise PortableError(f"Invalid resnet version: {version}. Options are 1 and 2.")
    block_type, layers, channels = resnet_spec[num_layers]
    block_class = resnet_block_versions[version - 1][block_type]
    net = resnet_net_versions[version - 1](block_class, layers, channels, **kwargs)
    if pretrained:
        net.load_parameters(get_model_file(f"resnet{num_layers}_v{version}", root=root),
                            ctx=ctx)
    return net


def _constructor(version: int, depth: int) -> Any:
    def build(**kwargs: Any) -> HybridBlock:
        return get_resnet(version, depth, **kwargs)

    build.__name__ = build.__qualname__ = f"resnet{depth}_v{version}"
    build.__doc__ = (f"ResNet-{depth} V{version} (MXNet's ``{build.__name__}``); keyword "
                     f"arguments as :func:`get_resnet` (``pretrained``, ``ctx``, ``root``, "
                     f"``classes``, ``thumbnail``).")
    return build


resnet18_v1 = _constructor(1, 18)
resnet34_v1 = _constructor(1, 34)
resnet50_v1 = _constructor(1, 50)
resnet101_v1 = _constructor(1, 101)
resnet152_v1 = _constructor(1, 152)
resnet18_v2 = _constructor(2, 18)
resnet34_v2 = _constructor(2, 34)
resnet50_v2 = _constructor(2, 50)
resnet101_v2 = _constructor(2, 101)
resnet152_v2 = _constructor(2, 152)
