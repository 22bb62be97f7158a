"""Control flow: If, Loop and Scan, ops whose attributes hold subgraphs (portable Graphs).

A body reads the values of enclosing scopes through explicit trailing inputs: the node's
last ``len(body.captures)`` inputs feed the body's last inputs, in order (``portable/ir/
graph.py``). So an If is ``If(cond, *captures)``, a Loop ``Loop(M, cond, *v_initial,
*captures)`` and a Scan ``Scan(*states, *scan_inputs, *captures)``; the counts of the ONNX
inputs follow from the body's interface.

Type rules infer each body (``portable.passes.infer.infer_types``) from the node's input
types, and fail naming the node when a body does not type-check (an If whose condition is known
while planning checks only the branch taken), when an If's branches disagree in count, kind or
dtype (dims that differ become None, and so does the whole type when the ranks differ, which
ONNX allows: the output is then known when the branch runs), or when a Loop body changes a
carried value's dtype or rank. A carried value whose dims change between iterations is found
by re-inferring the body with the merged type (a few rounds at most); its changing dims become
None. A body whose types need values known only at run time (a Slice start computed from the
iteration number) is inferred as far as planning can (``infer_body``); the outputs it feeds get
no type until the body runs.

All three are ``dynamic_outputs``: an output whose shape the rule cannot know (an If whose
branches differ, a Loop's scan outputs when the trip count is not known while planning) is
allocated by the kernel (``portable/executor/control_flow.py``); where the shapes are known
the planner places the outputs and the kernel writes into them.

Example:
    >>> from portable.ops import control_flow   # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from portable.errors import PortableError, ShapeError
from portable.ir.graph import Graph, TensorType
from portable.ir.types import OptionalType, SequenceType
from portable.ops import registry
from portable.ops.registry import REQUIRED, Attr, InferContext, declare
from portable.ops.control_flow_grad import if_grad, loop_grad, scan_grad, scan_layout
# (the module, not its names: importing portable.passes.infer first loads portable.ops, whose
# families include this one, while infer.py is still half-run; its functions are looked up when
# a type rule runs, by which time it is complete)
from portable.passes import infer as graph_inference

# Rounds of re-inference of a Loop body whose carried shapes change between iterations.
_WIDEN_ROUNDS = 3


def merge_types(a: Any, b: Any) -> Any:
    """The type that values of ``a`` and of ``b`` both have: dims that differ become None.
    Returns None when they differ in kind, dtype or rank (no common type)."""
    if a == b:
        return a
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        if a.dtype != b.dtype or a.rank != b.rank:
            return None
        return TensorType([x if x == y else None for x, y in zip(a.shape, b.shape)], a.dtype)
    if isinstance(a, SequenceType) and isinstance(b, SequenceType):
        if a.elem is None or b.elem is None:
            return SequenceType(None)
        return SequenceType(merge_types(a.elem, b.elem))
    if isinstance(a, OptionalType) and isinstance(b, OptionalType):
        elem = merge_types(a.elem, b.elem)
        return None if elem is None else OptionalType(elem)
    return None


class _RunTimeValue(Exception):
    """A type rule asked for a value that only a run knows."""


class _Probe(InferContext):
    def value(self, index: int) -> np.ndarray:
        if not self.known(index):
            raise _RunTimeValue()
        return self.values[index]


def _needs_run_time_value(node: Any, info: graph_inference.TypeInfo) -> bool:
    """Whether ``node``'s type rule fails only for lack of an input value known at run time
    (a Slice start computed from the iteration number)."""
    op = registry.get(node.op, node=node)
    values = [info.values.get(name) if name else None for name in node.inputs]
    if any(i < len(node.inputs) and node.inputs[i] and values[i] is None
           for i in op.shape_inputs):
        return True
    try:
        op.infer(_Probe(node, op, [info.types.get(n) if n else None for n in node.inputs],
                        values))
    except _RunTimeValue:
        return True
    except Exception:  # noqa: BLE001 - the rule's own failure: reported by the caller
        return False
    return False


def infer_body(body: Graph, types: Sequence[Any]) -> graph_inference.TypeInfo:
    """Types of a body's values for inputs of ``types``. A body whose types depend on values
    known only at run time (a shape computed from the iteration number) is inferred as far as
    planning can: the nodes that need such a value, and what they feed, get no type (the
    body is planned with those values when it runs). Any other failure is raised."""
    try:
        return graph_inference.infer_types(body, dict(zip(body.input_names, types)))
    except ShapeError as first:
        info = graph_inference.TypeInfo()
        info.types.update(zip(body.input_names, types))
        for name, array in body.initializers.items():
            info.types[name] = TensorType(array.shape, array.dtype)
            info.values[name] = array
        for node in body.nodes:
            if any(name and name not in info.types for name in node.inputs):
                continue
            try:
                graph_inference.infer_node(node, info)
            except ShapeError:
                if not _needs_run_time_value(node, info):
                    raise
        if all(name in info.types for name in body.outputs):
            raise first  # (nothing needed a run-time value: the first failure stands)
        return info


def body_types(ctx: Any, attr: str,
               types: Sequence[Any]) -> tuple[graph_inference.TypeInfo, list[Any]]:
    """Infer body ``attr`` of the node with its inputs of ``types``; returns the analysis and
    the body's output types (None where they depend on run-time values). A body that does
    not type-check fails naming the node."""
    body: Graph = ctx.attrs[attr]
    if len(types) != len(body.inputs):
        ctx.fail(f"{attr} takes {len(body.inputs)} inputs, the node gives it {len(types)}")
    try:
        info = infer_body(body, types)
    except PortableError as exc:
        ctx.fail(f"{attr} (graph {body.name!r}) does not type-check: {exc}")
    return info, [info.types.get(name) for name in body.outputs]


def _unknown_dims(type_: Any) -> Any:
    """The type with every dim unknown (a carried value keeps its dtype and rank)."""
    if isinstance(type_, TensorType):
        return TensorType([None] * type_.rank, type_.dtype)
    return type_


def capture_count(ctx: Any, attr: str) -> int:
    return len(ctx.attrs[attr].captures)


def _scalar_input(ctx: Any, index: int, dtypes: tuple[str, ...]) -> None:
    type_ = ctx.type(index)
    if not isinstance(type_, TensorType) or type_.dtype.name not in dtypes or (
            type_.is_static and type_.size != 1):
        ctx.fail(f"{ctx.op.input_name(index)} must be one {' or '.join(dtypes)} element, got "
                 f"{type_!r}")


# -- If -------------------------------------------------------------------------------------------


def _if_infer(ctx: Any) -> list[Any]:
    _scalar_input(ctx, 0, ("bool",))
    captured = ctx.types[1:]
    for attr in ("then_branch", "else_branch"):
        if len(ctx.attrs[attr].captures) != len(captured):
            ctx.fail(f"{attr} captures {len(ctx.attrs[attr].captures)} outer values, the node "
                     f"gives it {len(captured)}")
    then_count, else_count = (len(ctx.attrs[a].outputs) for a in ("then_branch", "else_branch"))
    if then_count != else_count or then_count != len(ctx.node.outputs):
        ctx.fail(f"then_branch has {then_count} outputs, else_branch {else_count}, the node "
                 f"{len(ctx.node.outputs)}: the branches must agree")
    if ctx.known(0):
        # The branch taken is known while planning: only it must type-check (an expanded
        # function's untaken branch may not fit these shapes); the other, where it does
        # type-check, must still agree in kind and dtype: that is a property of the model.
        flag = bool(np.asarray(ctx.value(0)).reshape(-1)[0])
        taken, untaken = ("then_branch", "else_branch") if flag else \
            ("else_branch", "then_branch")
        result = body_types(ctx, taken, captured)[1]
        try:
            other_types = [infer_body(ctx.attrs[untaken], captured).types.get(name)
                           for name in ctx.attrs[untaken].outputs]
        except PortableError:
            return result
        pairs = zip(result, other_types) if flag else zip(other_types, result)
        _merge_branches(ctx, pairs)
        return result
    _, then = body_types(ctx, "then_branch", captured)
    _, other = body_types(ctx, "else_branch", captured)
    return _merge_branches(ctx, zip(then, other))


def _merge_branches(ctx: Any, pairs: Any) -> list[Any]:
    """The output types of an If from its branches' (then, else) types."""
    merged = []
    for index, (a, b) in enumerate(pairs):
        if a is None or b is None:  # known only when the branch runs
            merged.append(None)
            continue
        common = merge_types(a, b)
        if common is None and isinstance(a, TensorType) and isinstance(b, TensorType) and \
                a.dtype == b.dtype:
            # ONNX lets the branches differ in rank (its inference then knows no shape):
            # which one the output has is known when the branch runs.
            merged.append(None)
            continue
        if common is None:
            ctx.fail(f"output #{index}: then_branch gives {a!r}, else_branch {b!r}; the "
                     f"branches must agree in kind and dtype")
        merged.append(common)
    return merged


