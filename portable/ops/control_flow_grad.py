"""Gradient rules of the control-flow ops, written with declared ops (If and Scan whose
bodies are gradient graphs built by ``portable.passes.autodiff.differentiate``), so symbolic
autodiff and imperative autograd share them.

- If: an If on the same condition whose branches are the forward branches' gradient graphs:
  only the branch taken runs its backward.
- Scan: the forward Scan is run again with its body also returning each step's incoming
  states as extra scan outputs (the recorded states, one per step: the trip count is the
  scan length); then a Scan over the steps in reverse order runs the body's gradient graph:
  it carries the states' gradients and the sums of the captured values' gradients, and
  scans the recorded states, the scan inputs and the scan outputs' gradients, producing the
  scan inputs' gradients slice by slice (in the directions opposite to the forward's).

- Loop: likewise through the recorded trip count: the forward Loop again, recording the
  iteration number and incoming carried values as scan outputs, then a Loop over those T
  iterations in reverse, reading entry ``T - 1 - i`` of the recordings (``loop_grad``). The
  carried values must keep their shapes (their recordings are stacked).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from portable.ir.graph import Graph, Node, TensorType, fresh_name
from portable.passes import infer as graph_inference
from portable.passes.prune import prune


def differentiate(*args: Any, **kwargs: Any) -> Any:
    """``portable.passes.autodiff.differentiate``, imported when a gradient is built: this
    module loads with the op families, and autodiff needs the inference pass complete (see
    ``control_flow.py``)."""
    from portable.passes.autodiff import differentiate as build

    return build(*args, **kwargs)


def scan_layout(attrs: dict, node_inputs: int, node_outputs: int) -> dict[str, Any]:
    """Counts and axes of a Scan node: states, scan inputs, scan outputs, captures, and the
    axis and direction of each scan input and output (attributes with their defaults)."""
    body: Graph = attrs["body"]
    scan_in = int(attrs["num_scan_inputs"])
    captures = len(body.captures)
    states = node_inputs - scan_in - captures
    scan_out = node_outputs - states
    return {"states": states, "scan_inputs": scan_in, "scan_outputs": scan_out,
            "captures": captures,
            "in_axes": list(attrs["scan_input_axes"] or [0] * scan_in),
            "in_directions": list(attrs["scan_input_directions"] or [0] * scan_in),
            "out_axes": list(attrs["scan_output_axes"] or [0] * max(scan_out, 0)),
            "out_directions": list(attrs["scan_output_directions"] or [0] * max(scan_out, 0))}


def _gradient_branch(body: Graph, types: list[Any], wrt: list[int], heads: list[int]) -> Graph:
    """The gradient of one branch: inputs are the branch's (captured) inputs then one head
    gradient per output in ``heads``; outputs are the gradients of inputs ``wrt``."""
    info = graph_inference.infer_types(body, dict(zip(body.input_names, types)))
    names = [body.input_names[i] for i in wrt]
    grad_graph, result = differentiate(body, names, info,
                                       heads=[body.outputs[j] for j in heads])
    inputs = tuple(zip(body.input_names, types)) + grad_graph.inputs[len(body.inputs):]
    graph = prune(grad_graph.replace(inputs=inputs, outputs=tuple(result[n] for n in names),
                                     name=f"{body.name}_grad"))
    return graph.replace(captures=graph.input_names)


def if_grad(g: Any, dys: Sequence[Any]) -> list[Any]:
    """The gradient of the captured values: an If on the same condition whose branches are
    the gradient graphs of the forward branches (each takes the captured values and the head
    gradients of the float outputs), so only the branch taken runs its backward."""
    captured = list(g.inputs[1:])
    wrt = [i for i, h in enumerate(captured) if h and g.dtype(h).kind == "f"]
    heads = [j for j, out in enumerate(g.outputs) if out and g.dtype(out).kind == "f"]
    if not wrt or not heads:
        return [None] * len(g.inputs)
    types = [TensorType(g.shape(h), g.dtype(h)) for h in captured]
    branches = {key: _gradient_branch(g.attrs[key], types, wrt, heads)
                for key in ("then_branch", "else_branch")}
    head_values = [dys[j] if dys[j] is not None else g.zeros_like(g.outputs[j]) for j in heads]
    grads = g.emit("If", g.inputs[0], *captured, *head_values, num_outputs=len(wrt),
                   **branches)
    grads = grads if isinstance(grads, tuple) else (grads,)
    result: list[Any] = [None] * len(g.inputs)
    for index, grad in zip(wrt, grads):
        result[1 + index] = grad
    return result


def _is_float(g: Any, handle: Any) -> bool:
    return bool(handle) and g.dtype(handle).kind == "f"


def scan_grad(g: Any, dys: Sequence[Any]) -> list[Any]:
    """The gradients of a Scan's initial states, scan inputs and float captured values (see
    the module docstring)."""
    body: Graph = g.attrs["body"]
    lay = scan_layout(g.attrs, len(g.inputs), len(g.outputs))
    n, m, k, c = lay["states"], lay["scan_inputs"], lay["scan_outputs"], lay["captures"]
    states, scanned, captured = g.inputs[:n], g.inputs[n:n + m], g.inputs[n + m:]
    slice_types = []
    for j, x in enumerate(scanned):
        shape = list(g.shape(x))
        del shape[lay["in_axes"][j] % len(shape)]
        slice_types.append(TensorType(shape, g.dtype(x)))
    types = [TensorType(g.shape(h), g.dtype(h)) for h in states] + slice_types + \
        [TensorType(g.shape(h), g.dtype(h)) for h in captured]
    fs = [i for i in range(n) if _is_float(g, states[i])]
    fx = [j for j in range(m) if _is_float(g, scanned[j])]
    fc = [i for i in range(c) if _is_float(g, captured[i])]
    fy = [j for j in range(k) if _is_float(g, g.outputs[n + j])]
    if not (fs or fx or fc):
        return [None] * len(g.inputs)

    # 1. the forward again, recording the state each step starts from
    recorded = [fresh_name(f"{name}_step_state") for name in body.input_names[:n]]
    record_body = body.replace(
        nodes=body.nodes + tuple(Node("Identity", (name,), (rec,), {}, f"record:{rec}")
                                 for name, rec in zip(body.input_names[:n], recorded)),
        outputs=body.outputs + tuple(recorded), name=f"{body.name}_recording")
    forward = g.emit("Scan", *g.inputs, num_outputs=n + k + n, body=record_body,
                     num_scan_inputs=m, scan_input_axes=lay["in_axes"],
                     scan_input_directions=lay["in_directions"],
                     scan_output_axes=lay["out_axes"] + [0] * n,
                     scan_output_directions=lay["out_directions"] + [0] * n)
    forward = forward if isinstance(forward, tuple) else (forward,)
    step_states = forward[n + k:]

    # 2. the body's gradient graph, as the body of a reverse Scan
    info = graph_inference.infer_types(body, dict(zip(body.input_names, types)))
    names = body.input_names
    wrt = [names[i] for i in fs] + [names[n + j] for j in fx] + [names[n + m + i] for i in fc]
    heads = [body.outputs[i] for i in fs] + [body.outputs[n + j] for j in fy]
    grad_graph, result = differentiate(body, wrt, info, heads=heads)
    head_inputs = grad_graph.inputs[len(body.inputs):]
    sums = [(fresh_name(f"{names[n + m + i]}_grad_sum"), types[n + m + i]) for i in fc]
    added = [Node("Add", (total, result[names[n + m + i]]),
                  (fresh_name(f"{names[n + m + i]}_grad_sum_next"),), {}, "")
             for (total, _), i in zip(sums, fc)]
    backward_body = prune(Graph(
        nodes=grad_graph.nodes + tuple(added),
        inputs=tuple(head_inputs[:len(fs)]) + tuple(sums)
        + tuple(zip(names[:n + m], types[:n + m])) + tuple(head_inputs[len(fs):])
        + tuple(zip(names[n + m:], types[n + m:])),
        outputs=tuple(result[names[i]] for i in fs) + tuple(a.outputs[0] for a in added)
        + tuple(result[names[n + j]] for j in fx),
        initializers=grad_graph.initializers, name=f"{body.name}_grad",
        captures=names[n + m:]))

    # 3. the reverse Scan: steps last to first
    initial = [dys[i] if dys[i] is not None else g.zeros_like(g.outputs[i]) for i in fs]
    initial += [g.zeros_like(captured[i]) for i in fc]
    out_grads = [dys[n + j] if dys[n + j] is not None else g.zeros_like(g.outputs[n + j])
                 for j in fy]
    backward = g.emit(
        "Scan", *initial, *step_states, *scanned, *out_grads, *captured,
        num_outputs=len(fs) + len(fc) + len(fx), body=backward_body,
        num_scan_inputs=n + m + len(fy),
        scan_input_axes=[0] * n + lay["in_axes"] + [lay["out_axes"][j] for j in fy],
        scan_input_directions=[1] * n + [1 - d for d in lay["in_directions"]]
        + [1 - lay["out_directions"][j] for j in fy],
        scan_output_axes=[lay["in_axes"][j] for j in fx],
        scan_output_directions=[1 - lay["in_directions"][j] for j in fx])
    backward = backward if isinstance(backward, tuple) else (backward,)
    result_grads: list[Any] = [None] * len(g.inputs)
    for slot, i in enumerate(fs):
        result_grads[i] = backward[slot]
    for slot, i in enumerate(fc):
        result_grads[n + m + i] = backward[len(fs) + slot]
    for slot, j in enumerate(fx):
        result_grads[n + j] = backward[len(fs) + len(fc) + slot]
    return result_grads


def _distinct_outputs(body: Graph) -> Graph:
    """``body`` with every output name distinct and computed by a node (an Identity where the
    same value is returned twice or an input is returned as it is), so that each output gets
    its own head gradient."""
    seen: set[str] = set()
    nodes, outputs = list(body.nodes), []
    for name in body.outputs:
        if name in seen or name in body.input_names:
            copy = fresh_name(f"{name}_out")
            nodes.append(Node("Identity", (name,), (copy,), {}, f"copy:{copy}"))
            name = copy
        seen.add(name)
        outputs.append(name)
    return body.replace(nodes=tuple(nodes), outputs=tuple(outputs))


def loop_grad(g: Any, dys: Sequence[Any]) -> list[Any]:
    """The gradients of a Loop's initial carried values and float captured values, through
    the trip count the forward run records.

    The forward Loop is run again with its body also returning, as extra scan outputs, the
    iteration number and the carried values each iteration starts from; the number of
    recorded iterations is the trip count T. A second Loop runs T times over ``t = T-1 .. 0``:
    its body reads entry ``t`` of the recordings (Gather), runs the body's gradient graph with
    the carried values' gradients as loop-carried values (and sums of the captured values'
    gradients), the scan outputs' gradients at ``t`` as heads. The condition at every
    recorded iteration was true, and is given as such."""
    body = _distinct_outputs(g.attrs["body"])
    c = len(body.captures)
    n = len(g.inputs) - 2 - c
    k = len(g.outputs) - n
    carried, captured = g.inputs[2:2 + n], g.inputs[2 + n:]
    names = body.input_names
    fs = [i for i in range(n) if _is_float(g, carried[i])]
    fc = [i for i in range(c) if _is_float(g, captured[i])]
    fy = [j for j in range(k) if _is_float(g, g.outputs[n + j])]
    if not (fs or fc):
        return [None] * len(g.inputs)
    # 1. the forward again, recording the iteration number and the incoming carried values
    recorded = [fresh_name(f"{name}_iteration_state") for name in names[:2 + n]]
    record_body = body.replace(
        nodes=body.nodes + tuple(Node("Identity", (name,), (rec,), {}, f"record:{rec}")
                                 for name, rec in zip([names[0]] + list(names[2:2 + n]),
                                                      [recorded[0]] + recorded[2:])),
        outputs=body.outputs + (recorded[0],) + tuple(recorded[2:]),
        name=f"{body.name}_recording")
    forward = g.emit("Loop", *g.inputs, num_outputs=n + k + 1 + n, body=record_body)
    forward = forward if isinstance(forward, tuple) else (forward,)
    steps, states = forward[n + k], forward[n + k + 1:]
    trips = g.emit("Gather", g.emit("Shape", steps), g.const(np.asarray(0, np.int64)), axis=0)
    last = g.emit("Sub", trips, g.const(np.asarray(1, np.int64)))
    # 2. the backward body: entry t of the recordings, then the body's gradient graph
    types = [TensorType((), "int64"), TensorType((), "bool")] + \
        [TensorType(g.shape(h), g.dtype(h)) for h in carried + captured]
    info = graph_inference.infer_types(body, dict(zip(names, types)))
    wrt = [names[2 + i] for i in fs] + [names[2 + n + i] for i in fc]
    heads = [body.outputs[1 + i] for i in fs] + [body.outputs[1 + n + j] for j in fy]
    grad_graph, result = differentiate(body, wrt, info, heads=heads)
    head_inputs = grad_graph.inputs[len(body.inputs):]
    b, cond = fresh_name("reverse_step"), fresh_name("reverse_cond")
    last_in, t = fresh_name("last_step"), fresh_name("step")
    rec_in = [fresh_name(f"{name}_recorded") for name in [names[0]] + list(names[2:2 + n])]
    dy_in = [fresh_name(f"{name}_grads") for name, _ in head_inputs[len(fs):]]
    sums = [(fresh_name(f"{names[2 + n + i]}_grad_sum"), types[2 + n + i]) for i in fc]
    true = fresh_name("true")
    prologue = [Node("Sub", (last_in, b), (t,), {}, f"index:{t}")]
    prologue += [Node("Gather", (rec, t), (name,), {"axis": 0}, f"entry:{name}")
                 for rec, name in zip(rec_in, [names[0]] + list(names[2:2 + n]))]
    prologue += [Node("Identity", (true,), (names[1],), {}, f"cond:{names[1]}")]
    prologue += [Node("Gather", (grads, t), (head,), {"axis": 0}, f"entry:{head}")
                 for grads, (head, _) in zip(dy_in, head_inputs[len(fs):])]
    added = [Node("Add", (total, result[names[2 + n + i]]),
                  (fresh_name(f"{names[2 + n + i]}_grad_sum_next"),), {}, "")
             for (total, _), i in zip(sums, fc)]
    capture_names = tuple(rec_in) + tuple(dy_in) + (last_in,) + tuple(names[2 + n:])
    placeholder = TensorType((), "float32")  # (the Loop's rule infers with the real types)
    backward_body = prune(Graph(
        nodes=tuple(prologue) + grad_graph.nodes + tuple(added),
        inputs=((b, TensorType((), "int64")), (cond, TensorType((), "bool")))
        + tuple(head_inputs[:len(fs)]) + tuple(sums)
        + tuple((name, placeholder) for name in capture_names[:-c or None])
        + tuple(zip(names[2 + n:], types[2 + n:])),
        outputs=(true,) + tuple(result[names[2 + i]] for i in fs)
        + tuple(a.outputs[0] for a in added),
        initializers={**grad_graph.initializers, true: np.asarray(True)},
        name=f"{body.name}_grad", captures=capture_names))
    # 3. the reverse Loop
    initial = [dys[i] if dys[i] is not None else g.zeros_like(g.outputs[i]) for i in fs]
    initial += [g.zeros_like(captured[i]) for i in fc]
    out_grads = [dys[n + j] if dys[n + j] is not None else g.zeros_like(forward[n + j])
                 for j in fy]
    backward = g.emit("Loop", trips, None, *initial, steps, *states, *out_grads, last,
                      *captured, num_outputs=len(fs) + len(fc), body=backward_body)
    backward = backward if isinstance(backward, tuple) else (backward,)
    result_grads: list[Any] = [None] * len(g.inputs)
    for slot, i in enumerate(fs):
        result_grads[2 + i] = backward[slot]
    for slot, i in enumerate(fc):
        result_grads[2 + n + i] = backward[len(fs) + slot]
    return result_grads
