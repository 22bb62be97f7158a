"""Normalisation by a norm or by moments along given axes: LpNormalization and
MeanVarianceNormalization.

LpNormalization divides by the p-norm (p = 1 or 2) along one axis; a slice whose norm is zero
gives zeros (ONNX 22's 0/0 = 0). MeanVarianceNormalization is ONNX's function
``(X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9)`` over ``axes``; the kernels clamp the variance at
zero so that rounding never takes the square root of a negative number.
"""
from __future__ import annotations

import numpy as np

from portable.ops.registry import Attr, declare
from portable.ops.rules import normalize_axes, normalize_axis, require_float, same_as_input

MVN_EPSILON = 1e-9  # fixed by ONNX's function body of MeanVarianceNormalization


# -- LpNormalization -----------------------------------------------------------------------------


def _lp_norm_infer(ctx):
    require_float(ctx, 0)
    normalize_axis(ctx, ctx.attrs["axis"], len(ctx.shape(0)))
    if ctx.attrs["p"] not in (1, 2):
        ctx.fail(f"p={ctx.attrs['p']} is not supported; ONNX defines p = 1 or 2")
    return same_as_input(ctx)


def _lp_norm_grad(g, dys):
    """With n the norm along the axis and y = x / n: dx = (dy - dn/dx * sum(dy y)) / n, where
    dn/dx is y for p = 2 and sign(x) for p = 1; a slice of zeros passes zero."""
    x, y = g.inputs[0], g.outputs[0]
    dy = dys[0]
    axis = g.const(np.asarray([g.attrs["axis"]], np.int64))
    if g.attrs["p"] == 2:
        norm = g.emit("ReduceL2", x, axis, keepdims=1)
        local = y
    else:
        norm = g.emit("ReduceL1", x, axis, keepdims=1)
        local = g.emit("Sign", x)
    zero = g.scalar(0.0, x)
    empty = g.emit("Equal", norm, zero)
    safe = g.emit("Where", empty, g.scalar(1.0, x), norm)
    along = g.emit("ReduceSum", g.emit("Mul", dy, y), axis, keepdims=1)
    dx = g.emit("Div", g.emit("Sub", dy, g.emit("Mul", local, along)), safe)
    return [g.emit("Where", empty, zero, dx)]


declare("LpNormalization", inputs=("input",), outputs=("output",), infer=_lp_norm_infer,
        onnx_since=22, attrs={"axis": Attr("int", -1), "p": Attr("int", 2)},
        grad=_lp_norm_grad)

# -- MeanVarianceNormalization -------------------------------------------------------------------


def mvn_axes(attrs: dict, rank: int) -> tuple[int, ...]:
    """The normalised axes, non-negative (ValueError when out of range or repeated)."""
    axes = tuple(int(a) for a in attrs["axes"])
    if any(not -rank <= a < rank for a in axes):
        raise ValueError(f"axes {list(axes)} are out of range for rank {rank}")
    result = tuple(a % rank for a in axes)
    if len(set(result)) != len(result):
        raise ValueError(f"axes {list(axes)} repeat an axis")
    return result


def _mvn_infer(ctx):
    require_float(ctx, 0)
    normalize_axes(ctx, ctx.attrs["axes"], len(ctx.shape(0)))
    return same_as_input(ctx)


def _mvn_grad(g, dys):
    """With c = x - mean(x), s = sqrt(mean(c^2)) and d = s + eps, y = c / d:
    dx = (dy - mean(dy)) / d - c mean(dy c) / (s d^2) (zero where s = 0, a constant slice)."""
    x = g.inputs[0]
    dy = dys[0]
    axes = g.const(np.asarray(mvn_axes(g.attrs, len(g.shape(x))), np.int64))

    def mean(value):
        return g.emit("ReduceMean", value, axes, keepdims=1)

    centred = g.emit("Sub", x, mean(x))
    s = g.emit("Sqrt", mean(g.emit("Mul", centred, centred)))
    d = g.emit("Add", s, g.scalar(MVN_EPSILON, x))
    zero = g.scalar(0.0, x)
    flat = g.emit("Equal", s, zero)
    safe_s = g.emit("Where", flat, g.scalar(1.0, x), s)
    first = g.emit("Div", g.emit("Sub", dy, mean(dy)), d)
    coupling = g.emit("Div", mean(g.emit("Mul", dy, centred)),
                      g.emit("Mul", safe_s, g.emit("Mul", d, d)))
    second = g.emit("Where", flat, zero, g.emit("Mul", centred, coupling))
    return [g.emit("Sub", first, second)]


declare("MeanVarianceNormalization", inputs=("X",), outputs=("Y",), infer=_mvn_infer,
        onnx_since=13, attrs={"axes": Attr("ints", [0, 2, 3])}, grad=_mvn_grad)
