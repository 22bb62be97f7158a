"""Front-end function names for ops, shared by ``portable.sym`` and ``portable.nd`` so that the
same name means the same op in both: snake_case of the ONNX name, with a few familiar aliases.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from portable.ops import registry

# Familiar spellings for ops whose mechanical snake_case reads badly.
ALIASES = {"mat_mul": "matmul", "arg_max": "argmax", "arg_min": "argmin", "p_relu": "prelu"}


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
