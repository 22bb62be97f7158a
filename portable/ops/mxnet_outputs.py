"""MXNet 1.x's loss-output ops: ``SoftmaxOutput`` and the regression outputs.

These ops compute a prediction in forward (softmax, identity, sigmoid) and, in backward, the
gradient of a loss against their ``label`` input, ignoring the head gradient, exactly as
MXNet 1.9.1 does (``src/operator/softmax_output-inl.h``, ``regression_output-inl.h``):

- ``SoftmaxOutput``: ``grad = (softmax - onehot(label)) * grad_scale / valid_count``, where
  ``valid_count`` is 1 (``normalization='null'``), the batch size (``'batch'``) or the number of
  labels not equal to ``ignore_label`` (``'valid'``). With ``use_ignore`` the rows whose label is
  ``ignore_label`` get zero gradient. With ``multi_output`` the softmax runs along axis 1 of
  (N, C, D...) and the gradient is further divided by D (except for ``'valid'``). A label of the
  data's shape is a probability target: ``grad = (out - label) * grad_scale``. ``out_grad``
  multiplies by the output itself (MXNet 1.9.1 passes its output where the head gradient
  would go; copied here as it is).
- ``LinearRegressionOutput`` / ``LogisticRegressionOutput``: ``grad = (out - label) *
  grad_scale / num_output`` (``num_output`` = label size / batch size); ``MAERegressionOutput``
  uses ``sign(out - label)`` with MXNet's sign of 0 being -1.

They are private ops (MXNet has them, ONNX does not); their gradients are the private ops
``SoftmaxOutputGrad`` and ``RegressionOutputGrad``. Labels never get a gradient.
"""
from __future__ import annotations

from math import prod

from portable.ops.registry import Attr, declare
from portable.ops.rules import dtypes_of, require_float

NORMALIZATIONS = ("null", "batch", "valid")

SOFTMAX_OUTPUT_ATTRS = {
    "grad_scale": Attr("float", 1.0), "ignore_label": Attr("float", -1.0),
    "multi_output": Attr("int", 0), "use_ignore": Attr("int", 0),
    "preserve_shape": Attr("int", 0), "normalization": Attr("string", "null"),
    "out_grad": Attr("int", 0), "smooth_alpha": Attr("float", 0.0),
}
REGRESSION_ATTRS = {"grad_scale": Attr("float", 1.0)}
# forward op -> the loss its gradient op differentiates
REGRESSION_KINDS = {"LinearRegressionOutput": "linear", "LogisticRegressionOutput": "logistic",
                    "MAERegressionOutput": "mae"}


