"""Op-table cases: SVMRegressor, SVMClassifier, TreeEnsembleRegressor and
TreeEnsembleClassifier. Regressors are checked against onnx.reference; classifiers, whose
labels and score columns onnxruntime defines (votes, one-score binary problems), against
onnxruntime (``tests/ops/ml_runtime.py``; skipped without it)."""
from __future__ import annotations

import numpy as np

from tests.ops.harness import Case, rand
from tests.ops.ml_runtime import onnxruntime_reference

ML = "ai.onnx.ml."
_X = rand(6, 3, seed=21)
_SUPPORTS = rand(4, 3, seed=22).reshape(-1).tolist()


def _svm(kernel, **more):
    return {"kernel_type": kernel, "kernel_params": [0.7, 0.3, 2.0], **more}


CASES = [
    Case(ML + "SVMRegressor", [_X], _svm(kernel, n_supports=4, support_vectors=_SUPPORTS,
                                         coefficients=[0.5, -1.0, 0.25, 2.0], rho=[0.1]),
         grad=False, name=kernel.lower(), rtol=1e-4, atol=1e-5)
    for kernel in ("LINEAR", "POLY", "RBF", "SIGMOID")
]
CASES += [
    Case(ML + "SVMRegressor", [_X], {"coefficients": [0.5, -1.0, 2.0], "rho": [0.3]},
         grad=False, name="linear_no_supports"),
    Case(ML + "SVMRegressor", [_X], _svm("RBF", n_supports=4, support_vectors=_SUPPORTS,
                                         coefficients=[0.5, -1.0, 0.25, 2.0], rho=[-0.4],
                                         one_class=1), grad=False, name="one_class"),
]

# three classes with 2, 1 and 2 supports (libsvm's one-vs-one layout)
_SVC3 = _svm("RBF", classlabels_ints=[3, 5, 7], vectors_per_class=[2, 1, 2],
             support_vectors=rand(5, 3, seed=23).reshape(-1).tolist(),
             coefficients=rand(2, 5, seed=24, low=-2, high=2).reshape(-1).tolist(),
             rho=[0.1, -0.2, 0.05])
_SVC2 = _svm("POLY", classlabels_ints=[0, 1], vectors_per_class=[2, 2],
             support_vectors=rand(4, 3, seed=25).reshape(-1).tolist(),
             coefficients=[1.0, -0.5, 0.75, -1.25], rho=[0.2])
_PLATT3 = {"prob_a": [-1.5, -2.0, -0.8], "prob_b": [0.1, -0.2, 0.05]}


def _svc(attrs, name):
    return Case(ML + "SVMClassifier", [_X], attrs, outputs=2, grad=False, name=name,
                rtol=1e-4, atol=1e-5, reference=onnxruntime_reference(ML + "SVMClassifier", 2))


CASES += [
    _svc(_SVC3, "three_classes_votes"),
    _svc({**_SVC3, "post_transform": "LOGISTIC"}, "three_classes_logistic"),
    _svc({**_SVC3, **_PLATT3}, "three_classes_platt"),
    _svc(_SVC2, "binary"),
    _svc({**_SVC2, "post_transform": "LOGISTIC"}, "binary_logistic"),
    _svc({**_SVC2, "post_transform": "SOFTMAX"}, "binary_softmax"),
    _svc({**_SVC2, "prob_a": [-1.2], "prob_b": [0.3]}, "binary_platt"),
    _svc({"classlabels_ints": [1, 2, 3], "coefficients": rand(3, 3, seed=26).reshape(-1).tolist(),
          "rho": [0.2], "kernel_type": "LINEAR", "kernel_params": [0.0, 0.0, 1.0]},
         "linear_three_classes"),
]

