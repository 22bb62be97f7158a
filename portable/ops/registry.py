"""Op declarations: every facet of an op in one place, and the table that holds them.

An op is declared once, in ``portable/ops/<family>.py``, with ``declare(...)``. The declaration
holds its attribute schema with defaults, its type rule (shapes and dtypes), gradient rule,
in-place pairs, view behaviour, ignored inputs, fusion kind and ONNX mapping as plain data.
Passes, kernels, autodiff, autograd and the exporters read these facets; none of them tests an
op's name.

Defaults of facets left out:
- ``grad=None``: not differentiable; asking for a gradient raises NotDifferentiableError naming
  the op.
- ``inplace=()``: no output may reuse an input's storage.
- ``view=False``: the output owns its storage. A view op's output 0 aliases input 0's bytes.
- ``fusion="opaque"``: never fused.
- ``mutates=()``: no state. A pair ``(o, i)`` says output ``o`` is the new value of the mutable
  input ``i`` (BatchNormalization's running statistics); executors write it back after a run.
- ``nondiff_inputs=()``: every float input gets a gradient; listed ones (shapes, axes) never do.
- ``ignored_inputs=()``: inputs whose values the kernel never reads (Shape reads only the shape).
- ``shape_inputs=()``: inputs of any dtype whose values decide the output's shape (Resize's
  scales): a runtime that is handed them as graph inputs plans with their values. (Small
  integer inputs are planned with their values anyway.)
- ``fold=None``: outputs are known while planning only when every input value is; a fold rule
  computes them from input types alone (Shape).
- ``random=False``: a random op is never constant-folded or merged by CSE.
- ``training_mode=None``: behaves the same in training and inference.
- ``decompose=None``: how the ONNX exporter writes the op if ONNX lacks it (a rule over the
  gradient-rule interface, as ``exporters/onnx/decompositions.py`` holds for the rest); a rule
  may also refuse with a message that names what the user wrote (a custom op's type).
- ``runtime_attrs=()``: attributes that only kernels read, never the type rule (an optimizer
  step's learning rate and step count): they may change on every call, so imperative calls
  cache type inference without their values and backends pass them to compiled kernels as
  arguments rather than compiling them in.
- ``dtype_rule=None``: the output dtypes without shapes (``Symbol.infer_type`` before shapes
  are known), as MXNet's ElemwiseType: the data inputs (every input not listed in
  ``nondiff_inputs``, ``ignored_inputs`` or ``shape_inputs``) and the outputs share one dtype,
  and those not known yet (a layer's parameters) take it. An op whose outputs differ declares a
  rule over a DtypeContext; ``tests/symbol/test_dtype_inference.py`` checks every op's rule
  against its type rule on the op table's cases.
- ``dynamic_outputs=False``: when True (NonZero, Unique, Loop, the sequence ops), an output's
  shape may depend on input values, or the output is not a tensor: the type rule gives None for
  dims it cannot know (exact ones when the values are known while planning); the executor
  runs such a node between planned segments, passing None for the outputs it could not place,
  and the kernel returns them (``portable.backend.output_array``, ``returned_outputs``).
- ``subgraph_types=None``: for an op holding graphs (If, Loop, Scan, FlexAttention), the
  input types each body runs with, ``(resolved attrs, node input types) -> {attr: [types]}``
  (the exporter writes the bodies with them).
- ``widens_weights=False``: when True (DequantizeLinear, Cast), a node that reads a graph weight
  and widens it (int8 or int4 to float32) is not constant-folded: the weight stays as stored and
  is widened per use into planned workspace (``portable/passes/fold_constants.py``).
- ``onnx``: ONNX ops are exported under their own name; private ops (domain ``portable``) are
  never exported as such.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from portable.errors import OpAttributeError, OpError, UnknownOpError
from portable.ir.graph import ONNX_EXTRA_DOMAINS, PRIVATE_DOMAIN, Graph, Node, TensorType
from portable.ir.types import OptionalType, SequenceType

REQUIRED = object()
# "graph": a subgraph (If's branches, Loop's and Scan's body), a portable Graph.
ATTR_KINDS = ("int", "float", "string", "ints", "floats", "strings", "tensor", "graph",
              "type")


@dataclass(frozen=True)
class Attr:
    """One attribute of an op's schema: its kind (ONNX attribute kinds) and default."""

    kind: str
    default: Any = REQUIRED

    def __post_init__(self) -> None:
        if self.kind not in ATTR_KINDS:
            raise ValueError(f"attribute kind {self.kind!r} is not one of {ATTR_KINDS}")


