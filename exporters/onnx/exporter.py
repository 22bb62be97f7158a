"""portable IR graph (or Symbol) + parameters -> ONNX model at a chosen opset.

Stages of ``export_graph``: switch the graph to inference (``set_training_mode``: running
statistics become inputs only, Dropout turns off) and drop the ops that do nothing in inference;
infer every type and the values known from parameters and constants; then lower node by node:
an op that the target opset lacks (private ops, ops newer than the opset) is replaced by its
decomposition (``decompositions.py``), whose nodes are lowered in turn, and every ONNX op is
written at the version the target opset means (``versions.convert``); ops of the other
standard domains (``ai.onnx.ml.Binarizer``, ``ai.onnx.preview.training.Adam``) are written with
their domain at its newest opset that portable knows, which the model then imports; finally
build the ModelProto (parameters and constants as initializers, symbolic dims where asked) and
run the ONNX checker.

Example:
    >>> model = export_model(symbol, params, "mlp.onnx", input_shapes={"data": (1, 784)})
    ... # doctest: +SKIP
"""
from __future__ import annotations

import functools
import os
import tempfile
from collections import deque
from typing import Any, Mapping

import numpy as np
import onnx
from onnx import helper

import portable
from portable.errors import (BindError, OpError, PortableError, SerializationError,
                             UnknownOpError)
from portable.io.atomic import atomic_write_bytes
from portable.io.exporters import register_exporter
from portable.io.onnx import schemas, versions
from portable.io.onnx.steps import RewriteContext
from portable.ir.graph import Graph, Node, TensorType
from portable.ops import control_flow, registry
from portable.ops.gradients import GradContext
from portable.passes.infer import TypeInfo, infer_node, infer_types
from portable.passes.training import set_training_mode

from exporters.onnx import protos
from exporters.onnx.decompositions import DECOMPOSITIONS

# Ops that compute their input unchanged in inference (input 0 -> output 0) and are left out of
# an inference export, when no other output of theirs is read.
INFERENCE_IDENTITIES = ("Dropout",)
# Protobuf cannot serialise a message of 2 GiB or more: larger models keep tensors in a file.
PROTOBUF_LIMIT = (1 << 31) - (1 << 20)
# onnxruntime version -> newest opset it runs, used only when probing onnxruntime fails.
ORT_OPSETS = {(1, 14): 18, (1, 15): 19, (1, 16): 19, (1, 17): 20, (1, 18): 21, (1, 19): 21,
              (1, 20): 21, (1, 21): 22, (1, 22): 22}


