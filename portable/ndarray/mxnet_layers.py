"""MXNet 1.x's legacy layer functions (``nd.FullyConnected``, ``nd.Convolution``, ``nd.Pooling``,
``nd.BatchNorm`` ...), with MXNet's keyword names and defaults, composed from the op table's
ops (Gemm/MatMul, Conv, MaxPool, BatchNormalization ...) so that each keeps their kernels and
gradients.

Example:
    >>> import portable as mx
    >>> x, w = mx.nd.ones((2, 3)), mx.nd.ones((4, 3))
    >>> mx.nd.FullyConnected(x, w, num_hidden=4, no_bias=True).shape
    (2, 4)
"""
from __future__ import annotations

from math import prod
from typing import Any

import numpy as np

from portable import tape
from portable.errors import OpError, ShapeError
from portable.ndarray.invoke import invoke
from portable.ndarray.ndarray import NDArray, array


def _ints(values: Any, like: NDArray) -> NDArray:
    return array(np.asarray(values, np.int64).reshape(-1), device=like.device, dtype=np.int64)


def _scalar(value: float, like: NDArray) -> NDArray:
    return array(np.asarray(value, like.dtype), device=like.device, dtype=like.dtype)


def _tuple(value: Any, rank: int, default: int) -> list[int]:
    if value is None or value == ():
        return [default] * rank
    value = [int(value)] if isinstance(value, (int, np.integer)) else [int(v) for v in value]
    return value * rank if len(value) == 1 else value


def _flat(data: NDArray) -> NDArray:
    return invoke("Reshape", [data, _ints([data.shape[0], -1], data)])


def FullyConnected(data: NDArray, weight: NDArray, bias: NDArray | None = None,  # noqa: N802
                   num_hidden: int | None = None, no_bias: bool = False,
                   flatten: bool = True) -> NDArray:
    """``data @ weight.T + bias`` with ``weight`` of shape (num_hidden, in_units); ``flatten``
    first collapses every axis after the first, else the product is over the last axis."""
    if num_hidden is not None and weight.shape[0] != int(num_hidden):
        raise ShapeError(f"FullyConnected: weight {weight.shape} has {weight.shape[0]} rows, "
                         f"num_hidden is {num_hidden}")
    x = _flat(data) if flatten else data
    if x.shape[-1] != weight.shape[1]:
        raise ShapeError(f"FullyConnected: data {data.shape} (flatten={flatten}) does not match "
                         f"weight {weight.shape}")
    perm = [1, 0]
    out = invoke("MatMul", [x, invoke("Transpose", [weight], {"perm": perm})])
    if not no_bias and bias is not None:
        out = invoke("Add", [out, bias])
    return out


def _conv_attrs(rank: int, kernel: Any, stride: Any, dilate: Any, pad: Any,
                num_group: int) -> dict:
    pads = _tuple(pad, rank, 0)
    return {"kernel_shape": _tuple(kernel, rank, 1), "strides": _tuple(stride, rank, 1),
            "dilations": _tuple(dilate, rank, 1), "pads": pads + pads, "group": int(num_group)}


def _channels_first(layout: Any, rank: int, name: str) -> None:
    if layout not in (None, "NCW", "NCHW", "NCDHW"):
        raise OpError(f"{name}: layout {layout!r} is not supported imperatively; transpose to "
                      f"channels first (gluon.nn layers take layout='NHWC')")


def Convolution(data: NDArray, weight: NDArray, bias: NDArray | None = None,  # noqa: N802
                kernel: Any = None, stride: Any = (), dilate: Any = (), pad: Any = (),
                num_filter: int | None = None, num_group: int = 1, no_bias: bool = False,
                layout: Any = None, **_: Any) -> NDArray:
    """MXNet's ``Convolution`` (channels first): weight (num_filter, C / num_group, *kernel)."""
    rank = data.ndim - 2
    _channels_first(layout, rank, "Convolution")
    inputs = [data, weight] + ([bias] if bias is not None and not no_bias else [])
    return invoke("Conv", inputs, _conv_attrs(rank, kernel or weight.shape[2:], stride, dilate,
                                              pad, num_group))


