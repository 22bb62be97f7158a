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
from portable.ir.types import OptionalType, SequenceType, type_of_value


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


def check_feeds(inputs: Any, types: Mapping[str, Any], *, cast: bool = False,
                label: str = "the model") -> dict[str, np.ndarray]:
    """C-ordered NumPy arrays by input name, in the order of ``types``.

    Args:
        inputs: one array (for a one-input graph), a sequence in input order or a mapping.
        types: the declared input types by name; None dims accept any size. A sequence
            (``portable.ir.types.SequenceType``) takes a list of arrays, an optional None or
            its element's value.
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
        feeds[name] = _checked(given[name], types[name], cast, f"{label}: input {name!r}")
    return feeds


def _checked(value: Any, want: Any, cast: bool, where: str) -> Any:
    """One input checked against its declared type: a C-ordered array for a tensor, a list of
    them for a sequence (``portable.ir.types``), None or the value for an optional."""
    if isinstance(want, OptionalType):
        # (a tensor or sequence given for an optional is one that holds it)
        return None if value is None else _checked(value, want.elem, cast, where)
    if isinstance(want, SequenceType):
        if not isinstance(value, (list, tuple)):
            raise BindError(f"{where} declares a sequence ({want!r}); give a list of arrays, "
                            f"not {type(value).__name__}")
        checked = []
        for i, item in enumerate(value):
            elem = want.elem
            if elem is None:  # (any rank; the dtype when declared)
                elem = TensorType((None,) * np.ndim(item), np.asarray(item).dtype
                                  if want.dtype is None else want.dtype)
            checked.append(_checked(item, elem, cast, f"{where} (element {i})"))
        return checked
    if value is None:
        raise BindError(f"{where} declares a tensor ({want!r}); got None (an empty optional)")
    array = np.asarray(value)
    if is_string(want.dtype) and array.dtype.kind in "USO":
        try:
            array = string_array(array)
        except BindError as exc:
            raise BindError(f"{where}: {exc}") from None
    if array.dtype != want.dtype:
        if not (cast and array.dtype.kind == want.dtype.kind == "f"):
            raise BindError(f"{where} has dtype {array.dtype}; it declares {want.dtype}")
        array = array.astype(want.dtype)
    if array.ndim != want.rank or any(d is not None and d != s
                                      for d, s in zip(want.shape, array.shape)):
        raise BindError(f"{where} has shape {array.shape}; it declares {want!r}")
    return np.asarray(array, order="C")  # (ascontiguousarray makes 0-d 1-d)


def fed_type(value: Any, declared: Any) -> Any:
    """The type a plan is made for, of a checked input ``value`` declared ``declared``: its
    array's shape; a sequence's elements' (``type_of_value``); an optional's is an
    OptionalType of its value's type, or the declared one when empty."""
    if isinstance(declared, OptionalType):
        return declared if value is None else OptionalType(fed_type(value, declared.elem))
    if isinstance(declared, SequenceType):
        if not value:
            return SequenceType(None, declared.dtype, 0)
        return type_of_value(list(value))
    return TensorType(value.shape, value.dtype)


def to_device(backend: Any, value: Any) -> Any:
    """A checked input on ``backend``: an array, a list of them, or None."""
    if value is None:
        return None
    if isinstance(value, list):
        return [backend.from_numpy(item) for item in value]
    return backend.from_numpy(value)
