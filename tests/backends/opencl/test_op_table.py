"""The op table on OpenCL against the NumPy reference backend.

Every case of ``tests/ops/cases_*.py`` runs forward on OpenCL and on the CPU (NumPy kernels,
themselves checked against onnx.reference and finite differences by ``tests/ops``); outputs
agree within 1e-4 relative for float32 (1e-2 for float16 storage, 1e-9 for float64). Every
gradient case runs its symbolic gradient graph in float64 on both and agrees within 1e-9.
Random ops reseed before each run, so both devices draw the same masks. bfloat16, float8,
float4 and the 4- and 2-bit integers run on OpenCL too (storage formats computed in float32 or
int32), and agree with NumPy (ml_dtypes) the same way.

Ops that OpenCL refuses by design are listed in ``REFUSED`` with the reason; their cases check
the refusal (a BackendError naming the device and what the op's attributes name, or the op
itself when no attribute is listed) instead.
"""
import re

import numpy as np
import pytest

import portable as pt
from portable.dtypes import is_float, is_low_precision, type_info
from portable.errors import BackendError
from tests.ops.harness import run_ours, symbolic_gradients, to64
from tests.ops.test_op_table import CASES, GRAD_CASES

# op -> (why OpenCL refuses it, the attribute the refusal must name; None: the op's name)
REFUSED = {
    "portable.Custom": ("runs the user's Python forward on host NDArrays", "op_type"),
    "portable.CustomGrad": ("runs the user's Python backward on host NDArrays", "op_type"),
    "portable.Syevd": ("an iterative eigendecomposition (LAPACK syevd): no OpenCL kernel is "
                       "written; the CPU runs it", None),
    "ai.onnx.ml.LabelEncoder": ("a key look-up whose keys or values may be strings, which the "
                                "device cannot hold: the CPU runs it", None),
    "ai.onnx.ml.TreeEnsemble": ("data-dependent tree walks: no OpenCL kernel is written; the "
                                "CPU runs it", None),
    **{f"ai.onnx.ml.{op}": (why + ": no OpenCL kernel is written; the CPU runs it", None)
       for op, why in (("OneHotEncoder", "a category look-up that may hold strings"),
                       ("CategoryMapper", "a look-up between strings and integers"),
                       ("SVMRegressor", "a kernel machine"),
                       ("SVMClassifier", "one-vs-one votes, an iterative coupling per row"),
                       ("TreeEnsembleRegressor", "data-dependent tree walks"),
                       ("TreeEnsembleClassifier", "data-dependent tree walks"))},
    "portable.Gelqf": ("an LQ factorisation (LAPACK gelqf + orglq): no OpenCL kernel is "
                       "written; the CPU runs it", None),
    "TfIdfVectorizer": ("n-gram counting by dictionary look-ups over a variable pool: no "
                        "OpenCL kernel is written; the CPU runs it", None),
}

# case id -> the attribute that asks for float64 arithmetic inside an op whose tensors are
# float32: a device without cl_khr_fp64 refuses the case, naming the op
FLOAT64_BY_ATTRIBUTE = {
    "ai.onnx.preview.FlexAttention-mqa_softmax_in_double": "softmax_precision=11 (double)",
}

_TOLERANCE = {np.dtype(np.float16): 1e-2, np.dtype(np.float32): 1e-4,
              np.dtype(np.float64): 1e-9}


def _flat(values):
    """The arrays among a case's inputs or outputs: a sequence (a list) gives its elements,
    absent inputs and empty optionals (None) none."""
    for v in values:
        if isinstance(v, list):
            yield from _flat(v)
        elif v is not None:
            yield np.asarray(v)


