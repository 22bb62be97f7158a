"""Elementwise ops: arithmetic, activations, comparisons, variadic Max/Min/Sum/Mean, Cast.

Each op is one ``declare`` call. Gradient rules only emit ops, so autodiff and autograd share them.
Masks in gradient rules use ``Where`` with a 0-d zero rather than multiplying by a cast mask, so
an inf or nan in the discarded branch never leaks into the gradient.
"""
from __future__ import annotations

import math

import numpy as np

from portable.dtypes import (ONNX_DTYPES, PACKED_BITS, is_float, low_precision_missing,
                             to_onnx)
from portable.ir.graph import TensorType
from portable.ops.quantize import ROUND_MODES
from portable.ops.registry import Attr, declare
from portable.ops.rules import (broadcast_elementwise, broadcast_shapes, broadcast_to_bool,
                                dtypes_of, require_float, same_as_input, same_dtype)

# -- shared type rules and gradient helpers ------------------------------------------------------


def _float_unary(ctx):
    """Unary ops defined on floating point only (Log, Sigmoid, ...)."""
    require_float(ctx)
    return same_as_input(ctx)


def numeric_unary(ctx):
    if ctx.dtype(0).kind not in "iuf":
        ctx.fail(f"input must be numeric, got {ctx.dtype(0).name}")
    return same_as_input(ctx)


def _bool_unary(ctx):
    if ctx.dtype(0) != np.bool_:
        ctx.fail(f"input must be bool, got {ctx.dtype(0).name}")
    return same_as_input(ctx)


def _zero_where(g, cond, value):
    """``value`` where ``cond`` is false, 0 where it is true."""
    return g.emit("Where", cond, g.scalar(0.0, value), value)


def _keep_where(g, cond, value):
    """``value`` where ``cond`` is true, 0 elsewhere."""
    return g.emit("Where", cond, value, g.scalar(0.0, value))


def _scale(g, x, factor):
    return g.emit("Mul", x, g.scalar(factor, x))


def _one_minus(g, x):
    return g.emit("Sub", g.scalar(1.0, x), x)


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


def _mod_grad(g, dys):
    # a mod b = a - q b with q = floor(a / b) (fmod: trunc), piecewise constant: the gradient
    # is dy for a and -q dy for b, away from the jumps.
    a, b = g.inputs
    if g.dtype(a).kind != "f":
        return [None, None]
    quotient = g.emit("Div", g.emit("Sub", a, g.outputs[0]), b)
    return [g.sum_to(dys[0], a), g.sum_to(g.emit("Neg", g.emit("Mul", dys[0], quotient)), b)]


# fmod=0: the result takes the divisor's sign (Python's %); fmod=1: the dividend's (C's fmod).
declare("Mod", onnx_since=13, grad=_mod_grad, attrs={"fmod": Attr("int", 0)}, **_BINARY)


def _pow_infer(ctx):
    # The exponent may have another numeric type; the result has the base's type.
    if ctx.dtype(0).kind not in "iuf" or ctx.dtype(1).kind not in "iuf":
        ctx.fail("Pow takes numeric X and Y")
    return [TensorType(broadcast_shapes(ctx, [ctx.shape(0), ctx.shape(1)]), ctx.dtype(0))]


def _pow_grad(g, dys):
    x, y = g.inputs
    dy, out = dys[0], g.outputs[0]
    if g.dtype(x).kind != "f":
        return [None, None]  # an integer power is piecewise constant in a float exponent
    y_as_x = y if g.dtype(y) == g.dtype(x) else g.emit("Cast", y, to=to_onnx(g.dtype(x)))
    # d(x^y)/dx = y x^(y-1): computed directly, so x = 0 needs no special case.
    slope = g.emit("Mul", y_as_x, g.emit("Pow", x, g.emit("Sub", y_as_x, g.scalar(1.0, y_as_x))))
    dx = g.sum_to(g.emit("Mul", dy, slope), x)
    if g.dtype(y).kind != "f":
        return [dx, None]
    # d(x^y)/dy = x^y log(x), taken as 0 where x <= 0 (there x^y is real only for integer y).
    positive = g.emit("Greater", x, g.scalar(0.0, x))
    safe_x = g.emit("Where", positive, x, g.scalar(1.0, x))
    dexp = g.emit("Mul", g.emit("Mul", dy, out), g.emit("Log", safe_x))
    if g.dtype(y) != g.dtype(x):
        dexp = g.emit("Cast", dexp, to=to_onnx(g.dtype(y)))
    return [dx, g.sum_to(dexp, y)]


