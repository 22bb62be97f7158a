"""Op-table cases: bitwise ops on integers."""
import numpy as np

from tests.ops.harness import Case

A = np.array([[0b1100, 7, -3, 0], [255, 1, -128, 42]], np.int32)
B = np.array([0b1010, 2, -1, 5], np.int32)
U = np.array([1, 2, 200, 255], np.uint8)

CASES = [
    Case("BitwiseAnd", [A, B]),
    Case("BitwiseOr", [A, B]),
    Case("BitwiseXor", [A, B]),
    Case("BitwiseNot", [A]),
    Case("BitwiseAnd", [U, np.array([0x0F], np.uint8)], name="uint8"),
    Case("BitwiseNot", [U], name="uint8"),
    Case("BitShift", [U, np.array([1, 3, 1, 0], np.uint8)], attrs={"direction": "LEFT"}),
    Case("BitShift", [np.array([16, 255, 4096], np.uint16), np.array([2], np.uint16)],
         attrs={"direction": "RIGHT"}, name="right_broadcast"),
    Case("BitShift", [np.array([1, 1 << 40], np.uint64), np.array([63, 3], np.uint64)],
         attrs={"direction": "LEFT"}, name="uint64"),
    # opset 28: signed values (a left shift wraps), counts outside [0, width) give 0 or -1
    Case("BitShift", [np.array([3, -3, 1 << 30, -1, 5], np.int32),
                      np.array([1, 2, 2, 40, -1], np.int32)], attrs={"direction": "LEFT"},
         name="int32_left"),
    Case("BitShift", [np.array([-16, 16, -1, -7, 9], np.int16),
                      np.array([2, 2, 15, 16, -2], np.int16)], attrs={"direction": "RIGHT"},
         name="int16_right"),
    Case("BitShift", [np.array([200, 3], np.uint8), np.array([8, 7], np.uint8)],
         attrs={"direction": "LEFT"}, name="uint8_width"),
]
