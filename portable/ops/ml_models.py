"""Classical machine-learning models of the ``ai.onnx.ml`` domain as scikit-learn's converters
write them: SVMRegressor, SVMClassifier, and the opset-3 tree ensembles TreeEnsembleRegressor
and TreeEnsembleClassifier (deprecated by TreeEnsemble in ai.onnx.ml 5, but what converters
still write, and what onnxruntime runs).

The old tree ops stay ops of their own rather than being rewritten into TreeEnsemble on
import: a leaf of theirs may hold a weight for several targets (every class of a classifier)
and base values are added before the post-transform, which TreeEnsemble cannot say without
duplicating each tree once per target. Export, whose ai.onnx.ml opset (5) deprecates them,
does that translation (``portable/io/onnx/tree_export.py``).

Semantics are onnxruntime's (labels from votes or from the largest score, a second score
column for one-score binary problems); PROBIT post-transforms are refused. Scores are float32
whatever X's type. None of these ops is differentiable.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.ir.graph import TensorType
from portable.ops.ml_linear import (FLOAT, ML, batch_of, class_labels, label_and_scores_dtypes,
                                    label_dtype, require_numeric, require_post_transform)
from portable.ops.registry import Attr, InferContext, declare
from portable.ops.rules import dtypes_of

KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")

# -- SVMRegressor and SVMClassifier ------------------------------------------------------------


def kernel_params(attrs: dict[str, Any]) -> tuple[float, float, float]:
    """(gamma, coef0, degree) of the SVM kernel (zeros when kernel_params is absent)."""
    params = list(attrs["kernel_params"] or ())
    return tuple(float(v) for v in (params + [0.0, 0.0, 0.0])[:3])  # type: ignore[return-value]


def _require_kernel(ctx: Any) -> None:
    if ctx.attrs["kernel_type"] not in KERNELS:
        ctx.fail(f"kernel_type must be one of {KERNELS}, got {ctx.attrs['kernel_type']!r}")


def _svm_regressor_infer(ctx: InferContext) -> list[TensorType]:
    require_numeric(ctx)
    _require_kernel(ctx)
    if ctx.attrs["post_transform"] != "NONE":
        ctx.fail(f"post_transform {ctx.attrs['post_transform']!r} is not supported (NONE only)")
    rows, features = batch_of(ctx)
    supports, coefficients = ctx.attrs["n_supports"], len(ctx.attrs["coefficients"])
    if supports > 0:
        if len(ctx.attrs["support_vectors"]) != supports * features:
            ctx.fail(f"support_vectors has {len(ctx.attrs['support_vectors'])} values; "
                     f"n_supports x features = {supports} x {features} expected")
        if coefficients != supports:
            ctx.fail(f"coefficients has {coefficients} values, one per support ({supports}) "
                     f"expected")
    elif coefficients != features:
        ctx.fail(f"coefficients has {coefficients} values, one per feature ({features}) "
                 f"expected (a linear SVM: n_supports is 0)")
    if not ctx.attrs["rho"]:
        ctx.fail("rho (the bias) must be given")
    return [TensorType((rows, 1), FLOAT)]


declare("SVMRegressor", domain=ML, inputs=("X",), outputs=("Y",), infer=_svm_regressor_infer,
        attrs={"coefficients": Attr("floats", ()), "kernel_params": Attr("floats", ()),
               "kernel_type": Attr("string", "LINEAR"), "n_supports": Attr("int", 0),
               "one_class": Attr("int", 0), "post_transform": Attr("string", "NONE"),
               "rho": Attr("floats", ()), "support_vectors": Attr("floats", ())},
        onnx_since=1, dtype_rule=dtypes_of(FLOAT, inputs=()),
        doc="sum_j coefficients[j] K(x, support_j) + rho (or coefficients . x + rho without "
            "supports); one_class gives +1 / -1.")


def svm_layout(attrs: dict[str, Any]) -> dict[str, Any]:
    """What the SVMClassifier's attributes describe: the class count, whether it is a
    support-vector model (else linear), its support count, whether it has Platt
    probabilities, and how many score columns it writes (onnxruntime's)."""
    classes = max(len(class_labels(attrs)), 1)
    supports = int(sum(attrs["vectors_per_class"] or ()))
    proba = bool(attrs["prob_a"])
    pairs = classes * (classes - 1) // 2
    columns = classes
    if supports and not proba:
        columns = pairs if classes > 2 else 2
    return {"classes": classes, "supports": supports, "proba": proba, "pairs": pairs,
            "columns": columns}


def _svm_classifier_infer(ctx: InferContext) -> list[TensorType]:
    require_numeric(ctx)
    _require_kernel(ctx)
    require_post_transform(ctx)
    rows, features = batch_of(ctx)
    a = ctx.attrs
    if bool(a["classlabels_ints"]) == bool(a["classlabels_strings"]):
        ctx.fail("exactly one of classlabels_ints and classlabels_strings must be given")
    layout = svm_layout(a)
    classes, supports = layout["classes"], layout["supports"]
    if len(a["prob_a"]) != len(a["prob_b"]):
        ctx.fail(f"prob_a has {len(a['prob_a'])} values, prob_b {len(a['prob_b'])}")
    if supports:
        if len(a["vectors_per_class"]) != classes:
            ctx.fail(f"vectors_per_class has {len(a['vectors_per_class'])} values for "
                     f"{classes} classes")
        if len(a["support_vectors"]) != supports * features:
            ctx.fail(f"support_vectors has {len(a['support_vectors'])} values; "
                     f"{supports} supports x {features} features expected")
        if len(a["coefficients"]) != (classes - 1) * supports:
            ctx.fail(f"coefficients has {len(a['coefficients'])} values; (classes - 1) x "
                     f"supports = {classes - 1} x {supports} expected")
        if len(a["rho"]) < layout["pairs"]:
            ctx.fail(f"rho has {len(a['rho'])} values; one per pair of classes "
                     f"({layout['pairs']}) expected")
        if layout["proba"] and len(a["prob_a"]) < layout["pairs"]:
            ctx.fail(f"prob_a has {len(a['prob_a'])} values; one per pair of classes "
                     f"({layout['pairs']}) expected")
    else:
        if len(a["coefficients"]) != classes * features:
            ctx.fail(f"coefficients has {len(a['coefficients'])} values; classes x features "
                     f"= {classes} x {features} expected (a linear SVM)")
        if not a["rho"]:
            ctx.fail("rho (the bias) must be given")
    return [TensorType((rows,), label_dtype(a)), TensorType((rows, layout["columns"]), FLOAT)]


declare("SVMClassifier", domain=ML, inputs=("X",), outputs=("Y", "Z"),
        infer=_svm_classifier_infer,
        attrs={"classlabels_ints": Attr("ints", ()), "classlabels_strings": Attr("strings", ()),
               "coefficients": Attr("floats", ()), "kernel_params": Attr("floats", ()),
               "kernel_type": Attr("string", "LINEAR"), "post_transform": Attr("string", "NONE"),
               "prob_a": Attr("floats", ()), "prob_b": Attr("floats", ()),
               "rho": Attr("floats", ()), "support_vectors": Attr("floats", ()),
               "vectors_per_class": Attr("ints", ())},
        onnx_since=1, dtype_rule=label_and_scores_dtypes,
        doc="One-vs-one support-vector classifier (libsvm's layout): the label by votes, the "
            "pairwise decision values (or Platt probabilities) as scores.")

# -- TreeEnsembleRegressor and TreeEnsembleClassifier ------------------------------------------

NODE_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ",
              "LEAF")
