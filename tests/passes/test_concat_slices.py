"""Concat without a copy: the planner computes a Concat's inputs in their slices of its output.

Checked against NumPy on hand-made graphs (which Concats are taken, at which offsets) and on
random graphs of Concats, slices, views and in-place ops, where no step may write over bytes
that a value still to be read holds."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from portable.device import cpu
from portable.executor.compiled import CompiledGraph
from portable.ir import GraphBuilder
from portable.passes.infer import infer_types
from portable.passes.plan_memory import STRATEGIES, plan_memory

F32 = 4
PLANE = (2, 8)  # 16 floats: a channel is 64 bytes, so every channel offset is aligned


def _fire(batch=1, channels=(2, 3)):
    """SqueezeNet's fire module in small: two branches from one input, concatenated."""
    b = GraphBuilder("fire")
    x = b.input("x", (batch, 4, *PLANE))
    squeeze = b.op("Relu", x, outputs=["squeeze"])
    branches = [b.op("Exp", b.op("Neg", squeeze), outputs=[f"branch{i}"])
                for i, _ in enumerate(channels)]
    branches = [b.op("Slice", v, b.const(np.array([0])), b.const(np.array([c])),
                     b.const(np.array([1])), outputs=[f"part{i}"])
                for i, (v, c) in enumerate(zip(branches, channels))]
    y = b.op("Concat", *branches, axis=1, outputs=["y"])
    return b.build([b.op("Tanh", y, outputs=["out"])])


def _run(graph, feeds, strategy="both"):
    return CompiledGraph(graph, cpu(), plan=strategy).run(feeds)


def _feeds(graph, seed=0):
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(-1, 1, type_.shape).astype(np.float32)
            for name, type_ in graph.inputs}


def test_a_batch_one_concat_is_taken_and_its_inputs_lie_in_their_slices():
    g = _fire()
    plan = plan_memory(g)
    concat = next(i for i, n in enumerate(g.nodes) if n.op == "Concat")
    assert plan.concats == {concat}
    assert plan.storage["part0"] == plan.storage["part1"] == plan.storage["y"]
    assert plan.offsets["part0"] == plan.offsets["y"]
    assert plan.offsets["part1"] == plan.offsets["y"] + 2 * 16 * F32
    x = _feeds(g)["x"]
    parts = [np.exp(-np.maximum(x, 0))[:, :c] for c in (2, 3)]
    want = np.tanh(np.concatenate(parts, axis=1))
    np.testing.assert_allclose(_run(g, {"x": x})[0], want, rtol=1e-6)


def test_views_and_in_place_outputs_of_an_input_in_its_slice_keep_its_offset():
    b = GraphBuilder("g")
    x = b.input("x", (1, 2, *PLANE))
    first, second = b.op("Exp", x, outputs=["first"]), b.op("Neg", x, outputs=["second"])
    y = b.op("Concat", first, second, axis=1, outputs=["y"])
    flat = b.op("Reshape", second, b.const(np.array([1, 32], np.int64)), outputs=["flat"])
    total = b.op("ReduceSum", y, b.const(np.array([1], np.int64)), outputs=["total"])
    last = b.op("Relu", flat, outputs=["last"])  # (the slot's last reader: in place)
    g = b.build([total, last])
    plan = plan_memory(g)
    assert plan.concats
    assert plan.offsets["flat"] == plan.offsets["second"] == plan.offsets["y"] + 2 * 16 * F32
    assert plan.storage["last"] == plan.storage["y"]
    assert plan.offsets["last"] == plan.offsets["second"]
    xv = _feeds(g)["x"]
    got_total, got_last = _run(g, {"x": xv})
    np.testing.assert_allclose(got_last, np.maximum(-xv, 0).reshape(1, 32), rtol=1e-6)
    want_total = np.concatenate([np.exp(xv), -xv], 1).sum(1, keepdims=True)
    np.testing.assert_allclose(got_total, want_total, rtol=1e-5)


