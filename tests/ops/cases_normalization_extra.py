"""Op-table cases: LpNormalization and MeanVarianceNormalization.

onnx.reference's LpNormalization sums x^p without the absolute value, which is the 1-norm only
for non-negative data: p = 1 cases with negative values use the spec's definition in NumPy.
A slice of zeros normalises to zeros (0/0 = 0) but has no derivative there, so that case
checks the forward pass only.
"""
import numpy as np

from tests.ops.harness import Case, rand


def l1_reference(inputs, attrs):
    x = inputs[0].astype(np.float64)
    norm = np.sum(np.abs(x), axis=attrs.get("axis", -1), keepdims=True)
    return [np.where(norm == 0, 0, x / np.where(norm == 0, 1, norm)).astype(inputs[0].dtype)]


_WITH_ZERO_ROW = rand(3, 4, seed=5)
_WITH_ZERO_ROW[1] = 0

LP_NORMALIZATION = [
    Case("LpNormalization", [rand(2, 3, 4)], name="default_p2_last_axis"),
    Case("LpNormalization", [rand(3, 4, 2)], attrs={"axis": 0, "p": 2}, name="axis0"),
    Case("LpNormalization", [rand(2, 5, 3, low=0.1)], attrs={"axis": 1, "p": 1},
         name="p1_positive"),
    Case("LpNormalization", [rand(4, 3, 2)], attrs={"axis": -2, "p": 1},
         reference=l1_reference, name="p1_signed"),
    Case("LpNormalization", [_WITH_ZERO_ROW], attrs={"axis": 1}, grad=False,
         name="zero_slice"),
]

MEAN_VARIANCE_NORMALIZATION = [
    Case("MeanVarianceNormalization", [rand(2, 3, 4, 5)], name="default_axes", rtol=1e-4,
         atol=1e-5),
    Case("MeanVarianceNormalization", [rand(3, 4, 5, seed=1)], attrs={"axes": [1]},
         name="one_axis", rtol=1e-4, atol=1e-5),
    Case("MeanVarianceNormalization", [rand(2, 3, 4, seed=2)], attrs={"axes": [0, -1]},
         name="negative_axis", rtol=1e-4, atol=1e-5),
]

CASES = LP_NORMALIZATION + MEAN_VARIANCE_NORMALIZATION
