"""MXNet 1.x's tensor ops (elementwise, scalar, broadcast, reduce, shape manipulation, dot) as
portable's ONNX-named ops; registered into ``mxnet_converters.CONVERTERS`` (see there for the
converter contract).

MXNet's comparison ops return 0/1 in the data's dtype (ONNX's return bool), its ``round``
rounds halves away from zero (ONNX's to even), and its reductions drop the reduced axes by
default (ONNX's keep them): each is written out here.

Example:
    >>> "_plus_scalar" in CONVERTERS and "Reshape" in CONVERTERS
    True
"""
from __future__ import annotations

from math import log

import numpy as np

from portable.dtypes import to_onnx
from portable.symbol.mxnet_builder import Entry, NodeBuilder
from portable.symbol.mxnet_converters import (_BOOL, CONVERTERS, INT64_MAX, INT64_MIN,
                                              _inputs, converter)

# -- elementwise -----------------------------------------------------------------------------

_UNARY = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "exp": "Exp", "log": "Log",
          "sqrt": "Sqrt", "abs": "Abs", "negative": "Neg", "reciprocal": "Reciprocal",
          "floor": "Floor", "ceil": "Ceil", "rint": "Round", "sign": "Sign", "erf": "Erf",
          "softsign": "Softsign", "sin": "Sin", "cos": "Cos", "tan": "Tan", "arcsin": "Asin",
          "arccos": "Acos", "arctan": "Atan", "sinh": "Sinh", "cosh": "Cosh",
          "arcsinh": "Asinh", "arccosh": "Acosh", "arctanh": "Atanh",
          "identity": "Identity", "_copy": "Identity",
          # forward only: MXNet also stops the gradient here (BlockGrad), or makes the
          # output's gradient grad_scale whatever the head gradient is (MakeLoss)
          "BlockGrad": "Identity", "stop_gradient": "Identity",
          "MakeLoss": "Identity", "make_loss": "Identity"}


def _unary(op: str):
    def convert(b, inputs, a):
        return [b.emit(op, _inputs(b, inputs, 1), final=True)]
    return convert


for _name, _op in _UNARY.items():
    CONVERTERS[_name] = _unary(_op)


@converter("square")
def _square(b, inputs, a):
    (x,) = _inputs(b, inputs, 1)
    return [b.emit("Mul", [x, x], final=True)]


@converter("rsqrt")
def _rsqrt(b, inputs, a):
    return [b.emit("Reciprocal", [b.emit("Sqrt", _inputs(b, inputs, 1))], final=True)]


@converter("log1p")
def _log1p(b, inputs, a):
    (x,) = _inputs(b, inputs, 1)
    return [b.emit("Log", [b.emit("Add", [x, b.scalar(1.0)])], final=True)]


@converter("expm1")
def _expm1(b, inputs, a):
    return [b.emit("Sub", [b.emit("Exp", _inputs(b, inputs, 1)), b.scalar(1.0)], final=True)]


def _log_base(base: float):
    def convert(b, inputs, a):
        return [b.emit("Div", [b.emit("Log", _inputs(b, inputs, 1)), b.scalar(log(base))],
                       final=True)]
    return convert


CONVERTERS["log2"] = _log_base(2.0)
CONVERTERS["log10"] = _log_base(10.0)


@converter("round")
def _round(b, inputs, a):  # halves away from zero: sign(x) * floor(|x| + 0.5)
    (x,) = _inputs(b, inputs, 1)
    magnitude = b.emit("Floor", [b.emit("Add", [b.emit("Abs", [x]), b.scalar(0.5)])])
    return [b.emit("Mul", [b.emit("Sign", [x]), magnitude], final=True)]


@converter("fix", "trunc")
def _trunc(b, inputs, a):
    (x,) = _inputs(b, inputs, 1)
    magnitude = b.emit("Floor", [b.emit("Abs", [x])])
    return [b.emit("Mul", [b.emit("Sign", [x]), magnitude], final=True)]


