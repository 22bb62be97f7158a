"""Op-table cases: QuantizeLinear and DequantizeLinear, per tensor, per axis and blocked; and
the low-precision types (ml_dtypes) through them, Cast, CastLike and BitCast."""
import numpy as np

from tests.ops.harness import Case, rand

X = rand(2, 3, 4, low=-6.0, high=6.0)
# halves land on .5 exactly: rounding goes to even; large values saturate
EDGES = np.array([[-300.0, -2.5, -0.5, 0.5, 1.5, 2.5, 300.0]], np.float32)
Q8 = np.random.default_rng(0).integers(0, 256, (2, 3, 4)).astype(np.uint8)
QS8 = np.random.default_rng(1).integers(-128, 128, (2, 3, 4)).astype(np.int8)

CASES = [
    Case("QuantizeLinear", [X, np.float32(0.05), np.uint8(128)], name="per_tensor"),
    Case("QuantizeLinear", [EDGES, np.float32(1.0), np.int8(0)], name="halves_saturate"),
    Case("QuantizeLinear", [X, np.array([0.1, 0.02, 0.5], np.float32),
                            np.array([0, -3, 7], np.int8)], name="per_axis"),
    Case("QuantizeLinear", [X, rand(2, 3, 2, low=0.01, high=0.2),
                            np.zeros((2, 3, 2), np.int16)], attrs={"axis": 2, "block_size": 2},
         name="blocked_int16"),
    Case("QuantizeLinear", [X, np.float32(0.1)], name="no_zero_point_uint8"),
    Case("QuantizeLinear", [X, np.float32(0.1)], attrs={"output_dtype": 3}, name="output_int8"),
    Case("DequantizeLinear", [Q8, np.float32(0.05), np.uint8(128)], name="per_tensor"),
    Case("DequantizeLinear", [QS8, np.array([0.1, 0.02, 0.5, 1.0], np.float32),
                              np.array([0, -3, 7, 1], np.int8)], attrs={"axis": -1},
         name="per_axis"),
    Case("DequantizeLinear", [QS8, rand(1, 3, 4, low=0.01, high=0.2)],
         attrs={"axis": 0, "block_size": 2}, name="blocked"),
    Case("DequantizeLinear", [np.array([-70000, 5, 70000], np.int32), np.float32(0.5)],
         name="int32"),
]

# -- low-precision types (ml_dtypes): 4- and 2-bit integers, float8, float4, bfloat16 ---------
try:
    import ml_dtypes
except ImportError:  # (an optional dependency: without it these types are refused, not run)
    ml_dtypes = None