def test_other_strategies_and_interleaved_batches_copy():
    assert not plan_memory(_fire(), strategy="coshare").concats
    assert not plan_memory(_fire(), strategy="naive").concats
    assert not plan_memory(_fire(batch=2)).concats  # (channels of two images interleave)
    # (in parallel mode a Concat's inputs on other branches would write into a block whose
    # last reader they need not follow)
    assert not plan_memory(_fire(), parallel=True).concats
    g = _fire(batch=2)
    x = _feeds(g)["x"]
    parts = [np.exp(-np.maximum(x, 0))[:, :c] for c in (2, 3)]
    np.testing.assert_allclose(_run(g, {"x": x})[0], np.tanh(np.concatenate(parts, axis=1)),
                               rtol=1e-6)


@pytest.mark.parametrize("case", ["graph input", "view", "twice", "unaligned"])
def test_inputs_that_cannot_lie_in_a_slice_leave_the_concat_to_its_kernel(case):
    b = GraphBuilder("g")
    shape = (1, 2, 3) if case == "unaligned" else (1, 2, *PLANE)
    x = b.input("x", shape)
    e, n = b.op("Exp", x), b.op("Neg", x)
    view = b.op("Reshape", e, b.const(np.array(shape, np.int64)))
    parts, numpy_parts = {
        "graph input": ([x, e], lambda v: [v, np.exp(v)]),
        "view": ([view, n], lambda v: [np.exp(v), -v]),
        "twice": ([e, e], lambda v: [np.exp(v), np.exp(v)]),
        # (2 x 3 floats: the second input would start 24 bytes in)
        "unaligned": ([e, n], lambda v: [np.exp(v), -v]),
    }[case]
    y = b.op("Concat", *parts, axis=1)
    g = b.build([b.op("Relu", y, outputs=["out"])])
    assert not plan_memory(g).concats
    xv = _feeds(g)["x"]
    want = np.maximum(np.concatenate(numpy_parts(xv), axis=1), 0)
    np.testing.assert_allclose(_run(g, {"x": xv})[0], want, rtol=1e-6)


def test_axis_zero_is_taken_at_any_batch():
    b = GraphBuilder("g")
    x = b.input("x", (3, 2, *PLANE))
    y = b.op("Concat", b.op("Exp", x), b.op("Neg", x), axis=0)
    g = b.build([b.op("Relu", y)])
    assert plan_memory(g).concats
    xv = _feeds(g)["x"]
    want = np.maximum(np.concatenate([np.exp(xv), -xv], axis=0), 0)
    np.testing.assert_allclose(_run(g, {"x": xv})[0], want, rtol=1e-6)


def test_a_value_read_by_two_concats_lives_in_one_of_them():
    b = GraphBuilder("g")
    x = b.input("x", (1, 2, *PLANE))
    shared = b.op("Exp", x, outputs=["shared"])
    first = b.op("Concat", shared, b.op("Neg", x), axis=1, outputs=["first"])
    second = b.op("Concat", b.op("Tanh", x), shared, axis=1, outputs=["second"])
    g = b.build([b.op("Add", first, second, outputs=["out"])])
    plan = plan_memory(g)
    assert len(plan.concats) == 1
    xv = _feeds(g)["x"]
    want = (np.concatenate([np.exp(xv), -xv], 1) + np.concatenate([np.tanh(xv), np.exp(xv)], 1))
    np.testing.assert_allclose(_run(g, {"x": xv})[0], want, rtol=1e-6)


