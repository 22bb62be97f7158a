"""OpenCL kernels of the ops whose output shapes depend on values: NonZero, Unique, Compress,
NonMaxSuppression (``portable/ops/data_dependent.py``).

The count that sizes each output has to reach the host before the output can be allocated, so
each kernel reads the least it can: Compress reads only its condition (one flag per slice)
and gathers the selected slices on the device (the shared Gather kernel); NonZero casts to a
byte mask on the device and reads that (a quarter of a float32 tensor); Unique (a sort) and
NonMaxSuppression (a greedy loop over sorted boxes, sequential by nature, over a few thousand
boxes at most) run their selection on the host, over the logic NumPy's kernels share, and
upload the result. Storage-only element types (bfloat16, float8) are taken as they are
(``half="storage"``) and moved on the host. Outputs the planner placed are written; the
others are made and returned (``dynamic_outputs``, ``portable/backend.py``).
"""
from __future__ import annotations

import numpy as np

from portable.backend import returned_outputs
from portable.dtypes import is_low_precision
from portable.ops.data_dependent import (compress_positions, non_max_suppression,
                                         nonzero_indices, unique as unique_host)

from backends.opencl.allocator import empty, from_numpy, host_value, to_numpy
from backends.opencl.elementwise import apply, assign
from backends.opencl.gather import gather_axis
from backends.opencl.kernels.table import kernel_table

kernels, kernel = kernel_table()


def _deliver(runtime, outputs: list, index: int, host: np.ndarray):
    """Output ``index`` holding ``host``: written into the planned buffer when there is one
    (its shape must match), else uploaded to a new device array."""
    given = outputs[index]
    if given is None:
        return from_numpy(runtime, host)
    if tuple(given.shape) != host.shape:
        raise ValueError(f"output {index} was planned as {tuple(given.shape)}, the kernel "
                         f"computed {host.shape}")
    assign(given, host)
    return given


@kernel("NonZero", half="storage")
def nonzero(ctx, inputs, outputs, attrs):
    x = inputs[0]
    if x.dtype.kind not in "fiu" or x.dtype.itemsize == 1 or x.size == 0:
        flags = to_numpy(x)  # (bool, bytes, and the storage-only types, read as they are)
    else:  # non-zero (NaN included) as one byte per element, made on the device
        flags = to_numpy(apply("Cast", x, dtype=np.bool_))
    y = _deliver(x.runtime, outputs, 0, nonzero_indices(np.asarray(flags)))
    return returned_outputs(outputs, [y])


@kernel("Unique", half="storage")
def unique(ctx, inputs, outputs, attrs):
    x = inputs[0]
    made = unique_host(to_numpy(x), attrs["axis"], attrs["sorted"])[:len(outputs)]
    return returned_outputs(outputs, [_deliver(x.runtime, outputs, i, np.ascontiguousarray(v))
                                      for i, v in enumerate(made)])


@kernel("Compress", half="storage")
def compress(ctx, inputs, outputs, attrs):
    x = inputs[0].contiguous()
    axis = attrs["axis"]
    source = x.reshape(x.size) if axis is None else x
    axis = 0 if axis is None else axis % x.ndim
    positions = compress_positions(host_value(inputs[1]), source.shape[axis])
    shape = source.shape[:axis] + (positions.size,) + source.shape[axis + 1:]
    y = outputs[0]
    if is_low_precision(x.dtype):  # a storage-only type (bfloat16, float8): moved on the host
        host = np.take(to_numpy(source), positions, axis=axis)
        return returned_outputs(outputs, [_deliver(x.runtime, outputs, 0, host)])
    if y is None:
        y = empty(x.runtime, shape, x.dtype)
    elif tuple(y.shape) != shape:
        raise ValueError(f"output 0 was planned as {tuple(y.shape)}, the kernel computed "
                         f"{shape}")
    target = y if y.is_contiguous else empty(x.runtime, shape, x.dtype)
    if target.size:
        gather_axis(source, from_numpy(x.runtime, positions), axis, target)
    if target is not y:
        assign(y, target)
    return returned_outputs(outputs, [y])


@kernel("NonMaxSuppression", half="storage")
def nms(ctx, inputs, outputs, attrs):
    host = [None if a is None else np.asarray(host_value(a)) for a in inputs]
    host += [None] * (5 - len(host))
    rows = non_max_suppression(*host, attrs["center_point_box"])
    return returned_outputs(outputs, [_deliver(inputs[0].runtime, outputs, 0, rows)])
