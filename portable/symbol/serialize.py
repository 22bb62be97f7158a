"""The symbol DAG <-> JSON (no pickle); ``Symbol.tojson``, ``fromjson`` and ``load`` wrap it.
The format lists nodes in topological order:

    {"format": "portable.symbol", "version": 1,
     "nodes": [{"op": null, "name": "x", "shape": [..], "dtype": "float32"},
               {"op": "Relu", "name": "relu0", "attrs": {}, "inputs": [[0, 0]],
                "num_outputs": 1}],
     "heads": [[1, 0]]}

Tensor-valued attributes are stored as {"__tensor__": {"dtype", "shape", "data"}}.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from portable.errors import PortableError, SerializationError
from portable.io.json_values import decode_value, encode_value
from portable.ops import registry
from portable.symbol.nodes import SymNode, topo_nodes

Entry = tuple[SymNode, int]

FORMAT = "portable.symbol"
VERSION = 1


def entries_to_json(entries: list[Entry]) -> str:
    """The JSON text of the DAG that ``entries`` (a symbol's outputs) reach."""
    nodes = topo_nodes(entries)
    index = {id(n): i for i, n in enumerate(nodes)}
    records = []
    for node in nodes:
        if node.is_variable:
            record = {"op": None, "name": node.name,
                      "shape": None if node.shape is None else list(node.shape),
                      "dtype": None if node.dtype is None else np.dtype(node.dtype).name,
                      "attrs": encode_value(node.var_attrs)}
            if node.shape_hint is not None:
                rule, (source, out), params = node.shape_hint
                record["shape_hint"] = {"rule": rule, "source": [index[id(source)], out],
                                        "params": encode_value(params)}
        else:
            record = {"op": node.op, "name": node.name, "attrs": encode_value(node.attrs),
                      "inputs": [None if e is None else [index[id(e[0])], e[1]]
                                 for e in node.inputs],
                      "num_outputs": node.num_outputs}
            if node.scalar:
                record["scalar"] = True
        records.append(record)
    heads = [[index[id(n)], i] for n, i in entries]
    return json.dumps({"format": FORMAT, "version": VERSION, "nodes": records, "heads": heads},
                      indent=1)


def entries_from_json(text: str, source: str = "<string>") -> list[Entry]:
    """Parse a symbol's outputs; malformed input raises SerializationError naming the source and
    node."""
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SerializationError(f"{source}: not valid JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SerializationError(f"{source}: not a portable symbol file (missing "
                                 f"\"format\": \"{FORMAT}\")")
    if doc.get("version") != VERSION:
        raise SerializationError(f"{source}: symbol format version {doc.get('version')!r} is "
                                 f"not supported (this portable reads version {VERSION})")
    nodes: list[SymNode] = []
    try:
        for i, record in enumerate(doc["nodes"]):
            nodes.append(_node_from_record(record, nodes, i))
        entries = [_entry(nodes, head, "heads") for head in doc["heads"]]
    except PortableError as exc:
        raise SerializationError(f"{source}: {exc}") from exc
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise SerializationError(f"{source}: malformed symbol JSON: {type(exc).__name__}: "
                                 f"{exc}") from exc
    if not entries:
        raise SerializationError(f"{source}: the symbol has no outputs (empty \"heads\")")
    return entries


def _entry(nodes: list[SymNode], ref: Any, where: str) -> tuple[SymNode, int]:
    node_index, out = int(ref[0]), int(ref[1])
    if not 0 <= node_index < len(nodes):
        raise SerializationError(f"{where} refers to node #{node_index}, which is not defined "
                                 f"before it (only {len(nodes)} are)")
    node = nodes[node_index]
    if not 0 <= out < node.num_outputs:
        raise SerializationError(f"{where} refers to output {out} of node {node.name!r}, "
                                 f"which has {node.num_outputs}")
    return node, out


def _node_from_record(record: dict, nodes: list[SymNode], i: int) -> SymNode:
    name = str(record["name"])
    if record["op"] is None:
        node = SymNode(None, name, shape=None if record.get("shape") is None
                       else tuple(int(d) for d in record["shape"]),
                       dtype=None if record.get("dtype") is None else np.dtype(record["dtype"]),
                       var_attrs=decode_value(record.get("attrs", {})))
        hint = record.get("shape_hint")
        if hint is not None:
            node.shape_hint = (hint["rule"], _entry(nodes, hint["source"], f"node {name!r}"),
                               decode_value(hint["params"]))
        return node
    registry.get(record["op"])  # unknown op -> UnknownOpError
    inputs = [None if ref is None else _entry(nodes, ref, f"node {name!r}")
              for ref in record["inputs"]]
    attrs = {k: decode_value(v) for k, v in record.get("attrs", {}).items()}
    return SymNode(record["op"], name, attrs, inputs, int(record.get("num_outputs", 1)),
                   scalar=bool(record.get("scalar", False)))


def read_text(path: str) -> str:
    """The text of a symbol file, or a SerializationError naming it."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise SerializationError(f"cannot read symbol file {path}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise SerializationError(f"{path}: not a text (JSON) file: {exc}") from exc
