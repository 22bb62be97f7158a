"""Integer-quantized linear ops: MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv and
DynamicQuantizeLinear (ONNX's int8 / uint8 model format, as onnxruntime's quantizer writes it).

``MatMulInteger`` / ``ConvInteger``: int32 ``(A - a_zero_point) @ (B - b_zero_point)`` (the
convolution pads with the zero point, i.e. with 0 after the shift). ``QLinearMatMul`` /
``QLinearConv`` requantize that accumulator (plus QLinearConv's int32 bias) to the output's
type: ``saturate(round_half_to_even(acc * a_scale * b_scale / y_scale) + y_zero_point)``.
``DynamicQuantizeLinear`` picks a uint8 scale and zero point from the data's range (with 0 in
it) and quantizes. None is differentiable.

Zero points and scales are one value (per tensor) or, where ONNX allows it, one per row of the
left operand, per column of the right one, or per output channel of a convolution's weights.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from portable.ir.graph import TensorType
from portable.ops.conv import Geometry, window_geometry
from portable.ops.registry import Attr, declare
from portable.ops.rules import broadcast_shapes, dtypes_of

INT8S = (np.dtype(np.int8), np.dtype(np.uint8))
SCALES = (np.dtype(np.float32), np.dtype(np.float16))


def _require(ctx, index: int, allowed: Sequence[np.dtype], what: str) -> None:
    if ctx.has(index) and ctx.dtype(index) not in allowed:
        ctx.fail(f"{ctx.op.input_name(index)!r} must be {what}, got {ctx.dtype(index).name}")


def _same_as(ctx, index: int, data: int) -> None:
    if ctx.has(index) and ctx.dtype(index) != ctx.dtype(data):
        ctx.fail(f"{ctx.op.input_name(index)!r} is {ctx.dtype(index).name}; it must be "
                 f"{ctx.op.input_name(data)!r}'s {ctx.dtype(data).name}")


def _size(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _check_param(ctx, index: int, allowed: Sequence[tuple[int, ...]], layout: str) -> None:
    """A scale or zero point: one value, or one of the ``allowed`` shapes (``layout`` says
    which values those are)."""
    if not ctx.has(index):
        return
    shape = ctx.shape(index)
    if (_size(shape) == 1 and len(shape) <= 1) or shape in allowed:
        return
    ctx.fail(f"{ctx.op.input_name(index)!r} {shape} must be one value or {layout} "
             f"({' or '.join(str(s) for s in allowed)})")


def matmul_shape(ctx, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy's matmul shape of ``a @ b`` (1-D operands promoted, the added axis dropped)."""
    if not a or not b:
        ctx.fail(f"operands must have rank >= 1, got {a} and {b}")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        ctx.fail(f"inner dimensions differ: {a} @ {b}")
    batch = broadcast_shapes(ctx, [a2[:-2], b2[:-2]])
    return tuple(batch) + ((a2[-2],) if len(a) > 1 else ()) + ((b2[-1],) if len(b) > 1 else ())


def row_param(value: Any, rank: int) -> Any:
    """A left operand's parameter made broadcastable against it: one value stays one value, a
    vector of one value per row becomes a column (M, 1); others are already shaped."""
    if value.size == 1:
        return value.reshape(())
    return value.reshape(-1, 1) if value.ndim == 1 and rank > 1 else value


def column_param(value: Any) -> Any:
    """A right operand's parameter: one value, or one per column (N,) / (..., 1, N)."""
    return value.reshape(()) if value.size == 1 else value


def channel_param(value: Any, rank: int) -> Any:
    """A convolution weight's parameter: one value, or one per output channel, as (M, 1, ...)
    against weights of ``rank`` dims."""
    return value.reshape(()) if value.size == 1 else value.reshape((-1,) + (1,) * (rank - 1))