declare("Pow", inputs=("X", "Y"), outputs=("Z",), infer=_pow_infer, onnx_since=15,
        grad=_pow_grad, fusion="elementwise", inplace=((0, 0),),
        dtype_rule=dtypes_of("data", inputs=(0,)))  # the exponent may have another type

# -- unary -------------------------------------------------------------------------------------

UNARY = dict(inputs=("X",), outputs=("Y",), infer=_float_unary, fusion="elementwise",
              inplace=((0, 0),))


def _neg_grad(g, dys):
    return [g.emit("Neg", dys[0])]


def _exp_grad(g, dys):
    return [g.emit("Mul", dys[0], g.outputs[0])]


def _relu_grad(g, dys):
    (x,) = g.inputs
    return [_keep_where(g, g.emit("Greater", x, g.scalar(0.0, x)), dys[0])]


def _abs_grad(g, dys):
    (x,) = g.inputs
    negative = g.emit("Less", x, g.scalar(0.0, x))
    return [g.emit("Where", negative, g.emit("Neg", dys[0]), dys[0])]


def _log_grad(g, dys):
    return [g.emit("Div", dys[0], g.inputs[0])]


def _sqrt_grad(g, dys):
    # d sqrt(x) = 1 / (2 sqrt(x)), from the output
    return [g.emit("Div", _scale(g, dys[0], 0.5), g.outputs[0])]


def _reciprocal_grad(g, dys):
    y = g.outputs[0]
    return [g.emit("Neg", g.emit("Mul", dys[0], g.emit("Mul", y, y)))]


def _sigmoid_grad(g, dys):
    y = g.outputs[0]
    return [g.emit("Mul", dys[0], g.emit("Mul", y, _one_minus(g, y)))]


def _tanh_grad(g, dys):
    y = g.outputs[0]
    return [g.emit("Mul", dys[0], _one_minus(g, g.emit("Mul", y, y)))]


def _softplus_grad(g, dys):
    return [g.emit("Mul", dys[0], g.emit("Sigmoid", g.inputs[0]))]


def _erf_grad(g, dys):
    (x,) = g.inputs
    gauss = g.emit("Exp", g.emit("Neg", g.emit("Mul", x, x)))
    return [g.emit("Mul", dys[0], _scale(g, gauss, 2.0 / math.sqrt(math.pi)))]


declare("Neg", onnx_since=13, grad=_neg_grad, **{**UNARY, "infer": numeric_unary})
declare("Abs", onnx_since=13, grad=_abs_grad, **{**UNARY, "infer": numeric_unary})
declare("Exp", onnx_since=13, grad=_exp_grad, **UNARY)
declare("Log", onnx_since=13, grad=_log_grad, **UNARY)
declare("Sqrt", onnx_since=13, grad=_sqrt_grad, **UNARY)
declare("Reciprocal", onnx_since=13, grad=_reciprocal_grad, **UNARY)
declare("Sigmoid", onnx_since=13, grad=_sigmoid_grad, **UNARY)
declare("Tanh", onnx_since=13, grad=_tanh_grad, **UNARY)
declare("Softplus", onnx_since=22, grad=_softplus_grad, **UNARY)
declare("Erf", onnx_since=13, grad=_erf_grad, **UNARY)
declare("Not", onnx_since=1, **{**UNARY, "infer": _bool_unary})

# -- activations with attributes ----------------------------------------------------------------


def _leaky_relu_grad(g, dys):
    (x,) = g.inputs
    positive = g.emit("Greater", x, g.scalar(0.0, x))
    return [g.emit("Where", positive, dys[0], _scale(g, dys[0], g.attrs["alpha"]))]


def _elu_grad(g, dys):
    # For x <= 0, y = alpha (e^x - 1), so dy/dx = alpha e^x = y + alpha.
    (x,), y = g.inputs, g.outputs[0]
    positive = g.emit("Greater", x, g.scalar(0.0, x))
    negative_slope = g.emit("Add", y, g.scalar(g.attrs["alpha"], y))
    return [g.emit("Where", positive, dys[0], g.emit("Mul", dys[0], negative_slope))]


def _hard_sigmoid_grad(g, dys):
    # The slope is alpha where the output is strictly inside (0, 1), else 0.
    y = g.outputs[0]
    below_one = g.emit("Less", y, g.scalar(1.0, y))
    inside = _keep_where(g, below_one, _scale(g, dys[0], g.attrs["alpha"]))
    return [_keep_where(g, g.emit("Greater", y, g.scalar(0.0, y)), inside)]


