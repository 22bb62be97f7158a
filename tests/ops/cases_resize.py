"""Op-table cases: Resize in every mode and coordinate transformation, against onnx.reference."""
import numpy as np

from tests.ops.harness import Case, rand

X = rand(1, 2, 4, 5, low=-2.0, high=2.0)


def f32(*values):
    return np.array(values, np.float32)


def i64(*values):
    return np.array(values, np.int64)


def resize(name, inputs, **attrs):
    const = tuple(i for i, v in enumerate(inputs) if i and v is not None)
    return Case("Resize", inputs, attrs=attrs, const=const, name=name, rtol=1e-5, atol=1e-5)


CASES = [
    resize("nearest_up", [X, None, f32(1, 1, 2, 1.5)]),
    resize("nearest_asymmetric_floor", [X, None, f32(1, 1, 2, 2)],
           coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
    resize("nearest_down_ceil", [X, None, f32(1, 1, 0.5, 0.6)], nearest_mode="ceil"),
    resize("nearest_prefer_ceil_sizes", [X, None, None, i64(1, 2, 7, 3)],
           nearest_mode="round_prefer_ceil"),
    resize("linear_up", [X, None, f32(1, 1, 2, 2)], mode="linear"),
    resize("linear_align_corners", [X, None, None, i64(1, 2, 3, 8)], mode="linear",
           coordinate_transformation_mode="align_corners"),
    resize("linear_pytorch_half_pixel", [X, None, None, i64(1, 2, 1, 9)], mode="linear",
           coordinate_transformation_mode="pytorch_half_pixel"),
    resize("linear_half_pixel_symmetric", [X, None, f32(1, 1, 1.7, 0.8)], mode="linear",
           coordinate_transformation_mode="half_pixel_symmetric"),
    resize("cubic_up", [X, None, f32(1, 1, 2, 2)], mode="cubic"),
    resize("cubic_exclude_outside", [X, None, f32(1, 1, 0.8, 1.6)], mode="cubic",
           exclude_outside=1, cubic_coeff_a=-0.5),
    resize("cubic_asymmetric", [X, None, None, i64(1, 2, 6, 6)], mode="cubic",
           coordinate_transformation_mode="asymmetric"),
    resize("tf_crop_and_resize", [X, f32(0, 0, 0.2, -0.3, 1, 1, 1.2, 0.9), None,
                                  i64(1, 2, 5, 6)], mode="linear",
           coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=7.5),
    resize("axes_not_larger", [X, None, None, i64(8, 7)], axes=[2, 3], mode="linear",
           keep_aspect_ratio_policy="not_larger"),
    resize("axes_not_smaller", [X, None, None, i64(8, 7)], axes=[2, 3],
           keep_aspect_ratio_policy="not_smaller"),
    resize("linear_antialias_down", [X, None, f32(1, 1, 0.5, 0.6)], mode="linear",
           antialias=1),
    resize("cubic_antialias_sizes", [X, None, None, i64(1, 2, 3, 2)], mode="cubic",
           antialias=1),
    resize("cubic_antialias_exclude_outside", [rand(1, 1, 9, 7, seed=3), None,
                                               f32(1, 1, 0.3, 0.45)],
           mode="cubic", antialias=1, exclude_outside=1, cubic_coeff_a=-0.5),
    resize("linear_antialias_up_and_down", [X, None, f32(1, 1, 1.5, 0.4)], mode="linear",
           antialias=1, coordinate_transformation_mode="align_corners"),
    resize("uint8_linear", [np.arange(20, dtype=np.uint8).reshape(1, 1, 4, 5) * 12, None,
                            f32(1, 1, 1.5, 1.5)], mode="linear"),
]
