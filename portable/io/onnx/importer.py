"""ONNX model -> portable IR graph and parameters.

Stages of ``import_graph``: read the model (path, bytes or ModelProto) and its external data
with portable's own wire-format reader (``wire.py``: no ``onnx`` needed, the file memory-mapped
and raw tensors viewed, not copied);
check its opsets (ai.onnx, and ai.onnx.ml or ai.onnx.preview.training where it imports them:
their ops are declared as ``<domain>.<op>``, other domains are refused); read graph inputs
(symbolic dims become None), initializers and their types; order the nodes topologically (a
cycle or an undefined input is a GraphError); then, node by node, check domain, op and
attributes against the ONNX schema of the version the opset means, turn Constant nodes into
constants, and translate the node to portable's canonical form (``versions.convert``),
inferring types as it goes so translations can see ranks and dtypes. A node holding
subgraphs (If, Loop, Scan) has them imported the same way, recursively (at most
``MAX_SUBGRAPH_DEPTH`` deep); the outer-scope names a body reads become trailing inputs of the
node and of the body (``portable/ir/graph.py``), so ordering already sees them; Scan 8 (with
a batch axis) becomes a Loop over the batch running a Scan (``scan8.py``). Finally float
initializers that only feed differentiable inputs become parameters (graph inputs with values
in ``params``) and the rest stay constants in the graph.

Every failure is one of portable's exceptions whose message names the model and the node.

Example:
    >>> graph, params = import_graph("model.onnx")          # doctest: +SKIP
    >>> sym, arg_params, aux_params = import_model("model.onnx")   # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.errors import (GraphError, OpAttributeError, PortableError, SerializationError,
                             ShapeError, UnknownOpError)
from portable.io.onnx import folding, reading, schemas, versions, wire
from portable.io.onnx.scan8 import scan8_as_loop
from portable.io.onnx.steps import RewriteContext
from portable.ir.builder import toposort
from portable.ir.graph import ONNX_EXTRA_DOMAINS, PRIVATE_DOMAIN, Graph, Node, TensorType
from portable.ir.verify import verify_structure
from portable.ops import registry
from portable.ops.movement import constant_value
from portable.passes.infer import TypeInfo, infer_node

ONNX_DOMAINS = ("", "ai.onnx")
# Subgraphs nested deeper than this are refused (a hostile file could nest them until the
# reader's recursion ran out; real models nest two or three).
MAX_SUBGRAPH_DEPTH = 32


class _Context(RewriteContext):
    """The importer's side of ``versions.Rewriter``: constants, types so far, fresh names."""

    def __init__(self, opsets: dict[str, int], taken: set[str], used: set[str]) -> None:
        # Rewrite steps read ``opset``: the ai.onnx one (the newest when the model imports
        # only other domains, whose ai.onnx nodes are then refused by ``_check_op``).
        super().__init__(opsets.get("", versions.newest_opset()), TypeInfo(), taken, used)
        self.opsets = opsets
        self.failure: PortableError | None = None

    def infer(self, node: Node) -> None:
        """Types (and small constant values) of ``node``'s outputs, as far as they are known:
        translations of later nodes read them (ranks, dtypes). Inference stops at the first
        node it cannot type (an input value known only at run time, a symbolic dim)."""
        if self.failure is not None:
            return
        try:
            infer_node(node, self.info)
        except PortableError as exc:
            self.failure = exc


def import_graph(model: Any, *, base_dir: str | None = None,
                 params_as_inputs: bool = True) -> tuple[Graph, dict[str, np.ndarray]]:
    """Import an ONNX model as a portable graph.

    Args:
        model: a path, the serialized bytes or an ``onnx.ModelProto``.
        base_dir: the folder of external data files (default: the model file's folder).
        params_as_inputs: make float initializers that feed differentiable inputs (weights,
            running statistics) graph inputs whose values are returned in ``params``; when
            False every initializer stays a constant of the graph.

    Returns:
        ``(graph, params)``: the IR graph (inputs: data inputs then parameters; symbolic dims
        are None) and the parameter arrays by name.

    Example:
        >>> graph, params = import_graph("resnet.onnx")   # doctest: +SKIP
    """
    proto, source = wire.load_model(model, base_dir)
    opsets = _opsets(proto, source)
    try:
        return _import(proto.graph, opsets, source, params_as_inputs)
    except PortableError as exc:
        if str(exc).startswith(source):
            raise
        raise type(exc)(f"{source}: {exc}") from exc
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, MemoryError) as exc:
        # A field combination no check above foresaw: still one of our errors, naming the file.
        raise SerializationError(f"{source}: malformed model: {type(exc).__name__}: "
                                 f"{exc}") from exc


