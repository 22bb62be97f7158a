"""Classical machine-learning ops of the ``ai.onnx.ml`` domain: Binarizer,
ArrayFeatureExtractor, LabelEncoder and TreeEnsemble (the opset-5 tree op that replaces
TreeEnsembleRegressor/Classifier).

They are ONNX ops of their own domain, declared as ``ai.onnx.ml.<Op>`` (imported from and
exported to files with ``domain="ai.onnx.ml"`` and that domain's opset). None is
differentiable: they are look-ups, thresholds and tree walks.

String tensors (LabelEncoder's ``keys_strings``/``values_strings``) are NumPy object arrays of
``str``; the type rules accept any string-like dtype (object, ``U``, ``S``) for them.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.ir.graph import TensorType
from portable.ops.registry import Attr, DtypeContext, InferContext, declare
from portable.ops.rules import same_as_input

ML = "ai.onnx.ml"
STRING = np.dtype(object)

# -- Binarizer ---------------------------------------------------------------------------------


def _binarizer_infer(ctx: InferContext) -> list[TensorType]:
    if ctx.dtype(0).kind not in "fi":
        ctx.fail(f"X must be float, double, int32 or int64, got {ctx.dtype(0).name}")
    return same_as_input(ctx)


declare("Binarizer", domain=ML, inputs=("X",), outputs=("Y",), infer=_binarizer_infer,
        attrs={"threshold": Attr("float", 0.0)}, onnx_since=1,
        doc="Y = 1 where X > threshold, else 0 (NaN gives 0), in X's dtype.")

# -- ArrayFeatureExtractor ---------------------------------------------------------------------


def feature_count(indices_shape: tuple[int, ...]) -> int:
    """How many features ArrayFeatureExtractor selects: every index, whatever its shape."""
    return int(np.prod(indices_shape, dtype=np.int64))


def _array_feature_infer(ctx: InferContext) -> list[TensorType]:
    x, indices = ctx.type(0), ctx.type(1)
    if indices.dtype != np.int64:
        ctx.fail(f"Y (the indices) must be int64, got {indices.dtype.name}")
    if x.rank == 0:
        ctx.fail("X must have at least one axis (features are taken along the last)")
    if ctx.known(1):
        values = np.asarray(ctx.value(1))
        if values.size and (values.min() < -x.shape[-1] or values.max() >= x.shape[-1]):
            ctx.fail(f"indices {values.reshape(-1).tolist()[:8]} are out of range for "
                     f"{x.shape[-1]} features")
    # (onnxruntime's layout, which onnx.reference follows: a vector gives one row)
    lead = (1,) if x.rank == 1 else x.shape[:-1]
    return [TensorType(lead + (feature_count(indices.shape),), x.dtype)]


declare("ArrayFeatureExtractor", domain=ML, inputs=("X", "Y"), outputs=("Z",),
        infer=_array_feature_infer, onnx_since=1, nondiff_inputs=(1,),
        doc="Z = X[..., Y.ravel()]; a 1-D X gives a (1, k) result.")

# -- LabelEncoder ------------------------------------------------------------------------------

_KEY_KINDS = {"floats": np.dtype(np.float32), "int64s": np.dtype(np.int64), "strings": STRING}


def _is_string(dtype: np.dtype) -> bool:
    return dtype.kind in "OUST"


def encoder_table(attrs: dict[str, Any], side: str) -> np.ndarray | None:
    """LabelEncoder's keys (``side="keys"``) or values as one 1-D array, from whichever of
    ``<side>_floats``, ``_int64s``, ``_strings`` or ``_tensor`` is set (None: none is)."""
    given = [(kind, attrs.get(f"{side}_{kind}")) for kind in ("floats", "int64s", "strings")]
    given = [(kind, v) for kind, v in given if v is not None and len(v)]
    tensor = attrs.get(f"{side}_tensor")
    if tensor is not None:
        given.append(("tensor", tensor))
    if len(given) != 1:
        return None
    kind, value = given[0]
    if kind == "tensor":
        array = np.asarray(value).reshape(-1)
        return array.astype(STRING) if _is_string(array.dtype) else array
    return np.asarray(list(value), dtype=_KEY_KINDS[kind])


def encoder_default(attrs: dict[str, Any], values: np.ndarray) -> Any:
    """The value of keys not found: ``default_tensor`` when the values are a tensor, else
    the ``default_<kind>`` of the values' kind."""
    if attrs.get("values_tensor") is not None:
        default = attrs.get("default_tensor")
        if default is None:  # the spec's defaults by type: -1, -0.0, "_Unused"
            return "_Unused" if values.dtype == STRING else values.dtype.type(
                -0.0 if values.dtype.kind == "f" else -1)
        return np.asarray(default).reshape(-1)[0]
    if values.dtype == STRING:
        return attrs["default_string"]
    return values.dtype.type(attrs["default_float"] if values.dtype.kind == "f"
                             else attrs["default_int64"])


