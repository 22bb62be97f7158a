"""Op-table cases: MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv (per tensor, per row /
column / output channel, int8 and uint8, with padding, strides and groups) and
DynamicQuantizeLinear."""
import numpy as np

from tests.ops.harness import Case, rand

_RNG = np.random.default_rng(23)


def u8(*shape):
    return _RNG.integers(0, 256, shape).astype(np.uint8)


def s8(*shape):
    return _RNG.integers(-128, 128, shape).astype(np.int8)


def f32(*values):
    return np.array(values, np.float32).reshape(-1) if len(values) > 1 else np.float32(values[0])


CASES = [
    Case("MatMulInteger", [u8(3, 5), u8(5, 4), np.uint8(12), np.uint8(200)], name="uint8"),
    # per row of A as (..., M, 1): onnx.reference broadcasts a 1-D per-row vector along K
    Case("MatMulInteger", [s8(2, 3, 6), u8(6, 2), s8(2, 3, 1), u8(2)], name="per_row_column"),
    Case("MatMulInteger", [u8(4, 7), s8(2, 7, 3)], name="batch_no_zero_points"),
    # the spec's per-row vector [M] for a 2-D A, against its closed form
    Case("MatMulInteger", [u8(3, 4), u8(4, 2), u8(3), u8(2)], name="per_row_vector_2d",
         reference=lambda ins, attrs: [
             (ins[0].astype(np.int32) - ins[2].astype(np.int32)[:, None])
             @ (ins[1].astype(np.int32) - ins[3].astype(np.int32))]),
    Case("ConvInteger", [u8(1, 2, 5, 5), u8(3, 2, 3, 3), np.uint8(7), np.uint8(128)],
         attrs={"pads": [1, 1, 1, 1]}, name="padded_uint8"),
    Case("ConvInteger", [s8(2, 4, 6, 5), s8(4, 2, 2, 3), np.int8(-3), s8(4)],
         attrs={"group": 2, "strides": [2, 1]}, name="grouped_per_channel"),
    Case("ConvInteger", [u8(1, 1, 7), u8(2, 1, 3)], attrs={"auto_pad": "SAME_UPPER"},
         name="1d_same_upper"),
    Case("QLinearMatMul", [u8(3, 4), f32(0.02), np.uint8(110), u8(4, 5), f32(0.05),
                           np.uint8(120), f32(0.3), np.uint8(100)], name="uint8_per_tensor"),
    Case("QLinearMatMul", [s8(2, 3, 4), rand(2, 3, 1, low=0.01, high=0.03), s8(2, 3, 1), s8(4, 2),
                           f32(0.05, 0.04), s8(2), f32(0.2), np.int8(-5)],
         name="int8_per_row_column"),
    Case("QLinearMatMul", [u8(2, 4), np.float16(0.02), np.uint8(110), u8(4, 3),
                           np.float16(0.05), np.uint8(120), np.float16(0.3), np.int8(3)],
         name="float16_scales_int8_out"),
    Case("QLinearConv", [u8(1, 2, 5, 5), f32(0.03), np.uint8(120), u8(3, 2, 3, 3), f32(0.02),
                         np.uint8(128), f32(0.15), np.uint8(130),
                         _RNG.integers(-500, 500, 3).astype(np.int32)],
         attrs={"pads": [1, 0, 1, 2], "strides": [1, 2]}, name="uint8_bias"),
    Case("QLinearConv", [s8(1, 4, 4, 4), f32(0.05), np.int8(2), s8(4, 2, 2, 2),
                         f32(0.01, 0.02, 0.03, 0.04), np.zeros(4, np.int8), f32(0.1),
                         np.int8(-1)],
         attrs={"group": 2, "dilations": [1, 2], "pads": [0, 1, 0, 1]},
         name="int8_per_channel_grouped"),
    Case("DynamicQuantizeLinear", [rand(3, 4, low=-2.0, high=5.0)], outputs=3, name="mixed"),
    Case("DynamicQuantizeLinear", [rand(2, 5, low=0.5, high=3.0)], outputs=3,
         name="positive"),
    Case("DynamicQuantizeLinear", [np.zeros((2, 2), np.float32)], outputs=3, name="zeros"),
]
