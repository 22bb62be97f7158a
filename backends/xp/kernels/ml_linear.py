"""NumPy kernels: the preprocessing and linear ops of ai.onnx.ml (``portable/ops/ml_linear.py``
declares them), and the score post-transforms the ai.onnx.ml classifiers share.

The arithmetic follows onnxruntime, which is what models exported from scikit-learn are run
with: scores are computed in float32 (X is cast first, as onnxruntime does), a post-transform
is applied only where onnxruntime applies it (a single score column is left as it is unless a
second class column is added), and ties in an argmax go to the first class.
"""
from __future__ import annotations

import numpy as np

from portable.backend import kernel_table
from portable.dtypes import STRING
from portable.ops.ml_linear import (class_labels, imputer_values, linear_score_columns,
                                    one_hot_categories)

kernels, kernel = kernel_table()


def rows_of(xp, x):
    """X as a float32 (N, features) matrix (a 1-D X is one sample)."""
    x = x.reshape(1, -1) if x.ndim == 1 else x
    return x.astype(np.float32)


def transform_scores(xp, scores, post_transform: str):
    """onnxruntime's post-transform of a score matrix with two or more columns per row."""
    if post_transform == "LOGISTIC":
        return (1.0 / (1.0 + xp.exp(-scores))).astype(scores.dtype)
    if post_transform == "SOFTMAX":
        shifted = xp.exp(scores - scores.max(axis=1, keepdims=True))
        return shifted / shifted.sum(axis=1, keepdims=True)
    if post_transform == "SOFTMAX_ZERO":
        # (values within 1e-7 of zero stay (almost) zero and do not join the sum)
        top = scores.max(axis=1, keepdims=True)
        nonzero = xp.abs(scores) > 1e-7
        raised = xp.where(nonzero, xp.exp(scores - top), scores * xp.exp(-top))
        total = xp.where(nonzero, raised, 0).sum(axis=1, keepdims=True)
        return raised / total
    return scores


def two_columns(xp, score, kind: str):
    """onnxruntime's second class column for a one-score binary problem: ``"complement"``
    gives [1 - s, s], ``"negated"`` [-s, s], ``"logistic"`` [sigmoid(-s), sigmoid(s)]."""
    score = score.reshape(-1, 1)
    if kind == "complement":
        return xp.concatenate([1 - score, score], axis=1)
    if kind == "logistic":
        return xp.concatenate([1 / (1 + xp.exp(score)), 1 / (1 + xp.exp(-score))], axis=1)
    return xp.concatenate([-score, score], axis=1)


def write_labels(xp, out, labels: np.ndarray, index) -> None:
    """Output ``out`` = ``labels[index]`` (strings are gathered on the host)."""
    if labels.dtype == STRING:
        out[...] = labels[np.asarray(index)]
    else:
        out[...] = xp.asarray(labels)[index]


# -- Scaler, Normalizer, Imputer ---------------------------------------------------------------


@kernel("ai.onnx.ml.Scaler")
def scaler(ctx, inputs, outputs, attrs):
    xp, x = ctx.xp, inputs[0]
    offset = xp.asarray(np.asarray(attrs["offset"] or (0.0,), np.float32))
    scale = xp.asarray(np.asarray(attrs["scale"] or (1.0,), np.float32))
    outputs[0][...] = (x.astype(np.float32) - offset) * scale


@kernel("ai.onnx.ml.Normalizer")
def normalizer(ctx, inputs, outputs, attrs):
    xp, x = ctx.xp, inputs[0]
    data = x.reshape(1, -1) if x.ndim == 1 else x
    data = data.astype(np.float64)  # (onnxruntime sums in double)
    norm = attrs["norm"]
    if norm == "MAX":  # the row's largest value, signed (onnxruntime)
        divisor = data.max(axis=1, keepdims=True)
    elif norm == "L1":
        divisor = xp.abs(data).sum(axis=1, keepdims=True)
    else:
        divisor = xp.sqrt((data * data).sum(axis=1, keepdims=True))
    # a row whose divisor is 0 is copied as it is
    result = data / xp.where(divisor == 0, 1.0, divisor)
    outputs[0][...] = result.reshape(outputs[0].shape)


@kernel("ai.onnx.ml.Imputer")
def imputer(ctx, inputs, outputs, attrs):
    xp, x, y = ctx.xp, inputs[0], outputs[0]
    values, replaced = imputer_values(attrs)
    fill = xp.asarray(values.astype(x.dtype))
    missing = xp.isnan(x) if x.dtype.kind == "f" and np.isnan(replaced) else x == replaced
    y[...] = xp.where(missing, xp.broadcast_to(fill, x.shape), x)


# -- OneHotEncoder, CategoryMapper, FeatureVectorizer ------------------------------------------