if ml_dtypes is not None:
    I4 = np.random.default_rng(2).integers(-8, 8, (4, 6)).astype(ml_dtypes.int4)
    U4 = np.random.default_rng(3).integers(0, 16, (4, 6)).astype(ml_dtypes.uint4)
    W = rand(4, 6, low=-3.0, high=3.0)
    # beyond float8's range (e4m3fn: 448, e5m2: 57344), halfway points, inf and NaN
    WIDE = np.array([[-1e6, -500.0, -448.0, -0.3, 0.0, 1.0625, 460.0, 6e4, np.inf, np.nan]],
                    np.float32)

    CASES += [
        # blocked int4 weight-only quantization: one scale per 3 elements of each row
        Case("DequantizeLinear",
             [I4, rand(4, 2, low=0.01, high=0.2), np.zeros((4, 2), I4.dtype)],
             attrs={"axis": 1, "block_size": 3}, name="int4_blocked"),
        Case("DequantizeLinear", [U4, np.float32(0.5), U4.dtype.type(8)], name="uint4"),
        Case("DequantizeLinear", [W.astype(ml_dtypes.float8_e4m3fn), np.float32(2.0)],
             name="float8e4m3fn"),
        Case("DequantizeLinear", [I4, rand(6, low=0.01, high=0.2).astype(ml_dtypes.bfloat16)],
             attrs={"axis": 1}, name="int4_bfloat16_scale"),
        Case("QuantizeLinear",
             [W, rand(4, 2, low=0.2, high=0.5), np.zeros((4, 2), ml_dtypes.int4)],
             attrs={"axis": 1, "block_size": 3}, name="int4_blocked"),
        Case("QuantizeLinear", [W, np.float32(0.1)], attrs={"output_dtype": 25}, name="uint2"),
        Case("QuantizeLinear", [WIDE, np.float32(1.0), np.zeros((), ml_dtypes.float8_e4m3fn)],
             name="float8e4m3fn_saturate"),
        Case("QuantizeLinear", [WIDE, np.float32(1.0), np.zeros((), ml_dtypes.float8_e5m2)],
             attrs={"saturate": 0}, name="float8e5m2_no_saturate"),
        Case("QuantizeLinear", [W, np.float32(0.5)], attrs={"output_dtype": 23}, name="float4e2m1"),
        # Cast: saturating and not, every family; float8e8m0 rounding modes
        Case("Cast", [WIDE], attrs={"to": 17}, name="to_float8e4m3fn_saturate", grad=False),
        Case("Cast", [WIDE], attrs={"to": 19, "saturate": 0}, name="to_float8e5m2", grad=False),
        Case("Cast", [WIDE], attrs={"to": 18}, name="to_float8e4m3fnuz", grad=False),
        Case("Cast", [np.abs(W)], attrs={"to": 24, "round_mode": "nearest"}, name="to_e8m0",
             grad=False),
        Case("Cast", [W], attrs={"to": 16}, name="to_bfloat16", grad=False),
        Case("Cast", [I4], attrs={"to": 1}, name="int4_to_float", grad=False),
        Case("Cast", [W], attrs={"to": 22}, name="to_int4", grad=False),
        Case("CastLike", [W, np.zeros(1, ml_dtypes.float4_e2m1fn)], name="to_float4", grad=False),
        # BitCast: the same bits as another type of the same width
        Case("BitCast", [W], attrs={"to": 6}, name="float_to_int32"),
        Case("BitCast", [W.astype(np.float16)], attrs={"to": 16}, name="float16_to_bfloat16"),
        Case("BitCast", [I4], attrs={"to": 21}, name="int4_to_uint4"),
        Case("BitCast", [np.array([True, False])], attrs={"to": 2}, name="bool_to_uint8"),
    ]

    def _unpacked_nibbles(inputs, attrs):
        """Two 4-bit values a byte, the first in the low nibble (ONNX's packing), sign-extended
        for int4: written out by hand, not through portable.dtypes."""
        packed = inputs[0].astype(np.int16)
        low, high = packed & 0xF, packed >> 4
        values = np.stack([low, high], axis=1).reshape(-1)[:int(np.prod(attrs["shape"]))]
        if attrs["to"] == 22:
            values = np.where(values >= 8, values - 16, values)
        dtype = ml_dtypes.int4 if attrs["to"] == 22 else ml_dtypes.uint4
        return [values.astype(dtype).reshape(attrs["shape"])]

    PACKED = np.random.default_rng(5).integers(0, 256, 12).astype(np.uint8)
    CASES += [
        Case("portable.UnpackBits", [PACKED], attrs={"to": 22, "shape": [23]}, grad=False,
             reference=_unpacked_nibbles, name="int4_odd_count"),
        Case("portable.UnpackBits", [PACKED], attrs={"to": 21, "shape": [4, 6]}, grad=False,
             reference=_unpacked_nibbles, name="uint4_matrix"),
    ]

    # saturating casts from sources that cannot hold float8's bounds themselves (uint8 wraps
    # them, bool is 0 or 1, e4m3fn has no 57344): clamped in a wider float
    CASES += [
        Case("Cast", [np.array([212, 0, 255], np.uint8)], attrs={"to": 17}, grad=False,
             name="uint8_to_float8e4m3fn_saturate"),
        Case("Cast", [np.array([True, False])], attrs={"to": 17}, grad=False,
             name="bool_to_float8e4m3fn"),
        Case("Cast", [np.array([448, -448, 1.5, np.nan], ml_dtypes.float8_e4m3fn)],
             attrs={"to": 19}, grad=False, name="float8e4m3fn_to_float8e5m2"),
    ]
