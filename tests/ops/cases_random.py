"""Op-table cases: the random ops, in configurations whose draws are certain (zero scale,
empty ranges, probabilities 0 and 1, one possible class), so that onnx.reference's values are
ours exactly. Their statistics and seeds are tested in ``tests/ops/test_random_ops.py``."""
from __future__ import annotations

import numpy as np

from tests.ops.harness import Case, rand

CASES = [
    Case("RandomNormal", [], {"shape": [3, 4], "mean": 1.5, "scale": 0.0}, grad=False),
    Case("RandomNormal", [], {"shape": [2, 2], "mean": -1.0, "scale": 0.0, "dtype": 11,
                              "seed": 3.0}, grad=False, name="double_seeded"),
    Case("RandomUniform", [], {"shape": [5], "low": 2.0, "high": 2.0}, grad=False),
    Case("RandomUniform", [], {"shape": [2, 3], "low": -1.0, "high": -1.0, "dtype": 10},
         grad=False, name="float16"),
    Case("RandomNormalLike", [rand(2, 3)], {"mean": 0.5, "scale": 0.0}, grad=False),
    Case("RandomNormalLike", [np.zeros((4,), np.int32)], {"scale": 0.0, "dtype": 11},
         grad=False, name="int_input_double_output"),
    Case("RandomUniformLike", [rand(3, 2, dtype=np.float64)], {"low": 3.0, "high": 3.0},
         grad=False),
    Case("Bernoulli", [np.array([[0.0, 1.0, 1.0], [0.0, 0.0, 1.0]], np.float32)], {},
         grad=False),
    Case("Bernoulli", [np.array([1.0, 0.0, 1.0], np.float64)], {"dtype": 7, "seed": 1.0},
         grad=False, name="int64_seeded"),
    Case("Multinomial", [np.array([[0.0, -np.inf, -np.inf], [-np.inf, -np.inf, 0.0]],
                                  np.float32)],
         {"sample_size": 4}, grad=False,  # (onnx.reference has no Multinomial)
         reference=lambda inputs, attrs: [np.array([[0] * 4, [2] * 4], np.int32)]),
    Case("Multinomial", [np.array([[-np.inf, 0.0]], np.float64)],
         {"sample_size": 3, "dtype": 7, "seed": 2.0}, grad=False, name="int64",
         reference=lambda inputs, attrs: [np.ones((1, 3), np.int64)]),
]
