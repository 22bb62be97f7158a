"""Op-table cases: GridSample (every mode, padding and align_corners, 4-D and 5-D), AffineGrid,
Col2Im, DeformConv and RoiAlign against onnx.reference; GridSampleGrad against onnx.reference's
GridSample (exact for dX, which is linear in X; central differences for dgrid) and MaxRoiPool
against a NumPy loop written from the ONNX/Caffe specification below."""
import math

import numpy as np

from tests.ops.harness import Case, rand

X4 = rand(1, 2, 4, 5, low=-2.0, high=2.0)
GRID4 = rand(1, 3, 4, 2, seed=1, low=-1.4, high=1.4)  # reaches past the borders
X5 = rand(1, 2, 3, 4, 3, low=-2.0, high=2.0)
GRID5 = rand(1, 2, 3, 2, 3, seed=2, low=-1.3, high=1.3)


def grid_sample(name, x, grid, grad=True, **attrs):
    return Case("GridSample", [x, grid], attrs=attrs, name=name, grad=grad, rtol=1e-5,
                atol=1e-5, grad_tol=1e-4)


GRID_SAMPLE = [
    grid_sample(f"{mode}_{padding}_align{align}", X4, GRID4, mode=mode, padding_mode=padding,
                align_corners=align)
    for mode in ("linear", "nearest", "cubic")
    for padding in ("zeros", "border", "reflection")
    for align in (0, 1)
] + [
    grid_sample(f"5d_{mode}_{padding}_align{align}", X5, GRID5, grad=(mode == "linear"),
                mode=mode, padding_mode=padding, align_corners=align)
    for mode in ("linear", "nearest")
    for padding in ("zeros", "border", "reflection")
    for align in (0, 1)
] + [
    grid_sample("default_batch2", rand(2, 3, 3, 3), rand(2, 2, 5, 2, seed=3), grad=False),
    grid_sample("cubic_1x1_input", rand(1, 1, 1, 1), rand(1, 2, 2, 2, seed=4), grad=False,
                mode="cubic", padding_mode="reflection"),
]


def _reference_grid_sample(x, grid, attrs):
    from onnx.reference.ops.op_grid_sample import GridSample

    return GridSample.eval(x, grid, **attrs).astype(np.float64)


def grid_sample_grad_reference(inputs, attrs):
    """dX = sum over outputs of dY * dY/dX (GridSample is linear in X: exact through unit
    inputs); dgrid by central differences of onnx.reference's GridSample."""
    dtypes = [np.asarray(v).dtype for v in inputs[1:]]
    dy, x, grid = (np.asarray(v, np.float64) for v in inputs)
    dx = np.zeros_like(x)
    for i in range(x.size):
        unit = np.zeros_like(x)
        unit.flat[i] = 1.0
        dx.flat[i] = np.sum(_reference_grid_sample(unit, grid, attrs) * dy)
    dgrid = np.zeros_like(grid)
    eps = 1e-3
    for i in range(grid.size):
        up, down = grid.copy(), grid.copy()
        up.flat[i] += eps
        down.flat[i] -= eps
        dgrid.flat[i] = np.sum((_reference_grid_sample(x, up, attrs)
                                - _reference_grid_sample(x, down, attrs)) * dy) / (2 * eps)
    return [dx.astype(dtypes[0]), dgrid.astype(dtypes[1])]


def grid_sample_grad(name, x, grid, **attrs):
    dy = rand(*(x.shape[:2] + grid.shape[1:-1]), seed=9)
    return Case("portable.GridSampleGrad", [dy, x, grid], attrs=attrs, outputs=2, name=name,
                reference=grid_sample_grad_reference, rtol=2e-3, atol=2e-3)


# Grid points off the pixel centres and the reflection borders, so central differences do
# not straddle a kink of the interpolation.
GRID_GRAD = np.array([[[[-0.83, 0.41], [0.27, -0.66], [0.58, 0.12]],
                       [[1.23, -1.17], [-1.31, 0.94], [0.07, 1.11]]]], np.float32)
GRID_SAMPLE_GRAD = [
    grid_sample_grad("linear_zeros", X4, GRID_GRAD, mode="linear", padding_mode="zeros",
                     align_corners=0),
    grid_sample_grad("cubic_reflection_align", X4, GRID_GRAD, mode="cubic",
                     padding_mode="reflection", align_corners=1),
    grid_sample_grad("nearest_border", X4, GRID_GRAD, mode="nearest", padding_mode="border",
                     align_corners=0),
]


def affine_grid(name, theta, size, **attrs):
    return Case("AffineGrid", [theta, np.asarray(size, np.int64)], attrs=attrs, const=(1,),
                name=name, rtol=1e-5, atol=1e-5)


AFFINE_GRID = [
    affine_grid("2d", rand(2, 2, 3, seed=5), [2, 3, 4, 5]),
    affine_grid("2d_align_corners", rand(2, 2, 3, seed=5), [2, 3, 4, 5], align_corners=1),
    affine_grid("3d", rand(1, 3, 4, seed=6), [1, 2, 3, 2, 4]),
    affine_grid("3d_align_corners", rand(1, 3, 4, seed=6), [1, 2, 3, 2, 4], align_corners=1),
]


def col2im(name, x, image, block, grad=True, **attrs):
    return Case("Col2Im", [x, np.asarray(image, np.int64), np.asarray(block, np.int64)],
                attrs=attrs, const=(1, 2), name=name, grad=grad)


