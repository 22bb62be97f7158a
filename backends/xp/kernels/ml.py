"""NumPy kernels: the ai.onnx.ml ops (Binarizer, ArrayFeatureExtractor, LabelEncoder,
TreeEnsemble; ``portable/ops/ml.py`` declares them).

LabelEncoder looks keys up by binary search over the sorted keys (``searchsorted``), which
works the same on numbers and on object arrays of ``str``; NaN keys match NaN inputs, as ONNX
asks. TreeEnsemble walks every sample through one tree at a time, all samples at once: one
step per tree level moves each sample's node index to its true or false child, so the cost
is (trees x depth) vectorised steps, not a Python loop per sample. With MIN or MAX
aggregation a target that no leaf reached scores 0, as in onnxruntime (onnx.reference leaves
the float type's extreme there).
"""
from __future__ import annotations

import numpy as np

from portable.backend import kernel_table
from portable.ops.ml import MEMBER, encoder_default, encoder_table

kernels, kernel = kernel_table()


@kernel("ai.onnx.ml.Binarizer")
def binarizer(ctx, inputs, outputs, attrs):
    x, y = inputs[0], outputs[0]
    # (x > threshold is False for NaN, as onnx.reference gives)
    threshold = attrs["threshold"]
    y[...] = (x > threshold) if x.dtype.kind == "f" else (x.astype(np.float64) > threshold)


@kernel("ai.onnx.ml.ArrayFeatureExtractor")
def array_feature_extractor(ctx, inputs, outputs, attrs):
    xp, (x, indices), z = ctx.xp, inputs, outputs[0]
    index = indices.reshape(-1)
    count = x.shape[-1]
    if index.size and (int(index.min()) < -count or int(index.max()) >= count):
        raise IndexError(f"ArrayFeatureExtractor: indices {index.tolist()[:8]} are out of "
                         f"range for {count} features")
    z[...] = xp.take(x, index, axis=-1).reshape(z.shape)


@kernel("ai.onnx.ml.LabelEncoder")
def label_encoder(ctx, inputs, outputs, attrs):
    x, y = inputs[0], outputs[0]
    keys, values = encoder_table(attrs, "keys"), encoder_table(attrs, "values")
    default = encoder_default(attrs, values)
    strings = keys.dtype == object
    xp = np if strings else ctx.xp  # (object arrays live on the host)
    flat = x.reshape(-1)
    if strings:
        flat = np.asarray([v.decode() if isinstance(v, bytes) else str(v) for v in flat],
                          dtype=object)
        keys = np.asarray([str(k) for k in keys], dtype=object)
    order = np.argsort(keys, kind="stable")
    sorted_keys, sorted_values = keys[order], values[order]
    result = np.full(flat.shape, default, dtype=values.dtype) if values.dtype == object \
        else xp.full(flat.shape, default, dtype=values.dtype)
    if len(keys):
        found_keys = xp.asarray(sorted_keys)
        position = xp.searchsorted(found_keys, flat)
        position = xp.minimum(position, len(keys) - 1)
        found = found_keys[position] == flat
        if not strings and keys.dtype.kind == "f" and np.isnan(keys).any():
            nan_value = values[np.isnan(keys)][-1]
            nans = xp.isnan(flat)
            result[nans] = nan_value
            found &= ~nans
        result[found] = xp.asarray(sorted_values)[position[found]]
    y[...] = result.reshape(y.shape)


def _compare(xp, mode, value, split):
    """Whether ``value`` takes the true branch of a node of ``mode`` (0..5; NaN compares
    false, as in onnx.reference)."""
    return xp.where(mode == 0, value <= split, xp.where(
        mode == 1, value < split, xp.where(mode == 2, value >= split, xp.where(
            mode == 3, value > split, xp.where(mode == 4, value == split, value != split)))))


def _member_sets(attrs, modes):
    """Each BRANCH_MEMBER node's members: its run of membership_values, runs ending in NaN."""
    if attrs["membership_values"] is None:
        return {}
    values = np.asarray(attrs["membership_values"], np.float64).reshape(-1)
    ends = np.flatnonzero(np.isnan(values))
    starts = np.concatenate([[0], ends[:-1] + 1])
    members = np.flatnonzero(modes == MEMBER)
    return {int(node): values[start:end] for node, start, end in zip(members, starts, ends)}


