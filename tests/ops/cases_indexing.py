"""Op-table cases: GatherElements and its scatter-add gradient."""
import numpy as np

from tests.ops.harness import Case, rand


def _index(shape, size, seed, dtype=np.int64):
    """Indices in [-size, size): negative ones count from the end."""
    return np.random.default_rng(seed).integers(-size, size, shape).astype(dtype)


def _gather_reference(inputs, attrs):
    """out[i, j] = data[indices[i, j], j] (axis 0) or data[i, indices[i, j]] (axis 1), by loop
    (onnx.reference refuses indices shorter than the data off the axis, which ONNX allows)."""
    data, indices = inputs
    axis = attrs["axis"] % data.ndim
    out = np.empty(indices.shape, data.dtype)
    for where in np.ndindex(*indices.shape):
        source = list(where)
        source[axis] = indices[where] % data.shape[axis]
        out[where] = data[tuple(source)]
    return [out]


def _scatter_reference(inputs, attrs):
    """Zeros of ``shape``, with dy added at the indices (np.add.at: repeats add up)."""
    dy, indices = inputs
    axis = attrs["axis"] % len(attrs["shape"])
    dx = np.zeros(attrs["shape"], dy.dtype)
    where = list(np.indices(indices.shape, sparse=True))
    where[axis] = np.where(indices < 0, indices + dx.shape[axis], indices)
    np.add.at(dx, tuple(where), dy)
    return [dx]


CASES = [
    Case("GatherElements", [rand(3, 4), _index((3, 4), 3, 0)]),
    Case("GatherElements", [rand(3, 5), _index((2, 3), 5, 1, np.int32)], attrs={"axis": 1},
         name="smaller_indices", reference=_gather_reference),
    Case("GatherElements", [rand(2, 3, 4), _index((2, 3, 6), 4, 2)], attrs={"axis": 2},
         name="repeats_last_axis"),
    Case("GatherElements", [rand(2, 3, 4), _index((2, 3, 2), 4, 5)], attrs={"axis": -1},
         name="negative_axis", reference=_gather_reference),
    Case("GatherElements", [np.arange(12, dtype=np.int32).reshape(4, 3), _index((2, 3), 4, 3)],
         name="int", grad=False),
    Case("portable.GatherElementsGrad", [rand(2, 3), _index((2, 3), 5, 4)],
         attrs={"axis": 1, "shape": [3, 5]}, reference=_scatter_reference),
]
