"""ai.onnx.ml classifiers with string class labels (classlabels_strings), on the CPU against
onnxruntime: their label output is a string tensor, which OpenCL does not hold, so they are
not op-table cases (those run on every backend)."""
from __future__ import annotations

import pytest

from tests.ops.cases_ml_models import _BINARY, _CLASSIFIER, _SVC3, _XT
from tests.ops.harness import Case, assert_output_matches, rand, run_ours
from tests.ops.ml_runtime import onnxruntime_reference

ML = "ai.onnx.ml."
_X = rand(5, 3, seed=11)
_W = rand(3, 3, seed=5).reshape(-1).tolist()
_NAMES = {"classlabels_strings": ["setosa", "versicolor", "virginica"]}

CASES = [
    Case(ML + "LinearClassifier", [_X], {"coefficients": _W[:3], "intercepts": [0.1],
                                         "classlabels_strings": ["no", "yes"]},
         outputs=2, grad=False, name="binary"),
    Case(ML + "LinearClassifier", [_X], {"coefficients": _W, "intercepts": [0.1, 0.2, -0.3],
                                         "post_transform": "SOFTMAX", **_NAMES},
         outputs=2, grad=False, name="three_classes"),
    Case(ML + "SVMClassifier", [_X], {**{k: v for k, v in _SVC3.items()
                                         if k != "classlabels_ints"}, **_NAMES},
         outputs=2, grad=False, name="svc"),
    Case(ML + "TreeEnsembleClassifier", [_XT], {**{k: v for k, v in _CLASSIFIER.items()
                                                  if k != "classlabels_int64s"}, **_NAMES},
         outputs=2, grad=False, name="trees"),
    Case(ML + "TreeEnsembleClassifier", [_XT], {
        **{k: v for k, v in _BINARY.items() if k != "classlabels_int64s"},
        "classlabels_strings": ["no", "yes"], "class_weights": [0.2, 0.7, 0.4, 0.3, 0.1]},
        outputs=2, grad=False, name="trees_binary"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_string_labels_match_onnxruntime(case):
    want = onnxruntime_reference(case.op, case.outputs)(list(case.inputs), dict(case.attrs))
    got = run_ours(case)
    assert got[0].dtype == object
    for j, (g, w) in enumerate(zip(got, want)):
        assert_output_matches(g, w, Case(case.op, case.inputs, rtol=1e-4, atol=1e-5,
                                         name=case.name), j)
