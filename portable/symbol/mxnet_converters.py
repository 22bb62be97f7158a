"""MXNet 1.x ops as portable's ONNX-named ops: one converter per MXNet op name, each reading the
node's attributes with MXNet 1.9.1's defaults and emitting the ops that compute the same thing.

A converter takes ``(builder, inputs, attrs)`` (the ``NodeBuilder`` of the node, its input
entries, its ``MXNetAttrs``) and returns the entries of the node's outputs. Shapes are unknown
while a file is read, so what depends on them (MXNet's Reshape codes -2/-3/-4, a PReLU slope
seen along axis 1) is computed from a ``Shape`` node, which planning folds to constants.

Parameter variables get the same shape rules as the layer functions give theirs
(``portable.symbol.shape_hints``), so ``infer_shape(data=...)`` works on a loaded file.

Example:
    >>> sorted(CONVERTERS)[:3]
    ['Activation', 'BatchNorm', 'BlockGrad']
"""
from __future__ import annotations

from math import prod
from typing import Callable

import numpy as np

from portable.dtypes import to_onnx
from portable.symbol.mxnet_builder import Entry, MXNetAttrs, NodeBuilder, set_hint

Converter = Callable[[NodeBuilder, list, MXNetAttrs], list]
CONVERTERS: dict[str, Converter] = {}
INT64_MAX, INT64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min
_BOOL = 9  # ONNX's BOOL type code


def converter(*names: str) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        for name in names:
            CONVERTERS[name] = fn
        return fn
    return register


def _inputs(b: NodeBuilder, inputs: list, low: int, high: int | None = None) -> list:
    high = low if high is None else high
    if not low <= len(inputs) <= high:
        expected = low if low == high else f"{low} to {high}"
        b.fail(f"has {len(inputs)} inputs; MXNet's {b.attrs.op} takes {expected}")
    return inputs + [None] * (high - len(inputs))


def _layout(b: NodeBuilder, a: MXNetAttrs) -> None:
    layout = a.str("layout", None)
    if layout not in (None, "None", "NCW", "NCHW", "NCDHW"):
        b.fail(f"layout={layout!r} is not supported (channels must come first: NCHW)")


def _window(a: MXNetAttrs, b: NodeBuilder, rank: int, key: str, fill: int) -> list[int]:
    values = a.ints(key, [])
    if not values:
        return [fill] * rank
    if len(values) != rank:
        b.fail(f"{key}={values} has {len(values)} values for a {rank}-d kernel")
    return values


# -- layers ----------------------------------------------------------------------------------


@converter("Convolution")
def _convolution(b, inputs, a):
    no_bias = a.bool("no_bias", False)
    data, weight, bias = _inputs(b, inputs, 2 if no_bias else 3, 3)
    _layout(b, a)
    kernel = a.ints("kernel")
    rank, filters, group = len(kernel), a.int("num_filter"), a.int("num_group", 1)
    pads = _window(a, b, rank, "pad", 0)
    set_hint(weight, "conv_weight", data, filters=filters, groups=group, kernel=kernel)
    set_hint(bias, "fixed", data, shape=(filters,))
    return [b.emit("Conv", [data, weight, None if no_bias else bias], final=True,
                   kernel_shape=kernel, strides=_window(a, b, rank, "stride", 1),
                   dilations=_window(a, b, rank, "dilate", 1), pads=pads + pads, group=group)]


@converter("Deconvolution")
def _deconvolution(b, inputs, a):
    no_bias = a.bool("no_bias", True)  # Deconvolution's default, unlike Convolution's
    data, weight, bias = _inputs(b, inputs, 2 if no_bias else 3, 3)
    _layout(b, a)
    kernel = a.ints("kernel")
    rank = len(kernel)
    pads = _window(a, b, rank, "pad", 0)
    target = a.ints("target_shape", [])
    set_hint(bias, "fixed", data, shape=(a.int("num_filter"),))
    return [b.emit("ConvTranspose", [data, weight, None if no_bias else bias], final=True,
                   kernel_shape=kernel, strides=_window(a, b, rank, "stride", 1),
                   dilations=_window(a, b, rank, "dilate", 1), pads=pads + pads,
                   group=a.int("num_group", 1),
                   output_padding=_window(a, b, rank, "adj", 0),
                   output_shape=target if target and any(target) else None)]