def _body_dtypes(ctx: Any, attr: str, dtypes: Sequence[Any]) -> list[Any]:
    """A body's output dtypes from its declared input shapes and the given dtypes (None where
    a dtype or the body's inference is not known without shapes)."""
    body: Graph = ctx.attrs[attr]
    if len(dtypes) != len(body.inputs) or any(d is None for d in dtypes):
        return [None] * len(body.outputs)
    types = {name: TensorType(t.shape, d) if isinstance(t, TensorType) else t
             for (name, t), d in zip(body.inputs, dtypes)}
    try:
        info = graph_inference.infer_types(body, types)
    except PortableError:
        return [None] * len(body.outputs)
    return [getattr(info.types[name], "dtype", None) for name in body.outputs]


def _if_dtypes(ctx: Any) -> list[Any]:
    found = _body_dtypes(ctx, "then_branch", ctx.inputs[1:])
    if any(d is None for d in found):
        found = _body_dtypes(ctx, "else_branch", ctx.inputs[1:])
    return found


def _if_subgraph_types(attrs: dict, types: Sequence[Any]) -> dict[str, list[Any]]:
    return {"then_branch": list(types[1:]), "else_branch": list(types[1:])}


declare("If", inputs=("cond", "captures*"), outputs=("outputs*",), infer=_if_infer,
        attrs={"then_branch": Attr("graph", REQUIRED), "else_branch": Attr("graph", REQUIRED)},
        onnx_since=25, nondiff_inputs=(0,), dynamic_outputs=True, dtype_rule=_if_dtypes,
        grad=if_grad, subgraph_types=_if_subgraph_types,
        doc="Runs then_branch or else_branch by cond; trailing inputs are the branches' "
            "outer-scope values.")