def _label_encoder_tables(ctx: Any) -> tuple[np.ndarray, np.ndarray]:
    keys, values = encoder_table(ctx.attrs, "keys"), encoder_table(ctx.attrs, "values")
    for side, table in (("keys", keys), ("values", values)):
        if table is None:
            ctx.fail(f"exactly one of {side}_floats, {side}_int64s, {side}_strings and "
                     f"{side}_tensor must be given")
    if len(keys) != len(values):
        ctx.fail(f"{len(keys)} keys but {len(values)} values")
    return keys, values


def _label_encoder_infer(ctx: InferContext) -> list[TensorType]:
    keys, values = _label_encoder_tables(ctx)
    x = ctx.dtype(0)
    if not (x == keys.dtype or _is_string(x) and keys.dtype == STRING):
        ctx.fail(f"X is {x.name} but the keys are {keys.dtype.name}")
    return [TensorType(ctx.shape(0), values.dtype)]


def _label_encoder_dtype(ctx: DtypeContext) -> list[np.dtype]:
    return [_label_encoder_tables(ctx)[1].dtype]


_LABEL_ENCODER_ATTRS = {
    "default_float": Attr("float", -0.0), "default_int64": Attr("int", -1),
    "default_string": Attr("string", "_Unused"), "default_tensor": Attr("tensor", None),
    **{f"{side}_{kind}": Attr(attr_kind, None) for side in ("keys", "values")
       for kind, attr_kind in (("floats", "floats"), ("int64s", "ints"),
                               ("strings", "strings"))},
    "keys_tensor": Attr("tensor", None), "values_tensor": Attr("tensor", None),
}

declare("LabelEncoder", domain=ML, inputs=("X",), outputs=("Y",), infer=_label_encoder_infer,
        attrs=_LABEL_ENCODER_ATTRS, onnx_since=4, dtype_rule=_label_encoder_dtype,
        doc="Maps each key to its value (NaN keys match NaN); others get the default.")

# -- TreeEnsemble ------------------------------------------------------------------------------

# nodes_modes: how a node compares its feature with its split (BRANCH_MEMBER: membership in
# the node's run of membership_values, the runs separated by NaN).
MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ",
         "BRANCH_MEMBER")
MEMBER = 6
AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")
POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO")

_NODE_ATTRS = ("nodes_featureids", "nodes_modes", "nodes_splits", "nodes_truenodeids",
               "nodes_trueleafs", "nodes_falsenodeids", "nodes_falseleafs")


