"""Op-table cases: reductions."""
import numpy as np

from tests.ops.harness import Case, rand

CASES = [
    Case("ReduceSum", [rand(2, 3, 4), np.array([1], np.int64)], const=(1,)),
    Case("ReduceSum", [rand(2, 3, 4), np.array([0, 2], np.int64)], const=(1,),
         attrs={"keepdims": 0}, name="nokeep"),
    Case("ReduceSum", [rand(2, 3)], name="all"),
]
