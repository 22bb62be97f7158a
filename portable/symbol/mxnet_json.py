"""Read MXNet 1.x's symbol JSON (what ``HybridBlock.export``, ``Symbol.save``/``tojson`` and
``Module.save_checkpoint`` write) into portable's symbol DAG of ONNX-named ops.

The format: ``{"nodes": [{"op", "name", "attrs", "inputs": [[node, output, version]]}],
"arg_nodes", "node_row_ptr", "heads", "attrs": {"mxnet_version": ...}}``, nodes in topological
order, variables with op ``"null"``, every attribute a string (``"(3, 3)"``, ``"True"``).
Files older than MXNet 0.9 use ``"param"`` (op attributes) and ``"attr"`` (user attributes)
instead of ``"attrs"``, and two-element input entries.

Stages: (1) check the document's shape (a JSON object with a ``nodes`` list); (2) for each node
in order, check its record and its input entries (each must point to an earlier node and an
output it has), then make a variable or run the MXNet op's converter
(``mxnet_converters``), which emits portable nodes; (3) check the heads. Every failure is a
SerializationError naming the file, the node (name and index) and the op.

Example:
    >>> entries = entries_from_mxnet_json(open("lenet-symbol.json").read(),
    ...                                   "lenet-symbol.json")             # doctest: +SKIP
"""
from __future__ import annotations

import json
from typing import Any, NoReturn

import numpy as np

from portable.errors import PortableError, SerializationError
from portable.symbol import mxnet_tensor_ops  # noqa: F401  (registers its converters)
from portable.symbol.mxnet_builder import DTYPE_FLAGS, Entry, MXNetAttrs, NodeBuilder
from portable.symbol.mxnet_converters import CONVERTERS
from portable.symbol.nodes import SymNode, topo_nodes
from portable.symbol.serialize import MAX_OUTPUTS

# Dimensions a variable's declared __shape__ may have (more is not a model).
MAX_RANK = 32


