"""Classical machine-learning ops of the ``ai.onnx.ml`` domain, the preprocessing and linear
part (what scikit-learn's converters write for pipelines of scalers, encoders and linear
models): Scaler, Normalizer, Imputer, OneHotEncoder, CategoryMapper, FeatureVectorizer,
LinearRegressor and LinearClassifier.

Their semantics are onnxruntime's where the spec is vague and onnx.reference differs from it
(Normalizer's MAX divides by the row's largest value, not its largest magnitude; a binary
classifier with one score column gets a second one): scikit-learn's exported models are run
on onnxruntime, and portable must give the same answers. Every numeric output of these ops is
float32, whatever X's type (the spec says so). None is differentiable: they are exported
inference pipelines, and a label or a category look-up has no gradient.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.dtypes import STRING
from portable.ir.graph import TensorType
from portable.ops.registry import Attr, DtypeContext, InferContext, declare
from portable.ops.rules import dtypes_of

ML = "ai.onnx.ml"
FLOAT = np.dtype(np.float32)
NUMERIC = ("float32", "float64", "int64", "int32")
# post_transform names of the opset-1 ops (TreeEnsemble numbers them in this order); PROBIT,
# an inverse normal CDF that onnxruntime approximates, is refused by the type rules.
POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO")


def require_numeric(ctx: InferContext, index: int = 0) -> None:
    """Refuse an input that is not float, double, int64 or int32 (the ops' T)."""
    if ctx.dtype(index).name not in NUMERIC:
        ctx.fail(f"{ctx.op.input_name(index)} must be float, double, int64 or int32, got "
                 f"{ctx.dtype(index).name}")


def require_post_transform(ctx: Any) -> None:
    if ctx.attrs["post_transform"] not in POST_TRANSFORMS:
        ctx.fail(f"post_transform {ctx.attrs['post_transform']!r} is not supported (PROBIT is "
                 f"not implemented); portable supports {', '.join(POST_TRANSFORMS)}")


def batch_of(ctx: InferContext, index: int = 0) -> tuple[int, int]:
    """(rows, features) of a 1-D (one sample) or 2-D X, as onnxruntime reads it."""
    shape = ctx.shape(index)
    if len(shape) not in (1, 2):
        ctx.fail(f"X must be 1-D (one sample) or 2-D (N, features), got {shape}")
    return (1, shape[0]) if len(shape) == 1 else (shape[0], shape[1])


def per_feature(ctx: Any, name: str, values: Any, features: int) -> None:
    """A per-feature attribute holds one value (broadcast) or one per feature."""
    if values is not None and len(values) not in (0, 1, features):
        ctx.fail(f"{name} has {len(values)} values; X has {features} features (give 1 or "
                 f"{features})")


_FLOAT_OUT = dtypes_of(FLOAT, inputs=())

# -- Scaler and Normalizer ---------------------------------------------------------------------


def _scaler_infer(ctx: InferContext) -> list[TensorType]:
    require_numeric(ctx)
    features = ctx.shape(0)[-1] if ctx.shape(0) else 1
    for name in ("offset", "scale"):
        per_feature(ctx, name, ctx.attrs[name], features)
    return [TensorType(ctx.shape(0), FLOAT)]


declare("Scaler", domain=ML, inputs=("X",), outputs=("Y",), infer=_scaler_infer,
        attrs={"offset": Attr("floats", ()), "scale": Attr("floats", ())}, onnx_since=1,
        dtype_rule=_FLOAT_OUT, doc="Y = (X - offset) * scale per feature (the last axis).")

NORMS = ("MAX", "L1", "L2")


def _normalizer_infer(ctx: InferContext) -> list[TensorType]:
    require_numeric(ctx)
    batch_of(ctx)
    if ctx.attrs["norm"] not in NORMS:
        ctx.fail(f"norm must be one of {NORMS}, got {ctx.attrs['norm']!r}")
    return [TensorType(ctx.shape(0), FLOAT)]


declare("Normalizer", domain=ML, inputs=("X",), outputs=("Y",), infer=_normalizer_infer,
        attrs={"norm": Attr("string", "MAX")}, onnx_since=1, dtype_rule=_FLOAT_OUT,
        doc="Each row divided by its largest value (MAX), its L1 or L2 norm; a row whose "
            "divisor is 0 is copied unchanged (onnxruntime).")

# -- Imputer -----------------------------------------------------------------------------------


def imputer_values(attrs: dict[str, Any]) -> tuple[np.ndarray, Any]:
    """(the imputed values, the value replaced), from the float or the int64 attributes."""
    if attrs["imputed_value_floats"]:
        return np.asarray(attrs["imputed_value_floats"], np.float32), \
            np.float32(attrs["replaced_value_float"])
    return np.asarray(attrs["imputed_value_int64s"] or (), np.int64), \
        np.int64(attrs["replaced_value_int64"])


def _imputer_infer(ctx: InferContext) -> list[TensorType]:
    require_numeric(ctx)
    floats, ints = ctx.attrs["imputed_value_floats"], ctx.attrs["imputed_value_int64s"]
    if bool(floats) == bool(ints):
        ctx.fail("exactly one of imputed_value_floats and imputed_value_int64s must be given")
    if bool(floats) != (ctx.dtype(0).kind == "f"):
        ctx.fail(f"X is {ctx.dtype(0).name}: give imputed_value_"
                 f"{'floats' if ctx.dtype(0).kind == 'f' else 'int64s'}")
    features = ctx.shape(0)[-1] if ctx.shape(0) else 1
    per_feature(ctx, "imputed values", floats or ints, features)
    return [ctx.type(0)]


declare("Imputer", domain=ML, inputs=("X",), outputs=("Y",), infer=_imputer_infer,
        attrs={"imputed_value_floats": Attr("floats", ()),
               "imputed_value_int64s": Attr("ints", ()),
               "replaced_value_float": Attr("float", 0.0),
               "replaced_value_int64": Attr("int", 0)}, onnx_since=1,
        doc="Replaces each replaced_value (NaN when it is NaN) by its feature's imputed value.")

# -- OneHotEncoder and CategoryMapper ----------------------------------------------------------


def one_hot_categories(attrs: dict[str, Any]) -> np.ndarray:
    """The categories, int64 or strings (object), in output order."""
    if attrs["cats_int64s"]:
        return np.asarray(attrs["cats_int64s"], np.int64)
    return np.asarray([str(s) for s in attrs["cats_strings"] or ()], dtype=STRING)


def _one_hot_infer(ctx: InferContext) -> list[TensorType]:
    ints, strings = ctx.attrs["cats_int64s"], ctx.attrs["cats_strings"]
    if bool(ints) == bool(strings):
        ctx.fail("exactly one of cats_int64s and cats_strings must be given")
    x = ctx.dtype(0)
    if strings and x != STRING or ints and x.name not in NUMERIC:
        ctx.fail(f"X is {x.name} but the categories are "
                 f"{'strings' if strings else 'int64s'}")
    return [TensorType(ctx.shape(0) + (len(ints or strings),), FLOAT)]


declare("OneHotEncoder", domain=ML, inputs=("X",), outputs=("Y",), infer=_one_hot_infer,
        attrs={"cats_int64s": Attr("ints", ()), "cats_strings": Attr("strings", ()),
               "zeros": Attr("int", 1)}, onnx_since=1, dtype_rule=_FLOAT_OUT,
        doc="One float32 column per category (numbers compare as int64); with zeros=0 a "
            "value of no category is an error.")


def _category_infer(ctx: InferContext) -> list[TensorType]:
    ints, strings = ctx.attrs["cats_int64s"], ctx.attrs["cats_strings"]
    if len(ints) != len(strings):
        ctx.fail(f"cats_int64s has {len(ints)} values, cats_strings {len(strings)}")
    x = ctx.dtype(0)
    if x not in (STRING, np.dtype(np.int64)):
        ctx.fail(f"X must be strings or int64, got {x.name}")
    return [TensorType(ctx.shape(0), np.dtype(np.int64) if x == STRING else STRING)]


def _category_dtype(ctx: DtypeContext) -> list[np.dtype | None]:
    x = ctx.dtype(0)
    return [None if x is None else np.dtype(np.int64) if x == STRING else STRING]


declare("CategoryMapper", domain=ML, inputs=("X",), outputs=("Y",), infer=_category_infer,
        attrs={"cats_int64s": Attr("ints", ()), "cats_strings": Attr("strings", ()),
               "default_int64": Attr("int", -1), "default_string": Attr("string", "_Unused")},
        onnx_since=1, dtype_rule=_category_dtype,
        doc="Strings to int64 through the paired lists, or int64 to strings; others take "
            "the default.")

# -- FeatureVectorizer -------------------------------------------------------------------------


def _vectorizer_infer(ctx: InferContext) -> list[TensorType]:
    dims = list(ctx.attrs["inputdimensions"])
    if len(dims) != len(ctx) or any(d < 0 for d in dims):
        ctx.fail(f"inputdimensions {dims} must give one size (>= 0) per input ({len(ctx)})")
    rows = None
    for i in range(len(ctx)):
        require_numeric(ctx, i)
        shape = ctx.shape(i)
        if not shape:
            ctx.fail(f"input #{i} is a scalar; each input is (N, ...) or (N,)")
        if rows is not None and shape[0] != rows:
            ctx.fail(f"input #{i} has {shape[0]} rows, input #0 {rows}")
        rows = shape[0]
    return [TensorType((rows, int(sum(dims))), FLOAT)]


declare("FeatureVectorizer", domain=ML, inputs=("X*",), outputs=("Y",),
        infer=_vectorizer_infer, attrs={"inputdimensions": Attr("ints", ())}, onnx_since=1,
        dtype_rule=_FLOAT_OUT,
        doc="Concatenates its inputs' rows, each cut or zero-padded to its inputdimensions.")

# -- LinearRegressor ---------------------------------------------------------------------------


def linear_weights(ctx: Any, rows: int, features: int) -> None:
    """Refuse coefficients that are not ``rows`` x ``features`` or intercepts not ``rows``."""
    coefficients, intercepts = ctx.attrs["coefficients"], ctx.attrs["intercepts"]
    if features is not None and len(coefficients) != rows * features:
        ctx.fail(f"coefficients has {len(coefficients)} values; {rows} x {features} "
                 f"(targets or classes x features) expected")
    if intercepts and len(intercepts) != rows:
        ctx.fail(f"intercepts has {len(intercepts)} values, {rows} expected")


def _linear_regressor_infer(ctx: InferContext) -> list[TensorType]:
    require_numeric(ctx)
    require_post_transform(ctx)
    rows, features = batch_of(ctx)
    targets = ctx.attrs["targets"]
    if targets < 1:
        ctx.fail(f"targets must be >= 1, got {targets}")
    linear_weights(ctx, targets, features)
    return [TensorType((rows, targets), FLOAT)]


declare("LinearRegressor", domain=ML, inputs=("X",), outputs=("Y",),
        infer=_linear_regressor_infer,
        attrs={"coefficients": Attr("floats", ()), "intercepts": Attr("floats", ()),
               "post_transform": Attr("string", "NONE"), "targets": Attr("int", 1)},
        onnx_since=1, dtype_rule=_FLOAT_OUT,
        doc="Y = X coefficients^T + intercepts, one column per target, then post_transform.")

# -- LinearClassifier --------------------------------------------------------------------------


def class_labels(attrs: dict[str, Any]) -> np.ndarray:
    """A classifier's labels: int64, or strings (object) when classlabels_strings is set."""
    if attrs.get("classlabels_strings"):
        return np.asarray([str(s) for s in attrs["classlabels_strings"]], dtype=STRING)
    return np.asarray(attrs.get("classlabels_ints") or (), np.int64)


def label_dtype(attrs: dict[str, Any]) -> np.dtype:
    return STRING if attrs.get("classlabels_strings") else np.dtype(np.int64)


def _require_labels(ctx: Any) -> int:
    ints, strings = ctx.attrs["classlabels_ints"], ctx.attrs["classlabels_strings"]
    if bool(ints) == bool(strings):
        ctx.fail("exactly one of classlabels_ints and classlabels_strings must be given")
    return len(ints or strings)


def linear_score_columns(attrs: dict[str, Any]) -> int:
    """LinearClassifier's score columns: one per intercept, or two when one score stands
    for a two-label problem (onnxruntime adds the negative class)."""
    classes = len(attrs["intercepts"])
    labels = len(attrs["classlabels_ints"] or attrs["classlabels_strings"] or ())
    return 2 if classes == 1 and labels == 2 else classes


def _linear_classifier_infer(ctx: InferContext) -> list[TensorType]:
    require_numeric(ctx)
    require_post_transform(ctx)
    rows, features = batch_of(ctx)
    labels = _require_labels(ctx)
    classes = len(ctx.attrs["intercepts"])
    if classes < 1:
        ctx.fail("intercepts must give one value per class (their count is the class count)")
    linear_weights(ctx, classes, features)
    if classes == 1 and labels != 2:
        ctx.fail(f"one score (one intercept) is a binary classifier and needs 2 class labels, "
                 f"got {labels}")
    return [TensorType((rows,), label_dtype(ctx.attrs)),
            TensorType((rows, linear_score_columns(ctx.attrs)), FLOAT)]


def label_and_scores_dtypes(ctx: DtypeContext) -> list[np.dtype]:
    return [label_dtype(ctx.attrs), FLOAT][:len(ctx.outputs)]


declare("LinearClassifier", domain=ML, inputs=("X",), outputs=("Y", "Z"),
        infer=_linear_classifier_infer,
        attrs={"classlabels_ints": Attr("ints", ()), "classlabels_strings": Attr("strings", ()),
               "coefficients": Attr("floats"), "intercepts": Attr("floats", ()),
               "multi_class": Attr("int", 0), "post_transform": Attr("string", "NONE")},
        onnx_since=1, dtype_rule=label_and_scores_dtypes,
        doc="Scores X coefficients^T + intercepts per class; the label of the largest raw "
            "score (one score: positive when > 0); the scores after post_transform.")
