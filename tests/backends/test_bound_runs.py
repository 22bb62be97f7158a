"""What a repeated run of a plan on the cpu device keeps from the last one, and what it must not
(``portable/executor/bound_steps.py``, ``exporters/onnx/backend.py``'s repeat path): the kernel
context is made once, yet random ops follow ``portable.random.seed`` as on a first run; each
run returns a list of its own; an ONNX model fed in another form than its last call takes the
general checks."""
from __future__ import annotations

import numpy as np
import pytest

import portable as pt
from portable import random
from portable.errors import BindError


def _random_plan():
    """y = x + RandomNormalLike(x), planned for the cpu device."""
    from portable.executor.segments import compile_graph
    from portable.ir.builder import GraphBuilder

    b = GraphBuilder("noisy")
    x = b.input("x", (2, 3), "float32")
    y = b.op("Add", x, b.op("RandomNormalLike", x))
    return compile_graph(b.build([y]), pt.cpu())


def test_a_reused_context_follows_the_seed_and_outputs_come_in_fresh_lists():
    plan = _random_plan()
    x = np.zeros((2, 3), np.float32)
    random.seed(7)
    first = plan.run({"x": x})
    assert plan._bound, "the bound path ran"
    a = first[0].copy()
    second = plan.run({"x": x})
    b = second[0].copy()
    assert not np.array_equal(a, b)  # the generator moved on
    random.seed(7)  # (replaces the process's generator: the next run must draw from it)
    np.testing.assert_array_equal(plan.run({"x": x})[0], a)
    # what the first draws were: seed 7's generator's standard normals, drawn as the kernel
    # draws them (the closed form of RandomNormalLike with mean 0, scale 1)
    random.seed(7)
    want = random.generator().normal(0.0, 1.0, (2, 3)).astype(np.float32)
    np.testing.assert_allclose(a, want, rtol=1e-6)
    assert first is not second  # (a caller may keep or change the list it was given)
    first.clear()
    assert len(plan.run({"x": x})) == 1


def test_a_fed_output_is_the_callers_array():
    """An output that is a graph input (no step computes it) is the array fed to this run,
    not the last run's."""
    from portable.executor.segments import compile_graph
    from portable.ir.builder import GraphBuilder

    b = GraphBuilder("pass")
    x = b.input("x", (2,), "float32")
    plan = compile_graph(b.build([x, b.op("Relu", x)]), pt.cpu())
    for value in (np.array([1, -2], np.float32), np.array([-3, 4], np.float32)):
        out = plan.run({"x": value})
        np.testing.assert_array_equal(out[0], value)
        np.testing.assert_array_equal(out[1], np.maximum(value, 0))


def test_onnx_repeat_path_checks_a_call_in_another_form():
    onnx = pytest.importorskip("onnx")
    from onnx import helper

    from exporters.onnx import backend

    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"])], "two",
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [3]) for n in "ab"],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3])])
    rep = backend.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    a, b = np.arange(3, dtype=np.float32), np.ones(3, np.float32)
    for given in ({"a": a, "b": b}, {"b": b, "a": a}, [a, b], (a, b)):
        np.testing.assert_array_equal(rep.run(given)[0], a + b)
    fresh = backend.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(BindError) as first_call:
        fresh.run(a)
    with pytest.raises(BindError) as repeated:
        rep.run(a)  # (one array for two inputs: the general path's error, not a plan's)
    assert str(repeated.value) == str(first_call.value)
    with pytest.raises(BindError):
        rep.run({"a": a})
    with pytest.raises(BindError):
        rep.run([a])
