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

from dataclasses import replace
from typing import Any, Mapping, Sequence

import numpy as np

from portable.errors import BindError, OpError
from portable.io.atomic import atomic_write_text
from portable.ir.graph import Graph, Node, TensorType
from portable.ops import registry
from portable.passes.infer import TypeInfo, infer_node
from portable.symbol.mxnet_json import (entries_from_mxnet_json, is_mxnet_document,
                                        parse_document)
from portable.symbol.nodes import SymNode, auto_name, topo_nodes
from portable.symbol.serialize import entries_from_json, entries_to_json, read_text
from portable.symbol.shape_hints import resolve_hint

__all__ = ["Group", "SymNode", "Symbol", "Variable", "apply_op", "auto_name", "compose",
           "constant", "fromjson", "load", "load_json", "scalar", "set_user_attrs",
           "topo_nodes", "var"]


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
        """The attribute ``key`` of this one-node symbol as MXNet stores it (a string:
        ``var('w', lr_mult=2.0).attr('__lr_mult__') == '2.0'``), else None."""
        return self.list_attr().get(key)

    def list_attr(self, recursive: bool = False) -> dict[str, str]:
        """The attributes of the head node (MXNet's strings); ``recursive`` is refused as in
        MXNet 1.x (use ``attr_dict``)."""
        if recursive:
            raise BindError("Symbol.list_attr(recursive=True) is removed in MXNet 1.x; "
                            "use attr_dict()")
        if len({id(node) for node, _ in self._entries}) != 1:
            return {}
        return _node_attrs(self._entries[0][0])

    def attr_dict(self) -> dict[str, dict[str, str]]:
        """``{node name: its attributes}`` for every node that has some."""
        found = {node.name: _node_attrs(node) for node in self._nodes()}
        return {name: attrs for name, attrs in found.items() if attrs}

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
               partial: bool = False, scalar_dtypes: dict | None = None,
               lowered_nodes: dict | None = None) -> TypeInfo | None:
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
            lowered = self._to_node(node, types=info.types)
            if lowered_nodes is not None:
                lowered_nodes[id(node)] = lowered
            infer_node(lowered, info)
        return info

    def _infer_scalar(self, scalar: SymNode, consumer: SymNode, info: TypeInfo,
                      scalar_dtypes: dict) -> None:
        others = [e for e in consumer.inputs if e is not None and not e[0].scalar]
        known = [info.types.get(e[0].output_name(e[1])) for e in others]
        dtype = next((t.dtype for t in known if t is not None), np.dtype(np.float32))
        scalar_dtypes[id(scalar)] = dtype
        infer_node(self._to_node(scalar, dtype), info)

    @staticmethod
    def _to_node(node: SymNode, scalar_dtype: Any = None,
                 types: Mapping[str, Any] | None = None) -> Node:
        inputs = tuple("" if e is None else e[0].output_name(e[1]) for e in node.inputs)
        outputs = tuple(node.output_name(i) for i in range(node.num_outputs))
        attrs = node.attrs
        if any(hasattr(v, "lower_body") for v in attrs.values()):
            # a traced control-flow body (sym.contrib): lowered for its node's input types
            if types is None:
                raise BindError(f"node {node.name!r} (op {node.op}) holds a traced body: "
                                f"lower the symbol with to_graph")
            in_types = [types.get(name) if name else None for name in inputs]
            attrs = {k: v.lower_body(in_types) if hasattr(v, "lower_body") else v
                     for k, v in attrs.items()}
        if scalar_dtype is not None:
            attrs = {"value": np.asarray(attrs["value"], dtype=scalar_dtype)}
        return Node(node.op, inputs, outputs, attrs, node.name)

    def infer_shape(self, *args: Any, **shapes: Any):
        """Returns ``(arg_shapes, out_shapes, aux_shapes)`` in list order, MXNet-style."""
        shapes = self._positional(args, shapes)
        info = self._infer(shapes, {})
        return self._report(info.types, lambda t: t.shape)

    def infer_shape_partial(self, *args: Any, **shapes: Any):
        info = self._infer(self._positional(args, shapes), {}, partial=True)
        if info is None:
            return None, None, None
        return self._report(info.types, lambda t: t.shape)

    def infer_type(self, *args: Any, **dtypes: Any):
        """``(arg_types, out_types, aux_types)`` in list order, MXNet-style; no shape needed.

        With every shape known (declared, or hinted from the data's) the full type inference
        answers; else each op's dtype rule does, unifying as MXNet does (a layer's weights take
        its data's dtype). ``(None, None, None)`` when some dtype stays unknown.

        Example:
            >>> import portable as pt
            >>> fc = pt.sym.FullyConnected(pt.sym.var("x"), num_hidden=3, name="fc")
            >>> [t.name for t in fc.infer_type(x="float16")[0]]
            ['float16', 'float16', 'float16']
        """
        found = self._infer_dtypes(self._positional(args, dtypes))
        if any(t is None for part in found for t in part):
            return None, None, None
        return found

    def infer_type_partial(self, *args: Any, **dtypes: Any):
        """``infer_type`` with None for each dtype that stays unknown."""
        return self._infer_dtypes(self._positional(args, dtypes))

    def _infer_dtypes(self, dtypes: Mapping[str, Any]):
        from portable.symbol.dtype_inference import infer_dtypes

        info = self._infer({}, dtypes, partial=True)
        names = self.list_arguments() + self.list_outputs() + self.list_auxiliary_states()
        if info is not None and all(n in info.types for n in names):  # every shape known
            return self._report(info.types, lambda t: t.dtype)
        return self._report(infer_dtypes(self._nodes(), dtypes), lambda t: t)

    def _positional(self, args, named):
        named = dict(named)
        named.update(zip(self.list_arguments(), args))
        return named

    def _report(self, types: Mapping[str, Any], pick):
        """``(arguments, outputs, auxiliary states)`` of ``pick(types[name])``."""
        args = [pick(types[n]) for n in self.list_arguments()]
        outs = [pick(types[n]) for n in self.list_outputs()]
        aux = [pick(types[n]) for n in self.list_auxiliary_states()]
        return args, outs, aux

    def to_graph(self, shapes: Mapping[str, Any] | None = None,
                 dtypes: Mapping[str, Any] | None = None, name: str = "symbol") -> Graph:
        """Lower to an IR Graph whose inputs are the arguments then the auxiliary states."""
        scalar_dtypes: dict = {}
        lowered: dict = {}
        info = self._infer(shapes or {}, dtypes or {}, scalar_dtypes=scalar_dtypes,
                           lowered_nodes=lowered)
        nodes = tuple(lowered.get(id(n)) or self._to_node(n, scalar_dtypes.get(id(n)))
                      for n in self._nodes() if not n.is_variable)
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
             grad_req: Any = "write", aux_states: Any = None, group2ctx: Any = None,
             shared_exec: Any = None, ctx: Any = None):
        """Bind arrays to the arguments and return an Executor (MXNet's ``Symbol.bind``;
        ``ctx`` is MXNet's name for ``device``; ``group2ctx`` and ``shared_exec`` are accepted
        and not used: one device runs the whole graph)."""
        from portable.executor.executor import Executor

        return Executor(self, _device(device, ctx), args, args_grad, grad_req, aux_states)

    def simple_bind(self, device: Any = None, grad_req: Any = "write",
                    type_dict: Mapping[str, Any] | None = None, stype_dict: Any = None,
                    group2ctx: Any = None, shared_arg_names: Any = None,
                    shared_exec: Any = None, shared_buffer: Any = None, ctx: Any = None,
                    **shapes: Any):
        """Allocate arguments (zeros), gradients and auxiliary states from input shapes
        (dtypes from ``type_dict``, the variables' declared dtypes, or float32). MXNet's
        sharing and storage-type arguments are accepted and not used."""
        from portable.executor.executor import Executor

        return Executor.allocate(self, _device(device, ctx), grad_req, shapes, type_dict)

    def eval(self, device: Any = None, ctx: Any = None, **kwargs: Any):
        """Bind ``kwargs`` and run forward once; returns the outputs."""
        return self.bind(_device(device, ctx), kwargs, grad_req="null").forward()

    # -- composition -----------------------------------------------------------------------
    def __call__(self, *args: "Symbol", name: str | None = None, **kwargs: "Symbol") -> "Symbol":
        """A copy with arguments replaced (MXNet's composition ``net2(data2=net1)``):
        positional symbols replace ``list_arguments()`` in order, keywords by name; ``name``
        renames the head node.

        Example:
            >>> x, y = var("x"), var("y")
            >>> (x + 1.0)(x=y * 2.0).list_arguments()
            ['y']
        """
        if args and kwargs:
            raise BindError("compose takes input symbols either positionally or by keyword, "
                            "not both")
        if args:
            names = self.list_arguments()
            if len(args) > len(names):
                raise BindError(f"compose got {len(args)} positional symbols for the "
                                f"{len(names)} arguments {names}")
            kwargs = dict(zip(names, args))
        else:
            known = self.list_inputs()
            unknown = [k for k in kwargs if k not in known]
            if unknown:
                raise BindError(f"compose: argument name {unknown[0]!r} not found; the "
                                f"symbol's are {known}")
        composed = compose(self, kwargs)
        if name is not None:
            heads = {id(node): node for node, _ in composed._entries if not node.is_variable}
            if len(heads) == 1:
                next(iter(heads.values())).name = name
        return composed

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


