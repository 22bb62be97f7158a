"""Planned segments around ops whose output shapes depend on values (portable/executor/segments).

A toy ``dynamic_outputs`` op, declared here, keeps the positive elements of a tensor (1-D): its
length is known only when it runs. Expected values come from NumPy.
"""
import numpy as np
import pytest

from portable.backend import output_array, returned_outputs
from portable.device import cpu
from portable.errors import BindError, ShapeError
from portable.executor.compiled import CompiledGraph
from portable.executor.segments import SegmentedGraph, compile_graph, split_graph
from portable.ir.graph import Graph, Node, TensorType
from portable.ops import registry

OP = "portable.TestPositives"


def _infer(ctx):
    if ctx.known(0):  # exact when the value is known while planning
        return [TensorType((int((ctx.value(0) > 0).sum()),), ctx.dtype(0))]
    return [TensorType((None,), ctx.dtype(0))]


def _kernel(ctx, inputs, outputs, attrs):
    x = inputs[0]
    kept = x.reshape(-1)[x.reshape(-1) > attrs.get("floor", 0.0)]
    y = output_array(ctx, outputs, 0, kept.shape, x.dtype)
    y[...] = kept
    return returned_outputs(outputs, [y])


def _failing(ctx, inputs, outputs, attrs):
    if attrs.get("silent"):  # breaks the contract: a dynamic kernel must return its outputs
        return None
    raise RuntimeError("boom")


@pytest.fixture
def toy_op():
    registry.declare("TestPositives", domain="portable", inputs=("X",), outputs=("Y",),
                     infer=_infer, dynamic_outputs=True,
                     attrs={"floor": registry.Attr("float", 0.0)})
    registry.declare("TestFailing", domain="portable", inputs=("X",), outputs=("Y",),
                     infer=lambda ctx: [TensorType((None,), ctx.dtype(0))],
                     dynamic_outputs=True, attrs={"silent": registry.Attr("int", 0)})
    kernels = cpu().backend.kernels
    kernels[OP] = _kernel
    kernels["portable.TestFailing"] = _failing
    yield OP
    for name in (OP, "portable.TestFailing"):
        registry.ops.pop(name, None)
        kernels.pop(name, None)


def _graph(nodes, inputs, outputs, initializers=None):
    return Graph(nodes, inputs, outputs, initializers or {}, "toy")


def _positives_graph(n=6):
    nodes = [Node("Relu", ("x",), ("r",)), Node("Neg", ("x",), ("neg",)),
             Node(OP, ("x",), ("p",)), Node("Mul", ("p", "two"), ("p2",)),
             Node("Add", ("p2", "r_sum"), ("out",)), Node("ReduceSum", ("r",), ("r_sum",),
                                                           {"keepdims": 0})]
    # (ReduceSum after its reader in the list would not be topological: reorder)
    nodes = [nodes[0], nodes[5], nodes[1], nodes[2], nodes[3], nodes[4]]
    return _graph(nodes, [("x", TensorType((n,), "float32"))], ["out", "neg", "p"],
                  {"two": np.array(2.0, np.float32)})


def test_a_graph_without_dynamic_values_compiles_as_before(toy_op):
    graph = _graph([Node("Relu", ("x",), ("y",))], [("x", TensorType((3,), "float32"))], ["y"])
    plan = compile_graph(graph, cpu())
    assert type(plan) is CompiledGraph
    assert split_graph(graph).static


def test_dynamic_node_runs_between_planned_segments(toy_op):
    graph = _positives_graph()
    split = split_graph(graph)
    assert [graph.nodes[i].op for i in split.between] == [OP]
    assert [graph.nodes[i].op for i in split.later] == ["Mul", "Add"]
    plan = compile_graph(graph, cpu())
    assert isinstance(plan, SegmentedGraph)
    x = np.array([1, -2, 3, 0, 5, -1], np.float32)
    out, neg, p = plan.run({"x": x})
    r_sum = np.maximum(x, 0).sum()
    np.testing.assert_allclose(out, x[x > 0] * 2 + r_sum)
    np.testing.assert_allclose(neg, -x)
    np.testing.assert_allclose(p, x[x > 0])
    where = plan.placement()
    assert "p" in where["runtime"]
    assert "r_sum" in where["planned"] and "out" in where["planned"]


def test_later_plans_are_cached_per_shape_and_bounded(toy_op):
    plan = compile_graph(_positives_graph(), cpu(), plans_kept=2)
    for x, count in [([1, 2, -1, -1, -1, -1], 2), ([3, 4, -1, -1, -1, -1], 2),
                     ([1, 2, 3, -1, -1, -1], 3), ([1, 1, 1, 1, -1, -1], 4),
                     ([5, 5, -1, -1, -1, -1], 2)]:
        x = np.array(x, np.float32)
        out, _, p = plan.run({"x": x})
        assert p.shape == (count,)
        np.testing.assert_allclose(out, x[x > 0] * 2 + np.maximum(x, 0).sum())
    # shapes 2, 3, 4, 2: the second run reused the first plan; 2 came back after eviction
    assert plan.plans_made == 4
    assert len(plan._tails) == 2


def test_values_that_decide_shapes_are_planned_when_known(toy_op):
    # Reshape's target is computed at run time (from an input that is not planned with its
    # value): the Reshape and what follows are planned per target value
    graph = _graph([Node("Add", ("s", "zero"), ("target",)),
                    Node("Reshape", ("x", "target"), ("y",)),
                    Node("Transpose", ("y",), ("z",), {"perm": (1, 0)})],
                   [("x", TensorType((12,), "float32")), ("s", TensorType((2,), "int64"))],
                   ["z"], {"zero": np.zeros(2, np.int64)})
    plan = compile_graph(graph, cpu())
    assert isinstance(plan, SegmentedGraph)
    assert plan.split.needs_value == {"target"}
    x = np.arange(12, dtype=np.float32)
    for shape in [(3, 4), (4, 3), (3, 4)]:
        z, = plan.run({"x": x, "s": np.array(shape, np.int64)})
        np.testing.assert_array_equal(z, x.reshape(shape).T)
    assert plan.plans_made == 2


