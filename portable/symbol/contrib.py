"""``sym.contrib``: MXNet 1.x's symbolic control flow, as ONE node each: ``foreach`` builds a
Scan, ``while_loop`` a Loop and ``cond`` an If (``portable/ops/control_flow.py``), so a
hybridized block with a loop is a single node, not an unrolled trace, and exports as such.

How a body is built: the Python function runs once on placeholder variables. The nodes created
while it ran are the body; any older node or variable it reads (a weight, a value computed
before the loop) belongs to the enclosing scope and becomes a captured input: a trailing input
of the node and of the body (``Graph.captures``, see ``portable/ir/graph.py``). The body is
lowered to a Graph only when the enclosing symbol is (``Symbol.to_graph``), once the types of
the node's inputs are known.

Differences from MXNet: ``while_loop`` pads its outputs to ``max_iterations`` rows with zeros
(MXNet leaves them uninitialised), as the imperative ``nd.contrib.while_loop`` does; ``cond``'s
branches must return the same number of values (as MXNet requires).

Example:
    >>> import portable as pt
    >>> outs, state = pt.sym.contrib.foreach(lambda x, s: (x + s, x + s), pt.sym.var("d"),
    ...                                      pt.sym.var("s0"))
    >>> outs.eval(d=pt.nd.array([1, 2, 3]), s0=pt.nd.array([0]))[0].asnumpy().ravel().tolist()
    [1.0, 3.0, 6.0]
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

import numpy as np

from portable.errors import BindError
from portable.nested import flatten, regroup
from portable.ir.graph import Graph, Node, TensorType
from portable.symbol.nodes import SymNode, _SERIALS, auto_name, topo_nodes
from portable.symbol.symbol import Symbol, apply_op, constant

__all__ = ["cond", "foreach", "while_loop"]

_INT64, _BOOL = np.dtype(np.int64), np.dtype(np.bool_)


# -- nested structures of Symbols ---------------------------------------------------------------


def _one_output(symbol: Symbol, what: str) -> None:
    if len(symbol) != 1:
        raise BindError(f"{what}: each Symbol must have one output, got {len(symbol)} "
                        f"(split it with symbol[i])")


def _flatten(args: Any, what: str) -> tuple[list[Symbol], Any]:
    """Nested lists of Symbols -> (flat list, format); format 0 is a bare Symbol."""
    return flatten(args, Symbol, what, _one_output, BindError)


# -- tracing a body -------------------------------------------------------------------------------


def _placeholders(prefix: str, count: int) -> list[SymNode]:
    return [SymNode(None, f"{prefix}_in{i}") for i in range(count)]


class _Cut:
    """Cuts traced bodies out of the symbol DAG. Several bodies of one node (If's branches)
    share one cut, so they capture the same list of outer values."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.capture_vars: list[SymNode] = []
        self.captured: list[Symbol] = []  # the outer values, in capture order
        self._keys: dict[tuple[int, int], SymNode] = {}

    def body(self, outputs: Sequence[Symbol], placeholders: Sequence[SymNode],
             start: int) -> list[tuple[SymNode, int]]:
        """The body's output entries, over copies of the nodes made since serial ``start``;
        every other node read becomes a capture variable."""
        own = {id(p) for p in placeholders}

        def inner(node: SymNode) -> bool:
            return id(node) in own or (not node.is_variable and node.serial >= start)

        clones: dict[int, SymNode] = {}

        def remap(entry: tuple[SymNode, int]) -> tuple[SymNode, int]:
            node, index = entry
            if id(node) in own:
                return entry
            if not inner(node):
                key = (id(node), index)
                if key not in self._keys:
                    var = SymNode(None, f"{self.prefix}_capture{len(self.capture_vars)}")
                    self._keys[key] = var
                    self.capture_vars.append(var)
                    self.captured.append(Symbol([entry]))
                return self._keys[key], 0
            return clones[id(node)], index

        entries = [s._entries[0] for s in outputs]
        for node in _inner_order(entries, inner):
            if id(node) in own:
                continue
            clones[id(node)] = replace(
                node, inputs=[None if e is None else remap(e) for e in node.inputs],
                attrs=dict(node.attrs), var_attrs=dict(node.var_attrs))
        return [remap(e) for e in entries]


def _inner_order(entries: Sequence[tuple[SymNode, int]], inner: Callable) -> list[SymNode]:
    """The body's nodes reachable from ``entries`` without crossing into the outer scope,
    inputs before users (iterative: a long unrolled body must not hit the recursion limit)."""
    order, done = [], set()
    stack = [(node, False) for node, _ in reversed(list(entries)) if inner(node)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in done:
            continue
        if expanded:
            done.add(id(node))
            order.append(node)
            continue
        stack.append((node, True))
        stack.extend((e[0], False) for e in reversed(node.inputs)
                     if e is not None and inner(e[0]) and id(e[0]) not in done)
    return order


class TracedBody:
    """A body traced from Python, lowered to a Graph for its node's input types (the
    ``lower_body`` hook that ``Symbol._to_node`` calls)."""

    def __init__(self, name: str, entries: list, inputs: list[SymNode],
                 captures: list[SymNode], slot_types: Callable[..., list],
                 skip_outputs: int = 0) -> None:
        self.name, self.entries = name, entries
        self.skip_outputs = skip_outputs  # body outputs the node does not return (Loop's cond)
        self.inputs = list(inputs) + list(captures)
        self.captures = [v.name for v in captures]
        self.slot_types = slot_types  # node input types -> body input types
        self._cache: dict = {}

    def body_dtypes(self, node_dtypes: list) -> list:
        """The node's output dtypes from its input dtypes, by the body's dtype rules (what
        ``infer_type`` needs without shapes); None where unknown."""
        from portable.symbol.dtype_inference import infer_dtypes

        dtypes = self.slot_types(node_dtypes, dtypes_only=True)
        if any(d is None for d in dtypes):
            return [None] * (len(self.entries) - self.skip_outputs)
        table = infer_dtypes(topo_nodes(self.entries),
                             {v.name: d for v, d in zip(self.inputs, dtypes)})
        found = [table.get(node.output_name(index)) for node, index in self.entries]
        return found[self.skip_outputs:]

    def lower_body(self, node_types: list) -> Graph:
        types = self.slot_types(node_types)
        key = tuple(types)
        if key in self._cache:
            return self._cache[key]
        missing = [v.name for v, t in zip(self.inputs, types) if not isinstance(t, TensorType)]
        if missing:
            raise BindError(f"body {self.name!r}: the types of its inputs {missing} are not "
                            f"known while planning")
        shapes = {v.name: t.shape for v, t in zip(self.inputs, types)}
        dtypes = {v.name: t.dtype for v, t in zip(self.inputs, types)}
        lowered = Symbol(self.entries).to_graph(shapes, dtypes, name=self.name)
        nodes, outputs, seen = list(lowered.nodes), [], set()
        formal = {v.name for v in self.inputs}
        for index, name in enumerate(lowered.outputs):
            # an output that is an input (a state passed through) or repeats another output
            # gets its own name: ONNX bodies and the planner want distinct outputs
            if name in formal or name in seen:
                copy = f"{self.name}_out{index}"
                nodes.append(Node("Identity", (name,), (copy,), {}, copy))
                name = copy
            seen.add(name)
            outputs.append(name)
        graph = Graph(nodes=tuple(nodes), inputs=tuple(
            (v.name, t) for v, t in zip(self.inputs, types)), outputs=tuple(outputs),
            name=self.name, captures=tuple(self.captures))
        self._cache[key] = graph
        return graph


def _scalar(symbol: Symbol, to: np.dtype) -> Symbol:
    """``symbol`` (one element) as a rank-0 tensor of dtype ``to``: ONNX's loop conditions."""
    cast = apply_op("Cast", [symbol], to=_onnx_dtype(to))
    return apply_op("Reshape", [cast, constant(np.zeros(0, np.int64))])


def _onnx_dtype(dtype: np.dtype) -> int:
    from portable.dtypes import to_onnx

    return to_onnx(dtype)


def _slice_type(type_: Any) -> Any:
    return TensorType(type_.shape[1:], type_.dtype) if isinstance(type_, TensorType) else None


# -- the three functions --------------------------------------------------------------------------


def foreach(body: Callable[[Any, Any], tuple[Any, Any]], data: Any, init_states: Any,
            name: str = "foreach") -> tuple[Any, Any]:
    """MXNet's ``sym.contrib.foreach``: ``body(data[i], states) -> (outputs, states)`` over the
    first axis of ``data`` (a Symbol or a list of them), as one Scan node. Returns the outputs
    stacked along a new first axis (in ``body``'s structure) and the final states."""
    flat_data, data_fmt = _flatten(data, "foreach data")
    flat_states, state_fmt = _flatten(init_states, "foreach init_states")
    if not flat_data:
        raise BindError("foreach: data must hold at least one Symbol")
    prefix = auto_name("Scan", None if name == "foreach" else name)
    start = next(_SERIALS)
    holders = _placeholders(prefix, len(flat_states) + len(flat_data))
    wrap = [Symbol([(h, 0)]) for h in holders]
    n, m = len(flat_states), len(flat_data)
    outs, new_states = body(regroup(wrap[n:], data_fmt)[0], regroup(wrap[:n], state_fmt)[0])
    flat_outs, out_fmt = _flatten([] if outs is None else outs, "foreach output")
    flat_new, _ = _flatten([] if new_states is None else new_states, "foreach states")
    if len(flat_new) != n:
        raise BindError(f"foreach: body returned {len(flat_new)} states, init_states has {n}")
    cut = _Cut(prefix)
    entries = cut.body(flat_new + flat_outs, holders, start)

    def slot_types(types: list, dtypes_only: bool = False) -> list:
        sliced = types[n:n + m] if dtypes_only else [_slice_type(t) for t in types[n:n + m]]
        return types[:n] + sliced + types[n + m:]

    traced = TracedBody(f"{prefix}_body", entries, holders, cut.capture_vars, slot_types)
    node = apply_op("Scan", flat_states + flat_data + cut.captured, name=prefix,
                    num_outputs=n + len(flat_outs), body=traced, num_scan_inputs=m)
    results = list(node)
    stacked = regroup(results[n:], out_fmt)[0] if flat_outs else []
    return stacked, regroup(results[:n], state_fmt)[0]


def while_loop(cond: Callable[..., Any], func: Callable[..., tuple[Any, Any]], loop_vars: Any,
               max_iterations: int | None = None, name: str = "while_loop") -> tuple[Any, Any]:
    """MXNet's ``sym.contrib.while_loop`` as one Loop node: while ``cond(*loop_vars)`` and
    fewer than ``max_iterations`` steps, ``step_output, loop_vars = func(*loop_vars)``.
    Returns the step outputs stacked along a new first axis, zero rows after the last step up
    to ``max_iterations`` (MXNet's layout), and the final loop variables.

    The Loop runs ``max_iterations`` (its M) times with a constant-true condition, so its
    outputs have a shape known while planning (``max_iterations`` rows, as MXNet's); an extra
    carried flag, ``cond`` traced into the body, masks the steps after the condition failed
    (their variables keep their values, their output rows are zeros). So ``func`` still runs on
    those steps, unlike MXNet, which stops."""
    if max_iterations is None:
        raise BindError("while_loop: max_iterations must be given")
    single = isinstance(loop_vars, Symbol)
    flat_vars, _ = _flatten([loop_vars] if single else list(loop_vars), "while_loop loop_vars")
    if not flat_vars:
        raise BindError("while_loop: loop_vars must hold at least one Symbol")
    n = len(flat_vars)
    prefix = auto_name("Loop", None if name == "while_loop" else name)
    active0 = _scalar(cond(*flat_vars), _BOOL)
    start = next(_SERIALS)
    holders = _placeholders(prefix, 3 + n)  # iteration, condition, active flag, variables
    wrap = [Symbol([(h, 0)]) for h in holders]
    active = wrap[2]
    step_out, new_vars = func(*wrap[3:])
    new_vars = [] if new_vars is None else new_vars
    flat_new, var_fmt = _flatten([new_vars] if isinstance(new_vars, Symbol)
                                 else list(new_vars), "while_loop loop variables")
    if len(flat_new) != n:
        raise BindError(f"while_loop: func returned {len(flat_new)} loop variables, "
                        f"expected {n}")
    step_out = [] if step_out is None else step_out
    flat_outs, out_fmt = _flatten(list(step_out) if isinstance(step_out, tuple) else step_out,
                                  "while_loop step output")
    kept = [apply_op("Where", [active, new, old]) for new, old in zip(flat_new, wrap[3:])]
    zero = constant(np.zeros((), np.float32))
    rows = [apply_op("Where", [active, out, apply_op("CastLike", [zero, out])])
            for out in flat_outs]
    again = apply_op("And", [active, _scalar(cond(*kept), _BOOL)])
    always = constant(np.asarray(True))
    cut = _Cut(prefix)
    entries = cut.body([always, again] + kept + rows, holders, start)

    def slot_types(types: list, dtypes_only: bool = False) -> list:
        if dtypes_only:
            return [_INT64, _BOOL] + types[2:]
        return [TensorType((), _INT64), TensorType((), _BOOL)] + types[2:]

    traced = TracedBody(f"{prefix}_body", entries, holders, cut.capture_vars, slot_types,
                        skip_outputs=1)
    trips = constant(np.asarray(int(max_iterations), np.int64))
    node = apply_op("Loop", [trips, constant(np.asarray(True)), active0] + flat_vars
                    + cut.captured, name=prefix, num_outputs=1 + n + len(flat_outs),
                    body=traced)
    results = list(node)[1:]  # (the final flag is not MXNet's)
    stacked = regroup(results[n:], out_fmt)[0] if flat_outs else []
    final = results[0] if single else regroup(results[:n], var_fmt)[0]  # func's structure
    return stacked, final


def cond(pred: Symbol, then_func: Callable[[], Any], else_func: Callable[[], Any],
         name: str = "cond") -> Any:
    """MXNet's ``sym.contrib.cond`` as one If node: ``then_func()`` where ``pred`` (one
    element; nonzero is true) holds, else ``else_func()``; both return the same structure."""
    prefix = auto_name("If", None if name == "cond" else name)
    flag = _scalar(pred, _BOOL)
    cut = _Cut(prefix)
    branches, fmt = [], None
    for what, func in (("then_func", then_func), ("else_func", else_func)):
        start = next(_SERIALS)
        flat, found = _flatten(func(), f"cond: {what}'s result")
        if fmt is not None and len(flat) != len(branches[0][0]):
            raise BindError(f"cond: then_func returns {len(branches[0][0])} values, else_func "
                            f"{len(flat)}; they must agree")
        fmt = found if fmt is None else fmt
        branches.append((flat, start))
    entries = [cut.body(flat, [], start) for flat, start in branches]
    bodies = {key: TracedBody(f"{prefix}_{key}", body, [], cut.capture_vars,
                              lambda types, dtypes_only=False: types[1:])
              for key, body in zip(("then_branch", "else_branch"), entries)}
    node = apply_op("If", [flag] + cut.captured, name=prefix,
                    num_outputs=len(branches[0][0]), **bodies)
    return regroup(list(node), fmt)[0]