LEAF = 6
AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")


def tensor_or_list(attrs: dict[str, Any], name: str) -> np.ndarray | None:
    """``<name>_as_tensor`` (opset 3, double precision) or ``<name>`` as float64."""
    tensor = attrs.get(f"{name}_as_tensor")
    if tensor is not None:
        return np.asarray(tensor, np.float64).reshape(-1)
    value = attrs.get(name)
    return None if value is None else np.asarray(value, np.float64).reshape(-1)


def leaf_side(attrs: dict[str, Any]) -> str:
    """``target`` (regressor) or ``class`` (classifier): the prefix of the leaf weights."""
    return "class" if "class_ids" in attrs else "target"


def check_old_tree_ensemble(ctx: Any, features: int | None) -> None:
    """Refuse an inconsistent opset-3 ensemble, naming what is wrong."""
    a = ctx.attrs
    count = len(a["nodes_nodeids"])
    for name in ("nodes_treeids", "nodes_featureids", "nodes_modes", "nodes_truenodeids",
                 "nodes_falsenodeids"):
        if len(a[name]) != count:
            ctx.fail(f"{name} has {len(a[name])} entries, nodes_nodeids {count}")
    values = tensor_or_list(a, "nodes_values")
    if values is None or len(values) != count:
        ctx.fail(f"nodes_values (or nodes_values_as_tensor) must give {count} thresholds")
    if a["nodes_missing_value_tracks_true"] and \
            len(a["nodes_missing_value_tracks_true"]) != count:
        ctx.fail(f"nodes_missing_value_tracks_true has "
                 f"{len(a['nodes_missing_value_tracks_true'])} entries, nodes {count}")
    bad = sorted({m for m in a["nodes_modes"] if m not in NODE_MODES})
    if bad:
        ctx.fail(f"nodes_modes {bad} are not among {NODE_MODES} (BRANCH_MEMBER is "
                 f"TreeEnsemble's)")
    keys = set(zip(a["nodes_treeids"], a["nodes_nodeids"]))
    if len(keys) != count:
        ctx.fail("two nodes share a (tree id, node id)")
    for i, mode in enumerate(a["nodes_modes"]):
        if mode == "LEAF":
            continue
        tree = a["nodes_treeids"][i]
        for side in ("true", "false"):
            if (tree, a[f"nodes_{side}nodeids"][i]) not in keys:
                ctx.fail(f"node {a['nodes_nodeids'][i]} of tree {tree}: its {side} child "
                         f"{a[f'nodes_{side}nodeids'][i]} is not a node of that tree")
        if features is not None and not 0 <= a["nodes_featureids"][i] < features:
            ctx.fail(f"node {a['nodes_nodeids'][i]} of tree {tree} reads feature "
                     f"{a['nodes_featureids'][i]}; X has {features}")
    side = leaf_side(a)
    weights = tensor_or_list(a, f"{side}_weights")
    leaves = len(a[f"{side}_ids"])
    for name in (f"{side}_nodeids", f"{side}_treeids"):
        if len(a[name]) != leaves:
            ctx.fail(f"{name} has {len(a[name])} entries, {side}_ids {leaves}")
    if weights is None or len(weights) != leaves:
        ctx.fail(f"{side}_weights must give {leaves} weights")
    for tree, node in zip(a[f"{side}_treeids"], a[f"{side}_nodeids"]):
        if (tree, node) not in keys:
            ctx.fail(f"a {side} weight names node {node} of tree {tree}, which does not exist")
    if a.get("aggregate_function", "SUM") not in AGGREGATES:
        ctx.fail(f"aggregate_function must be one of {AGGREGATES}")
    require_post_transform(ctx)


