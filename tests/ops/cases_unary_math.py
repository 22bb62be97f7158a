"""Op-table cases: trigonometric, hyperbolic, rounding and sign ops, Softsign and Selu.

Inputs stay inside each function's domain, and away from the points where a rounding op
jumps, so that finite differences see the gradient the op declares."""
import numpy as np

from tests.ops.harness import Case, rand

# x.25 and x.75 steps: no input sits on an integer or a half, where rounding jumps
OFF_STEPS = (np.arange(-8, 8, dtype=np.float32).reshape(4, 4) * 0.5 + 0.25)
HALVES = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5], np.float32)  # Round: half to even

CASES = [
    Case("Sin", [rand(3, 4, low=-3.0, high=3.0)]),
    Case("Cos", [rand(3, 4, low=-3.0, high=3.0)]),
    Case("Tan", [rand(3, 4, low=-1.2, high=1.2)]),
    Case("Asin", [rand(3, 4, low=-0.9, high=0.9)]),
    Case("Acos", [rand(3, 4, low=-0.9, high=0.9)]),
    Case("Atan", [rand(3, 4, low=-4.0, high=4.0)]),
    Case("Sinh", [rand(3, 4, low=-2.0, high=2.0)]),
    Case("Cosh", [rand(3, 4, low=-2.0, high=2.0)]),
    Case("Asinh", [rand(3, 4, low=-4.0, high=4.0)]),
    Case("Acosh", [rand(3, 4, low=1.2, high=4.0)]),
    Case("Atanh", [rand(3, 4, low=-0.9, high=0.9)]),
    Case("Softsign", [rand(3, 4, low=-3.0, high=3.0)]),
    Case("Selu", [rand(3, 4, low=-2.0, high=2.0)]),
    Case("Selu", [rand(3, 4, low=-2.0, high=2.0)], attrs={"alpha": 2.0, "gamma": 0.5},
         name="attrs"),
    Case("Floor", [OFF_STEPS]),
    Case("Ceil", [OFF_STEPS]),
    Case("Round", [OFF_STEPS]),
    Case("Round", [HALVES], name="halves_to_even", grad=False),
    Case("Sign", [OFF_STEPS]),
    Case("Sign", [np.array([-3, 0, 7], np.int32)], name="int", grad=False),
    # (inputs away from each kink, where finite differences would straddle it)
    Case("ThresholdedRelu", [OFF_STEPS], attrs={"alpha": 0.6}),
    Case("Shrink", [OFF_STEPS], attrs={"bias": 0.3, "lambd": 0.6}),
    Case("Shrink", [np.array([-5, -1, 0, 2, 9], np.int32)], attrs={"bias": 1.0, "lambd": 1.5},
         name="int", grad=False),
    Case("Celu", [rand(3, 4, low=-2.0, high=2.0)], attrs={"alpha": 0.7}),
    Case("Mish", [rand(3, 4, low=-4.0, high=4.0)]),
    Case("Mish", [np.array([-100.0, 30.0, 100.0], np.float32)], name="large", grad=False),
    Case("Swish", [rand(3, 4, low=-4.0, high=4.0)], attrs={"alpha": 1.5}),
    Case("IsNaN", [np.array([1.0, np.nan, -np.inf, 0.0], np.float32)]),
    Case("IsInf", [np.array([1.0, np.nan, -np.inf, np.inf], np.float32)]),
    Case("IsInf", [np.array([1.0, np.nan, -np.inf, np.inf], np.float32)],
         attrs={"detect_negative": 0}, name="positive_only"),
]