def _positions(xp, keys: np.ndarray, values):
    """Index of each value in ``keys`` (-1 when absent), by binary search over sorted keys."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = xp.asarray(keys[order]) if keys.dtype != STRING else keys[order]
    flat = values.reshape(-1)
    if not len(keys):
        return xp.full(flat.shape, -1, np.int64)
    position = xp.minimum(xp.searchsorted(sorted_keys, flat), len(keys) - 1)
    found = sorted_keys[position] == flat
    return xp.where(found, xp.asarray(order)[position], -1).reshape(values.shape)


@kernel("ai.onnx.ml.OneHotEncoder")
def one_hot_encoder(ctx, inputs, outputs, attrs):
    x, y = inputs[0], outputs[0]
    categories = one_hot_categories(attrs)
    strings = categories.dtype == STRING
    xp = np if strings else ctx.xp  # (string tensors live on the host)
    if strings:
        values = np.asarray([str(v) for v in x.reshape(-1)], dtype=STRING).reshape(x.shape)
    else:  # numbers compare as int64 (onnxruntime casts floats)
        values = x.astype(np.int64)
    index = _positions(xp, categories, values)
    if not attrs["zeros"] and bool((index < 0).any()):
        unknown = np.asarray(values)[np.asarray(index) < 0].reshape(-1)[:5].tolist()
        raise ValueError(f"ai.onnx.ml.OneHotEncoder: values {unknown} are of no category and "
                         f"zeros=0 forbids an all-zero row")
    hot = index[..., None] == xp.arange(len(categories))
    y[...] = ctx.xp.asarray(hot) if strings else hot  # (host strings, device output)


@kernel("ai.onnx.ml.CategoryMapper")
def category_mapper(ctx, inputs, outputs, attrs):
    x, y = inputs[0], outputs[0]
    ints = np.asarray(attrs["cats_int64s"], np.int64)
    strings = np.asarray([str(s) for s in attrs["cats_strings"]], dtype=STRING)
    if x.dtype == STRING:  # strings -> int64
        values = np.asarray([str(v) for v in x.reshape(-1)], dtype=STRING)
        index = _positions(np, strings, values)
        table = np.append(ints, np.int64(attrs["default_int64"]))
        y[...] = ctx.xp.asarray(table[index]).reshape(y.shape)  # (-1 picks the default)
    else:
        index = np.asarray(_positions(np, ints, np.asarray(x).astype(np.int64)))
        table = np.append(strings, np.asarray([attrs["default_string"]], dtype=STRING))
        y[...] = table[index].reshape(y.shape)


@kernel("ai.onnx.ml.FeatureVectorizer")
def feature_vectorizer(ctx, inputs, outputs, attrs):
    y = outputs[0]
    y[...] = 0  # (columns an input is too short for stay zero)
    start = 0
    for x, width in zip(inputs, attrs["inputdimensions"]):
        block = x.reshape(x.shape[0], -1)
        used = min(width, block.shape[1])
        y[:, start:start + used] = block[:, :used].astype(np.float32)
        start += width


# -- LinearRegressor and LinearClassifier ------------------------------------------------------


def linear_scores(xp, x, attrs, rows: int):
    """X coefficients^T + intercepts, float32, one column per target or class."""
    data = rows_of(xp, x)
    weights = xp.asarray(np.asarray(attrs["coefficients"], np.float32).reshape(rows, -1))
    scores = data @ weights.T
    if attrs["intercepts"]:
        scores = scores + xp.asarray(np.asarray(attrs["intercepts"], np.float32))
    return scores


@kernel("ai.onnx.ml.LinearRegressor")
def linear_regressor(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    scores = linear_scores(xp, inputs[0], attrs, attrs["targets"])
    if scores.shape[1] > 1:  # (one target is left as it is, as onnxruntime does)
        scores = transform_scores(xp, scores, attrs["post_transform"])
    outputs[0][...] = scores


@kernel("ai.onnx.ml.LinearClassifier")
def linear_classifier(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    labels = class_labels(attrs)
    scores = linear_scores(xp, inputs[0], attrs, len(attrs["intercepts"]))
    if scores.shape[1] == 1:  # positive when the score is > 0
        pair = labels if len(labels) == 2 else np.asarray(
            ["0", "1"] if labels.dtype == STRING else [0, 1], labels.dtype)
        write_labels(xp, outputs[0], pair, (scores[:, 0] > 0).astype(np.int64))
        if linear_score_columns(attrs) == 2:  # onnxruntime's second column
            logistic = attrs["post_transform"] == "LOGISTIC"
            scores = two_columns(xp, scores[:, 0], "logistic" if logistic else "complement")
    else:
        write_labels(xp, outputs[0], labels, xp.argmax(scores, axis=1))
        scores = transform_scores(xp, scores, attrs["post_transform"])
    if len(outputs) > 1 and outputs[1] is not None:
        outputs[1][...] = scores
