"""OpenCL kernels: elementwise ops, each one generated kernel from the op table.

Variadic ops (Max, Min, Sum, Mean) and Clip fold all their operands in one fused kernel; every
kernel loads and stores float16 directly (computing in float32); bfloat16 and the other ml_dtypes
types compute in float32 (``table``), except in Cast, which converts between every pair.
"""
from __future__ import annotations


from backends.opencl.allocator import CLArray
from backends.opencl.codegen import Fused
from backends.opencl.convert import convert
from backends.opencl.elementwise import assign, run_elementwise
from backends.opencl.kernels.table import kernel_table
from backends.opencl.optable import TABLE

kernels, kernel = kernel_table()

_DIRECT = ("Add", "Sub", "Mul", "Div", "Pow", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal",
           "Sigmoid", "Tanh", "Softplus", "Erf", "Not", "Relu", "Greater", "Less", "Equal",
           "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor", "HardSwish", "PRelu", "Where",
           "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
           "Floor", "Ceil", "Round", "Sign", "Softsign", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
           "BitwiseNot", "Mish", "IsNaN")


def _direct(op_name: str):
    op = TABLE[op_name]
    steps_of: dict[int, list] = {}  # by the number of inputs (Where and PRelu vary)

    def run(ctx, inputs, outputs, attrs):
        steps = steps_of.get(len(inputs))
        if steps is None:
            fused = Fused(len(inputs))
            fused.add(op, *(fused.input(k) for k in range(len(inputs))))
            steps = steps_of[len(inputs)] = fused.steps
        run_elementwise(steps, inputs, outputs[:1])
    run.__name__ = op_name.lower()
    return run


for _name in _DIRECT:
    kernel(_name, half="native")(_direct(_name))


def _with_params(op_name: str, *names: str):
    op = TABLE[op_name]

    def run(ctx, inputs, outputs, attrs):
        fused = Fused(op.arity)
        fused.add(op, *(fused.input(k) for k in range(op.arity)),
                  params=[attrs[n] for n in names])
        run_elementwise(fused.steps, inputs[:op.arity], outputs[:1])
    run.__name__ = op_name.lower()
    return run


kernel("Mod", half="native")(_with_params("Mod", "fmod"))
kernel("LeakyRelu", half="native")(_with_params("LeakyRelu", "alpha"))
kernel("Elu", half="native")(_with_params("Elu", "alpha"))
kernel("Selu", half="native")(_with_params("Selu", "alpha", "gamma"))
kernel("Swish", half="native")(_with_params("Swish", "alpha"))
kernel("ThresholdedRelu", half="native")(_with_params("ThresholdedRelu", "alpha"))
kernel("Shrink", half="native")(_with_params("Shrink", "bias", "lambd"))
kernel("Celu", half="native")(_with_params("Celu", "alpha"))
kernel("IsInf", half="native")(_with_params("IsInf", "detect_negative", "detect_positive"))


@kernel("BitShift")
def bit_shift(ctx, inputs, outputs, attrs):
    op = TABLE["BitShiftLeft" if attrs["direction"] == "LEFT" else "BitShiftRight"]
    fused = Fused(2)
    fused.add(op, fused.input(0), fused.input(1))
    run_elementwise(fused.steps, inputs[:2], outputs[:1])
kernel("HardSigmoid", half="native")(_with_params("HardSigmoid", "alpha", "beta"))


@kernel("Gelu", half="native")
def gelu(ctx, inputs, outputs, attrs):
    op = TABLE["GeluTanh" if attrs["approximate"] == "tanh" else "Gelu"]
    fused = Fused(1)
    fused.add(op, fused.input(0))
    run_elementwise(fused.steps, inputs[:1], outputs[:1])


@kernel("Clip", half="native")
def clip(ctx, inputs, outputs, attrs):
    # max then min is np.clip's rule (the result is max when min > max); one-element bound
    # tensors become 0-d so they never broadcast a 0-d input up.
    operands = [inputs[0]]
    fused = Fused(3)
    value = fused.input(0)
    for bound, op in zip((list(inputs[1:]) + [None, None])[:2], ("Max", "Min")):
        if bound is not None:
            operands.append(bound.reshape(()))
            value = fused.add(TABLE[op], value, fused.input(len(operands) - 1))
    if value == fused.input(0):
        value = fused.add(TABLE["Cast"], value)
    run_elementwise(fused.steps, operands, outputs[:1], [outputs[0].dtype])


def _fold(op_name: str, mean: bool = False):
    """A variadic op folded left to right in one kernel (Mean divides the sum by the count)."""
    def run(ctx, inputs, outputs, attrs):
        fused = Fused(len(inputs))
        value = fused.input(0)
        for k in range(1, len(inputs)):
            value = fused.add(TABLE[op_name], value, fused.input(k))
        operands = list(inputs)
        if mean:
            operands.append(len(inputs))
            value = fused.add(TABLE["Div"], value, fused.input(len(inputs)))
        if value == fused.input(0):
            fused.add(TABLE["Cast"], value)
        run_elementwise(fused.steps, operands, outputs[:1], [outputs[0].dtype])
    run.__name__ = op_name.lower()
    return run


kernel("Max", half="native")(_fold("Max"))
kernel("Min", half="native")(_fold("Min"))
kernel("Sum", half="native")(_fold("Add"))
kernel("Mean", half="native")(_fold("Add", mean=True))


@kernel("Cast", "CastLike", half="storage")
def cast(ctx, inputs, outputs, attrs):
    # (CastLike's second input only gave the output's dtype) Every pair of element types,
    # bfloat16, float8, float4 and the 4- and 2-bit integers included: ONNX's rules
    # (saturate, round_mode) are ``convert``'s.
    convert(inputs[0], outputs[0], attrs["saturate"], attrs["round_mode"])


@kernel("BitCast", half="storage")
def bitcast(ctx, inputs, outputs, attrs):
    # The input's elements seen as the output's type (the same width: offsets and strides,
    # counted in elements, stay), then copied: a byte copy on the device.
    x, out = inputs[0], outputs[0]
    assign(out, CLArray(x.runtime, x.buffer, x.shape, out.dtype, x.strides, x.offset))