@converter("FullyConnected")
def _fully_connected(b, inputs, a):
    no_bias = a.bool("no_bias", False)
    data, weight, bias = _inputs(b, inputs, 2 if no_bias else 3, 3)
    units, flatten = a.int("num_hidden"), a.bool("flatten", True)
    set_hint(weight, "dense_weight", data, units=units, flatten=flatten)
    set_hint(bias, "fixed", data, shape=(units,))
    bias = None if no_bias else bias
    if flatten:
        flat = b.emit("Flatten", [data], axis=1)
        return [b.emit("Gemm", [flat, weight, bias], final=True, transB=1)]
    product = b.emit("MatMul", [data, b.emit("Transpose", [weight], perm=[1, 0])],
                     final=bias is None)
    return [product if bias is None else b.emit("Add", [product, bias], final=True)]


@converter("BatchNorm", "BatchNorm_v1")
def _batch_norm(b, inputs, a):
    data, gamma, beta, mean, var = _inputs(b, inputs, 5)
    if a.int("axis", 1) != 1:
        b.fail(f"axis={a.int('axis')} is not supported (BatchNorm over axis 1 only)")
    for entry in (gamma, beta, mean, var):
        set_hint(entry, "channels", data)
    if a.bool("fix_gamma", True):
        # MXNet takes gamma as 1 whatever its stored value; gamma stays an argument (its
        # gradient is zero), as in MXNet.
        gamma = b.emit("Add", [b.emit("Mul", [gamma, b.scalar(0.0)]), b.scalar(1.0)])
    return [b.emit("BatchNormalization", [data, gamma, beta, mean, var], final=True,
                   epsilon=a.float("eps", 1e-3), momentum=a.float("momentum", 0.9))]


@converter("InstanceNorm")
def _instance_norm(b, inputs, a):
    data, gamma, beta = _inputs(b, inputs, 3)
    set_hint(gamma, "channels", data)
    set_hint(beta, "channels", data)
    return [b.emit("InstanceNormalization", [data, gamma, beta], final=True,
                   epsilon=a.float("eps", 1e-3))]


@converter("LayerNorm")
def _layer_norm(b, inputs, a):
    data, gamma, beta = _inputs(b, inputs, 3)
    if a.int("axis", -1) != -1:
        b.fail(f"axis={a.int('axis')} is not supported (LayerNorm over the last axis only)")
    return [b.emit("LayerNormalization", [data, gamma, beta], final=True, axis=-1,
                   epsilon=a.float("eps", 1e-5))]


_ACTIVATIONS = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "softrelu": "Softplus",
                "softsign": "Softsign"}


@converter("Activation")
def _activation(b, inputs, a):
    (data,) = _inputs(b, inputs, 1)
    act = a.str("act_type")
    if act not in _ACTIVATIONS:
        b.fail(f"act_type={act!r} is not one of {sorted(_ACTIVATIONS)}")
    return [b.emit(_ACTIVATIONS[act], [data], final=True)]