def _opsets(proto: wire.Model, source: str) -> dict[str, int]:
    """The opset of each domain the model imports that portable reads: ``""`` (ai.onnx) and
    those of ``ONNX_EXTRA_DOMAINS``. Other domains are refused at their first node."""
    imported = [(o.domain, int(o.version)) for o in proto.opset_import]
    opsets: dict[str, int] = {}
    onnx_versions = [v for d, v in imported if d in ONNX_DOMAINS]
    if onnx_versions:
        opsets[""] = max(onnx_versions)
        versions.check_model_opset(opsets[""], source)
    for domain, version in imported:
        if domain not in ONNX_EXTRA_DOMAINS:
            continue
        newest = schemas.newest_opset(domain)
        if not 1 <= version <= newest:
            raise UnknownOpError(f"{source}: the model imports {domain} opset {version}; "
                                 f"portable imports {domain} opsets 1 to {newest}")
        opsets[domain] = max(version, opsets.get(domain, 0))
    if not opsets:
        raise UnknownOpError(f"{source}: the model imports no ai.onnx opset (opset_import: "
                             f"{imported})")
    return opsets


def _import(graph: wire.Graph, opsets: dict[str, int], source: str,
            params_as_inputs: bool) -> tuple[Graph, dict[str, np.ndarray]]:
    if graph.sparse_initializer:
        first = graph.sparse_initializer[0].values  # (None when the file names no values)
        raise SerializationError(f"sparse initializers ({getattr(first, 'name', '')!r}, ...) "
                                 f"are not supported")
    initializers: dict[str, np.ndarray] = {}
    for tensor in graph.initializer:
        if not tensor.name or tensor.name in initializers:
            raise GraphError(f"initializer {tensor.name!r} is unnamed or defined twice")
        initializers[tensor.name] = reading.tensor_to_array(tensor, "initializer")
    inputs: list[tuple[str, TensorType]] = []
    for info in graph.input:
        if info.name in initializers:
            continue  # IR < 4 lists initializers as inputs too: they are overridable defaults
        if not info.name or info.name in dict(inputs):
            raise GraphError(f"graph input {info.name!r} is unnamed or declared twice")
        inputs.append((info.name, reading.value_type(info, "graph input")))
    outputs = [info.name for info in graph.output]
    if not outputs or not all(outputs):
        raise GraphError("the graph declares no outputs, or an unnamed one")

    taken, used = _all_names(graph, 0)  # subgraphs' names too: fresh names avoid them all
    ctx = _Context(opsets, taken, used)
    for name, type_ in inputs:
        ctx.info.types[name] = type_
    for name, array in initializers.items():
        ctx.info.types[name] = TensorType(array.shape, array.dtype)
        ctx.info.values[name] = array
    nodes = _convert_nodes(graph, ctx, set(initializers) | {n for n, _ in inputs}, 0)

    constants = {**initializers, **ctx.constants}
    result = Graph(nodes=tuple(nodes), inputs=tuple(inputs), outputs=tuple(outputs),
                   initializers=constants, name=graph.name or "onnx")
    verify_structure(result)
    params: dict[str, np.ndarray] = {}
    if params_as_inputs:
        result, params = _split_params(result, initializers)
    # Type errors surface when the graph is planned (prepare, bind): types may depend on input
    # values (a Reshape target fed at run time) that only the caller knows.
    return result, params


def _convert_nodes(graph: wire.Graph, ctx: _Context, available: set[str],
                   depth: int) -> list[Node]:
    """The nodes of ``graph`` (the model's or a subgraph's) in topological order, converted to
    canonical form. A control-flow node's subgraphs are imported as it is converted; the names
    they read from outside (``_captures``) are appended to its inputs, so that the node comes
    after their producers and every pass sees the dependency."""
    raw = _raw_nodes(graph)
    captures = [_captures(proto, depth) for proto in graph.node]
    ordering = [node.replace(inputs=node.inputs + tuple(extra)) if extra else node
                for node, extra in zip(raw, captures)]
    index_of = {id(node): i for i, node in enumerate(ordering)}
    nodes: list[Node] = []
    for node in toposort(ordering, available):
        i = index_of[id(node)]
        for converted in _convert_node(raw[i], graph.node[i], ctx, captures[i], depth):
            nodes.append(converted)
            ctx.infer(converted)
    return nodes


def _subgraphs(proto: wire.Node) -> list[wire.Graph]:
    return [g for attr in proto.attribute
            for g in ([attr.g] if attr.g is not None else []) + list(attr.graphs)]