def check_tree_ensemble(ctx: Any) -> None:
    """Refuse an inconsistent ensemble (lengths, modes, ids out of range), naming the node."""
    a = ctx.attrs
    count = len(a["nodes_featureids"])
    for name in _NODE_ATTRS + tuple(n for n in ("nodes_missing_value_tracks_true",
                                                "nodes_hitrates") if a[n] is not None):
        if len(np.asarray(a[name]).reshape(-1)) != count:
            ctx.fail(f"{name} has {len(np.asarray(a[name]).reshape(-1))} entries, "
                     f"nodes_featureids {count}")
    leaves = len(a["leaf_targetids"])
    if len(np.asarray(a["leaf_weights"]).reshape(-1)) != leaves:
        ctx.fail("leaf_weights and leaf_targetids differ in length")
    modes = np.asarray(a["nodes_modes"]).reshape(-1)
    if count and (modes.min() < 0 or modes.max() >= len(MODES)):
        ctx.fail(f"nodes_modes must be in 0..{len(MODES) - 1} ({', '.join(MODES)})")
    members = int(np.sum(modes == MEMBER))
    runs = 0 if a["membership_values"] is None else int(
        np.isnan(np.asarray(a["membership_values"], np.float64)).sum())
    if members and runs != members:
        ctx.fail(f"{members} BRANCH_MEMBER nodes need as many NaN-terminated runs of "
                 f"membership_values, got {runs}")
    for side in ("true", "false"):
        ids, leaf = np.asarray(a[f"nodes_{side}nodeids"]), np.asarray(a[f"nodes_{side}leafs"])
        bound = np.where(leaf != 0, leaves, count)
        if ids.size and (ids.min() < 0 or np.any(ids >= bound)):
            ctx.fail(f"nodes_{side}nodeids point past the nodes or leaves")
    roots = np.asarray(a["tree_roots"])
    if not roots.size or roots.min() < 0 or roots.max() >= max(count, 1):
        ctx.fail(f"tree_roots {roots.tolist()} must name nodes (there are {count})")
    targets = np.asarray(a["leaf_targetids"])
    if targets.size and (targets.min() < 0 or targets.max() >= a["n_targets"]):
        ctx.fail(f"leaf_targetids must be in 0..{a['n_targets'] - 1} (n_targets)")
    if not 0 <= a["aggregate_function"] < len(AGGREGATES):
        ctx.fail(f"aggregate_function must be one of 0..3 ({', '.join(AGGREGATES)})")
    if not 0 <= a["post_transform"] < len(POST_TRANSFORMS):
        ctx.fail(f"post_transform {a['post_transform']} is not supported (PROBIT, 4, is not "
                 f"implemented); portable supports {', '.join(POST_TRANSFORMS)}")


def _tree_ensemble_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.type(0)
    if x.dtype.kind != "f" or x.rank != 2:
        ctx.fail(f"X must be a 2-D floating-point array (N, features), got {x!r}")
    check_tree_ensemble(ctx)
    features = np.asarray(ctx.attrs["nodes_featureids"])
    if features.size and x.shape[1] is not None and (
            features.min() < 0 or features.max() >= x.shape[1]):
        ctx.fail(f"nodes_featureids reach feature {features.max()}; X has {x.shape[1]}")
    return [TensorType((x.shape[0], ctx.attrs["n_targets"]), x.dtype)]


declare("TreeEnsemble", domain=ML, inputs=("X",), outputs=("Y",), infer=_tree_ensemble_infer,
        attrs={"aggregate_function": Attr("int", 1), "leaf_targetids": Attr("ints"),
               "leaf_weights": Attr("tensor"), "membership_values": Attr("tensor", None),
               "n_targets": Attr("int"), "nodes_falseleafs": Attr("ints"),
               "nodes_falsenodeids": Attr("ints"), "nodes_featureids": Attr("ints"),
               "nodes_hitrates": Attr("tensor", None),
               "nodes_missing_value_tracks_true": Attr("ints", None),
               "nodes_modes": Attr("tensor"), "nodes_splits": Attr("tensor"),
               "nodes_trueleafs": Attr("ints"), "nodes_truenodeids": Attr("ints"),
               "post_transform": Attr("int", 0), "tree_roots": Attr("ints")},
        onnx_since=5, doc="A tree ensemble (regressor or classifier scores), per target.")
