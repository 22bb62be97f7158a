"""ImageNet-style ResNet and VGG networks written with the Symbol API, for memory planning and
benchmarks (He et al. 2016; Simonyan and Zisserman 2015), and the table of built-in models that
``portable memory`` accepts by name.

Example:
    >>> net = resnet(18, num_classes=10)
    >>> net.infer_shape(data=(2, 3, 32, 32))[1]
    [(2, 10)]
"""
from __future__ import annotations

from typing import Callable

from portable import symbol as sym
from portable.errors import PortableError

# depth -> (bottleneck blocks?, blocks per stage)
RESNET_STAGES = {18: (False, (2, 2, 2, 2)), 34: (False, (3, 4, 6, 3)),
                 50: (True, (3, 4, 6, 3)), 101: (True, (3, 4, 23, 3))}
# depth -> convolutions per stage (64, 128, 256, 512, 512 filters)
VGG_STAGES = {11: (1, 1, 2, 2, 2), 13: (2, 2, 2, 2, 2), 16: (2, 2, 3, 3, 3),
              19: (2, 2, 4, 4, 4)}


def _conv_bn(x: sym.Symbol, filters: int, kernel: int, stride: int, name: str,
             relu: bool = True) -> sym.Symbol:
    x = sym.Convolution(x, kernel=(kernel, kernel), num_filter=filters, stride=(stride, stride),
                        pad=(kernel // 2, kernel // 2), no_bias=True, name=f"{name}_conv")
    x = sym.BatchNorm(x, eps=1e-5, name=f"{name}_bn")
    return sym.Activation(x, act_type="relu", name=f"{name}_relu") if relu else x


def _residual(x: sym.Symbol, filters: int, stride: int, bottleneck: bool, project: bool,
              name: str) -> sym.Symbol:
    if bottleneck:
        h = _conv_bn(x, filters // 4, 1, 1, f"{name}_a")
        h = _conv_bn(h, filters // 4, 3, stride, f"{name}_b")
        h = _conv_bn(h, filters, 1, 1, f"{name}_c", relu=False)
    else:
        h = _conv_bn(x, filters, 3, stride, f"{name}_a")
        h = _conv_bn(h, filters, 3, 1, f"{name}_b", relu=False)
    shortcut = _conv_bn(x, filters, 1, stride, f"{name}_proj", relu=False) if project else x
    return sym.Activation(h + shortcut, act_type="relu", name=f"{name}_relu")


def resnet(depth: int = 50, num_classes: int = 1000, width: int = 64) -> sym.Symbol:
    """A ResNet (v1) of ``depth`` 18, 34, 50 or 101 layers; returns the logits.

    Args:
        depth: number of layers.
        num_classes: size of the output.
        width: filters of the stem (the stages have 1, 2, 4, 8 times as many; bottleneck
            stages 4 times more at their outputs).
    """
    if depth not in RESNET_STAGES:
        raise PortableError(f"resnet depth {depth} is not one of {sorted(RESNET_STAGES)}")
    bottleneck, stages = RESNET_STAGES[depth]
    x = _conv_bn(sym.var("data"), width, 7, 2, "stem")
    x = sym.Pooling(x, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max",
                    name="stem_pool")
    channels = width
    for stage, blocks in enumerate(stages):
        filters = width * 2 ** stage * (4 if bottleneck else 1)
        for block in range(blocks):
            stride = 2 if stage and not block else 1
            project = block == 0 and (stride != 1 or filters != channels)
            x = _residual(x, filters, stride, bottleneck, project, f"stage{stage + 1}_{block}")
            channels = filters
    x = sym.Pooling(x, global_pool=True, pool_type="avg", name="pool")
    return sym.FullyConnected(x, num_hidden=num_classes, name="fc")


def vgg(depth: int = 16, num_classes: int = 1000, width: int = 64, hidden: int = 4096,
        batch_norm: bool = False) -> sym.Symbol:
    """A VGG network of ``depth`` 11, 13, 16 or 19 layers; returns the logits.

    Args:
        depth: number of weight layers.
        num_classes: size of the output.
        width: filters of the first stage (doubling up to 8 times that).
        hidden: units of the two hidden dense layers.
        batch_norm: a BatchNorm after every convolution.
    """
    if depth not in VGG_STAGES:
        raise PortableError(f"vgg depth {depth} is not one of {sorted(VGG_STAGES)}")
    x = sym.var("data")
    for stage, convs in enumerate(VGG_STAGES[depth]):
        filters = width * min(2 ** stage, 8)
        for i in range(convs):
            name = f"conv{stage + 1}_{i + 1}"
            x = sym.Convolution(x, kernel=(3, 3), num_filter=filters, pad=(1, 1), name=name)
            if batch_norm:
                x = sym.BatchNorm(x, eps=1e-5, name=f"{name}_bn")
            x = sym.Activation(x, act_type="relu", name=f"{name}_relu")
        x = sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name=f"pool{stage + 1}")
    for i in (6, 7):
        x = sym.FullyConnected(x, num_hidden=hidden, name=f"fc{i}")
        x = sym.Activation(x, act_type="relu", name=f"relu{i}")
        x = sym.Dropout(x, p=0.5, name=f"drop{i}")
    return sym.FullyConnected(x, num_hidden=num_classes, name="fc8")


def _symbolic(name: str) -> Callable[[], sym.Symbol]:
    def build() -> sym.Symbol:
        from portable.models import symbolic

        return symbolic.SYMBOLIC_MODELS[name]()
    return build


# name -> (builder of the logits symbol, shape of one input sample)
BUILTIN_MODELS: dict[str, tuple[Callable[[], sym.Symbol], tuple[int, ...]]] = {
    "mlp": (_symbolic("mlp"), (1, 8, 8)),
    "lenet": (_symbolic("lenet"), (1, 8, 8)),
    "resnet18": (lambda: resnet(18), (3, 224, 224)),
    "resnet50": (lambda: resnet(50), (3, 224, 224)),
    "resnet": (lambda: resnet(50), (3, 224, 224)),
    "vgg11": (lambda: vgg(11), (3, 224, 224)),
    "vgg16": (lambda: vgg(16), (3, 224, 224)),
    "vgg": (lambda: vgg(16), (3, 224, 224)),
}
