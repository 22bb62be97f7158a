"""MXNet's loss outputs and custom ops on OpenCL.

The loss outputs' kernels agree with the NumPy reference over every attribute the op table does
not sweep (out_grad, smoothing, preserve_shape, ignore without 'valid', probability targets,
all-ignored batches, float16 and float64); custom ops are refused by op_type and device, from
NDArray and from a bound symbol, unless the explicit CPU fallback is allowed.
"""
import numpy as np
import pytest

import portable as pt
from portable.errors import BackendError, PortableError
from tests.ops.harness import Case, rand, run_ours

_TOLERANCE = {np.dtype(np.float16): 1e-2, np.dtype(np.float32): 1e-5,
              np.dtype(np.float64): 1e-12}

SCORES = rand(4, 5, seed=1, low=-2, high=2)
PROBS = np.exp(SCORES) / np.exp(SCORES).sum(axis=1, keepdims=True)
LABELS = np.array([1, 4.7, -1, 2], np.float32)  # 4.7 truncates to 4, -1 is ignored
MULTI = rand(2, 3, 4, seed=2, low=-2, high=2)
MULTI_LABELS = np.array([[0, 1, -1, 1], [2, -1, 0, 0]], np.float32)
PRESERVE = rand(2, 3, 5, seed=4, low=-2, high=2)
PRESERVE_LABELS = np.array([[0, 1, 4], [-1, 3, 2]], np.float32)


def _softmax_grad(name, out, label, **attrs):
    return Case("portable.SoftmaxOutputGrad", [out, label], attrs=attrs, name=name)


CASES = [
    _softmax_grad("out_grad_null", PROBS, LABELS, out_grad=1, grad_scale=0.5),
    _softmax_grad("smooth", PROBS, LABELS, smooth_alpha=0.2, normalization="batch"),
    _softmax_grad("ignore_null", PROBS, LABELS, use_ignore=1, ignore_label=-1.0),
    _softmax_grad("valid_without_use_ignore", PROBS, LABELS, normalization="valid",
                  grad_scale=3.0),
    _softmax_grad("valid_all_ignored", PROBS, np.full(4, 2, np.float32), use_ignore=1,
                  ignore_label=2.0, normalization="valid"),
    _softmax_grad("multi_valid", MULTI, MULTI_LABELS, multi_output=1, use_ignore=1,
                  normalization="valid", out_grad=1),
    _softmax_grad("multi_null_smooth_ignored", MULTI, MULTI_LABELS, multi_output=1,
                  smooth_alpha=0.1),
    _softmax_grad("multi_flat_label", MULTI, MULTI_LABELS.reshape(2, 4), multi_output=1,
                  normalization="batch"),
    _softmax_grad("preserve_shape", PRESERVE, PRESERVE_LABELS, preserve_shape=1,
                  use_ignore=1, normalization="valid"),
    _softmax_grad("probabilities", PROBS, rand(4, 5, seed=5), grad_scale=2.0, out_grad=1),
    Case("portable.SoftmaxOutput", [PRESERVE, PRESERVE_LABELS], attrs={"preserve_shape": 1},
         name="preserve_shape"),
    Case("portable.SoftmaxOutput", [MULTI, MULTI_LABELS], attrs={"multi_output": 1},
         name="multi_output"),
    Case("portable.SoftmaxOutput", [rand(2, 3, 4, seed=6), np.zeros((2, 3), np.float32)],
         name="flattened"),
    Case("portable.RegressionOutputGrad", [SCORES, np.where(SCORES > 0, SCORES, 0.5)],
         attrs={"kind": "mae", "grad_scale": 2.0}, name="mae_ties"),
    Case("portable.RegressionOutputGrad", [SCORES, rand(4, 5, seed=7)],
         attrs={"kind": "logistic", "grad_scale": 0.5}, name="logistic"),
    Case("portable.RegressionOutputGrad", [SCORES[:, :1], rand(4, seed=8)],
         attrs={"kind": "linear"}, name="column_label"),
]


def _as(case, dtype):
    """The case with its float inputs in ``dtype`` (labels keep theirs)."""
    inputs = [np.asarray(case.inputs[0], dtype)] + list(case.inputs[1:])
    if len(inputs[1].shape) == len(inputs[0].shape) and inputs[1].shape == inputs[0].shape:
        inputs[1] = np.asarray(inputs[1], dtype)
    return Case(case.op, inputs, attrs=case.attrs, name=case.name)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_loss_outputs_match_numpy(case, dtype, device):
    if dtype == np.float64 and not device.backend.runtime.device.fp64:
        pytest.skip("the device has no float64 (cl_khr_fp64)")
    case = _as(case, dtype)
    want = run_ours(case)[0]
    got = run_ours(case, device=device)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    tol = _TOLERANCE[np.dtype(dtype)]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                               atol=tol, err_msg=case.id)


def test_mae_ties_get_minus_one(device):
    out = np.array([[1.0, 2.0, 3.0]], np.float32)
    case = Case("portable.RegressionOutputGrad", [out, out.copy()], attrs={"kind": "mae"})
    want = np.full((1, 3), -1 / 3, np.float32)
    np.testing.assert_array_equal(run_ours(case, device=device)[0], want)


# -- custom ops ---------------------------------------------------------------------------------


class _Double(pt.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] * 2)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0] * 2)


@pt.operator.register("opencl_test_double")
class _DoubleProp(pt.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return _Double()


# the kernel's refusal and nd.Custom's own (portable.operator) both name op_type and device
_REFUSAL = r"custom op 'opencl_test_double'.*opencl\(0\).*(CPU|mx\.cpu\(\))"


def _refused(info) -> None:
    """The engine reports the kernel's BackendError (as the cause of its EngineError), and
    once more at the next wait_all: that report is taken here, not by whichever test waits
    next."""
    error = info.value
    assert isinstance(error, BackendError) or isinstance(error.__cause__, BackendError), error
    try:
        pt.nd.waitall()
    except PortableError as again:
        assert "opencl_test_double" in str(again), again


def test_custom_op_is_refused_from_ndarray(device):
    x = pt.nd.array(np.ones((2, 3), np.float32), device=device)
    with pytest.raises(PortableError, match=_REFUSAL) as info:
        pt.nd.Custom(x, op_type="opencl_test_double").asnumpy()
    _refused(info)


def test_custom_op_is_refused_from_a_bound_symbol(device):
    sym = pt.sym.Custom(pt.sym.var("data"), op_type="opencl_test_double")
    exe = sym.simple_bind(device, data=(2, 3))
    with pytest.raises(PortableError, match=_REFUSAL) as info:
        exe.forward(data=pt.nd.ones((2, 3), device=device))
        exe.outputs[0].asnumpy()
    _refused(info)


def test_custom_op_runs_through_the_allowed_fallback(backend):
    from backends.opencl import OpenCLBackend
    from portable.backend import KernelContext

    allowed = OpenCLBackend(backend.device, backend.runtime, backend.kernels, fallback=True)
    x = backend.from_numpy(np.array([-1.0, 2.0], np.float32))
    y = backend.empty((2,), np.float32)
    ctx = KernelContext(allowed.xp, np.random.default_rng(0), allowed)
    attrs = {"op_type": "opencl_test_double", "kwargs": (), "is_train": 0}
    allowed.kernel("portable.Custom")(ctx, [x], [y], attrs)
    np.testing.assert_array_equal(backend.to_numpy(y), [-2.0, 4.0])
    assert allowed.fallback_report()["ops"] == {"portable.Custom": 1}
