"""Op-table cases: movement ops."""
import numpy as np

from tests.ops.harness import Case, rand

CASES = [
    Case("Reshape", [rand(2, 3, 4), np.array([3, -1, 0], np.int64)], const=(1,)),
    Case("Expand", [rand(3, 1), np.array([2, 3, 4], np.int64)], const=(1,)),
    Case("Transpose", [rand(2, 3, 4)], attrs={"perm": [1, 2, 0]}),
    Case("Transpose", [rand(2, 3)], name="default"),
    Case("ConstantOfShape", [np.array([2, 3], np.int64)], const=(0,),
         attrs={"value": np.array([1.5], np.float32)}),
]
