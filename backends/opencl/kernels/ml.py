"""OpenCL kernels: the ai.onnx.ml ops.

Binarizer is one generated elementwise kernel and ArrayFeatureExtractor a gather along the
last axis. LabelEncoder (a key look-up that may hold strings, which the device cannot store)
and TreeEnsemble (data-dependent tree walks) have no OpenCL kernel by design: they are refused
by name, or run on the host through the explicit fallback when the user allows it.
"""
from __future__ import annotations

import math

import numpy as np

from backends.opencl.elementwise import apply
from backends.opencl.fallback import host_only_kernel
from backends.opencl.gather import gather_axis
from backends.opencl.kernels.table import kernel_table

kernels, kernel = kernel_table()


@kernel("ai.onnx.ml.Binarizer")
def binarizer(ctx, inputs, outputs, attrs):
    x, threshold = inputs[0], float(attrs["threshold"])
    if x.dtype.kind in "iu":
        # An integer x > t is x >= floor(t) + 1: exact in x's own type, where comparing in
        # float would need float64 (absent on phone GPUs), and would still round |x| > 2**53.
        info = np.iinfo(x.dtype)
        bound = math.floor(threshold) + 1 if math.isfinite(threshold) else (
            info.min if threshold < 0 else info.max + 1)  # (NaN: nothing is above it)
        if bound > info.max:
            above = apply("Greater", x, x.dtype.type(info.max))  # always false
        else:
            above = apply("GreaterOrEqual", x, x.dtype.type(max(bound, info.min)))
    else:
        above = apply("Greater", x, threshold)
    apply("Cast", above, out=outputs[0])


@kernel("ai.onnx.ml.ArrayFeatureExtractor")
def array_feature_extractor(ctx, inputs, outputs, attrs):
    x, indices = inputs
    index = indices if indices.is_contiguous else indices.copy()
    index = index.reshape((index.size,))
    out = outputs[0]
    shape = x.shape[:-1] + (index.size,)
    target = out.reshape(shape) if out.is_contiguous else out
    gather_axis(x, index, x.ndim - 1, target)


kernel("ai.onnx.ml.LabelEncoder", half="native")(host_only_kernel(
    "ai.onnx.ml.LabelEncoder", lambda attrs: "ai.onnx.ml.LabelEncoder (a key look-up whose "
    "keys or values may be strings) has no OpenCL kernel"))
kernel("ai.onnx.ml.TreeEnsemble", half="native")(host_only_kernel(
    "ai.onnx.ml.TreeEnsemble", lambda attrs: "ai.onnx.ml.TreeEnsemble (data-dependent tree "
    "walks) has no OpenCL kernel"))
