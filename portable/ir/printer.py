"""A readable text form of a graph, one node per line:

    graph mlp(x: float32[8x64], w: float32[64x10]) -> (y)
      %h = MatMul(x, w)
      %y = Relu(%h)
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from portable.ir.graph import Graph, TensorType


def _format_attr(value) -> str:
    import numpy as np

    if isinstance(value, np.ndarray):
        if value.size <= 8:
            return f"tensor({value.tolist()}, {value.dtype})"
        return f"tensor(<{value.dtype}{list(value.shape)}>)"
    return repr(value)


def format_graph(graph: "Graph", types: Mapping[str, "TensorType"] | None = None) -> str:
    """Render ``graph`` as text; with ``types``, annotate every computed value."""
    computed = {out for node in graph.nodes for out in node.outputs}

    def ref(name: str) -> str:
        if not name:
            return "-"
        return f"%{name}" if name in computed else name

    args = ", ".join(f"{name}: {type_!r}" for name, type_ in graph.inputs)
    lines = [f"graph {graph.name}({args}) -> ({', '.join(ref(o) for o in graph.outputs)})"]
    for name, array in graph.initializers.items():
        lines.append(f"  const {name}: {array.dtype}{list(array.shape)}")
    for node in graph.nodes:
        outs = ", ".join(ref(o) for o in node.outputs)
        attrs = ", ".join(f"{k}={_format_attr(v)}" for k, v in sorted(node.attrs.items()))
        call = f"{node.op}({', '.join(ref(i) for i in node.inputs)}"
        call += f"; {attrs})" if attrs else ")"
        note = ""
        if types is not None:
            note = "  # " + ", ".join(repr(types[o]) for o in node.outputs if o in types)
        lines.append(f"  {outs} = {call}{note}")
    return "\n".join(lines)