def _hard_swish_grad(g, dys):
    # y = x * clip(x/6 + 1/2, 0, 1): slope x/3 + 1/2 on (-3, 3), 1 above, 0 below.
    (x,) = g.inputs
    slope = g.emit("Add", _scale(g, x, 1.0 / 3.0), g.scalar(0.5, x))
    slope = g.emit("Where", g.emit("Greater", x, g.scalar(3.0, x)), g.scalar(1.0, x), slope)
    slope = _zero_where(g, g.emit("Less", x, g.scalar(-3.0, x)), slope)
    return [g.emit("Mul", dys[0], slope)]


def _gelu_infer(ctx):
    if ctx.attrs["approximate"] not in ("none", "tanh"):
        ctx.fail(f"approximate={ctx.attrs['approximate']!r}; Gelu takes 'none' or 'tanh'")
    return _float_unary(ctx)


def _gelu_grad(g, dys):
    (x,) = g.inputs
    half = g.scalar(0.5, x)
    if g.attrs["approximate"] == "tanh":
        # y = x/2 (1 + t), t = tanh(k (x + c x^3)): dy/dx = (1 + t)/2 + x/2 (1 - t^2) k (1 + 3c x^2)
        k, c = math.sqrt(2.0 / math.pi), 0.044715
        x2 = g.emit("Mul", x, x)
        inner = _scale(g, g.emit("Add", x, _scale(g, g.emit("Mul", x2, x), c)), k)
        t = g.emit("Tanh", inner)
        dinner = _scale(g, g.emit("Add", g.scalar(1.0, x), _scale(g, x2, 3.0 * c)), k)
        dtanh = _one_minus(g, g.emit("Mul", t, t))
        core = g.emit("Mul", g.emit("Mul", g.emit("Mul", x, half), dtanh), dinner)
        slope = g.emit("Add", g.emit("Mul", g.emit("Add", t, g.scalar(1.0, x)), half), core)
    else:
        # y = x Phi(x): dy/dx = Phi(x) + x phi(x), Phi the normal cdf and phi its density
        cdf = g.emit("Mul", g.emit("Add", g.emit("Erf", _scale(g, x, math.sqrt(0.5))),
                                   g.scalar(1.0, x)), half)
        pdf = _scale(g, g.emit("Exp", _scale(g, g.emit("Mul", x, x), -0.5)),
                     1.0 / math.sqrt(2.0 * math.pi))
        slope = g.emit("Add", cdf, g.emit("Mul", x, pdf))
    return [g.emit("Mul", dys[0], slope)]


declare("Relu", onnx_since=14, grad=_relu_grad, **{**UNARY, "infer": numeric_unary})
declare("LeakyRelu", onnx_since=16, grad=_leaky_relu_grad,
        attrs={"alpha": Attr("float", 0.01)}, **UNARY)
declare("Elu", onnx_since=22, grad=_elu_grad, attrs={"alpha": Attr("float", 1.0)}, **UNARY)
declare("HardSigmoid", onnx_since=22, grad=_hard_sigmoid_grad,
        attrs={"alpha": Attr("float", 0.2), "beta": Attr("float", 0.5)}, **UNARY)
declare("HardSwish", onnx_since=22, grad=_hard_swish_grad, **UNARY)
declare("Gelu", onnx_since=20, grad=_gelu_grad, attrs={"approximate": Attr("string", "none")},
        **{**UNARY, "infer": _gelu_infer})


def _prelu_infer(ctx):
    # slope broadcasts to X (unidirectionally): the output keeps X's shape.
    x, slope = ctx.shape(0), ctx.shape(1)
    same_dtype(ctx, (0, 1))
    if len(slope) > len(x) or broadcast_shapes(ctx, [x, slope]) != x:
        ctx.fail(f"slope {slope} does not broadcast to X {x}")
    return [ctx.type(0)]


def _prelu_grad(g, dys):
    x, slope = g.inputs
    positive = g.emit("Greater", x, g.scalar(0.0, x))
    dx = g.emit("Where", positive, dys[0], g.emit("Mul", dys[0], slope))
    dslope = _zero_where(g, positive, g.emit("Mul", dys[0], x))
    return [dx, g.sum_to(dslope, slope)]


# No in-place pair: the kernel reads X again after writing the output.
declare("PRelu", inputs=("X", "slope"), outputs=("Y",), infer=_prelu_infer, onnx_since=16,
        grad=_prelu_grad, fusion="elementwise")


