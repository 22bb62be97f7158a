"""Op-table cases of the ops whose output shapes depend on values (NonZero, Unique, Compress,
NonMaxSuppression). Fed as graph inputs, their outputs are allocated at run time (between
planned segments); given as constants (``const``), they are planned like any op."""
import numpy as np

from tests.ops.harness import Case, rand

_ints = np.array([[3, 0, 2], [0, 0, 5], [1, 1, 0]], np.int64)
_mask = np.array([True, False, True, True, False])

# Boxes of the ONNX NonMaxSuppression examples: two clusters of three boxes each
_BOXES = np.array([[[0.0, 0.0, 1.0, 1.0], [0.0, 0.1, 1.0, 1.1], [0.0, -0.1, 1.0, 0.9],
                    [0.0, 10.0, 1.0, 11.0], [0.0, 10.1, 1.0, 11.1],
                    [0.0, 100.0, 1.0, 101.0]]], np.float32)
_SCORES = np.array([[[0.9, 0.75, 0.6, 0.95, 0.5, 0.3]]], np.float32)
_CENTRES = np.array([[[0.5, 0.5, 1.0, 1.0], [0.5, 0.6, 1.0, 1.0], [0.5, 0.4, 1.0, 1.0],
                      [0.5, 10.5, 1.0, 1.0], [0.5, 10.6, 1.0, 1.0],
                      [0.5, 100.5, 1.0, 1.0]]], np.float32)
_TWO_CLASSES = np.concatenate([_SCORES, _SCORES[:, :, ::-1]], axis=1)
_LIMIT, _IOU, _FLOOR = (np.array([3], np.int64), np.array([0.5], np.float32),
                        np.array([0.4], np.float32))

CASES = [
    Case("NonZero", [_ints], grad=False, name="int_2d"),
    Case("NonZero", [rand(2, 3, 4) > 0.2], grad=False, name="bool_3d"),
    Case("NonZero", [np.zeros((2, 3), np.float32)], grad=False, name="none_nonzero"),
    Case("NonZero", [np.array([0.0, -1.5, np.nan, 0.0], np.float32)], grad=False,
         name="nan_counts_as_nonzero"),
    Case("NonZero", [_ints], const=(0,), grad=False, name="constant_folds"),
    Case("Unique", [np.array([2, 1, 1, 3, 4, 3], np.int64)], outputs=4, grad=False,
         name="sorted"),
    Case("Unique", [np.array([2.0, 1.0, 1.0, 3.0, 4.0, 3.0], np.float32)], outputs=4,
         attrs={"sorted": 0}, grad=False, name="by_first_occurrence"),
    Case("Unique", [np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4]], np.int32)], outputs=4,
         attrs={"axis": 0}, grad=False, name="rows"),
    Case("Unique", [np.array([[1, 1, 0], [2, 2, 3]], np.int64)], outputs=4,
         attrs={"axis": -1}, grad=False, name="columns_negative_axis"),
    Case("Unique", [np.array([[5, 5], [4, 5]], np.int64)], grad=False, name="values_only"),
    Case("Compress", [rand(5, 3), _mask], attrs={"axis": 0}, grad=False, name="rows"),
    Case("Compress", [rand(2, 5), _mask], attrs={"axis": -1}, grad=False, name="columns"),
    Case("Compress", [rand(2, 3), _mask], grad=False, name="flattened_short_condition"),
    Case("Compress", [rand(4, 3), np.zeros(4, bool)], attrs={"axis": 0}, grad=False,
         name="nothing_selected"),
    Case("Compress", [rand(5, 3, seed=1), _mask], attrs={"axis": 0}, const=(1,),
         name="constant_condition_rows"),
    Case("Compress", [rand(2, 5, seed=2), _mask], attrs={"axis": 1}, const=(1,),
         name="constant_condition_columns"),
    Case("Compress", [rand(2, 3, seed=3), _mask], const=(1,), name="constant_flattened"),
    Case("NonMaxSuppression", [_BOXES, _SCORES, _LIMIT, _IOU], grad=False, name="suppress"),
    Case("NonMaxSuppression", [_CENTRES, _SCORES, _LIMIT, _IOU, _FLOOR],
         attrs={"center_point_box": 1}, grad=False, name="centres_and_score_floor"),
    Case("NonMaxSuppression", [np.concatenate([_BOXES, _BOXES[:, ::-1]]),
                               np.concatenate([_TWO_CLASSES, _TWO_CLASSES]),
                               np.array([2], np.int64), _IOU], grad=False,
         name="two_batches_two_classes"),
    # (onnx.reference fails without the optional inputs; the spec: no limit selects none)
    Case("NonMaxSuppression", [_BOXES, _SCORES], grad=False, name="no_limit_selects_none",
         reference=lambda inputs, attrs: [np.zeros((0, 3), np.int64)]),
    Case("NonMaxSuppression", [_BOXES[:, :, [2, 3, 0, 1]], _SCORES, _LIMIT, _IOU],
         grad=False, name="flipped_corners"),
]