COL2IM = [
    col2im("2d", rand(1, 2 * 4, 12), [4, 5], [2, 2]),
    col2im("strides_pads_dilations", rand(2, 3 * 6, 6), [5, 6], [2, 3], strides=[2, 2],
           pads=[1, 0, 0, 1], dilations=[2, 1]),
    col2im("3d", rand(1, 2 * 8, 8), [3, 3, 3], [2, 2, 2]),
    col2im("int32", np.arange(2 * 4 * 12, dtype=np.int32).reshape(2, 4, 12), [4, 5], [2, 2],
           grad=False),
]


def deform_conv(name, x, w, offset, b=None, mask=None, **attrs):
    return Case("DeformConv", [x, w, offset, b, mask], attrs=attrs, name=name, rtol=1e-5,
                atol=1e-5)


DEFORM_CONV = [
    deform_conv("basic", rand(1, 1, 4, 4), rand(1, 1, 2, 2, seed=1),
                rand(1, 8, 3, 3, seed=2, low=-1.5, high=1.5)),
    deform_conv("pads_strides_dilations", rand(2, 2, 6, 5), rand(3, 2, 2, 2, seed=1),
                rand(2, 8, 3, 4, seed=2, low=-2, high=2), strides=[2, 2], pads=[1, 1, 1, 2],
                dilations=[2, 1]),
    deform_conv("mask_bias", rand(1, 2, 4, 4), rand(2, 2, 3, 3, seed=1),
                rand(1, 18, 2, 2, seed=2), rand(2, seed=3), rand(1, 9, 2, 2, seed=4, low=0),
                kernel_shape=[3, 3]),
    deform_conv("groups_offset_groups", rand(1, 4, 5, 5), rand(4, 2, 2, 2, seed=1),
                rand(1, 16, 4, 4, seed=2), rand(4, seed=3), rand(1, 8, 4, 4, seed=4),
                group=2, offset_group=2),
]

ROI_X = rand(2, 2, 6, 7, low=-2.0, high=2.0)
ROIS = np.array([[0.5, 0.7, 4.1, 5.2], [1.0, 0.0, 6.5, 3.3], [-1.5, 2.0, 3.0, 8.0],
                 [2.2, 2.4, 2.3, 2.5]], np.float32)
BATCH = np.array([0, 1, 1, 0], np.int64)


def roi_align(name, **attrs):
    return Case("RoiAlign", [ROI_X, ROIS, BATCH], attrs=attrs, name=name, grad=False,
                rtol=1e-5, atol=1e-5)


ROI_ALIGN = [
    roi_align("avg_half_pixel", output_height=3, output_width=2),
    roi_align("avg_output_half_pixel", output_height=2, output_width=3,
              coordinate_transformation_mode="output_half_pixel"),
    roi_align("max_sampling_ratio", mode="max", output_height=3, output_width=3,
              sampling_ratio=2),
    roi_align("scale", output_height=2, output_width=2, spatial_scale=0.5, sampling_ratio=3),
]


def max_roi_pool_reference(inputs, attrs):
    """MaxRoiPool (ONNX; Caffe's ROIPooling): a region [batch, x1, y1, x2, y2] is scaled by
    spatial_scale and its corners rounded (half away from zero); it spans (x2 - x1 + 1) by
    (y2 - y1 + 1) pixels (at least 1), cut into pooled_shape bins, bin (i, j) covering rows
    [floor(i * h / ph), ceil((i + 1) * h / ph)) + y1 clipped to the image (columns alike);
    each output is its bin's maximum, 0 for an empty bin."""
    x, rois = inputs
    ph, pw = attrs["pooled_shape"]
    scale = attrs.get("spatial_scale", 1.0)
    height, width = x.shape[2:]
    y = np.zeros((len(rois), x.shape[1], ph, pw), x.dtype)

    def rnd(v):
        return int(math.floor(abs(v) + 0.5)) * (1 if v >= 0 else -1)

    for r, roi in enumerate(rois):
        x1, y1, x2, y2 = (rnd(float(v) * scale) for v in roi[1:])
        h, w = max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1)
        for c in range(x.shape[1]):
            for i in range(ph):
                for j in range(pw):
                    r0 = min(max(math.floor(i * h / ph) + y1, 0), height)
                    r1 = min(max(math.ceil((i + 1) * h / ph) + y1, 0), height)
                    c0 = min(max(math.floor(j * w / pw) + x1, 0), width)
                    c1 = min(max(math.ceil((j + 1) * w / pw) + x1, 0), width)
                    best = None
                    for a in range(r0, r1):
                        for b in range(c0, c1):
                            v = x[int(roi[0]), c, a, b]
                            best = v if best is None or v > best else best
                    y[r, c, i, j] = 0 if best is None else best
    return [y]


MAX_ROI_ROIS = np.array([[0, 0.4, 1.2, 4.6, 5.0], [1, 2.0, 0.0, 6.0, 3.0],
                         [1, -2.0, -1.0, 9.0, 2.4], [0, 3.0, 3.0, 3.0, 3.0]], np.float32)
MAX_ROI_POOL = [
    Case("MaxRoiPool", [ROI_X, MAX_ROI_ROIS], attrs={"pooled_shape": [2, 3]},
         reference=max_roi_pool_reference, name="2x3", grad=False),
    Case("MaxRoiPool", [ROI_X, MAX_ROI_ROIS * np.float32([1, 1.6, 1.6, 1.6, 1.6])],
         attrs={"pooled_shape": [3, 2], "spatial_scale": 0.625},
         reference=max_roi_pool_reference, name="scaled", grad=False),
]

CASES = (GRID_SAMPLE + GRID_SAMPLE_GRAD + AFFINE_GRID + COL2IM + DEFORM_CONV + ROI_ALIGN
         + MAX_ROI_POOL)