def _scalar_of_kind(value: Any, kind: str) -> bool:
    if kind == "int":
        return isinstance(value, (int, np.integer))  # bool is an int: flags are ints in ONNX
    if kind == "float":
        return isinstance(value, (int, float, np.integer, np.floating))
    return isinstance(value, str)


def _of_kind(value: Any, kind: str) -> bool:
    """Whether ``value`` can stand for an attribute of ``kind`` (an ONNX attribute kind)."""
    if kind == "tensor":
        return isinstance(value, np.ndarray)
    if kind == "graph":
        return isinstance(value, Graph)
    if kind == "type":  # a TypeProto attribute (Optional's): a portable value type
        return isinstance(value, (TensorType, SequenceType, OptionalType))
    if kind in ("ints", "floats", "strings"):
        if isinstance(value, np.ndarray):
            return value.ndim == 1 and _scalar_of_kind(value.dtype.type(0), kind[:-1])
        return isinstance(value, (list, tuple)) and all(
            _scalar_of_kind(v, kind[:-1]) for v in value)
    return _scalar_of_kind(value, kind)


@dataclass(frozen=True)
class OnnxSpec:
    """How the op maps to ONNX: the opset whose version of the op is our canonical form."""

    since_version: int
    name: str = ""


@dataclass(frozen=True)
class OpDef:
    """The declaration of one op. See the module docstring for the defaults of each facet."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    infer: Callable[["InferContext"], Sequence[TensorType | None]]
    attrs: Mapping[str, Attr] = field(default_factory=dict)
    grad: Callable | None = None
    inplace: tuple[tuple[int, int], ...] = ()
    view: bool = False
    ignored_inputs: tuple[int, ...] = ()
    nondiff_inputs: tuple[int, ...] = ()
    shape_inputs: tuple[int, ...] = ()
    fusion: str = "opaque"
    onnx: OnnxSpec | None = None
    random: bool = False
    mutates: tuple[tuple[int, int], ...] = ()
    fold: Callable[["InferContext"], Sequence[np.ndarray | None]] | None = None
    training_mode: Callable[[Node, bool], Node] | None = None
    runtime_attrs: tuple[str, ...] = ()
    decompose: Callable | None = None
    dtype_rule: Callable[["DtypeContext"], Sequence[np.dtype | None]] | None = None
    widens_weights: bool = False
    dynamic_outputs: bool = False
    subgraph_types: Callable[[dict, Sequence[Any]], dict] | None = None
    doc: str = ""

    @property
    def domain(self) -> str:
        return self.name.rsplit(".", 1)[0] if "." in self.name else ""

    @property
    def private(self) -> bool:
        """Whether the op is portable's own (never read from or written to ONNX files)."""
        return self.domain == PRIVATE_DOMAIN

    @property
    def short_name(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    @property
    def differentiable(self) -> bool:
        return self.grad is not None

    def arity(self) -> tuple[int, int | None]:
        """Smallest and largest number of inputs (None: variadic)."""
        required = sum(1 for s in self.inputs if not s.endswith(("?", "*")))
        if any(s.endswith("*") for s in self.inputs):
            return required, None
        return required, len(self.inputs)

    def input_name(self, index: int) -> str:
        if index < len(self.inputs):
            return self.inputs[index].rstrip("?*")
        return self.inputs[-1].rstrip("?*")

    def resolve_attrs(self, node: Node) -> dict[str, Any]:
        """The node's attributes with defaults filled in; unknown or missing ones raise."""
        unknown = set(node.attrs) - set(self.attrs)
        if unknown:
            raise OpAttributeError(
                f"node {node.name!r} (op {self.name}): unknown attribute(s) {sorted(unknown)}; "
                f"{self.name} accepts {sorted(self.attrs) or 'none'}")
        resolved = {}
        for key, spec in self.attrs.items():
            if key in node.attrs:
                resolved[key] = node.attrs[key]
            elif spec.default is REQUIRED:
                raise OpAttributeError(
                    f"node {node.name!r} (op {self.name}): required attribute {key!r} is missing")
            else:
                resolved[key] = spec.default
        return resolved

    def check_attr_kinds(self, node: Node) -> None:
        """Refuse attribute values that are not of their declared kind (a loader's check:
        ``transB: "0"`` read from a file must not run as a true value).

        Raises:
            OpAttributeError: naming the node, the attribute, its kind and the value.
        """
        for key, value in node.attrs.items():
            spec = self.attrs.get(key)
            if spec is None or (value is None and spec.default is None):
                continue
            if not _of_kind(value, spec.kind):
                raise OpAttributeError(
                    f"node {node.name!r} (op {self.name}): attribute {key!r} must be "
                    f"{spec.kind}, got {type(value).__name__} {value!r:.60}")

    def attribute_output_count(self, attrs: dict) -> int | None:
        """The number of outputs an attribute fixes (Split's ``num_outputs``), or None."""
        if "num_outputs" in self.attrs and attrs.get("num_outputs") is not None:
            return int(attrs["num_outputs"])
        return None

    def check_arity(self, node: Node) -> None:
        low, high = self.arity()
        count = len(node.inputs)
        while count and not node.inputs[count - 1]:
            count -= 1  # trailing absent optional inputs
        if count < low or (high is not None and count > high):
            expected = f"{low}" if low == high else f"{low} to {high if high is not None else 'any'}"
            raise OpError(f"node {node.name!r} (op {self.name}) has {count} inputs; "
                          f"{self.name} takes {expected} ({', '.join(self.inputs)})")
        for i, value in enumerate(node.inputs[:count]):
            spec = self.inputs[min(i, len(self.inputs) - 1)]
            if not value and not spec.endswith(("?", "*")):
                raise OpError(f"node {node.name!r} (op {self.name}): required input "
                              f"{self.input_name(i)!r} (#{i}) is empty")


class InferContext:
    """What a type rule sees: the node, its resolved attributes, its input types and any input
    values known while planning (constants and values computed from static shapes)."""

    def __init__(self, node: Node, op: OpDef, types: Sequence[TensorType | None],
                 values: Sequence[np.ndarray | None]) -> None:
        self.node = node
        self.op = op
        self.types = list(types)
        # Not copied: imperative calls pass a lazy sequence that reads a value only on demand.
        self.values = values
        self.attrs = op.resolve_attrs(node)

    def __len__(self) -> int:
        return len(self.types)

    def has(self, index: int) -> bool:
        return index < len(self.types) and self.types[index] is not None

    def type(self, index: int) -> TensorType:
        if not self.has(index):
            self.fail(f"input {self.op.input_name(index)!r} (#{index}) is required")
        return self.types[index]

    def shape(self, index: int) -> tuple[int, ...]:
        return self.type(index).shape

    def dtype(self, index: int) -> np.dtype:
        return self.type(index).dtype

    def value(self, index: int) -> np.ndarray:
        """The input's value, which must be known when planning (e.g. Reshape's shape)."""
        if index >= len(self.values) or self.values[index] is None:
            self.fail(f"input {self.op.input_name(index)!r} (#{index}) must be a constant or "
                      f"computable from static shapes, but its value is only known at run time")
        return self.values[index]

    def known(self, index: int) -> bool:
        return index < len(self.values) and self.values[index] is not None

    def fail(self, message: str) -> None:
        from portable.errors import ShapeError

        shapes = ", ".join(f"{self.node.inputs[i] or '-'}: {t!r}" if t is not None else "-"
                           for i, t in enumerate(self.types))
        raise ShapeError(f"node {self.node.name!r} (op {self.op.name}): {message}; "
                         f"input types: [{shapes}]")


class DtypeContext:
    """What a dtype rule sees: the node, its resolved attributes and the dtypes known so far of
    its inputs and outputs (None where not known yet). A rule returns one dtype (or None: not
    known yet) per output, and may fill inputs not known yet (``unify``), as MXNet's
    FInferType fills a layer's weights from its data.
    """

    def __init__(self, node: Node, op: OpDef, inputs: Sequence[np.dtype | None],
                 outputs: Sequence[np.dtype | None]) -> None:
        self.node = node
        self.op = op
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.attrs = op.resolve_attrs(node)

    def has(self, index: int) -> bool:
        """Whether input ``index`` is given (its dtype may still be unknown)."""
        return index < len(self.node.inputs) and bool(self.node.inputs[index])

    def dtype(self, index: int) -> np.dtype | None:
        return self.inputs[index] if self.has(index) else None

    def data_inputs(self) -> list[int]:
        """The inputs that share the data's dtype by default: all but shapes, axes, indices
        (``nondiff_inputs``), inputs whose values are never read and shape inputs."""
        skip = {*self.op.nondiff_inputs, *self.op.ignored_inputs, *self.op.shape_inputs}
        return [i for i in range(len(self.inputs)) if self.has(i) and i not in skip]

    def unify(self, indices: Sequence[int], outputs: Sequence[int] = ()) -> np.dtype | None:
        """The one dtype of inputs ``indices`` and outputs ``outputs``; those not known yet
        take it. Returns None while none is known.

        Raises:
            BindError: two of them are known with different dtypes.
        """
        known = [(f"input {self.op.input_name(i)!r} (#{i})", self.inputs[i]) for i in indices
                 if self.has(i) and self.inputs[i] is not None]
        known += [(f"output #{o}", self.outputs[o]) for o in outputs
                  if o < len(self.outputs) and self.outputs[o] is not None]
        if not known:
            return None
        dtype = known[0][1]
        for where, other in known[1:]:
            if other != dtype:
                self.fail(f"{known[0][0]} is {dtype.name} but {where} is {other.name}; they "
                          f"must share one dtype")
        for i in indices:
            if self.has(i) and self.inputs[i] is None:
                self.inputs[i] = dtype
        return dtype

    def fail(self, message: str) -> None:
        from portable.errors import BindError

        raise BindError(f"node {self.node.name!r} (op {self.op.name}): {message}")


def elementwise_dtypes(ctx: DtypeContext) -> list[np.dtype | None]:
    """The default dtype rule (MXNet's ElemwiseType): the data inputs and every output share
    one dtype."""
    outputs = range(len(ctx.outputs))
    return [ctx.unify(ctx.data_inputs(), outputs)] * len(ctx.outputs)


def infer_dtypes(op: OpDef, ctx: DtypeContext) -> list[np.dtype | None]:
    """Run ``op``'s dtype rule (or the default) on ``ctx``; returns the outputs' dtypes."""
    result = list((op.dtype_rule or elementwise_dtypes)(ctx))
    return [None if d is None else np.dtype(d) for d in result]


ops: dict[str, OpDef] = {}


def declare(name: str, *, inputs: Sequence[str], outputs: Sequence[str],
            infer: Callable, domain: str = "", attrs: Mapping[str, Attr] | None = None,
            onnx_since: int | None = None, **facets: Any) -> OpDef:
    """Declare an op and add it to the ``ops`` table.

    Args:
        name: the ONNX op name (or the private op's name when ``domain="portable"``).
        inputs: input names; a trailing ``?`` marks optional, ``*`` variadic (last only).
        outputs: output names, with the same markers.
        infer: the type rule ``InferContext -> [TensorType | None per output]``.
        domain: ``""`` for ai.onnx ops, ``"portable"`` for private ones, or one of the other
            standard ONNX domains (``ai.onnx.ml``, ``ai.onnx.preview.training``), whose ops are
            named ``"<domain>.<name>"`` and are ONNX ops of that domain.
        attrs: attribute schema.
        onnx_since: the ONNX opset version (of the op's domain) of our canonical form (ONNX
            ops only).
        **facets: any other OpDef field (grad, inplace, view, fusion, ...).

    Returns:
        The registered OpDef.

    Example:
        >>> declare("Relu", inputs=("X",), outputs=("Y",), infer=same_as_input,
        ...         onnx_since=14, fusion="elementwise")  # doctest: +SKIP
    """
    if domain not in ("", PRIVATE_DOMAIN) + ONNX_EXTRA_DOMAINS:
        raise ValueError(f"unknown domain {domain!r}")
    qualified = f"{domain}.{name}" if domain else name
    if qualified in ops:
        raise ValueError(f"op {qualified} is declared twice")
    onnx = None
    if domain != PRIVATE_DOMAIN:
        if onnx_since is None:
            raise ValueError(f"ONNX op {name} needs onnx_since")
        onnx = OnnxSpec(onnx_since, name)
    op = OpDef(name=qualified, inputs=tuple(inputs), outputs=tuple(outputs), infer=infer,
               attrs=dict(attrs or {}), onnx=onnx, **facets)
    undeclared = set(op.runtime_attrs) - set(op.attrs)
    if undeclared:
        raise ValueError(f"op {qualified}: runtime_attrs {sorted(undeclared)} are not attributes")
    ops[qualified] = op
    return op


def get(name: str, *, node: Node | None = None) -> OpDef:
    """The declaration of ``name``; an unknown name raises UnknownOpError with suggestions."""
    try:
        return ops[name]
    except KeyError:
        pass
    close = difflib.get_close_matches(name, list(ops), n=3)
    where = f"node {node.name!r}: " if node is not None else ""
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    domain = name.rsplit(".", 1)[0] if "." in name else "ai.onnx"
    raise UnknownOpError(f"{where}unknown op {name!r} (domain {domain!r}){hint}")