_BINARY = {"Add": ("elemwise_add", "_plus", "_Plus", "_add", "broadcast_add", "broadcast_plus"),
           "Sub": ("elemwise_sub", "_minus", "_Minus", "_sub", "broadcast_sub",
                   "broadcast_minus"),
           "Mul": ("elemwise_mul", "_mul", "_Mul", "broadcast_mul"),
           "Div": ("elemwise_div", "_div", "_Div", "broadcast_div"),
           "Pow": ("_power", "_Power", "broadcast_power"),
           "Max": ("_maximum", "_Maximum", "broadcast_maximum"),
           "Min": ("_minimum", "_Minimum", "broadcast_minimum")}
_COMPARE = {"Equal": ("_equal", "broadcast_equal"),
            "Greater": ("_greater", "broadcast_greater"),
            "GreaterOrEqual": ("_greater_equal", "broadcast_greater_equal"),
            "Less": ("_lesser", "broadcast_lesser"),
            "LessOrEqual": ("_lesser_equal", "broadcast_lesser_equal"),
            "NotEqual": ("_not_equal", "broadcast_not_equal")}


def _compare(b: NodeBuilder, op: str, x: Entry, y: Entry) -> Entry:
    """MXNet's comparisons: 1/0 in ``x``'s dtype."""
    test = b.emit("Not", [b.emit("Equal", [x, y])]) if op == "NotEqual" else \
        b.emit(op, [x, y])
    return b.emit("CastLike", [test, x], final=True)


def _binary(op: str):
    def convert(b, inputs, a):
        return [b.emit(op, _inputs(b, inputs, 2), final=True)]
    return convert


def _binary_compare(op: str):
    def convert(b, inputs, a):
        return [_compare(b, op, *_inputs(b, inputs, 2))]
    return convert


for _op, _names in _BINARY.items():
    for _name in _names:
        CONVERTERS[_name] = _binary(_op)
for _op, _names in _COMPARE.items():
    for _name in _names:
        CONVERTERS[_name] = _binary_compare(_op)


def _scalar_op(op: str, reverse: bool = False):
    def convert(b, inputs, a):
        (x,) = _inputs(b, inputs, 1)
        value = b.scalar(a.float("scalar"))
        operands = [value, x] if reverse else [x, value]
        if op in _COMPARE:
            return [_compare(b, op, *operands)]
        return [b.emit(op, operands, final=True)]
    return convert


for _name, _spec in {"_plus_scalar": ("Add",), "_minus_scalar": ("Sub",),
                     "_rminus_scalar": ("Sub", True), "_mul_scalar": ("Mul",),
                     "_div_scalar": ("Div",), "_rdiv_scalar": ("Div", True),
                     "_power_scalar": ("Pow",), "_rpower_scalar": ("Pow", True),
                     "_maximum_scalar": ("Max",), "_minimum_scalar": ("Min",),
                     "_equal_scalar": ("Equal",), "_not_equal_scalar": ("NotEqual",),
                     "_greater_scalar": ("Greater",),
                     "_greater_equal_scalar": ("GreaterOrEqual",),
                     "_lesser_scalar": ("Less",),
                     "_lesser_equal_scalar": ("LessOrEqual",)}.items():
    CONVERTERS[_name] = _scalar_op(*_spec)


@converter("add_n", "ElementWiseSum", "_sum")
def _add_n(b, inputs, a):
    if not inputs:
        b.fail("add_n needs at least one input")
    return [b.emit("Sum", inputs, final=True)]


@converter("clip")
def _clip(b, inputs, a):
    (x,) = _inputs(b, inputs, 1)
    return [b.emit("Clip", [x, b.scalar(a.float("a_min")), b.scalar(a.float("a_max"))],
                   final=True)]


@converter("where")
def _where(b, inputs, a):
    condition, x, y = _inputs(b, inputs, 3)
    return [b.emit("Where", [b.emit("Cast", [condition], to=_BOOL), x, y], final=True)]


