"""Elementwise fusion: before/expected graphs, and the fused kernel against NumPy."""
import numpy as np

from portable.device import cpu
from portable.executor.compiled import CompiledGraph
from portable.ir import GraphBuilder
from portable.ops.fused import encode_body
from portable.passes.fuse_elementwise import fuse_elementwise
from tests.passes.structural import assert_graphs_equal

FUSED = "portable.FusedElementwise"


def _chain():
    b = GraphBuilder("before")
    x = b.input("x", (4, 3, 5))
    scale = b.const(np.linspace(0.5, 1.5, 3, dtype=np.float32).reshape(3, 1), name="scale")
    shift = b.const(np.float32(-0.25), name="shift")
    y = b.op("Relu", b.op("Add", b.op("Mul", x, scale), shift))
    return b, x, y


def test_a_chain_becomes_one_fused_node():
    b, x, y = _chain()
    before = b.build([b.op("Tanh", y)])

    e = GraphBuilder("expected")
    x = e.input("x", (4, 3, 5))
    scale = e.const(np.linspace(0.5, 1.5, 3, dtype=np.float32).reshape(3, 1))
    shift = e.const(np.float32(-0.25))
    body = encode_body([("Mul", [0, 1], {}), ("Add", [-1, 2], {}), ("Relu", [-1], {}),
                        ("Tanh", [-1], {})])
    expected = e.build([e.op(FUSED, x, scale, shift, body=body)])
    after = fuse_elementwise(before)
    assert_graphs_equal(after, expected)
    assert after.outputs == before.outputs  # the fused node keeps the tail's name


def test_a_value_read_elsewhere_ends_the_chain():
    b, x, y = _chain()
    g = b.build([y])
    # the Add's output is also a graph output: the chain splits there
    add = g.nodes[1].outputs[0]
    g2 = g.replace(outputs=(y, add))
    fused = fuse_elementwise(g2)
    assert [n.op for n in fused.nodes] == [FUSED, "Relu"]


def test_type_changes_and_non_inplace_inputs_break_chains():
    b = GraphBuilder("g")
    x = b.input("x", (3,))
    c = b.op("Greater", b.op("Neg", x), b.const(np.float32(0)))  # bool: another type
    # PRelu declares no in-place pair: it cannot continue a chain
    p = b.op("PRelu", b.op("Exp", x), b.const(np.float32(0.1)))
    g = b.build([c, p])
    assert [n.op for n in fuse_elementwise(g).nodes] == ["Neg", "Greater", "Exp", "PRelu"]


def test_fused_kernel_matches_numpy_with_broadcasting():
    b, x, y = _chain()
    g = fuse_elementwise(b.build([b.op("Sigmoid", y)]))
    assert [n.op for n in g.nodes] == [FUSED]
    xv = np.random.default_rng(0).standard_normal((4, 3, 5)).astype(np.float32)
    out, = CompiledGraph(g, cpu()).run({"x": xv})
    scale = np.linspace(0.5, 1.5, 3, dtype=np.float32).reshape(3, 1)
    expected = 1 / (1 + np.exp(-np.maximum(xv * scale - 0.25, 0)))
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_fused_kernel_is_correct_when_its_output_reuses_an_input_read_later():
    # x * sigmoid(x): the chain Sigmoid -> Mul reads x again at step 1; the planner may put
    # the fused output over x's storage (the op's in-place pair), so the kernel must copy x.
    b = GraphBuilder("g")
    x = b.input("x", (64,))
    h = b.op("Exp", x)  # a planned value, so the fused node's input can be overwritten
    y = b.op("Mul", b.op("Sigmoid", h), h)
    g = fuse_elementwise(b.build([y]))
    assert [n.op for n in g.nodes] == ["Exp", FUSED]
    xv = np.linspace(-2, 2, 64, dtype=np.float32)
    plan = CompiledGraph(g, cpu())
    out, = plan.run({"x": xv})
    e = np.exp(xv)
    np.testing.assert_allclose(out, e / (1 + np.exp(-e)), rtol=1e-6)