def _compare(got, want, label):
    assert len(got) == len(want), label
    for j, (g, w) in enumerate(zip(got, want)):
        if isinstance(w, list) or w is None:  # a sequence (element-wise) or empty optional
            assert isinstance(g, list) == isinstance(w, list) and (w is None) == (g is None), \
                f"{label} output {j}: {g!r:.60} vs {w!r:.60}"
            if w is not None:
                _compare(g, w, f"{label} output {j}")
            continue
        assert g.shape == w.shape, f"{label} output {j}: shape {g.shape} vs {w.shape}"
        assert g.dtype == w.dtype, f"{label} output {j}: dtype {g.dtype} vs {w.dtype}"
        tol = _TOLERANCE.get(w.dtype, 0)
        if is_low_precision(w.dtype) and is_float(w.dtype):
            # bfloat16, float8, float4: conversions agree exactly; other ops compute in float32
            # and round once, where NumPy may round between steps: one unit of the last place
            eps = float(type_info(w.dtype).eps)
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=eps,
                                       atol=eps, err_msg=f"{label} output {j}")
        elif w.dtype.kind == "f":
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol,
                                       atol=tol, err_msg=f"{label} output {j}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{label} output {j}")


def _needs_float64(case, want):
    """Whether a case holds float64 tensors or asks for float64 arithmetic."""
    return case.id in FLOAT64_BY_ATTRIBUTE or any(
        v.dtype == np.float64 for v in [*_flat(case.inputs), *_flat(want)])


def _refused_or_right(case, device, want):
    """On a device without float64: a case with float64 inputs or float64 arithmetic is refused
    with an error that says so; one whose float64 outputs are only written (random draws
    uploaded, copies) may run, and must then be right."""
    try:
        pt.random.seed(11)
        got = run_ours(case, device=device)
    except BackendError as exc:
        message = str(exc)
        assert "float64" in message and "cl_khr_fp64" in message, f"{case.id}: {message}"
        return message
    assert case.id not in FLOAT64_BY_ATTRIBUTE and not any(
        v.dtype == np.float64 for v in _flat(case.inputs)), f"{case.id}: float64 was accepted"
    _compare(got, want, case.id)
    return None


def _expect_refusal(case, run):
    reason, attr = REFUSED[case.op]
    named = case.op if attr is None else repr(case.attrs[attr])
    with pytest.raises(BackendError, match=re.escape(named)) as caught:
        run()
    assert "opencl" in str(caught.value), f"{case.id} ({reason}): the refusal names no device"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_forward_matches_numpy(case, device):
    if any(v.dtype == object for v in _flat(case.inputs)):
        # string tensors are host objects: OpenCL refuses them, naming the tensor
        with pytest.raises(BackendError, match="string tensor") as caught:
            run_ours(case, device=device)
        assert "opencl" in str(caught.value), f"{case.id}: the refusal names no device"
        return
    pt.random.seed(11)
    want = run_ours(case)
    if not device.backend.runtime.device.fp64 and _needs_float64(case, want):
        # no cl_khr_fp64 (or PORTABLE_OPENCL_LIMITS=phone): float64 is refused, clearly
        _refused_or_right(case, device, want)
        return
    if case.op in REFUSED:
        _expect_refusal(case, lambda: run_ours(case, device=device))
        return
    pt.random.seed(11)
    got = run_ours(case, device=device)
    _compare(got, want, case.id)


@pytest.mark.parametrize("case", GRAD_CASES, ids=[c.id for c in GRAD_CASES])
def test_gradient_matches_numpy(case, device, fp64):
    case = to64(case)
    if case.op in REFUSED:
        heads = [np.ones(o.shape, o.dtype) for o in run_ours(case)]
        _expect_refusal(case, lambda: symbolic_gradients(case, heads, device=device))
        return
    outs = run_ours(case)
    rng = np.random.default_rng(1)
    heads = [rng.uniform(0.5, 1.5, size=o.shape).astype(o.dtype) if o.dtype.kind == "f"
             else np.zeros(o.shape, o.dtype) for o in outs]
    pt.random.seed(11)
    wrt, want = symbolic_gradients(case, heads)
    pt.random.seed(11)
    wrt_cl, got = symbolic_gradients(case, heads, device=device)
    assert wrt == wrt_cl
    _compare(got, want, f"gradient of {case.id}")


def test_refusals_give_reasons():
    from portable.ops import registry

    assert all(op in registry.ops and reason.strip() for op, (reason, _) in REFUSED.items())