def _check_depth(depth: int) -> None:
    if depth > MAX_SUBGRAPH_DEPTH:
        raise GraphError(f"subgraphs are nested more than {MAX_SUBGRAPH_DEPTH} deep")


def _free_names(graph: wire.Graph, depth: int) -> list[str]:
    """The names a subgraph reads but does not define (its outer-scope references), through
    its own nested subgraphs, in order of first use."""
    _check_depth(depth)
    defined = {info.name for info in graph.input} | {t.name for t in graph.initializer} | \
        {out for proto in graph.node for out in proto.output if out}
    free: dict[str, None] = {}
    for proto in graph.node:
        for name in list(proto.input) + _captures(proto, depth):
            if name and name not in defined:
                free.setdefault(name)
    for info in graph.output:
        if info.name not in defined:
            free.setdefault(info.name)
    return list(free)


def _captures(proto: wire.Node, depth: int) -> list[str]:
    """The outer-scope names a node's subgraphs read (one list for all of them: an If's two
    branches capture the same values)."""
    names: dict[str, None] = {}
    for graph in _subgraphs(proto):
        for name in _free_names(graph, depth + 1):
            names.setdefault(name)
    return list(names)


def _all_names(graph: wire.Graph, depth: int) -> tuple[set[str], set[str]]:
    """Every name a graph and its subgraphs define, and every name they read."""
    _check_depth(depth)
    taken = {t.name for t in graph.initializer} | {i.name for i in graph.input} | \
        {out for proto in graph.node for out in proto.output if out}
    used = {name for proto in graph.node for name in proto.input if name} | \
        {info.name for info in graph.output}
    for proto in graph.node:
        for sub in _subgraphs(proto):
            inner_taken, inner_used = _all_names(sub, depth + 1)
            taken |= inner_taken
            used |= inner_used
    return taken, used


def _import_subgraph(graph: wire.Graph, outer: _Context, captures: list[str], depth: int,
                     where: str) -> Graph:
    """A control-flow body as a portable Graph: its declared inputs, then ``captures`` (the
    outer-scope names it reads, as inputs of the same names; see ``portable/ir/graph.py``).

    The declared input types of a body are often partial or missing in files; they are seeded
    where complete and otherwise left to the op's type rule, which infers every body from the
    node's input types (``portable/ops/control_flow.py``)."""
    _check_depth(depth)
    if graph.sparse_initializer:
        raise SerializationError(f"{where}: sparse initializers are not supported")
    ctx = _Context(outer.opsets, outer.taken, outer._used)
    initializers: dict[str, np.ndarray] = {}
    for tensor in graph.initializer:
        if not tensor.name or tensor.name in initializers:
            raise GraphError(f"{where}: initializer {tensor.name!r} is unnamed or defined twice")
        initializers[tensor.name] = reading.tensor_to_array(tensor, f"{where}: initializer")
        ctx.info.types[tensor.name] = TensorType(initializers[tensor.name].shape,
                                                 initializers[tensor.name].dtype)
        ctx.info.values[tensor.name] = initializers[tensor.name]
    placeholder = TensorType((), "float32")  # replaced by the type rule's types
    inputs: list[tuple[str, Any]] = []
    for info in graph.input:
        try:
            type_ = reading.value_type(info, f"{where}: subgraph input")
            ctx.info.types[info.name] = type_
        except ShapeError:  # no type, or no shape: the type rule knows it
            type_ = placeholder
        inputs.append((info.name, type_))
    for name in captures:
        if name in outer.info.types:
            ctx.info.types[name] = outer.info.types[name]
        if name in outer.info.values:
            ctx.info.values[name] = outer.info.values[name]
        inputs.append((name, outer.info.types.get(name, placeholder)))
    names = [name for name, _ in inputs]
    if len(set(names)) != len(names):
        raise GraphError(f"{where}: a subgraph input is declared twice, or shadows a value "
                         f"of the enclosing graph that it also reads")
    nodes = _convert_nodes(graph, ctx, set(names) | set(initializers), depth)
    outputs = [info.name for info in graph.output]
    if not outputs or not all(outputs):
        raise GraphError(f"{where}: the subgraph declares no outputs, or an unnamed one")
    body = Graph(nodes=tuple(nodes), inputs=tuple(inputs), outputs=tuple(outputs),
                 initializers={**initializers, **ctx.constants},
                 name=graph.name or "subgraph", captures=tuple(captures))
    verify_structure(body)
    return body


