"""Op-table cases: QuantizeLinear and DequantizeLinear, per tensor, per axis and blocked."""
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
