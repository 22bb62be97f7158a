"""Optimised graphs compute what unoptimised ones do.

Every forward case of the op table runs optimised (level ``all``) and is compared with the
op's reference (onnx.reference or the case's NumPy function), alone and followed by an
elementwise op (so that fusion applies). Whole networks in inference mode (BatchNormalization,
Dropout, Conv, Gemm, activations) are compared optimised against unoptimised.
"""
import numpy as np
import pytest

from portable.device import cpu
from portable.executor.segments import compile_graph
from portable.ir import GraphBuilder, Node
from portable.ir.types import is_tensor
from portable.ops import registry
from portable.passes.infer import infer_types
from portable.passes.pipeline import optimize
from portable.passes.training import set_training_mode
from tests.ops.harness import assert_output_matches, build, run_reference
from tests.ops.test_op_table import CASES

FORWARD = [c for c in CASES if c.op.split(".")[0] != "portable" or c.reference is not None]


def _run(graph, feeds, level):
    # (compile_graph: outputs known only at run time, sequences and optionals run between
    # planned segments)
    plan = compile_graph(graph, cpu(), optimize=level)
    return [_owned(o) for o in plan.run(feeds)]


def _owned(value):
    """A copy of an output: an array, a list of them (a sequence) or None."""
    if value is None or isinstance(value, list):
        return value if value is None else [_owned(v) for v in value]
    return np.array(value, copy=True)


@pytest.mark.parametrize("case", FORWARD, ids=[c.id for c in FORWARD])
def test_optimised_case_matches_the_reference(case):
    if case.reference is None:
        pytest.importorskip("onnx", reason="onnx provides the reference evaluator")
    expected = run_reference(case)[:case.outputs]
    graph, feeds = build(case, case.inputs)
    got = _run(graph, feeds, "all")
    for j, (g, want) in enumerate(zip(got, expected)):
        assert_output_matches(g, want, case, j, dtype=False)
    # followed by an elementwise op, the case's op may join a fused chain (a random op's
    # reference reseeds for one draw only)
    if not is_tensor(infer_types(graph).types[graph.outputs[0]]):  # a sequence, an optional
        return
    want = np.asarray(expected[0])
    if want.dtype.kind == "f" and want.size and not registry.get(case.op).random:
        chained = graph.replace(nodes=graph.nodes + (
            Node("Neg", (graph.outputs[0],), ("negated",)),),
            outputs=("negated",))
        got, = _run(chained, feeds, "all")
        np.testing.assert_allclose(got, -want, rtol=case.rtol, atol=case.atol)


def _network():
    rng = np.random.default_rng(0)
    b = GraphBuilder("net")
    x = b.input("x", (2, 3, 8, 8))
    h = x
    for cin, cout in [(3, 8), (8, 8)]:
        w = (rng.standard_normal((cout, cin, 3, 3)) * 0.3).astype(np.float32)
        h = b.op("Conv", h, b.const(w), pads=[1, 1, 1, 1])
        params = [rng.uniform(0.5, 1.5, cout), rng.standard_normal(cout),
                  rng.standard_normal(cout) * 0.1, rng.uniform(0.5, 1.5, cout)]
        h = b.op("BatchNormalization", h, *(b.const(p.astype(np.float32)) for p in params))
        h = b.op("Relu", h)
    skip = b.op("Conv", x, b.const(rng.standard_normal((8, 3, 1, 1)).astype(np.float32)))
    h = b.op("Add", h, skip)
    h = b.op("MaxPool", h, kernel_shape=[2, 2], strides=[2, 2])
    h = b.op("Flatten", h)
    h = b.op("Dropout", h, b.const(np.float32(0.5)))
    h = b.op("Gemm", h, b.const(rng.standard_normal((10, 128)).astype(np.float32) * 0.1),
             b.const(rng.standard_normal(10).astype(np.float32)), transB=1)
    h = b.op("Tanh", b.op("Add", b.op("Mul", h, b.const(np.float32(0.5))),
                          b.const(np.float32(0.1))))
    return b.build([b.op("Softmax", h)])


def test_a_network_optimised_computes_the_same_outputs():
    graph, _ = set_training_mode(_network(), False)
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)}
    want, = _run(graph, feeds, "none")
    got, = _run(graph, feeds, "all")
    ops = [n.op for n in optimize(graph, "all").nodes]
    assert "BatchNormalization" not in ops and "Dropout" not in ops
    assert "portable.FusedElementwise" in ops and "portable.FusedConv" in ops
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
