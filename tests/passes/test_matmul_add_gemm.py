"""MatMul by a matrix then a bias Add becomes one Gemm over the rows: before/expected graphs,
the cases the rule must leave alone, and optimised plans against NumPy."""
import numpy as np
import pytest

from portable.device import cpu
from portable.executor.compiled import CompiledGraph
from portable.ir import GraphBuilder
from portable.passes.matmul_add_gemm import MATMUL_ADD_AS_GEMM
from portable.passes.rewriter import rewrite
from tests.passes.structural import assert_graphs_equal

RNG = np.random.default_rng(0)


def _rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


W, B = _rand(4, 5), _rand(5)


@pytest.mark.parametrize("bias_first", [False, True])
def test_a_linear_on_a_stack_becomes_reshape_gemm_reshape(bias_first):
    b = GraphBuilder("before")
    x = b.input("x", (2, 3, 4))
    y = b.op("MatMul", x, b.const(W))
    before = b.build([b.op("Add", *((b.const(B), y) if bias_first else (y, b.const(B))))])

    e = GraphBuilder("expected")
    x = e.input("x", (2, 3, 4))
    rows = e.op("Reshape", x, e.const(np.array([6, 4], np.int64)))
    gemm = e.op("Gemm", rows, e.const(W.T.copy()), e.const(B), transB=1)
    expected = e.build([e.op("Reshape", gemm, e.const(np.array([2, 3, 5], np.int64)))])
    assert_graphs_equal(rewrite(before, MATMUL_ADD_AS_GEMM), expected)


def test_a_rank_two_linear_needs_no_reshape_and_a_row_bias_is_flattened():
    b = GraphBuilder("before")
    x = b.input("x", (3, 4))
    before = b.build([b.op("Add", b.op("MatMul", x, b.const(W)), b.const(B.reshape(1, 5)))])

    e = GraphBuilder("expected")
    x = e.input("x", (3, 4))
    expected = e.build([e.op("Gemm", x, e.const(W.T.copy()), e.const(B), transB=1)])
    assert_graphs_equal(rewrite(before, MATMUL_ADD_AS_GEMM), expected)


def test_an_activation_after_the_add_moves_onto_the_gemm_rows():
    b = GraphBuilder("before")
    x = b.input("x", (2, 3, 4))
    before = b.build([b.op("Relu", b.op("Add", b.op("MatMul", x, b.const(W)), b.const(B)))])

    e = GraphBuilder("expected")
    x = e.input("x", (2, 3, 4))
    rows = e.op("Reshape", x, e.const(np.array([6, 4], np.int64)))
    act = e.op("Relu", e.op("Gemm", rows, e.const(W.T.copy()), e.const(B), transB=1))
    expected = e.build([e.op("Reshape", act, e.const(np.array([2, 3, 5], np.int64)))])
    assert_graphs_equal(rewrite(before, MATMUL_ADD_AS_GEMM), expected)


@pytest.mark.parametrize("x_shape, w, bias", [
    ((2, 3, 4), _rand(4, 5), _rand(3, 5)),          # the bias varies along the rows
    ((2, 3, 4), _rand(4, 5), _rand(2, 1, 1, 5)),    # the bias adds a leading dim
    ((2, 3, 4), _rand(2, 4, 5), _rand(5)),          # a stack of matrices, not one
    ((2, 3, 4), _rand(4, 5, dtype=np.int32), np.ones(5, np.int32)),  # no integer Gemm
    ((0, 3, 4), _rand(4, 5), _rand(5)),             # no rows: a 0 in a Reshape target
])
def test_what_is_not_a_row_bias_linear_stays(x_shape, w, bias):
    b = GraphBuilder("g")
    x = b.input("x", x_shape, dtype=w.dtype)
    g = b.build([b.op("Add", b.op("MatMul", x, b.const(w)), b.const(bias))])
    assert [n.op for n in rewrite(g, MATMUL_ADD_AS_GEMM).nodes] == ["MatMul", "Add"]


def test_a_run_time_bias_of_rank_two_stays():
    """Gemm's C would have to be reshaped at run time: left as it is."""
    b = GraphBuilder("g")
    x, bias = b.input("x", (2, 3, 4)), b.input("bias", (1, 5))
    g = b.build([b.op("Add", b.op("MatMul", x, b.const(W)), bias)])
    assert [n.op for n in rewrite(g, MATMUL_ADD_AS_GEMM).nodes] == ["MatMul", "Add"]


@pytest.mark.parametrize("x_shape, bias_shape, act", [
    ((16, 1, 4), (5,), None),      # the encoder's QKV projection at batch 1
    ((2, 3, 2, 4), (1, 5), "Relu"),
    ((3, 4), (1,), "Relu"),
    ((2, 3, 4), (1, 1, 5), None),
])
def test_optimised_plans_match_numpy(x_shape, bias_shape, act):
    w, bias = _rand(4, 5), _rand(*bias_shape)
    b = GraphBuilder("g")
    x = b.input("x", x_shape)
    y = b.op("Add", b.const(bias), b.op("MatMul", x, b.const(w)))
    g = b.build([b.op(act, y) if act else y])
    plan = CompiledGraph(g, cpu(), optimize="all")
    ops = [step.node.op for step in plan.steps if not step.view]
    assert ops == (["portable.FusedGemm"] if act else ["Gemm"]), ops
    for seed in (1, 2):  # a second run reads its new input through the views as well
        value = np.random.default_rng(seed).standard_normal(x_shape).astype(np.float32)
        got, = plan.run({"x": value})
        want = value.astype(np.float64) @ w + bias
        want = np.maximum(want, 0) if act else want
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_weight_another_node_reads_is_not_transposed():
    """Transposing a shared weight would hold it twice: the Gemm reads it as it is."""
    b = GraphBuilder("before")
    x = b.input("x", (3, 4))
    w = b.const(W)
    before = b.build([b.op("Add", b.op("MatMul", x, w), b.const(B)), b.op("MatMul", x, w)])
    after = rewrite(before, MATMUL_ADD_AS_GEMM)
    gemm = [n for n in after.nodes if n.op == "Gemm"]
    assert len(gemm) == 1 and gemm[0].inputs[1] == w and not gemm[0].attrs.get("transB")
