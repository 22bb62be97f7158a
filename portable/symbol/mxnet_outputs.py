"""MXNet 1.x's loss-output layers in the symbolic front end: ``SoftmaxOutput``,
``LinearRegressionOutput``, ``LogisticRegressionOutput`` and ``MAERegressionOutput``.

As in MXNet, a label left out becomes a variable named ``<name>_label`` (``softmax_label`` for
``name='softmax'``) whose shape follows from the data's, so binding needs only the data shape.

Example:
    >>> import portable as mx
    >>> net = mx.sym.SoftmaxOutput(data=mx.sym.var("data"), name="softmax")
    >>> net.list_arguments()
    ['data', 'softmax_label']
    >>> net.infer_shape(data=(4, 10))[0]
    [(4, 10), (4,)]
"""
from __future__ import annotations

from typing import Any

from portable.errors import OpError
from portable.symbol.symbol import SymNode, Symbol, apply_op, auto_name


def _flags(attrs: dict[str, Any]) -> dict[str, Any]:
    """MXNet's boolean parameters as the ints the op declares."""
    return {k: int(v) if isinstance(v, bool) else v for k, v in attrs.items()}


def _label(name: str, rule: str, data: Symbol, **params: Any) -> Symbol:
    return Symbol([(SymNode(None, f"{name}_label", shape_hint=(rule, data._entries[0],
                                                                 params)), 0)])


def _output_layer(op: str, rule: str, data: Symbol | None, label: Symbol | None,
                  name: str | None, attrs: dict[str, Any]) -> Symbol:
    if data is None:
        raise OpError(f"{op}: data is required")
    attrs.pop("attr", None)  # MXNet's per-symbol user attributes (not kept)
    name = name or auto_name(op)
    attrs = _flags(attrs)
    params = {"multi_output": attrs.get("multi_output", 0)}
    if label is None:
        label = _label(name, rule, data, **params)
    else:
        # A label variable given without a shape takes it from the data, as MXNet infers it
        # backwards through the op (``infer_shape(data=...)`` alone suffices).
        node, _ = label._entries[0]
        if len(label) == 1 and node.is_variable and node.shape is None \
                and node.shape_hint is None:
            node.shape_hint = (rule, data._entries[0], params)
    return apply_op(f"portable.{op}", [data, label], name=name, **attrs)


def SoftmaxOutput(data: Symbol | None = None, label: Symbol | None = None,  # noqa: N802
                  name: str | None = None, **attrs: Any) -> Symbol:
    """Softmax forward; in backward the cross-entropy gradient against ``label``.

    Args:
        data: the scores (N, C) (or (N, C, D...) with ``multi_output=True``).
        label: class indices (N,); None creates the variable ``<name>_label``.
        name: the node's name.
        **attrs: grad_scale, ignore_label, multi_output, use_ignore, preserve_shape,
            normalization ('null', 'batch', 'valid'), out_grad, smooth_alpha.

    Returns:
        The probabilities.
    """
    return _output_layer("SoftmaxOutput", "softmax_label", data, label, name, attrs)


def LinearRegressionOutput(data: Symbol | None = None,  # noqa: N802
                           label: Symbol | None = None, name: str | None = None,
                           **attrs: Any) -> Symbol:
    """Identity forward; in backward ``(out - label) * grad_scale / num_output``."""
    return _output_layer("LinearRegressionOutput", "regression_label", data, label, name, attrs)


def LogisticRegressionOutput(data: Symbol | None = None,  # noqa: N802
                             label: Symbol | None = None, name: str | None = None,
                             **attrs: Any) -> Symbol:
    """Sigmoid forward; in backward ``(out - label) * grad_scale / num_output``."""
    return _output_layer("LogisticRegressionOutput", "regression_label", data, label, name,
                         attrs)


def MAERegressionOutput(data: Symbol | None = None,  # noqa: N802
                        label: Symbol | None = None, name: str | None = None,
                        **attrs: Any) -> Symbol:
    """Identity forward; in backward ``sign(out - label) * grad_scale / num_output``."""
    return _output_layer("MAERegressionOutput", "regression_label", data, label, name, attrs)


FUNCTIONS = {"SoftmaxOutput": SoftmaxOutput, "LinearRegressionOutput": LinearRegressionOutput,
             "LogisticRegressionOutput": LogisticRegressionOutput,
             "MAERegressionOutput": MAERegressionOutput}
