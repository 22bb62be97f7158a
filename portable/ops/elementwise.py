"""Elementwise ops: arithmetic, activations, comparisons, variadic Max/Min/Sum/Mean, Cast.

Each op is one ``declare`` call. Gradient rules only emit ops, so autodiff and autograd share them.
"""
from __future__ import annotations

import numpy as np

from portable.dtypes import ONNX_DTYPES, to_onnx
from portable.ir.graph import TensorType
from portable.ops.registry import Attr, declare
from portable.ops.rules import broadcast_elementwise, same_as_input

# -- binary arithmetic -----------------------------------------------------------------------


def _add_grad(g, dys):
    a, b = g.inputs
    return [g.sum_to(dys[0], a), g.sum_to(dys[0], b)]


def _sub_grad(g, dys):
    a, b = g.inputs
    return [g.sum_to(dys[0], a), g.sum_to(g.emit("Neg", dys[0]), b)]


def _mul_grad(g, dys):
    a, b = g.inputs
    return [g.sum_to(g.emit("Mul", dys[0], b), a), g.sum_to(g.emit("Mul", dys[0], a), b)]


def _div_grad(g, dys):
    a, b = g.inputs
    da = g.emit("Div", dys[0], b)
    # d(a/b)/db = -(a/b)/b, reusing the forward output y = a/b
    db = g.emit("Neg", g.emit("Div", g.emit("Mul", dys[0], g.outputs[0]), b))
    return [g.sum_to(da, a), g.sum_to(db, b)]


_BINARY = dict(inputs=("A", "B"), outputs=("C",), infer=broadcast_elementwise,
               fusion="elementwise", inplace=((0, 0), (1, 0)))
declare("Add", onnx_since=14, grad=_add_grad, **_BINARY)
declare("Sub", onnx_since=14, grad=_sub_grad, **_BINARY)
declare("Mul", onnx_since=14, grad=_mul_grad, **_BINARY)
declare("Div", onnx_since=14, grad=_div_grad, **_BINARY)

# -- unary -------------------------------------------------------------------------------------

_UNARY = dict(inputs=("X",), outputs=("Y",), infer=same_as_input, fusion="elementwise",
              inplace=((0, 0),))


def _neg_grad(g, dys):
    return [g.emit("Neg", dys[0])]


def _exp_grad(g, dys):
    return [g.emit("Mul", dys[0], g.outputs[0])]


def _relu_grad(g, dys):
    (x,) = g.inputs
    mask = g.emit("Cast", g.emit("Greater", x, g.scalar(0.0, x)), to=to_onnx(g.dtype(x)))
    return [g.emit("Mul", dys[0], mask)]


declare("Neg", onnx_since=13, grad=_neg_grad, **_UNARY)
declare("Exp", onnx_since=13, grad=_exp_grad, **_UNARY)
declare("Relu", onnx_since=14, grad=_relu_grad, **_UNARY)

# -- comparisons -------------------------------------------------------------------------------


def _compare(ctx):
    (shape_type,) = broadcast_elementwise(ctx)
    return [TensorType(shape_type.shape, np.bool_)]


_COMPARE = dict(inputs=("A", "B"), outputs=("C",), infer=_compare, fusion="elementwise")
declare("Greater", onnx_since=13, **_COMPARE)

# -- Identity and Cast -------------------------------------------------------------------------


def _identity_grad(g, dys):
    return [dys[0]]


declare("Identity", inputs=("input",), outputs=("output",), infer=same_as_input,
        onnx_since=21, grad=_identity_grad, view=True)

def _cast_infer(ctx):
    to = ctx.attrs["to"]
    if to not in ONNX_DTYPES:
        ctx.fail(f"attribute to={to} is not a supported ONNX element type")
    return [TensorType(ctx.shape(0), ONNX_DTYPES[to])]


def _cast_grad(g, dys):
    (x,) = g.inputs
    if g.dtype(x).kind != "f":
        return [None]
    return [g.emit("Cast", dys[0], to=to_onnx(g.dtype(x)))]


declare("Cast", inputs=("input",), outputs=("output",), infer=_cast_infer, onnx_since=21,
        attrs={"to": Attr("int"), "saturate": Attr("int", 1)}, grad=_cast_grad,
        fusion="elementwise")