# Two trees over three features (tree 0: nodes 0-4, tree 1: nodes 0-2), the leaves weighting
# two targets; every comparison mode, and a NaN that one node sends to its true branch.
_TREES = {
    "nodes_treeids": [0, 0, 0, 0, 0, 1, 1, 1],
    "nodes_nodeids": [0, 1, 2, 3, 4, 0, 1, 2],
    "nodes_featureids": [0, 1, 0, 0, 0, 2, 0, 0],
    "nodes_modes": ["BRANCH_LEQ", "BRANCH_GT", "LEAF", "LEAF", "LEAF", "BRANCH_LT", "LEAF",
                    "LEAF"],
    "nodes_values": [0.1, -0.3, 0, 0, 0, 0.25, 0, 0],
    "nodes_truenodeids": [1, 2, 0, 0, 0, 1, 0, 0],
    "nodes_falsenodeids": [4, 3, 0, 0, 0, 2, 0, 0],
    "nodes_missing_value_tracks_true": [0, 1, 0, 0, 0, 0, 0, 0],
}
_LEAVES = {"treeids": [0, 0, 0, 0, 1, 1], "nodeids": [2, 3, 4, 4, 1, 2],
           "ids": [0, 1, 0, 1, 0, 1], "weights": [1.5, -2.0, 0.5, 3.0, -1.0, 0.25]}
_XT = _X.copy()
_XT[2, 1] = np.nan
_REGRESSOR = {**_TREES, "n_targets": 2,
              **{f"target_{k}": v for k, v in _LEAVES.items()}}

CASES += [
    Case(ML + "TreeEnsembleRegressor", [_XT], {**_REGRESSOR, "aggregate_function": agg},
         grad=False, name=agg.lower())
    for agg in ("SUM", "AVERAGE")
]
CASES += [
    Case(ML + "TreeEnsembleRegressor", [_XT], {**_REGRESSOR, "aggregate_function": agg},
         grad=False, name=agg.lower(),
         # (a target no leaf reached scores 0 in onnxruntime, the type's extreme in
         # onnx.reference)
         reference=onnxruntime_reference(ML + "TreeEnsembleRegressor"))
    for agg in ("MIN", "MAX")
]
CASES += [
    Case(ML + "TreeEnsembleRegressor", [_XT.astype(np.float64)],
         {**_REGRESSOR, "base_values": [0.5, -0.5], "post_transform": "SOFTMAX"}, grad=False,
         name="base_values_softmax_double",
         reference=onnxruntime_reference(ML + "TreeEnsembleRegressor")),
]

_CLASSIFIER = {**_TREES, "classlabels_int64s": [10, 20, 30],
               "class_treeids": [0, 0, 0, 0, 1, 1, 1], "class_nodeids": [2, 3, 4, 4, 1, 2, 2],
               "class_ids": [0, 1, 2, 1, 0, 1, 2],
               "class_weights": [0.9, 0.6, 0.3, 0.2, 0.4, 0.1, 0.5]}
_BINARY = {**_TREES, "classlabels_int64s": [0, 1], "class_treeids": [0, 0, 0, 1, 1],
           "class_nodeids": [2, 3, 4, 1, 2], "class_ids": [0, 0, 0, 0, 0]}


def _trees(attrs, name):
    return Case(ML + "TreeEnsembleClassifier", [_XT], attrs, outputs=2, grad=False, name=name,
                reference=onnxruntime_reference(ML + "TreeEnsembleClassifier", 2))


CASES += [
    _trees(_CLASSIFIER, "three_classes"),
    _trees({**_CLASSIFIER, "post_transform": "SOFTMAX", "base_values": [0.1, 0.0, -0.1]},
           "three_classes_base_softmax"),
    _trees({**_BINARY, "class_weights": [0.2, 0.7, 0.4, 0.3, 0.1]}, "binary_probabilities"),
    _trees({**_BINARY, "class_weights": [0.2, -0.7, 0.4, -0.3, 0.1]}, "binary_margin"),
    _trees({**_BINARY, "class_weights": [0.2, -0.7, 0.4, -0.3, 0.1],
            "post_transform": "LOGISTIC"}, "binary_margin_logistic"),
]
