"""Op-table cases: CenterCropPad (crop, pad, both, on chosen axes), against onnx.reference."""
import numpy as np

from tests.ops.harness import Case, rand


def _crop_pad(name, x, lengths, **attrs):
    return Case("CenterCropPad", [x, np.array(lengths, np.int64)], attrs=attrs, const=(1,),
                name=name)


CASES = [
    _crop_pad("crop_even_and_odd", rand(8, 7, 3), [4, 4, 3]),
    _crop_pad("pad_even_and_odd", rand(4, 3, 2), [6, 6, 2]),
    _crop_pad("crop_and_pad", rand(7, 3, 2), [4, 6, 2]),
    _crop_pad("axes_hwc", rand(9, 4, 3), [5, 7], axes=[0, 1]),
    _crop_pad("negative_axes", rand(2, 9, 4), [4, 5], axes=[-1, -2]),
    Case("CenterCropPad", [np.arange(24, dtype=np.int32).reshape(4, 6),
                           np.array([3, 9], np.int32)], const=(1,), grad=False, name="int32"),
]
