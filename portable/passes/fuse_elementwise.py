"""Elementwise fusion: chains of elementwise ops become one ``portable.FusedElementwise`` node.

A chain grows from a node whose op declares ``fusion="elementwise"``: the next node joins it
when it reads the chain's last value (read nowhere else, and not a graph output) through an
input that its op may overwrite in place (``OpDef.inplace`` pairs it with output 0), and its
output has the same type. Such a chain can run inside its output buffer, step after step,
with no temporary: each backend's kernel for the fused op does exactly that. The other inputs
of the chain's nodes become the fused node's inputs; the fused node takes the last node's
place and output name. Chains of one node are left alone. Ops with tensor attributes are not
fused (the chain is stored as JSON).

Example:
    >>> fused = fuse_elementwise(graph)  # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Iterable

from portable.ir.graph import Graph, Node
from portable.ops import registry
from portable.ops.fused import encode_body
from portable.passes.infer import infer_types

FUSED = "portable.FusedElementwise"


def _plain(value: Any) -> Any:
    """A JSON-ready attribute value, or raise TypeError."""
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    raise TypeError(type(value).__name__)


def _fusable(node: Node, op: registry.OpDef) -> bool:
    if op.fusion != "elementwise" or not node.outputs or any(node.outputs[1:]):
        return False
    inputs = list(node.inputs)
    while inputs and not inputs[-1]:
        inputs.pop()
    if not inputs or not all(inputs):
        return False
    try:
        [_plain(value) for value in node.attrs.values()]
    except TypeError:  # a tensor attribute
        return False
    return True


def fuse_elementwise(graph: Graph, keep: Iterable[str] = ()) -> Graph:
    """Returns ``graph`` with its elementwise chains fused.

    Args:
        graph: the graph.
        keep: values that must stay computed under their name (besides graph outputs).

    Returns:
        The graph (``graph`` itself when no chain has two nodes).
    """
    info = infer_types(graph)
    readers: dict[str, int] = {}
    for node in graph.nodes:
        for name in node.inputs:
            if name:
                readers[name] = readers.get(name, 0) + 1
    for name in set(graph.outputs) | set(keep):
        readers[name] = readers.get(name, 0) + 2
    chain_of: dict[str, list[int]] = {}  # last value of a chain -> node indices
    chains: list[list[int]] = []
    for index, node in enumerate(graph.nodes):
        op = registry.get(node.op, node=node)
        if not _fusable(node, op):
            continue
        out_type = info.types.get(node.outputs[0])
        chain = None
        for in_index, out_index in op.inplace:
            source = node.inputs[in_index] if in_index < len(node.inputs) else ""
            if (out_index == 0 and source in chain_of and readers.get(source) == 1
                    and info.types.get(source) == out_type):
                chain = chain_of.pop(source)
                chain.append(index)
                break
        if chain is None:
            chain = [index]
            chains.append(chain)
        chain_of[node.outputs[0]] = chain
    fused_at: dict[int, Node] = {}
    removed: set[int] = set()
    for chain in chains:
        if len(chain) < 2:
            continue
        fused_at[chain[-1]] = _fused_node([graph.nodes[i] for i in chain])
        removed.update(chain[:-1])
    if not fused_at:
        return graph
    nodes = [fused_at.get(i, node) for i, node in enumerate(graph.nodes) if i not in removed]
    return graph.replace(nodes=tuple(nodes))


def _fused_node(chain: list[Node]) -> Node:
    inputs: list[str] = []
    steps = []
    previous = None
    for node in chain:
        refs = []
        for name in node.inputs:
            if not name:
                break  # trailing absent optional inputs (checked by _fusable)
            if name == previous:
                refs.append(-1)
                continue
            if name not in inputs:
                inputs.append(name)
            refs.append(inputs.index(name))
        steps.append((node.op, refs, {k: _plain(v) for k, v in node.attrs.items()}))
        previous = node.outputs[0]
    tail = chain[-1]
    names = "+".join(node.op.rsplit(".", 1)[-1] for node in chain)
    return Node(FUSED, tuple(inputs), (tail.outputs[0],), {"body": encode_body(steps)},
                name=f"{tail.name}/fused[{names}]")