# -- Loop -----------------------------------------------------------------------------------------


def loop_counts(node_inputs: int, node_outputs: int, body: Graph) -> tuple[int, int, int]:
    """``(carried, scan outputs, captures)`` of a Loop node with its body."""
    captures = len(body.captures)
    carried = node_inputs - 2 - captures
    return carried, node_outputs - carried, captures


def _loop_infer(ctx: Any) -> list[Any]:
    body: Graph = ctx.attrs["body"]
    carried, scans, captures = loop_counts(len(ctx.node.inputs), len(ctx.node.outputs), body)
    if carried < 0 or scans < 0 or len(body.inputs) != 2 + carried + captures or \
            len(body.outputs) != 1 + carried + scans:
        ctx.fail(f"body has {len(body.inputs)} inputs and {len(body.outputs)} outputs; a Loop "
                 f"with {max(carried, 0)} carried values and {max(scans, 0)} scan outputs needs "
                 f"{2 + max(carried, 0) + captures} inputs (iteration, condition, carried, "
                 f"{captures} captured) and {1 + max(carried, 0) + max(scans, 0)} outputs")
    if ctx.has(0):
        _scalar_input(ctx, 0, ("int64",))
    if ctx.has(1):
        _scalar_input(ctx, 1, ("bool",))
    state = list(ctx.types[2:2 + carried])
    fixed = [TensorType((), "int64"), TensorType((), "bool")]
    outer = list(ctx.types[2 + carried:])
    for _ in range(_WIDEN_ROUNDS):
        info, out = body_types(ctx, "body", fixed + state + outer)
        merged = []
        for index, (before, after) in enumerate(zip(state, out[1:1 + carried])):
            if after is None:  # its shape depends on run-time values
                merged.append(_unknown_dims(before))
                continue
            common = merge_types(before, after)
            if common is None:
                ctx.fail(f"body output #{index + 1} (carried value {index}) is {after!r}, its "
                         f"initial value {before!r}: a carried value keeps its kind, dtype "
                         f"and rank")
            merged.append(common)
        if merged == state:
            break
        state = merged
    else:
        ctx.fail("the shapes of its carried values do not settle between iterations")
    if out[0] is not None and (not isinstance(out[0], TensorType) or out[0].dtype != np.bool_):
        ctx.fail(f"body output #0 (the condition) must be bool, got {out[0]!r}")
    trips = _known_trips(ctx, info, body)
    scan_types = []
    for index, type_ in enumerate(out[1 + carried:]):
        if type_ is None:
            scan_types.append(None)
            continue
        if not isinstance(type_, TensorType):
            ctx.fail(f"scan output #{index} is {type_!r}; scan outputs are tensors")
        scan_types.append(TensorType((trips,) + type_.shape, type_.dtype))
    return state + scan_types