def Deconvolution(data: NDArray, weight: NDArray, bias: NDArray | None = None,  # noqa: N802
                  kernel: Any = None, stride: Any = (), dilate: Any = (), pad: Any = (),
                  adj: Any = (), target_shape: Any = (), num_filter: int | None = None,
                  num_group: int = 1, no_bias: bool = True, layout: Any = None,
                  **_: Any) -> NDArray:
    """MXNet's ``Deconvolution``: weight (C, num_filter / num_group, *kernel)."""
    rank = data.ndim - 2
    _channels_first(layout, rank, "Deconvolution")
    if target_shape:
        raise OpError("Deconvolution: target_shape is not supported; give pad and adj")
    attrs = _conv_attrs(rank, kernel or weight.shape[2:], stride, dilate, pad, num_group)
    attrs["output_padding"] = _tuple(adj, rank, 0)
    inputs = [data, weight] + ([bias] if bias is not None and not no_bias else [])
    return invoke("ConvTranspose", inputs, attrs)


def Pooling(data: NDArray, kernel: Any = (), pool_type: str = "max",  # noqa: N802
            global_pool: bool = False, pooling_convention: str = "valid", stride: Any = (),
            pad: Any = (), count_include_pad: bool | None = None, layout: Any = None,
            **_: Any) -> NDArray:
    """MXNet's ``Pooling``: ``max``, ``avg`` or ``sum`` windows (stride 1 by default),
    ``pooling_convention='full'`` rounds the output size up; ``global_pool`` pools all."""
    rank = data.ndim - 2
    _channels_first(layout, rank, "Pooling")
    if pool_type not in ("max", "avg", "sum"):
        raise OpError(f"Pooling: pool_type {pool_type!r} is not supported (max, avg, sum)")
    if global_pool:
        if pool_type == "max":
            return invoke("GlobalMaxPool", [data])
        out = invoke("GlobalAveragePool", [data])
        return out if pool_type == "avg" else invoke(
            "Mul", [out, _scalar(prod(data.shape[2:]), out)])
    if pooling_convention not in ("valid", "full"):
        raise OpError(f"Pooling: pooling_convention {pooling_convention!r} is not supported")
    pads = _tuple(pad, rank, 0)
    attrs = {"kernel_shape": _tuple(kernel, rank, 1), "strides": _tuple(stride, rank, 1),
             "pads": pads + pads, "ceil_mode": int(pooling_convention == "full")}
    if pool_type == "max":
        return invoke("MaxPool", [data], attrs)
    include = True if count_include_pad is None else bool(count_include_pad)
    out = invoke("AveragePool", [data], {**attrs, "count_include_pad": int(include)})
    if pool_type == "sum":
        out = invoke("Mul", [out, _scalar(prod(attrs["kernel_shape"]), out)])
    return out


def BatchNorm(data: NDArray, gamma: NDArray, beta: NDArray, moving_mean: NDArray,  # noqa: N802
              moving_var: NDArray, eps: float = 1e-3, momentum: float = 0.9,
              fix_gamma: bool = True, use_global_stats: bool = False,
              output_mean_var: bool = False, axis: int = 1, **_: Any) -> NDArray:
    """MXNet's ``BatchNorm``: ``(x - mean) / sqrt(var + eps) * gamma + beta`` over ``axis``;
    ``fix_gamma`` (the default) uses 1 for gamma. Outside training (and with
    ``use_global_stats``) the moving statistics are used; in training, the batch's, and the
    moving statistics are updated (``moving = moving * momentum + batch * (1 - momentum)``)."""
    if output_mean_var:
        raise OpError("BatchNorm: output_mean_var is not supported")
    axis = axis % data.ndim
    x = data
    if axis != 1:  # the op normalises over axis 1
        perm = list(range(data.ndim))
        perm.insert(1, perm.pop(axis))
        x = invoke("Transpose", [data], {"perm": perm})
    if fix_gamma:
        gamma = invoke("Add", [invoke("Mul", [gamma, _scalar(0, gamma)]), _scalar(1, gamma)])
    # the op follows autograd's mode; global statistics mean inference mode even in training
    with tape.scope(None, False if use_global_stats else None):
        out = invoke("BatchNormalization", [x, gamma, beta, moving_mean, moving_var],
                     {"epsilon": float(eps), "momentum": float(momentum)})
    out = out[0] if isinstance(out, (list, tuple)) else out
    if axis != 1:
        inverse = list(np.argsort(perm))
        out = invoke("Transpose", [out], {"perm": [int(p) for p in inverse]})
    return out


