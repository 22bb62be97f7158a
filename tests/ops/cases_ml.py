"""Op-table cases: the ai.onnx.ml ops (Binarizer, ArrayFeatureExtractor, LabelEncoder,
TreeEnsemble), against onnx.reference's evaluator of that domain. (String-keyed LabelEncoder
cases, which OpenCL cannot hold, are in ``tests/ops/test_onnx_domains.py``.)"""
from __future__ import annotations

import numpy as np

from tests.ops.harness import Case, rand, run_reference

ML = "ai.onnx.ml."

CASES = [
    Case(ML + "Binarizer", [rand(3, 4)], {"threshold": 0.25}, grad=False),
    Case(ML + "Binarizer", [np.array([[-2, 0, 1, 5]], np.int64)], {}, grad=False,
         name="int64_default_threshold"),
    Case(ML + "Binarizer", [np.array([np.nan, 0.5, -1.0], np.float64)], {"threshold": 0.0},
         grad=False, name="nan_is_zero"),
    Case(ML + "ArrayFeatureExtractor", [rand(3, 5), np.array([4, 0, 2], np.int64)],
         grad=False),
    Case(ML + "ArrayFeatureExtractor", [rand(6), np.array([1, 5], np.int64)], grad=False,
         name="vector_gives_one_row"),
    Case(ML + "ArrayFeatureExtractor", [rand(2, 3, 4), np.array([[3, 1], [0, 0]], np.int64)],
         grad=False, name="rank3_matrix_indices"),
    Case(ML + "LabelEncoder", [np.array([[1, 7, 3], [2, 9, 1]], np.int64)],
         {"keys_int64s": [1, 2, 3], "values_floats": [0.5, 1.5, 2.5], "default_float": -3.0},
         grad=False, name="int_to_float"),
    Case(ML + "LabelEncoder", [np.array([0.5, np.nan, 2.0, 7.0], np.float32)],
         {"keys_floats": [2.0, np.nan, 0.5], "values_int64s": [20, 99, 5]}, grad=False,
         # ONNX compares keys bit for bit, "so even a float NaN can be mapped" (the spec;
         # onnxruntime does; onnx.reference's dict look-up misses NaN): the spec's answer
         reference=lambda inputs, attrs: [np.array([5, 99, 20, -1], np.int64)],
         name="float_to_int_nan_key"),
    Case(ML + "LabelEncoder", [np.array([3, 4, 5], np.int64)],
         {"keys_tensor": np.array([5, 3], np.int64),
          "values_tensor": np.array([50, 30], np.int16),
          "default_tensor": np.array([7], np.int16)}, grad=False, name="tensors"),
]

# One small forest over three features: tree 0 (nodes 0-2) and tree 1 (nodes 3-4), with every
# comparison mode but membership, two targets.
_FOREST = {
    "n_targets": 2, "tree_roots": [0, 3],
    "nodes_featureids": [0, 1, 2, 2, 0],
    "nodes_modes": np.array([0, 3, 4, 1, 5], np.uint8),
    "nodes_splits": np.array([0.0, 0.5, 0.25, -0.2, 0.1], np.float32),
    "nodes_truenodeids": [1, 0, 2, 4, 3], "nodes_trueleafs": [0, 1, 1, 0, 1],
    "nodes_falsenodeids": [2, 1, 3, 2, 4], "nodes_falseleafs": [0, 1, 1, 1, 1],
    "leaf_targetids": [0, 1, 0, 1, 0, 1],
    "leaf_weights": np.array([1.0, 2.0, -3.0, 4.5, 0.25, -1.0], np.float32),
}
_X = rand(7, 3)
_X[2, 2] = 0.25  # on a split: EQ goes true, LT false



def _unreached_as_zero(inputs, attrs):
    """onnx.reference's MIN/MAX answer, except that a target no leaf reached is 0 (as in
    onnxruntime, whose scores start at 0) instead of the float type's largest magnitude."""
    case = Case(ML + "TreeEnsemble", inputs, attrs)
    out = run_reference(case)[0]
    return [np.where(np.abs(out) == np.finfo(out.dtype).max, 0, out).astype(out.dtype)]


CASES += [
    Case(ML + "TreeEnsemble", [_X], {**_FOREST, "aggregate_function": agg}, grad=False,
         name=name, reference=None if agg < 2 else _unreached_as_zero)
    for agg, name in ((1, "sum"), (0, "average"), (2, "min"), (3, "max"))
]
CASES += [
    Case(ML + "TreeEnsemble", [np.array([[1.2], [3.4], [-0.12], [np.nan], [12], [7]],
                                        np.float64)],
         {"n_targets": 3, "aggregate_function": 1, "tree_roots": [0],
          "nodes_featureids": [0, 0], "nodes_modes": np.array([6, 0], np.uint8),
          "nodes_splits": np.array([0.0, 5.0], np.float64),
          "membership_values": np.array([1.2, 7.0, np.nan], np.float64),
          "nodes_missing_value_tracks_true": [0, 1],
          "nodes_truenodeids": [0, 1], "nodes_trueleafs": [1, 1],
          "nodes_falsenodeids": [1, 2], "nodes_falseleafs": [0, 1],
          "leaf_targetids": [0, 1, 2],
          "leaf_weights": np.array([10.0, 20.0, 30.0], np.float64)},
         grad=False, name="membership_missing_tracks_true"),
]
