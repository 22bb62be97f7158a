"""The memory planner: in-place reuse, views, kept values, co-sharing, and invariants checked
on random graphs (no two values alive at once share bytes; results match NumPy)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from portable.device import cpu
from portable.executor.compiled import CompiledGraph
from portable.ir import GraphBuilder
from portable.passes.infer import infer_types
from portable.passes.plan_memory import STRATEGIES, plan_memory

F32 = 4


def _chain():
    b = GraphBuilder("chain")
    x = b.input("x", (16, 16))
    w = b.const(np.eye(16, dtype=np.float32))
    h1 = b.op("MatMul", x, w, outputs=["h1"])
    h2 = b.op("Relu", h1, outputs=["h2"])  # last reader of h1: in place
    h3 = b.op("MatMul", h2, w, outputs=["h3"])  # needs a new block; h1/h2's is still read
    h4 = b.op("Reshape", h3, b.const(np.array([256], np.int64)), outputs=["h4"])  # a view
    y = b.op("Neg", h4, outputs=["y"])
    return b.build([y])


def test_in_place_views_and_reuse_in_a_chain():
    g = _chain()
    plan = plan_memory(g)
    block = 16 * 16 * F32
    assert plan.storage["h1"] == plan.storage["h2"]
    assert plan.storage["h3"] == plan.storage["h4"] == plan.storage["y"]
    assert plan.offsets["h4"] == plan.offsets["h3"]
    assert plan.naive_bytes == 4 * block  # the view owns no bytes
    assert plan.lower_bound_bytes == plan.arena_bytes == 2 * block
    assert plan_memory(g, strategy="naive").arena_bytes == 4 * block
    assert plan_memory(g, strategy="inplace").arena_bytes == 2 * block
    assert plan_memory(g, strategy="coshare").arena_bytes == 2 * block


def test_graph_outputs_and_kept_values_are_never_overwritten():
    b = GraphBuilder("g")
    x = b.input("x", (8,))
    h = b.op("Exp", x, outputs=["h"])
    y = b.op("Relu", h, outputs=["y"])
    z = b.op("Neg", y, outputs=["z"])
    g = b.build([y, z])
    plan = plan_memory(g)
    assert plan.storage["h"] == plan.storage["y"]  # Relu may overwrite h...
    assert plan.storage["z"] != plan.storage["y"]  # ...but Neg may not overwrite output y
    kept = plan_memory(g, keep=["h"])
    assert kept.storage["h"] != kept.storage["y"]


def test_a_value_read_twice_by_its_last_reader_is_overwritten_only_by_that_value():
    b = GraphBuilder("g")
    x = b.input("x", (8,))
    h = b.op("Exp", x, outputs=["h"])
    g = b.build([b.op("Add", h, h, outputs=["y"])])
    plan = plan_memory(g)
    assert plan.storage["h"] == plan.storage["y"]
    out, = CompiledGraph(g, cpu()).run({"x": np.arange(8, dtype=np.float32)})
    np.testing.assert_allclose(out, 2 * np.exp(np.arange(8, dtype=np.float32)), rtol=1e-6)


def test_inputs_and_constants_are_never_planned_and_views_of_inputs_alias_them():
    b = GraphBuilder("g")
    x = b.input("x", (2, 4))
    v = b.op("Flatten", x, outputs=["v"])
    g = b.build([b.op("Relu", v, outputs=["y"])])
    plan = plan_memory(g)
    assert "x" not in plan.offsets and plan.aliases["v"] == "x"
    assert plan.storage.keys() == {"y"}  # Relu may not overwrite the caller's input


def test_state_updates_are_written_into_the_state_input():
    b = GraphBuilder("sgd")
    w = b.input("w", (4,))
    g_ = b.input("g", (4,))
    step = b.op("Mul", g_, b.const(np.float32(0.1)), outputs=["step"])
    w_new = b.op("Sub", w, step, outputs=["w_new"])
    graph = b.build([w_new])
    plan = plan_memory(graph, state_updates={"w": "w_new"})
    assert plan.aliases["w_new"] == "w" and "w_new" not in plan.offsets
    wv = np.ones(4, np.float32)
    compiled = CompiledGraph(graph, cpu(), state_updates={"w": "w_new"})
    out, = compiled.run({"w": wv, "g": np.full(4, 2, np.float32)})
    np.testing.assert_allclose(wv, 0.8)  # updated in place
    assert np.shares_memory(out, wv)


def test_strategies_are_checked():
    with pytest.raises(ValueError, match="unknown memory strategy"):
        plan_memory(_chain(), strategy="greedy")


def test_parallel_mode_reuses_only_along_dependencies():
    # two independent branches: in parallel mode a block freed by one branch is not given to
    # the other
    b = GraphBuilder("g")
    x = b.input("x", (32,))
    a1 = b.op("Exp", x)
    a2 = b.op("Neg", a1)
    c1 = b.op("Exp", x)
    c2 = b.op("Sigmoid", c1)
    g = b.build([b.op("Add", b.op("Abs", a2), b.op("Abs", c2))])
    serial = plan_memory(g, strategy="coshare")
    parallel = plan_memory(g, strategy="coshare", parallel=True)
    assert parallel.arena_bytes >= serial.arena_bytes
    _check_no_overlap(g, parallel)


# -- invariants on random graphs ----------------------------------------------------------

UNARY = {"Relu": lambda a: np.maximum(a, 0), "Neg": np.negative, "Tanh": np.tanh,
         "Sigmoid": lambda a: 1 / (1 + np.exp(-a))}
BINARY = {"Add": np.add, "Mul": np.multiply, "Sub": np.subtract}


@st.composite
def random_graphs(draw):
    """Random DAGs of elementwise ops, reshapes (views), matmuls and concats on (4, 6)."""
    b = GraphBuilder("random")
    values = [b.input("x", (4, 6))]

    def pick():
        return values[draw(st.integers(0, len(values) - 1))]

    for _ in range(draw(st.integers(2, 24))):
        kind = draw(st.sampled_from(["unary", "binary", "reshape", "matmul", "concat"]))
        a = pick()
        if kind == "unary":
            out = b.op(draw(st.sampled_from(sorted(UNARY))), a)
        elif kind == "binary":
            out = b.op(draw(st.sampled_from(sorted(BINARY))), a, pick())
        elif kind == "reshape":
            out = b.op("Reshape", b.op("Reshape", a, b.const(np.array([6, 4], np.int64))),
                       b.const(np.array([4, 6], np.int64)))
        elif kind == "matmul":  # (6, 4) @ (4, 6), first 4 rows
            out = b.op("MatMul", b.op("Reshape", a, b.const(np.array([6, 4], np.int64))), a)
            out = b.op("Slice", out, b.const(np.array([0])), b.const(np.array([4])))
        else:
            out = b.op("Slice", b.op("Concat", a, pick(), axis=0), b.const(np.array([2])),
                       b.const(np.array([6])))
        values.append(out)
    chosen = draw(st.lists(st.integers(1, len(values) - 1), min_size=1, max_size=3))
    return b.build(sorted({values[i] for i in chosen}))


def _check_no_overlap(graph, plan):
    """Storages alive at the same step never share bytes; every value's storage is alive
    from its producer to its last reader."""
    spans = []
    for slot, (first, last) in enumerate(plan.lifetimes):
        if slot in set(plan.storage.values()):
            spans.append((first, last, plan.storage_offsets[slot],
                          plan.storage_offsets[slot] + plan.storage_sizes[slot]))
    for i, (f1, l1, o1, e1) in enumerate(spans):
        for f2, l2, o2, e2 in spans[i + 1:]:
            if f1 <= l2 and f2 <= l1 and o1 < e2 and o2 < e1 and e1 > o1 and e2 > o2:
                raise AssertionError(f"storages alive together overlap: {(f1, l1, o1, e1)} "
                                     f"and {(f2, l2, o2, e2)}")
    position = {node_index: step for step, node_index in enumerate(plan.steps)}
    for node_index, node in enumerate(graph.nodes):
        step = position.get(node_index)
        for name in node.inputs:
            if name in plan.storage:
                first, last = plan.lifetimes[plan.storage[name]]
                assert first <= step <= last, f"{name} is not alive when node {node.name} reads it"
    assert plan.arena_bytes >= plan.lower_bound_bytes


def _numpy_reference(graph, feeds):
    """Evaluate the random graph with NumPy directly (not with our kernels)."""
    env = dict(feeds)
    env.update({k: np.asarray(v) for k, v in graph.initializers.items()})
    for node in graph.nodes:
        args = [env[i] for i in node.inputs]
        if node.op in UNARY:
            out = UNARY[node.op](args[0])
        elif node.op in BINARY:
            out = BINARY[node.op](args[0], args[1])
        elif node.op == "Reshape":
            out = args[0].reshape(tuple(args[1]))
        elif node.op == "MatMul":
            out = args[0] @ args[1]
        elif node.op == "Concat":
            out = np.concatenate(args, axis=node.attrs["axis"])
        elif node.op == "Slice":
            out = args[0][int(args[1][0]):int(args[2][0])]
        else:
            raise AssertionError(node.op)
        env[node.outputs[0]] = out.astype(np.float32)
    return [env[o] for o in graph.outputs]


@settings(max_examples=60, deadline=None)
@given(random_graphs(), st.sampled_from(STRATEGIES))
def test_random_graphs_plan_without_overlap_and_run_correctly(graph, strategy):
    info = infer_types(graph)
    plan = plan_memory(graph, info, strategy=strategy)
    _check_no_overlap(graph, plan)
    naive = plan_memory(graph, info, strategy="naive")
    assert plan.arena_bytes <= naive.arena_bytes == naive.naive_bytes
    feeds = {"x": np.random.default_rng(0).uniform(-1, 1, (4, 6)).astype(np.float32)}
    outs = CompiledGraph(graph, cpu(), plan=strategy).run(feeds)
    for got, want in zip(outs, _numpy_reference(graph, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
