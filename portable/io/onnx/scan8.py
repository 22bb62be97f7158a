"""Scan version 8 read as today's ops: a Loop over the batch whose body runs a Scan (9+).

Scan 8 had a batch axis: its states are ``[B, ...]`` and its scan inputs ``[B, T, ...]``, and
the body ran once per batch entry and step. Scan 9 dropped the batch axis (and gained scan
axes). Version 8 is therefore a Loop over ``b < B`` whose body takes entry ``b`` of every state
and scan input (Gather on axis 0) and runs a Scan 9 with the original body; the Loop stacks the
Scan's final states and scan outputs along a new axis 0, which is exactly version 8's
``[B, ...]`` and ``[B, T, ...]``. The Loop's body condition is the constant true, so the trip
count is known while planning whenever B is.

Scan 8's ``sequence_lens`` (per-entry lengths shorter than T) has no Scan 9 form: a node that
gives it is refused, naming the node.
"""
from __future__ import annotations

import numpy as np

from portable.errors import OpError
from portable.io.onnx.steps import RewriteContext
from portable.ir.graph import Graph, Node, TensorType


def scan8_as_loop(node: Node, captures: list[str], ctx: RewriteContext,
                  label: str) -> list[Node]:
    """The nodes that compute a Scan 8 ``node`` (its subgraph already imported, its
    ``captures`` not yet appended to its inputs)."""
    attrs = dict(node.attrs)
    body: Graph = attrs["body"]
    inputs = list(node.inputs)
    if inputs and inputs[0]:
        raise OpError(f"{label}: input sequence_lens (per-entry lengths) of Scan version 8 "
                      f"is not supported; export the model at opset >= 9")
    values = inputs[1:]
    scan_count = int(attrs["num_scan_inputs"])
    if not values or scan_count < 1 or scan_count > len(values):
        raise OpError(f"{label}: {len(values)} states and scan inputs for num_scan_inputs="
                      f"{scan_count}")
    states, scanned = values[:len(values) - scan_count], values[len(values) - scan_count:]
    shape = ctx.fresh(f"{node.name}_shape")
    trips = ctx.fresh(f"{node.name}_batch")
    first = ctx.constant(np.asarray(0, np.int64), f"{node.name}_zero")
    outer = [Node("Shape", (values[0],), (shape,), {}, f"{node.name}/shape"),
             Node("Gather", (shape, first), (trips,), {"axis": 0}, f"{node.name}/batch")]
    step, cond = ctx.fresh(f"{node.name}_b"), ctx.fresh(f"{node.name}_cond")
    entries = [ctx.fresh(f"{name}_entry") for name in states + scanned]
    # the Loop body reads the states, the scan inputs and what the Scan body captures
    captured = list(dict.fromkeys(states + scanned + list(captures)))
    inner_outputs = [ctx.fresh(f"{name}_entry") for name in node.outputs]
    keep_going = ctx.fresh(f"{node.name}_true")
    scan_attrs = {"body": body, "num_scan_inputs": scan_count}
    if attrs.get("directions"):
        scan_attrs["scan_input_directions"] = list(attrs["directions"])
    nodes = [Node("Gather", (name, step), (entry,), {"axis": 0}, f"{node.name}/{entry}")
             for name, entry in zip(states + scanned, entries)]
    nodes.append(Node("Scan", tuple(entries) + tuple(captures), tuple(inner_outputs),
                      scan_attrs, f"{node.name}/scan"))
    placeholder = TensorType((), "float32")  # (the Loop's type rule gives the real types)
    loop_body = Graph(
        nodes=tuple(nodes),
        inputs=((step, TensorType((), "int64")), (cond, TensorType((), "bool")))
        + tuple((name, placeholder) for name in captured),
        outputs=(keep_going,) + tuple(inner_outputs),
        initializers={keep_going: np.asarray(True)}, name=f"{body.name}_per_batch_entry",
        captures=tuple(captured))
    loop = Node("Loop", (trips, "") + tuple(captured), tuple(node.outputs), {"body": loop_body},
                node.name)
    return outer + [loop]
