"""Op-table cases: elementwise ops."""
import numpy as np

from tests.ops.harness import Case, rand


def typed_onnx_reference(op):
    """onnx.reference run on a one-node model with typed inputs: ops that ONNX defines by a
    context-dependent function (Gelu) can only be expanded once their input types are known."""
    def run(inputs, attrs):
        import onnx
        from onnx import helper
        from onnx.reference import ReferenceEvaluator

        names = [f"in{i}" for i in range(len(inputs))]
        node = helper.make_node(op, names, ["out0"], **attrs)
        value_infos = [helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
            for name, value in zip(names, inputs)]
        graph = helper.make_graph([node], op, value_infos,
                                  [helper.make_tensor_value_info("out0", 0, None)])
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", onnx.defs.onnx_opset_version())])
        return ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))
    return run


def ints(*values, dtype=np.int64):
    return np.array(values, dtype)


def away_from(x, kinks, gap=0.05):
    """``x`` with every element at least ``gap`` from each kink (finite differences need it)."""
    x = x.copy()
    for kink in kinks:
        near = np.abs(x - kink) < gap
        x[near] = kink + np.where(x[near] >= kink, gap, -gap)
    return x


WIDE = np.linspace(-6, 6, 49, dtype=np.float32)  # forward only: tails and saturation
COND = rand(3, 4, seed=5) > 0