def tree_targets(attrs: dict[str, Any]) -> int:
    """Score columns: n_targets for a regressor, the class count for a classifier."""
    if leaf_side(attrs) == "target":
        return int(attrs["n_targets"])
    return len(tree_class_labels(attrs))


def _tree_input(ctx: InferContext) -> tuple[int, int]:
    require_numeric(ctx)
    return batch_of(ctx)


def _tree_regressor_infer(ctx: InferContext) -> list[TensorType]:
    rows, features = _tree_input(ctx)
    check_old_tree_ensemble(ctx, features)
    targets = tree_targets(ctx.attrs)
    ids = ctx.attrs["target_ids"]
    if targets < 1 or ids and not 0 <= min(ids) <= max(ids) < targets:
        ctx.fail(f"target_ids must be in 0..{targets - 1} (n_targets {targets})")
    base = tensor_or_list(ctx.attrs, "base_values")
    if base is not None and len(base) not in (0, targets):
        ctx.fail(f"base_values has {len(base)} values for {targets} targets")
    return [TensorType((rows, targets), FLOAT)]


_NODE_ATTRS = {
    "nodes_falsenodeids": Attr("ints", ()), "nodes_featureids": Attr("ints", ()),
    "nodes_hitrates": Attr("floats", ()), "nodes_hitrates_as_tensor": Attr("tensor", None),
    "nodes_missing_value_tracks_true": Attr("ints", ()), "nodes_modes": Attr("strings", ()),
    "nodes_nodeids": Attr("ints", ()), "nodes_treeids": Attr("ints", ()),
    "nodes_truenodeids": Attr("ints", ()), "nodes_values": Attr("floats", ()),
    "nodes_values_as_tensor": Attr("tensor", None), "post_transform": Attr("string", "NONE"),
    "base_values": Attr("floats", ()), "base_values_as_tensor": Attr("tensor", None),
}

