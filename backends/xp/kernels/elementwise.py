"""NumPy kernels: elementwise ops, written against ``ctx.xp`` in destination-passing style.

Kernels of ops that declare an in-place pair stay correct when the output aliases that input:
they read the input before overwriting the output, or through a temporary.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from portable.ops.quantize import convert

from portable.backend import context_free, kernel_table

kernels, kernel = kernel_table()

# op -> name of the array-namespace function that computes it with ``out=``
_UFUNCS = {
    "Add": "add", "Sub": "subtract", "Mul": "multiply", "Neg": "negative", "Exp": "exp",
    "Abs": "absolute", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal", "Tanh": "tanh",
    "Greater": "greater", "Less": "less", "Equal": "equal", "Not": "logical_not",
    "GreaterOrEqual": "greater_equal", "LessOrEqual": "less_equal", "And": "logical_and",
    "Or": "logical_or", "Xor": "logical_xor",
    "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "arcsin", "Acos": "arccos",
    "Atan": "arctan", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "arcsinh", "Acosh": "arccosh",
    "Atanh": "arctanh", "Floor": "floor", "Ceil": "ceil", "Round": "rint", "Sign": "sign",
    "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor",
    "BitwiseNot": "invert", "IsNaN": "isnan",
}


def _ufunc_kernel(fn_name: str):
    """The kernel of an op that is one namespace function called with ``out=``. Called as it
    is (a fused chain's step, constant folding), it finds the function in ``ctx.xp``; bound
    for a signature (``bind``, which ``portable.backend.bound_kernel`` calls for the compiled
    plans and the imperative calls), it holds the backend's function: no lookup per call."""
    def run(ctx, inputs, outputs, attrs):
        getattr(ctx.xp, fn_name)(*inputs, out=outputs[0])

    def bind(backend, input_types, output_types, attrs):
        return context_free(functools.partial(_apply, getattr(backend.xp, fn_name)))
    run.__name__ = fn_name
    run.bind = bind
    return run


def _apply(fn, ctx, inputs, outputs, attrs):
    fn(*inputs, out=outputs[0])


for _op, _fn in _UFUNCS.items():
    kernel(_op)(_ufunc_kernel(_fn))


@kernel("Div")
def div(ctx, inputs, outputs, attrs):
    a, b = inputs
    if a.dtype.kind in "iu":
        # ONNX integer division truncates toward zero (C semantics), NumPy floors.
        outputs[0][...] = ctx.xp.trunc(a / b).astype(a.dtype)
    else:
        ctx.xp.divide(a, b, out=outputs[0])


@kernel("Mod")
def mod(ctx, inputs, outputs, attrs):
    a, b = inputs
    with np.errstate(divide="ignore", invalid="ignore"):  # x mod 0: 0 for ints, NaN floats
        if attrs["fmod"]:
            ctx.xp.fmod(a, b, out=outputs[0])
        else:
            ctx.xp.mod(a, b, out=outputs[0])


@kernel("Pow")
def pow_(ctx, inputs, outputs, attrs):
    x, y = inputs
    if x.dtype == y.dtype:
        ctx.xp.power(x, y, out=outputs[0])
    else:
        # Mixed types compute in the promoted type, then convert to X's type (as ONNX does).
        outputs[0][...] = ctx.xp.power(x, y)


@kernel("Relu")
def relu(ctx, inputs, outputs, attrs):
    ctx.xp.maximum(inputs[0], 0, out=outputs[0])


@kernel("Sigmoid")
def sigmoid(ctx, inputs, outputs, attrs):
    xp, y = ctx.xp, outputs[0]
    # 1 / (1 + e^-x) keeps full relative precision on both sides; for x << 0, e^-x overflows to
    # inf and the result is the correct 0, so that overflow is expected, not an error.
    with np.errstate(over="ignore"):
        xp.negative(inputs[0], out=y)
        xp.exp(y, out=y)
    y += 1
    xp.reciprocal(y, out=y)


@kernel("Softplus")
def softplus(ctx, inputs, outputs, attrs):
    ctx.xp.logaddexp(0, inputs[0], out=outputs[0])


@kernel("LeakyRelu")
def leaky_relu(ctx, inputs, outputs, attrs):
    x, alpha = inputs[0], attrs["alpha"]
    # max(x, alpha x) is x for x > 0 and alpha x below, when alpha <= 1 (min when alpha > 1).
    pick = ctx.xp.maximum if alpha <= 1 else ctx.xp.minimum
    pick(x, x * alpha, out=outputs[0])


@kernel("Elu")
def elu(ctx, inputs, outputs, attrs):
    xp, x, y = ctx.xp, inputs[0], outputs[0]
    # max(x, 0) + alpha expm1(min(x, 0)): no expm1 of large x (which would overflow).
    positive = xp.maximum(x, 0)
    xp.minimum(x, 0, out=y)
    xp.expm1(y, out=y)
    y *= attrs["alpha"]
    y += positive


@kernel("PRelu")
def prelu(ctx, inputs, outputs, attrs):
    xp, (x, slope), y = ctx.xp, inputs, outputs[0]
    xp.multiply(x, slope, out=y)
    xp.copyto(y, x, where=x > 0)


def _hard_sigmoid_into(xp, x, alpha, beta, out):
    xp.multiply(x, alpha, out=out)
    out += beta
    xp.clip(out, 0, 1, out=out)


@kernel("HardSigmoid")
def hard_sigmoid(ctx, inputs, outputs, attrs):
    _hard_sigmoid_into(ctx.xp, inputs[0], attrs["alpha"], attrs["beta"], outputs[0])


@kernel("HardSwish")
def hard_swish(ctx, inputs, outputs, attrs):
    x = inputs[0]
    gate = ctx.xp.empty_like(x)
    _hard_sigmoid_into(ctx.xp, x, 1.0 / 6.0, 0.5, gate)
    ctx.xp.multiply(x, gate, out=outputs[0])


@kernel("Clip")
def clip(ctx, inputs, outputs, attrs):
    xp, x, y = ctx.xp, inputs[0], outputs[0]
    low, high = (list(inputs[1:]) + [None, None])[:2]
    # maximum then minimum is np.clip's rule (the result is max when min > max); bounds may
    # arrive as one-element 1-D tensors, which must not broadcast a 0-d input up to 1-D.
    source = x
    if low is not None:
        xp.maximum(source, low.reshape(()), out=y)
        source = y
    if high is not None:
        xp.minimum(source, high.reshape(()), out=y)
        source = y
    if source is x:
        y[...] = x


@kernel("Where")
def where(ctx, inputs, outputs, attrs):
    condition, x, y = inputs
    # Y first, then X over it: correct when the output aliases Y (the declared in-place pair).
    ctx.xp.copyto(outputs[0], y)
    ctx.xp.copyto(outputs[0], x, where=condition)


def _fold_kernel(fn_name: str):
    """Variadic ops folded left to right into the output (which may alias input 0 or 1)."""
    def run(ctx, inputs, outputs, attrs):
        out = outputs[0]
        if len(inputs) == 1:
            out[...] = inputs[0]
            return
        fn = getattr(ctx.xp, fn_name)
        fn(inputs[0], inputs[1], out=out)
        for operand in inputs[2:]:
            fn(out, operand, out=out)
    run.__name__ = fn_name
    return run


kernel("Max")(_fold_kernel("maximum"))
kernel("Min")(_fold_kernel("minimum"))
_sum = kernel("Sum")(_fold_kernel("add"))


@kernel("Mean")
def mean(ctx, inputs, outputs, attrs):
    _sum(ctx, inputs, outputs, attrs)
    outputs[0] /= len(inputs)


# -- erf -----------------------------------------------------------------------------------------


@functools.cache
def _erf_polynomial(itemsize: int) -> tuple[float, tuple[float, ...]]:
    """``(limit, c)`` with erf(x) ~= x * sum(c[k] u**k), u = 2 x**2 / limit**2 - 1, |x| <= limit.

    Beyond ``limit`` erf rounds to +-1 in the working precision. ``c`` is the Chebyshev
    interpolant of erf(x)/x on [0, limit] (math.erf at Chebyshev nodes), rewritten in powers of
    u. Evaluated in its own precision, the maximum error is 4 ulp in float32 and 2e-14 relative
    in float64, with no branches (one polynomial over the whole range).
    """
    from numpy.polynomial import chebyshev

    limit, degree = (6.0, 40) if itemsize >= 8 else (4.0, 16)

    def erf_over_x(u):
        # Chebyshev nodes lie strictly inside (-1, 1), so x > 0 here.
        x = np.sqrt((u + 1.0) * (limit * limit / 2.0))
        return np.array([math.erf(v) / v for v in x])

    coefficients = chebyshev.cheb2poly(chebyshev.chebinterpolate(erf_over_x, degree))
    return limit, tuple(float(c) for c in coefficients)


def erf_into(xp, x, out) -> None:
    """Write erf(x) into ``out`` (which may alias ``x``); float16 is computed in float32."""
    work = x if x.dtype.itemsize >= 4 else x.astype(np.float32)
    limit, coefficients = _erf_polynomial(work.dtype.itemsize)
    z = xp.clip(work, -limit, limit)
    u = z * z
    u *= 2.0 / (limit * limit)
    u -= 1.0
    acc = out if out.dtype == work.dtype else xp.empty_like(work)
    xp.multiply(u, coefficients[-1], out=acc)  # Horner's rule
    acc += coefficients[-2]
    for c in reversed(coefficients[:-2]):
        acc *= u
        acc += c
    acc *= z
    if acc is not out:
        out[...] = acc


@kernel("Erf")
def erf(ctx, inputs, outputs, attrs):
    erf_into(ctx.xp, inputs[0], outputs[0])


@kernel("Gelu")
def gelu(ctx, inputs, outputs, attrs):
    xp, x, y = ctx.xp, inputs[0], outputs[0]
    if attrs["approximate"] == "tanh":
        # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        gate = x * x
        gate *= 0.044715
        gate += 1
        gate *= x
        gate *= math.sqrt(2.0 / math.pi)
        xp.tanh(gate, out=gate)
    else:
        # 0.5 x (1 + erf(x / sqrt(2)))
        gate = x * math.sqrt(0.5)
        erf_into(xp, gate, gate)
    gate += 1
    xp.multiply(x, gate, out=y)
    y *= 0.5


@kernel("BitShift")
def bit_shift(ctx, inputs, outputs, attrs):
    xp, (x, count), out = ctx.xp, inputs, outputs[0]
    inside = (count >= 0) & (count < 8 * x.dtype.itemsize)
    count = xp.where(inside, count, 0).astype(x.dtype)
    if attrs["direction"] == "LEFT":  # on the unsigned bits: a signed value wraps
        bits = np.dtype(f"u{x.dtype.itemsize}")
        shifted = xp.left_shift(x.view(bits), count.view(bits)).view(x.dtype)
        out[...] = xp.where(inside, shifted, 0)
    else:
        out[...] = xp.where(inside, xp.right_shift(x, count), xp.where(x < 0, -1, 0))


@kernel("ThresholdedRelu")
def thresholded_relu(ctx, inputs, outputs, attrs):
    x = inputs[0]
    outputs[0][...] = ctx.xp.where(x > x.dtype.type(attrs["alpha"]), x, 0)


@kernel("Shrink")
def shrink(ctx, inputs, outputs, attrs):
    xp, x = ctx.xp, inputs[0]
    lambd, bias = attrs["lambd"], attrs["bias"]
    outputs[0][...] = xp.where(x < -lambd, x + bias, xp.where(x > lambd, x - bias, 0))


@kernel("Celu")
def celu(ctx, inputs, outputs, attrs):
    xp, x = ctx.xp, inputs[0]
    alpha = x.dtype.type(attrs["alpha"])
    outputs[0][...] = xp.maximum(x, 0) + xp.minimum(0, alpha * xp.expm1(x / alpha))


@kernel("Mish")
def mish(ctx, inputs, outputs, attrs):
    xp, x = ctx.xp, inputs[0]
    outputs[0][...] = x * xp.tanh(xp.logaddexp(0, x))  # (softplus without overflow)


@kernel("Swish")
def swish(ctx, inputs, outputs, attrs):
    xp, x = ctx.xp, inputs[0]
    scaled = x * x.dtype.type(attrs["alpha"])
    outputs[0][...] = x / (1 + xp.exp(-scaled))


@kernel("IsInf")
def is_inf(ctx, inputs, outputs, attrs):
    xp, x = ctx.xp, inputs[0]
    positive = (x == xp.inf) if attrs["detect_positive"] else xp.zeros(x.shape, bool)
    negative = (x == -xp.inf) if attrs["detect_negative"] else xp.zeros(x.shape, bool)
    outputs[0][...] = positive | negative


@kernel("Softsign")
def softsign(ctx, inputs, outputs, attrs):
    x, y = inputs[0], outputs[0]
    y[...] = x / (1 + ctx.xp.abs(x))


@kernel("Selu")
def selu(ctx, inputs, outputs, attrs):
    xp, x, y = ctx.xp, inputs[0], outputs[0]
    alpha, gamma = (x.dtype.type(attrs[k]) for k in ("alpha", "gamma"))
    y[...] = gamma * xp.where(x > 0, x, alpha * xp.expm1(xp.minimum(x, 0)))


@kernel("BitCast")
def bitcast(ctx, inputs, outputs, attrs):
    # (the infer rule checked the widths; 4- and 2-bit values each fill a byte, as ml_dtypes
    # holds them, so a byte view keeps their bits)
    outputs[0][...] = inputs[0].view(outputs[0].dtype)


@kernel("Cast", "CastLike")
def cast(ctx, inputs, outputs, attrs):
    # (the output's dtype is Cast's `to`, or CastLike's second input's)
    outputs[0][...] = convert(ctx.xp, inputs[0], outputs[0].dtype, attrs["saturate"],
                              attrs["round_mode"])
