"""Op-table cases: movement ops."""
import numpy as np

from portable.ops.movement import slice_bounds, slices_of
from tests.ops.harness import Case, rand


def i64(*values):
    return np.array(values, np.int64)


def _slice_grad_reference(inputs, attrs):
    dy, *bounds = inputs + [None] * (5 - len(inputs))
    out = np.zeros(attrs["shape"], dy.dtype)
    out[slices_of(slice_bounds(attrs["shape"], *bounds))] = dy
    return [out]


def _gather_grad_reference(inputs, attrs):
    dy, indices = inputs
    out = np.zeros(attrs["shape"], dy.dtype)
    axis = attrs.get("axis", 0) % out.ndim
    moved = np.moveaxis(out, axis, 0)
    source = np.moveaxis(dy.reshape(out.shape[:axis] + (indices.size,) + out.shape[axis + 1:]),
                         axis, 0)
    np.add.at(moved, indices.reshape(-1), source)
    return [out]


# Gather indices with a repeat and negative entries (repeats accumulate in the gradient).
INDICES = np.array([[0, -1], [2, 0]], np.int64)

CASES = [
    # Reshape, Flatten, Squeeze, Unsqueeze: views
    Case("Reshape", [rand(2, 3, 4), i64(3, -1, 0)], const=(1,)),
    Case("Reshape", [rand(2, 0, 4), i64(0, 8)], const=(1,), attrs={"allowzero": 1},
         grad=False, name="allowzero"),
    Case("Flatten", [rand(2, 3, 4)]),
    Case("Flatten", [rand(2, 3, 4)], attrs={"axis": 0}, name="axis0"),
    Case("Flatten", [rand(2, 3, 4)], attrs={"axis": -1}, name="neg"),
    Case("Flatten", [rand(2, 3, 4)], attrs={"axis": 3}, name="rank"),
    Case("Squeeze", [rand(1, 3, 1, 2)], name="all"),
    Case("Squeeze", [rand(1, 3, 1, 2), i64(-2)], const=(1,), name="neg"),
    Case("Squeeze", [rand(1, 3, 1, 2), i64(0, 2)], const=(1,), name="two"),
    Case("Unsqueeze", [rand(3, 2), i64(0, -1)], const=(1,)),
    Case("Unsqueeze", [rand(3, 2), i64(3, 1)], const=(1,), name="unsorted"),
    Case("Unsqueeze", [np.float32(2.5).reshape(()), i64(0)], const=(1,), name="scalar"),
    # Expand, Transpose, Tile
    Case("Expand", [rand(3, 1), i64(2, 3, 4)], const=(1,)),
    Case("Transpose", [rand(2, 3, 4)], attrs={"perm": [1, 2, 0]}),
    Case("Transpose", [rand(2, 3)], name="default"),
    Case("Transpose", [rand(2, 1, 3, 4)], name="default_rank4"),
    Case("Transpose", [rand(1, 5, 1, 3)], attrs={"perm": [2, 1, 0, 3]}, name="unit_axes"),
    Case("Tile", [rand(2, 3), i64(2, 3)], const=(1,)),
    Case("Tile", [rand(2, 1, 3), i64(1, 4, 1)], const=(1,), name="ones"),
    Case("Tile", [np.arange(6, dtype=np.int64).reshape(2, 3), i64(3, 1)], const=(1,),
         grad=False, name="int"),
    # Concat, Split
    Case("Concat", [rand(2, 3), rand(2, 1, seed=1), rand(2, 2, seed=2)], attrs={"axis": 1}),
    Case("Concat", [rand(2, 3), rand(1, 3, seed=1)], attrs={"axis": -2}, name="neg"),
    Case("Concat", [rand(2, 3)], attrs={"axis": 0}, name="one"),
    Case("Concat", [np.arange(3, dtype=np.int32), np.zeros(0, np.int32)], attrs={"axis": 0},
         grad=False, name="empty"),
    Case("Split", [rand(2, 6), i64(1, 2, 3)], const=(1,), attrs={"axis": 1}, outputs=3),
    Case("Split", [rand(6, 2)], outputs=3, name="equal"),
    Case("Split", [rand(2, 7)], attrs={"axis": -1, "num_outputs": 3}, outputs=3,
         name="uneven"),
    Case("Split", [rand(4, 3)], attrs={"num_outputs": 2}, outputs=2, name="num_outputs"),
    # Slice: defaults, axes, negative steps, clamping
    Case("Slice", [rand(4, 5), i64(1, 0), i64(3, 4)], const=(1, 2)),
    Case("Slice", [rand(4, 5), i64(-1), i64(-100), i64(1), i64(-2)], const=(1, 2, 3, 4),
         name="negstep"),
    Case("Slice", [rand(4, 5), i64(1, 10), i64(1000, -10), i64(0, 1), i64(2, -1)],
         const=(1, 2, 3, 4), name="clamp"),
    Case("Slice", [rand(3, 4, 2), i64(-3), i64(np.iinfo(np.int64).max), i64(-2)],
         const=(1, 2, 3), name="int64max"),
    Case("Slice", [rand(4, 5), i64(3), i64(1), i64(0)], const=(1, 2, 3), name="empty"),
    # Gather: any axis, negative and repeated indices
    Case("Gather", [rand(3, 4), INDICES]),
    Case("Gather", [rand(2, 3, 4), np.array([-1, 1, 1], np.int32)], attrs={"axis": -1},
         name="axis"),
    Case("Gather", [rand(3, 4), np.array(2, np.int64)], attrs={"axis": 1}, name="scalar"),
    Case("Gather", [rand(3, 4, 2), np.array(-2, np.int64)], name="scalar_negative"),
    Case("Gather", [rand(3, 4, 2), np.array(1, np.int32)], const=(1,), attrs={"axis": -1},
         name="scalar_constant_last_axis"),
    # Pad: every mode, axes, negative pads
    Case("Pad", [rand(3, 4), i64(1, 0, 2, 3)], const=(1,)),
    Case("Pad", [rand(3, 4), i64(1, 2, 0, 1), np.array(1.5, np.float32)], const=(1,),
         name="value"),
    Case("Pad", [rand(3, 4), i64(1, -1, 2, 1)], const=(1,), reference=lambda x, a: [
        np.pad(x[0][:, 1:], ((1, 2), (0, 1)))], name="crop"),
    Case("Pad", [rand(3, 4), i64(2, 1), None, i64(-1)], const=(1, 3), name="axes"),
    Case("Pad", [rand(3, 4), i64(2, 1, 2, 3)], const=(1,), attrs={"mode": "reflect"},
         name="reflect"),
    Case("Pad", [rand(3, 4), i64(2, 0, 1, 5)], const=(1,), attrs={"mode": "edge"},
         name="edge"),
    Case("Pad", [rand(3, 4), i64(4, 1, 1, 6)], const=(1,), attrs={"mode": "wrap"},
         name="wrap"),
    Case("Pad", [rand(2, 3, 2), i64(1, 1), None, i64(1)], const=(1, 3),
         attrs={"mode": "reflect"}, name="reflect_axes"),
    # Shape, Constant, ConstantOfShape, Range
    Case("Shape", [rand(2, 3, 4)]),
    Case("Shape", [rand(2, 3, 4)], attrs={"start": -2}, name="start"),
    Case("Shape", [rand(2, 3, 4)], attrs={"start": 1, "end": -1}, name="end"),
    Case("Shape", [rand(2, 3, 4)], attrs={"start": -10, "end": 10}, name="clamp"),
    Case("Shape", [rand(2, 3, 4)], attrs={"start": 2, "end": 1}, name="empty"),
    Case("Constant", [], attrs={"value": rand(2, 3)}),
    Case("Constant", [], attrs={"value_float": 1.5}, name="float"),
    Case("Constant", [], attrs={"value_floats": [1.5, -2.0]}, name="floats"),
    Case("Constant", [], attrs={"value_int": 7}, name="int"),
    Case("Constant", [], attrs={"value_ints": [3, -1, 4]}, name="ints"),
    Case("ConstantOfShape", [i64(2, 3)], const=(0,), attrs={"value": np.array([1.5], np.float32)}),
    Case("ConstantOfShape", [i64(2)], const=(0,), name="default"),
    Case("ConstantOfShape", [i64(3)], const=(0,), attrs={"value": np.array([4], np.int32)},
         name="int"),
    Case("Range", [np.int64(3), np.int64(10), np.int64(3)], const=(0, 1, 2)),
    Case("Range", [np.int32(10), np.int32(4), np.int32(-2)], const=(0, 1, 2), name="neg"),
    Case("Range", [np.float32(0.5), np.float32(2.0), np.float32(0.3)], const=(0, 1, 2),
         name="float"),
    Case("Range", [np.int64(5), np.int64(1), np.int64(1)], const=(0, 1, 2), name="empty"),
    Case("Range", [np.float16(1.0), np.float16(3.0), np.float16(0.25)], const=(0, 1, 2),
         name="half"),
    # private gradient ops
    Case("portable.SliceGrad", [rand(2, 3), i64(-1, 0), i64(-100, 3), i64(0, 1), i64(-2, 1)],
         const=(1, 2, 3, 4), attrs={"shape": [4, 3]}, reference=_slice_grad_reference),
    Case("portable.GatherGrad", [rand(2, 2, 4), INDICES], attrs={"shape": [3, 4]},
         reference=_gather_grad_reference),
    Case("portable.GatherGrad", [rand(2, 3, 3), np.array([-1, 1, 1], np.int32)],
         attrs={"axis": -1, "shape": [2, 3, 4]}, reference=_gather_grad_reference, name="axis"),
]