def _known_trips(ctx: Any, info: graph_inference.TypeInfo, body: Graph) -> int | None:
    """The trip count when it is known while planning: M known, and neither the outer
    condition (absent or true) nor the body's (a constant true) can end the loop early."""
    if not ctx.known(0):
        return None
    if ctx.has(1) and not (ctx.known(1) and bool(np.asarray(ctx.value(1)).reshape(-1)[0])):
        return None
    cond = info.values.get(body.outputs[0])
    if cond is None or not bool(np.asarray(cond).reshape(-1)[0]):
        return None
    return max(int(np.asarray(ctx.value(0)).reshape(-1)[0]), 0)


def _loop_dtypes(ctx: Any) -> list[Any]:
    body: Graph = ctx.attrs["body"]
    carried, scans, _ = loop_counts(len(ctx.node.inputs), len(ctx.node.outputs), body)
    found = _body_dtypes(ctx, "body", [np.dtype(np.int64), np.dtype(np.bool_)]
                         + list(ctx.inputs[2:]))
    return [ctx.inputs[2 + i] for i in range(carried)] + found[1 + carried:]


def _loop_subgraph_types(attrs: dict, types: Sequence[Any]) -> dict[str, list[Any]]:
    return {"body": [TensorType((), "int64"), TensorType((), "bool")] + list(types[2:])}


declare("Loop", inputs=("M?", "cond?", "v_initial*"), outputs=("v_final_and_scan_outputs*",),
        infer=_loop_infer, attrs={"body": Attr("graph", REQUIRED)}, onnx_since=25,
        nondiff_inputs=(0, 1), dynamic_outputs=True, dtype_rule=_loop_dtypes,
        grad=loop_grad, subgraph_types=_loop_subgraph_types,
        doc="Runs body while the trip count and condition allow; carried values, scan "
            "outputs, and trailing inputs for the body's outer-scope values.")


# -- Scan -----------------------------------------------------------------------------------------