@functools.lru_cache(maxsize=None)
def default_opset() -> int:
    """The newest opset that both the installed onnx and onnxruntime support (probed by
    loading a one-node model; without onnxruntime, onnx's newest)."""
    newest = versions.newest_opset()
    try:
        import onnxruntime
    except ImportError:
        return newest
    for opset in range(newest, versions.MIN_EXPORT_OPSET - 1, -1):
        graph = helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])], "probe",
            [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
            [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = helper.find_min_ir_version_for(model.opset_import)
        try:
            onnxruntime.InferenceSession(model.SerializeToString(),
                                         providers=["CPUExecutionProvider"])
            return opset
        except Exception:  # onnxruntime's errors have no common base class
            continue
    key = tuple(int(p) for p in onnxruntime.__version__.split(".")[:2])
    return min(ORT_OPSETS.get(key, newest), newest)


class _Context(RewriteContext):
    """The exporter's side of ``versions.Rewriter``: types and values known so far, new
    constants, fresh names."""


class _Emitter(GradContext):
    """What a decomposition sees: emits canonical nodes, typed as they are added."""

    def __init__(self, node: Node, ctx: _Context) -> None:
        op = registry.get(node.op, node=node)
        inputs = [name or None for name in node.inputs]
        super().__init__(node, op, op.resolve_attrs(node), inputs, list(node.outputs))
        self.ctx = ctx
        self.nodes: list[Node] = []

    def emit(self, op: str, *inputs: Any, num_outputs: int = 1, **attrs: Any) -> Any:
        outputs = tuple(self.ctx.fresh(f"{self.node.name}/{op}") for _ in range(num_outputs))
        node = Node(op, tuple(i or "" for i in inputs), outputs,
                    {k: v for k, v in attrs.items() if v is not None},
                    self.ctx.fresh(f"{self.node.name}/{op}"))
        infer_node(node, self.ctx.info)
        self.nodes.append(node)
        return outputs[0] if num_outputs == 1 else outputs

    def emit_onnx(self, op: str, *inputs: Any, like: str, since: int, **attrs: Any) -> str:
        """An ONNX op portable does not implement; its output has ``like``'s type."""
        if self.ctx.opset < since:
            raise OpError(f"node {self.node.name!r} (op {self.node.op}): its ONNX form needs "
                          f"{op} from opset {since}; the target is {self.ctx.opset}")
        out = self.ctx.fresh(f"{self.node.name}/{op}")
        self.ctx.info.types[out] = self.ctx.info.types[like]
        self.nodes.append(Node(f"onnx:{op}", tuple(inputs), (out,), attrs,
                               self.ctx.fresh(f"{self.node.name}/{op}")))
        return out

    def const(self, value: Any, dtype: Any = None) -> str:
        return self.ctx.constant(np.asarray(value, dtype=dtype), f"{self.node.name}/const")

    def shape(self, handle: str) -> tuple[int, ...]:
        return self.ctx.info.types[handle].shape

    def dtype(self, handle: str) -> np.dtype:
        return self.ctx.info.types[handle].dtype

    def value(self, handle: str) -> np.ndarray:
        value = self.ctx.info.values.get(handle)
        if value is None:
            raise OpError(f"node {self.node.name!r} (op {self.node.op}): input {handle!r} must "
                          f"be a constant for the ONNX form of this op")
        return value


def _host(value: Any) -> np.ndarray:
    return value.asnumpy() if hasattr(value, "asnumpy") else np.asarray(value)


def _check_opset(opset: int | None) -> int:
    opset = default_opset() if opset is None else int(opset)
    if not versions.MIN_EXPORT_OPSET <= opset <= versions.newest_opset():
        raise OpError(f"cannot export at opset {opset}: portable writes ai.onnx opsets "
                      f"{versions.MIN_EXPORT_OPSET} to {versions.newest_opset()}")
    return opset


def export_graph(graph: Graph, params: Mapping[str, Any] | None = None,
                 opset: int | None = None, *, dynamic_batch: bool = False,
                 check: bool = True) -> onnx.ModelProto:
    """Export an IR graph for inference as an ONNX model.

    Args:
        graph: the graph; inputs named in ``params`` become initializers, the rest stay
            inputs. Input dims that are None are written as symbolic dims.
        params: parameter values (NumPy arrays or NDArrays) by input name.
        opset: the ai.onnx opset to write (default: ``default_opset()``).
        dynamic_batch: write axis 0 of the data inputs, and of outputs that share it, as the
            symbolic dim ``batch``.
        check: run the ONNX checker on the result.

    Returns:
        The ModelProto (checker-valid; ONNX shape inference agrees with its declared types).

    Example:
        >>> model = export_graph(graph, params, opset=17)   # doctest: +SKIP
    """
    opset = _check_opset(opset)
    params = {name: _host(value) for name, value in (params or {}).items()
              if name in graph.input_types}
    for name, value in params.items():
        declared = graph.input_types[name]
        if declared.rank != value.ndim or any(d is not None and d != s for d, s in
                                              zip(declared.shape, value.shape)):
            raise BindError(f"parameter {name!r} has shape {value.shape}; the graph declares "
                            f"{declared!r}")
    graph, _ = set_training_mode(graph, False)
    data = [(name, type_) for name, type_ in graph.inputs if name not in params]
    # (sequences and optionals, portable.ir.types, are written as their types)
    symbolic = {(name, axis) for name, type_ in data if isinstance(type_, TensorType)
                for axis, d in enumerate(type_.shape) if d is None}
    # Symbolic dims are typed as 1 while lowering; the file keeps them symbolic.
    probe = {name: TensorType([1 if d is None else d for d in type_.shape], type_.dtype)
             if isinstance(type_, TensorType) else type_ for name, type_ in data}
    probe.update({name: TensorType(value.shape, value.dtype) for name, value in params.items()})
    info = infer_types(graph, probe, params)
    nodes, ctx, outputs = _lower(graph, opset, info, {name for name, _ in data})
    batch = {name: type_.shape[0] for name, type_ in probe.items()
             if name not in params and isinstance(type_, TensorType) and type_.rank}
    model = _build(graph, nodes, ctx, outputs, params, data, opset, symbolic,
                   dynamic_batch, batch)
    if check and model.ByteSize() < PROTOBUF_LIMIT:
        try:
            onnx.checker.check_model(model)
        except onnx.checker.ValidationError as exc:
            raise SerializationError(f"the exported model fails the ONNX checker (a bug in "
                                     f"portable's exporter): {exc}") from exc
    return model


def _lower(graph: Graph, opset: int, info: TypeInfo, data: set[str]
           ) -> tuple[list[Node], _Context, list[str]]:
    # Values computed from data inputs stay computed (their shapes may be symbolic); the rest
    # is known from parameters and constants and is written as initializers.
    varying = set(data)
    for node in graph.nodes:
        if any(name in varying for name in node.inputs):
            varying.update(out for out in node.outputs if out)
    taken = set(info.types) | {node.name for node in graph.nodes}
    used = {name for node in graph.nodes for name in node.inputs if name} | set(graph.outputs)
    ctx = _Context(opset, info, taken, used)
    renamed: dict[str, str] = {}
    work = deque(graph.nodes)
    lowered: list[Node] = []
    while work:
        node = work.popleft()
        if isinstance(node, tuple):  # ("final", node): already at the target version
            lowered.append(node[1].replace(inputs=tuple(renamed.get(i, i)
                                                        for i in node[1].inputs)))
            continue
        node = node.replace(inputs=tuple(renamed.get(i, i) for i in node.inputs))
        if node.op.startswith("onnx:"):
            lowered.append(node)
            continue
        op = registry.get(node.op, node=node)
        if node.op == "Constant" or not op.random and all(
                not o or (o in info.values and o not in varying) for o in node.outputs):
            for out in node.outputs:
                if out:
                    ctx.constants[out] = info.values[out]
            continue
        if node.op in INFERENCE_IDENTITIES and not any(ctx.used(o) for o in node.outputs[1:]
                                                       if o):
            renamed[node.outputs[0]] = node.inputs[0]
            continue
        version = versions.op_version(node.op, _domain_opset(node.domain, opset)) \
            if op.onnx is not None else None
        if version is None:
            emitted, results = _decompose(node, ctx)
            for out, result in zip(node.outputs, results):
                if out and result:
                    renamed[out] = result
            work.extendleft(reversed(emitted))
            continue
        if any(isinstance(value, Graph) for value in node.attrs.values()):
            node = _with_subgraph_protos(node, op, opset, info)
        fixup = versions.TO_ONNX.get(node.op)
        for step in (fixup(node, ctx) if fixup else [node]):
            converted = versions.convert(step, op.onnx.since_version, version, ctx)
            # Nodes of other ops that a step added are canonical: lower them in turn, in order.
            work.extendleft(reversed([("final", n) if n.op == step.op else n
                                      for n in converted]))
    outputs = list(graph.outputs)
    for name in outputs:
        source = renamed.get(name, name)
        while source in renamed:
            source = renamed[source]
        if source != name:
            lowered.append(Node("Identity", (source,), (name,), {}, ctx.fresh(f"{name}/output")))
    return lowered, ctx, outputs


def _with_subgraph_protos(node: Node, op: registry.OpDef, opset: int, info: TypeInfo) -> Node:
    """A control-flow node as ONNX has it: its subgraphs lowered and written as GraphProtos,
    and the trailing inputs that stand for their outer-scope references dropped again (the
    bodies keep reading those values by name; see ``portable/ir/graph.py``)."""
    attrs = op.resolve_attrs(node)
    graphs = {key: value for key, value in attrs.items() if isinstance(value, Graph)}
    count = max(len(body.captures) for body in graphs.values())
    outer = node.inputs[len(node.inputs) - count:] if count else ()
    types = [info.types.get(name) if name else None for name in node.inputs]
    body_types = control_flow.subgraph_input_types(node.op, attrs, types)
    changed = dict(node.attrs)
    for key, body in graphs.items():
        changed[key] = _subgraph_proto(body, body_types[key], outer, opset,
                                       f"node {node.name!r} (op {node.op}): {key}")
    return node.replace(inputs=node.inputs[:len(node.inputs) - count], attrs=changed)


def _subgraph_proto(body: Graph, types: list[Any], outer: tuple[str, ...], opset: int,
                    where: str) -> onnx.GraphProto:
    """One body, lowered at ``opset`` like a model's graph. A captured input whose outer value
    a pass renamed (CSE) reads the outer name through an Identity."""
    try:
        info = control_flow.infer_body(body, types)
    except PortableError as exc:
        raise SerializationError(f"cannot export {where}: {exc}") from exc
    nodes, ctx, outputs = _lower(body, opset, info, set(body.input_names))
    captured = body.input_names[len(body.inputs) - len(body.captures):]
    renames = [Node("Identity", (source,), (name,), {}, f"{name}/outer")
               for source, name in zip(outer, captured) if source != name]
    protos_out, names = [], set()
    for node in renames + nodes:
        name = node.name
        while name in names:
            name = f"{node.name}_{len(names)}"
        names.add(name)
        protos_out.append(_node_proto(node, name, opset))
    read = {i for node in nodes for i in node.inputs if i} | set(outputs)
    read |= _subgraph_reads(protos_out)
    tensors = {**body.initializers, **ctx.constants}
    initializers = [protos.array_to_tensor(tensors[name], name)
                    for name in sorted(read) if name in tensors]
    formal = body.inputs[:len(body.inputs) - len(body.captures)]
    inputs = [protos.value_info(name, type_) for (name, _), type_ in zip(formal, types)]
    typed = [protos.value_info(name, info.types[name]) if name in info.types else
             helper.make_empty_tensor_value_info(name) for name in outputs]
    return helper.make_graph(protos_out, body.name, inputs, typed, initializers)


def _subgraph_reads(nodes: list[onnx.NodeProto]) -> set[str]:
    """Every name the subgraphs of ``nodes`` read (through nested ones too): the outer
    values they refer to are among them, and must stay inputs or initializers."""
    found: set[str] = set()
    for proto in nodes:
        for attr in proto.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                found |= {i for n in attr.g.node for i in n.input if i}
                found |= {o.name for o in attr.g.output}
                found |= _subgraph_reads(list(attr.g.node))
    return found


def _domain_opset(domain: str, opset: int) -> int:
    """The opset a node of ``domain`` is written at: the target for ai.onnx, the newest that
    portable knows for the other standard domains (their canonical forms are their newest)."""
    return opset if not domain else schemas.newest_opset(domain)


def _decompose(node: Node, ctx: _Context) -> tuple[list[Node], list[str | None]]:
    # An op declaration may carry its own decomposition (the ``decompose`` facet: a custom
    # op's refusal names its type); the exporter's table covers the rest.
    rule = registry.get(node.op).decompose or DECOMPOSITIONS.get(node.op)
    if rule is None:
        private = registry.get(node.op).private
        first = None if private else versions.first_version(node.op)
        why = "it is private to portable" if private else \
            f"ai.onnx opset {ctx.opset} predates it"
        raise UnknownOpError(f"node {node.name!r} (op {node.op}) has no ONNX form at opset "
                             f"{ctx.opset} ({why}) and no decomposition into ONNX ops"
                             + (f"; export at opset >= {first}" if first else
                                "; export the inference graph"))
    emitter = _Emitter(node, ctx)
    results = rule(emitter)
    return emitter.nodes, list(results)


def _text(value: str, what: str) -> str:
    """``value`` if ONNX can store it: protobuf writes strings as UTF-8, which a lone surrogate
    (``"\\ud800"``, valid in a Python str) cannot be; otherwise a SerializationError naming
    ``what`` instead of protobuf's UnicodeEncodeError."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise SerializationError(f"cannot export {what}: {value!r:.60} is not valid Unicode "
                                 f"text (it holds a lone surrogate); ONNX stores names and "
                                 f"strings as UTF-8") from None
    return value


def _build(graph: Graph, nodes: list[Node], ctx: _Context, outputs: list[str],
           params: dict[str, np.ndarray], data: list[tuple[str, TensorType]], opset: int,
           symbolic: set, dynamic_batch: bool, batch: dict[str, int]) -> onnx.ModelProto:
    _text(graph.name, "the graph's name")
    for name in [n for n, _ in data] + outputs + list(graph.initializers) + list(params):
        _text(name, f"graph {graph.name!r}: value name")
    names: set[str] = set()
    protos_out = []
    for node in nodes:
        name = node.name
        while name in names:
            name = f"{node.name}_{len(names)}"
        names.add(name)
        protos_out.append(_node_proto(node, name, opset))
    read = {i for node in nodes for i in node.inputs if i} | set(outputs)
    read |= _subgraph_reads(protos_out)  # outer-scope references of control-flow bodies
    tensors = {**graph.initializers, **ctx.constants, **params}
    initializers = [protos.array_to_tensor(tensors[name], name)
                    for name in sorted(read) if name in tensors and name not in dict(data)]
    batch_sizes = set(batch.values())

    def dims_of(name: str, type_: TensorType, is_input: bool) -> dict[int, str]:
        dims = {axis: f"{name}_dim{axis}" for (n, axis) in symbolic if n == name}
        if dynamic_batch and isinstance(type_, TensorType) and type_.rank and (
                is_input or type_.shape[0] in batch_sizes):
            dims[0] = "batch"
        return dims

    inputs = [protos.value_info(name, type_, dims_of(name, type_, True))
              for name, type_ in data if name in read]
    typed = [protos.value_info(name, ctx.info.types[name],
                               dims_of(name, ctx.info.types[name], False)) for name in outputs]
    onnx_graph = helper.make_graph(protos_out, graph.name, inputs, typed, initializers)
    domains = sorted({node.domain for node in nodes if node.domain})
    imports = [helper.make_opsetid("", opset)] + [
        helper.make_opsetid(domain, _domain_opset(domain, opset)) for domain in domains]
    model = helper.make_model(onnx_graph, opset_imports=imports,
                              producer_name="portable", producer_version=portable.__version__)
    model.ir_version = helper.find_min_ir_version_for(model.opset_import)
    return model


def _node_proto(node: Node, name: str, opset: int) -> onnx.NodeProto:
    op = node.op[len("onnx:"):] if node.op.startswith("onnx:") else node.op
    schema = versions.schema(op, versions.op_version(op, _domain_opset(node.domain, opset)))
    where = f"node {node.name!r} (op {op})"
    for text in (name, *node.inputs, *node.outputs, *node.attrs):
        _text(text, where)
    # (ops of the other standard domains are named "<domain>.<op_type>")
    proto = helper.make_node(op.rsplit(".", 1)[-1], list(node.inputs), list(node.outputs),
                             name=name, domain=node.domain or None)
    for key, value in node.attrs.items():
        if value is None:
            continue
        kind = schema.attributes[key].kind if key in schema.attributes else None
        try:
            proto.attribute.append(protos.make_attribute(key, value, kind))
        except UnicodeEncodeError:  # a string value holding a lone surrogate
            raise SerializationError(f"cannot export {where}: attribute {key!r} holds "
                                     f"{value!r:.60}, which is not valid Unicode text; ONNX "
                                     f"stores strings as UTF-8") from None
    return proto


def export_model(model: Any, params: Any = None, path: str | os.PathLike | None = None,
                 opset: int | None = None, *, input_shapes: Mapping[str, Any] | None = None,
                 input_types: Mapping[str, Any] | None = None, dynamic_batch: bool = False,
                 check: bool = True) -> onnx.ModelProto:
    """Export a Graph or a Symbol with its parameters, optionally writing ``path``.

    Args:
        model: an IR ``Graph`` or a ``Symbol``.
        params: parameters by name (NumPy arrays or NDArrays), or ``(arg_params,
            aux_params)`` as MXNet's exporters take them.
        path: where to write the model (atomically); models of 2 GiB or more keep their
            tensors in ``<path>.data`` beside it.
        opset: the ai.onnx opset (default: the newest the installed onnxruntime runs).
        input_shapes, input_types: shapes and dtypes of a Symbol's data inputs.
        dynamic_batch: make axis 0 of inputs (and outputs that share it) symbolic.
        check: run the ONNX checker.

    Returns:
        The ModelProto.

    Example:
        >>> export_model(net, (arg_params, aux_params), "net.onnx",
        ...              input_shapes={"data": (1, 1, 28, 28)}, dynamic_batch=True)
        ... # doctest: +SKIP
    """
    if isinstance(params, (tuple, list)):
        merged: dict[str, Any] = {}
        for part in params:
            merged.update(part or {})
        params = merged
    params = dict(params or {})
    if isinstance(model, Graph):
        graph = model
    elif hasattr(model, "list_arguments"):
        from portable.io.onnx.symbolic import symbol_graph

        graph, params = symbol_graph(model, params, input_shapes, input_types)
    else:
        raise PortableError(f"cannot export {type(model).__name__}: give a Graph or a Symbol")
    proto = export_graph(graph, params, opset, dynamic_batch=dynamic_batch, check=check)
    if path is not None:
        save(proto, path)
    return proto


def save(model: onnx.ModelProto, path: str | os.PathLike) -> None:
    """Write ``model`` atomically; at 2 GiB or more its tensors go to ``<path>.data``."""
    path = os.fspath(path)
    if model.ByteSize() < PROTOBUF_LIMIT:
        atomic_write_bytes(path, model.SerializeToString())
        return
    folder = os.path.dirname(os.path.abspath(path))
    location = os.path.basename(path) + ".data"
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        staged = os.path.join(scratch, os.path.basename(path))
        onnx.save_model(model, staged, save_as_external_data=True, location=location)
        os.replace(os.path.join(scratch, location), os.path.join(folder, location))
        os.replace(staged, path)


register_exporter("onnx", export_model)