def var(name: str, attr: Mapping[str, str] | None = None, shape: Any = None,
        lr_mult: float | None = None, wd_mult: float | None = None, dtype: Any = None,
        init: Any = None, stype: str | None = None, **kwargs: Any) -> Symbol:
    """A free variable (an argument or auxiliary state), MXNet's ``sym.var``: the
    multipliers, initializer, storage type, ``attr`` and ``__key__`` keywords become its
    attributes as MXNet stores them (``lr_mult=2.0`` -> ``__lr_mult__ = '2.0'``).

    Example:
        >>> var("w", lr_mult=2.0).attr("__lr_mult__")
        '2.0'
    """
    node = SymNode(None, name, shape=None if shape is None else tuple(shape),
                   dtype=None if dtype is None else np.dtype(dtype))
    attrs: dict[str, str] = {}
    if lr_mult is not None:
        attrs["__lr_mult__"] = str(lr_mult)
    if wd_mult is not None:
        attrs["__wd_mult__"] = str(wd_mult)
    if init is not None:
        attrs["__init__"] = init if isinstance(init, str) else init.dumps()
    if stype is not None:
        attrs["__storage_type__"] = str(_STORAGE_TYPES.get(stype, stype))
    for key, value in kwargs.items():
        if not (key.startswith("__") and key.endswith("__")):
            raise BindError(f"var {name!r}: attribute {key!r} is not allowed; extra "
                            f"attributes must start and end with double underscores, e.g. "
                            f"__{key}__ (MXNet's rule)")
        attrs[key] = str(value)
    set_user_attrs(Symbol([(node, 0)]), {}, {**dict(attr or {}), **attrs})
    return Symbol([(node, 0)])


