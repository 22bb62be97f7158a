"""NumPy kernels: SVMRegressor, SVMClassifier, TreeEnsembleRegressor and
TreeEnsembleClassifier (``portable/ops/ml_models.py`` declares them), with onnxruntime's
semantics.

SVMs evaluate every row at once: one kernel matrix (rows x supports), the one-vs-one decision
values as matrix products over each class's block of supports, votes, and Platt-scaled pairwise
probabilities coupled into class probabilities by libsvm's iterative method (onnxruntime's
``multiclass_probability``), iterated for all rows together until each row converges.

The trees walk all rows through all trees together: a (rows, trees) array of node indices
moves one level per step until every entry sits on a LEAF node; the leaves' weights per target
are then gathered from a dense (nodes, targets) table.
"""
from __future__ import annotations

import numpy as np

from portable.backend import kernel_table
from portable.ops.ml_linear import class_labels
from portable.ops.ml_models import (AGGREGATES, LEAF, NODE_MODES, binary_case, kernel_params,
                                    leaf_side, svm_layout, tensor_or_list, tree_class_labels,
                                    tree_targets)

from backends.xp.kernels.ml_linear import rows_of, transform_scores, two_columns, write_labels

kernels, kernel = kernel_table()

# -- SVMs --------------------------------------------------------------------------------------


def kernel_matrix(xp, x, vectors, kind: str, attrs):
    """K(x_n, v_j) for every row n and vector j."""
    gamma, coef0, degree = kernel_params(attrs)
    if kind == "RBF":
        distance = (x * x).sum(axis=1)[:, None] - 2 * (x @ vectors.T) + \
            (vectors * vectors).sum(axis=1)[None, :]
        return xp.exp(-gamma * xp.maximum(distance, 0))
    dots = x @ vectors.T
    if kind == "POLY":
        return (gamma * dots + coef0) ** int(degree)
    if kind == "SIGMOID":
        return xp.tanh(gamma * dots + coef0)
    return dots


@kernel("ai.onnx.ml.SVMRegressor")
def svm_regressor(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    x = rows_of(xp, inputs[0]).astype(np.float64)
    coefficients = xp.asarray(np.asarray(attrs["coefficients"], np.float64))
    if attrs["n_supports"] > 0:
        vectors = xp.asarray(np.asarray(attrs["support_vectors"], np.float64).reshape(
            attrs["n_supports"], -1))
        score = kernel_matrix(xp, x, vectors, attrs["kernel_type"], attrs) @ coefficients
    else:
        score = x @ coefficients
    score = score + attrs["rho"][0]
    if attrs["one_class"]:
        score = xp.where(score > 0, 1.0, -1.0)
    outputs[0][...] = score.reshape(-1, 1)


def _couple(xp, pairwise, classes: int):
    """libsvm's (and onnxruntime's) multiclass probabilities from pairwise ones: the p that
    minimises sum_ij (r_ji p_i - r_ij p_j)^2, by at most 100 coordinate steps per row."""
    rows = pairwise.shape[0]
    r = pairwise  # (rows, classes, classes), r[:, i, j] = P(i | i or j)
    q = xp.zeros((rows, classes, classes))
    for i in range(classes):
        for j in range(classes):
            if j != i:
                q[:, i, i] += r[:, j, i] ** 2
                q[:, i, j] = -r[:, j, i] * r[:, i, j]
    p = xp.full((rows, classes), 1.0 / classes)
    active = xp.ones(rows, bool)
    eps = 0.005 / classes
    for _ in range(100):
        qp = xp.einsum("nij,nj->ni", q, p)
        pqp = (p * qp).sum(axis=1)
        active = active & (xp.abs(qp - pqp[:, None]).max(axis=1) >= eps)
        if not bool(active.any()):
            break
        for t in range(classes):
            diff = xp.where(active, (-qp[:, t] + pqp) / q[:, t, t], 0.0)
            p[:, t] += diff
            pqp = (pqp + diff * (diff * q[:, t, t] + 2 * qp[:, t])) / (1 + diff) ** 2
            qp = (qp + diff[:, None] * q[:, t, :]) / (1 + diff[:, None])
            p = p / (1 + diff[:, None])
    return p


def _svc_scores(xp, x, attrs, layout):
    """(pairwise decision values (rows, pairs), votes (rows, classes)) of a one-vs-one SVC."""
    classes, supports = layout["classes"], layout["supports"]
    vectors = xp.asarray(np.asarray(attrs["support_vectors"], np.float64).reshape(supports, -1))
    k = kernel_matrix(xp, x, vectors, attrs["kernel_type"], attrs)
    coefficients = xp.asarray(np.asarray(attrs["coefficients"], np.float64).reshape(
        classes - 1, supports))
    counts = list(attrs["vectors_per_class"])
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int)
    rows = x.shape[0]
    decisions = xp.zeros((rows, layout["pairs"]))
    votes = xp.zeros((rows, classes), np.int64)
    pair = 0
    for i in range(classes):
        block_i = slice(starts[i], starts[i] + counts[i])
        for j in range(i + 1, classes):
            block_j = slice(starts[j], starts[j] + counts[j])
            s = k[:, block_i] @ coefficients[j - 1, block_i] + \
                k[:, block_j] @ coefficients[i, block_j] + attrs["rho"][pair]
            decisions[:, pair] = s
            votes[:, i] += s > 0
            votes[:, j] += s <= 0
            pair += 1
    return decisions, votes


