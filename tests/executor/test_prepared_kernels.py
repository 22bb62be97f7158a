"""Kernels in two parts (plan-time ``prepare``, run-time ``run``): a plan prepares each step
once and reuses what it built on every run, so the runs after the first must give the answers
the first would. Checked against onnx.reference with new inputs on every run, the same input
array refilled in place, and Conv shapes that pad, crop (stride leaves the last columns
unread) or neither, and through the imperative API's per-signature cache.
"""
from __future__ import annotations

import numpy as np
import pytest

import portable as pt
from portable.backend import KernelContext, PreparedKernel, array_types, kernel_table

onnx = pytest.importorskip("onnx", reason="onnx builds the graphs and its reference checks them")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from exporters.onnx import backend as onnx_backend  # noqa: E402

CONVS = {  # name: (input shape, weight shape, Conv attributes)
    "padded": ((2, 3, 9, 9), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    "cropped": ((1, 3, 10, 10), (5, 3, 3, 3), {"strides": [2, 2]}),
    "asymmetric": ((1, 2, 7, 6), (3, 2, 3, 2), {"pads": [0, 1, 2, 0], "strides": [1, 2]}),
    "pointwise": ((1, 8, 5, 5), (6, 8, 1, 1), {}),
    "grouped": ((1, 4, 6, 6), (4, 2, 3, 3), {"pads": [1, 1, 1, 1], "group": 2}),
}


def _two_conv_model(x_shape, w_shape, attrs, seed=0):
    """Conv -> Relu -> Conv of the same geometry where it fits: the second Conv's input is a
    plan buffer (an arena view), the first's the caller's array."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal(w_shape).astype(np.float32)
    b1 = rng.standard_normal(w_shape[0]).astype(np.float32)
    group = attrs.get("group", 1)
    w2 = rng.standard_normal((w_shape[0], w_shape[0] // group, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], **attrs),
             helper.make_node("Relu", ["c1"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], group=group)]
    graph = helper.make_graph(
        nodes, "two_convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
         numpy_helper.from_array(w2, "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("name", sorted(CONVS))
def test_a_plan_reuses_its_prepared_convs_across_runs(name):
    x_shape, w_shape, attrs = CONVS[name]
    model = _two_conv_model(x_shape, w_shape, attrs)
    reference = ReferenceEvaluator(model)
    rep = onnx_backend.prepare(model)
    rng = np.random.default_rng(1)
    refilled = np.empty(x_shape, np.float32)
    for step in range(4):
        x = rng.standard_normal(x_shape).astype(np.float32)
        if step % 2:  # the same array object, new values: kept views must read them again
            refilled[...] = x
            x = refilled
        (want,) = reference.run(None, {"x": x})
        (got,) = rep.run({"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"run {step}")


def test_imperative_convs_reuse_their_prepared_kernel():
    rng = np.random.default_rng(2)
    model = _two_conv_model((1, 3, 8, 8), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]})
    weight = numpy_helper.to_array(model.graph.initializer[0])
    for step in range(3):
        x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
        got = pt.nd.conv(pt.nd.array(x), pt.nd.array(weight), pads=[1, 1, 1, 1]).asnumpy()
        single = helper.make_model(helper.make_graph(
            [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "one",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
             helper.make_tensor_value_info("w", TensorProto.FLOAT, weight.shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
            opset_imports=[helper.make_opsetid("", 17)])
        (want,) = ReferenceEvaluator(single).run(None, {"x": x, "w": weight})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"call {step}")


def test_calling_a_prepared_kernel_prepares_and_runs_in_one_go():
    table, kernel = kernel_table()
    prepared = []

    def prepare(backend, input_types, output_types, attrs):
        prepared.append((tuple(t.shape for t in input_types), attrs["k"]))
        return attrs["k"] * 2

    @kernel("Scale", prepare=prepare)
    def scale(state, ctx, inputs, outputs, attrs):
        outputs[0][...] = inputs[0] * state

    assert isinstance(table["Scale"], PreparedKernel)
    backend = pt.cpu().backend
    ctx = KernelContext(np, np.random.default_rng(0), backend)
    x, y = np.arange(3.0), np.empty(3)
    table["Scale"](ctx, [x], [y], {"k": 3})  # a call site that planned nothing
    np.testing.assert_array_equal(y, x * 6)
    bound = table["Scale"].bind(backend, array_types([x]), array_types([y]), {"k": 5})
    for _ in range(3):
        bound(ctx, [x], [y], {"k": 5})
    np.testing.assert_array_equal(y, x * 10)
    assert prepared == [(((3,),), 3), (((3,),), 5)]  # the bound kernel prepared once


# -- a plan's run: steps bound once to the plan's arrays ---------------------------------------


def _reshaping_model():
    """x -> Reshape (a view of the caller's array) -> Relu -> Flatten (a view of a planned
    buffer) -> MatMul, with x itself and a constant also graph outputs."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((12, 5)).astype(np.float32)
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["xr"]),
             helper.make_node("Relu", ["xr"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"], axis=1),
             helper.make_node("MatMul", ["f", "w"], ["y"]),
             helper.make_node("Identity", ["x"], ["x_out"])]
    graph = helper.make_graph(
        nodes, "views", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 12])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
         for name in ("y", "x_out", "w_out")],
        [numpy_helper.from_array(w, "w"),
         numpy_helper.from_array(np.array([2, 3, 4], np.int64), "shape")])
    graph.node.append(helper.make_node("Identity", ["w"], ["w_out"]))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _plan_of(model, x):
    from portable.executor.compiled import CompiledGraph

    rep = onnx_backend.prepare(model)
    rep.run({"x": x})
    plan = rep.plan(rep._feeds({"x": x}))
    assert isinstance(plan, CompiledGraph)
    return rep, plan