@converter("Cast", "cast")
def _cast(b, inputs, a):
    (x,) = _inputs(b, inputs, 1)
    name = a.str("dtype")
    try:
        code = to_onnx(np.dtype(name))
    except (TypeError, ValueError, Exception):  # a name NumPy or ONNX does not know
        b.fail(f"dtype={name!r:.40} is not a known dtype")
    return [b.emit("Cast", [x], final=True, to=code)]


@converter("zeros_like", "ones_like")
def _filled_like(b, inputs, a):
    (x,) = _inputs(b, inputs, 1)
    value = np.asarray([0.0 if b.attrs.op == "zeros_like" else 1.0], np.float32)
    filled = b.emit("ConstantOfShape", [b.shape_of(x)], value=value)
    return [b.emit("CastLike", [filled, x], final=True)]


# -- reductions ------------------------------------------------------------------------------

_REDUCE = {"sum": "ReduceSum", "sum_axis": "ReduceSum", "mean": "ReduceMean",
           "max": "ReduceMax", "max_axis": "ReduceMax", "min": "ReduceMin",
           "min_axis": "ReduceMin", "prod": "ReduceProd", "norm": "ReduceL2"}


def _reduce(op: str):
    def convert(b, inputs, a):
        (x,) = _inputs(b, inputs, 1)
        if a.bool("exclude", False):
            b.fail("exclude=True is not supported")
        if op == "ReduceL2" and a.int("ord", 2) != 2:
            b.fail(f"ord={a.int('ord')} is not supported (2 only)")
        axes = a.ints("axis", [])
        keep = a.bool("keepdims", False)  # MXNet drops the reduced axes by default
        out = b.emit(op, [x, b.ints(axes) if axes else None], final=keep, keepdims=int(keep))
        return [out if keep else _at_least_1d(b, out, known_scalar=not axes)]
    return convert


def _at_least_1d(b: NodeBuilder, out: Entry, known_scalar: bool) -> Entry:
    """MXNet 1.x has no 0-d arrays: a reduction over every axis gives shape (1,)."""
    if known_scalar:
        return b.emit("Reshape", [out, b.ints([1])], final=True)
    # shape S, or [1] when S is empty: the last len(S) entries of [1] + S
    shape = b.shape_of(out)
    start = b.emit("Neg", [b.shape_of(shape)])
    target = b.emit("Slice", [b.emit("Concat", [b.ints([1]), shape], axis=0), start,
                              b.ints([INT64_MAX])])
    return b.emit("Reshape", [out, target], final=True)


for _name, _op in _REDUCE.items():
    CONVERTERS[_name] = _reduce(_op)


def _arg_reduce(op: str):
    def convert(b, inputs, a):
        (x,) = _inputs(b, inputs, 1)
        if not a.has("axis"):
            b.fail("axis=None (over the flattened array) is not supported")
        keep = a.bool("keepdims", False)
        index = b.emit(op, [x], axis=a.int("axis"), keepdims=int(keep))
        index = b.emit("CastLike", [index, x], final=keep)  # MXNet's indices are floats
        return [index if keep else _at_least_1d(b, index, known_scalar=False)]
    return convert


CONVERTERS["argmax"] = _arg_reduce("ArgMax")
CONVERTERS["argmin"] = _arg_reduce("ArgMin")


# -- shape manipulation ----------------------------------------------------------------------


@converter("Flatten", "flatten")
def _flatten(b, inputs, a):
    return [b.emit("Flatten", _inputs(b, inputs, 1), final=True, axis=1)]


@converter("Concat", "concat")
def _concat(b, inputs, a):
    if not inputs:
        b.fail("Concat needs at least one input")
    return [b.emit("Concat", inputs, final=True, axis=a.int("dim", 1))]


@converter("stack")
def _stack(b, inputs, a):
    if not inputs:
        b.fail("stack needs at least one input")
    axis = a.int("axis", 0)
    parts = [b.emit("Unsqueeze", [x, b.ints([axis])]) for x in inputs]
    return [b.emit("Concat", parts, final=True, axis=axis)]


