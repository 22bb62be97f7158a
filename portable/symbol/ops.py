"""One symbol function per declared op, named in snake_case (``sym.conv``,
``sym.batch_normalization``), generated from the op table so the two can never disagree.

Required inputs left out are created as variables named ``<node>_<input>`` (``conv0_w``), as
MXNet does for weights; give their shapes at bind time or use the layer functions in
``portable.symbol.layers``, which attach shape hints.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from portable.errors import OpError
from portable.ops import registry
from portable.ops.naming import generate
from portable.symbol.symbol import SymNode, Symbol, auto_name

def constant(value: Any, dtype: Any = None) -> Symbol:
    """A constant symbol (a Constant node); Python floats become float32."""
    array = np.asarray(value, dtype=dtype if dtype is not None else
                       (np.float32 if np.asarray(value).dtype.kind == "f" else None))
    node = SymNode("Constant", auto_name("const"), {"value": array})
    return Symbol([(node, 0)])


def scalar(value: float) -> Symbol:
    """A Python scalar in an expression (``x * 2.0``): a constant that takes the dtype of the
    other operand when the graph is lowered, as MXNet's scalar ops do."""
    symbol = constant(value)
    symbol._entries[0][0].scalar = True
    return symbol


def _output_count(op: registry.OpDef, attrs: dict, requested: int | None) -> int:
    if requested is not None:
        return requested
    if "num_outputs" in op.attrs and attrs.get("num_outputs") is not None:
        return int(attrs["num_outputs"])
    required = [o for o in op.outputs if not o.endswith(("?", "*"))]
    if required:
        return len(required)
    fixed = [o for o in op.outputs if not o.endswith("*")]
    return max(len(fixed), 1)


def apply_op(op_name: str, inputs: list, name: str | None = None,
             num_outputs: int | None = None, **attrs: Any) -> Symbol:
    """Create a node applying ``op_name`` to ``inputs`` (Symbols, None or constants)."""
    op = registry.get(op_name)
    name = name or auto_name(op_name)
    low, high = op.arity()
    if high is not None and len(inputs) > high:
        raise OpError(f"{op_name} takes at most {high} inputs ({', '.join(op.inputs)}), "
                      f"got {len(inputs)}")
    entries = []
    for index in range(max(len(inputs), low)):
        value = inputs[index] if index < len(inputs) else None
        if value is None and index < low:
            value = Symbol([(SymNode(None, f"{name}_{op.input_name(index).lower()}"), 0)])
        if value is None:
            entries.append(None)
            continue
        if not isinstance(value, Symbol):
            value = constant(value)
        if len(value) != 1:
            raise OpError(f"input {index} of {op_name} node {name!r} has {len(value)} outputs; "
                          f"pick one with symbol[i]")
        entries.append(value._entries[0])
    while entries and entries[-1] is None:
        entries.pop()
    count = _output_count(op, attrs, num_outputs)
    node = SymNode(op_name, name, dict(attrs), entries, count)
    return Symbol([(node, i) for i in range(count)])


def _make(op_name: str) -> Callable[..., Symbol]:
    def fn(*inputs: Any, name: str | None = None, num_outputs: int | None = None,
           **attrs: Any) -> Symbol:
        return apply_op(op_name, list(inputs), name=name, num_outputs=num_outputs, **attrs)
    return fn


def generated_functions() -> dict[str, Callable[..., Symbol]]:
    """snake_case name -> symbol function, for every ONNX-domain op in the table."""
    return generate(_make, "Symbolic")
