"""Common-subexpression elimination: before/expected graphs."""
import numpy as np

from portable.ir import GraphBuilder
from portable.passes.cse import eliminate_common_subexpressions
from tests.passes.structural import assert_graphs_equal


def test_merges_equal_expressions_and_equal_constants():
    b = GraphBuilder("before")
    x = b.input("x", (2, 3))
    a1 = b.op("Mul", x, b.const(np.float32(2.0)))
    a2 = b.op("Mul", x, b.const(np.float32(2.0)))  # equal constant under another name
    r1, r2 = b.op("Relu", a1), b.op("Relu", a2)
    before = b.build([b.op("Add", r1, r2)])

    e = GraphBuilder("expected")
    x = e.input("x", (2, 3))
    r = e.op("Relu", e.op("Mul", x, e.const(np.float32(2.0))))
    expected = e.build([e.op("Add", r, r)])
    assert_graphs_equal(eliminate_common_subexpressions(before), expected)


def test_different_attributes_are_different_expressions():
    b = GraphBuilder("g")
    x = b.input("x", (2, 3))
    g = b.build([b.op("Softmax", x, axis=0), b.op("Softmax", x, axis=1)])
    assert eliminate_common_subexpressions(g) is g


def test_random_ops_and_graph_outputs_are_kept():
    b = GraphBuilder("g")
    x = b.input("x", (4,))
    ratio = b.const(np.float32(0.5))
    d1, _ = b.op("Dropout", x, ratio, outputs=2, training_mode=1)
    d2, _ = b.op("Dropout", x, ratio, outputs=2, training_mode=1)
    n1, n2 = b.op("Neg", x), b.op("Neg", x)
    g = b.build([d1, d2, n1, n2])
    out = eliminate_common_subexpressions(g)
    assert [n.op for n in out.nodes] == ["Dropout", "Dropout", "Neg", "Neg"]
    assert out.outputs == g.outputs
