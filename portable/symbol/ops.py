"""One symbol function per declared op, named in snake_case (``sym.conv``,
``sym.batch_normalization``), generated from the op table so the two can never disagree.

Required inputs left out are created as variables named ``<node>_<input>`` (``conv0_w``), as
MXNet does for weights; give their shapes at bind time or use the layer functions in
``portable.symbol.layers``, which attach shape hints.
"""
from __future__ import annotations

from typing import Any, Callable

from portable.ops import registry
from portable.ops.naming import generate, mxnet_attributes, place_keyword_inputs
from portable.symbol.symbol import Symbol, apply_op, constant, scalar

__all__ = ["apply_op", "constant", "generated_functions", "scalar"]


def _make(op_name: str) -> Callable[..., Symbol]:
    op = registry.get(op_name)

    def fn(*inputs: Any, name: str | None = None, num_outputs: int | None = None,
           **attrs: Any) -> Symbol:
        inputs = place_keyword_inputs(op, list(inputs), attrs, scalar)  # (data=, X= ...)
        return apply_op(op_name, inputs, name=name, num_outputs=num_outputs,
                        **mxnet_attributes(op, attrs))
    return fn


def generated_functions() -> dict[str, Callable[..., Symbol]]:
    """snake_case name -> symbol function, for every ONNX-domain op in the table."""
    return generate(_make, "Symbolic")
