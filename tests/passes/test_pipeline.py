"""The pipeline: levels, debug verification naming the pass history."""
import numpy as np
import pytest

from portable.errors import GraphError
from portable.ir import GraphBuilder
from portable.passes.pipeline import LEVELS, PIPELINE, Pass, optimize


def _model():
    rng = np.random.default_rng(0)
    b = GraphBuilder("m")
    x = b.input("x", (1, 3, 6, 6))
    w = b.op("ConstantOfShape", b.const(np.array([4, 3, 3, 3], np.int64)),
             value=np.array([0.1], np.float32))
    y = b.op("Conv", x, w, pads=[1, 1, 1, 1])
    y = b.op("BatchNormalization", y, *(b.const(rng.uniform(0.5, 1, 4).astype(np.float32))
                                        for _ in range(4)))
    y = b.op("Relu", y)
    y = b.op("Identity", y)
    y = b.op("Add", b.op("Mul", y, b.const(np.float32(2))), b.const(np.float32(1)))
    y = b.op("Tanh", y)
    b.op("Neg", y)  # dead
    return b.build([y])


def test_levels_run_more_passes():
    g = _model()
    assert optimize(g, "none") is g
    basic = optimize(g, "basic")
    assert [n.op for n in basic.nodes] == ["Conv", "BatchNormalization", "Relu", "Mul", "Add",
                                           "Tanh"]
    full = optimize(g, "all", debug=True)
    assert [n.op for n in full.nodes] == ["portable.FusedConv", "portable.FusedElementwise"]
    assert full.outputs == g.outputs and full.inputs == g.inputs


def test_every_pass_is_named_and_explained():
    names = [p.name for p in PIPELINE]
    assert len(names) == len(set(names))
    assert all(p.level in LEVELS and p.why for p in PIPELINE)
    with pytest.raises(ValueError, match="unknown optimisation level"):
        optimize(_model(), "extended")


def test_debug_mode_names_the_failing_pass_and_the_history():
    def break_graph(graph, keep):
        node = graph.nodes[0]
        return graph.replace(nodes=(node.replace(inputs=("nowhere",) + node.inputs[1:]),)
                             + graph.nodes[1:])

    passes = PIPELINE[:2] + (Pass("breaker", "basic", break_graph, "test"),) + PIPELINE[2:]
    with pytest.raises(GraphError) as info:
        optimize(_model(), "basic", debug=True, passes=passes)
    message = str(info.value)
    assert "pass 'breaker'" in message
    assert "(passes run before it: " + ", ".join(p.name for p in PIPELINE[:2]) + ")" in message
    assert "nowhere" in message


def test_protected_values_survive():
    g = _model()
    relu = next(n for n in g.nodes if n.op == "Relu").outputs[0]
    full = optimize(g, "all", protected=[relu])
    assert relu in {o for n in full.nodes for o in n.outputs}


def test_input_types_replace_the_declared_ones():
    b = GraphBuilder("g")
    x = b.input("x", (None, 4))
    g = b.build([b.op("Relu", x)])
    from portable.ir import TensorType
    out = optimize(g, "basic", input_types={"x": TensorType((2, 4))})
    assert out.inputs[0][1].shape == (2, 4)
