"""OpenCL kernels: the ai.onnx.ml ops of ``portable/ops/ml_linear.py`` and
``portable/ops/ml_models.py``.

The linear and preprocessing ops run on the device, composed from the generated elementwise
kernels, the reductions and the packed GEMM (Scaler, Normalizer, Imputer, FeatureVectorizer,
LinearRegressor, and LinearClassifier with integer labels: argmax and a gather of the labels).
The rest have no OpenCL kernel by design and are refused by name (or run on the host through
the explicit fallback when the user allows it): look-ups of strings and categories
(OneHotEncoder, CategoryMapper), one-vs-one SVMs whose probability coupling iterates per row,
and data-dependent tree walks.
"""
from __future__ import annotations

import numpy as np

from backends.opencl.allocator import empty, from_numpy
from backends.opencl.elementwise import apply, assign, astype
from backends.opencl.fallback import host_only_kernel
from backends.opencl.gather import gather_axis
from backends.opencl.gemm import gemm
from backends.opencl.kernels.table import kernel_table
from backends.opencl.reduction import reduce
from portable.ops.ml_linear import class_labels, imputer_values, linear_score_columns

kernels, kernel = kernel_table()
F32 = np.dtype(np.float32)


def _float_rows(x):
    """X as a contiguous float32 (N, features) matrix (a 1-D X is one sample)."""
    x = x if x.is_contiguous else x.copy()
    x = x.reshape((1, x.size)) if x.ndim == 1 else x
    return x if x.dtype == F32 else astype(x, F32)


def _transform(scores, post_transform: str):
    """onnxruntime's post-transform of a (N, classes >= 2) score matrix."""
    if post_transform == "LOGISTIC":
        return apply("Sigmoid", scores)
    if post_transform == "SOFTMAX":
        raised = apply("Exp", apply("Sub", scores, reduce(scores, (1,), "max", True)))
        return apply("Div", raised, reduce(raised, (1,), "sum", True))
    if post_transform == "SOFTMAX_ZERO":  # (near-zero scores stay near zero, out of the sum)
        top = reduce(scores, (1,), "max", True)
        nonzero = apply("Greater", apply("Abs", scores), 1e-7)
        raised = apply("Where", nonzero, apply("Exp", apply("Sub", scores, top)),
                       apply("Mul", scores, apply("Exp", apply("Neg", top))))
        total = reduce(apply("Where", nonzero, raised, 0.0), (1,), "sum", True)
        return apply("Div", raised, total)
    return scores


@kernel("ai.onnx.ml.Scaler")
def scaler(ctx, inputs, outputs, attrs):
    offset = np.asarray(attrs["offset"] or (0.0,), np.float32)
    scale = np.asarray(attrs["scale"] or (1.0,), np.float32)
    x = inputs[0] if inputs[0].dtype == F32 else astype(inputs[0], F32)
    apply("Mul", apply("Sub", x, offset), scale, out=outputs[0])


@kernel("ai.onnx.ml.Normalizer")
def normalizer(ctx, inputs, outputs, attrs):
    data = _float_rows(inputs[0])
    if attrs["norm"] == "MAX":  # the row's largest value, signed (onnxruntime)
        divisor = reduce(data, (1,), "max", True)
    elif attrs["norm"] == "L1":
        divisor = reduce(apply("Abs", data), (1,), "sum", True)
    else:
        divisor = apply("Sqrt", reduce(data, (1,), "sumsq", True))
    safe = apply("Where", apply("Equal", divisor, 0.0), 1.0, divisor)  # 0: the row as it is
    out = outputs[0]
    apply("Div", data, safe, out=out.reshape(data.shape) if out.is_contiguous else out)


@kernel("ai.onnx.ml.Imputer")
def imputer(ctx, inputs, outputs, attrs):
    x = inputs[0]
    values, replaced = imputer_values(attrs)
    missing = apply("IsNaN", x) if x.dtype.kind == "f" and np.isnan(replaced) else \
        apply("Equal", x, replaced.astype(x.dtype)[()])
    apply("Where", missing, values.astype(x.dtype), x, out=outputs[0])


@kernel("ai.onnx.ml.FeatureVectorizer")
def feature_vectorizer(ctx, inputs, outputs, attrs):
    y = outputs[0]
    assign(y, 0.0)  # (columns an input is too short for stay zero)
    start = 0
    for x, width in zip(inputs, attrs["inputdimensions"]):
        block = x if x.is_contiguous else x.copy()
        block = block.reshape((x.shape[0], block.size // max(x.shape[0], 1)))
        used = min(width, block.shape[1])
        if used:
            assign(y[:, start:start + used], block[:, :used])
        start += width


def _linear_scores(x, attrs, rows: int):
    data = _float_rows(x)
    weights = from_numpy(data.runtime, np.asarray(attrs["coefficients"], np.float32).reshape(
        rows, -1))
    scores = empty(data.runtime, (data.shape[0], rows), F32)
    gemm(data, weights.T, scores, 1.0, 0.0)
    if attrs["intercepts"]:
        scores = apply("Add", scores, np.asarray(attrs["intercepts"], np.float32))
    return scores


@kernel("ai.onnx.ml.LinearRegressor")
def linear_regressor(ctx, inputs, outputs, attrs):
    scores = _linear_scores(inputs[0], attrs, attrs["targets"])
    if scores.shape[1] > 1:  # (one target is left as it is, as onnxruntime does)
        scores = _transform(scores, attrs["post_transform"])
    assign(outputs[0], scores)


@kernel("ai.onnx.ml.LinearClassifier")
def linear_classifier(ctx, inputs, outputs, attrs):
    labels = class_labels(attrs)  # (int64: string labels are host tensors OpenCL refuses)
    scores = _linear_scores(inputs[0], attrs, len(attrs["intercepts"]))
    post = attrs["post_transform"]
    if scores.shape[1] == 1:  # positive when the score is > 0
        pair = labels if len(labels) == 2 else np.asarray([0, 1], np.int64)
        positive = apply("Greater", scores.reshape((scores.shape[0],)), 0.0)
        apply("Where", positive, int(pair[1]), int(pair[0]), out=outputs[0])
        if linear_score_columns(attrs) == 2 and len(outputs) > 1 and outputs[1] is not None:
            z = outputs[1]
            if post == "LOGISTIC":  # onnxruntime's second column
                assign(z[:, 0:1], apply("Sigmoid", apply("Neg", scores)))
                assign(z[:, 1:2], apply("Sigmoid", scores))
            else:
                assign(z[:, 0:1], apply("Sub", 1.0, scores))
                assign(z[:, 1:2], scores)
            return
    else:
        chosen = reduce(scores, (1,), "argmax")  # (the first class of the largest score)
        gather_axis(from_numpy(scores.runtime, labels), chosen, 0, outputs[0])
        scores = _transform(scores, post)
    if len(outputs) > 1 and outputs[1] is not None:
        assign(outputs[1], scores)


for _op, _why in (
        ("OneHotEncoder", "a look-up of categories that may be strings"),
        ("CategoryMapper", "a look-up between strings and integers"),
        ("SVMRegressor", "a kernel machine: no OpenCL kernel is written"),
        ("SVMClassifier", "one-vs-one votes and an iterative probability coupling per row"),
        ("TreeEnsembleRegressor", "data-dependent tree walks"),
        ("TreeEnsembleClassifier", "data-dependent tree walks")):
    kernel(f"ai.onnx.ml.{_op}", half="native")(host_only_kernel(
        f"ai.onnx.ml.{_op}", lambda attrs, op=_op, why=_why: f"ai.onnx.ml.{op} ({why}) has no "
        f"OpenCL kernel"))