@converter("LeakyReLU")
def _leaky_relu(b, inputs, a):
    act = a.str("act_type", "leaky")
    if act == "prelu":
        data, gamma = _inputs(b, inputs, 2)
        set_hint(gamma, "channels", data)
        return [b.emit("PRelu", [data, b.channel_view(gamma, data)], final=True)]
    (data,) = _inputs(b, inputs, 1)
    slope = a.float("slope", 0.25)
    if act == "leaky":
        return [b.emit("LeakyRelu", [data], final=True, alpha=slope)]
    if act == "elu":
        return [b.emit("Elu", [data], final=True, alpha=slope)]
    if act == "selu":
        return [b.emit("Selu", [data], final=True)]
    if act == "gelu":
        return [b.emit("Gelu", [data], final=True)]
    if act == "rrelu":  # inference: the mean of the random slope's range
        mean = (a.float("lower_bound", 0.125) + a.float("upper_bound", 0.334)) / 2
        return [b.emit("LeakyRelu", [data], final=True, alpha=mean)]
    b.fail(f"act_type={act!r} is not one of leaky, prelu, elu, selu, gelu, rrelu")


def _spatial_count(b: NodeBuilder, data: Entry) -> Entry:
    """The number of spatial positions of ``data`` (N, C, ...), in ``data``'s dtype."""
    spatial = b.emit("Slice", [b.shape_of(data), b.ints([2]), b.ints([INT64_MAX])])
    return b.emit("CastLike", [b.emit("ReduceProd", [spatial], keepdims=1), data])


@converter("Pooling", "Pooling_v1")
def _pooling(b, inputs, a):
    (data,) = _inputs(b, inputs, 1)
    _layout(b, a)
    pool = a.str("pool_type", "max")
    if pool not in ("max", "avg", "sum", "lp"):
        b.fail(f"pool_type={pool!r} is not one of max, avg, sum, lp")
    p = a.int("p_value", 2) if pool == "lp" else 1
    if pool == "lp":  # (sum |x|^p)^(1/p): a sum pool of |x|^p
        data = b.emit("Pow", [b.emit("Abs", [data]), b.scalar(float(p))])
    if a.bool("global_pool", False):
        if pool == "max":
            return [b.emit("GlobalMaxPool", [data], final=True)]
        out = b.emit("GlobalAveragePool", [data], final=pool == "avg")
        if pool == "avg":
            return [out]
        out = b.emit("Mul", [out, _spatial_count(b, data)], final=pool == "sum")
    else:
        kernel = a.ints("kernel")
        rank = len(kernel)
        convention = a.str("pooling_convention", "valid")
        if convention not in ("valid", "full"):
            b.fail(f"pooling_convention={convention!r} is not supported (valid or full)")
        pads = _window(a, b, rank, "pad", 0)
        window = dict(kernel_shape=kernel, strides=_window(a, b, rank, "stride", 1),
                      pads=pads + pads, ceil_mode=int(convention == "full"))
        if pool == "max":
            return [b.emit("MaxPool", [data], final=True, **window)]
        include = 1 if pool != "avg" else int(a.bool("count_include_pad", True))
        out = b.emit("AveragePool", [data], final=pool == "avg", count_include_pad=include,
                     **window)
        if pool == "avg":
            return [out]
        out = b.emit("Mul", [out, b.scalar(float(prod(kernel)))], final=pool == "sum")
    if pool == "sum":
        return [out]
    return [b.emit("Pow", [out, b.scalar(1.0 / p)], final=True)]


@converter("Dropout")
def _dropout(b, inputs, a):
    (data,) = _inputs(b, inputs, 1)
    ratio = b.const(np.float32(a.float("p", 0.5)))
    return [b.emit("Dropout", [data, ratio], final=True)]


@converter("Embedding")
def _embedding(b, inputs, a):
    data, weight = _inputs(b, inputs, 2)
    set_hint(weight, "fixed", data, shape=(a.int("input_dim"), a.int("output_dim")))
    index = b.emit("Cast", [data], to=to_onnx(np.int64))
    return [b.emit("Gather", [weight, index], final=True, axis=0)]


@converter("LRN")
def _lrn(b, inputs, a):
    (data,) = _inputs(b, inputs, 1)
    return [b.emit("LRN", [data], final=True, size=a.int("nsize"),
                   alpha=a.float("alpha", 1e-4), beta=a.float("beta", 0.75),
                   bias=a.float("knorm", 2.0))]


