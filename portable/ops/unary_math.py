"""Trigonometric, hyperbolic, rounding and sign ops, and Softsign / Selu: elementwise, fusable,
each gradient written with ops already declared.

The rounding ops (Floor, Ceil, Round) and Sign are piecewise constant: their gradient is zero
almost everywhere, as PyTorch gives it, rather than an error.
"""
from __future__ import annotations

from portable.ops.elementwise import UNARY, numeric_unary
from portable.ops.registry import Attr, declare


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
