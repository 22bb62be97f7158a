"""Custom operators (``mx.operator``) beyond the recorded snippets: gradients against float64
finite differences (imperative and bound symbol), a hybridized Gluon block calling ``F.Custom``,
training an MLP that ends in MXNet's custom softmax to MXNet's recorded accuracy, and the errors
(unregistered op_type, a wrong infer_shape, a forward that writes nothing, export, devices)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import portable as mx
from portable.errors import BackendError, PortableError, ShapeError, UnknownOpError

HERE = Path(__file__).parent


class _CubeScale(mx.operator.CustomOp):
    """y = x**3 * w (elementwise), with its analytic backward; float64 throughout."""

    def forward(self, is_train, req, in_data, out_data, aux):
        x, w = in_data
        self.assign(out_data[0], req[0], x * x * x * w)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        x, w = in_data
        self.assign(in_grad[0], req[0], out_grad[0] * 3 * x * x * w)
        self.assign(in_grad[1], req[1], out_grad[0] * x * x * x)


@mx.operator.register("test_cube_scale")
class _CubeScaleProp(mx.operator.CustomOpProp):
    def list_arguments(self):
        return ["data", "weight"]

    def infer_shape(self, in_shape):
        return [in_shape[0], in_shape[0]], [in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return _CubeScale()


def _f(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x ** 3 * w


def _finite_differences(head, x, w, eps=1e-6):
    """d sum(head * f(x, w)) / d(x, w) by central differences in float64."""
    grads = []
    for which in range(2):
        args = [x.copy(), w.copy()]
        grad = np.zeros_like(args[which])
        for index in np.ndindex(grad.shape):
            plus = [a.copy() for a in args]
            minus = [a.copy() for a in args]
            plus[which][index] += eps
            minus[which][index] -= eps
            grad[index] = ((head * _f(*plus)).sum() - (head * _f(*minus)).sum()) / (2 * eps)
        grads.append(grad)
    return grads


@pytest.fixture
def operands():
    rng = np.random.default_rng(3)
    return (rng.normal(size=(3, 4)), rng.normal(size=(3, 4)), rng.normal(size=(3, 4)))


def test_autograd_gradient_matches_float64_finite_differences(operands):
    x_np, w_np, head_np = operands
    x, w = mx.nd.array(x_np, dtype=np.float64), mx.nd.array(w_np, dtype=np.float64)
    x.attach_grad()
    w.attach_grad()
    with mx.autograd.record():
        y = mx.nd.Custom(x, w, op_type="test_cube_scale")
    y.backward(mx.nd.array(head_np, dtype=np.float64))
    assert y.dtype == np.float64
    np.testing.assert_allclose(y.asnumpy(), _f(x_np, w_np), rtol=1e-12)
    want_x, want_w = _finite_differences(head_np, x_np, w_np)
    np.testing.assert_allclose(x.grad.asnumpy(), want_x, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(w.grad.asnumpy(), want_w, rtol=1e-6, atol=1e-8)


def test_bound_symbol_gradient_matches_float64_finite_differences(operands):
    x_np, w_np, head_np = operands
    net = mx.sym.Custom(mx.sym.var("x"), mx.sym.var("w"), op_type="test_cube_scale")
    exe = net.simple_bind(mx.cpu(), x=x_np.shape, w=w_np.shape,
                          type_dict={"x": np.float64, "w": np.float64})
    exe.arg_dict["x"][:] = x_np
    exe.arg_dict["w"][:] = w_np
    out = exe.forward(is_train=True)[0].asnumpy()
    exe.backward(mx.nd.array(head_np, dtype=np.float64))
    np.testing.assert_allclose(out, _f(x_np, w_np), rtol=1e-12)
    want_x, want_w = _finite_differences(head_np, x_np, w_np)
    np.testing.assert_allclose(exe.grad_dict["x"].asnumpy(), want_x, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(exe.grad_dict["w"].asnumpy(), want_w, rtol=1e-6, atol=1e-8)


def test_hybridized_block_calling_F_Custom_matches_numpy(operands):
    x_np, w_np, _ = operands

    class Net(mx.gluon.HybridBlock):
        def hybrid_forward(self, F, x, w):
            return F.Custom(F.relu(x), w, op_type="test_cube_scale")

    x, w = mx.nd.array(x_np), mx.nd.array(w_np)
    want = _f(np.maximum(x_np, 0), w_np).astype(np.float32)
    block = Net()
    np.testing.assert_allclose(block(x, w).asnumpy(), want, rtol=1e-5, atol=1e-6)
    block.hybridize()
    x.attach_grad()
    with mx.autograd.record():
        y = block(x, w)
    y.backward()
    np.testing.assert_allclose(y.asnumpy(), want, rtol=1e-5, atol=1e-6)
    want_grad = 3 * np.maximum(x_np, 0) ** 2 * w_np * (x_np > 0)
    np.testing.assert_allclose(x.grad.asnumpy(), want_grad, rtol=1e-5, atol=1e-5)


def test_mlp_with_custom_softmax_trains_on_digits_as_mxnet_does():
    pytest.importorskip("sklearn")
    sys.path.insert(0, str(HERE))
    try:
        import record_custom_op as recipe
    finally:
        sys.path.remove(str(HERE))
    recorded = json.loads((HERE / "fixtures" / "custom_op_training.json").read_text())
    assert recorded["recorded_with"]["mxnet"] == "1.9.1"
    accuracy = recipe.train(mx)
    assert accuracy >= 0.95
    assert abs(accuracy - recorded["held_out_accuracy"]) <= 0.02


# -- errors ---------------------------------------------------------------------------------


def test_an_unregistered_op_type_is_named():
    with pytest.raises(UnknownOpError, match="'test_no_such_op' is not registered"):
        mx.nd.Custom(mx.nd.ones((2, 2)), op_type="test_no_such_op")
    with pytest.raises(UnknownOpError, match="test_no_such_op"):
        mx.sym.Custom(mx.sym.var("x"), op_type="test_no_such_op")


def test_infer_shape_returning_the_wrong_count_is_named():
    @mx.operator.register("test_bad_infer")
    class BadProp(mx.operator.CustomOpProp):
        def list_outputs(self):
            return ["a", "b"]

        def infer_shape(self, in_shape):
            return in_shape, [in_shape[0]], []

    with pytest.raises(ShapeError, match=r"'test_bad_infer'.*infer_shape\(\) returned 1 output"):
        mx.nd.Custom(mx.nd.ones((2, 2)), op_type="test_bad_infer")


def test_a_forward_that_writes_no_output_is_named():
    class Lazy(mx.operator.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):
            in_data[0] * 2  # computed, never assigned

    @mx.operator.register("test_lazy_forward")
    class LazyProp(mx.operator.CustomOpProp):
        def create_operator(self, ctx, shapes, dtypes):
            return Lazy()

    with pytest.raises(PortableError, match=r"'test_lazy_forward': forward\(\) did not write "
                                            r"output\(s\) 0 \('output'\)"):
        mx.nd.Custom(mx.nd.ones((2, 2)), op_type="test_lazy_forward").asnumpy()
    # The engine reports a failed op once more, at the next wait_all: take that report here,
    # not in whichever test waits next.
    with pytest.raises(PortableError, match="test_lazy_forward"):
        mx.nd.waitall()


def test_an_error_in_the_users_forward_names_the_op_type():
    class Broken(mx.operator.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):
            raise RuntimeError("boom")

    @mx.operator.register("test_broken_forward")
    class BrokenProp(mx.operator.CustomOpProp):
        def create_operator(self, ctx, shapes, dtypes):
            return Broken()

    with pytest.raises(PortableError, match=r"'test_broken_forward': forward\(\) raised "
                                            r"RuntimeError: boom"):
        mx.nd.Custom(mx.nd.ones((2, 2)), op_type="test_broken_forward").asnumpy()
    # The engine reports a failed op once more, at the next wait_all: take that report here,
    # not in whichever test waits next.
    with pytest.raises(PortableError, match="test_broken_forward"):
        mx.nd.waitall()


def test_kwargs_reach_the_prop_as_strings():
    seen = {}

    @mx.operator.register("test_kwargs_probe")
    class ProbeProp(mx.operator.CustomOpProp):
        def __init__(self, alpha="0", flag="False"):
            super().__init__()
            seen.update(alpha=alpha, flag=flag)

        def create_operator(self, ctx, shapes, dtypes):
            return _Copy()

    class _Copy(mx.operator.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):
            self.assign(out_data[0], req[0], in_data[0])

    mx.nd.Custom(mx.nd.ones((1,)), op_type="test_kwargs_probe", alpha=0.25, flag=True)
    assert seen == {"alpha": "0.25", "flag": "True"}


def test_export_refuses_by_op_type():
    pytest.importorskip("onnx")
    from exporters.onnx.exporter import export_graph

    net = mx.sym.Custom(mx.sym.var("x"), mx.sym.var("w"), op_type="test_cube_scale", name="c")
    graph = net.to_graph({"x": (2, 3), "w": (2, 3)})
    with pytest.raises(PortableError, match="custom op 'test_cube_scale'.*no ONNX form"):
        export_graph(graph)


def test_a_backend_other_than_numpy_is_refused_by_op_type_and_device():
    from backends.xp.kernels.custom import custom_forward
    from portable.backend import KernelContext

    class _OtherBackend:
        name, device = "cupy", "cuda(0)"

    ctx = KernelContext(xp=object(), rng=np.random.default_rng(), backend=_OtherBackend())
    attrs = {"op_type": "test_cube_scale", "kwargs": (), "is_train": 0}
    with pytest.raises(BackendError, match=r"'test_cube_scale'.*device cuda\(0\)"):
        custom_forward(ctx, [np.ones(2), np.ones(2)], [np.empty(2)], attrs)