def softmax_label_shapes(shape: tuple[int, ...], multi_output: bool) -> list[tuple[int, ...]]:
    """The label shapes SoftmaxOutput accepts for data of ``shape`` besides ``shape`` itself
    (a probability target); the first is the one MXNet infers for a label left unknown.

    Example:
        >>> softmax_label_shapes((4, 10), False)
        [(4,)]
    """
    if multi_output:
        n, c = shape[0], shape[1]
        return [(n, prod(shape) // max(n * c, 1)), (n, *shape[2:]), (n, 1, *shape[2:])]
    return [tuple(shape[:-1])]


def softmax_view(shape: tuple[int, ...], multi_output: bool,
                 preserve_shape: bool) -> tuple[int, ...]:
    """The shape SoftmaxOutput computes its softmax in, along axis 1: (N, C, D) with
    ``multi_output``, (rows, last axis) with ``preserve_shape``, else (N, everything else)."""
    size = prod(shape)
    if multi_output:
        n, c = shape[0], shape[1]
        return (n, c, size // max(n * c, 1))
    if preserve_shape:
        last = shape[-1] if shape else 1
        return (size // max(last, 1), last)
    n = shape[0] if shape else 1
    return (n, size // max(n, 1))


def regression_label_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The label shape MXNet infers for a regression output of ``shape``: (N,) for (N, 1)."""
    return (shape[0],) if len(shape) == 2 and shape[1] == 1 else tuple(shape)


def _check_softmax_label(ctx, data: int, label: int) -> None:
    require_float(ctx, data)
    shape = ctx.shape(data)
    if len(shape) < 1 or (ctx.attrs["multi_output"] and len(shape) < 2):
        ctx.fail(f"data of shape {shape} has too few axes")
    if ctx.attrs["normalization"] not in NORMALIZATIONS:
        ctx.fail(f"normalization={ctx.attrs['normalization']!r} is not one of "
                 f"{NORMALIZATIONS}")
    allowed = softmax_label_shapes(shape, bool(ctx.attrs["multi_output"]))
    if ctx.shape(label) != tuple(shape) and ctx.shape(label) not in allowed:
        ctx.fail(f"label must have shape {' or '.join(map(str, allowed))} (or the data's "
                 f"{tuple(shape)} for probabilities), got {ctx.shape(label)}")


def _label_like_data(ctx):
    # MXNet's output layers: a label not known yet takes the data's dtype (the type rule
    # accepts a label of any dtype)
    data = ctx.unify([0], [0])
    if data is not None and ctx.has(1) and ctx.inputs[1] is None:
        ctx.inputs[1] = data
    return [data]


def _softmax_output_infer(ctx):
    _check_softmax_label(ctx, 0, 1)
    return [ctx.type(0)]


def _softmax_output_grad(g, dys):
    return [g.emit("portable.SoftmaxOutputGrad", g.outputs[0], g.inputs[1], **g.attrs), None]


declare("SoftmaxOutput", domain="portable", inputs=("data", "label"), outputs=("output",),
        infer=_softmax_output_infer, attrs=SOFTMAX_OUTPUT_ATTRS, grad=_softmax_output_grad,
        nondiff_inputs=(1,), dtype_rule=_label_like_data,
        doc="MXNet's SoftmaxOutput: softmax forward, softmax cross-entropy gradient against "
            "the label in backward (the head gradient is ignored).")


def _softmax_output_grad_infer(ctx):
    _check_softmax_label(ctx, 0, 1)
    return [ctx.type(0)]


declare("SoftmaxOutputGrad", domain="portable", inputs=("output", "label"),
        outputs=("d_data",), infer=_softmax_output_grad_infer, attrs=SOFTMAX_OUTPUT_ATTRS,
        dtype_rule=dtypes_of("data", inputs=(0,)),
        doc="Gradient of SoftmaxOutput w.r.t. its data, from its output and the label.")


def _check_regression_label(ctx, data: int, label: int) -> None:
    require_float(ctx, data)
    shape, lshape = ctx.shape(data), ctx.shape(label)
    if not shape:
        ctx.fail("data must have a batch axis")
    if not lshape or lshape[0] != shape[0] or prod(lshape) != prod(shape):
        ctx.fail(f"label of shape {lshape} does not match data of shape {shape} (MXNet needs "
                 f"the same batch size and number of elements, e.g. "
                 f"{regression_label_shape(shape)})")


def _regression_infer(ctx):
    _check_regression_label(ctx, 0, 1)
    return [ctx.type(0)]


def _regression_grad(kind: str):
    def rule(g, dys):
        return [g.emit("portable.RegressionOutputGrad", g.outputs[0], g.inputs[1], kind=kind,
                       grad_scale=g.attrs["grad_scale"]), None]
    return rule


for _name, _kind in REGRESSION_KINDS.items():
    declare(_name, domain="portable", inputs=("data", "label"), outputs=("output",),
            infer=_regression_infer, attrs=REGRESSION_ATTRS, grad=_regression_grad(_kind),
            nondiff_inputs=(1,), dtype_rule=_label_like_data,
            doc=f"MXNet's {_name}: its prediction forward, the {_kind} regression loss's "
                f"gradient against the label in backward (the head gradient is ignored).")


def _regression_grad_infer(ctx):
    _check_regression_label(ctx, 0, 1)
    if ctx.attrs["kind"] not in REGRESSION_KINDS.values():
        ctx.fail(f"kind={ctx.attrs['kind']!r} is not one of {sorted(REGRESSION_KINDS.values())}")
    return [ctx.type(0)]


declare("RegressionOutputGrad", domain="portable", inputs=("output", "label"),
        outputs=("d_data",), infer=_regression_grad_infer,
        dtype_rule=dtypes_of("data", inputs=(0,)),
        attrs={"kind": Attr("string"), "grad_scale": Attr("float", 1.0)},
        doc="Gradient of a regression output w.r.t. its data: (out - label) (sign of it for "
            "kind 'mae') * grad_scale / (label size / batch size).")