def _scan_infer(ctx: Any) -> list[Any]:
    body: Graph = ctx.attrs["body"]
    lay = scan_layout(ctx.attrs, len(ctx.node.inputs), len(ctx.node.outputs))
    n, m, k = lay["states"], lay["scan_inputs"], lay["scan_outputs"]
    if n < 0 or k < 0 or m < 1 or len(body.inputs) != n + m + lay["captures"] or \
            len(body.outputs) != n + k:
        ctx.fail(f"body has {len(body.inputs)} inputs and {len(body.outputs)} outputs, which "
                 f"do not fit {len(ctx.node.inputs)} inputs ({m} scanned, "
                 f"{lay['captures']} captured) and {len(ctx.node.outputs)} outputs")
    for what, values, count in (("scan_input_axes", lay["in_axes"], m),
                                ("scan_input_directions", lay["in_directions"], m),
                                ("scan_output_axes", lay["out_axes"], k),
                                ("scan_output_directions", lay["out_directions"], k)):
        if len(values) != count:
            ctx.fail(f"{what} has {len(values)} entries for {count} values")
    length = None
    slices = []
    for j in range(m):
        type_ = ctx.type(n + j)
        if not isinstance(type_, TensorType) or type_.rank < 1:
            ctx.fail(f"scan input #{j} must be a tensor of rank 1 or more, got {type_!r}")
        axis = lay["in_axes"][j]
        if not -type_.rank <= axis < type_.rank:
            ctx.fail(f"scan_input_axes[{j}] = {axis} is out of range for {type_!r}")
        axis %= type_.rank
        dim = type_.shape[axis]
        if dim is not None and length is not None and dim != length:
            ctx.fail(f"scan input #{j} has {dim} steps along axis {axis}, an earlier one "
                     f"{length}: they must agree")
        length = dim if dim is not None else length
        slices.append(TensorType(type_.shape[:axis] + type_.shape[axis + 1:], type_.dtype))
    states = list(ctx.types[:n])
    _, out = body_types(ctx, "body", states + slices + list(ctx.types[n + m:]))
    for index, (before, after) in enumerate(zip(states, out[:n])):
        if after is not None and merge_types(before, after) != before:
            ctx.fail(f"body output #{index} (state {index}) is {after!r}, the state is "
                     f"{before!r}: a state keeps its type")
    result = list(states)
    for j, type_ in enumerate(out[n:]):
        if type_ is None:
            result.append(None)
            continue
        if not isinstance(type_, TensorType):
            ctx.fail(f"scan output #{j} is {type_!r}; scan outputs are tensors")
        axis = lay["out_axes"][j]
        if not -(type_.rank + 1) <= axis <= type_.rank:
            ctx.fail(f"scan_output_axes[{j}] = {axis} is out of range for rank "
                     f"{type_.rank + 1}")
        axis %= type_.rank + 1
        result.append(TensorType(type_.shape[:axis] + (length,) + type_.shape[axis:],
                                 type_.dtype))
    return result


def _scan_dtypes(ctx: Any) -> list[Any]:
    lay = scan_layout(ctx.attrs, len(ctx.node.inputs), len(ctx.node.outputs))
    found = _body_dtypes(ctx, "body", list(ctx.inputs))
    return list(ctx.inputs[:lay["states"]]) + found[lay["states"]:]


def _scan_subgraph_types(attrs: dict, types: Sequence[Any]) -> dict[str, list[Any]]:
    lay = scan_layout(attrs, len(types), len(attrs["body"].outputs))
    n, m = lay["states"], lay["scan_inputs"]
    slices = []
    for j, type_ in enumerate(types[n:n + m]):
        axis = lay["in_axes"][j] % type_.rank
        slices.append(TensorType(type_.shape[:axis] + type_.shape[axis + 1:], type_.dtype))
    return {"body": list(types[:n]) + slices + list(types[n + m:])}


declare("Scan", inputs=("initial_state_and_scan_inputs*",),
        outputs=("final_state_and_scan_outputs*",),
        infer=_scan_infer,
        attrs={"body": Attr("graph", REQUIRED), "num_scan_inputs": Attr("int", REQUIRED),
               "scan_input_axes": Attr("ints", None), "scan_input_directions": Attr("ints", None),
               "scan_output_axes": Attr("ints", None),
               "scan_output_directions": Attr("ints", None)},
        onnx_since=25, dynamic_outputs=True, dtype_rule=_scan_dtypes, grad=scan_grad,
        subgraph_types=_scan_subgraph_types,
        doc="Runs body once per slice of the scan inputs, carrying states; trailing inputs "
            "are the body's outer-scope values.")


def subgraph_input_types(op: str, attrs: dict, types: Sequence[Any]) -> dict[str, list[Any]]:
    """The input types each subgraph of a node runs with, given its resolved attributes and
    input types (the op's ``subgraph_types`` facet: what its type rule infers the bodies with;
    the exporter writes the bodies with them)."""
    rule = registry.get(op).subgraph_types
    if rule is None:
        raise ValueError(f"op {op} declares no subgraph_types: its subgraphs cannot be written")
    return rule(attrs, types)