declare("TreeEnsembleRegressor", domain=ML, inputs=("X",), outputs=("Y",),
        infer=_tree_regressor_infer,
        attrs={**_NODE_ATTRS, "aggregate_function": Attr("string", "SUM"),
               "n_targets": Attr("int", 1), "target_ids": Attr("ints", ()),
               "target_nodeids": Attr("ints", ()), "target_treeids": Attr("ints", ()),
               "target_weights": Attr("floats", ()),
               "target_weights_as_tensor": Attr("tensor", None)},
        onnx_since=3, dtype_rule=dtypes_of(FLOAT, inputs=()),
        doc="Tree ensemble regressor (nodes with a LEAF mode, leaf weights per target).")


def _tree_classifier_infer(ctx: InferContext) -> list[TensorType]:
    rows, features = _tree_input(ctx)
    a = ctx.attrs
    if bool(a["classlabels_int64s"]) == bool(a["classlabels_strings"]):
        ctx.fail("exactly one of classlabels_int64s and classlabels_strings must be given")
    check_old_tree_ensemble(ctx, features)
    classes = tree_targets(a)
    ids = a["class_ids"]
    if ids and not 0 <= min(ids) <= max(ids) < classes:
        ctx.fail(f"class_ids must be in 0..{classes - 1} ({classes} class labels)")
    base = tensor_or_list(a, "base_values")
    if base is not None and len(base) not in (0, classes):
        ctx.fail(f"base_values has {len(base)} values for {classes} classes")
    if classes == 2 and len(set(ids)) == 1 and (ids[0] != 0 or base is not None and len(base)):
        ctx.fail("a two-class ensemble whose leaves score one class only (onnxruntime's "
                 "binary case) must score class 0 (the positive score) without base_values")
    return [TensorType((rows,), label_dtype(_labels_as_linear(a))),
            TensorType((rows, classes), FLOAT)]


def _labels_as_linear(attrs: dict[str, Any]) -> dict[str, Any]:
    """The tree classifier's labels under LinearClassifier's attribute names."""
    return {"classlabels_ints": attrs.get("classlabels_int64s"),
            "classlabels_strings": attrs.get("classlabels_strings")}


def binary_case(attrs: dict[str, Any]) -> bool:
    """onnxruntime's binary case: two classes, and every leaf weight is for class 0, where it
    stands for the positive class's score (scikit-learn's binary trees)."""
    return tree_targets(attrs) == 2 and set(attrs["class_ids"]) == {0}


def tree_class_labels(attrs: dict[str, Any]) -> np.ndarray:
    return class_labels(_labels_as_linear(attrs))


def _tree_classifier_dtype(ctx: Any) -> list[np.dtype]:
    return [label_dtype(_labels_as_linear(ctx.attrs)), FLOAT][:len(ctx.outputs)]


declare("TreeEnsembleClassifier", domain=ML, inputs=("X",), outputs=("Y", "Z"),
        infer=_tree_classifier_infer,
        attrs={**_NODE_ATTRS, "class_ids": Attr("ints", ()), "class_nodeids": Attr("ints", ()),
               "class_treeids": Attr("ints", ()), "class_weights": Attr("floats", ()),
               "class_weights_as_tensor": Attr("tensor", None),
               "classlabels_int64s": Attr("ints", ()), "classlabels_strings": Attr("strings", ())},
        onnx_since=3, dtype_rule=_tree_classifier_dtype,
        doc="Tree ensemble classifier: class scores summed over trees (plus base values, "
            "then post_transform); the label of the largest score.")
