"""The elementwise op table: ONNX op (and array-function) name -> C expression.

Every generated elementwise kernel, single or fused, takes its arithmetic from here. Templates
use ``{0}``, ``{1}``, ... for operands (already converted to the compute type unless the op
says otherwise), ``{alpha}``-style names for float attributes (passed as kernel arguments, so a
new attribute value never compiles a new kernel) and ``L(0.5)`` for literals of the compute
type. NaN follows NumPy: Max/Min/Relu propagate it.

Example:
    >>> TABLE["Relu"].template([ctype("float32")])
    '({0} < 0 ? 0 : {0})'
"""
from __future__ import annotations

from backends.opencl.codegen import EwOp

TABLE: dict[str, EwOp] = {}


def _op(name: str, expr, arity: int, **facets) -> EwOp:
    TABLE[name] = EwOp(name, expr, arity, **facets)
    return TABLE[name]


_IPOW = """
inline long portable_ipow(long base, long e) {
  if (e < 0) return base == 1 ? 1 : (base == -1 ? ((e & 1) ? -1 : 1) : 0);
  long r = 1;
  while (e) { if (e & 1) r *= base; base *= base; e >>= 1; }
  return r;
}
"""


def _pow(x, y):
    if not x.is_float and not y.is_float:
        return "portable_ipow((long){0}, (long){1})"
    if not y.is_float:
        return "pown({0}, (int){1})"
    wide = "double" if "double" in (x.compute, y.compute) else "float"
    return f"pow(({wide}){{0}}, ({wide}){{1}})"


def _extreme(compare: str):
    def expr(a, b):
        if a.is_float:  # NaN wins, as in np.maximum / np.minimum
            return f"(({{0}} {compare} {{1}} || isnan({{0}})) ? {{0}} : {{1}})"
        return f"({{0}} {compare} {{1}} ? {{0}} : {{1}})"
    return expr


# -- arithmetic ---------------------------------------------------------------------------------
_op("Add", "{0} + {1}", 2)
_op("Sub", "{0} - {1}", 2)
_op("Mul", "{0} * {1}", 2)
# ONNX integer division truncates toward zero, as C does; a zero divisor gives 0 (NumPy's).
_op("Div", lambda a, b: "{0} / {1}" if a.is_float else "({1} == 0 ? 0 : {0} / {1})", 2)
_op("Pow", _pow, 2, result="first", promote=(0,), helpers=_IPOW)
# fmod != 0: the dividend's sign (C's % and fmod); else the divisor's (NumPy's mod, written
# as NumPy's npy_divmod does: from fmod, so an infinite divisor and the signs of zeros come out
# as there: -3 mod inf = inf, 0 mod -2 = -0). A zero integer divisor gives 0, as NumPy does.
_op("Mod", lambda a, b:
    "({fmod} != 0 ? fmod({0}, {1}) : (fmod({0}, {1}) == 0 ? copysign(L(0.0), {1}) : "
    "((fmod({0}, {1}) < 0) != ({1} < 0) ? fmod({0}, {1}) + {1} : fmod({0}, {1}))))"
    if a.is_float else
    "({1} == 0 ? 0 : ({fmod} != 0 || {0} % {1} == 0 || (({0} % {1} < 0) == ({1} < 0)) ? "
    "{0} % {1} : {0} % {1} + {1}))", 2, params=("fmod",))
_op("Max", _extreme(">"), 2)
_op("Min", _extreme("<"), 2)

# -- unary ------------------------------------------------------------------------------------
_op("Neg", "-{0}", 1)
_op("Abs", lambda a: "fabs({0})" if a.is_float else
    ("{0}" if a.dtype.kind in "ub" else "({0} < 0 ? -{0} : {0})"), 1)
