"""Shape hints: how a layer's parameter shape follows from its data input's shape.

A hint is plain data ``(rule name, source entry, params)`` so symbols with hints still serialise
to JSON. Each rule maps the source shape and params to the parameter shape.
"""
from __future__ import annotations

from math import prod
from typing import Any, Callable

from portable.errors import BindError
from portable.ops.mxnet_outputs import regression_label_shape, softmax_label_shapes


def _dense_weight(shape, params):  # (units, in_features); data is flattened first
    in_features = prod(shape[1:]) if params.get("flatten", True) else shape[-1]
    return (params["units"], in_features)


def _conv_weight(shape, params):  # (filters, in_channels / groups, *kernel)
    return (params["filters"], shape[1] // params.get("groups", 1), *params["kernel"])


def _channels(shape, params):  # one value per channel (axis 1)
    return (shape[params.get("axis", 1)],)


def _fixed(shape, params):
    return tuple(params["shape"])


def _softmax_label(shape, params):  # MXNet's SoftmaxOutput label: class indices
    return softmax_label_shapes(shape, bool(params.get("multi_output", 0)))[0]


def _regression_label(shape, params):  # MXNet's regression outputs: one target per output
    return regression_label_shape(shape)


RULES: dict[str, Callable[[tuple, dict], tuple]] = {
    "dense_weight": _dense_weight, "conv_weight": _conv_weight, "channels": _channels,
    "fixed": _fixed, "softmax_label": _softmax_label, "regression_label": _regression_label,
}


def resolve_hint(rule: str, source_shape: tuple, params: dict[str, Any]) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in RULES[rule](tuple(source_shape), params))
    except KeyError:
        raise BindError(f"unknown shape hint rule {rule!r}; known: {sorted(RULES)}") from None
