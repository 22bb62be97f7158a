"""OpenCL kernels: LpNormalization and MeanVarianceNormalization, composed of the reduction
and elementwise kernels (float16 runs upcast to float32 by the kernel table)."""
from __future__ import annotations

from portable.ops.normalization_extra import MVN_EPSILON, mvn_axes

from backends.opencl.elementwise import apply
from backends.opencl.kernels.table import kernel_table
from backends.opencl.reduction import reduce

kernels, kernel = kernel_table()


@kernel("LpNormalization")
def lp_normalization(ctx, inputs, outputs, attrs):
    x = inputs[0]
    axis = (attrs["axis"] % x.ndim,)
    if attrs["p"] == 1:
        norm = reduce(apply("Abs", x), axis, "sum", True)
    else:
        norm = apply("Sqrt", reduce(x, axis, "sumsq", True))
    # A zero norm means a slice of zeros: dividing it by one gives ONNX's 0/0 = 0.
    safe = apply("Where", apply("Equal", norm, 0.0), 1.0, norm)
    apply("Div", x, safe, out=outputs[0])


@kernel("MeanVarianceNormalization")
def mean_variance_normalization(ctx, inputs, outputs, attrs):
    x = inputs[0]
    axes = mvn_axes(attrs, x.ndim)
    mean = reduce(x, axes, "mean", True)
    variance = apply("Max", apply("Sub", reduce(x, axes, "meansq", True),
                                  apply("Mul", mean, mean)), 0.0)
    scale = apply("Add", apply("Sqrt", variance), MVN_EPSILON)
    apply("Div", apply("Sub", x, mean), scale, out=outputs[0])