def test_a_dense_block_is_written_into_one_buffer():
    """DenseNet: each layer concatenates the previous output with its new features."""
    b = GraphBuilder("dense")
    x = b.input("x", (1, 2, *PLANE))
    current = b.op("Relu", x, outputs=["d0"])
    for layer in range(1, 5):
        features = b.op("Neg", b.op("Tanh", current), outputs=[f"f{layer}"])
        features = b.op("Slice", features, b.const(np.array([0])), b.const(np.array([1])),
                        b.const(np.array([1])), outputs=[f"g{layer}"])
        current = b.op("Concat", current, features, axis=1, outputs=[f"d{layer}"])
    g = b.build([b.op("Exp", current, outputs=["out"])])
    plan = plan_memory(g)
    assert len(plan.concats) == 4
    slot = plan.storage["d4"]
    assert all(plan.storage[v] == slot for v in ["d0", "d1", "d2", "d3", "g1", "g4"])
    assert [plan.offsets[f"g{k}"] - plan.offsets["d4"] for k in range(1, 5)] == [
        (1 + k) * 16 * F32 for k in range(1, 5)]
    xv = _feeds(g)["x"]
    want = np.maximum(xv, 0)
    for _ in range(4):
        want = np.concatenate([want, -np.tanh(want)[:, :1]], axis=1)
    np.testing.assert_allclose(_run(g, {"x": xv})[0], np.exp(want), rtol=1e-6)


def test_an_input_kept_as_a_graph_output_stays_valid():
    b = GraphBuilder("g")
    x = b.input("x", (1, 2, *PLANE))
    e = b.op("Exp", x, outputs=["e"])
    y = b.op("Concat", e, b.op("Neg", x), axis=1, outputs=["y"])
    g = b.build([b.op("Relu", y, outputs=["r"]), e])
    assert plan_memory(g).concats
    xv = _feeds(g)["x"]
    r, e_out = _run(g, {"x": xv})
    np.testing.assert_allclose(e_out, np.exp(xv), rtol=1e-6)
    np.testing.assert_allclose(r, np.concatenate([np.exp(xv), np.maximum(-xv, 0)], 1),
                               rtol=1e-6)


# -- random graphs --------------------------------------------------------------------------

UNARY = {"Relu": lambda a: np.maximum(a, 0), "Neg": np.negative, "Tanh": np.tanh}


@st.composite
def concat_graphs(draw):
    """Random DAGs on (1, c, 2, 8) values: in-place unary ops, Adds, Concats along the
    channels (nested, of repeated inputs, of graph inputs and views), channel Slices and
    reshape round trips (views)."""
    b = GraphBuilder("random")
    values = [(b.input("x", (1, 3, *PLANE)), 3)]

    def pick(latest=False):  # (latest: mostly among the last few values)
        low = max(0, len(values) - 3) if latest and draw(st.integers(0, 3)) else 0
        return values[draw(st.integers(low, len(values) - 1))]

    for _ in range(draw(st.integers(2, 20))):
        kind = draw(st.sampled_from(["unary", "add", "concat", "concat", "slice", "view"]))
        a, c = pick(latest=kind == "concat")
        if kind == "add":
            same = [v for v in values if v[1] == c]
            out = b.op("Add", a, same[draw(st.integers(0, len(same) - 1))][0])
        elif kind == "concat":
            parts = [(a, c)] + [pick(latest=True) for _ in range(draw(st.integers(1, 2)))]
            out, c = b.op("Concat", *[p for p, _ in parts], axis=1), sum(k for _, k in parts)
            if c > 8:
                out, c = b.op("Slice", out, b.const(np.array([1])), b.const(np.array([5])),
                              b.const(np.array([1]))), 4
        elif kind == "slice":
            k = draw(st.integers(1, c))
            out, c = b.op("Slice", a, b.const(np.array([c - k])), b.const(np.array([c])),
                          b.const(np.array([1]))), k
        elif kind == "view":
            flat = b.op("Reshape", a, b.const(np.array([1, c * 16], np.int64)))
            out = b.op("Reshape", flat, b.const(np.array([1, c, *PLANE], np.int64)))
        else:
            out = b.op(draw(st.sampled_from(sorted(UNARY))), a)
        values.append((out, c))
    chosen = draw(st.lists(st.integers(1, len(values) - 1), min_size=1, max_size=3))
    return b.build(sorted({values[i][0] for i in chosen}))


