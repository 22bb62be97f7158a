"""Loss ops: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss.

Both take scores of shape (N, C) or (N, C, D1, ...), integer labels of shape (N) or
(N, D1, ...), optional per-class weights and the attributes ``reduction`` (none, sum, mean) and
``ignore_index``. ``mean`` divides by the summed weights of the elements not ignored (the count
of them without weights), as the ONNX spec and its backend test cases do.

Their gradients with respect to the scores go through private ops whose kernels build the
one-hot difference in one pass; labels and weights get no gradient.
"""
from __future__ import annotations

from portable.ir.graph import TensorType
from portable.ops.registry import Attr, declare
from portable.ops.rules import dtypes_of, require_float

REDUCTIONS = ("none", "sum", "mean")
_ATTRS = {"reduction": Attr("string", "mean"), "ignore_index": Attr("int", None)}


def _check_operands(ctx, scores: int, labels: int, weights: int) -> None:
    """Type checks shared by the losses and their gradient ops (inputs by position)."""
    require_float(ctx, scores)
    shape = ctx.shape(scores)
    if len(shape) < 2:
        ctx.fail(f"scores must have shape (N, C, D1, ...), got {shape}")
    if ctx.dtype(labels).kind not in "iu":
        ctx.fail(f"labels must be int32 or int64, got {ctx.dtype(labels).name}")
    expected = shape[:1] + shape[2:]
    if ctx.shape(labels) != expected:
        ctx.fail(f"labels must have shape {expected} for scores of shape {shape}, "
                 f"got {ctx.shape(labels)}")
    if ctx.has(weights):
        if ctx.shape(weights) != shape[1:2]:
            ctx.fail(f"weights must have shape ({shape[1]},), got {ctx.shape(weights)}")
        if ctx.dtype(weights) != ctx.dtype(scores):
            ctx.fail(f"weights must have the scores' dtype {ctx.dtype(scores).name}")
    if ctx.attrs["reduction"] not in REDUCTIONS:
        ctx.fail(f"reduction={ctx.attrs['reduction']!r} is not one of {REDUCTIONS}")


def _loss_type(ctx, scores: int, labels: int) -> TensorType:
    shape = ctx.shape(labels) if ctx.attrs["reduction"] == "none" else ()
    return TensorType(shape, ctx.dtype(scores))


def _loss_attrs(g) -> dict:
    """The attributes to pass on to a gradient op (an absent ignore_index stays absent)."""
    return {k: v for k, v in g.attrs.items() if v is not None}


# -- SoftmaxCrossEntropyLoss -------------------------------------------------------------------


def _sce_infer(ctx):
    _check_operands(ctx, 0, 1, 2)
    return [_loss_type(ctx, 0, 1), ctx.type(0)]


def _sce_grad(g, dys):
    scores, labels = g.inputs[:2]
    weights = g.inputs[2] if len(g.inputs) > 2 else None
    d_log_prob = dys[1] if len(dys) > 1 else None
    return [g.emit("portable.SoftmaxCrossEntropyLossGrad", dys[0], scores, labels, weights,
                   d_log_prob, **_loss_attrs(g)), None, None]


declare("SoftmaxCrossEntropyLoss", inputs=("scores", "labels", "weights?"),
        outputs=("output", "log_prob?"), infer=_sce_infer, attrs=_ATTRS, onnx_since=13,
        grad=_sce_grad, nondiff_inputs=(1, 2))


def _sce_grad_infer(ctx):
    _check_operands(ctx, 1, 2, 3)
    if ctx.type(0) != _loss_type(ctx, 1, 2):
        ctx.fail(f"d_output must have the loss type {_loss_type(ctx, 1, 2)!r}")
    if ctx.has(4) and ctx.type(4) != ctx.type(1):
        ctx.fail("d_log_prob must have the scores' type")
    return [ctx.type(1)]


declare("SoftmaxCrossEntropyLossGrad", domain="portable",
        inputs=("d_output", "scores", "labels", "weights?", "d_log_prob?"),
        outputs=("d_scores",), infer=_sce_grad_infer, attrs=_ATTRS,
        dtype_rule=dtypes_of("data", inputs=(0, 1, 3, 4)),
        doc="Gradient of SoftmaxCrossEntropyLoss w.r.t. scores, from the loss and the "
            "log_prob output gradients.")

# -- NegativeLogLikelihoodLoss -----------------------------------------------------------------


def _nll_infer(ctx):
    _check_operands(ctx, 0, 1, 2)
    return [_loss_type(ctx, 0, 1)]


def _nll_grad(g, dys):
    x, target = g.inputs[:2]
    weight = g.inputs[2] if len(g.inputs) > 2 else None
    return [g.emit("portable.NegativeLogLikelihoodLossGrad", dys[0], x, target, weight,
                   **_loss_attrs(g)), None, None]


declare("NegativeLogLikelihoodLoss", inputs=("input", "target", "weight?"), outputs=("loss",),
        infer=_nll_infer, attrs=_ATTRS, onnx_since=22, grad=_nll_grad, nondiff_inputs=(1, 2))


def _nll_grad_infer(ctx):
    _check_operands(ctx, 1, 2, 3)
    if ctx.type(0) != _loss_type(ctx, 1, 2):
        ctx.fail(f"d_loss must have the loss type {_loss_type(ctx, 1, 2)!r}")
    return [ctx.type(1)]


declare("NegativeLogLikelihoodLossGrad", domain="portable",
        inputs=("d_loss", "input", "target", "weight?"), outputs=("d_input",),
        infer=_nll_grad_infer, attrs=_ATTRS, ignored_inputs=(1,),
        dtype_rule=dtypes_of("data", inputs=(0, 1, 3)),
        doc="Gradient of NegativeLogLikelihoodLoss w.r.t. input (input gives only the shape).")