def _raw_nodes(graph: wire.Graph) -> list[Node]:
    """IR nodes straight from the protos (op, names, node names made unique), unconverted."""
    nodes, names = [], set()
    for index, proto in enumerate(graph.node):
        name = proto.name or f"{proto.op_type}_{index}"
        if name in names:
            name = f"{name}_{index}"
        names.add(name)
        if not proto.op_type.isidentifier():
            raise SerializationError(f"node {name!r} has an invalid op_type "
                                     f"{proto.op_type[:40]!r}")
        op = proto.op_type if proto.domain in ONNX_DOMAINS else f"{proto.domain}.{proto.op_type}"
        outputs = tuple(proto.output)
        if not any(outputs):
            raise GraphError(f"node {name!r} (op {op}) has no outputs")
        nodes.append(Node(op, tuple(proto.input), outputs, {}, name))
    return nodes


def _convert_node(node: Node, proto: wire.Node, ctx: _Context, captures: list[str] = (),
                  depth: int = 0) -> list[Node]:
    """Check ``proto`` against its schema and translate it to canonical nodes (a Constant
    becomes a constant value and yields no node, as does a constant node of an op portable
    lacks: see ``folding.py``). A node holding subgraphs gets ``captures`` appended to its
    inputs after translation (its schema's arity counts only the inputs the file gave)."""
    if proto.domain in ONNX_DOMAINS and "" in ctx.opsets and proto.op_type not in registry.ops \
            and versions.op_version(proto.op_type, ctx.opset) is not None and _fold(proto, ctx):
        return []
    version = _check_op(node, proto, ctx.opsets)
    schema = versions.schema(node.op, version)
    label = versions.where(node, ctx.opsets[node.domain], version)
    attrs = {}
    for attr in proto.attribute:
        if attr.name in attrs:
            raise OpAttributeError(f"{label}: attribute {attr.name!r} is given twice")
        if attr.name not in schema.attributes:
            raise OpAttributeError(f"{label}: unknown attribute {attr.name!r}; version "
                                   f"{version} of {node.op} has "
                                   f"{sorted(schema.attributes) or 'none'}")
        kind, value = reading.attribute_value(
            attr, label, lambda g, where: _import_subgraph(g, ctx, list(captures), depth + 1,
                                                           where))
        expected = schema.attributes[attr.name].kind
        attrs[attr.name] = reading.coerce_attribute(kind, value, expected, f"{label}: attribute "
                                                    f"{attr.name!r}")
    node = node.replace(attrs=attrs)
    if node.op == "Constant":
        _import_constant(node, ctx, label)
        return []
    if node.op == "Scan" and version < 9:  # a Loop over the batch (captures appended there)
        converted = scan8_as_loop(node, list(captures), ctx, label)
        captures = ()
    elif node.op in versions.REPLACED:  # a deprecated op read as another (Upsample: Resize)
        converted = versions.REPLACED[node.op](node, ctx)
    else:
        canonical = versions.canonical_version(node.op)
        converted = versions.convert(node, version, canonical, ctx) \
            if version != canonical else [versions.reconcile(node, version, version, ctx)]
    if captures:
        converted = [out.replace(inputs=out.inputs + tuple(captures))
                     if any(isinstance(v, Graph) for v in out.attrs.values()) else out
                     for out in converted]
    for out in converted:
        registry.get(out.op, node=out).check_arity(out)
    return converted


def _fold(proto: wire.Node, ctx: _Context) -> bool:
    """Evaluate a node of an op portable lacks when its inputs are constants."""
    inputs = [ctx.value(name) if name else None for name in proto.input]
    if not folding.foldable(proto, inputs):
        return False
    results = folding.fold_unimplemented(proto, inputs, ctx.opset)
    if results is None:
        return False
    for name, value in zip([o for o in proto.output if o], results):
        value.setflags(write=False)
        ctx.constants[name] = value
        ctx.info.types[name] = TensorType(value.shape, value.dtype)
        ctx.info.values[name] = value
    return True


