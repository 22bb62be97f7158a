"""MXNet 1.x's vision model zoo (``gluon.model_zoo.vision``): ResNet V1/V2, VGG, AlexNet,
DenseNet, SqueezeNet, Inception v3, MobileNet and MobileNetV2, with MXNet's architectures and
structural parameter names, so ``load_parameters`` reads MXNet's files by name.

``get_model(name, **kwargs)`` builds one by its model-zoo name; every constructor takes
``classes``, and ``pretrained=True`` (with ``ctx`` and ``root``) loads the published parameter
file from ``root`` (default ``~/.mxnet/models``), never downloading it.

Example:
    >>> from portable.gluon.model_zoo import vision
    >>> net = vision.get_model("mobilenet0.25", classes=10)
    >>> net.initialize()
"""
from __future__ import annotations

from typing import Any, Callable

from portable.gluon.block import HybridBlock
from portable.gluon.model_zoo.vision.alexnet import AlexNet, alexnet
from portable.gluon.model_zoo.vision.densenet import (DenseNet, densenet121, densenet161,
                                                      densenet169, densenet201, get_densenet)
from portable.gluon.model_zoo.vision.inception import Inception3, inception_v3
from portable.gluon.model_zoo.vision.mobilenet import (MobileNet, MobileNetV2, get_mobilenet,
                                                       get_mobilenet_v2, mobilenet0_5,
                                                       mobilenet0_25, mobilenet0_75,
                                                       mobilenet1_0, mobilenet_v2_0_5,
                                                       mobilenet_v2_0_25, mobilenet_v2_0_75,
                                                       mobilenet_v2_1_0)
from portable.gluon.model_zoo.vision.resnet import (BasicBlockV1, BasicBlockV2, BottleneckV1,
                                                    BottleneckV2, ResNetV1, ResNetV2,
                                                    get_resnet, resnet18_v1, resnet18_v2,
                                                    resnet34_v1, resnet34_v2, resnet50_v1,
                                                    resnet50_v2, resnet101_v1, resnet101_v2,
                                                    resnet152_v1, resnet152_v2)
from portable.gluon.model_zoo.vision.squeezenet import (SqueezeNet, get_squeezenet,
                                                        squeezenet1_0, squeezenet1_1)
from portable.gluon.model_zoo.vision.vgg import (VGG, get_vgg, vgg11, vgg11_bn, vgg13,
                                                 vgg13_bn, vgg16, vgg16_bn, vgg19, vgg19_bn)

__all__ = ["get_model", "AlexNet", "alexnet", "DenseNet", "densenet121", "densenet161",
           "densenet169", "densenet201", "get_densenet", "Inception3", "inception_v3",
           "MobileNet", "MobileNetV2", "get_mobilenet", "get_mobilenet_v2", "mobilenet1_0",
           "mobilenet0_75", "mobilenet0_5", "mobilenet0_25", "mobilenet_v2_1_0",
           "mobilenet_v2_0_75", "mobilenet_v2_0_5", "mobilenet_v2_0_25", "BasicBlockV1",
           "BasicBlockV2", "BottleneckV1", "BottleneckV2", "ResNetV1", "ResNetV2", "get_resnet",
           "resnet18_v1", "resnet34_v1", "resnet50_v1", "resnet101_v1", "resnet152_v1",
           "resnet18_v2", "resnet34_v2", "resnet50_v2", "resnet101_v2", "resnet152_v2",
           "SqueezeNet", "get_squeezenet", "squeezenet1_0", "squeezenet1_1", "VGG", "get_vgg",
           "vgg11", "vgg13", "vgg16", "vgg19", "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn"]

# MXNet's model-zoo names (the names of the pretrained files too)
MODELS: dict[str, Callable[..., HybridBlock]] = {
    "resnet18_v1": resnet18_v1, "resnet34_v1": resnet34_v1, "resnet50_v1": resnet50_v1,
    "resnet101_v1": resnet101_v1, "resnet152_v1": resnet152_v1,
    "resnet18_v2": resnet18_v2, "resnet34_v2": resnet34_v2, "resnet50_v2": resnet50_v2,
    "resnet101_v2": resnet101_v2, "resnet152_v2": resnet152_v2,
    "vgg11": vgg11, "vgg13": vgg13, "vgg16": vgg16, "vgg19": vgg19,
    "vgg11_bn": vgg11_bn, "vgg13_bn": vgg13_bn, "vgg16_bn": vgg16_bn, "vgg19_bn": vgg19_bn,
    "alexnet": alexnet,
    "densenet121": densenet121, "densenet161": densenet161, "densenet169": densenet169,
    "densenet201": densenet201,
    "squeezenet1.0": squeezenet1_0, "squeezenet1.1": squeezenet1_1,
    "inceptionv3": inception_v3,
    "mobilenet1.0": mobilenet1_0, "mobilenet0.75": mobilenet0_75,
    "mobilenet0.5": mobilenet0_5, "mobilenet0.25": mobilenet0_25,
    "mobilenetv2_1.0": mobilenet_v2_1_0, "mobilenetv2_0.75": mobilenet_v2_0_75,
    "mobilenetv2_0.5": mobilenet_v2_0_5, "mobilenetv2_0.25": mobilenet_v2_0_25,
}


def get_model(name: str, **kwargs: Any) -> HybridBlock:
    """A model of the zoo by its MXNet name (case-insensitive).

    Args:
        name: ``'resnet18_v1'``, ``'vgg16_bn'``, ``'squeezenet1.1'``, ``'inceptionv3'``,
            ``'mobilenet0.25'``, ``'mobilenetv2_1.0'``... (see ``MODELS``).
        **kwargs: the constructor's: ``pretrained``, ``ctx``, ``root``, ``classes``...

    Returns:
        The network.

    Raises:
        ValueError: unknown name (the message lists the known ones, as MXNet's does).

    Example:
        >>> net = get_model("resnet18_v1", classes=10)
    """
    key = name.lower()
    if key not in MODELS:
        options = "\n\t".join(sorted(MODELS))
        raise ValueError(f"Model {key} is not supported. Available options are\n\t{options}")
    return MODELS[key](**kwargs)
