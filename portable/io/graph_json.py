"""IR Graph <-> a JSON-able dict (no pickle). Initializers are named, not inlined: the caller
stores their arrays elsewhere (a deployment file's safetensors tensors) and passes them back.

    {"format": "portable.graph", "version": 1, "name": "lenet",
     "inputs": [{"name": "data", "shape": [null, 1, 28, 28], "dtype": "float32"}],
     "outputs": ["prob"],
     "initializers": [{"name": "fc.weight", "shape": [10, 84], "dtype": "float32"}],
     "nodes": [{"op": "Gemm", "name": "fc", "inputs": ["h", "fc.weight", "fc.bias"],
                "outputs": ["prob"], "attrs": {"transB": 1}}]}

Unknown dims are null. Attribute values go through ``portable.io.json_values`` (tensors as
``{"__tensor__": ...}``) and node records are read with ``portable.io.json_records``, as the
symbol format's are. Decoding checks every field it reads and the graph's structure
(``portable.ir.verify``: structure only); a malformed document raises SerializationError naming
the source and the node or field at fault, an unknown op the registry's UnknownOpError.

This is not the symbol format (``portable.symbol.serialize``) in other clothes: a symbol file
is the front end's DAG (variables are nodes carrying user attributes and deferred shape rules,
inputs are (node, output) positions, types are optional), this is the lowered, typed IR with
named values, whose initializer arrays are stored beside it.

Example:
    >>> doc = graph_to_dict(graph)                                    # doctest: +SKIP
    >>> same = graph_from_dict(doc, dict(graph.initializers))         # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from portable.errors import GraphError, OpError, SerializationError, UnknownOpError
from portable.io.json_records import RecordReader, encode_attrs
from portable.ir.graph import Graph, Node, TensorType
from portable.ir.verify import verify_structure
from portable.ops import registry

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
        attrs = encode_attrs(node.attrs, f"graph {graph.name!r}: node {node.name!r} (op "
                                         f"{node.op})")
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
    reader = RecordReader(source)
    reader.check_document(doc, FORMAT, VERSION, "graph")
    name = reader.string(doc, "name", "graph")
    inputs = tuple(_typed(reader, record, f"inputs[{i}]")
                   for i, record in enumerate(reader.items(doc, "inputs")))
    outputs = tuple(reader.string_list(doc, "outputs", "graph"))
    typed = [_typed(reader, record, f"initializers[{i}]")
             for i, record in enumerate(reader.items(doc, "initializers"))]
    for kind, names in (("input", [n for n, _ in inputs]), ("initializer", [n for n, _ in typed])):
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            reader.fail("graph", f"{kind}(s) {twice[:5]} are listed twice")
    both = sorted({n for n, _ in inputs} & {n for n, _ in typed})
    if both:  # which one would a reader of the value mean?
        reader.fail("graph", f"{both[:5]} are both graph inputs and initializers")
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


def _node(reader: RecordReader, record: Any, index: int) -> Node:
    where = f"nodes[{index}]"
    name = reader.string(reader.object(record, where), "name", where)
    where = f"node {name!r}"
    op = reader.string(record, "op", where)
    try:
        declaration = registry.get(op)
    except UnknownOpError as exc:
        raise UnknownOpError(f"{reader.source}: {where}: {exc}") from exc
    attrs = reader.attrs(record, f"{where} (op {op})")
    node = Node(op, tuple(reader.string_list(record, "inputs", where)),
                tuple(reader.string_list(record, "outputs", where)), attrs, name)
    try:
        declaration.resolve_attrs(node)  # unknown or missing attributes
        declaration.check_attr_kinds(node)  # "0" is not an int
        declaration.check_arity(node)
    except OpError as exc:
        raise SerializationError(f"{reader.source}: {exc}") from exc
    return node


def _typed(reader: RecordReader, record: Any, where: str) -> tuple[str, TensorType]:
    """An input or initializer record: name, shape (null for an unknown dim) and dtype."""
    record = reader.object(record, where)
    name = reader.string(record, "name", where)
    where = f"{where} ({name!r})"
    shape = reader.shape(record, "shape", where)
    return name, TensorType(shape, reader.dtype(record, "dtype", where, kinds="biuf"))