def _check_op(node: Node, proto: wire.Node, opsets: dict[str, int]) -> int:
    """The version of the node's op that its domain's opset means; unknown ops and domains
    raise UnknownOpError naming op, domain, opset, node and the supported range."""
    supported = f"portable imports ai.onnx opsets {versions.MIN_IMPORT_OPSET} to " \
                f"{versions.newest_opset()}"
    domain = proto.domain or "ai.onnx"
    if proto.domain not in ONNX_DOMAINS + ONNX_EXTRA_DOMAINS:
        private = " (portable's private ops are never read from ONNX files)" \
            if proto.domain == PRIVATE_DOMAIN else ""
        raise UnknownOpError(f"node {node.name!r}: op {proto.op_type!r} of domain {domain!r} "
                             f"is not supported{private}; {supported} (and the domains "
                             f"{', '.join(ONNX_EXTRA_DOMAINS)})")
    key = node.domain  # "" for ai.onnx
    if key not in opsets:
        raise UnknownOpError(f"node {node.name!r}: op {proto.op_type!r} is of domain "
                             f"{domain!r}, which the model does not import (opset_import "
                             f"names {sorted(d or 'ai.onnx' for d in opsets)})")
    opset = opsets[key]
    name = node.op  # the domain-qualified name outside ai.onnx
    version = versions.op_version(name, opset)
    op = registry.ops.get(name)
    if (op is None or op.private) and name not in versions.REPLACED:
        exists = "" if version is not None else f", which opset {opset} does not define"
        raise UnknownOpError(f"node {node.name!r}: op {proto.op_type!r} (domain {domain!r}, "
                             f"opset {opset}{exists}) is not implemented by portable; "
                             f"{supported}; implemented ops: portable.ops.ops")
    if version is None:
        raise UnknownOpError(f"node {node.name!r}: op {proto.op_type!r} does not exist in "
                             f"{domain} opset {opset} (it appears in version "
                             f"{versions.first_version(name)}); {supported}")
    if not key and opset < versions.MIN_IMPORT_OPSET and \
            version < versions.LEGACY.get(proto.op_type, 99) \
            and version != versions.op_version(proto.op_type, versions.MIN_IMPORT_OPSET):
        raise UnknownOpError(f"node {node.name!r}: op {proto.op_type!r} version {version} "
                             f"(ai.onnx opset {opset}) predates the forms portable reads; "
                             f"{supported}")
    return version


def _import_constant(node: Node, ctx: _Context, label: str) -> None:
    if node.attrs.get("sparse_value") is not None:
        raise OpAttributeError(f"{label}: sparse_value is not supported")
    try:
        value = constant_value(dict(node.attrs))
    except ValueError as exc:
        raise OpAttributeError(f"{label}: {exc}") from exc
    if value.dtype.kind not in "biuf":
        raise ShapeError(f"{label}: {value.dtype} constants are not supported (numbers only)")
    value = np.asarray(value, order="C")
    value.setflags(write=False)
    name = node.outputs[0]
    ctx.constants[name] = value
    ctx.info.types[name] = TensorType(value.shape, value.dtype)
    ctx.info.values[name] = value


def _split_params(graph: Graph, initializers: dict[str, np.ndarray]
                  ) -> tuple[Graph, dict[str, np.ndarray]]:
    """Float initializers read only at differentiable inputs become parameters."""
    readers: dict[str, list[tuple[Node, int]]] = {}
    for node in graph.nodes:
        for index, name in enumerate(node.inputs):
            if name:
                readers.setdefault(name, []).append((node, index))
    params = {}
    for name, array in initializers.items():
        uses = readers.get(name, [])
        if array.dtype.kind != "f" or not uses or name in graph.outputs:
            continue
        if all(index not in registry.get(node.op).nondiff_inputs for node, index in uses):
            params[name] = array
    constants = {k: v for k, v in graph.initializers.items() if k not in params}
    inputs = graph.inputs + tuple((n, TensorType(a.shape, a.dtype)) for n, a in params.items())
    return graph.replace(inputs=inputs, initializers=constants), params


def import_model(model: Any, *, base_dir: str | None = None,
                 device: Any = None) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """Import an ONNX model for the Symbol API (MXNet's ``onnx.import_model``).

    Args:
        model: a path, the serialized bytes or an ``onnx.ModelProto``.
        base_dir: the folder of external data files (default: the model file's folder).
        device: where the parameter NDArrays live (default: the CPU).

    Returns:
        ``(symbol, arg_params, aux_params)``: the symbol, and NDArray dicts of its arguments
        and auxiliary states (BatchNormalization's running statistics).

    Example:
        >>> sym, args, aux = import_model("lenet.onnx")                    # doctest: +SKIP
        >>> exe = sym.bind(pt.cpu(), {**args, "data": x}, aux_states=aux)  # doctest: +SKIP
    """
    from portable.ndarray.ndarray import array
    from portable.io.onnx.symbolic import graph_to_symbol

    graph, params = import_graph(model, base_dir=base_dir)
    symbol = graph_to_symbol(graph)
    aux_names = set(symbol.list_auxiliary_states())
    arg_params = {n: array(v, device, dtype=v.dtype) for n, v in params.items()
                  if n not in aux_names}
    aux_params = {n: array(v, device, dtype=v.dtype) for n, v in params.items()
                  if n in aux_names}
    return symbol, arg_params, aux_params