def test_bound_runs_read_each_runs_inputs_and_views():
    model = _reshaping_model()
    reference = ReferenceEvaluator(model)
    rng = np.random.default_rng(5)
    refilled = np.empty((2, 12), np.float32)
    x = rng.standard_normal((2, 12)).astype(np.float32)
    rep, plan = _plan_of(model, x)
    assert plan._bound, "the plan's run took the general path"
    for step in range(4):
        x = rng.standard_normal((2, 12)).astype(np.float32)
        if step % 2:
            refilled[...] = x
            x = refilled
        want = reference.run(None, {"x": x})
        got = plan.run({"x": x})
        for name, g, w in zip(("y", "x_out", "w_out"), got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"{name} run {step}")
        general = plan.bind({"x": x})  # the general path gives the same arrays' values
        plan.execute(general)
        np.testing.assert_array_equal(got[0], general[plan.graph.outputs[0]])


def test_timed_runs_list_each_kernel_step_and_give_the_same_answers():
    """``run(feeds, timings)``, what profiles read: one (node, seconds) per kernel step in
    plan order (the views Reshape and Flatten are none), on the bound path and on the
    general one, with the outputs of an untimed run."""
    from portable import profiler

    model = _reshaping_model()
    x = np.random.default_rng(6).standard_normal((2, 12)).astype(np.float32)
    rep, plan = _plan_of(model, x)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    kernel_ops = [step.node.op for step in plan.steps if step.kernel is not None]
    assert "Reshape" not in kernel_ops and "Flatten" not in kernel_ops
    for general in (False, True):
        timings: list = []
        if general:  # (while the profiler records, runs take the general path)
            profiler.set_state("run")
            try:
                got = plan.run({"x": x}, timings)
            finally:
                profiler.set_state("stop")
                profiler.dumps(reset=True)
        else:
            got = plan.run({"x": x}, timings)
        assert [node.op for node, _ in timings] == kernel_ops
        assert all(seconds >= 0 for _, seconds in timings)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


def test_bound_runs_do_not_hold_the_callers_arrays():
    import gc
    import weakref

    model = _reshaping_model()
    x = np.random.default_rng(6).standard_normal((2, 12)).astype(np.float32)
    _, plan = _plan_of(model, x)
    fed = np.array(x)
    outputs = plan.run({"x": fed})
    held = weakref.ref(fed)
    del fed, outputs
    gc.collect()
    assert held() is None


def test_bound_runs_check_their_feeds_and_name_the_failing_node():
    from portable.errors import BindError

    model = _reshaping_model()
    x = np.random.default_rng(7).standard_normal((2, 12)).astype(np.float32)
    _, plan = _plan_of(model, x)
    with pytest.raises(BindError, match="was not given"):
        plan.run({})
    with pytest.raises(BindError, match="compiled for"):
        plan.run({"x": x[:1]})
    assert plan._bound
    step = next(s for s in plan._bound.steps if s[4].op == "MatMul")
    index = plan._bound.steps.index(step)

    def broken(ctx, inputs, outputs, attrs):
        raise ValueError("no")

    plan._bound.steps[index] = (broken,) + step[1:]
    try:
        with pytest.raises(Exception, match=f"node {step[4].name!r} \\(op MatMul\\)"):
            plan.run({"x": x})
    finally:
        plan._bound.steps[index] = step
    np.testing.assert_allclose(plan.run({"x": x})[0],
                               ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=1e-5)