_op("Exp", "exp({0})", 1, kinds="f")
_op("Log", "log({0})", 1, kinds="f")
_op("Sqrt", "sqrt({0})", 1, kinds="f")
_op("Reciprocal", "L(1.0) / {0}", 1, kinds="f")
_op("Sigmoid", "L(1.0) / (L(1.0) + exp(-{0}))", 1, kinds="f")
_op("Tanh", "tanh({0})", 1, kinds="f")
_op("Softplus", "({0} > L(0.0) ? {0} + log1p(exp(-{0})) : log1p(exp({0})))", 1, kinds="f")
_op("Erf", "erf({0})", 1, kinds="f")
_op("Not", "!{0}", 1)
_op("Relu", "({0} < 0 ? 0 : {0})", 1)
_op("Square", "{0} * {0}", 1)
_op("Sign", "({0} > 0 ? 1 : ({0} < 0 ? -1 : 0))", 1)
for _name, _fn in (("Sin", "sin"), ("Cos", "cos"), ("Tan", "tan"), ("Asin", "asin"),
                   ("Acos", "acos"), ("Atan", "atan"), ("Sinh", "sinh"), ("Cosh", "cosh"),
                   ("Asinh", "asinh"), ("Acosh", "acosh"), ("Atanh", "atanh"),
                   ("Floor", "floor"), ("Ceil", "ceil"), ("Round", "rint")):  # rint: half to even
    _op(_name, _fn + "({0})", 1, kinds="f")
_op("Softsign", "{0} / (L(1.0) + fabs({0}))", 1, kinds="f")
_op("Mish", "{0} * tanh({0} > L(20.0) ? {0} : log1p(exp({0})))", 1, kinds="f")
_op("Swish", "{0} / (L(1.0) + exp(-{alpha} * {0}))", 1, params=("alpha",), kinds="f")
_op("ThresholdedRelu", "({0} > {alpha} ? {0} : 0)", 1, params=("alpha",), kinds="f")
_op("Shrink", "({0} < -{lambd} ? {0} + {bias} : ({0} > {lambd} ? {0} - {bias} : 0))", 1,
    params=("bias", "lambd"))
_op("Celu", "(fmax({0}, L(0.0)) + fmin(L(0.0), {alpha} * expm1({0} / {alpha})))", 1,
    params=("alpha",), kinds="f")
_op("IsInf", "(isinf({0}) && ({0} > 0 ? {detect_positive} != 0 : {detect_negative} != 0))",
    1, result="bool", params=("detect_negative", "detect_positive"), kinds="f")

# -- activations with attributes ----------------------------------------------------------------
_op("LeakyRelu", "({0} > 0 ? {0} : {alpha} * {0})", 1, params=("alpha",), kinds="f")
_op("Elu", "({0} > 0 ? {0} : {alpha} * expm1({0}))", 1, params=("alpha",), kinds="f")
_op("Selu", "{gamma} * ({0} > 0 ? {0} : {alpha} * expm1({0}))", 1, params=("alpha", "gamma"),
    kinds="f")
_op("HardSigmoid", "clamp({alpha} * {0} + {beta}, L(0.0), L(1.0))", 1,
    params=("alpha", "beta"), kinds="f")
_op("HardSwish", "{0} * clamp({0} * L(0.16666666666666666) + L(0.5), L(0.0), L(1.0))", 1, kinds="f")
_op("Gelu", "L(0.5) * {0} * (L(1.0) + erf({0} * L(0.7071067811865476)))", 1, kinds="f")
_op("GeluTanh", "L(0.5) * {0} * (L(1.0) + tanh(L(0.7978845608028654) * "
    "({0} + L(0.044715) * {0} * {0} * {0})))", 1, kinds="f")
_op("PRelu", "({0} > 0 ? {0} : {0} * {1})", 2)
_op("Scale", "{0} * {alpha}", 1, params=("alpha",))
_op("Affine", "{0} * {alpha} + {beta}", 1, params=("alpha", "beta"))
# normalisation and dropout building blocks (kernels of several ops share them)
_op("InvStd", "L(1.0) / sqrt({0} + {eps})", 1, params=("eps",), kinds="f")
_op("MulAdd", "{0} * {1} + {2}", 3)
_op("Lerp", "{0} * {momentum} + {1} * (L(1.0) - {momentum})", 2, params=("momentum",))
_op("MulScaled", "{0} * {1} * {scale}", 2, params=("scale",))