def _platt(xp, decisions, attrs, classes: int):
    """Pairwise Platt probabilities, clipped to [1e-7, 1 - 1e-7], coupled into classes."""
    rows = decisions.shape[0]
    r = xp.zeros((rows, classes, classes))
    pair = 0
    for i in range(classes):
        for j in range(i + 1, classes):
            value = decisions[:, pair] * attrs["prob_a"][pair] + attrs["prob_b"][pair]
            probability = 1 / (1 + xp.exp(value))  # 1 - logistic(value)
            probability = xp.clip(probability, 1e-7, 1 - 1e-7)
            r[:, i, j], r[:, j, i] = probability, 1 - probability
            pair += 1
    return _couple(xp, r, classes)


@kernel("ai.onnx.ml.SVMClassifier")
def svm_classifier(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    x = rows_of(xp, inputs[0]).astype(np.float64)
    layout = svm_layout(attrs)
    labels, classes = class_labels(attrs), layout["classes"]
    post = attrs["post_transform"]
    all_positive = min(attrs["coefficients"]) >= 0
    if layout["supports"]:
        decisions, votes = _svc_scores(xp, x, attrs, layout)
        chosen = xp.argmax(votes, axis=1)  # (the first class of the most votes)
        best = xp.zeros(x.shape[0])  # (onnxruntime compares 0 with its thresholds here)
        scores = _platt(xp, decisions, attrs, classes) if layout["proba"] else decisions
    else:
        weights = xp.asarray(np.asarray(attrs["coefficients"], np.float64).reshape(classes, -1))
        scores = x @ weights.T + attrs["rho"][0]
        chosen = xp.argmax(scores, axis=1)
        best = scores.max(axis=1)
    if layout["pairs"] == 1:  # two classes: onnxruntime's ChooseClass
        if layout["proba"]:
            index = chosen
        elif all_positive:
            index = xp.where(best >= 0.5, 1, chosen)
        else:
            index = xp.where(best > 0, 1, chosen)
    else:
        index = chosen
    write_labels(xp, outputs[0], labels, index)
    if scores.shape[1] == 1:  # one decision value: a second column, as onnxruntime writes it
        kind = {"NONE": "negated", "LOGISTIC": "logistic"}.get(post, "complement")
        scores = two_columns(xp, scores[:, 0], kind)
    else:
        scores = transform_scores(xp, scores, post)
    if len(outputs) > 1 and outputs[1] is not None:
        outputs[1][...] = scores


# -- tree ensembles (opset 3) ------------------------------------------------------------------


def _compare(xp, mode, value, threshold):
    """Whether ``value`` takes the true branch of a node of ``mode`` (NaN compares false)."""
    return xp.where(mode == 0, value <= threshold, xp.where(
        mode == 1, value < threshold, xp.where(mode == 2, value >= threshold, xp.where(
            mode == 3, value > threshold, xp.where(mode == 4, value == threshold,
                                                   value != threshold)))))


def tree_tables(attrs):
    """Flat node arrays with children as positions, the roots (each tree's first node, as
    onnxruntime takes them), and the dense (nodes, targets) leaf weights and their mask."""
    keys = {(t, n): i for i, (t, n) in enumerate(zip(attrs["nodes_treeids"],
                                                     attrs["nodes_nodeids"]))}
    modes = np.asarray([NODE_MODES.index(m) for m in attrs["nodes_modes"]], np.int64)
    leaf = modes == LEAF
    trees = attrs["nodes_treeids"]
    children = {}
    for side in ("true", "false"):
        ids = attrs[f"nodes_{side}nodeids"]
        children[side] = np.asarray([i if leaf[i] else keys[(trees[i], ids[i])]
                                     for i in range(len(modes))], np.int64)
    roots, seen = [], set()
    for i, tree in enumerate(trees):
        if tree not in seen:
            seen.add(tree)
            roots.append(i)
    side = leaf_side(attrs)
    targets = tree_targets(attrs)
    weights = np.zeros((len(modes), targets))
    scored = np.zeros((len(modes), targets), bool)
    positions = [keys[(t, n)] for t, n in zip(attrs[f"{side}_treeids"],
                                                attrs[f"{side}_nodeids"])]
    values = tensor_or_list(attrs, f"{side}_weights")
    np.add.at(weights, (positions, list(attrs[f"{side}_ids"])), values)
    scored[positions, list(attrs[f"{side}_ids"])] = True
    tracks = np.zeros(len(modes), bool) if not attrs["nodes_missing_value_tracks_true"] \
        else np.asarray(attrs["nodes_missing_value_tracks_true"]) != 0
    return modes, children, np.asarray(roots, np.int64), weights, scored, tracks


def tree_scores(xp, x, attrs):
    """(scores before base values and post-transform, whether each was scored), per row and
    target, aggregated over the trees as ``aggregate_function`` says."""
    modes, children, roots, weights, scored, tracks = tree_tables(attrs)
    data = rows_of(xp, x).astype(np.float64) if x.dtype != np.float64 else \
        (x.reshape(1, -1) if x.ndim == 1 else x)
    thresholds = xp.asarray(tensor_or_list(attrs, "nodes_values"))
    if x.dtype == np.float32:  # (onnxruntime compares float X with float thresholds)
        thresholds = thresholds.astype(np.float32).astype(np.float64)
    features = xp.asarray(np.asarray(attrs["nodes_featureids"], np.int64))
    modes_x, tracks_x = xp.asarray(modes), xp.asarray(tracks)
    true_x, false_x = xp.asarray(children["true"]), xp.asarray(children["false"])
    rows = data.shape[0]
    node = xp.broadcast_to(xp.asarray(roots), (rows, len(roots))).copy()
    row_index = xp.arange(rows)[:, None]
    for _ in range(len(modes) + 1):  # a walk is never longer than the node count
        walking = modes_x[node] != LEAF
        if not bool(walking.any()):
            break
        value = data[row_index, features[node]]
        goes = _compare(xp, modes_x[node], value, thresholds[node])
        goes = goes | (tracks_x[node] & xp.isnan(value))
        node = xp.where(walking, xp.where(goes, true_x[node], false_x[node]), node)
    else:
        raise ValueError("tree ensemble: a tree walk does not end in a LEAF node (a cycle)")
    aggregate = attrs.get("aggregate_function", "SUM")
    leaf_weights, leaf_scored = xp.asarray(weights)[node], xp.asarray(scored)[node]
    hit = leaf_scored.any(axis=1)
    if aggregate in ("SUM", "AVERAGE"):
        total = leaf_weights.sum(axis=1)
        if aggregate == "AVERAGE":
            total = total / len(roots)
    else:
        pick = xp.min if aggregate == "MIN" else xp.max
        fill = np.inf if aggregate == "MIN" else -np.inf
        total = pick(xp.where(leaf_scored, leaf_weights, fill), axis=1)
        total = xp.where(hit, total, 0.0)
    assert aggregate in AGGREGATES
    return total, hit


def _base_values(xp, attrs, targets: int):
    base = tensor_or_list(attrs, "base_values")
    return xp.asarray(base if base is not None and len(base) else np.zeros(targets))


@kernel("ai.onnx.ml.TreeEnsembleRegressor")
def tree_ensemble_regressor(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    total, hit = tree_scores(xp, inputs[0], attrs)
    # (a target that no leaf of a row scored stays 0, base value or not, as in onnxruntime)
    scores = xp.where(hit, total + _base_values(xp, attrs, total.shape[1]), 0.0)
    scores = scores.astype(np.float32)
    if scores.shape[1] > 1:
        scores = transform_scores(xp, scores, attrs["post_transform"])
    outputs[0][...] = scores


@kernel("ai.onnx.ml.TreeEnsembleClassifier")
def tree_ensemble_classifier(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    total, hit = tree_scores(xp, inputs[0], attrs)
    labels = tree_class_labels(attrs)
    base = tensor_or_list(attrs, "base_values")
    if base is not None and len(base):
        total, hit = total + xp.asarray(base), xp.ones_like(hit)
    scores = total.astype(np.float32)
    if binary_case(attrs):  # class 0's weights are the positive class's score
        _binary_tree_classifier(xp, scores[:, 0], attrs, labels, outputs)
        return
    # the label of the largest score among the classes that were scored (the first on ties)
    index = xp.argmax(xp.where(hit, scores, -np.inf), axis=1)
    write_labels(xp, outputs[0], labels, index)
    if len(outputs) > 1 and outputs[1] is not None:
        outputs[1][...] = transform_scores(xp, scores, attrs["post_transform"])


def _binary_tree_classifier(xp, score, attrs, labels, outputs):
    """onnxruntime's binary case: with all weights >= 0 the score is a probability (positive
    above 0.5, columns [1 - s, s]); else a margin (positive above 0, columns [-s, s], or
    their logistics)."""
    weights = tensor_or_list(attrs, "class_weights")
    post = attrs["post_transform"]
    if bool((weights >= 0).all()):
        positive, kind = score > 0.5, "complement"
    else:
        positive, kind = score > 0, "logistic" if post == "LOGISTIC" else "negated"
    write_labels(xp, outputs[0], labels, positive.astype(np.int64))
    if len(outputs) > 1 and outputs[1] is not None:
        outputs[1][...] = two_columns(xp, score, kind)