@converter("SliceChannel", "split")
def _split(b, inputs, a):
    (x,) = _inputs(b, inputs, 1)
    count, axis = a.int("num_outputs"), a.int("axis", 1)
    squeeze = a.bool("squeeze_axis", False)
    parts = b.emit_all("Split", [x], not squeeze, count, axis=axis, num_outputs=count)
    if squeeze:
        parts = [b.emit("Squeeze", [p, b.ints([axis])]) for p in parts]
    return parts


@converter("transpose")
def _transpose(b, inputs, a):
    axes = a.ints("axes", [])
    return [b.emit("Transpose", _inputs(b, inputs, 1), final=True, perm=axes or None)]


@converter("expand_dims")
def _expand_dims(b, inputs, a):
    (x,) = _inputs(b, inputs, 1)
    return [b.emit("Unsqueeze", [x, b.ints([a.int("axis")])], final=True)]


@converter("squeeze")
def _squeeze(b, inputs, a):
    (x,) = _inputs(b, inputs, 1)
    axes = a.ints("axis", [])
    return [b.emit("Squeeze", [x, b.ints(axes) if axes else None], final=True)]


@converter("slice_axis")
def _slice_axis(b, inputs, a):
    (x,) = _inputs(b, inputs, 1)
    end = a.int("end", None)
    return [b.emit("Slice", [x, b.ints([a.int("begin")]),
                             b.ints([INT64_MAX if end is None else end]),
                             b.ints([a.int("axis")])], final=True)]


@converter("slice", "crop")
def _slice(b, inputs, a):
    (x,) = _inputs(b, inputs, 1)
    begin = a.ints("begin", allow_none=True)
    end = a.ints("end", allow_none=True)
    step = a.ints("step", [], allow_none=True) or [None] * len(begin)
    if not len(begin) == len(end) == len(step):
        b.fail(f"begin={begin}, end={end} and step={step} differ in length")
    step = [1 if s is None else s for s in step]
    if 0 in step:
        b.fail("a step of 0")
    starts = [(0 if s > 0 else INT64_MAX) if v is None else v for v, s in zip(begin, step)]
    ends = [(INT64_MAX if s > 0 else INT64_MIN) if v is None else v for v, s in zip(end, step)]
    return [b.emit("Slice", [x, b.ints(starts), b.ints(ends), b.ints(range(len(begin))),
                             b.ints(step)], final=True)]


@converter("broadcast_to")
def _broadcast_to(b, inputs, a):
    (x,) = _inputs(b, inputs, 1)
    # MXNet's 0 keeps the input's dimension; Expand keeps it for a 1.
    shape = [1 if d == 0 else d for d in a.ints("shape")]
    return [b.emit("Expand", [x, b.ints(shape)], final=True)]


@converter("broadcast_like")
def _broadcast_like(b, inputs, a):
    x, like = _inputs(b, inputs, 2)
    return [b.emit("Expand", [x, b.shape_of(like)], final=True)]


@converter("Pad", "pad")
def _pad(b, inputs, a):
    (x,) = _inputs(b, inputs, 1)
    widths = a.ints("pad_width")
    mode = a.str("mode", "constant")
    if mode not in ("constant", "edge", "reflect") or len(widths) % 2:
        b.fail(f"mode={mode!r} / pad_width={widths} is not supported")
    pads = widths[0::2] + widths[1::2]  # MXNet pairs (before, after) per axis
    value = b.scalar(a.float("constant_value", 0.0)) if mode == "constant" else None
    return [b.emit("Pad", [x, b.ints(pads), value], final=True, mode=mode)]


@converter("Reshape", "reshape")
def _reshape(b, inputs, a):
    (x,) = _inputs(b, inputs, 1)
    codes = a.ints("shape", [])
    if not codes:
        b.fail("Reshape needs a shape (the deprecated target_shape is not supported)")
    reverse = a.bool("reverse", False)
    special = any(c in (-2, -3, -4) or c < -4 for c in codes) or (reverse and 0 in codes)
    if not special:  # 0 (copy the dimension) and -1 (infer) mean what ONNX's mean
        return [b.emit("Reshape", [x, b.ints(codes)], final=True)]
    return [b.emit("Reshape", [x, _reshape_target(b, x, codes, reverse)], final=True)]