# -- comparisons, logic, selection, conversion ------------------------------------------------
_op("Greater", "{0} > {1}", 2, result="bool")
_op("Less", "{0} < {1}", 2, result="bool")
_op("GreaterOrEqual", "{0} >= {1}", 2, result="bool")
_op("LessOrEqual", "{0} <= {1}", 2, result="bool")
_op("Equal", "{0} == {1}", 2, result="bool")
_op("NotEqual", "{0} != {1}", 2, result="bool")
_op("And", "{0} && {1}", 2, result="bool")
_op("Or", "{0} || {1}", 2, result="bool")
_op("Xor", "(!{0}) != (!{1})", 2, result="bool")
_op("BitwiseAnd", "{0} & {1}", 2, kinds="iu")
_op("BitwiseOr", "{0} | {1}", 2, kinds="iu")
_op("BitwiseXor", "{0} ^ {1}", 2, kinds="iu")
_op("BitwiseNot", "~{0}", 1, kinds="iu")
# (BitShift's opset-28 meaning: a count outside [0, width) gives 0, or -1 shifted right from
# a negative value; a left shift works on the storage's unsigned bits)
_UNSIGNED = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}
_op("BitShiftLeft", lambda a, b: "(({1}) >= 0 && ({1}) < %d ? ((%s){0}) << ({1}) : 0)" % (
    8 * a.dtype.itemsize, _UNSIGNED[a.dtype.itemsize]), 2, kinds="iu")
_op("BitShiftRight", lambda a, b: "(({1}) >= 0 && ({1}) < %d ? ({0}) >> ({1}) : "
    "(({0}) < 0 ? -1 : 0))" % (8 * a.dtype.itemsize), 2, kinds="iu")
_op("IsNaN", lambda a: "isnan({0})" if a.is_float else "0", 1, result="bool")
_op("Where", "({0} != 0 ? {1} : {2})", 3, promote=(1, 2))
# A copy converting to the output's dtype (C conversions truncate toward zero, as astype).
_op("Cast", "{0}", 1, result="given", promote=())
_op("Identity", "{0}", 1)

# -- recurrent gate activations (ONNX RNN activation names), with the cell clip ------------------
# name -> (f(x), f'(x, y)); x is the pre-activation clamped to [-clip, clip] when clip > 0 and
# y = f(x). ``Rnn<name>`` computes f of {0}; ``Rnn<name>Grad`` computes dy * f' from a = {0},
# y = {1}, dy = {2}, zero where the clip cut a off.
_GATES = {
    "sigmoid": ("L(0.5) * tanh(L(0.5) * {0}) + L(0.5)", "{1} * (L(1.0) - {1})"),
    "tanh": ("tanh({0})", "L(1.0) - {1} * {1}"),
    "relu": ("({0} < 0 ? 0 : {0})", "({0} > 0 ? L(1.0) : L(0.0))"),
    "affine": ("{alpha} * {0} + {beta}", "{alpha}"),
    "leakyrelu": ("({0} >= 0 ? {0} : {alpha} * {0})", "({0} >= 0 ? L(1.0) : {alpha})"),
    "thresholdedrelu": ("({0} > {alpha} ? {0} : L(0.0))", "({0} > {alpha} ? L(1.0) : L(0.0))"),
    "scaledtanh": ("{alpha} * tanh({beta} * {0})",
                   "{alpha} * {beta} * (L(1.0) - tanh({beta} * {0}) * tanh({beta} * {0}))"),
    "hardsigmoid": ("clamp({alpha} * {0} + {beta}, L(0.0), L(1.0))",
                    "({1} > 0 && {1} < 1 ? {alpha} : L(0.0))"),
    "elu": ("({0} >= 0 ? {0} : {alpha} * (exp(min({0}, L(0.0))) - L(1.0)))",
            "({0} >= 0 ? L(1.0) : {1} + {alpha})"),
    "softsign": ("{0} / (L(1.0) + fabs({0}))",
                 "L(1.0) / ((L(1.0) + fabs({0})) * (L(1.0) + fabs({0})))"),
    "softplus": ("({0} > L(0.0) ? {0} + log1p(exp(-{0})) : log1p(exp({0})))",
                 "L(0.5) * tanh(L(0.5) * {0}) + L(0.5)"),
}
_CLIPPED = "(({clip} > 0) ? clamp({0}, -{clip}, {clip}) : {0})"
_GATE_PARAMS = ("alpha", "beta", "clip")
for _name, (_f, _grad) in _GATES.items():
    _op(f"Rnn{_name}", _f.replace("{0}", _CLIPPED), 1, params=_GATE_PARAMS, kinds="f")
    _op(f"Rnn{_name}Grad", "{2} * (" + _grad.replace("{0}", _CLIPPED) +
        ") * ((({clip} > 0) && fabs({0}) >= {clip}) ? L(0.0) : L(1.0))", 3,
        params=_GATE_PARAMS, kinds="f")
