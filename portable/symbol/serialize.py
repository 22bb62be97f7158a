"""The symbol DAG <-> JSON (no pickle); ``Symbol.tojson``, ``fromjson`` and ``load`` wrap it.
The format lists nodes in topological order:

    {"format": "portable.symbol", "version": 1,
     "nodes": [{"op": null, "name": "x", "shape": [..], "dtype": "float32"},
               {"op": "Relu", "name": "relu0", "attrs": {}, "inputs": [[0, 0]],
                "num_outputs": 1}],
     "heads": [[1, 0]]}

Attribute values go through ``portable.io.json_values`` (tensors as {"__tensor__": {"dtype",
"shape", "data"}}) and records are read with ``portable.io.json_records``, as the IR graph
format's are (``portable.io.graph_json``). The two stay separate formats: a symbol is the front
end's DAG, whose variables are nodes with user attributes (``lr_mult``, ``__init__``) and
deferred shape rules, whose inputs are (node, output) positions and whose types are optional;
the IR graph is typed, with named values and its initializers stored beside it. Every failure
is a SerializationError naming the source and the node.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from portable.errors import PortableError, SerializationError
from portable.io import files
from portable.io.json_records import RecordReader, check_written, encode_attrs
from portable.io.json_values import encode_value
from portable.ir.graph import Node
from portable.ops import registry
from portable.symbol.nodes import SymNode, topo_nodes
from portable.symbol.shape_hints import RULES

Entry = tuple[SymNode, int]

FORMAT = "portable.symbol"
VERSION = 1
# More outputs than this on one node is not a model, but a file making bind() loop.
MAX_OUTPUTS = 1 << 16


def entries_to_json(entries: list[Entry]) -> str:
    """The JSON text of the DAG that ``entries`` (a symbol's outputs) reach.

    Raises:
        SerializationError: an attribute holds a value JSON cannot store (names the node).

    Example:
        >>> json.loads(entries_to_json(sym.relu(sym.var("x"))._entries))["heads"]  # doctest: +SKIP
        [[1, 0]]
    """
    nodes = topo_nodes(entries)
    index = {id(n): i for i, n in enumerate(nodes)}
    records = []
    for node in nodes:
        where = f"symbol node {node.name!r}"
        if node.is_variable:
            record = {"op": None, "name": node.name,
                      "shape": None if node.shape is None else list(node.shape),
                      "dtype": None if node.dtype is None else np.dtype(node.dtype).name,
                      "attrs": encode_attrs(node.var_attrs, where)}
            if node.shape_hint is not None:
                rule, (source, out), params = node.shape_hint
                record["shape_hint"] = {"rule": rule, "source": [index[id(source)], out],
                                        "params": encode_value(params)}
        else:
            record = {"op": node.op, "name": node.name,
                      "attrs": encode_attrs(node.attrs, f"{where} (op {node.op})"),
                      "inputs": [None if e is None else [index[id(e[0])], e[1]]
                                 for e in node.inputs],
                      "num_outputs": node.num_outputs}
            if node.scalar:
                record["scalar"] = True
        records.append(record)
    heads = [[index[id(n)], i] for n, i in entries]
    text = json.dumps({"format": FORMAT, "version": VERSION, "nodes": records, "heads": heads},
                      indent=1)
    check_written(text, "the symbol as JSON")  # names fromjson would refuse
    return text


def entries_from_json(text: str, source: str = "<string>") -> list[Entry]:
    """Parse a symbol's outputs; malformed input raises SerializationError naming the source and
    node.

    Example:
        >>> entries_from_json(text, "mlp-symbol.json")[0][0].name  # doctest: +SKIP
        'fc2'
    """
    reader = RecordReader(source, prefix="malformed symbol JSON: ")
    doc = reader.document(text, FORMAT, VERSION, "symbol file")
    nodes: list[SymNode] = []
    names: set[str] = set()
    try:
        for i, record in enumerate(reader.items(doc, "nodes", "symbol")):
            node = _node_from_record(reader, record, nodes, i)
            if node.name in names:  # bind() and lowering find values by name
                reader.fail(f"nodes[{i}]", f"node name {node.name!r} is used twice")
            names.add(node.name)
            nodes.append(node)
        entries = [_entry(reader, nodes, head, "heads")
                   for head in reader.items(doc, "heads", "symbol")]
    except SerializationError:
        raise
    except PortableError as exc:  # an unknown op or a wrong attribute, named with the node
        raise SerializationError(f"{source}: {exc}") from exc
    if not entries:
        raise SerializationError(f"{source}: the symbol has no outputs (empty \"heads\")")
    return entries


def _entry(reader: RecordReader, nodes: list[SymNode], ref: Any, where: str) -> Entry:
    """The (node, output) that ``ref``, a ``[node index, output index]`` pair, refers to."""
    if not (isinstance(ref, list) and len(ref) == 2 and all(
            isinstance(i, int) and not isinstance(i, bool) for i in ref)):
        reader.fail(where, f"an entry must be [node index, output index], got {ref!r:.40}")
    node_index, out = ref
    if not 0 <= node_index < len(nodes):
        reader.fail(where, f"refers to node #{node_index}, which is not defined before it "
                           f"(only {len(nodes)} are)")
    node = nodes[node_index]
    if not 0 <= out < node.num_outputs:
        reader.fail(where, f"refers to output {out} of node {node.name!r}, which has "
                           f"{node.num_outputs}")
    return node, out


def _node_from_record(reader: RecordReader, record: Any, nodes: list[SymNode],
                      index: int) -> SymNode:
    where = f"nodes[{index}]"
    name = reader.string(reader.object(record, where), "name", where)
    where = f"node {name!r}"
    op = reader.field(record, "op", where)
    if op is None:  # a variable
        return _variable(reader, record, nodes, name, where)
    op = reader.string(record, "op", where)
    declaration = registry.get(op)  # unknown op -> UnknownOpError
    inputs = [None if ref is None else _entry(reader, nodes, ref, where)
              for ref in reader.items(record, "inputs", where)]
    attrs = reader.attrs(record, f"{where} (op {op})")
    count = reader.integer(record, "num_outputs", where, default=1)
    if not 1 <= count <= MAX_OUTPUTS:
        reader.fail(where, f"\"num_outputs\" must be 1 to {MAX_OUTPUTS}, got {count}")
    scalar = record.get("scalar", False)
    if not isinstance(scalar, bool) or (scalar and (op != "Constant" or "value" not in attrs)):
        reader.fail(where, f"\"scalar\" must be a bool, true only for a Constant with a "
                           f"value; got {scalar!r:.20} on op {op}")
    node = SymNode(op, name, attrs, inputs, count, scalar=scalar)
    _check_attrs(declaration, node)
    return node


def _variable(reader: RecordReader, record: dict, nodes: list[SymNode], name: str,
              where: str) -> SymNode:
    # -1 and 0 have meant "unknown" in MXNet-style shapes; any other negative dim is refused.
    shape = None if record.get("shape") is None else \
        tuple(reader.shape(record, "shape", where, unknown=False, minimum=-1))
    dtype = None if record.get("dtype") is None else reader.dtype(record, "dtype", where)
    node = SymNode(None, name, shape=shape, dtype=dtype, var_attrs=reader.attrs(record, where))
    hint = record.get("shape_hint")
    if hint is not None:
        hint = reader.object(hint, f"{where}: \"shape_hint\"")
        rule = reader.string(hint, "rule", where)
        if rule not in RULES:
            reader.fail(where, f"unknown shape hint rule {rule!r:.40}; known: {sorted(RULES)}")
        params = reader.value(hint, "params", where)
        if not isinstance(params, dict):
            reader.fail(where, f"shape hint \"params\" must be an object, got "
                               f"{type(params).__name__}")
        node.shape_hint = (rule, _entry(reader, nodes, reader.field(hint, "source", where),
                                        where), params)
    return node


def _check_attrs(declaration: registry.OpDef, node: SymNode) -> None:
    """Refuse attributes the op does not declare or of the wrong kind (``"axis": "0"``), and
    missing inputs, as the IR graph reader does: a file must not reach a kernel with them.
    None stands for "not given" in a symbol's attributes, as ``apply_op`` passes them."""
    given = {key: value for key, value in node.attrs.items() if value is not None}
    probe = Node(node.op, tuple("" if e is None else e[0].output_name(e[1])
                                for e in node.inputs), ("",), given, node.name)
    declaration.resolve_attrs(probe)
    declaration.check_attr_kinds(probe)
    declaration.check_arity(probe)


def read_text(path: str) -> str:
    """The text of a symbol file, or a SerializationError naming it."""
    return files.read_text(path, "symbol file")
