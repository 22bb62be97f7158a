"""IR Graph <-> a JSON-able dict (no pickle). Initializers are named, not inlined: the caller
stores their arrays elsewhere (a deployment file's safetensors tensors) and passes them back.

    {"format": "portable.graph", "version": 1, "name": "lenet",
     "inputs": [{"name": "data", "shape": [null, 1, 28, 28], "dtype": "float32"}],
     "outputs": ["prob"],
     "initializers": [{"name": "fc.weight", "shape": [10, 84], "dtype": "float32"}],
     "nodes": [{"op": "Gemm", "name": "fc", "inputs": ["h", "fc.weight", "fc.bias"],
                "outputs": ["prob"], "attrs": {"transB": 1}}]}

Unknown dims are null. Attribute values go through ``portable.io.json_values`` (tensors as
``{"__tensor__": ...}``). Decoding checks every field it reads and the graph's structure
(``portable.ir.verify``: structure only); a malformed document raises SerializationError naming
the source and the node or field at fault, an unknown op the registry's UnknownOpError.

Example:
    >>> doc = graph_to_dict(graph)                                    # doctest: +SKIP
    >>> same = graph_from_dict(doc, dict(graph.initializers))         # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Mapping, NoReturn

import numpy as np

from portable.errors import GraphError, OpError, SerializationError, UnknownOpError
from portable.io.json_values import decode_value, encode_value
from portable.ir.graph import Graph, Node, TensorType
from portable.ir.verify import verify_structure

FORMAT = "portable.graph"
VERSION = 1


def graph_to_dict(graph: Graph) -> dict[str, Any]:
    """The JSON-able form of ``graph`` (initializers by name, shape and dtype only).

    Args:
        graph: any IR graph whose attribute values are numbers, strings, numeric arrays or
            lists of these.

    Returns:
        A dict that ``json.dumps`` accepts and ``graph_from_dict`` reads back.

    Raises:
        SerializationError: an attribute holds a value JSON cannot store (names node and
            attribute).

    Example:
        >>> graph_to_dict(g)["nodes"][0]["op"]                         # doctest: +SKIP
        'Relu'
    """
    nodes = []
    for node in graph.nodes:
        attrs = {}
        for key, value in node.attrs.items():
            try:
                attrs[key] = encode_value(value)
            except SerializationError as exc:
                raise SerializationError(f"graph {graph.name!r}: node {node.name!r} (op "
                                         f"{node.op}): attribute {key!r}: {exc}") from exc
        record = {"op": node.op, "name": node.name, "inputs": list(node.inputs),
                  "outputs": list(node.outputs)}
        if attrs:
            record["attrs"] = attrs
        nodes.append(record)
    return {"format": FORMAT, "version": VERSION, "name": graph.name,
            "inputs": [_type_record(name, type_) for name, type_ in graph.inputs],
            "outputs": list(graph.outputs),
            "initializers": [_type_record(name, TensorType(array.shape, array.dtype))
                             for name, array in graph.initializers.items()],
            "nodes": nodes}


def _type_record(name: str, type_: TensorType) -> dict[str, Any]:
    return {"name": name, "shape": list(type_.shape), "dtype": type_.dtype.name}


def graph_from_dict(doc: Any, initializers: Mapping[str, np.ndarray],
                    source: str = "<graph>") -> Graph:
    """The graph ``graph_to_dict`` described, with the initializer arrays passed back.

    Args:
        doc: the decoded JSON document.
        initializers: arrays by name; exactly the ones the document names, with the shapes
            and dtypes it records. They are used as given (read-only arrays are not copied).
        source: what the document was read from, for messages (a file name).

    Returns:
        The Graph (structure verified; types are checked when it is planned).

    Raises:
        SerializationError: a field is missing or of the wrong type, an initializer is missing,
            extra or mistyped, or the graph is malformed (dangling input, value defined twice).
        UnknownOpError: a node names an op this portable does not declare.

    Example:
        >>> g = graph_from_dict(json.loads(text), weights, "model.portable")  # doctest: +SKIP
    """
    if not isinstance(doc, dict):
        raise SerializationError(f"{source}: the graph is a JSON {type(doc).__name__}, not an "
                                 f"object")
    if doc.get("format") != FORMAT:
        raise SerializationError(f"{source}: not a portable graph (\"format\" is "
                                 f"{doc.get('format')!r}, expected {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise SerializationError(f"{source}: graph format version {doc.get('version')!r} is not "
                                 f"supported (this portable reads version {VERSION})")
    reader = _Reader(source)
    name = reader.string(doc, "name", "graph")
    inputs = tuple(reader.typed(record, f"inputs[{i}]")
                   for i, record in enumerate(reader.items(doc, "inputs")))
    outputs = tuple(reader.string_list(doc, "outputs", "graph"))
    typed = [reader.typed(record, f"initializers[{i}]")
             for i, record in enumerate(reader.items(doc, "initializers"))]
    for kind, names in (("input", [n for n, _ in inputs]), ("initializer", [n for n, _ in typed])):
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            reader.fail("graph", f"{kind}(s) {twice[:5]} are listed twice")
    wanted = dict(typed)
    arrays = _check_initializers(wanted, initializers, source)
    nodes = tuple(_node(reader, record, i)
                  for i, record in enumerate(reader.items(doc, "nodes")))
    graph = Graph(nodes=nodes, inputs=inputs, outputs=outputs, initializers=arrays, name=name)
    try:
        verify_structure(graph)
    except GraphError as exc:
        raise SerializationError(f"{source}: {exc}") from exc
    return graph


def _check_initializers(wanted: Mapping[str, TensorType], given: Mapping[str, np.ndarray],
                        source: str) -> dict[str, np.ndarray]:
    missing = [name for name in wanted if name not in given]
    if missing:
        raise SerializationError(f"{source}: initializer(s) {missing[:5]} that the graph needs "
                                 f"are missing")
    extra = [name for name in given if name not in wanted]
    if extra:
        raise SerializationError(f"{source}: tensor(s) {extra[:5]} are not initializers of the "
                                 f"graph")
    arrays = {}
    for name, type_ in wanted.items():
        array = given[name]
        if tuple(array.shape) != type_.shape or array.dtype != type_.dtype:
            raise SerializationError(
                f"{source}: initializer {name!r} is {array.dtype.name}{list(array.shape)}; "
                f"the graph records {type_!r}")
        arrays[name] = array
    return arrays


def _node(reader: "_Reader", record: Any, index: int) -> Node:
    from portable.ops import registry

    where = f"nodes[{index}]"
    name = reader.string(reader.object(record, where), "name", where)
    where = f"node {name!r}"
    op = reader.string(record, "op", where)
    try:
        declaration = registry.get(op)
    except UnknownOpError as exc:
        raise UnknownOpError(f"{reader.source}: {where}: {exc}") from exc
    attrs = reader.object(record.get("attrs", {}), f"{where}: \"attrs\"")
    decoded = {}
    for key, value in attrs.items():
        try:
            decoded[key] = decode_value(value)
        except SerializationError as exc:
            reader.fail(f"{where} (op {op}): attribute {key!r}", str(exc))
    node = Node(op, tuple(reader.string_list(record, "inputs", where)),
                tuple(reader.string_list(record, "outputs", where)), decoded, name)
    try:
        declaration.resolve_attrs(node)  # unknown or missing attributes
        declaration.check_arity(node)
    except OpError as exc:
        raise SerializationError(f"{reader.source}: {exc}") from exc
    return node


class _Reader:
    """Typed field access whose failures name the source and where in the document."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, message: str) -> NoReturn:
        raise SerializationError(f"{self.source}: {where}: {message}")

    def object(self, value: Any, where: str) -> dict:
        if not isinstance(value, dict):
            self.fail(where, f"expected a JSON object, got {type(value).__name__}")
        return value

    def field(self, record: dict, key: str, where: str) -> Any:
        if key not in record:
            self.fail(where, f"field \"{key}\" is missing")
        return record[key]

    def string(self, record: dict, key: str, where: str) -> str:
        value = self.field(record, key, where)
        if not isinstance(value, str):
            self.fail(where, f"\"{key}\" must be a string, got {value!r:.40}")
        return value

    def items(self, record: dict, key: str) -> list:
        value = self.field(record, key, "graph")
        if not isinstance(value, list):
            self.fail("graph", f"\"{key}\" must be a list, got {type(value).__name__}")
        return value

    def string_list(self, record: dict, key: str, where: str) -> list[str]:
        value = self.field(record, key, where)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.fail(where, f"\"{key}\" must be a list of strings, got {value!r:.60}")
        return value

    def typed(self, record: Any, where: str) -> tuple[str, TensorType]:
        record = self.object(record, where)
        name = self.string(record, "name", where)
        where = f"{where} ({name!r})"
        shape = self.field(record, "shape", where)
        if not isinstance(shape, list) or not all(
                d is None or (isinstance(d, int) and not isinstance(d, bool) and d >= 0)
                for d in shape):
            self.fail(where, f"\"shape\" must be a list of non-negative ints or nulls, got "
                             f"{shape!r:.60}")
        dtype = self.string(record, "dtype", where)
        try:
            parsed = np.dtype(dtype)
        except TypeError:
            self.fail(where, f"unknown dtype {dtype!r}")
        if parsed.kind not in "biuf":
            self.fail(where, f"dtype {dtype!r} is not a number or bool type")
        return name, TensorType(shape, parsed)
