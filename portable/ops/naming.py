"""Front-end function names for ops, shared by ``portable.sym`` and ``portable.nd`` so that the
same name means the same op in both: snake_case of the ONNX name, with a few familiar aliases.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from portable.errors import OpError
from portable.ops import registry

# Familiar spellings for ops whose mechanical snake_case reads badly.
ALIASES = {"mat_mul": "matmul", "arg_max": "argmax", "arg_min": "argmin", "p_relu": "prelu"}


# MXNet 1.x's keyword names for an op's first inputs: ``sym.relu(data=x)``, ``dot(lhs=, rhs=)``.
MXNET_INPUT_NAMES = {"data": 0, "lhs": 0, "rhs": 1}


def place_keyword_inputs(op: registry.OpDef, inputs: list, kwargs: dict,
                         scalar: Callable[[Any], Any] | None = None) -> list:
    """Move the keyword arguments that name an input of ``op`` (its ONNX input name, any
    case, or MXNet's ``data``, ``lhs``, ``rhs``) from ``kwargs`` into ``inputs`` at their
    place; what is left are attributes. Returns the inputs (padded with None). ``scalar``
    wraps a Python number given under an MXNet attribute name that ONNX makes an input
    (``clip(a_min=0)``), so that it takes the data's dtype (the symbolic front end's).

    Example:
        >>> kwargs = {"data": "x", "alpha": 0.1}
        >>> place_keyword_inputs(registry.get("LeakyRelu"), [], kwargs), kwargs
        (['x'], {'alpha': 0.1})
    """
    names = [spec.rstrip("?*").lower() for spec in op.inputs]
    inputs = list(inputs)
    for key, target in MXNET_KEYWORDS.get(op.name, {}).items():
        if key in kwargs and isinstance(target, str):  # MXNet's attribute, ONNX's input
            value = kwargs.pop(key)
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            kwargs[target] = scalar(value) if numeric and scalar is not None else value
    for key in [k for k in kwargs if k not in op.attrs]:
        lower = key.lower()
        if lower in names:
            index = names.index(lower)
        elif lower in MXNET_INPUT_NAMES and (MXNET_INPUT_NAMES[lower] < len(names)
                                             or op.inputs[-1].endswith("*")):
            index = MXNET_INPUT_NAMES[lower]
        else:
            continue
        if index < len(inputs) and inputs[index] is not None:
            raise OpError(f"{function_name(op)}: input #{index} given twice (positionally "
                          f"and as {key!r})")
        inputs.extend([None] * (index + 1 - len(inputs)))
        inputs[index] = kwargs.pop(key)
    return inputs


def _dtype_code(value: Any) -> int:
    from portable.dtypes import to_onnx

    return to_onnx(value)


# MXNet 1.x's keyword names where the ONNX op's differ: op -> {MXNet name: (ONNX attribute,
# conversion)} or {MXNet name: ONNX input name} (MXNet's attribute is an input in ONNX).
MXNET_KEYWORDS: dict[str, dict[str, Any]] = {
    "Cast": {"dtype": ("to", _dtype_code)},
    "Concat": {"dim": ("axis", int)},
    "Transpose": {"axes": ("perm", list)},
    "Clip": {"a_min": "min", "a_max": "max"},
    "Tile": {"reps": "repeats"},
    "Slice": {"begin": "starts", "end": "ends"},
}
# MXNet 1.x's defaults for attributes ONNX requires: ``concat(a, b)`` joins along axis 1.
MXNET_DEFAULTS: dict[str, dict[str, Any]] = {"Concat": {"axis": 1}}


def mxnet_attributes(op: registry.OpDef, attrs: dict) -> dict:
    """``attrs`` with MXNet's attribute names turned into the op's (``cast(dtype='float16')``
    is Cast's ``to``), and MXNet's defaults for attributes ONNX requires.

    Example:
        >>> mxnet_attributes(registry.get("Cast"), {"dtype": "float16"})
        {'to': 10}
        >>> mxnet_attributes(registry.get("Concat"), {})
        {'axis': 1}
    """
    aliases = MXNET_KEYWORDS.get(op.name, {})
    out = dict(MXNET_DEFAULTS.get(op.name, {}))
    for key, value in attrs.items():
        target = aliases.get(key)
        if isinstance(target, tuple) and key not in op.attrs:
            name, convert = target
            out[name] = convert(value)
        else:
            out[key] = value
    return out


def snake_case(name: str) -> str:
    """``BatchNormalization`` -> ``batch_normalization``, ``LRN`` -> ``lrn``."""
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


def function_name(op: registry.OpDef) -> str:
    snake = snake_case(op.short_name)
    return ALIASES.get(snake, snake)


def generate(make: Callable[[str], Callable[..., Any]], kind: str) -> dict[str, Callable]:
    """``name -> make(op_name)`` for every ONNX-domain op, with a docstring from its facets.

    Args:
        make: builds the front end's function for a qualified op name.
        kind: ``"Symbolic"`` or ``"Imperative"``, for the docstring.
    """
    functions = {}
    for op_name, op in registry.ops.items():
        if op.domain:
            continue
        fn = make(op_name)
        fn.__name__ = function_name(op)
        attrs = ", ".join(f"{k}={v.default!r}" if v.default is not registry.REQUIRED else k
                          for k, v in op.attrs.items())
        fn.__doc__ = (f"{kind} {op_name}({', '.join(op.inputs)}) -> "
                      f"({', '.join(op.outputs)}).\n\nAttributes: {attrs or 'none'}. "
                      f"ONNX semantics.")
        functions[fn.__name__] = fn
    return functions