def _clip_infer(ctx):
    for i in (1, 2):
        if ctx.has(i) and int(np.prod(ctx.shape(i))) != 1:
            ctx.fail(f"{ctx.op.input_name(i)} must be a scalar, got shape {ctx.shape(i)}")
    same_dtype(ctx, (0, 1, 2))
    return [ctx.type(0)]


def _clip_grad(g, dys):
    x = g.inputs[0]
    bounds = (list(g.inputs[1:]) + [None, None])[:2]
    dx, dbounds = dys[0], []
    # The gradient flows to the bound that an element was clipped to, else to x.
    for bound, compare in zip(bounds, ("Less", "Greater")):
        if bound is None:
            dbounds.append(None)
            continue
        clipped = g.emit(compare, x, bound)
        dbounds.append(g.sum_to(_keep_where(g, clipped, dys[0]), bound))
        dx = _zero_where(g, clipped, dx)
    return [dx] + dbounds


declare("Clip", inputs=("input", "min?", "max?"), outputs=("output",), infer=_clip_infer,
        onnx_since=13, grad=_clip_grad, fusion="elementwise", inplace=((0, 0),))

# -- comparisons, logic and selection -------------------------------------------------------------


def _ordered_compare(ctx):
    if ctx.dtype(0).kind not in "iuf":
        ctx.fail(f"inputs must be numeric, got {ctx.dtype(0).name}")
    return broadcast_to_bool(ctx)


def _bool_binary(ctx):
    if ctx.dtype(0) != np.bool_:
        ctx.fail(f"inputs must be bool, got {ctx.dtype(0).name}")
    return broadcast_to_bool(ctx)


_COMPARE = dict(inputs=("A", "B"), outputs=("C",), fusion="elementwise",
                dtype_rule=dtypes_of(np.bool_))
declare("Greater", onnx_since=13, infer=_ordered_compare, **_COMPARE)
declare("Less", onnx_since=13, infer=_ordered_compare, **_COMPARE)
declare("GreaterOrEqual", onnx_since=16, infer=_ordered_compare, **_COMPARE)
declare("LessOrEqual", onnx_since=16, infer=_ordered_compare, **_COMPARE)
declare("Equal", onnx_since=19, infer=broadcast_to_bool, **_COMPARE)
for _logic in ("And", "Or", "Xor"):
    declare(_logic, onnx_since=7, infer=_bool_binary, **_COMPARE)


def _where_infer(ctx):
    if ctx.dtype(0) != np.bool_:
        ctx.fail(f"condition must be bool, got {ctx.dtype(0).name}")
    shape = broadcast_shapes(ctx, [ctx.shape(0), ctx.shape(1), ctx.shape(2)])
    return [TensorType(shape, same_dtype(ctx, (1, 2)))]


def _where_grad(g, dys):
    cond, x, y = g.inputs
    return [None, g.sum_to(_keep_where(g, cond, dys[0]), x),
            g.sum_to(_zero_where(g, cond, dys[0]), y)]


# In place over Y only: the kernel copies Y first, then X where the condition holds.
declare("Where", inputs=("condition", "X", "Y"), outputs=("output",), infer=_where_infer,
        onnx_since=16, grad=_where_grad, fusion="elementwise", inplace=((2, 0),),
        nondiff_inputs=(0,))

# -- variadic: Max, Min, Sum, Mean --------------------------------------------------------------


def _variadic_infer(kinds):
    def infer(ctx):
        if not len(ctx):
            ctx.fail("takes at least one input")
        if ctx.dtype(0).kind not in kinds:
            ctx.fail(f"inputs must be {'numeric' if 'i' in kinds else 'floating point'}, "
                     f"got {ctx.dtype(0).name}")
        return broadcast_elementwise(ctx)
    return infer


def _extremum_grad(g, dys):
    # Each input gets the gradient where it holds the result (tied inputs each get it).
    y = g.outputs[0]
    return [g.sum_to(_keep_where(g, g.emit("Equal", x, y), dys[0]), x) for x in g.inputs]


def _sum_grad(g, dys):
    return [g.sum_to(dys[0], x) for x in g.inputs]


def _mean_grad(g, dys):
    share = _scale(g, dys[0], 1.0 / len(g.inputs))
    return [g.sum_to(share, x) for x in g.inputs]


# Kernels fold inputs left to right into the output, so it may overwrite input 0 or 1 only.
_VARIADIC = dict(inputs=("data_0*",), outputs=("result",), onnx_since=13,
                 fusion="elementwise", inplace=((0, 0), (1, 0)))