def test_bound_runs_update_state_inputs_in_place():
    from portable.device import cpu
    from portable.executor.compiled import CompiledGraph
    from portable.ir import GraphBuilder

    b = GraphBuilder("sgd")
    w = b.input("w", (4,))
    g = b.input("g", (4,))
    step = b.op("Mul", g, b.const(np.float32(0.1)), outputs=["step"])
    w_new = b.op("Sub", w, step, outputs=["w_new"])
    compiled = CompiledGraph(b.build([w_new]), cpu(), state_updates={"w": "w_new"})
    for run in range(3):  # a new state array each run: the update lands in that one
        state = np.full(4, float(run), np.float32)
        out, = compiled.run({"w": state, "g": np.full(4, 2, np.float32)})
        np.testing.assert_allclose(state, run - 0.2, rtol=1e-6)
        assert np.shares_memory(out, state)
    assert compiled._bound


def test_profiled_runs_take_the_general_path_with_the_same_answers():
    from portable import profiler

    model = _reshaping_model()
    x = np.random.default_rng(8).standard_normal((2, 12)).astype(np.float32)
    _, plan = _plan_of(model, x)
    quiet = [np.array(a) for a in plan.run({"x": x})]
    profiler.dumps(reset=True)
    profiler.set_state("run")
    try:
        profiled = [np.array(a) for a in plan.run({"x": x})]
    finally:
        profiler.set_state("stop")
    assert "MatMul" in profiler.dumps(reset=True)  # each step was timed
    for a, b in zip(quiet, profiled):
        np.testing.assert_array_equal(a, b)


# -- the compiled small-Conv loop (backends/numpy/jit/small_conv) ------------------------------


