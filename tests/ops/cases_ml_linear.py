"""Op-table cases: the preprocessing and linear ai.onnx.ml ops (Scaler, Normalizer, Imputer,
OneHotEncoder, CategoryMapper, FeatureVectorizer, LinearRegressor, LinearClassifier), against
onnx.reference where it gives onnxruntime's answer, and against onnxruntime itself where the
two differ (Normalizer's MAX, classifier score columns). OpenCL refuses string tensors, so
string inputs are refused there; classifiers with string labels (a string output from numeric
inputs) are checked on the CPU in ``tests/ops/test_ml_string_labels.py``."""
from __future__ import annotations

import numpy as np

from tests.ops.harness import Case, rand
from tests.ops.ml_runtime import onnxruntime_reference

ML = "ai.onnx.ml."

_X = rand(5, 3, seed=11)
_HOLES = _X.copy()
_HOLES[1, 2] = _HOLES[3, 0] = np.nan

CASES = [
    Case(ML + "Scaler", [_X], {"offset": [0.5, -1.0, 2.0], "scale": [2.0, 0.5, 1.0]},
         grad=False),
    Case(ML + "Scaler", [np.array([[1, -2], [3, 4]], np.int64)],
         {"offset": [0.5], "scale": [2.0]}, grad=False, name="int64_broadcast",
         # (the output is float32 whatever X is; onnx.reference keeps int64)
         reference=onnxruntime_reference(ML + "Scaler")),
    Case(ML + "Normalizer", [_X], {"norm": "L1"}, grad=False, name="l1"),
    Case(ML + "Normalizer", [_X], {"norm": "L2"}, grad=False, name="l2"),
    Case(ML + "Normalizer", [np.array([[1.0, -4.0, 2.0], [-1.0, -2.0, -0.5], [0, 0, 0]],
                                      np.float32)],
         {"norm": "MAX"}, grad=False, name="max_signed_and_zero_row",
         # (onnx.reference divides by the largest magnitude and floors it at 1e-30)
         reference=onnxruntime_reference(ML + "Normalizer")),
    Case(ML + "Imputer", [_HOLES], {"imputed_value_floats": [1.0, 2.0, 3.0],
                                    "replaced_value_float": float("nan")}, grad=False,
         name="nan"),
    Case(ML + "Imputer", [np.array([[1, 0, 3], [0, 5, 0]], np.int64)],
         {"imputed_value_int64s": [7], "replaced_value_int64": 0}, grad=False,
         name="int64_one_value"),
    Case(ML + "OneHotEncoder", [np.array([[1, 3], [2, 9]], np.int64)],
         {"cats_int64s": [3, 1, 2]}, grad=False),
    Case(ML + "OneHotEncoder", [np.array([4.0, 1.0, 7.0], np.float64)],
         {"cats_int64s": [1, 4]}, grad=False, name="doubles_as_int64"),
    Case(ML + "FeatureVectorizer", [rand(4, 2), rand(4, 3, seed=2), rand(4, 1, seed=3)],
         {"inputdimensions": [2, 2, 3]}, grad=False, name="cut_and_pad"),
    Case(ML + "FeatureVectorizer", [np.arange(12, dtype=np.int64).reshape(4, 3)],
         {"inputdimensions": [4]}, grad=False, name="int64_to_float",
         # (the output is float32; onnx.reference keeps int64)
         reference=onnxruntime_reference(ML + "FeatureVectorizer")),
    Case(ML + "LinearRegressor", [_X], {"coefficients": [1.0, 2, 3, -1, 0.5, 2],
                                        "intercepts": [0.5, -0.5], "targets": 2}, grad=False),
    Case(ML + "LinearRegressor", [rand(3, 3, seed=4, dtype=np.float64)],
         {"coefficients": [0.3, -0.2, 0.1]}, grad=False, name="double_one_target",
         # (float32 scores whatever X is; onnxruntime has no double kernel, onnx.reference
         # answers in double)
         reference=lambda inputs, attrs: [
             (inputs[0] @ np.asarray(attrs["coefficients"])[:, None]).astype(np.float32)]),
    Case(ML + "LinearRegressor", [_X], {"coefficients": [1.0, 2, 3, -1, 0.5, 2],
                                        "intercepts": [0.5, -0.5], "targets": 2,
                                        "post_transform": "SOFTMAX"}, grad=False,
         name="softmax", reference=onnxruntime_reference(ML + "LinearRegressor")),
]

_W = rand(3, 3, seed=5).reshape(-1).tolist()
CASES += [
    Case(ML + "LinearClassifier", [_X], {"coefficients": _W, "intercepts": [0.1, 0.2, -0.3],
                                         "classlabels_ints": [4, 5, 6], "post_transform": post},
         outputs=2, grad=False, name=f"three_classes_{post.lower()}",
         reference=onnxruntime_reference(ML + "LinearClassifier", 2))
    for post in ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO")
]
CASES += [
    Case(ML + "LinearClassifier", [_X], {"coefficients": _W[:3], "intercepts": [0.1],
                                         "classlabels_ints": [0, 1], "post_transform": post},
         outputs=2, grad=False, name=f"binary_{post.lower()}",
         reference=onnxruntime_reference(ML + "LinearClassifier", 2))
    for post in ("NONE", "LOGISTIC")
]

# strings (OpenCL refuses string inputs, and these ops are host-only there)
CASES += [
    Case(ML + "OneHotEncoder", [np.array([["a", "b"], ["c", "z"]], object)],
         {"cats_strings": ["b", "a", "c"]}, grad=False, name="strings"),
    Case(ML + "CategoryMapper", [np.array([["a", "b"], ["c", "z"]], object)],
         {"cats_strings": ["b", "a", "c"], "cats_int64s": [5, 6, 7]}, grad=False,
         name="strings_to_int64", reference=onnxruntime_reference(ML + "CategoryMapper")),
    Case(ML + "CategoryMapper", [np.array([5, 7, 1], np.int64)],
         {"cats_strings": ["b", "a", "c"], "cats_int64s": [5, 6, 7], "default_string": "?"},
         grad=False, name="int64_to_strings",
         reference=onnxruntime_reference(ML + "CategoryMapper")),
]