declare("Max", infer=_variadic_infer("iuf"), grad=_extremum_grad, **_VARIADIC)
declare("Min", infer=_variadic_infer("iuf"), grad=_extremum_grad, **_VARIADIC)
declare("Sum", infer=_variadic_infer("f"), grad=_sum_grad, **_VARIADIC)
declare("Mean", infer=_variadic_infer("f"), grad=_mean_grad, **_VARIADIC)

# -- Identity and Cast -------------------------------------------------------------------------


def _identity_grad(g, dys):
    return [dys[0]]


# (dynamic_outputs: Identity also passes sequences and optionals, and tensors whose shape is
# known only at run time, which the executor hands over between planned segments)
declare("Identity", inputs=("input",), outputs=("output",), infer=same_as_input,
        onnx_since=21, grad=_identity_grad, view=True, dynamic_outputs=True)


def _target_dtype(ctx) -> np.dtype:
    to = ctx.attrs["to"]
    missing = low_precision_missing(to)
    if missing is not None:
        ctx.fail(f"attribute to={to}: {missing}")
    if to not in ONNX_DTYPES:
        ctx.fail(f"attribute to={to} is not a supported ONNX element type")
    return ONNX_DTYPES[to]


def _cast_dtype(ctx):
    if ctx.attrs["round_mode"] not in ROUND_MODES:
        ctx.fail(f"round_mode must be one of {list(ROUND_MODES)}, got "
                 f"{ctx.attrs['round_mode']!r}")
    return [_target_dtype(ctx)]


def _cast_infer(ctx):
    target = _cast_dtype(ctx)[0]
    if (target == object) != (ctx.dtype(0) == object):  # (object: the string element type)
        ctx.fail(f"casting {ctx.dtype(0).name} to {target.name}: casts to and from string "
                 f"tensors are not implemented")
    return [TensorType(ctx.shape(0), target)]


def _cast_grad(g, dys):
    (x,) = g.inputs
    if not is_float(g.dtype(x)):
        return [None]
    return [g.emit("Cast", dys[0], to=to_onnx(g.dtype(x)))]


# saturate: out-of-range values become the largest finite float8 (else inf or NaN, as the type
# has them); round_mode: how a float rounds to float8e8m0 (a power of two)
_CAST_ATTRS = {"saturate": Attr("int", 1), "round_mode": Attr("string", "up")}
declare("Cast", inputs=("input",), outputs=("output",), infer=_cast_infer, onnx_since=25,
        attrs={"to": Attr("int"), **_CAST_ATTRS}, grad=_cast_grad,
        fusion="elementwise", dtype_rule=_cast_dtype, widens_weights=True)


def _cast_like_grad(g, dys):
    x = g.inputs[0]
    if not is_float(g.dtype(x)):
        return [None, None]
    return [g.emit("Cast", dys[0], to=to_onnx(g.dtype(x))), None]


# Cast to the element type of a second tensor (whose values are never read)
declare("CastLike", inputs=("input", "target_type"), outputs=("output",),
        infer=lambda ctx: [TensorType(ctx.shape(0), ctx.dtype(1))], onnx_since=25,
        attrs=_CAST_ATTRS, grad=_cast_like_grad, nondiff_inputs=(1,),
        ignored_inputs=(1,), dtype_rule=dtypes_of(1, inputs=()), widens_weights=True)


def _bits(dtype: np.dtype) -> int:
    """The width of one element in ONNX (4- and 2-bit types take a byte in memory)."""
    return PACKED_BITS.get(to_onnx(dtype), 8 * dtype.itemsize)


def _bitcast_dtype(ctx):
    return [_target_dtype(ctx)]


def _bitcast_infer(ctx):
    out, given = _target_dtype(ctx), ctx.dtype(0)
    if object in (out, given):  # (object: the string element type, which has no bits)
        ctx.fail(f"BitCast of string tensors is not defined ({given.name} to {out.name})")
    if _bits(given) != _bits(out):
        ctx.fail(f"BitCast keeps the bits: {given.name} ({_bits(given)} bits) and {out.name} "
                 f"({_bits(out)} bits) differ in width")
    return [TensorType(ctx.shape(0), out)]


# The same bits read as another element type of the same width (not differentiable)
declare("BitCast", inputs=("input",), outputs=("output",), infer=_bitcast_infer, onnx_since=26,
        attrs={"to": Attr("int")}, dtype_rule=_bitcast_dtype)
