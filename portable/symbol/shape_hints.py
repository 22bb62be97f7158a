"""Shape hints: how a layer's parameter shape follows from its data input's shape.

A hint is plain data ``(rule name, source entry, params)`` so symbols with hints still serialise
to JSON. Each rule maps the source shape and params to the parameter shape.
"""
from __future__ import annotations

from math import prod
from typing import Any, Callable

from portable.errors import BindError


def _dense_weight(shape, params):  # (units, in_features); data is flattened first
    in_features = prod(shape[1:]) if params.get("flatten", True) else shape[-1]
    return (params["units"], in_features)


def _conv_weight(shape, params):  # (filters, in_channels / groups, *kernel)
    return (params["filters"], shape[1] // params.get("groups", 1), *params["kernel"])


def _channels(shape, params):  # one value per channel (axis 1)
    return (shape[params.get("axis", 1)],)


def _fixed(shape, params):
    return tuple(params["shape"])


RULES: dict[str, Callable[[tuple, dict], tuple]] = {
    "dense_weight": _dense_weight, "conv_weight": _conv_weight, "channels": _channels,
    "fixed": _fixed,
}


def resolve_hint(rule: str, source_shape: tuple, params: dict[str, Any]) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in RULES[rule](tuple(source_shape), params))
    except KeyError:
        raise BindError(f"unknown shape hint rule {rule!r}; known: {sorted(RULES)}") from None