def _numpy_reference(graph, feeds):
    env = dict(feeds)
    env.update({k: np.asarray(v) for k, v in graph.initializers.items()})
    for node in graph.nodes:
        args = [env[i] for i in node.inputs]
        if node.op in UNARY:
            out = UNARY[node.op](args[0])
        elif node.op == "Add":
            out = args[0] + args[1]
        elif node.op == "Concat":
            out = np.concatenate(args, axis=1)
        elif node.op == "Slice":
            out = args[0][:, int(args[1][0]):int(args[2][0])]
        elif node.op == "Reshape":
            out = args[0].reshape(tuple(args[1]))
        else:
            raise AssertionError(node.op)
        env[node.outputs[0]] = out.astype(np.float32)
    return [env[o] for o in graph.outputs]


def _check_no_write_over_live_values(graph, plan, info):
    """No step writes over bytes that another value still to be read (or a graph output)
    holds: a value is live from its producer to its last reader."""
    position = {node: step for step, node in enumerate(plan.steps)}
    produced, last_read = {}, {}
    for node_index in plan.steps:
        node = graph.nodes[node_index]
        for name in node.inputs:
            last_read[name] = position[node_index]
        for name in node.outputs:
            produced[name] = position[node_index]
    for name in graph.outputs:
        last_read[name] = len(plan.steps)

    def span(name):
        t = info.types[name]
        return plan.offsets[name], plan.offsets[name] + int(np.prod(t.shape)) * F32

    for step, node_index in enumerate(plan.steps):
        node = graph.nodes[node_index]
        if node.op == "Reshape" or node_index in plan.concats:
            continue  # (writes nothing)
        for out in node.outputs:
            lo, hi = span(out)
            for other in plan.offsets:
                if other == out or produced[other] > step or last_read.get(other, -1) <= step:
                    continue
                a, z = span(other)
                assert hi <= a or z <= lo, f"{node.name} writes over {other}, read later"


@settings(max_examples=80, deadline=None)
@given(concat_graphs(), st.sampled_from(STRATEGIES))
def test_random_concat_graphs_never_write_over_live_values_and_match_numpy(graph, strategy):
    info = infer_types(graph)
    plan = plan_memory(graph, info, strategy=strategy)
    _check_no_write_over_live_values(graph, plan, info)
    feeds = _feeds(graph)
    outs = CompiledGraph(graph, cpu(), plan=strategy).run(feeds)
    for got, want in zip(outs, _numpy_reference(graph, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_random_concat_graphs_take_concats():
    """The generator does exercise the path: a good share of its graphs with a Concat take
    one (the others have Concats of graph inputs, views or repeated values)."""
    taken = []

    @settings(max_examples=40, deadline=None, database=None, derandomize=True)
    @given(concat_graphs())
    def count(graph):
        if any(n.op == "Concat" for n in graph.nodes):
            taken.append(bool(plan_memory(graph).concats))

    count()
    assert sum(taken) >= len(taken) // 4 > 0


def test_a_hybridized_block_returns_a_concat_taken_in_place():
    """CachedOp writes outputs straight into the caller's arrays where a kernel writes them:
    not a Concat taken in place (its step writes nothing) or its inputs. Two calls with
    different inputs, and the gradient, against NumPy."""
    import portable as pt
    from portable import autograd
    from portable.gluon import nn

    class Both(nn.HybridBlock):
        def hybrid_forward(self, F, x):
            return F.concat(F.exp(x), F.tanh(x), dim=1)

    net = Both()
    net.hybridize()
    rng = np.random.default_rng(0)
    for _ in range(2):
        x = rng.uniform(-1, 1, (1, 2, *PLANE)).astype(np.float32)
        xs = pt.nd.array(x)
        xs.attach_grad()
        with autograd.record():
            y = net(xs)
        y.backward()
        np.testing.assert_allclose(y.asnumpy(), np.concatenate([np.exp(x), np.tanh(x)], 1),
                                   rtol=1e-6)
        np.testing.assert_allclose(xs.grad.asnumpy(), np.exp(x) + 1 - np.tanh(x) ** 2,
                                   rtol=1e-5)
    calls = net._cached_op.calls.values()
    assert calls and all(call.plan.compiled.plan.concats for call in calls)