def parse_document(text: str | bytes) -> Any:
    """The JSON value of ``text``, or None when it is not JSON (the caller's reader then says
    what is wrong in its own terms)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def is_mxnet_document(doc: Any) -> bool:
    """Whether ``doc`` (parsed JSON) is MXNet's symbol format rather than portable's own
    (which is tagged ``"format": "portable.symbol"``)."""
    return isinstance(doc, dict) and "format" not in doc and "nodes" in doc


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, message: str) -> NoReturn:
        raise SerializationError(f"{self.source}: MXNet symbol JSON: {where}: {message}")


def entries_from_mxnet_json(doc: Any, source: str = "<string>") -> list[Entry]:
    """The outputs (heads) of an MXNet symbol file as portable symbol entries.

    Args:
        doc: the file's text, or its already parsed JSON value.
        source: the file name, for messages.

    Returns:
        ``[(SymNode, output index), ...]``, one per head.

    Raises:
        SerializationError: malformed JSON, a bad entry, or an op with no mapping (names the
            file, the node and the op).
    """
    reader = _Reader(source)
    if isinstance(doc, (str, bytes)):
        parsed = parse_document(doc)
        if parsed is None:
            reader.fail("document", "not valid JSON")
        doc = parsed
    if not isinstance(doc, dict):
        reader.fail("document", f"must be a JSON object, got {type(doc).__name__}")
    records = doc.get("nodes")
    if not isinstance(records, list):
        reader.fail("document", f"\"nodes\" must be a list, got {type(records).__name__}")
    outputs: list[list[Entry]] = []
    names: set[str] = set()
    for index, record in enumerate(records):
        outputs.append(_node(reader, record, index, outputs, names))
    heads = doc.get("heads")
    if not isinstance(heads, list) or not heads:
        reader.fail("document", "\"heads\" must be a non-empty list of [node, output, version]")
    entries = [_entry(reader, head, outputs, len(outputs), f"heads[{i}]")
               for i, head in enumerate(heads)]
    _check_arg_nodes(reader, doc.get("arg_nodes"), records)
    _check_unique_names(reader, entries)
    return entries


def _node(reader: _Reader, record: Any, index: int, outputs: list[list[Entry]],
          names: set[str]) -> list[Entry]:
    where = f"nodes[{index}]"
    if not isinstance(record, dict):
        reader.fail(where, f"must be an object, got {type(record).__name__}")
    name, op = record.get("name"), record.get("op")
    if not isinstance(name, str) or not name:
        reader.fail(where, f"\"name\" must be a non-empty string, got {name!r:.40}")
    where = f"node {name!r} (nodes[{index}])"
    if not isinstance(op, str) or not op:
        reader.fail(where, f"\"op\" must be a string, got {op!r:.40}")
    if name in names:  # lowering finds values by name
        reader.fail(where, "the node name is used twice")
    names.add(name)
    attrs = _attributes(reader, record, where)
    raw_inputs = record.get("inputs", [])
    if not isinstance(raw_inputs, list):
        reader.fail(where, f"\"inputs\" must be a list, got {type(raw_inputs).__name__}")
    inputs = [_entry(reader, ref, outputs, index, f"{where} input #{k}")
              for k, ref in enumerate(raw_inputs)]
    if op == "null":
        if inputs:
            reader.fail(where, "a variable (op \"null\") has inputs")
        return [(_variable(reader, name, attrs, where), 0)]
    convert = CONVERTERS.get(op)
    if convert is None:
        reader.fail(where, f"op {op!r} has no portable mapping (MXNet op not supported)")
    mx_attrs = MXNetAttrs(attrs, reader.source, name, op)
    if "num_outputs" in attrs:  # bound it before any converter sizes anything by it
        count = mx_attrs.int("num_outputs")
        if not 1 <= count <= MAX_OUTPUTS:
            reader.fail(f"{where} (op {op})",
                        f"num_outputs={count} is out of range (1 to {MAX_OUTPUTS})")
    try:
        return convert(NodeBuilder(mx_attrs), inputs, mx_attrs)
    except SerializationError:
        raise
    except PortableError as exc:
        reader.fail(f"{where} (op {op})", str(exc))


def _attributes(reader: _Reader, record: dict, where: str) -> dict[str, str]:
    merged: dict[str, str] = {}
    for key in ("attr", "param", "attrs"):  # the old spellings first: "attrs" wins
        value = record.get(key)
        if value is None:
            continue
        if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            reader.fail(where, f"\"{key}\" must be an object of strings")
        merged.update(value)
    return merged


def _entry(reader: _Reader, ref: Any, outputs: list[list[Entry]], before: int,
           where: str) -> Entry:
    """The entry ``[node, output(, version)]`` refers to; the node must come before
    ``before`` (inputs point backwards: the file is in topological order)."""
    if not (isinstance(ref, list) and len(ref) in (2, 3) and all(
            isinstance(i, int) and not isinstance(i, bool) for i in ref)):
        reader.fail(where, f"an entry must be [node, output, version], got {ref!r:.60}")
    node, out = ref[0], ref[1]
    if not 0 <= node < before:
        reader.fail(where, f"refers to node #{node}, which does not come before it "
                           f"(nodes #0 to #{before - 1} do)")
    if not 0 <= out < len(outputs[node]):
        source = outputs[node][0][0].name if outputs[node] else f"#{node}"
        reader.fail(where, f"refers to output {out} of node {source!r}, which has "
                           f"{len(outputs[node])} that portable reads")
    return outputs[node][out]


def _variable(reader: _Reader, name: str, attrs: dict[str, str], where: str) -> SymNode:
    """A variable; a fully known ``__shape__`` (MXNet writes 0 for unknown dimensions) and a
    ``__dtype__`` become its declared shape and dtype."""
    node = SymNode(None, name, var_attrs=dict(attrs))
    probe = MXNetAttrs(attrs, reader.source, name, "null")
    if "__shape__" in attrs:
        shape = probe.ints("__shape__", [])
        if len(shape) > MAX_RANK or any(d < 0 for d in shape):
            reader.fail(where, f"__shape__={attrs['__shape__']!r:.60} is not a shape")
        if shape and all(d > 0 for d in shape):
            node.shape = tuple(shape)
    if "__dtype__" in attrs:
        flag = probe.int("__dtype__")
        if flag not in DTYPE_FLAGS:
            reader.fail(where, f"__dtype__={flag} is not a dtype flag MXNet writes "
                               f"({sorted(DTYPE_FLAGS)})")
        node.dtype = np.dtype(DTYPE_FLAGS[flag])
    return node


def _check_arg_nodes(reader: _Reader, arg_nodes: Any, records: list) -> None:
    if arg_nodes is None:
        return
    if not isinstance(arg_nodes, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(records)
            for i in arg_nodes):
        reader.fail("arg_nodes", f"must list node indices below {len(records)}")


def _check_unique_names(reader: _Reader, entries: list[Entry]) -> None:
    """A file's node name may equal a helper node's (``conv0/const1``): refuse, as values
    are found by name once lowered."""
    seen: set[str] = set()
    for node in topo_nodes(entries):
        if node.name in seen:
            reader.fail(f"node {node.name!r}", "the name is used twice (a node of the file "
                        "has the name of a node portable adds)")
        seen.add(node.name)
