"""Op-table cases of If, Loop and Scan. Their bodies are portable Graphs (onnx.reference would
need them as GraphProtos), so each case carries its NumPy reference, a closed form of what the
body computes. Each body reads a value of the enclosing graph through a captured trailing
input (``portable/ir/graph.py``). Gradients are checked against finite differences (Loop's
and Scan's through the recorded trip count)."""
from __future__ import annotations

import numpy as np

from portable.ir.graph import Graph, Node, TensorType
from tests.ops.harness import Case, rand

F32 = "float32"


def _graph(nodes, inputs, outputs, captures=(), name="body"):
    return Graph(nodes=tuple(Node(*n) for n in nodes),
                 inputs=tuple((n, TensorType(s, d)) for n, s, d in inputs),
                 outputs=tuple(outputs), name=name, captures=tuple(captures))


_THEN = _graph([("Relu", ("x",), ("r",))], [("x", (2, 3), F32)], ["r"], ["x"], "then")
_ELSE = _graph([("Neg", ("x",), ("n",)), ("Exp", ("n",), ("e",))],
               [("x", (2, 3), F32)], ["e"], ["x"], "else")

# y <- y * w + i (the iteration number, cast); scan output: y after each step
_LOOP_BODY = _graph(
    [("Mul", ("y", "w"), ("yw",)), ("CastLike", ("i", "y"), ("i_f",)),
     ("Add", ("yw", "i_f"), ("y2",)), ("Identity", ("c",), ("c2",)),
     ("Identity", ("y2",), ("y_scan",))],
    [("i", (), "int64"), ("c", (), "bool"), ("y", (3,), F32), ("w", (3,), F32)],
    ["c2", "y2", "y_scan"], ["w"])

# state s <- s + x_t; scan output: s * k (k captured)
_SCAN_BODY = _graph(
    [("Add", ("s", "x_t"), ("s2",)), ("Mul", ("s2", "k"), ("o",))],
    [("s", (3,), F32), ("x_t", (3,), F32), ("k", (3,), F32)], ["s2", "o"], ["k"])


def _if_reference(inputs, attrs):
    cond, x = inputs
    return [np.maximum(x, 0) if bool(cond) else np.exp(-x)]


def _loop_reference(inputs, attrs):
    trips, _, y, w = inputs
    ys = []
    for i in range(int(trips)):
        y = y * w + np.float32(i)
        ys.append(y)
    return [y, np.stack(ys) if ys else np.zeros((0, 3), np.float32)]


def _scan_reference(inputs, attrs):
    s, xs, k = inputs
    steps = xs[::-1] if attrs.get("scan_input_directions") == [1] else xs
    outs = []
    for x_t in steps:
        s = s + x_t
        outs.append(s * k)
    return [s, np.stack(outs, axis=attrs.get("scan_output_axes", [0])[0])]


CASES = [
    Case("If", [np.array(True), rand(2, 3)], attrs={"then_branch": _THEN, "else_branch": _ELSE},
         reference=_if_reference, name="then"),
    Case("If", [np.array(False), rand(2, 3, seed=1)],
         attrs={"then_branch": _THEN, "else_branch": _ELSE}, reference=_if_reference,
         name="else"),
    Case("Loop", [np.array(4, np.int64), None, rand(3), rand(3, seed=2)],
         attrs={"body": _LOOP_BODY}, outputs=2, const=(0,), reference=_loop_reference,
         rtol=1e-5, atol=1e-5, name="trip_count_capture"),
    Case("Loop", [np.array(3, np.int64), None, rand(3), rand(3, seed=2)],
         attrs={"body": _LOOP_BODY}, outputs=2, reference=_loop_reference,
         rtol=1e-5, atol=1e-5, name="runtime_trip_count"),
    Case("Scan", [rand(3), rand(5, 3, seed=3), rand(3, seed=4)],
         attrs={"body": _SCAN_BODY, "num_scan_inputs": 1}, outputs=2,
         reference=_scan_reference, name="capture"),
    Case("Scan", [rand(3), rand(5, 3, seed=3), rand(3, seed=4)],
         attrs={"body": _SCAN_BODY, "num_scan_inputs": 1, "scan_input_directions": [1],
                "scan_output_axes": [1]}, outputs=2, reference=_scan_reference,
         name="reverse_output_axis_1"),
]
