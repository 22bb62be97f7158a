"""ONNX op versions: the table that moves a node between an op's versions and portable's
canonical form (the version each op declaration names in ``onnx_since``).

An opset number picks one version of every op: the newest whose ``since_version`` is at most
the opset. Import brings a node of any version to the canonical one; export takes a canonical
node to the version of the target opset. Both walk the same steps:

- a step ``since=V`` describes what changed when version V appeared; ``upgrade`` rewrites a node
  of an older form into V's form and ``downgrade`` the reverse;
- import applies the upgrades of every step in (node version, canonical] in ascending order, or,
  for a node newer than the canonical form, the downgrades in (canonical, node version]
  descending; export does the mirror image for the target version;
- what no step mentions is reconciled from the ONNX schemas themselves: an attribute that the
  destination version lacks is dropped when it holds the schema default and refused otherwise,
  and an input or output that the destination lacks must be absent. So an attribute added in a
  later version (Reshape's ``allowzero``, Cast's ``round_mode``) needs no entry here.

The table (``STEPS``) is data: attribute <-> input moves, removed attributes, and a few named
rewrites for changes of meaning (Softmax's axis, BatchNormalization's outputs, Split's
``num_outputs``, Pad's ``axes``, Dropout's mask dtype), all defined in ``steps.py``.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from portable.errors import OpAttributeError, OpError, UnknownOpError
from portable.io.onnx import schemas
from portable.io.onnx.steps import (AttrToInput, RemovedAttr, Rewrite, Rewriter, Step,
                                    batch_norm_downgrade, batch_norm_upgrade, bit_shift_downgrade,
                                    dropout_mask_upgrade, dropout_to_onnx, gemm_bias_downgrade,
                                    legacy_broadcast_upgrade,
                                    pad_axes_downgrade, pad_wrap_downgrade, prelu_channels_upgrade,
                                    group_norm_18, resize_10, resize_required_inputs,
                                    shape_slice_downgrade, softmax_downgrade, softmax_upgrade,
                                    split_downgrade, upsample_to_resize, where)
from portable.io.onnx.tree_export import (classifier_to_tree_ensemble,
                                          regressor_to_tree_ensemble)
from portable.ir.graph import Node
from portable.ops import registry

# Import reads models stamped with ai.onnx opsets from this one on. An older model is read
# when each of its ops has the version it has in this opset, or a version from LEGACY on
# (the steps below translate those; others, such as consumed_inputs, have no step here).
MIN_IMPORT_OPSET = 7
# Export writes these opsets; the steps below go back this far for every canonical op (or refuse
# naming the op when an older form cannot say what the canonical node does).
MIN_EXPORT_OPSET = 7


def newest_opset() -> int:
    """The newest ai.onnx opset portable knows the schemas of (``schemas.py``)."""
    return schemas.newest_opset()


# -- the table -----------------------------------------------------------------------------------

_LEGACY_BINARY = (Rewrite(7, legacy_broadcast_upgrade),)
_REDUCE_13 = (AttrToInput(13, "axes", 1, "ints"),)
_REDUCE_18 = (AttrToInput(18, "axes", 1, "ints"),)
_SOFTMAX = (Rewrite(13, softmax_upgrade, softmax_downgrade),)



def _dft_axis_upgrade(node: Node, ctx: Rewriter) -> list[Node]:
    """DFT's axis became input #2 in 20, its default moving from 1 to -2: an absent
    attribute of 17 is the constant 1."""
    attrs = dict(node.attrs)
    axis = attrs.pop("axis", None)
    inputs = list(node.inputs) + [""] * (3 - len(node.inputs))
    inputs[2] = ctx.constant(np.asarray(1 if axis is None else axis, np.int64),
                             f"{node.name}_axis")
    return [node.replace(inputs=tuple(inputs), attrs=attrs)]


def _dft_axis_downgrade(node: Node, ctx: Rewriter) -> list[Node]:
    inputs = list(node.inputs)
    axis = -2
    if len(inputs) > 2 and inputs[2]:
        value = ctx.value(inputs[2])
        if value is None:
            raise OpError(f"{where(node, ctx.opset)}: input 'axis' must be a constant to "
                          f"become DFT's attribute before version 20; export at opset >= 20")
        axis = int(np.asarray(value).reshape(-1)[0])
        inputs[2] = ""
    while inputs and not inputs[-1]:
        inputs.pop()
    return [node.replace(inputs=tuple(inputs), attrs={**node.attrs, "axis": axis})]


def _grid_sample_modes_upgrade(node: Node, ctx: Rewriter) -> list[Node]:
    """GridSample 16 named its modes 'bilinear' (the default) and 'bicubic'; 20 calls them
    'linear' and 'cubic'."""
    mode = node.attrs.get("mode", "bilinear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    return [node.replace(attrs={**node.attrs, "mode": mode})]


def _grid_sample_modes_downgrade(node: Node, ctx: Rewriter) -> list[Node]:
    known = ctx.type(node.inputs[0])
    if known is None or known.rank != 4:
        raise OpError(f"{where(node, ctx.opset)}: GridSample before version 20 samples 4-D "
                      f"inputs only (this input: {known!r}); export at opset >= 20")
    mode = node.attrs.get("mode", "linear")
    mode = {"linear": "bilinear", "cubic": "bicubic"}.get(mode, mode)
    return [node.replace(attrs={**node.attrs, "mode": mode})]


def _roi_align_upgrade(node: Node, ctx: Rewriter) -> list[Node]:
    """RoiAlign 10 had no coordinate_transformation_mode and behaved as 'output_half_pixel'
    (no half-pixel shift); 16 added the attribute with the default 'half_pixel'."""
    return [node.replace(attrs={"coordinate_transformation_mode": "output_half_pixel",
                                **node.attrs})]


def _roi_align_downgrade(node: Node, ctx: Rewriter) -> list[Node]:
    attrs = dict(node.attrs)
    mode = attrs.pop("coordinate_transformation_mode", "half_pixel")
    if mode != "output_half_pixel":
        raise OpAttributeError(f"{where(node, ctx.opset)}: RoiAlign before version 16 has no "
                               f"coordinate_transformation_mode={mode!r} (it always behaves as "
                               f"'output_half_pixel'); export at opset >= 16")
    return [node.replace(attrs=attrs)]


STEPS: dict[str, tuple[Step, ...]] = {
    "Reshape": (AttrToInput(5, "shape", 1, "ints"),),
    "Slice": (AttrToInput(10, "starts", 1, "ints"), AttrToInput(10, "ends", 2, "ints"),
              AttrToInput(10, "axes", 3, "ints")),
    "Squeeze": (AttrToInput(13, "axes", 1, "ints"),),
    "Unsqueeze": (AttrToInput(13, "axes", 1, "ints"),),
    "Split": (AttrToInput(13, "split", 1, "ints"), Rewrite(18, None, split_downgrade)),
    "ReduceSum": _REDUCE_13,
    "ReduceMean": _REDUCE_18,
    "ReduceMax": _REDUCE_18,
    "ReduceMin": _REDUCE_18,
    "ReduceL1": _REDUCE_18, "ReduceL2": _REDUCE_18, "ReduceLogSum": _REDUCE_18,
    "ReduceLogSumExp": _REDUCE_18, "ReduceProd": _REDUCE_18, "ReduceSumSquare": _REDUCE_18,
    "TopK": (AttrToInput(10, "k", 1, "int1"),),
    "BitShift": (Rewrite(28, None, bit_shift_downgrade),),
    "Resize": (Rewrite(11, resize_10, resize_10), Rewrite(13, None, resize_required_inputs)),
    "GroupNormalization": (Rewrite(21, group_norm_18, group_norm_18),),
    "Pad": (AttrToInput(11, "pads", 1, "ints"), AttrToInput(11, "value", 2, "float", "like:0"),
            Rewrite(18, None, pad_axes_downgrade), Rewrite(19, None, pad_wrap_downgrade)),
    "Clip": (AttrToInput(11, "min", 1, "float", "like:0"),
             AttrToInput(11, "max", 2, "float", "like:0")),
    "Dropout": (RemovedAttr(7, "is_test", (0, 1)), Rewrite(10, dropout_mask_upgrade),
                AttrToInput(12, "ratio", 1, "float", "float32")),
    "BatchNormalization": (RemovedAttr(7, "is_test", (1,)), RemovedAttr(9, "spatial", (1,)),
                           Rewrite(14, batch_norm_upgrade, batch_norm_downgrade)),
    "Add": _LEGACY_BINARY, "Sub": _LEGACY_BINARY, "Mul": _LEGACY_BINARY,
    "Div": _LEGACY_BINARY, "Pow": _LEGACY_BINARY,
    "PRelu": (Rewrite(7, prelu_channels_upgrade),),
    "Softmax": _SOFTMAX,
    "LogSoftmax": _SOFTMAX,
    "Gemm": (RemovedAttr(7, "broadcast", (0, 1)), Rewrite(11, None, gemm_bias_downgrade)),
    "Shape": (Rewrite(15, None, shape_slice_downgrade),),
    "GridSample": (Rewrite(20, _grid_sample_modes_upgrade, _grid_sample_modes_downgrade),),
    "RoiAlign": (Rewrite(16, _roi_align_upgrade, _roi_align_downgrade),),
    "DFT": (Rewrite(20, _dft_axis_upgrade, _dft_axis_downgrade),),
}

# TreeEnsembleRegressor/Classifier (ai.onnx.ml 3, what scikit-learn's converters write) are
# deprecated in ai.onnx.ml 5, the opset portable exports that domain at: written as TreeEnsemble
# and standard ops there (``tree_export.py``). Importing keeps them as ops of their own.
STEPS["ai.onnx.ml.TreeEnsembleRegressor"] = (Rewrite(5, regressor_to_tree_ensemble),)
STEPS["ai.onnx.ml.TreeEnsembleClassifier"] = (Rewrite(5, classifier_to_tree_ensemble),)

# Ops read from these versions on even in models older than MIN_IMPORT_OPSET: the steps above
# translate their older forms (legacy broadcasting, is_test), or nothing changed since.
LEGACY: dict[str, int] = {"Add": 6, "Sub": 6, "Mul": 6, "Div": 6, "Pow": 1, "Gemm": 6,
                          "BatchNormalization": 6, "Dropout": 6, "AveragePool": 1,
                          "PRelu": 6}

# Deprecated ops that portable reads as another op (no declaration of their own): the rewrite
# returns canonical nodes of that op, checked by the importer like any converted node.
REPLACED: dict[str, Callable[[Node, Rewriter], list[Node]]] = {"Upsample": upsample_to_resize}


def _scatter_to_scatter_elements(node: Node, ctx: Rewriter) -> list[Node]:
    """Scatter (versions 9 and 11; deprecated by ScatterElements in 11) is ScatterElements
    without a reduction."""
    return [Node("ScatterElements", node.inputs, node.outputs,
                 {"axis": node.attrs.get("axis", 0)}, node.name)]


REPLACED["Scatter"] = _scatter_to_scatter_elements

# Canonical attributes that ONNX spells differently at every version (portable-only forms),
# rewritten before any export step.
TO_ONNX: dict[str, Callable[[Node, Rewriter], list[Node]]] = {"Dropout": dropout_to_onnx}


# -- schemas -------------------------------------------------------------------------------------


op_version = schemas.op_version
first_version = schemas.first_version
schema = schemas.get


def canonical_version(op: str) -> int:
    spec = registry.get(op).onnx
    if spec is None:
        raise UnknownOpError(f"op {op} is private to portable and has no ONNX version")
    return spec.since_version


def _same(value: Any, default: Any) -> bool:
    if isinstance(value, np.ndarray) or isinstance(default, np.ndarray):
        return False
    if isinstance(value, (list, tuple)) and isinstance(default, (list, tuple)):
        return list(value) == list(default)
    return value == default


def reconcile(node: Node, source: int, target: int, ctx: Rewriter) -> Node:
    """Drop the attributes version ``target`` lacks when they hold ``source``'s default, and
    check inputs and outputs fit ``target``. Raises naming the node, op and opset."""
    src, dst = schema(node.op, source), schema(node.op, target)
    attrs = dict(node.attrs)
    for name in list(attrs):
        if name in dst.attributes:
            continue
        value = attrs.pop(name)
        if value is None:
            continue
        default = src.attributes[name].default if name in src.attributes else None
        if default is None or not _same(value, default):
            raise OpAttributeError(
                f"{where(node, ctx.opset)}: attribute {name}={value!r} has no "
                f"equivalent in version {target} of {node.op}"
                + (f" (it appears in version {source})" if name in src.attributes else ""))
    for what, names, arity in (("input", node.inputs, dst.max_inputs),
                               ("output", node.outputs, dst.max_outputs)):
        present = [i for i, name in enumerate(names) if name]
        if present and present[-1] >= arity:
            raise OpError(f"{where(node, ctx.opset)}: {what} #{present[-1]} does not "
                          f"exist in version {target} of {node.op}")
    return node.replace(attrs=attrs)


def convert(node: Node, source: int, target: int, ctx: Rewriter) -> list[Node]:
    """Rewrite ``node`` (an op at version ``source``) into version ``target``'s form.

    Returns the replacement nodes in order; the op's own nodes among them are reconciled with
    the target schema, and nodes of other ops that a step adds are in canonical form (an
    exporter still has to write them at the target opset). Raises OpError (or a subclass)
    naming the node when it cannot."""
    nodes = [node]
    steps = STEPS.get(node.op, ())
    if target > source:
        chosen = sorted((s for s in steps if source < s.since <= target), key=lambda s: s.since)
        method = "upgrade"
    else:
        chosen = sorted((s for s in steps if target < s.since <= source),
                        key=lambda s: -s.since)
        method = "downgrade"
    for step in chosen:
        nodes = [out for n in nodes for out in
                 (getattr(step, method)(n, ctx) if n.op == node.op else [n])]
    return [reconcile(n, source, target, ctx) if n.op == node.op else n for n in nodes]


def check_model_opset(version: int, source: str) -> None:
    """Refuse ai.onnx opsets that the installed onnx does not define."""
    if not 1 <= version <= newest_opset():
        raise UnknownOpError(f"{source}: the model imports ai.onnx opset {version}; portable "
                             f"imports opsets {MIN_IMPORT_OPSET} to {newest_opset()} (the "
                             f"newest that onnx {schemas.onnx_version()} defines)")