@kernel("ai.onnx.ml.TreeEnsemble")
def tree_ensemble(ctx, inputs, outputs, attrs):
    xp, x, y = ctx.xp, inputs[0], outputs[0]
    rows = x.shape[0]
    data = x.astype(np.float64)
    modes = np.asarray(attrs["nodes_modes"]).reshape(-1).astype(np.int64)
    splits = xp.asarray(np.asarray(attrs["nodes_splits"], np.float64).reshape(-1))
    features = xp.asarray(np.asarray(attrs["nodes_featureids"], np.int64))
    tracks = attrs["nodes_missing_value_tracks_true"]
    tracks = xp.asarray(np.zeros(len(modes), bool) if tracks is None
                        else np.asarray(tracks) != 0)
    children = {side: (xp.asarray(np.asarray(attrs[f"nodes_{side}nodeids"], np.int64)),
                       xp.asarray(np.asarray(attrs[f"nodes_{side}leafs"]) != 0))
                for side in ("true", "false")}
    members = {node: xp.asarray(v) for node, v in _member_sets(attrs, modes).items()}
    modes_x = xp.asarray(modes)
    weights = xp.asarray(np.asarray(attrs["leaf_weights"]).reshape(-1).astype(np.float64))
    targets = xp.asarray(np.asarray(attrs["leaf_targetids"], np.int64))
    aggregate, n_targets = attrs["aggregate_function"], attrs["n_targets"]
    total = xp.zeros((rows, n_targets), np.float64)
    hit = xp.zeros((rows, n_targets), bool)
    row_index = xp.arange(rows)
    roots = attrs["tree_roots"]
    for root in roots:
        true_ids, true_leaf = children["true"]
        false_ids, false_leaf = children["false"]
        # (a root whose both branches are the same leaf is itself that leaf: onnx.reference)
        degenerate = bool(true_leaf[root]) and bool(false_leaf[root]) and \
            int(true_ids[root]) == int(false_ids[root])
        node = xp.full(rows, int(true_ids[root]) if degenerate else root, np.int64)
        at_leaf = xp.full(rows, degenerate, bool)
        for _ in range(len(modes) + 1):  # a walk is never longer than the node count
            walking = ~at_leaf
            if not bool(walking.any()):
                break
            current = xp.where(walking, node, 0)
            value = data[row_index, features[current]]
            mode = modes_x[current]
            goes_true = _compare(xp, mode, value, splits[current])
            for member_node, member_values in members.items():
                here = current == member_node
                if bool(here.any()):
                    goes_true = xp.where(here, xp.isin(value, member_values), goes_true)
            goes_true |= tracks[current] & xp.isnan(value)
            next_node = xp.where(goes_true, true_ids[current], false_ids[current])
            next_leaf = xp.where(goes_true, true_leaf[current], false_leaf[current])
            node = xp.where(walking, next_node, node)
            at_leaf = at_leaf | (walking & next_leaf)
        if not bool(at_leaf.all()):
            raise ValueError("TreeEnsemble: a tree walk does not end in a leaf (a cycle in "
                             "nodes_truenodeids/nodes_falsenodeids)")
        w, t = weights[node], targets[node]
        old = total[row_index, t]
        if aggregate in (0, 1):  # AVERAGE, SUM: one leaf per row and tree, so no clashes
            total[row_index, t] = old + w
        elif aggregate == 2:
            total[row_index, t] = xp.where(hit[row_index, t], xp.minimum(old, w), w)
        else:
            total[row_index, t] = xp.where(hit[row_index, t], xp.maximum(old, w), w)
        hit[row_index, t] = True
    if aggregate == 0 and len(roots):
        total /= len(roots)
    y[...] = _post_transform(xp, total, attrs["post_transform"])


def _post_transform(xp, scores, kind):
    if kind == 1:  # SOFTMAX
        shifted = xp.exp(scores - scores.max(axis=1, keepdims=True))
        return shifted / shifted.sum(axis=1, keepdims=True)
    if kind == 2:  # LOGISTIC
        return 1.0 / (1.0 + xp.exp(-scores))
    if kind == 3:  # SOFTMAX_ZERO: softmax over the nonzero scores, zeros stay zero
        nonzero = scores != 0
        masked = xp.where(nonzero, scores, -xp.inf)
        top = masked.max(axis=1, keepdims=True)
        shifted = xp.where(nonzero, xp.exp(masked - xp.where(xp.isfinite(top), top, 0)), 0)
        sums = shifted.sum(axis=1, keepdims=True)
        return xp.where(sums > 0, shifted / xp.where(sums > 0, sums, 1), 0)
    return scores