def Flatten(data: NDArray, axis: int = 1) -> NDArray:  # noqa: N802
    """(N, d1, d2, ...) -> (N, d1 * d2 * ...) (``axis``: ONNX's Flatten axis, for the
    op-table spelling ``nd.flatten(x, axis=k)``)."""
    return invoke("Flatten", [data], {"axis": int(axis)})


def Dropout(data: NDArray, p: float = 0.5, mode: str = "training",  # noqa: N802
            axes: Any = (), **_: Any) -> NDArray:
    """Zeroes a ``p`` share of the elements (scaling the rest by ``1/(1-p)``) while autograd
    trains, or always with ``mode='always'``; the identity otherwise."""
    if axes:
        raise OpError("Dropout: axes (shared masks) is not supported")
    if p == 0 or (mode != "always" and not tape.is_training()):
        return invoke("Identity", [data])
    out = invoke("Dropout", [data, _scalar(p, data)], {"training_mode": 1})
    return out[0] if isinstance(out, (list, tuple)) else out


def SoftmaxActivation(data: NDArray, mode: str = "instance") -> NDArray:  # noqa: N802
    """Softmax over each instance (all axes after the first) or over the channels (axis 1)."""
    if mode == "channel":
        return invoke("Softmax", [data], {"axis": 1})
    if mode != "instance":
        raise OpError(f"SoftmaxActivation: mode must be 'instance' or 'channel', got {mode!r}")
    out = invoke("Softmax", [_flat(data)], {"axis": -1})
    return invoke("Reshape", [out, _ints(data.shape, out)])


def LeakyReLU(data: NDArray, gamma: NDArray | None = None,  # noqa: N802
              act_type: str = "leaky", slope: float = 0.25, lower_bound: float = 0.125,
              upper_bound: float = 0.334) -> NDArray:
    """MXNet's ``LeakyReLU``: ``leaky`` (x or slope*x), ``elu`` (slope as alpha), ``selu``,
    ``gelu``, ``prelu`` (learned ``gamma`` per channel of axis 1) or ``rrelu`` (its mean
    slope outside training)."""
    if act_type == "leaky":
        return invoke("LeakyRelu", [data], {"alpha": float(slope)})
    if act_type == "elu":
        return invoke("Elu", [data], {"alpha": float(slope)})
    if act_type == "selu":
        return invoke("Selu", [data])
    if act_type == "gelu":
        return invoke("Gelu", [data])
    if act_type == "prelu":
        if gamma is None:
            raise OpError("LeakyReLU(act_type='prelu') needs gamma")
        if data.ndim > 1 and gamma.size > 1:  # one slope per channel of axis 1
            gamma = invoke("Reshape", [gamma, _ints([-1] + [1] * (data.ndim - 2), gamma)])
        return invoke("PRelu", [data, gamma])
    if act_type == "rrelu":
        return invoke("LeakyRelu", [data], {"alpha": (lower_bound + upper_bound) / 2})
    raise OpError(f"LeakyReLU: act_type {act_type!r} is not one of leaky, elu, selu, gelu, "
                  f"prelu, rrelu")


LAYERS = {"FullyConnected": FullyConnected, "Convolution": Convolution,
          "Deconvolution": Deconvolution, "Pooling": Pooling, "BatchNorm": BatchNorm,
          "Flatten": Flatten, "flatten": Flatten, "Dropout": Dropout,
          "SoftmaxActivation": SoftmaxActivation,
          "LeakyReLU": LeakyReLU}
