"""One symbol function per declared op, named in snake_case (``sym.conv``,
``sym.batch_normalization``), generated from the op table so the two can never disagree; and
the dispatchers that give a few of those names MXNet 1.x's meaning (``sym.sum(x, axis=1)``
reduces) while the ONNX-style calls portable makes inside (``F.reshape(x, shape_symbol)``,
``F.sum(a, b)``) keep theirs.

Required inputs left out are created as variables named ``<node>_<input>`` (``conv0_w``), as
MXNet does for weights; give their shapes at bind time or use the layer functions in
``portable.symbol.layers``, which attach shape hints.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from portable.ops import registry
from portable.ops.naming import generate, mxnet_attributes, place_keyword_inputs
from portable.symbol.mxnet_api import mxnet_function
from portable.symbol.symbol import Symbol, apply_op, auto_name, constant, scalar

__all__ = ["apply_op", "constant", "generated_functions", "mxnet_overrides", "scalar"]


def _make(op_name: str) -> Callable[..., Symbol]:
    op = registry.get(op_name)

    def fn(*inputs: Any, name: str | None = None, num_outputs: int | None = None,
           **attrs: Any) -> Symbol:
        inputs = place_keyword_inputs(op, list(inputs), attrs, scalar)  # (data=, X= ...)
        return apply_op(op_name, inputs, name=auto_name(op_name, name), num_outputs=num_outputs,
                        **mxnet_attributes(op, attrs))
    return fn


def generated_functions() -> dict[str, Callable[..., Symbol]]:
    """snake_case name -> symbol function, for every ONNX-domain op in the table."""
    return generate(_make, "Symbolic")


# -- which meaning a call asks for -------------------------------------------------------------


def _symbols(args: tuple) -> int:
    return sum(isinstance(a, Symbol) for a in args)


def _second_is_symbol(args: tuple, kwargs: dict, *onnx_keys: str) -> bool:
    """An ONNX-style call: a tensor second input (a Symbol or a NumPy array: a shape, split
    sizes, axes) or a keyword only ONNX has."""
    return (len(args) >= 2 and isinstance(args[1], (Symbol, np.ndarray))) or any(
        k in kwargs for k in onnx_keys)


# name -> whether a call is ONNX-style (else it is MXNet's)
_ONNX_STYLE: dict[str, Callable[[tuple, dict], bool]] = {
    # ONNX's Sum/Mean/Max/Min are elementwise over several tensors; MXNet's reduce one
    "sum": lambda args, kw: _symbols(args) >= 2,
    "mean": lambda args, kw: _symbols(args) >= 2,
    "max": lambda args, kw: _symbols(args) >= 2,
    "min": lambda args, kw: _symbols(args) >= 2,
    # MXNet's shape codes (-2, -3, -4, reverse) are a superset of ONNX's 0 and -1
    "reshape": lambda args, kw: _second_is_symbol(args, kw, "allowzero"),
    # MXNet splits along axis 1 by default, ONNX along 0
    "split": lambda args, kw: _second_is_symbol(args, kw, "split"),
    "squeeze": lambda args, kw: _second_is_symbol(args, kw, "axes"),
    "pad": lambda args, kw: "pad_width" not in kw,
    # MXNet's indices are floats with the axis dropped by default
    "argmax": lambda args, kw: "select_last_index" in kw,
    "argmin": lambda args, kw: "select_last_index" in kw,
    # MXNet rounds halves away from zero; its condition is any number
    "round": lambda args, kw: False,
    "where": lambda args, kw: False,
}


def _dispatch(name: str, onnx_fn: Callable[..., Symbol], mxnet_fn: Callable[..., Symbol],
              onnx_style: Callable[[tuple, dict], bool]) -> Callable[..., Symbol]:
    def fn(*args: Any, **kwargs: Any) -> Symbol:
        chosen = onnx_fn if onnx_style(args, kwargs) else mxnet_fn
        return chosen(*args, **kwargs)
    fn.__name__ = name
    fn.__doc__ = (f"MXNet 1.x's ``sym.{name}``; an ONNX-style call gets the op table's "
                  f"function.\n\n{mxnet_fn.__doc__}")
    return fn


def mxnet_overrides(namespace: Mapping[str, Any]) -> dict[str, Callable[..., Symbol]]:
    """The functions that give the names of ``namespace`` whose ONNX meaning differs from
    MXNet's (``sum``, ``reshape``, ``split`` ...) MXNet's meaning, ONNX-style calls excepted.

    Args:
        namespace: the symbol module's functions so far (the generated ONNX ones).
    """
    return {name: _dispatch(name, namespace[name], mxnet_function(name), rule)
            for name, rule in _ONNX_STYLE.items() if name in namespace}
