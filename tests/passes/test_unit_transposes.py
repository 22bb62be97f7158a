"""Transposes that move only size-1 axes become Reshapes: before/expected graphs, the
planned result (a view: no kernel runs) against NumPy, and the transposes that must stay."""
import numpy as np
import pytest

from portable.device import cpu
from portable.executor.compiled import CompiledGraph
from portable.ir import GraphBuilder
from portable.passes.rewriter import rewrite
from portable.passes.unit_transposes import UNIT_TRANSPOSES, moves_only_unit_axes
from tests.passes.structural import assert_graphs_equal


def test_a_sequence_first_transpose_at_batch_one_becomes_a_reshape():
    b = GraphBuilder("before")
    x = b.input("x", (1, 16, 64))
    before = b.build([b.op("Relu", b.op("Transpose", x, perm=[1, 0, 2]))])

    e = GraphBuilder("expected")
    x = e.input("x", (1, 16, 64))
    shape = e.const(np.array([16, 1, 64], np.int64))
    expected = e.build([e.op("Relu", e.op("Reshape", x, shape))])
    assert_graphs_equal(rewrite(before, UNIT_TRANSPOSES), expected)


def test_a_transpose_without_perm_reverses_the_axes():
    b = GraphBuilder("before")
    x = b.input("x", (1, 5, 1))
    before = b.build([b.op("Neg", b.op("Transpose", x))])  # (1, 5, 1): nothing moves

    e = GraphBuilder("expected")
    x = e.input("x", (1, 5, 1))
    expected = e.build([e.op("Neg", e.op("Reshape", x, e.const(np.array([1, 5, 1],
                                                                         np.int64))))])
    assert_graphs_equal(rewrite(before, UNIT_TRANSPOSES), expected)


@pytest.mark.parametrize("shape, perm", [
    ((2, 16, 64), [1, 0, 2]),      # batch 2: the rows really move
    ((1, 4, 16, 16), [0, 1, 3, 2]),  # keys transposed for Q @ K^T
    ((3, 1, 4), [2, 1, 0]),        # the two long axes swap
    ((0, 1, 3), [1, 0, 2]),        # no elements: a 0 in a Reshape target means "keep"
])
def test_transposes_that_move_elements_stay(shape, perm):
    b = GraphBuilder("g")
    x = b.input("x", shape)
    g = b.build([b.op("Neg", b.op("Transpose", x, perm=perm))])
    assert [n.op for n in rewrite(g, UNIT_TRANSPOSES).nodes] == ["Transpose", "Neg"]


def test_unit_axis_rule_against_numpy_memory_order():
    """The rule holds exactly when NumPy's transposed copy keeps the flat element order."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        shape = tuple(int(d) for d in rng.choice([1, 1, 2, 3], size=rng.integers(1, 5)))
        perm = tuple(int(a) for a in rng.permutation(len(shape)))
        x = np.arange(np.prod(shape)).reshape(shape)
        same_order = np.array_equal(np.ascontiguousarray(x.transpose(perm)).ravel(), x.ravel())
        assert moves_only_unit_axes(shape, perm) == same_order, (shape, perm)


def test_the_optimised_plan_runs_it_as_a_view_and_matches_numpy():
    b = GraphBuilder("g")
    x = b.input("x", (1, 6, 1, 4))
    t = b.op("Transpose", x, perm=[2, 1, 3, 0])  # (1, 6, 4, 1)
    g = b.build([b.op("Mul", t, b.const(np.float32(2.0)))])
    plan = CompiledGraph(g, cpu(), optimize="all")
    ops = [(step.node.op, step.view) for step in plan.steps]
    assert ("Reshape", True) in ops and all(op != "Transpose" for op, _ in ops), ops
    value = np.random.default_rng(1).standard_normal((1, 6, 1, 4)).astype(np.float32)
    for _ in range(2):  # a second run reads the new input through the view as well
        value = value + 1
        y, = plan.run({"x": value})
        np.testing.assert_array_equal(y, value.transpose(2, 1, 3, 0) * np.float32(2.0))
