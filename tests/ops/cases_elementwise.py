"""Op-table cases: elementwise ops."""
import numpy as np

from tests.ops.harness import Case, rand

CASES = [
    Case("Add", [rand(3, 4), rand(3, 4, seed=1)]),
    Case("Add", [rand(2, 3, 4), rand(4, 1, seed=1)[:, 0]], name="broadcast"),
    Case("Sub", [rand(3, 4), rand(1, 4, seed=1)], name="broadcast"),
    Case("Mul", [rand(2, 3), rand(2, 1, 3, seed=1)], name="broadcast"),
    Case("Div", [rand(3, 4), rand(3, 4, seed=1, low=0.5, high=2.0)]),
    Case("Div", [np.array([7, -7, 5], np.int64), np.array([2, 2, -3], np.int64)], name="int",
         grad=False),
    Case("Neg", [rand(3, 4)]),
    Case("Exp", [rand(3, 4)]),
    Case("Relu", [rand(4, 5)]),
    Case("Greater", [rand(3, 4), rand(3, 4, seed=1)]),
    Case("Identity", [rand(3, 4)]),
    Case("Cast", [rand(3, 4)], attrs={"to": 11}, name="to_double"),
    Case("Cast", [rand(3, 4, low=-5, high=5)], attrs={"to": 7}, name="to_int64", grad=False),
]