@converter("UpSampling")
def _up_sampling(b, inputs, a):
    if a.str("sample_type", "nearest") != "nearest" or len(inputs) != 1:
        b.fail("only nearest UpSampling of one input is supported")
    scale = float(a.int("scale"))
    scales = b.const(np.asarray([1.0, 1.0, scale, scale], np.float32))
    return [b.emit("Resize", [inputs[0], None, scales], final=True, mode="nearest",
                   coordinate_transformation_mode="asymmetric", nearest_mode="floor")]


# -- softmax and MXNet's loss outputs --------------------------------------------------------


def _softmax_like(op: str):
    def convert(b, inputs, a):
        data = _inputs(b, inputs, 1, 2)[0]  # (a length input, with use_length, is refused)
        if a.bool("use_length", False):
            b.fail("use_length=True is not supported")
        temperature = a.float("temperature", None)
        if temperature is not None and temperature != 1.0:
            data = b.emit("Div", [data, b.scalar(temperature)])
        return [b.emit(op, [data], final=True, axis=a.int("axis", -1))]
    return convert


CONVERTERS["softmax"] = _softmax_like("Softmax")
CONVERTERS["log_softmax"] = _softmax_like("LogSoftmax")


def _softmax_flat(b: NodeBuilder, data: Entry) -> Entry:
    """Softmax over every axis but the first, in ``data``'s shape."""
    flat = b.emit("Softmax", [b.emit("Flatten", [data], axis=1)], axis=1)
    return b.reshape_like(flat, data, final=True)


@converter("SoftmaxActivation")
def _softmax_activation(b, inputs, a):
    (data,) = _inputs(b, inputs, 1)
    # instance: over the last axis (MXNet views the data as 2-d, all but the last axis
    # flattened); channel: over axis 1
    axis = 1 if a.str("mode", "instance") == "channel" else -1
    return [b.emit("Softmax", [data], final=True, axis=axis)]


_SOFTMAX_OUTPUT_ATTRS = {"grad_scale": "float", "ignore_label": "float", "multi_output": "bool",
                         "use_ignore": "bool", "preserve_shape": "bool", "normalization": "str",
                         "out_grad": "bool", "smooth_alpha": "float"}


@converter("SoftmaxOutput", "Softmax")
def _softmax_output(b, inputs, a):
    data, label = _inputs(b, inputs, 1, 2)
    if label is not None:
        set_hint(label, "softmax_label", data, multi_output=int(a.bool("multi_output", False)))
        attrs = {}
        for key, kind in _SOFTMAX_OUTPUT_ATTRS.items():
            if key in a.raw:
                value = getattr(a, kind)(key, None) if kind != "bool" else a.bool(key, False)
                attrs[key] = int(value) if kind == "bool" else value
        return [b.emit("portable.SoftmaxOutput", [data, label], final=True, **attrs)]
    # Inference only: the softmax MXNet computes forward (the label is not read).
    if a.bool("multi_output", False):
        return [b.emit("Softmax", [data], final=True, axis=1)]
    if a.bool("preserve_shape", False):
        return [b.emit("Softmax", [data], final=True, axis=-1)]
    return [_softmax_flat(b, data)]


def _regression(name: str, forward: str):
    def convert(b, inputs, a):
        data, label = _inputs(b, inputs, 1, 2)
        if label is not None:
            set_hint(label, "regression_label", data)
            return [b.emit(f"portable.{name}", [data, label], final=True,
                           grad_scale=a.float("grad_scale", 1.0))]
        return [b.emit(forward, [data], final=True)]
    return convert


CONVERTERS["LinearRegressionOutput"] = _regression("LinearRegressionOutput", "Identity")
CONVERTERS["MAERegressionOutput"] = _regression("MAERegressionOutput", "Identity")
CONVERTERS["LogisticRegressionOutput"] = _regression("LogisticRegressionOutput", "Sigmoid")
