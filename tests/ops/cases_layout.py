"""Op-table cases: Size, DepthToSpace / SpaceToDepth, Hardmax."""
import numpy as np

from tests.ops.harness import Case, rand

TIES = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, -1.0, 2.0]], np.float32)

CASES = [
    Case("Size", [rand(2, 3, 4)]),
    Case("Size", [np.zeros((0, 3), np.int32)], name="empty"),
    Case("DepthToSpace", [rand(2, 8, 3, 2)], attrs={"blocksize": 2}),
    Case("DepthToSpace", [rand(1, 18, 2, 3)], attrs={"blocksize": 3, "mode": "CRD"},
         name="crd"),
    Case("SpaceToDepth", [rand(2, 3, 4, 6)], attrs={"blocksize": 2}),
    Case("SpaceToDepth", [rand(1, 2, 6, 3)], attrs={"blocksize": 3, "mode": "CRD"},
         name="crd"),
    Case("Hardmax", [rand(3, 5)]),
    Case("Hardmax", [rand(2, 3, 4)], attrs={"axis": 1}, name="axis1"),
    Case("Hardmax", [TIES], name="first_of_ties"),
]
