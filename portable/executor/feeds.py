"""Inputs as callers give them (one array, a list in input order, a dict by name) checked
against the types a graph declares, so every front end refuses bad input the same way.

Example:
    >>> feeds = check_feeds(x, {"data": TensorType((None, 3), "float32")})  # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from portable.dtypes import is_string
from portable.errors import BindError
from portable.ir.graph import TensorType


def string_array(array: np.ndarray) -> np.ndarray:
    """A string tensor as portable holds one: an object array of str. NumPy's fixed-width
    ``str_`` arrays convert; bytes (``bytes_`` arrays or bytes objects) are decoded as UTF-8,
    as ONNX stores strings.

    Raises:
        BindError: an element is neither str nor UTF-8 bytes.
    """
    if array.dtype.kind == "U":
        return array.astype(object)
    out = np.empty(array.shape, dtype=object)
    flat = out.reshape(-1)
    for i, item in enumerate(array.reshape(-1).tolist()):
        if isinstance(item, bytes):
            try:
                item = item.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BindError(f"string element {i} is not UTF-8: {exc}") from None
        elif not isinstance(item, str):
            raise BindError(f"string element {i} is a {type(item).__name__}, not a str")
        flat[i] = item
    return out


def check_feeds(inputs: Any, types: Mapping[str, TensorType], *, cast: bool = False,
                label: str = "the model") -> dict[str, np.ndarray]:
    """C-ordered NumPy arrays by input name, in the order of ``types``.

    Args:
        inputs: one array (for a one-input graph), a sequence in input order or a mapping.
        types: the declared input types by name; None dims accept any size.
        cast: convert floats of another precision (float64 -> float32) instead of refusing
            them; other dtypes must match.
        label: how messages name the graph.

    Returns:
        The arrays by name. Raises BindError naming the input, its shape or dtype and the
        declared type.
    """
    names = list(types)
    if isinstance(inputs, Mapping):
        unknown = set(inputs) - set(names)
        if unknown:
            raise BindError(f"{label}: unknown input(s) {sorted(unknown)}; its inputs are "
                            f"{names}")
        given = dict(inputs)
    else:
        if isinstance(inputs, np.ndarray) or np.isscalar(inputs):
            inputs = [inputs]
        inputs = list(inputs)
        if len(inputs) != len(names):
            raise BindError(f"{label}: got {len(inputs)} inputs; it takes {len(names)}: "
                            f"{names}")
        given = dict(zip(names, inputs))
    feeds = {}
    for name in names:
        if name not in given:
            raise BindError(f"{label}: input {name!r} was not given")
        array, want = np.asarray(given[name]), types[name]
        if is_string(want.dtype) and array.dtype.kind in "USO":
            try:
                array = string_array(array)
            except BindError as exc:
                raise BindError(f"{label}: input {name!r}: {exc}") from None
        if array.dtype != want.dtype:
            if not (cast and array.dtype.kind == want.dtype.kind == "f"):
                raise BindError(f"{label}: input {name!r} has dtype {array.dtype}; it "
                                f"declares {want.dtype}")
            array = array.astype(want.dtype)
        if array.ndim != want.rank or any(d is not None and d != s
                                          for d, s in zip(want.shape, array.shape)):
            raise BindError(f"{label}: input {name!r} has shape {array.shape}; it declares "
                            f"{want!r}")
        feeds[name] = np.asarray(array, order="C")  # (ascontiguousarray makes 0-d 1-d)
    return feeds