CASES = [
    # -- binary arithmetic
    Case("Add", [rand(3, 4), rand(3, 4, seed=1)]),
    Case("Add", [rand(2, 3, 4), rand(4, 1, seed=1)[:, 0]], name="broadcast"),
    Case("Sub", [rand(3, 4), rand(1, 4, seed=1)], name="broadcast"),
    Case("Mul", [rand(2, 3), rand(2, 1, 3, seed=1)], name="broadcast"),
    Case("Div", [rand(3, 4), rand(3, 4, seed=1, low=0.5, high=2.0)]),
    Case("Div", [ints(7, -7, 5), ints(2, 2, -3)], name="int", grad=False),
    Case("Mod", [ints(7, -7, 7, -7, 6), ints(3, 3, -3, -3, 3)], name="int", grad=False),
    Case("Mod", [ints(7, -7, 7, -7, dtype=np.int32), ints(3, 3, -3, -3, dtype=np.int32)],
         {"fmod": 1}, name="int_fmod", grad=False),
    Case("Mod", [away_from(rand(3, 4) * 5, [-4, -2, 0, 2, 4], 0.1),
                 np.array([2.0], np.float32)], {"fmod": 1}, name="float_fmod"),
    Case("Pow", [rand(3, 4, low=0.5, high=2.0), rand(3, 4, seed=1)]),
    Case("Pow", [rand(2, 3, low=0.5, high=2.0), np.array(2.5, np.float32)], name="scalar_exp",
         grad=False),
    Case("Pow", [rand(2, 3, low=0.5, high=2.0), np.array([2.5], np.float32)], name="one_exp"),
    Case("Pow", [rand(2, 4), ints(2, 3, 1, 0)], name="int_exp"),
    Case("Pow", [rand(3, 1, low=0.5, high=2.0), rand(4, seed=1, dtype=np.float64)],
         name="mixed_float"),
    Case("Pow", [ints(1, 2, 3, -2), ints(2, 0, 3, 3)], name="int", grad=False),
    # -- unary
    Case("Neg", [rand(3, 4)]),
    Case("Abs", [away_from(rand(3, 4), [0.0])]),
    Case("Abs", [ints(-3, 0, 5, dtype=np.int32)], name="int", grad=False),
    Case("Exp", [rand(3, 4)]),
    Case("Log", [rand(3, 4, low=0.5, high=3.0)]),
    Case("Sqrt", [rand(3, 4, low=0.5, high=3.0)]),
    Case("Reciprocal", [away_from(rand(3, 4, low=-2.0, high=2.0), [0.0], gap=0.3)]),
    Case("Sigmoid", [rand(3, 4, low=-4.0, high=4.0)]),
    Case("Sigmoid", [np.array([-100, -20, -1, 0, 1, 20, 100], np.float32)], name="tails",
         grad=False),
    Case("Tanh", [rand(3, 4, low=-3.0, high=3.0)]),
    Case("Softplus", [rand(3, 4, low=-4.0, high=4.0)]),
    Case("Softplus", [np.array([-100, -20, 0, 20, 100], np.float32)], name="tails",
         grad=False),
    Case("Erf", [rand(3, 4, low=-3.0, high=3.0)]),
    Case("Erf", [WIDE], name="wide", grad=False),
    # onnx.reference computes Erf in float32 whatever the input type: float32 tolerances.
    Case("Erf", [WIDE.astype(np.float64)], name="wide64", grad=False, rtol=1e-7, atol=1e-7),
    Case("Erf", [WIDE.astype(np.float16)], name="half", grad=False, rtol=1e-3),
    Case("Not", [COND]),
    # -- activations with attributes
    Case("Relu", [away_from(rand(4, 5), [0.0])]),
    Case("LeakyRelu", [away_from(rand(3, 4), [0.0])]),
    Case("LeakyRelu", [away_from(rand(3, 4), [0.0])], attrs={"alpha": 0.3}, name="alpha"),
    Case("LeakyRelu", [away_from(rand(3, 4), [0.0])], attrs={"alpha": 2.0}, name="steep"),
    Case("Elu", [away_from(rand(3, 4, low=-3.0, high=3.0), [0.0])]),
    Case("Elu", [away_from(rand(3, 4, low=-3.0, high=3.0), [0.0])], attrs={"alpha": 0.5},
         name="alpha"),
    Case("Elu", [np.array([-100, -1, 0, 1, 100], np.float32)], name="tails", grad=False),
    Case("PRelu", [away_from(rand(2, 3, 4), [0.0]), rand(4, seed=1)], name="per_channel"),
    Case("PRelu", [away_from(rand(2, 3, 4), [0.0]), rand(3, 1, seed=1)], name="broadcast"),
    Case("PRelu", [away_from(rand(3, 4), [0.0]), rand(3, 4, seed=1)], name="same_shape"),
    Case("HardSigmoid", [away_from(rand(3, 4, low=-4.0, high=4.0), [-2.5, 2.5])]),
    Case("HardSigmoid", [away_from(rand(3, 4, low=-2.0, high=2.0), [-1.0, 2.0 / 3.0])],
         attrs={"alpha": 0.6, "beta": 0.6}, name="attrs"),
    Case("HardSwish", [away_from(rand(3, 4, low=-5.0, high=5.0), [-3.0, 3.0])]),
    Case("Gelu", [rand(3, 4, low=-3.0, high=3.0)], reference=typed_onnx_reference("Gelu")),
    Case("Gelu", [rand(3, 4, low=-3.0, high=3.0)], attrs={"approximate": "tanh"},
         reference=typed_onnx_reference("Gelu"), name="tanh"),
    Case("Gelu", [WIDE], reference=typed_onnx_reference("Gelu"), name="wide", grad=False),
    Case("Clip", [away_from(rand(3, 4), [-0.5, 0.5]), np.array(-0.5, np.float32),
                  np.array(0.5, np.float32)]),
    Case("Clip", [away_from(rand(3, 4), [-0.2]), np.array(-0.2, np.float32)], name="min_only"),
    Case("Clip", [away_from(rand(3, 4), [0.3]), None, np.array(0.3, np.float32)],
         name="max_only"),
    Case("Clip", [rand(3, 4)], name="no_bounds"),
    Case("Clip", [ints(-5, 0, 3, 9, dtype=np.int32), ints(-1, dtype=np.int32),
                  ints(4, dtype=np.int32)], name="int_1d_bounds", grad=False),
    # -- comparisons, logic and selection
    Case("Greater", [rand(3, 4), rand(3, 4, seed=1)]),
    Case("Less", [rand(3, 4), rand(4, seed=1)], name="broadcast"),
    Case("Less", [ints(1, 5, 3), ints(2, 5, 1)], name="int"),
    Case("Equal", [ints(1, 2, 3, 4), ints(1, 0, 3, 0)]),
    Case("GreaterOrEqual", [rand(3, 4), rand(4, seed=1)], name="broadcast"),
    Case("GreaterOrEqual", [ints(1, 5, 3), ints(2, 5, 1)], name="int"),
    Case("LessOrEqual", [rand(3, 4), rand(3, 4, seed=1)]),
    Case("LessOrEqual", [ints(1, 5, 3), ints(2, 5, 1)], name="int"),
    Case("And", [COND, rand(3, 4, seed=6) > 0]),
    Case("Or", [COND, rand(4, seed=6) > 0], name="broadcast"),
    Case("Xor", [COND, rand(3, 4, seed=6) > 0]),
    Case("Equal", [np.array([[0.5], [1.0]], np.float32), np.array([0.5, 1.0, 2.0], np.float32)],
         name="broadcast"),
    Case("Equal", [COND, rand(3, 4, seed=6) > 0], name="bool"),
    Case("Where", [COND, rand(3, 4), rand(3, 4, seed=1)]),
    Case("Where", [COND[:1], rand(3, 1), rand(4, seed=1)], name="broadcast"),
    Case("Where", [COND, ints(*range(12)).reshape(3, 4), ints(-1)], name="int", grad=False),
    # -- variadic (inputs kept apart so Max/Min have no ties)
    Case("Max", [rand(3, 4)], name="one"),
    Case("Max", [rand(3, 4), rand(3, 4, seed=1)]),
    Case("Max", [rand(2, 3, 4), rand(3, 1, seed=1), rand(4, seed=2)], name="broadcast3"),
    Case("Max", [ints(1, 9, 3), ints(4, 2, 8)], name="int", grad=False),
    Case("Min", [rand(3, 4), rand(3, 4, seed=1)]),
    Case("Min", [rand(2, 3, 4), rand(3, 1, seed=1), rand(4, seed=2)], name="broadcast3"),
    Case("Sum", [rand(3, 4)], name="one"),
    Case("Sum", [rand(3, 4), rand(3, 4, seed=1)]),
    Case("Sum", [rand(2, 3, 4), rand(3, 1, seed=1), rand(4, seed=2)], name="broadcast3"),
    Case("Mean", [rand(3, 4), rand(3, 4, seed=1)]),
    Case("Mean", [rand(2, 3, 4), rand(3, 1, seed=1), rand(4, seed=2)], name="broadcast3"),
    # -- Identity and Cast
    Case("Identity", [rand(3, 4)]),
    Case("Cast", [rand(3, 4)], attrs={"to": 11}, name="to_double"),
    Case("Cast", [rand(3, 4, low=-5, high=5)], attrs={"to": 7}, name="to_int64", grad=False),
    Case("CastLike", [rand(3, 4), np.zeros(2, np.float64)], name="to_double"),
    Case("CastLike", [rand(3, 4, low=-5, high=5), np.zeros((), np.int32)], name="to_int32",
         grad=False),
    Case("CastLike", [ints(0, 2, -1), np.zeros(1, np.bool_)], name="to_bool", grad=False),
]