def _conv_reference(x, w, b, pads, dilations):
    """float64 Conv at stride 1, group 1, tap by tap on a zero-padded copy."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    top, left, bottom, right = pads
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    kh, kw = w.shape[2:]
    dh, dw = dilations
    rows = padded.shape[2] - (kh - 1) * dh
    cols = padded.shape[3] - (kw - 1) * dw
    y = np.zeros((x.shape[0], w.shape[0], rows, cols))
    for i in range(kh):
        for j in range(kw):
            window = padded[:, :, i * dh:i * dh + rows, j * dw:j * dw + cols]
            y += np.einsum("nchw,mc->nmhw", window, w[:, :, i, j])
    return y if b is None else y + b.astype(np.float64)[None, :, None, None]


def _small_configs():
    rng = np.random.default_rng(11)
    yield (1, 4, 8, 8), (4, 4, 3, 3), [1, 1, 1, 1], [1, 1], True, np.float32  # the chain's
    yield (2, 3, 7, 9), (5, 3, 3, 2), [0, 1, 2, 0], [1, 1], False, np.float64
    yield (1, 2, 9, 6), (3, 2, 3, 3), [2, 2, 2, 2], [2, 1], True, np.float32
    yield (3, 1, 5, 5), (2, 1, 5, 5), [2, 2, 2, 2], [1, 1], False, np.float32
    yield (1, 3, 1, 4), (2, 3, 1, 3), [0, 1, 0, 1], [1, 1], True, np.float64
    for _ in range(6):
        c, m = (int(v) for v in rng.integers(1, 6, 2))
        kh, kw = (int(v) for v in rng.integers(1, 5, 2))
        pads = [int(v) for v in rng.integers(0, 3, 4)]
        pads[0] = max(pads[0], 1)  # the loop takes Convs whose windows reach into padding
        size = [int(v) for v in rng.integers(max(kh, kw), 10, 2)]
        yield ((int(rng.integers(1, 3)), c, *size), (m, c, kh, kw), pads,
               [int(v) for v in rng.integers(1, 3, 2)], bool(rng.random() < 0.5),
               (np.float32, np.float64)[int(rng.integers(2))])


SMALL = list(_small_configs())


@pytest.mark.parametrize("config", SMALL, ids=[f"small{i}" for i in range(len(SMALL))])
def test_small_conv_loop_matches_a_float64_reference(config):
    jit = pytest.importorskip("backends.numpy.jit")
    if not jit.available():
        pytest.skip("numba is not installed (pip install 'portable[jit]')")
    from backends.numpy.jit.plain_conv import conv as small_conv
    from portable.ops import registry
    from portable.ops.conv import window_geometry

    x_shape, w_shape, pads, dilations, biased, dtype = config
    rng = np.random.default_rng(12)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    b = rng.standard_normal(w_shape[0]).astype(dtype) if biased else None
    attrs = {key: spec.default for key, spec in registry.get("Conv").attrs.items()}
    attrs.update(pads=pads, dilations=dilations)
    geom = window_geometry(x.shape[2:], w.shape[2:], attrs)
    inputs = [x, w] + ([b] if biased else [])
    state = small_conv.compiled_prepare(array_types(inputs), array_types(
        [np.empty((x_shape[0], w_shape[0]) + geom.out, dtype)]), attrs)
    assert state is not None and state[0] is not None, "the small loop did not take it"
    want = _conv_reference(x, w, b, pads, dilations)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    ctx = KernelContext(np, np.random.default_rng(0), pt.cpu().backend)
    bound = small_conv.bind(pt.cpu().backend, array_types(inputs),
                            array_types([np.empty(want.shape, dtype)]), attrs)
    for run in range(2):  # a plan's bound call, twice, into a stale buffer
        y = np.full(want.shape, -7, dtype)
        bound(ctx, inputs, [y], attrs)
        np.testing.assert_allclose(y, want, **tol, err_msg=f"run {run}")
    strided = np.full((x_shape[0], w_shape[0], want.shape[2], 2 * want.shape[3]), -7, dtype)
    small_conv(ctx, [np.asfortranarray(x), w] + ([b] if biased else []),
               [strided[:, :, :, ::2]], attrs)  # any layout: unprepared, into a strided view
    np.testing.assert_allclose(strided[:, :, :, ::2], want, **tol)


def test_small_conv_loop_leaves_other_convs_to_the_other_tiers():
    jit = pytest.importorskip("backends.numpy.jit")
    if not jit.available():
        pytest.skip("numba is not installed (pip install 'portable[jit]')")
    from backends.numpy.jit.small_conv import SMALL_WORK, prepare_small
    from portable.ops import registry

    defaults = {key: spec.default for key, spec in registry.get("Conv").attrs.items()}

    def taken(x_shape, w_shape, dtype=np.float32, **given):
        from portable.ops.conv import window_geometry

        attrs = dict(defaults, **given)
        geom = window_geometry(x_shape[2:], w_shape[2:], attrs)
        types = array_types([np.empty(x_shape, dtype), np.empty(w_shape, dtype)])
        out = array_types([np.empty((x_shape[0], w_shape[0]) + geom.out, dtype)])
        return prepare_small(types, out, attrs) is not None

    assert taken((1, 4, 8, 8), (4, 4, 3, 3), pads=[1, 1, 1, 1])
    assert not taken((1, 4, 8, 8), (4, 4, 3, 3))  # no padding: one strided copy and a GEMM
    assert not taken((1, 4, 8, 8), (4, 4, 3, 3), pads=[1, 1, 1, 1], strides=[2, 2])
    assert not taken((1, 4, 8, 8), (4, 2, 3, 3), pads=[1, 1, 1, 1], group=2)
    assert not taken((1, 4, 8, 8), (4, 4, 3, 3), np.float16, pads=[1, 1, 1, 1])
    assert 64 * 64 * 9 * 16 * 18 > SMALL_WORK
    assert not taken((1, 64, 16, 16), (64, 64, 3, 3), pads=[1, 1, 1, 1])


def test_kept_padded_borders_survive_other_paddings_in_the_shared_buffer(monkeypatch):
    """On the xp kernels, Convs keep the zero border of their padded copy between runs; a
    MaxPool padding the same buffer (same shape, -inf border) and a Conv of another padding
    go through it in between, so each Conv must notice and write its border again."""
    from backends.numpy import kernel_table as numpy_kernels

    monkeypatch.setattr(pt.cpu().backend, "kernels", numpy_kernels(compiled=False))
    rng = np.random.default_rng(13)
    weights = {"wa": (4, 4, 3, 3), "wc": (4, 4, 3, 3), "wb": (3, 4, 5, 5)}
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["a"], ["p", "i"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p", "wc"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c", "wb"], ["y"], pads=[2, 2, 2, 2])]
    graph = helper.make_graph(
        nodes, "borders", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("i", TensorProto.INT64, None)],
        [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
         for n, s in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    reference = ReferenceEvaluator(model)
    rep = onnx_backend.prepare(model)
    for run in range(3):
        x = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
        want_y, _ = reference.run(None, {"x": x})  # (Indices only make MaxPool pad: -inf)
        got_y, _ = rep.run({"x": x})
        np.testing.assert_allclose(got_y, want_y, rtol=1e-4, atol=1e-4, err_msg=f"run {run}")
