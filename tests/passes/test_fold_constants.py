"""Constant folding: before/expected graphs, and values checked against NumPy."""
import numpy as np

from portable.ir import GraphBuilder
from portable.passes.fold_constants import fold_constants
from tests.passes.structural import assert_graphs_equal


def test_folds_a_weight_built_by_constant_of_shape_and_arithmetic():
    b = GraphBuilder("before")
    x = b.input("x", (2, 4))
    shape = b.const(np.array([4, 3], np.int64))
    w = b.op("ConstantOfShape", shape, value=np.array([0.5], np.float32))
    w2 = b.op("Mul", w, b.const(np.float32(4.0)))
    y = b.op("MatMul", x, w2)
    before = b.build([y])

    e = GraphBuilder("expected")
    x = e.input("x", (2, 4))
    expected = e.build([e.op("MatMul", x, e.const(np.full((4, 3), 2.0, np.float32)))])
    assert_graphs_equal(fold_constants(before), expected)


def test_folds_shape_arithmetic_of_static_inputs():
    b = GraphBuilder("before")
    x = b.input("x", (2, 3, 4))
    s = b.op("Shape", x)
    y = b.op("Reshape", x, b.op("Concat", b.op("Slice", s, b.const(np.array([0])),
                                               b.const(np.array([1]))),
                                b.const(np.array([-1])), axis=0))
    before = b.build([y])

    e = GraphBuilder("expected")
    x = e.input("x", (2, 3, 4))
    expected = e.build([e.op("Reshape", x, e.const(np.array([2, -1], np.int64)))])
    assert_graphs_equal(fold_constants(before), expected)


def test_never_folds_random_ops_and_keeps_inputs_unfolded():
    b = GraphBuilder("g")
    x = b.input("x", (3,))
    c = b.const(np.ones(3, np.float32))
    d, _ = b.op("Dropout", c, b.const(np.float32(0.5)), outputs=2, training_mode=1)
    y = b.op("Add", x, d)
    g = b.build([y])
    assert [n.op for n in fold_constants(g).nodes] == ["Dropout", "Add"]


def test_a_constant_graph_output_becomes_an_initializer():
    b = GraphBuilder("g")
    x = b.input("x", (2,))
    c = b.op("Add", b.const(np.ones(2, np.float32)), b.const(np.ones(2, np.float32)))
    g = b.build([b.op("Relu", x), c])
    folded = fold_constants(g)
    assert [n.op for n in folded.nodes] == ["Relu"]
    np.testing.assert_array_equal(folded.initializers[folded.outputs[1]], [2.0, 2.0])