Variable = var


def Group(symbols: Sequence[Symbol]) -> Symbol:  # noqa: N802 - MXNet's name
    """One symbol whose outputs are the outputs of ``symbols``."""
    return Symbol([entry for s in symbols for entry in s._entries])


# MXNet's storage type ids (``__storage_type__``) and the hidden keys nnvm stores twice.
_STORAGE_TYPES = {"default": 0, "row_sparse": 1, "csr": 2}
_HIDDEN_KEYS = ("ctx_group", "lr_mult", "wd_mult", "force_mirroring", "mirror_stage",
                "profiler_scope")
# NumPy dtype name -> MXNet's type flag (a variable's ``__dtype__``)
_DTYPE_FLAGS = {"float32": 0, "float64": 1, "float16": 2, "uint8": 3, "int32": 4, "int8": 5,
                "int64": 6, "bool": 7}


def set_user_attrs(symbol: Symbol, op_attrs: Mapping[str, str],
                   attr: Mapping[str, Any] | None) -> None:
    """Record MXNet's string attributes on the head node(s) of ``symbol``: the op's keyword
    strings and the user's ``attr`` dict (a hidden key such as ``lr_mult`` under both
    ``lr_mult`` and ``__lr_mult__``, as nnvm stores it). They are what ``list_attr`` and
    ``attr_dict`` report; lowering never reads them."""
    strings = dict(op_attrs)
    for key, value in (attr or {}).items():
        bare = key[2:-2] if key.startswith("__") and key.endswith("__") else key
        if bare in _HIDDEN_KEYS:
            strings[f"__{bare}__"] = strings[bare] = str(value)
        else:
            strings[key] = str(value)
    for node in {id(n): n for n, _ in symbol._entries}.values():
        node.var_attrs.update(strings)


