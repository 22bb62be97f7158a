"""MXNet 1.x layer functions (``FullyConnected``, ``Convolution``, ...) built from ONNX ops.

They create their parameters as variables with MXNet's names (``fc1_weight``, ``bn0_gamma``) and
shape hints, so ``infer_shape`` and ``simple_bind`` need only the data shape.

Example:
    >>> import portable as pt
    >>> net = pt.sym.FullyConnected(pt.sym.var("data"), num_hidden=10, name="fc1")
    >>> net.infer_shape(data=(4, 64))[0]
    [(4, 64), (10, 64), (10,)]
"""
from __future__ import annotations

from typing import Any, Sequence

from portable.symbol.ops import apply_op
from portable.symbol.symbol import SymNode, Symbol, auto_name


def _param(name: str, rule: str, source: Symbol, **params: Any) -> Symbol:
    node = SymNode(None, name, shape_hint=(rule, source._entries[0], params))
    return Symbol([(node, 0)])


def _pairs(value: Any, rank: int) -> list[int]:
    if value is None:
        return [1] * rank
    return [int(value)] * rank if isinstance(value, int) else [int(v) for v in value]


def FullyConnected(data: Symbol, num_hidden: int, no_bias: bool = False,  # noqa: N802
                   flatten: bool = True, weight: Symbol | None = None,
                   bias: Symbol | None = None, name: str | None = None) -> Symbol:
    """``y = flatten(x) @ weight.T + bias`` (a Gemm with transB=1)."""
    name = auto_name("fullyconnected", name)  # with the mx.name.Prefix in force
    if flatten:
        data = apply_op("Flatten", [data], name=f"{name}_flatten", axis=1)
    weight = weight or _param(f"{name}_weight", "dense_weight", data, units=num_hidden,
                              flatten=flatten)
    inputs = [data, weight]
    if not no_bias:
        inputs.append(bias or _param(f"{name}_bias", "fixed", data, shape=(num_hidden,)))
    return apply_op("Gemm", inputs, name=name, transB=1)


def Convolution(data: Symbol, kernel: Sequence[int], num_filter: int,  # noqa: N802
                stride: Any = None, pad: Any = None, dilate: Any = None, num_group: int = 1,
                no_bias: bool = False, weight: Symbol | None = None,
                bias: Symbol | None = None, name: str | None = None) -> Symbol:
    """N-d convolution with MXNet's arguments (symmetric ``pad``)."""
    name = auto_name("convolution", name)  # with the mx.name.Prefix in force
    kernel = [int(k) for k in kernel]
    rank = len(kernel)
    weight = weight or _param(f"{name}_weight", "conv_weight", data, filters=num_filter,
                              groups=num_group, kernel=kernel)
    inputs = [data, weight]
    if not no_bias:
        inputs.append(bias or _param(f"{name}_bias", "fixed", data, shape=(num_filter,)))
    pads = [0] * rank if pad is None else _pairs(pad, rank)
    return apply_op("Conv", inputs, name=name, kernel_shape=kernel,
                    strides=_pairs(stride, rank), pads=pads + pads,
                    dilations=_pairs(dilate, rank), group=num_group)


_ACTIVATIONS = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "softrelu": "Softplus"}


def Activation(data: Symbol, act_type: str, name: str | None = None) -> Symbol:  # noqa: N802
    """Elementwise activation: relu, sigmoid, tanh or softrelu."""
    try:
        op = _ACTIVATIONS[act_type]
    except KeyError:
        raise ValueError(f"unknown act_type {act_type!r}; use one of {sorted(_ACTIVATIONS)}")
    return apply_op(op, [data], name=auto_name("activation", name))


def Pooling(data: Symbol, kernel: Sequence[int] = (1, 1), pool_type: str = "max",  # noqa: N802
            stride: Any = None, pad: Any = None, global_pool: bool = False,
            name: str | None = None) -> Symbol:
    """Max or average pooling (``global_pool`` pools over all spatial positions)."""
    if pool_type not in ("max", "avg"):
        raise ValueError(f"pool_type must be 'max' or 'avg', got {pool_type!r}")
    name = auto_name("pooling", name)
    if global_pool:
        op = "GlobalMaxPool" if pool_type == "max" else "GlobalAveragePool"
        return apply_op(op, [data], name=name)
    rank = len(kernel)
    pads = [0] * rank if pad is None else _pairs(pad, rank)
    op = "MaxPool" if pool_type == "max" else "AveragePool"
    return apply_op(op, [data], name=name, kernel_shape=list(kernel),
                    strides=_pairs(stride if stride is not None else kernel, rank),
                    pads=pads + pads)


def BatchNorm(data: Symbol, eps: float = 1e-3, momentum: float = 0.9,  # noqa: N802
              name: str | None = None) -> Symbol:
    """Batch normalisation over axis 1 with learned gamma/beta and moving statistics."""
    name = auto_name("batchnorm", name)  # with the mx.name.Prefix in force
    params = [_param(f"{name}_{suffix}", "channels", data)
              for suffix in ("gamma", "beta", "moving_mean", "moving_var")]
    return apply_op("BatchNormalization", [data, *params], name=name, epsilon=eps,
                    momentum=momentum)


def Flatten(data: Symbol, name: str | None = None) -> Symbol:  # noqa: N802
    return apply_op("Flatten", [data], name=auto_name("flatten", name), axis=1)


def Dropout(data: Symbol, p: float = 0.5, name: str | None = None) -> Symbol:  # noqa: N802
    from portable.symbol.ops import constant

    return apply_op("Dropout", [data, constant(p)], name=auto_name("dropout", name))


def SoftmaxCrossEntropy(data: Symbol, label: Symbol,  # noqa: N802
                        name: str | None = None) -> Symbol:
    """Mean softmax cross-entropy of ``data`` (N, C) against integer ``label`` (N,)."""
    return apply_op("SoftmaxCrossEntropyLoss", [data, label], name=name, reduction="mean")
