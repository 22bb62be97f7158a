"""Trigonometric, hyperbolic, rounding and sign ops, activations (Softsign, Selu, Celu, Mish,
Swish, ThresholdedRelu, Shrink) and the IsNaN / IsInf tests: elementwise, fusable, each
gradient written with ops already declared.

The rounding ops (Floor, Ceil, Round) and Sign are piecewise constant: their gradient is zero
almost everywhere, as PyTorch gives it, rather than an error.
"""
from __future__ import annotations

import numpy as np

from portable.ir.graph import TensorType
from portable.ops.elementwise import UNARY, numeric_unary
from portable.ops.registry import Attr, declare
from portable.ops.rules import dtypes_of


def _factor(make):
    """The gradient ``dy * make(g, x, y)``."""
    def grad(g, dys):
        return [g.emit("Mul", dys[0], make(g, g.inputs[0], g.outputs[0]))]
    return grad


def _square(g, x):
    return g.emit("Mul", x, x)


def _one(g, like):
    return g.scalar(1.0, like)


def _rsqrt(g, value):
    return g.emit("Reciprocal", g.emit("Sqrt", value))


def _zero_grad(g, dys):
    return [g.zeros_like(g.inputs[0])]


_GRADS = {
    "Sin": lambda g, x, y: g.emit("Cos", x),
    "Cos": lambda g, x, y: g.emit("Neg", g.emit("Sin", x)),
    "Tan": lambda g, x, y: g.emit("Add", _one(g, y), _square(g, y)),
    "Asin": lambda g, x, y: _rsqrt(g, g.emit("Sub", _one(g, x), _square(g, x))),
    "Acos": lambda g, x, y: g.emit("Neg", _rsqrt(g, g.emit("Sub", _one(g, x), _square(g, x)))),
    "Atan": lambda g, x, y: g.emit("Reciprocal", g.emit("Add", _one(g, x), _square(g, x))),
    "Sinh": lambda g, x, y: g.emit("Cosh", x),
    "Cosh": lambda g, x, y: g.emit("Sinh", x),
    "Asinh": lambda g, x, y: _rsqrt(g, g.emit("Add", _square(g, x), _one(g, x))),
    "Acosh": lambda g, x, y: _rsqrt(g, g.emit("Sub", _square(g, x), _one(g, x))),
    "Atanh": lambda g, x, y: g.emit("Reciprocal", g.emit("Sub", _one(g, x), _square(g, x))),
    "Softsign": lambda g, x, y: g.emit("Reciprocal", _square(
        g, g.emit("Add", _one(g, x), g.emit("Abs", x)))),
}
for _name in ("Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
              "Atanh", "Softsign"):
    declare(_name, onnx_since=22, grad=_factor(_GRADS[_name]), **UNARY)

declare("Floor", onnx_since=13, grad=_zero_grad, **UNARY)
declare("Ceil", onnx_since=13, grad=_zero_grad, **UNARY)
declare("Round", onnx_since=22, grad=_zero_grad, **UNARY)  # halves to even, as ONNX says
declare("Sign", onnx_since=13, grad=_zero_grad, **{**UNARY, "infer": numeric_unary})


def _selu_slope(g, x, y):
    """gamma where x > 0, else gamma * alpha * exp(x) (= y + gamma * alpha)."""
    gamma, alpha = g.attrs["gamma"], g.attrs["alpha"]
    negative = g.emit("Add", y, g.scalar(gamma * alpha, y))
    return g.emit("Where", g.emit("Greater", x, g.scalar(0.0, x)), g.scalar(gamma, x), negative)


declare("Selu", onnx_since=22, grad=_factor(_selu_slope),
        attrs={"alpha": Attr("float", 1.67326319217681884765625),
               "gamma": Attr("float", 1.05070102214813232421875)}, **UNARY)


def _where_beyond(g, x, bound, dy):
    """dy where x > bound, else 0."""
    return g.emit("Where", g.emit("Greater", x, g.scalar(bound, x)), dy, g.scalar(0.0, dy))


def _thresholded_relu_grad(g, dys):
    return [_where_beyond(g, g.inputs[0], g.attrs["alpha"], dys[0])]


def _shrink_grad(g, dys):
    return [_where_beyond(g, g.emit("Abs", g.inputs[0]), g.attrs["lambd"], dys[0])]


def _celu_slope(g, x, y):
    """1 where x > 0, else exp(x / alpha)."""
    inside = g.emit("Exp", g.emit("Mul", x, g.scalar(1.0 / g.attrs["alpha"], x)))
    return g.emit("Where", g.emit("Greater", x, g.scalar(0.0, x)), g.scalar(1.0, x), inside)


def _mish_slope(g, x, y):
    """tanh(softplus(x)) + x * (1 - tanh(softplus(x))^2) * sigmoid(x)."""
    t = g.emit("Tanh", g.emit("Softplus", x))
    bend = g.emit("Sub", _one(g, x), _square(g, t))
    return g.emit("Add", t, g.emit("Mul", g.emit("Mul", x, bend), g.emit("Sigmoid", x)))


def _swish_slope(g, x, y):
    """s + alpha * x * s * (1 - s), with s = sigmoid(alpha * x)."""
    alpha = g.attrs["alpha"]
    s = g.emit("Sigmoid", g.emit("Mul", x, g.scalar(alpha, x)))
    spread = g.emit("Mul", g.emit("Mul", x, g.scalar(alpha, x)),
                    g.emit("Mul", s, g.emit("Sub", _one(g, s), s)))
    return g.emit("Add", s, spread)


declare("ThresholdedRelu", onnx_since=22, grad=_thresholded_relu_grad,
        attrs={"alpha": Attr("float", 1.0)}, **UNARY)
declare("Shrink", onnx_since=9, grad=_shrink_grad,
        attrs={"bias": Attr("float", 0.0), "lambd": Attr("float", 0.5)},
        **{**UNARY, "infer": numeric_unary})
declare("Celu", onnx_since=12, grad=_factor(_celu_slope), attrs={"alpha": Attr("float", 1.0)},
        **UNARY)
declare("Mish", onnx_since=22, grad=_factor(_mish_slope), **UNARY)
declare("Swish", onnx_since=24, grad=_factor(_swish_slope), attrs={"alpha": Attr("float", 1.0)},
        **UNARY)


def _float_test(ctx):
    if ctx.dtype(0).kind != "f":
        ctx.fail(f"input must be a float tensor, got {ctx.dtype(0).name}")
    return [TensorType(ctx.shape(0), np.bool_)]


_TEST = dict(inputs=("X",), outputs=("Y",), infer=_float_test, fusion="elementwise",
             dtype_rule=dtypes_of(np.bool_))
declare("IsNaN", onnx_since=20, **_TEST)
declare("IsInf", onnx_since=20, attrs={"detect_negative": Attr("int", 1),
                                       "detect_positive": Attr("int", 1)}, **_TEST)