def output_channel_param(value: Any, rank: int) -> Any:
    """One value per output channel as (1, M, 1, ...) against the output of ``rank`` dims."""
    return value.reshape(()) if value.size == 1 else value.reshape((1, -1) + (1,) * (rank - 2))


# -- MatMulInteger and QLinearMatMul -------------------------------------------------------------


def _matmul_params(ctx, a: int, b: int, a_params: Sequence[int], b_params: Sequence[int]):
    shape_a, shape_b = ctx.shape(a), ctx.shape(b)
    rows = [(shape_a[-2],), shape_a[:-1] + (1,)] if len(shape_a) > 1 else []
    columns = [(shape_b[-1],), shape_b[:-2] + (1, shape_b[-1])] if len(shape_b) > 1 else []
    for index in a_params:
        _check_param(ctx, index, rows, f"one per row of {ctx.op.input_name(a)!r}")
    for index in b_params:
        _check_param(ctx, index, columns, f"one per column of {ctx.op.input_name(b)!r}")


def _matmul_integer_infer(ctx):
    for index in (0, 1):
        _require(ctx, index, INT8S, "int8 or uint8")
    _same_as(ctx, 2, 0)
    _same_as(ctx, 3, 1)
    _matmul_params(ctx, 0, 1, (2,), (3,))
    return [TensorType(matmul_shape(ctx, ctx.shape(0), ctx.shape(1)), np.int32)]


declare("MatMulInteger", inputs=("A", "B", "a_zero_point?", "b_zero_point?"), outputs=("Y",),
        infer=_matmul_integer_infer, onnx_since=10, dtype_rule=dtypes_of(np.int32, inputs=()))


def _check_scales(ctx, indices: Sequence[int]) -> None:
    for index in indices:
        _require(ctx, index, SCALES, "float32 or float16")
    if len({ctx.dtype(i) for i in indices}) > 1:
        ctx.fail(f"the scales must share one dtype, got "
                 f"{[ctx.dtype(i).name for i in indices]}")


def _qlinear_matmul_infer(ctx):
    for index in (0, 3, 7):
        _require(ctx, index, INT8S, "int8 or uint8")
    _same_as(ctx, 2, 0)
    _same_as(ctx, 5, 3)
    _check_scales(ctx, (1, 4, 6))
    _matmul_params(ctx, 0, 3, (1, 2), (4, 5))
    for index in (6, 7):
        _check_param(ctx, index, [], "")
    shape = matmul_shape(ctx, ctx.shape(0), ctx.shape(3))
    return [TensorType(shape, ctx.dtype(7))]


declare("QLinearMatMul", inputs=("a", "a_scale", "a_zero_point", "b", "b_scale",
                                 "b_zero_point", "y_scale", "y_zero_point"),
        outputs=("y",), infer=_qlinear_matmul_infer, onnx_since=21,
        dtype_rule=dtypes_of(7, inputs=()))

# -- ConvInteger and QLinearConv -----------------------------------------------------------------

_CONV_ATTRS = {"auto_pad": Attr("string", "NOTSET"), "dilations": Attr("ints", None),
               "group": Attr("int", 1), "kernel_shape": Attr("ints", None),
               "pads": Attr("ints", None), "strides": Attr("ints", None)}


def conv_geometry(ctx, x: int, w: int) -> tuple[tuple[int, ...], Geometry]:
    """The output shape and window geometry of X (N, C, D1, ...) convolved with W (M, C/group,
    k1, ...), as Conv's."""
    xs, ws = ctx.shape(x), ctx.shape(w)
    group = ctx.attrs["group"]
    if len(xs) < 3 or len(ws) != len(xs):
        ctx.fail(f"X must be (N, C, D1, ...) and W (M, C/group, k1, ...) of the same rank, got "
                 f"{xs} and {ws}")
    declared = ctx.attrs["kernel_shape"]
    if declared is not None and tuple(declared) != tuple(ws[2:]):
        ctx.fail(f"kernel_shape={list(declared)} differs from W's spatial shape {ws[2:]}")
    if group < 1 or xs[1] != ws[1] * group or ws[0] % group:
        ctx.fail(f"X has {xs[1]} channels and W is {ws}: W must be (M, C/group, ...) with M "
                 f"divisible by group={group}")
    try:
        geom = window_geometry(xs[2:], ws[2:], ctx.attrs)
    except ValueError as exc:
        ctx.fail(str(exc))
    return (xs[0], ws[0]) + tuple(geom.out), geom


