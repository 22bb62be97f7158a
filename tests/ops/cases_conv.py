"""Op-table cases: convolution and pooling.

The private gradient ops are checked against the naive loops below, written straight from
their definitions (window by window), not from the kernels' strided views.

onnx.reference quirks the cases steer around (our kernels follow the ONNX spec and onnxruntime;
the official ONNX node tests of these ops all pass):
- AveragePool in ceil_mode when the windows overshoot the padded input by two or more elements
  (the reference shifts them), and with dilations under auto_pad (it ignores the dilation);
- SAME pools whose kernel extent is below the stride (the reference pads by a negative amount;
  onnxruntime and we clamp at zero);
- MaxPool with SAME_LOWER and strides or dilations above one (the reference splits the padding
  as SAME_UPPER does), and at stride one with pads in ceil_mode (counted twice) or in 1-D and
  3-D (ignored);
- GlobalMaxPool unless there are exactly two spatial axes (it reduces the wrong axes);
- ConvTranspose with groups unless depthwise, output sizes beyond what output_padding reaches
  (it raises), and SAME whose total padding is negative (it pads both ends by a negative
  amount; onnxruntime and we grow the output at the end).
Where the reference raises or errs, a case names a naive NumPy ``reference=`` instead.
"""
import itertools

import numpy as np

from tests.ops.harness import Case, rand

CONV_TOL = dict(rtol=1e-5, atol=1e-5)


def _window_attrs(attrs, rank):
    kernel = tuple(attrs["kernel_shape"])
    strides = tuple(attrs.get("strides") or (1,) * rank)
    dilations = tuple(attrs.get("dilations") or (1,) * rank)
    pads = tuple(attrs.get("pads") or (0,) * 2 * rank)
    return kernel, strides, dilations, pads


def _window(out_index, kernel, strides, dilations, head):
    """Every (kernel offset, input position) of one window, in row-major kernel order."""
    for k in itertools.product(*(range(n) for n in kernel)):
        yield k, tuple(o * s + j * d - h for o, s, j, d, h in
                       zip(out_index, strides, k, dilations, head))


def _inside(pos, low, high):
    return all(lo <= p < hi for p, lo, hi in zip(pos, low, high))


