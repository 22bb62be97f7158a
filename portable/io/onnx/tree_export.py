"""Export of the opset-3 tree ensembles (TreeEnsembleRegressor, TreeEnsembleClassifier), which
ai.onnx.ml 5, the opset portable writes that domain at, deprecates: each becomes a
TreeEnsemble (opset 5) plus the standard ops that finish its outputs.

Stages: (1) flatten the nodes of every tree, LEAF nodes becoming TreeEnsemble leaves; a leaf
that weights several targets (every class of a classifier) cannot be one TreeEnsemble leaf, so
then each tree is written once per target, each copy's leaves holding that target's weight
(0 where it has none; AVERAGE's weights scaled by the copy count, as it divides by the trees);
(2) a tree that is a single leaf gets a root whose both branches are that leaf; (3) base values
become an Add, post-transforms a Softmax or Sigmoid after it, a classifier's label an ArgMax
and Gather (or, for onnxruntime's binary case, a threshold and the two score columns).

Where a leaf may lack a target's weight, onnxruntime adds base values, and picks a label, only
among the targets a row scored: a second TreeEnsemble counts the scoring leaves per target and
masks the rest (MIN and MAX give a leaf without the target's weight the neutral +-inf, masked
the same way). What this cannot say exactly is refused by name: SOFTMAX_ZERO after base values,
and X other than float32 (TreeEnsemble's output takes X's type, the old ops' is float32).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from portable.errors import OpError
from portable.io.onnx.steps import Rewriter, where
from portable.ir.graph import Node
from portable.ops.ml_models import (AGGREGATES, LEAF, NODE_MODES, leaf_side, tensor_or_list,
                                    tree_class_labels, tree_targets)
from portable.ops.ml_linear import POST_TRANSFORMS
from portable.ops.registry import get as get_op


def _refuse(node: Node, ctx: Rewriter, why: str) -> None:
    raise OpError(f"{where(node, ctx.opset)}: {node.op} cannot be exported as TreeEnsemble "
                  f"(ai.onnx.ml 5): {why}")


def _flatten(node: Node, attrs: dict[str, Any]) -> tuple[dict[str, Any], bool, bool]:
    """TreeEnsemble's attributes for the old ensemble, and whether every leaf holds exactly
    one weight, and a weight for every target (``dense``)."""
    trees, ids = attrs["nodes_treeids"], attrs["nodes_nodeids"]
    keys = {(t, n): i for i, (t, n) in enumerate(zip(trees, ids))}
    modes = [NODE_MODES.index(m) for m in attrs["nodes_modes"]]
    splits = tensor_or_list(attrs, "nodes_values")
    tracks = list(attrs["nodes_missing_value_tracks_true"] or [0] * len(modes))
    side, targets = leaf_side(attrs), tree_targets(attrs)
    entries: dict[int, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for t, n, c, w in zip(attrs[f"{side}_treeids"], attrs[f"{side}_nodeids"],
                          attrs[f"{side}_ids"], tensor_or_list(attrs, f"{side}_weights")):
        entries[keys[(t, n)]][int(c)] += float(w)
    leaves = [i for i, m in enumerate(modes) if m == LEAF]
    single = all(len(entries[i]) == 1 for i in leaves)
    dense = all(len(entries[i]) == targets for i in leaves)
    roots: dict[Any, int] = {}
    for i, t in enumerate(trees):
        roots.setdefault(t, i)
    copies = [None] if all(len(entries[i]) <= 1 for i in leaves) else list(range(targets))
    aggregate = attrs.get("aggregate_function", "SUM")
    scale = len(copies) if aggregate == "AVERAGE" else 1
    # a leaf without the target's weight: neutral for the aggregate (masked out afterwards
    # where no leaf scored, so the +-inf of MIN/MAX never shows)
    missing = {"MIN": np.inf, "MAX": -np.inf}.get(aggregate, 0.0)
    out: dict[str, list] = defaultdict(list)
    for tree, root in roots.items():
        members = [i for i, t in enumerate(trees) if t == tree and modes[i] != LEAF]
        for copy in copies:
            position = {i: len(out["nodes_featureids"]) + k for k, i in enumerate(members)}
            leaf_of: dict[int, int] = {}

            def child(i: int) -> tuple[int, int]:
                if modes[i] != LEAF:
                    return position[i], 0
                if i not in leaf_of:
                    weights = entries[i]
                    target = copy if copy is not None else next(iter(weights), 0)
                    leaf_of[i] = len(out["leaf_targetids"])
                    out["leaf_targetids"].append(target)
                    out["leaf_weights"].append(weights.get(target, missing) * scale)
                    out["leaf_present"].append(float(target in weights))
                return leaf_of[i], 1

            for i in members:
                out["nodes_featureids"].append(attrs["nodes_featureids"][i])
                out["nodes_modes"].append(modes[i])
                out["nodes_splits"].append(splits[i])
                out["nodes_missing_value_tracks_true"].append(tracks[i])
                for branch in ("true", "false"):
                    target_node = keys[(tree, attrs[f"nodes_{branch}nodeids"][i])]
                    index, is_leaf = child(target_node)
                    out[f"nodes_{branch}nodeids"].append(index)
                    out[f"nodes_{branch}leafs"].append(is_leaf)
            if modes[root] == LEAF:  # a one-leaf tree: a root whose both branches are it
                index, _ = child(root)
                out["tree_roots"].append(len(out["nodes_featureids"]))
                for name, value in (("nodes_featureids", 0), ("nodes_modes", 0),
                                    ("nodes_splits", 0.0), ("nodes_missing_value_tracks_true", 0),
                                    ("nodes_truenodeids", index), ("nodes_trueleafs", 1),
                                    ("nodes_falsenodeids", index), ("nodes_falseleafs", 1)):
                    out[name].append(value)
            else:
                out["tree_roots"].append(position[root])
    result = {name: list(v) for name, v in out.items()}
    present = np.asarray(result.pop("leaf_present"), np.float32)
    result["nodes_modes"] = np.asarray(result["nodes_modes"], np.uint8)
    result["nodes_splits"] = np.asarray(result["nodes_splits"], np.float32)
    result["leaf_weights"] = np.asarray(result["leaf_weights"], np.float32)
    result.update(n_targets=targets, membership_values=None, nodes_hitrates=None,
                  aggregate_function=AGGREGATES.index(attrs.get("aggregate_function", "SUM")),
                  post_transform=0)
    result["leaf_present"] = present  # (not an attribute: which leaves score their target)
    return result, single, dense


def _checked(node: Node, ctx: Rewriter) -> tuple[dict, dict, bool, bool]:
    known = ctx.type(node.inputs[0])
    if known is None or known.dtype != np.float32:
        _refuse(node, ctx, f"X is {'of unknown type' if known is None else known.dtype.name}; "
                           f"only float32 X is translated")
    attrs = get_op(node.op).resolve_attrs(node)
    flat, single, dense = _flatten(node, attrs)
    return attrs, flat, single, dense


def _scored(node: Node, ctx: Rewriter, flat: dict) -> tuple[list[Node], str]:
    """A second TreeEnsemble that counts the leaves that scored each target, and the bool
    ``count > 0``: onnxruntime adds base values, and picks labels, only where a row scored."""
    counts, scored = ctx.fresh(f"{node.name}_counts"), ctx.fresh(f"{node.name}_scored")
    attrs = {**flat, "leaf_weights": flat["leaf_present"], "aggregate_function": 1}
    return [Node("ai.onnx.ml.TreeEnsemble", (node.inputs[0],), (counts,), _attrs(attrs),
                 f"{node.name}/counts"),
            Node("Greater", (counts, ctx.constant(np.asarray(0, np.float32),
                                                  f"{node.name}_zero")), (scored,), {},
                 f"{node.name}/scored")], scored


def _attrs(flat: dict) -> dict:
    return {k: v for k, v in flat.items() if k != "leaf_present"}


def _finish_scores(node, ctx, attrs, flat, dense, scores: str, out: str,
                   transform: bool) -> list[Node]:
    """TreeEnsemble into ``scores``, then base values (where a row scored the target, as
    onnxruntime adds them) and the post-transform into ``out``."""
    name = node.name
    nodes = [Node("ai.onnx.ml.TreeEnsemble", (node.inputs[0],), (scores,), _attrs(flat), name)]
    base = tensor_or_list(attrs, "base_values")
    post = attrs["post_transform"]
    extreme = flat["aggregate_function"] >= 2  # MIN/MAX: unscored targets hold +-inf
    if base is not None and np.any(base != 0) or extreme and not dense:
        base = np.zeros(flat["n_targets"]) if base is None or not len(base) else base
        based = ctx.fresh(f"{name}_based")
        nodes.append(Node("Add", (scores, ctx.constant(base.astype(np.float32),
                                                       f"{name}_base")), (based,), {},
                          f"{name}/base"))
        scores = based
        if not dense:
            counted, scored = _scored(node, ctx, flat)
            masked = ctx.fresh(f"{name}_masked")
            nodes += counted + [Node("Where", (scored, based, ctx.constant(
                np.asarray(0, np.float32), f"{name}_unscored")), (masked,), {},
                f"{name}/unscored")]
            scores = masked
    if transform and post == "SOFTMAX_ZERO" and len(nodes) > 1:
        _refuse(node, ctx, "SOFTMAX_ZERO after base values")
    if transform and post in ("SOFTMAX", "LOGISTIC"):
        op, extra = ("Softmax", {"axis": -1}) if post == "SOFTMAX" else ("Sigmoid", {})
        nodes.append(Node(op, (scores,), (out,), extra, f"{name}/{post.lower()}"))
        return nodes
    if transform and post == "SOFTMAX_ZERO":
        nodes[0] = nodes[0].replace(attrs={**_attrs(flat), "post_transform": 3})
    nodes.append(Node("Identity", (scores,), (out,), {}, f"{name}/scores"))
    return nodes


def regressor_to_tree_ensemble(node: Node, ctx: Rewriter) -> list[Node]:
    attrs, flat, _, dense = _checked(node, ctx)
    # (onnxruntime applies no post-transform to a single target)
    transform = flat["n_targets"] > 1
    assert attrs["post_transform"] in POST_TRANSFORMS
    return _finish_scores(node, ctx, attrs, flat, dense, ctx.fresh(f"{node.name}_scores"),
                          node.outputs[0], transform)


def classifier_to_tree_ensemble(node: Node, ctx: Rewriter) -> list[Node]:
    attrs, flat, _, dense = _checked(node, ctx)
    name, labels = node.name, tree_class_labels(attrs)
    label_out = node.outputs[0]
    scores_out = node.outputs[1] if len(node.outputs) > 1 and node.outputs[1] else \
        ctx.fresh(f"{name}_probabilities")
    if set(attrs["class_ids"]) == {0} and len(labels) == 2:  # onnxruntime's binary case
        return _binary(node, ctx, attrs, {**flat, "n_targets": 1}, labels, label_out,
                       scores_out)
    raw = ctx.fresh(f"{name}_raw")
    base = tensor_or_list(attrs, "base_values")
    has_base = base is not None and len(base) > 0
    # (with base values every class is scored; the scored mask is not needed for the scores)
    nodes = _finish_scores(node, ctx, attrs, flat, True, ctx.fresh(f"{name}_scores"), raw,
                           False)
    candidates = raw
    if not dense and not has_base:  # the label is the best of the classes a row scored
        counted, scored = _scored(node, ctx, flat)
        candidates = ctx.fresh(f"{name}_candidates")
        nodes += counted + [Node("Where", (scored, raw, ctx.constant(
            np.asarray(-np.inf, np.float32), f"{name}_unscored")), (candidates,), {},
            f"{name}/candidates")]
    chosen = ctx.fresh(f"{name}_chosen")
    nodes.append(Node("ArgMax", (candidates,), (chosen,), {"axis": 1, "keepdims": 0},
                      f"{name}/argmax"))
    nodes.append(Node("Gather", (ctx.constant(labels, f"{name}_labels"), chosen),
                      (label_out,), {"axis": 0}, f"{name}/label"))
    post = attrs["post_transform"]
    if post == "SOFTMAX_ZERO":
        _refuse(node, ctx, "a SOFTMAX_ZERO classifier")
    op, extra = {"SOFTMAX": ("Softmax", {"axis": -1}), "LOGISTIC": ("Sigmoid", {})}.get(
        post, ("Identity", {}))
    nodes.append(Node(op, (raw,), (scores_out,), extra, f"{name}/probabilities"))
    return nodes


def _binary(node, ctx, attrs, flat, labels, label_out, scores_out) -> list[Node]:
    """One positive score s: labels[1] above 0.5 (weights all >= 0, columns [1 - s, s]) or
    above 0 (columns [-s, s], or their logistics)."""
    name = node.name
    if tensor_or_list(attrs, "base_values") is not None and \
            len(tensor_or_list(attrs, "base_values")):
        _refuse(node, ctx, "a binary ensemble with base values")
    s = ctx.fresh(f"{name}_score")
    nodes = [Node("ai.onnx.ml.TreeEnsemble", (node.inputs[0],), (s,), _attrs(flat), name)]
    positive_weights = bool(np.all(tensor_or_list(attrs, "class_weights") >= 0))
    threshold = 0.5 if positive_weights else 0.0
    flat_s, above = ctx.fresh(f"{name}_flat"), ctx.fresh(f"{name}_above")
    nodes.append(Node("Reshape", (s, ctx.constant(np.asarray([-1], np.int64), f"{name}_n")),
                      (flat_s,), {}, f"{name}/flat"))
    nodes.append(Node("Greater", (flat_s, ctx.constant(np.asarray(threshold, np.float32),
                                                       f"{name}_threshold")), (above,), {},
                      f"{name}/above"))
    nodes.append(Node("Where", (above, ctx.constant(labels[1:2].reshape(()), f"{name}_pos"),
                                ctx.constant(labels[0:1].reshape(()), f"{name}_neg")),
                      (label_out,), {}, f"{name}/label"))
    first = ctx.fresh(f"{name}_first")
    if positive_weights:
        nodes.append(Node("Sub", (ctx.constant(np.asarray(1, np.float32), f"{name}_one"), s),
                          (first,), {}, f"{name}/complement"))
        columns = (first, s)
    elif attrs["post_transform"] == "LOGISTIC":
        negated, second = ctx.fresh(f"{name}_negated"), ctx.fresh(f"{name}_second")
        nodes += [Node("Neg", (s,), (negated,), {}, f"{name}/neg"),
                  Node("Sigmoid", (negated,), (first,), {}, f"{name}/sigmoid_neg"),
                  Node("Sigmoid", (s,), (second,), {}, f"{name}/sigmoid")]
        columns = (first, second)
    else:
        nodes.append(Node("Neg", (s,), (first,), {}, f"{name}/neg"))
        columns = (first, s)
    nodes.append(Node("Concat", columns, (scores_out,), {"axis": 1}, f"{name}/columns"))
    return nodes