def _reshape_target(b: NodeBuilder, x: Entry, codes: list[int], reverse: bool) -> Entry:
    """MXNet's Reshape shape codes (src/operator/tensor/matrix_op-inl.h, InferReshapeShape)
    computed from ``Shape(x)``: 0 copies a dimension, -1 is inferred, -2 copies the rest,
    -3 merges two, -4 splits one into the next two codes; ``reverse`` reads both right to
    left."""
    shape = b.shape_of(x)
    flip = [b.ints([-1]), b.ints([INT64_MIN]), b.ints([0]), b.ints([-1])]
    if reverse:
        shape, codes = b.emit("Slice", [shape, *flip]), codes[::-1]

    def dims(start: int, stop: int | None = None) -> Entry:
        return b.emit("Slice", [shape, b.ints([start]),
                                b.ints([start + 1 if stop is None else stop])])

    pieces, src, i = [], 0, 0
    while i < len(codes):
        code = codes[i]
        if code == 0:
            pieces.append(dims(src))
            src += 1
        elif code == -1 or code > 0:
            pieces.append(b.ints([code]))
            src += 1
        elif code == -2:
            pieces.append(dims(src, INT64_MAX))
            src = INT64_MAX  # the rest is copied: nothing is left to read
        elif code == -3:
            pieces.append(b.emit("ReduceProd", [dims(src, src + 2)], keepdims=1))
            src += 2
        elif code == -4:
            if i + 2 >= len(codes):
                b.fail(f"shape code -4 at position {i} needs two codes after it: {codes}")
            first, second = codes[i + 1], codes[i + 2]
            if (first, second) == (-1, -1) or min(first, second) < -1 or 0 in (first, second):
                b.fail(f"shape code -4 is followed by {first}, {second}; one may be -1")
            whole = dims(src)
            for this, other in ((first, second), (second, first)):
                pieces.append(b.emit("Div", [whole, b.ints([other])]) if this == -1
                              else b.ints([this]))
            src += 1
            i += 2
        else:
            b.fail(f"shape code {code} is not one of MXNet's (-1, -2, -3, -4, 0 or > 0)")
        i += 1
    target = b.emit("Concat", pieces, axis=0)
    return b.emit("Slice", [target, *flip]) if reverse else target


# -- products --------------------------------------------------------------------------------


@converter("dot")
def _dot(b, inputs, a):
    """MXNet's dot: the last axis of ``a`` against the first of ``b`` (the whole array
    reversed first with transpose_a/b), through 2-d views."""
    x, y = _inputs(b, inputs, 2)
    if a.bool("transpose_a", False):
        x = b.emit("Transpose", [x])
    if a.bool("transpose_b", False):
        y = b.emit("Transpose", [y])
    x_shape, y_shape = b.shape_of(x), b.shape_of(y)
    last = b.emit("Slice", [x_shape, b.ints([-1]), b.ints([INT64_MAX])])
    first = b.emit("Slice", [y_shape, b.ints([0]), b.ints([1])])
    x2 = b.emit("Reshape", [x, b.emit("Concat", [b.ints([-1]), last], axis=0)])
    y2 = b.emit("Reshape", [y, b.emit("Concat", [first, b.ints([-1])], axis=0)])
    out_shape = b.emit("Concat", [b.emit("Slice", [x_shape, b.ints([0]), b.ints([-1])]),
                                  b.emit("Slice", [y_shape, b.ints([1]),
                                                   b.ints([INT64_MAX])])], axis=0)
    return [b.emit("Reshape", [b.emit("MatMul", [x2, y2]), out_shape], final=True)]


@converter("batch_dot")
def _batch_dot(b, inputs, a):
    x, y = _inputs(b, inputs, 2)
    if a.bool("transpose_a", False):
        x = b.emit("Transpose", [x], perm=[0, 2, 1])
    if a.bool("transpose_b", False):
        y = b.emit("Transpose", [y], perm=[0, 2, 1])
    return [b.emit("MatMul", [x, y], final=True)]
