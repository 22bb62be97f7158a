"""mx.test_utils against NumPy closed forms (the checks pass on right answers and fail on wrong
ones), mx.viz.plot_network's graph, and mx.context's GPU queries without a GPU."""
from __future__ import annotations

import numpy as np
import pytest

import portable as mx
from portable import test_utils as tu
from portable.errors import BackendError, MissingDependencyError


def test_default_tolerances_follow_the_dtype():
    a = np.array([1.0], np.float32)
    tu.assert_almost_equal(a, a + 5e-4)           # within float32's atol 1e-3
    with pytest.raises(AssertionError, match="names_x"):
        tu.assert_almost_equal(np.array([1.0]), np.array([1.0 + 5e-4]), names=("names_x", "y"))
    assert tu.almost_equal(mx.nd.array([1, 2]), np.array([1, 2.0001]))
    assert tu.same(mx.nd.array([1, 2]), np.array([1, 2])) and not tu.same([1], [1, 1])


def test_symbolic_checks_accept_the_closed_form_and_refuse_a_wrong_one():
    x, w = mx.sym.var("x"), mx.sym.var("w")
    loc = {"x": np.array([0.5, -1.0]), "w": np.array([2.0, 3.0])}
    y = mx.sym.tanh(x * w)
    t = np.tanh(loc["x"] * loc["w"])
    tu.check_symbolic_forward(y, loc, [t])
    head = np.array([1.0, -2.0])
    grads = {"x": head * (1 - t ** 2) * loc["w"], "w": head * (1 - t ** 2) * loc["x"]}
    tu.check_symbolic_backward(y, loc, [head], grads)
    with pytest.raises(AssertionError):
        tu.check_symbolic_backward(y, loc, [head], {"x": grads["w"]})
    with pytest.raises(AssertionError):
        tu.check_symbolic_forward(y, loc, [t + 0.1])
    tu.check_numeric_gradient(y, loc)
    tu.check_numeric_gradient(y, [loc["x"], loc["w"]], grad_nodes=["w"])


def test_assert_exception_and_random_helpers():
    tu.assert_exception(lambda: 1 / 0, ZeroDivisionError)
    with pytest.raises(AssertionError):
        tu.assert_exception(lambda: None, ZeroDivisionError)
    shape = tu.rand_shape_nd(3, dim=4)
    assert len(shape) == 3 and all(1 <= d <= 4 for d in shape)
    arr = tu.rand_ndarray((2, 3))
    assert arr.shape == (2, 3) and arr.dtype == np.float32 and 0 <= arr.asnumpy().min()
    assert [a.shape for a in tu.random_arrays((2,), (3, 1))] == [(2,), (3, 1)]
    assert str(tu.default_context()) == "cpu(0)"


def test_plot_network_draws_layers_and_hides_weights():
    graphviz = pytest.importorskip("graphviz", reason="the graphviz package is not installed")
    data = mx.sym.var("data")
    net = mx.sym.FullyConnected(mx.sym.Activation(data, act_type="relu", name="r"),
                                num_hidden=5, name="fc")
    dot = mx.viz.plot_network(net, shape={"data": (1, 3)})
    assert isinstance(dot, graphviz.Digraph)
    assert "FullyConnected\n5" in dot.source and "fc_weight" not in dot.source


def test_plot_network_without_graphviz_names_the_package(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_graphviz(name, *args, **kwargs):
        if name == "graphviz":
            raise ImportError("No module named 'graphviz'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_graphviz)
    with pytest.raises(MissingDependencyError, match=r"pip install 'portable\[viz\]'"):
        mx.viz.plot_network(mx.sym.relu(mx.sym.var("x")))


def test_gpu_queries_without_a_gpu():
    if mx.context.num_gpus() > 0:
        pytest.skip("a GPU is present")
    assert mx.context.num_gpus() == 0
    with pytest.raises((BackendError, MissingDependencyError)):
        mx.context.gpu_memory_info(0)
