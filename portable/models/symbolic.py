"""Small reference networks written with the Symbol API (MXNet 1.x style).

Example:
    >>> import portable as pt
    >>> net = mlp(num_classes=10)
    >>> net.list_arguments()[:3]
    ['data', 'fc1_weight', 'fc1_bias']
"""
from __future__ import annotations

from portable import symbol as sym


def mlp(num_classes: int = 10, hidden: tuple[int, ...] = (128, 64)) -> sym.Symbol:
    """A multi-layer perceptron on flattened inputs; returns the logits."""
    x = sym.var("data")
    for i, units in enumerate(hidden, start=1):
        x = sym.FullyConnected(x, num_hidden=units, name=f"fc{i}")
        x = sym.Activation(x, act_type="relu", name=f"relu{i}")
    return sym.FullyConnected(x, num_hidden=num_classes, name=f"fc{len(hidden) + 1}")


def lenet(num_classes: int = 10, channels: tuple[int, int] = (16, 32)) -> sym.Symbol:
    """A LeNet-style CNN: two conv-relu-maxpool stages, then two dense layers."""
    x = sym.var("data")
    for i, filters in enumerate(channels, start=1):
        x = sym.Convolution(x, kernel=(3, 3), num_filter=filters, pad=(1, 1), name=f"conv{i}")
        x = sym.Activation(x, act_type="relu", name=f"relu{i}")
        x = sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name=f"pool{i}")
    x = sym.FullyConnected(x, num_hidden=64, name="fc1")
    x = sym.Activation(x, act_type="relu", name="relu3")
    return sym.FullyConnected(x, num_hidden=num_classes, name="fc2")


SYMBOLIC_MODELS = {"mlp": mlp, "lenet": lenet}
