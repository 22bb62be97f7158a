"""Symbol: the declarative front end (MXNet 1.x names).

A Symbol is a list of output entries of a small DAG of ``SymNode``s. Variables are nodes without
an op. Composing symbols builds the DAG; ``to_graph`` lowers it to the IR, where everything else
(type inference, autodiff, planning, execution, export) happens.

Example:
    >>> import portable as pt
    >>> x = pt.sym.var("x")
    >>> y = pt.sym.relu(x * 2.0)
    >>> y.list_arguments()
    ['x']
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from portable.errors import BindError, OpError
from portable.io.atomic import atomic_write_text
from portable.ir.graph import Graph, Node, TensorType
from portable.ops import registry
from portable.passes.infer import TypeInfo, infer_node
from portable.symbol.nodes import SymNode, auto_name, topo_nodes
from portable.symbol.serialize import entries_from_json, entries_to_json, read_text
from portable.symbol.shape_hints import resolve_hint

__all__ = ["Group", "SymNode", "Symbol", "Variable", "apply_op", "auto_name", "constant",
           "fromjson", "load", "scalar", "topo_nodes", "var"]


class Symbol:
    """A symbolic expression with one or more outputs."""

    def __init__(self, entries: Sequence[tuple[SymNode, int]]) -> None:
        self._entries = list(entries)

    # -- structure -------------------------------------------------------------------------
    @property
    def name(self) -> str | None:
        if len(self._entries) != 1:
            return None
        node, index = self._entries[0]
        return node.name if node.num_outputs == 1 else node.output_name(index)

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, index: int | str) -> "Symbol":
        if isinstance(index, str):
            names = self.list_outputs()
            if index not in names:
                raise KeyError(f"no output named {index!r}; outputs: {names}")
            index = names.index(index)
        return Symbol([self._entries[index]])

    def __iter__(self):
        return (Symbol([entry]) for entry in self._entries)

    def _nodes(self) -> list[SymNode]:
        return topo_nodes(self._entries)

    def _aux_nodes(self) -> list[SymNode]:
        aux = []
        for node in self._nodes():
            if node.is_variable:
                continue
            for _, in_index in registry.get(node.op).mutates:
                if in_index < len(node.inputs) and node.inputs[in_index] is not None:
                    source = node.inputs[in_index][0]
                    if source.is_variable and source not in aux:
                        aux.append(source)
        return aux

    def list_inputs(self) -> list[str]:
        return [n.name for n in self._nodes() if n.is_variable]

    def list_arguments(self) -> list[str]:
        aux = {id(n) for n in self._aux_nodes()}
        return [n.name for n in self._nodes() if n.is_variable and id(n) not in aux]

    def list_auxiliary_states(self) -> list[str]:
        return [n.name for n in self._aux_nodes()]

    def list_outputs(self) -> list[str]:
        return [node.output_name(index) for node, index in self._entries]

    def get_internals(self) -> "Symbol":
        """Every output of every node, for feature extraction."""
        return Symbol([(n, i) for n in self._nodes() for i in range(n.num_outputs)])

    def get_children(self) -> "Symbol | None":
        inputs = [e for node, _ in self._entries for e in node.inputs if e is not None]
        return Symbol(inputs) if inputs else None

    def attr(self, key: str) -> Any:
        node = self._entries[0][0]
        return node.var_attrs.get(key, node.attrs.get(key))

    # -- lowering and inference ------------------------------------------------------------
    def _var_types(self, shapes: Mapping[str, Any], dtypes: Mapping[str, Any]) -> dict:
        types = {}
        for node in self._nodes():
            if not node.is_variable:
                continue
            shape = shapes.get(node.name, node.shape)
            if shape is not None:
                dtype = dtypes.get(node.name, node.dtype or np.float32)
                types[node.name] = TensorType(shape, dtype)
        return types

    def _infer(self, shapes: Mapping[str, Any], dtypes: Mapping[str, Any],
               partial: bool = False, scalar_dtypes: dict | None = None) -> TypeInfo | None:
        """Types of every entry; variables without a shape take it from their shape hint,
        and Python scalars the dtype of their consumer's other operand (recorded in
        ``scalar_dtypes``, keyed by node id)."""
        info = TypeInfo(types=self._var_types(shapes, dtypes))
        scalar_dtypes = {} if scalar_dtypes is None else scalar_dtypes
        for node in self._nodes():
            if node.is_variable or node.scalar:
                continue
            for entry in node.inputs:
                if entry is not None and entry[0].scalar:
                    self._infer_scalar(entry[0], node, info, scalar_dtypes)
                if entry is None or not entry[0].is_variable or entry[0].name in info.types:
                    continue
                var = entry[0]
                if var.shape_hint is None:
                    if partial:
                        return None
                    raise BindError(f"cannot infer the shape of argument {var.name!r} (input "
                                    f"of node {node.name!r}, op {node.op}); give it, e.g. "
                                    f"infer_shape({var.name}=(...)) or sym.var(shape=...)")
                rule, source, params = var.shape_hint
                source_type = info.types[source[0].output_name(source[1])]
                info.types[var.name] = TensorType(
                    resolve_hint(rule, source_type.shape, params),
                    dtypes.get(var.name, var.dtype or source_type.dtype))
            infer_node(self._to_node(node), info)
        return info

    def _infer_scalar(self, scalar: SymNode, consumer: SymNode, info: TypeInfo,
                      scalar_dtypes: dict) -> None:
        others = [e for e in consumer.inputs if e is not None and not e[0].scalar]
        known = [info.types.get(e[0].output_name(e[1])) for e in others]
        dtype = next((t.dtype for t in known if t is not None), np.dtype(np.float32))
        scalar_dtypes[id(scalar)] = dtype
        infer_node(self._to_node(scalar, dtype), info)

    @staticmethod
    def _to_node(node: SymNode, scalar_dtype: Any = None) -> Node:
        inputs = tuple("" if e is None else e[0].output_name(e[1]) for e in node.inputs)
        outputs = tuple(node.output_name(i) for i in range(node.num_outputs))
        attrs = node.attrs
        if scalar_dtype is not None:
            attrs = {"value": np.asarray(attrs["value"], dtype=scalar_dtype)}
        return Node(node.op, inputs, outputs, attrs, node.name)

    def infer_shape(self, *args: Any, **shapes: Any):
        """Returns ``(arg_shapes, out_shapes, aux_shapes)`` in list order, MXNet-style."""
        shapes = self._positional(args, shapes)
        info = self._infer(shapes, {})
        return self._report(info, lambda t: t.shape)

    def infer_shape_partial(self, *args: Any, **shapes: Any):
        info = self._infer(self._positional(args, shapes), {}, partial=True)
        if info is None:
            return None, None, None
        return self._report(info, lambda t: t.shape)

    def infer_type(self, *args: Any, **dtypes: Any):
        """Returns ``(arg_types, out_types, aux_types)``; needs declared shapes or hints."""
        dtypes = self._positional(args, dtypes)
        info = self._infer({}, dtypes)
        return self._report(info, lambda t: t.dtype)

    def _positional(self, args, named):
        named = dict(named)
        named.update(zip(self.list_arguments(), args))
        return named

    def _report(self, info, pick):
        args = [pick(info.types[n]) for n in self.list_arguments()]
        outs = [pick(info.types[n]) for n in self.list_outputs()]
        aux = [pick(info.types[n]) for n in self.list_auxiliary_states()]
        return args, outs, aux

    def to_graph(self, shapes: Mapping[str, Any] | None = None,
                 dtypes: Mapping[str, Any] | None = None, name: str = "symbol") -> Graph:
        """Lower to an IR Graph whose inputs are the arguments then the auxiliary states."""
        scalar_dtypes: dict = {}
        info = self._infer(shapes or {}, dtypes or {}, scalar_dtypes=scalar_dtypes)
        nodes = tuple(self._to_node(n, scalar_dtypes.get(id(n))) for n in self._nodes()
                      if not n.is_variable)
        names = self.list_arguments() + self.list_auxiliary_states()
        return Graph(nodes=nodes, inputs=tuple((n, info.types[n]) for n in names),
                     outputs=tuple(self.list_outputs()), name=name)

    # -- serialisation ---------------------------------------------------------------------
    def tojson(self) -> str:
        return entries_to_json(self._entries)

    def save(self, path: str) -> None:
        """Write the symbol's JSON atomically."""
        atomic_write_text(path, self.tojson())

    # -- execution -------------------------------------------------------------------------
    def bind(self, device: Any = None, args: Any = None, args_grad: Any = None,
             grad_req: Any = "write", aux_states: Any = None):
        """Bind arrays to the arguments and return an Executor (MXNet's ``Symbol.bind``)."""
        from portable.executor.executor import Executor

        return Executor(self, device, args, args_grad, grad_req, aux_states)

    def simple_bind(self, device: Any = None, grad_req: Any = "write",
                    type_dict: Mapping[str, Any] | None = None, **shapes: Any):
        """Allocate arguments (zeros), gradients and auxiliary states from input shapes
        (dtypes from ``type_dict``, the variables' declared dtypes, or float32)."""
        from portable.executor.executor import Executor

        return Executor.allocate(self, device, grad_req, shapes, type_dict)

    def eval(self, device: Any = None, **kwargs: Any):
        """Bind ``kwargs`` and run forward once; returns the outputs."""
        return self.bind(device, kwargs, grad_req="null").forward()

    # -- operators -------------------------------------------------------------------------
    def _binary(self, op: str, other: Any, reverse: bool = False) -> "Symbol":
        other = other if isinstance(other, Symbol) else scalar(other)
        a, b = (other, self) if reverse else (self, other)
        return apply_op(op, [a, b])

    def __add__(self, o): return self._binary("Add", o)
    def __radd__(self, o): return self._binary("Add", o, True)
    def __sub__(self, o): return self._binary("Sub", o)
    def __rsub__(self, o): return self._binary("Sub", o, True)
    def __mul__(self, o): return self._binary("Mul", o)
    def __rmul__(self, o): return self._binary("Mul", o, True)
    def __truediv__(self, o): return self._binary("Div", o)
    def __rtruediv__(self, o): return self._binary("Div", o, True)
    def __pow__(self, o): return self._binary("Pow", o)
    def __gt__(self, o): return self._binary("Greater", o)
    def __lt__(self, o): return self._binary("Less", o)

    def __neg__(self):
        return apply_op("Neg", [self])

    def __repr__(self) -> str:
        return f"<Symbol {self.name or self.list_outputs()}>"


def var(name: str, shape: Any = None, dtype: Any = None, init: Any = None,
        **attrs: Any) -> Symbol:
    """A free variable (an argument or auxiliary state), MXNet's ``sym.var``."""
    node = SymNode(None, name, shape=None if shape is None else tuple(shape),
                   dtype=None if dtype is None else np.dtype(dtype), var_attrs=dict(attrs))
    if init is not None:
        node.var_attrs["__init__"] = init
    return Symbol([(node, 0)])


Variable = var


def Group(symbols: Sequence[Symbol]) -> Symbol:  # noqa: N802 - MXNet's name
    """One symbol whose outputs are the outputs of ``symbols``."""
    return Symbol([entry for s in symbols for entry in s._entries])


def fromjson(text: str, source: str = "<string>") -> Symbol:
    """Parse a symbol; malformed input raises SerializationError naming the source and node."""
    return Symbol(entries_from_json(text, source))


def load(path: str) -> Symbol:
    """Read a symbol written by ``Symbol.save``."""
    return fromjson(read_text(path), source=path)


# -- building nodes ----------------------------------------------------------------------------


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
    fixed_by_attribute = op.attribute_output_count(attrs)
    if fixed_by_attribute is not None:
        return fixed_by_attribute
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