def _conv_integer_infer(ctx):
    for index in (0, 1):
        _require(ctx, index, INT8S, "int8 or uint8")
    _same_as(ctx, 2, 0)
    _same_as(ctx, 3, 1)
    shape, _ = conv_geometry(ctx, 0, 1)
    _check_param(ctx, 2, [], "")
    _check_param(ctx, 3, [(shape[1],)], "one per output channel")
    return [TensorType(shape, np.int32)]


declare("ConvInteger", inputs=("x", "w", "x_zero_point?", "w_zero_point?"), outputs=("y",),
        infer=_conv_integer_infer, onnx_since=10, attrs=_CONV_ATTRS,
        dtype_rule=dtypes_of(np.int32, inputs=()))


def _qlinear_conv_infer(ctx):
    for index in (0, 3, 7):
        _require(ctx, index, INT8S, "int8 or uint8")
    _same_as(ctx, 2, 0)
    _same_as(ctx, 5, 3)
    _check_scales(ctx, (1, 4, 6))
    if ctx.dtype(1) != np.float32:
        ctx.fail(f"the scales must be float32, got {ctx.dtype(1).name}")
    shape, _ = conv_geometry(ctx, 0, 3)
    for index in (1, 2, 6, 7):
        _check_param(ctx, index, [], "")
    for index in (4, 5):
        _check_param(ctx, index, [(shape[1],)], "one per output channel")
    if ctx.has(8) and (ctx.dtype(8) != np.int32 or ctx.shape(8) != (shape[1],)):
        ctx.fail(f"B must be int32 ({shape[1]},), one per output channel, got {ctx.type(8)!r}")
    return [TensorType(shape, ctx.dtype(7))]


declare("QLinearConv", inputs=("x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point",
                               "y_scale", "y_zero_point", "B?"),
        outputs=("y",), infer=_qlinear_conv_infer, onnx_since=10, attrs=_CONV_ATTRS,
        dtype_rule=dtypes_of(7, inputs=()))

# -- DynamicQuantizeLinear -----------------------------------------------------------------------


def dynamic_quantize_params(low: float, high: float) -> tuple[np.float32, np.float32]:
    """The uint8 scale and (rounded, still float) zero point of data in ``[low, high]``,
    computed in float32 as onnx.reference and onnxruntime do: the range is widened to hold 0,
    ``scale = (max - min) / 255`` (1 / 255 for an all-zero range) and
    ``zero_point = round_half_to_even(clip(-min / scale, 0, 255))``."""
    high, low = np.float32(max(0.0, high)), np.float32(min(0.0, low))
    scale = np.float32(np.float32(1.0) if high == low else high - low) / np.float32(255)
    zero = np.float32(np.rint(np.clip(np.float32(0) - low / scale, 0, 255)))
    return scale, zero


def _dynamic_quantize_infer(ctx):
    if ctx.dtype(0) != np.float32:
        ctx.fail(f"x must be float32, got {ctx.dtype(0).name}")
    return [TensorType(ctx.shape(0), np.uint8), TensorType((), np.float32),
            TensorType((), np.uint8)]


declare("DynamicQuantizeLinear", inputs=("x",), outputs=("y", "y_scale", "y_zero_point"),
        infer=_dynamic_quantize_infer, onnx_since=11,
        dtype_rule=dtypes_of(np.uint8, np.float32, np.uint8, inputs=()))