def conv_grad_weight_reference(inputs, attrs):
    x, dy = inputs
    rank = x.ndim - 2
    kernel, strides, dilations, pads = _window_attrs(attrs, rank)
    group = attrs.get("group", 1)
    per_out, per_in = dy.shape[1] // group, x.shape[1] // group
    dw = np.zeros((dy.shape[1], per_in) + kernel, np.float64)
    for n, m, *o in itertools.product(*(range(d) for d in dy.shape)):
        for k, pos in _window(o, kernel, strides, dilations, pads[:rank]):
            if _inside(pos, (0,) * rank, x.shape[2:]):
                for c in range(per_in):
                    dw[(m, c) + k] += dy[(n, m, *o)] * x[(n, m // per_out * per_in + c) + pos]
    return [dw.astype(x.dtype)]


def conv_transpose_reference(inputs, attrs):
    """Scatter every input element times the kernel into the full output, then cut out the
    range the ONNX spec's pads select (onnx.reference handles neither general groups nor
    output sizes other than output_padding's)."""
    x, w = inputs[:2]
    rank = x.ndim - 2
    kernel = w.shape[2:]
    _, strides, dilations, pads = _window_attrs({**attrs, "kernel_shape": kernel}, rank)
    adjust = attrs.get("output_padding") or (0,) * rank
    group = attrs.get("group", 1)
    per_in, per_out = x.shape[1] // group, w.shape[1]
    full = [s * (n - 1) + a + (k - 1) * d + 1 for s, n, a, k, d in
            zip(strides, x.shape[2:], adjust, kernel, dilations)]
    y = np.zeros(x.shape[:1] + (per_out * group,) + tuple(full), np.float64)
    for n, c, *i in itertools.product(*(range(d) for d in x.shape)):
        for k, pos in _window(i, kernel, strides, dilations, (0,) * rank):
            for m in range(per_out):
                y[(n, c // per_in * per_out + m) + pos] += x[(n, c, *i)] * w[(c, m) + k]
    head, out = pads[:rank], [f - h - t for f, h, t in zip(full, pads[:rank], pads[rank:])]
    if attrs.get("output_shape"):
        out = list(attrs["output_shape"])
        head = [(f - o) - (f - o) // 2 for f, o in zip(full, out)]
    y = y[(slice(None), slice(None)) + tuple(slice(h, h + o) for h, o in zip(head, out))]
    if len(inputs) > 2:
        y = y + inputs[2].reshape((1, -1) + (1,) * rank)
    return [y.astype(x.dtype)]


def max_pool_grad_reference(inputs, attrs):
    dy, x = inputs
    rank = x.ndim - 2
    kernel, strides, dilations, pads = _window_attrs(attrs, rank)
    dx = np.zeros_like(x)
    for n, c, *o in itertools.product(*(range(d) for d in dy.shape)):
        best = None
        for _, pos in _window(o, kernel, strides, dilations, pads[:rank]):
            if _inside(pos, (0,) * rank, x.shape[2:]) and (
                    best is None or x[(n, c) + pos] > x[(n, c) + best]):
                best = pos
        dx[(n, c) + best] += dy[(n, c, *o)]
    return [dx]


def average_pool_grad_reference(inputs, attrs):
    dy, x = inputs
    rank = x.ndim - 2
    kernel, strides, dilations, pads = _window_attrs(attrs, rank)
    spatial = x.shape[2:]
    if attrs.get("count_include_pad", 0):
        low = tuple(-p for p in pads[:rank])
        high = tuple(n + p for n, p in zip(spatial, pads[rank:]))
    else:
        low, high = (0,) * rank, spatial
    dx = np.zeros_like(x)
    for n, c, *o in itertools.product(*(range(d) for d in dy.shape)):
        window = [pos for _, pos in _window(o, kernel, strides, dilations, pads[:rank])]
        count = sum(_inside(pos, low, high) for pos in window)
        for pos in window:
            if _inside(pos, (0,) * rank, spatial):
                dx[(n, c) + pos] += dy[(n, c, *o)] / count
    return [dx]


def _conv(name, x, w, b=None, **attrs):
    inputs = [x, w] if b is None else [x, w, b]
    return Case("Conv", inputs, attrs=attrs, name=name, **CONV_TOL)


def _convt(name, x, w, b=None, **attrs):
    inputs = [x, w] if b is None else [x, w, b]
    return Case("ConvTranspose", inputs, attrs=attrs, name=name, **CONV_TOL)


CONV = [
    _conv("2d_bias", rand(1, 2, 5, 5), rand(3, 2, 3, 3, seed=1), rand(3, seed=2)),
    _conv("pads_strides", rand(1, 2, 6, 5), rand(2, 2, 3, 2, seed=1),
          pads=[1, 0, 1, 1], strides=[2, 1]),
    _conv("dilations", rand(1, 1, 7, 7), rand(2, 1, 3, 3, seed=1), dilations=[2, 2],
          pads=[1, 1, 1, 1]),
    _conv("groups", rand(1, 4, 5, 5), rand(4, 2, 3, 3, seed=1), group=2, strides=[2, 2]),
    _conv("depthwise", rand(2, 3, 5, 5), rand(3, 1, 3, 3, seed=1), rand(3, seed=2), group=3,
          pads=[1, 1, 1, 1]),
    _conv("depthwise_multiplier", rand(1, 3, 5, 6), rand(6, 1, 2, 3, seed=1), group=3,
          strides=[2, 1], dilations=[1, 2]),
    _conv("same_upper", rand(1, 2, 5, 6), rand(2, 2, 3, 3, seed=1), auto_pad="SAME_UPPER",
          strides=[2, 2]),
    _conv("same_lower", rand(1, 2, 5, 6), rand(2, 2, 2, 3, seed=1), auto_pad="SAME_LOWER",
          strides=[2, 1]),
    _conv("valid", rand(1, 2, 6, 5), rand(2, 2, 3, 3, seed=1), auto_pad="VALID",
          strides=[2, 1]),
    _conv("1d", rand(2, 3, 8), rand(4, 3, 3, seed=1), rand(4, seed=2), strides=[2],
          pads=[1, 2]),
    _conv("3d", rand(1, 2, 4, 4, 3), rand(2, 2, 2, 2, 2, seed=1), pads=[1, 0, 1, 0, 1, 0],
          strides=[2, 1, 1]),
    _conv("pointwise", rand(2, 4, 3, 3), rand(5, 4, 1, 1, seed=1), rand(5, seed=2)),
    _conv("pointwise_groups", rand(1, 4, 3, 3), rand(4, 2, 1, 1, seed=1), group=2),
    _conv("pointwise_stride", rand(1, 3, 5, 5), rand(4, 3, 1, 1, seed=1), strides=[2, 2]),
    _conv("kernel_shape", rand(2, 2, 4, 4), rand(2, 2, 2, 2, seed=1), kernel_shape=[2, 2]),
    Case("Conv", [rand(1, 16, 14, 14), rand(32, 16, 3, 3, seed=1), rand(32, seed=2)],
         attrs={"pads": [1, 1, 1, 1]}, grad=False, name="resnet_like", rtol=1e-4, atol=1e-4),
    # output rows wider than a GEMM panel (16 windows on a CPU): panels inside one row and
    # inside the input take the strided copy of OpenCL's im2col, the others the checked walk
    Case("Conv", [rand(1, 3, 6, 40), rand(4, 3, 3, 3, seed=1), rand(4, seed=2)],
         attrs={"pads": [1, 1, 1, 1]}, grad=False, name="wide_rows"),
    Case("Conv", [rand(2, 3, 5, 70), rand(4, 3, 3, 3, seed=1)],
         attrs={"pads": [0, 1, 0, 1], "strides": [1, 2]}, grad=False, name="wide_rows_strided"),
    Case("Conv", [rand(1, 2, 50), rand(3, 2, 3, seed=1)],
         attrs={"pads": [1, 1], "dilations": [2]}, grad=False, name="wide_1d_dilated"),
    Case("Conv", [rand(1, 2, 5, 5, dtype=np.float64), rand(3, 2, 3, 3, seed=1,
                                                           dtype=np.float64)],
         attrs={"pads": [1, 1, 1, 1]}, grad=False, name="float64"),
]

CONV_TRANSPOSE = [
    _convt("bias", rand(1, 2, 3, 3), rand(2, 3, 3, 3, seed=1), rand(3, seed=2)),
    _convt("strides_pads_output_padding", rand(1, 2, 3, 3), rand(2, 2, 3, 3, seed=1),
           strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
    _convt("depthwise", rand(2, 3, 3, 3), rand(3, 1, 3, 3, seed=1), group=3, strides=[2, 1]),
    Case("ConvTranspose", [rand(2, 4, 3, 3), rand(4, 3, 2, 3, seed=1), rand(6, seed=2)],
         attrs={"group": 2, "strides": [2, 1], "pads": [1, 0, 0, 1]},
         reference=conv_transpose_reference, name="groups", **CONV_TOL),
    _convt("dilations", rand(1, 1, 3, 3), rand(1, 2, 2, 2, seed=1), dilations=[2, 2]),
    _convt("output_shape_grow", rand(1, 1, 3, 3), rand(1, 2, 3, 3, seed=1),
           strides=[3, 2], output_shape=[10, 8]),
    Case("ConvTranspose", [rand(1, 1, 3, 3), rand(1, 1, 3, 3, seed=1)],
         attrs={"strides": [2, 2], "output_shape": [6, 4]},
         reference=conv_transpose_reference, name="output_shape_cut", **CONV_TOL),
    _convt("same_upper", rand(1, 1, 3, 3), rand(1, 2, 3, 3, seed=1), strides=[2, 2],
           auto_pad="SAME_UPPER"),
    _convt("same_lower", rand(1, 1, 3, 3), rand(1, 2, 3, 3, seed=1), strides=[2, 2],
           auto_pad="SAME_LOWER"),
    _convt("same_lower_output_shape", rand(1, 1, 3, 3), rand(1, 2, 3, 3, seed=1),
           strides=[2, 2], auto_pad="SAME_LOWER", output_shape=[5, 6]),
    _convt("pads_output_shape", rand(1, 2, 3, 3), rand(2, 2, 3, 3, seed=1), strides=[2, 2],
           pads=[1, 1, 1, 1], output_shape=[6, 5]),
    _convt("valid", rand(1, 2, 3, 3), rand(2, 1, 2, 2, seed=1), strides=[2, 2],
           auto_pad="VALID"),
    _convt("1d", rand(1, 2, 4), rand(2, 3, 3, seed=1), rand(3, seed=2), strides=[2],
           pads=[1, 1]),
    _convt("3d", rand(1, 2, 2, 3, 2), rand(2, 1, 2, 2, 2, seed=1), strides=[2, 1, 2]),
    _convt("pointwise", rand(1, 3, 3, 3), rand(3, 2, 1, 1, seed=1)),
    Case("ConvTranspose", [rand(1, 1, 3, 3), rand(1, 1, 2, 2, seed=1)],
         attrs={"dilations": [2, 2], "output_padding": [1, 1]},
         reference=conv_transpose_reference, name="dilated_output_padding", **CONV_TOL),
]

CONV_GRAD_WEIGHT = [
    Case("portable.ConvGradWeight", [rand(1, 2, 5, 5), rand(1, 3, 3, 3, seed=1)],
         attrs={"kernel_shape": [3, 3]}, reference=conv_grad_weight_reference, name="2d",
         **CONV_TOL),
    Case("portable.ConvGradWeight", [rand(2, 2, 6, 5), rand(2, 2, 3, 3, seed=1)],
         attrs={"kernel_shape": [3, 2], "strides": [2, 1], "dilations": [1, 2],
                "pads": [1, 1, 1, 0]},
         reference=conv_grad_weight_reference, name="strides_pads_dilations", **CONV_TOL),
    Case("portable.ConvGradWeight", [rand(1, 4, 4, 4), rand(1, 6, 2, 2, seed=1)],
         attrs={"kernel_shape": [3, 3], "group": 2},
         reference=conv_grad_weight_reference, name="groups", **CONV_TOL),
    Case("portable.ConvGradWeight", [rand(2, 3, 7), rand(2, 2, 4, seed=1)],
         attrs={"kernel_shape": [3], "strides": [2], "pads": [1, 0]},
         reference=conv_grad_weight_reference, name="1d", **CONV_TOL),
]


def _pool(op, name, x, outputs=1, **attrs):
    return Case(op, [x], attrs=attrs, outputs=outputs, name=name)


MAX_POOL = [
    _pool("MaxPool", "k2s2", rand(1, 2, 4, 4), kernel_shape=[2, 2], strides=[2, 2]),
    _pool("MaxPool", "resnet_indices", rand(1, 2, 7, 7), 2, kernel_shape=[3, 3],
          strides=[2, 2], pads=[1, 1, 1, 1]),
    _pool("MaxPool", "ceil_mode", rand(1, 1, 6, 6), 2, kernel_shape=[3, 3], strides=[2, 2],
          ceil_mode=1),
    _pool("MaxPool", "dilations", rand(1, 1, 6, 6), 2, kernel_shape=[2, 2],
          dilations=[2, 2]),
    _pool("MaxPool", "same_upper", rand(1, 1, 5, 5), 2, kernel_shape=[3, 3], strides=[2, 2],
          auto_pad="SAME_UPPER"),
    _pool("MaxPool", "same_lower", rand(1, 1, 4, 4), kernel_shape=[2, 2],
          auto_pad="SAME_LOWER"),
    _pool("MaxPool", "valid", rand(1, 2, 5, 4), kernel_shape=[2, 2], auto_pad="VALID"),
    _pool("MaxPool", "pads", rand(1, 1, 4, 4), kernel_shape=[2, 2], pads=[0, 1, 1, 0]),
    _pool("MaxPool", "1d", rand(1, 2, 9), 2, kernel_shape=[3], strides=[2]),
    _pool("MaxPool", "3d", rand(1, 1, 4, 4, 4), 2, kernel_shape=[2, 2, 2],
          strides=[2, 2, 2]),
    _pool("MaxPool", "storage_order", rand(1, 2, 5, 4), 2, kernel_shape=[2, 2],
          strides=[2, 2], storage_order=1),
    Case("MaxPool", [np.random.default_rng(0).integers(0, 255, (1, 2, 6, 6), np.uint8)],
         attrs={"kernel_shape": [2, 2], "strides": [2, 2]}, grad=False, name="uint8"),
]

MAX_POOL_GRAD = [
    Case("portable.MaxPoolGrad", [rand(1, 2, 2, 2, seed=3), rand(1, 2, 4, 4)],
         attrs={"kernel_shape": [2, 2], "strides": [2, 2]},
         reference=max_pool_grad_reference, name="k2s2"),
    Case("portable.MaxPoolGrad", [rand(1, 2, 4, 4, seed=3), rand(1, 2, 7, 7)],
         attrs={"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
         reference=max_pool_grad_reference, name="overlap_pads"),
    Case("portable.MaxPoolGrad", [rand(1, 1, 3, 3, seed=3), rand(1, 1, 6, 6)],
         attrs={"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
         reference=max_pool_grad_reference, name="ceil_mode"),
    Case("portable.MaxPoolGrad", [rand(1, 1, 4, 4, seed=3), rand(1, 1, 6, 6)],
         attrs={"kernel_shape": [2, 2], "dilations": [2, 2]},
         reference=max_pool_grad_reference, name="dilations"),
]

AVERAGE_POOL = [
    _pool("AveragePool", "k2s2", rand(1, 2, 4, 4), kernel_shape=[2, 2], strides=[2, 2]),
    _pool("AveragePool", "pads_exclude", rand(1, 2, 5, 5), kernel_shape=[3, 3],
          pads=[1, 1, 1, 1]),
    _pool("AveragePool", "pads_include", rand(1, 2, 5, 5), kernel_shape=[3, 3],
          pads=[1, 0, 1, 2], count_include_pad=1),
    _pool("AveragePool", "ceil_mode", rand(1, 1, 5, 5), kernel_shape=[2, 2],
          strides=[2, 2], ceil_mode=1),
    _pool("AveragePool", "ceil_mode_include_pad", rand(1, 1, 6, 6), kernel_shape=[3, 3],
          strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1),
    _pool("AveragePool", "dilations", rand(1, 1, 7, 7), kernel_shape=[2, 2],
          dilations=[2, 2], pads=[1, 1, 0, 0]),
    _pool("AveragePool", "same_upper", rand(1, 1, 5, 5), kernel_shape=[3, 3],
          strides=[2, 2], auto_pad="SAME_UPPER"),
    _pool("AveragePool", "same_lower_include", rand(1, 1, 4, 4), kernel_shape=[2, 2],
          auto_pad="SAME_LOWER", count_include_pad=1),
    _pool("AveragePool", "valid", rand(1, 2, 5, 4), kernel_shape=[2, 2], strides=[2, 1],
          auto_pad="VALID"),
    _pool("AveragePool", "1d", rand(2, 2, 9), kernel_shape=[3], strides=[2], pads=[1, 1]),
    _pool("AveragePool", "3d", rand(1, 1, 4, 4, 4), kernel_shape=[2, 2, 2],
          strides=[2, 2, 2]),
]

AVERAGE_POOL_GRAD = [
    Case("portable.AveragePoolGrad", [rand(1, 2, 5, 5, seed=3), rand(1, 2, 5, 5)],
         attrs={"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
         reference=average_pool_grad_reference, name="pads_exclude"),
    Case("portable.AveragePoolGrad", [rand(1, 2, 5, 5, seed=3), rand(1, 2, 5, 5)],
         attrs={"kernel_shape": [3, 3], "pads": [1, 0, 1, 2], "count_include_pad": 1},
         reference=average_pool_grad_reference, name="pads_include"),
    Case("portable.AveragePoolGrad", [rand(1, 1, 4, 4, seed=3), rand(1, 1, 6, 6)],
         attrs={"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                "ceil_mode": 1, "count_include_pad": 1},
         reference=average_pool_grad_reference, name="ceil_mode"),
    Case("portable.AveragePoolGrad", [rand(1, 1, 6, 6, seed=3), rand(1, 1, 7, 7)],
         attrs={"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 1, 0, 0]},
         reference=average_pool_grad_reference, name="dilations"),
]



def global_max_pool_reference(inputs, attrs):
    """onnx.reference's GlobalMaxPool reduces the wrong axes unless there are two spatial."""
    x = inputs[0]
    return [x.max(axis=tuple(range(2, x.ndim)), keepdims=True)]


GLOBAL_POOL = [
    Case("GlobalAveragePool", [rand(2, 3, 4, 5)], name="2d"),
    Case("GlobalAveragePool", [rand(1, 16, 13, 13)], name="2d-gemv"),  # (SqueezeNet's planes)
    Case("GlobalAveragePool", [rand(1, 2, 40, 40)], name="2d-numpy"),  # (past the gemv limit)
    Case("GlobalAveragePool", [rand(2, 3, 5)], name="1d"),
    Case("GlobalAveragePool", [rand(1, 2, 3, 2, 4)], name="3d"),
    Case("GlobalMaxPool", [rand(2, 3, 4, 5)], name="2d"),
    Case("GlobalMaxPool", [rand(2, 3, 5)], reference=global_max_pool_reference, name="1d"),
    Case("GlobalMaxPool", [rand(1, 2, 3, 2, 4)], reference=global_max_pool_reference,
         name="3d"),
]

CASES = (CONV + CONV_TRANSPOSE + CONV_GRAD_WEIGHT + MAX_POOL + MAX_POOL_GRAD + AVERAGE_POOL
         + AVERAGE_POOL_GRAD + GLOBAL_POOL)