def _node_attrs(node: SymNode) -> dict[str, str]:
    attrs = {}
    if node.is_variable and node.shape is not None:
        attrs["__shape__"] = str(tuple(node.shape))
    if node.is_variable and node.dtype is not None and node.dtype.name in _DTYPE_FLAGS:
        attrs["__dtype__"] = str(_DTYPE_FLAGS[node.dtype.name])
    attrs.update({k: v if isinstance(v, str) else str(v) for k, v in node.var_attrs.items()})
    return attrs


def _device(device: Any, ctx: Any) -> Any:
    """MXNet's ``ctx=`` keyword, or portable's ``device``."""
    if device is not None and ctx is not None:
        raise BindError("give the device once: device= or MXNet's ctx=, not both")
    return device if device is not None else ctx


def compose(outputs: Symbol, substitutes: Mapping[str, Symbol]) -> Symbol:
    """A copy of ``outputs`` whose variables named in ``substitutes`` are replaced by the
    given one-output Symbols (MXNet's symbol composition ``sym(data=x)``); op nodes are
    copied, so the original is left as it was.

    Example:
        >>> compose(var("x") * 2.0, {"x": var("y")}).list_arguments()
        ['y']
    """
    clones: dict[int, tuple[SymNode, int]] = {}
    for node in topo_nodes(outputs._entries):
        if node.is_variable:
            replacement = substitutes.get(node.name)
            if replacement is None:
                clones[id(node)] = (node, 0)
                continue
            if not isinstance(replacement, Symbol) or len(replacement) != 1:
                raise BindError(f"compose: the input for {node.name!r} must be a one-output "
                                f"Symbol, got {replacement!r}")
            clones[id(node)] = replacement._entries[0]
            continue
        inputs = [None if e is None else _remap(clones, e) for e in node.inputs]
        clones[id(node)] = (replace(node, inputs=inputs, attrs=dict(node.attrs),
                                    var_attrs=dict(node.var_attrs)), 0)
    return Symbol([_remap(clones, entry) for entry in outputs._entries])


def _remap(clones: dict[int, tuple[SymNode, int]], entry: tuple[SymNode, int]):
    node, index = entry
    target, base = clones[id(node)]
    return (target, base) if node.is_variable else (target, index)


def fromjson(text: str, source: str = "<string>") -> Symbol:
    """Parse a symbol: portable's own JSON or MXNet 1.x's symbol JSON (``-symbol.json``), told
    apart by portable's ``"format"`` tag. Malformed input raises SerializationError naming the
    source and node.

    Example:
        >>> fromjson(open("lenet-symbol.json").read()).list_outputs()   # doctest: +SKIP
        ['hybridsequential0_dense2_fwd_output']
    """
    doc = parse_document(text)
    if is_mxnet_document(doc):
        return Symbol(entries_from_mxnet_json(doc, source))
    return Symbol(entries_from_json(text, source))


load_json = fromjson  # MXNet 1.x's name for the same function


def load(path: str) -> Symbol:
    """Read a symbol file: written by ``Symbol.save``, or by MXNet 1.x (``HybridBlock.export``,
    ``Symbol.save``, ``Module.save_checkpoint``)."""
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
