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


def _distinct_rows(rows, cols, size, seed):
    """Indices with no repeat along axis 0 within a column (so every update lands on its own
    place and finite differences see one writer per place)."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(size)[:rows] for _ in range(cols)], axis=1).astype(np.int64)


CASES += [
    Case("ScatterElements", [rand(4, 3), _distinct_rows(2, 3, 4, 6), rand(2, 3, seed=1)]),
    Case("ScatterElements", [rand(3, 5), _index((3, 2), 5, 7), rand(3, 2, seed=2)],
         attrs={"axis": 1, "reduction": "add"}, name="add_repeats"),
    Case("ScatterElements", [rand(3, 5), _index((2, 4), 5, 8, np.int32), rand(2, 4, seed=3)],
         attrs={"axis": -1, "reduction": "mul"}, name="mul", grad=False),
    Case("ScatterElements", [rand(3, 4), _index((3, 4), 3, 9), rand(3, 4, seed=4)],
         attrs={"reduction": "max"}, name="max", grad=False),
    Case("ScatterElements", [rand(3, 4), _index((3, 4), 3, 10), rand(3, 4, seed=5)],
         attrs={"reduction": "min"}, name="min", grad=False),
    Case("ScatterElements", [np.arange(12, dtype=np.int64).reshape(3, 4), _index((2, 2), 3, 11),
                             np.array([[-1, -2], [-3, -4]], np.int64)], name="int_last_write",
         grad=False),
]

CASES += [
    Case("ScatterND", [rand(4, 3, 2), np.array([[1, 0], [3, -1]], np.int64), rand(2, 2, seed=1)],
         grad=False),
    Case("ScatterND", [rand(5, 3), np.array([[4], [0], [4]], np.int64), rand(3, 3, seed=2)],
         attrs={"reduction": "add"}, name="add_rows", grad=False),
    Case("ScatterND", [rand(2, 3), np.array([[1, 2], [0, 0], [1, 2]], np.int32),
                       rand(3, seed=3)], attrs={"reduction": "max"}, name="max", grad=False),
    Case("ScatterND", [np.arange(6, dtype=np.int64).reshape(2, 3), np.zeros((1, 0), np.int64),
                       np.full((1, 2, 3), 9, np.int64)], name="whole", grad=False),
]

CASES += [
    Case("GatherND", [rand(3, 4, 2), np.array([[0, 1], [2, -1], [1, 3]], np.int64)]),
    Case("GatherND", [rand(4, 3), np.array([[[1], [3]], [[1], [0]]], np.int64)],
         name="rows_repeated"),
    Case("GatherND", [rand(2, 3, 4), np.array([[1], [0]], np.int64)],
         attrs={"batch_dims": 1}, name="batch_dims"),
    Case("GatherND", [rand(2, 3, 4, 2), np.array([[[0, 3], [2, 1], [2, 1]],
                                                   [[1, 0], [0, 0], [2, 3]]], np.int64)],
         attrs={"batch_dims": 1}, name="batch_dims_pairs"),
    Case("GatherND", [np.arange(12, dtype=np.int32).reshape(2, 2, 3),
                      np.array([[0, 1, 2], [1, 0, 0]], np.int64)], name="int_scalars",
         grad=False),
]

CASES += [
    Case("TensorScatter", [rand(2, 3, 5, 4), rand(2, 3, 2, 4, seed=1),
                           np.array([1, 3], np.int64)]),
    Case("TensorScatter", [rand(3, 6, 2), rand(3, 3, 2, seed=2), np.array([4, 0, 5], np.int64)],
         attrs={"mode": "circular", "axis": 1}, name="circular_wraps"),
    Case("TensorScatter", [rand(2, 4, 3), rand(2, 4, 2, seed=3)], attrs={"axis": -1},
         name="no_indices_last_axis"),
    Case("TensorScatter", [np.zeros((2, 3, 2), np.int32), np.ones((2, 1, 2), np.int32),
                           np.array([2, 0], np.int64)], name="int", grad=False),
]

CASES += [
    Case("ReverseSequence", [rand(4, 3, 2), np.array([4, 2, 0], np.int64)]),
    Case("ReverseSequence", [rand(3, 5), np.array([1, 5, 3], np.int64)],
         attrs={"batch_axis": 0, "time_axis": 1}, name="batch_first"),
    Case("ReverseSequence", [np.arange(8, dtype=np.int64).reshape(2, 4),
                             np.array([2, 1, 0, 2], np.int64)], name="int", grad=False),
]

CASES += [
    Case("EyeLike", [rand(3, 4)]),
    Case("EyeLike", [np.zeros((4, 3), np.int32)], attrs={"k": -1}, name="int_below"),
    Case("EyeLike", [rand(3, 5)], attrs={"k": 2, "dtype": 7}, name="int64_above"),
    Case("EyeLike", [rand(2, 2)], attrs={"dtype": 9}, name="bool"),
]
