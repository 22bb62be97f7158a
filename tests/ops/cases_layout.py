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

def _one_hot_spec(inputs, attrs):
    """OneHot as the spec words it: indices cast to int64 first (onnx.reference compares
    float indices uncast, so 1.7 matches nothing there), negatives counted from the end."""
    indices, depth, values = inputs
    depth = int(np.asarray(depth).reshape(-1)[0])
    index = indices.astype(np.int64)
    index = np.where(index < 0, index + depth, index)
    hot = np.stack([index == k for k in range(depth)], axis=attrs.get("axis", -1))
    return [np.where(hot, values[1], values[0]).astype(values.dtype)]


CASES += [
    Case("OneHot", [np.array([[0, 2], [-1, 5]], np.int64), np.array(4, np.int64),
                    np.array([0.0, 1.0], np.float32)], const=(1,)),
    Case("OneHot", [np.array([1, 0, 2], np.int32), np.array(3, np.int64),
                    np.array([-2, 7], np.int32)], const=(1,), attrs={"axis": 0}, name="axis0"),
    Case("OneHot", [np.array([1.7, -2.0], np.float32), np.array(3.0, np.float32),
                    np.array([0.5, 3.5], np.float64)], const=(1,), name="float_indices",
         reference=_one_hot_spec),
]