def test_chains_and_nested_splits(toy_op):
    # p -> q runs between (a dynamic op reading a run-time value); Sub then a second split
    graph = _graph([Node(OP, ("x",), ("p",)), Node(OP, ("p",), ("q",), {"floor": 1.0}),
                    Node("Sub", ("q", "three"), ("d",)), Node(OP, ("d",), ("e",)),
                    Node("Neg", ("e",), ("f",))],
                   [("x", TensorType((8,), "float32"))], ["f", "q"],
                   {"three": np.array(3.0, np.float32)})
    plan = compile_graph(graph, cpu())
    x = np.array([0.5, 2, 4, -3, 6, 1, 3.5, 8], np.float32)
    f, q = plan.run({"x": x})
    q_want = x[x > 1]
    d = q_want - 3
    np.testing.assert_allclose(q, q_want)
    np.testing.assert_allclose(f, -d[d > 0])
    assert "e" in plan.placement()["runtime"]


def test_known_values_fold_while_planning(toy_op):
    # a dynamic op on a constant has an exact type: nothing runs at run time
    graph = _graph([Node(OP, ("c",), ("p",)), Node("Add", ("p", "x"), ("y",))],
                   [("x", TensorType((2,), "float32"))], ["y"],
                   {"c": np.array([-1, 2, 3], np.float32)})
    plan = compile_graph(graph, cpu())
    assert type(plan) is CompiledGraph
    y, = plan.run({"x": np.ones(2, np.float32)})
    np.testing.assert_allclose(y, [3, 4])


def test_a_failing_dynamic_kernel_names_its_node(toy_op):
    graph = _graph([Node("portable.TestFailing", ("x",), ("y",), name="the_node")],
                   [("x", TensorType((2,), "float32"))], ["y"])
    plan = compile_graph(graph, cpu())
    with pytest.raises(ShapeError, match="the_node.*boom"):
        plan.run({"x": np.ones(2, np.float32)})


def test_a_dynamic_kernel_that_returns_nothing_names_its_node(toy_op):
    graph = _graph([Node("portable.TestFailing", ("x",), ("y",), {"silent": 1}, name="quiet")],
                   [("x", TensorType((2,), "float32"))], ["y"])
    with pytest.raises(ShapeError, match="'quiet'.*one value per output"):
        compile_graph(graph, cpu()).run({"x": np.ones(2, np.float32)})


def test_an_input_of_unknown_shape_is_refused(toy_op):
    graph = _graph([Node("Relu", ("x",), ("y",))], [("x", TensorType((None,), "float32"))],
                   ["y"])
    with pytest.raises(BindError, match="'x'.*concrete shape"):
        compile_graph(graph, cpu())


def _detection_model():
    """x -> mask = x > 0.5 -> NonZero -> GatherND picks the values; k = their count feeds a
    TopK (a k known only at run time) over the flattened x."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Greater", ["x", "half"], ["mask"]),
        helper.make_node("NonZero", ["mask"], ["where"]),
        helper.make_node("Transpose", ["where"], ["where_t"], perm=[1, 0]),
        helper.make_node("GatherND", ["x", "where_t"], ["picked"]),
        helper.make_node("Cast", ["mask"], ["mask_i"], to=TensorProto.INT64),
        helper.make_node("ReduceSum", ["mask_i"], ["count"], keepdims=0),
        helper.make_node("Reshape", ["count", "one"], ["k"]),
        helper.make_node("Reshape", ["x", "flat"], ["x_flat"]),
        helper.make_node("TopK", ["x_flat", "k"], ["top", "top_i"]),
        helper.make_node("Unique", ["picked"], ["u", "u_first", "u_inv", "u_count"]),
    ]
    inits = [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]),
             helper.make_tensor("one", TensorProto.INT64, [1], [1]),
             helper.make_tensor("flat", TensorProto.INT64, [1], [-1])]
    graph = helper.make_graph(
        nodes, "detect", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5])],
        [helper.make_tensor_value_info(n, t, None) for n, t in
         (("picked", TensorProto.FLOAT), ("top", TensorProto.FLOAT), ("top_i", TensorProto.INT64),
          ("u", TensorProto.FLOAT), ("u_count", TensorProto.INT64))], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("device", ["CPU", "OPENCL"])
def test_onnx_backend_runs_data_dependent_models_like_onnxruntime(device):
    ort = pytest.importorskip("onnxruntime")
    import exporters.onnx.backend as backend

    if not backend.supports_device(device):
        pytest.skip(f"no {device} device here")
    model = _detection_model()
    rep = backend.prepare(model, device)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for x in [rng.uniform(0, 1, (4, 5)).astype(np.float32),
              np.round(rng.uniform(0, 1, (4, 5)), 1).astype(np.float32),
              np.zeros((4, 5), np.float32)]:
        ours = rep.run([x])
        want = session.run(None, {"x": x})
        for got, expected in zip(ours, want):
            np.testing.assert_allclose(got, expected, rtol=1e-6)
    plan = rep.plan({"x": np.zeros((4, 5), np.float32)})
    assert isinstance(plan, SegmentedGraph)
    assert {"where", "u", "u_count"} <= set(plan.placement()["runtime"])
