"""Op-table cases: MXNet's loss outputs (SoftmaxOutput, the regression outputs) and their
private gradient ops.

Their backward is, by design, not the derivative of their forward: it is the loss gradient
against the label, the head gradient ignored (MXNet 1.9.1's ``softmax_output-inl.h`` and
``regression_output-inl.h``). So their gradient cases compare with loop-form NumPy references
(``grad_reference``) instead of finite differences.
"""
import numpy as np

from tests.ops.harness import Case, rand


def _softmax_rows(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _softmax_output_ref(inputs, attrs):
    x = inputs[0]
    if attrs.get("multi_output"):
        return [np.moveaxis(_softmax_rows(np.moveaxis(x, 1, -1)), -1, 1)]
    return [_softmax_rows(x.reshape(x.shape[0], -1)).reshape(x.shape)]


def _softmax_grad_loop(out, label, attrs):
    """(out - onehot) row by row, ignored rows zero, then the normalisation, in loop form."""
    multi = attrs.get("multi_output", 0)
    o = out if multi else out.reshape(out.shape[0], -1, 1)
    lab = label.reshape(o.shape[0], -1)
    grad = np.array(o, copy=True)
    ignored = 0
    for n in range(o.shape[0]):
        for d in range(o.shape[2]):
            k = int(lab[n, d])
            if attrs.get("use_ignore") and k == int(attrs.get("ignore_label", -1)):
                grad[n, :, d] = 0
            else:
                grad[n, k, d] -= 1
            ignored += k == int(attrs.get("ignore_label", -1))
    normalization = attrs.get("normalization", "null")
    count = {"null": 1, "batch": o.shape[0], "valid": max(lab.size - ignored, 1)}[normalization]
    if multi and normalization != "valid":
        count *= o.shape[2]
    return (grad * attrs.get("grad_scale", 1.0) / count).reshape(out.shape)


def _softmax_output_grad_ref(inputs, attrs, heads=None):
    out = _softmax_output_ref(inputs, attrs)[0]
    return [_softmax_grad_loop(out, inputs[1], attrs)]


def _regression_forward(kind):
    def ref(inputs, attrs):
        x = inputs[0]
        return [1 / (1 + np.exp(-x)) if kind == "logistic" else np.array(x, copy=True)]
    return ref


def _regression_grad_loop(out, label, kind, scale):
    diff = (out - label.reshape(out.shape)).reshape(-1)
    if kind == "mae":
        diff = np.array([1.0 if d > 0 else -1.0 for d in diff], out.dtype)
    return (diff * scale / (label.size // label.shape[0])).reshape(out.shape).astype(out.dtype)


def _regression_grad_ref(kind):
    def ref(inputs, attrs, heads=None):
        out = _regression_forward(kind)(inputs, attrs)[0]
        return [_regression_grad_loop(out, inputs[1], kind, attrs.get("grad_scale", 1.0))]
    return ref


SCORES = rand(4, 5, seed=1, low=-2, high=2)
LABELS = np.array([1, 4, 0, 2], np.float32)
MULTI = rand(2, 3, 4, seed=2, low=-2, high=2)
MULTI_LABELS = np.array([[0, 1, 2, 1], [2, 2, 0, 0]], np.float32)
TARGET = rand(4, 5, seed=3)

CASES = [
    Case("portable.SoftmaxOutput", [SCORES, LABELS], reference=_softmax_output_ref,
         grad_reference=_softmax_output_grad_ref, wrt=(0,)),
    Case("portable.SoftmaxOutput", [SCORES, LABELS], reference=_softmax_output_ref,
         attrs={"grad_scale": 2.0, "normalization": "batch"}, name="batch",
         grad_reference=_softmax_output_grad_ref, wrt=(0,)),
    Case("portable.SoftmaxOutput", [SCORES, np.array([1, -1, 0, -1], np.float32)],
         reference=_softmax_output_ref, name="ignore_valid",
         attrs={"use_ignore": 1, "ignore_label": -1.0, "normalization": "valid"},
         grad_reference=_softmax_output_grad_ref, wrt=(0,)),
    Case("portable.SoftmaxOutput", [MULTI, MULTI_LABELS], reference=_softmax_output_ref,
         attrs={"multi_output": 1, "normalization": "batch"}, name="multi_output",
         grad_reference=_softmax_output_grad_ref, wrt=(0,)),
    Case("portable.SoftmaxOutputGrad",
         [_softmax_output_ref([SCORES], {})[0], LABELS], grad=False,
         reference=lambda inputs, attrs: [_softmax_grad_loop(inputs[0], inputs[1], attrs)]),
]
for _op, _kind in (("LinearRegressionOutput", "linear"), ("LogisticRegressionOutput",
                                                          "logistic"),
                   ("MAERegressionOutput", "mae")):
    CASES.append(Case(f"portable.{_op}", [SCORES, TARGET], attrs={"grad_scale": 3.0},
                      reference=_regression_forward(_kind), wrt=(0,),
                      grad_reference=_regression_grad_ref(_kind)))
CASES += [
    Case("portable.LinearRegressionOutput", [SCORES[:, :1], LABELS], name="column_label",
         reference=_regression_forward("linear"), wrt=(0,),
         grad_reference=_regression_grad_ref("linear")),
    Case("portable.RegressionOutputGrad", [SCORES, TARGET], attrs={"kind": "mae"}, grad=False,
         reference=lambda inputs, attrs: [_regression_grad_loop(inputs[0], inputs[1], "mae",
                                                                1.0)]),
]
