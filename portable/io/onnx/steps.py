"""The steps that move a node between versions of its op (see ``versions.py``): the kinds of
step (an attribute that became an input, an attribute removed, a rewrite in code), the named
rewrites for changes of meaning, and the interface they ask of the importer or exporter.

A step describes what changed when version ``since`` of an op appeared: ``upgrade`` rewrites a
node of the older form into the newer one, ``downgrade`` the reverse. Both return the nodes that
replace the node; nodes of other ops among them are in portable's canonical form.

Example:
    >>> AttrToInput(13, "axes", 1, "ints").upgrade(node, importer)   # doctest: +SKIP
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np

from portable.errors import OpAttributeError, OpError
from portable.ir.graph import Node, TensorType
from portable.ops.movement import ints, pad_widths, split_sizes


class Rewriter(Protocol):
    """What a step may ask of the importer or exporter it runs in."""

    opset: int

    def constant(self, value: np.ndarray, hint: str) -> str:
        """A new constant value holding ``value``; returns its name."""

    def value(self, name: str) -> np.ndarray | None:
        """The value of ``name`` when it is a constant, else None."""

    def type(self, name: str) -> TensorType | None:
        """The type of ``name`` when known, else None."""

    def fresh(self, hint: str) -> str:
        """A value name used nowhere else."""

    def used(self, name: str) -> bool:
        """Whether a node or a graph output reads ``name``."""


class RewriteContext:
    """The Rewriter both the importer and the exporter give their steps: constants added so
    far, types and values known so far (``info``), and fresh names."""

    def __init__(self, opset: int, info: Any, taken: set[str], used: set[str]) -> None:
        self.opset = opset
        self.info = info
        self.constants: dict[str, np.ndarray] = {}
        self.taken = taken
        self._used = used
        self._count = itertools.count()

    def constant(self, value: np.ndarray, hint: str) -> str:
        name = self.fresh(hint)
        array = np.asarray(value, order="C")
        array.setflags(write=False)
        self.constants[name] = array
        self.info.types[name] = TensorType(array.shape, array.dtype)
        self.info.values[name] = array
        return name

    def value(self, name: str) -> np.ndarray | None:
        return self.info.values.get(name)

    def type(self, name: str) -> TensorType | None:
        return self.info.types.get(name)

    def fresh(self, hint: str) -> str:
        name = hint
        while name in self.taken:
            name = f"{hint}_{next(self._count)}"
        self.taken.add(name)
        return name

    def used(self, name: str) -> bool:
        return name in self._used


def where(node: Node, opset: int, version: int | None = None) -> str:
    """How messages name a node: its name, op, version and opset."""
    ver = f" version {version}" if version is not None else ""
    return f"node {node.name!r} (op {node.op}{ver}, opset {opset})"


# -- the kinds of step ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AttrToInput:
    """Before version ``since`` input ``index`` was the attribute ``attr`` (of ONNX kind
    ``kind``, or ``"int1"``: an int that the input holds as a 1-element 1-D tensor, as TopK's
    K); ``dtype`` is the input's dtype, ``"like:0"`` for input 0's."""

    since: int
    attr: str
    index: int
    kind: str
    dtype: str = "int64"

    def upgrade(self, node: Node, ctx: Rewriter) -> list[Node]:
        attrs = dict(node.attrs)
        if attrs.get(self.attr) is None:
            attrs.pop(self.attr, None)
            return [node.replace(attrs=attrs)]
        value = attrs.pop(self.attr)
        dtype = self._dtype(node, ctx)
        array = np.asarray(value, dtype=dtype)
        if self.kind in ("float", "int"):
            array = array.reshape(())
        elif self.kind == "int1":
            array = array.reshape((1,))
        inputs = list(node.inputs) + [""] * (self.index + 1 - len(node.inputs))
        if inputs[self.index]:
            raise OpAttributeError(f"{where(node, ctx.opset)}: both attribute {self.attr!r} "
                                   f"and input #{self.index} are given")
        inputs[self.index] = ctx.constant(array, f"{node.name}_{self.attr}")
        return [node.replace(inputs=tuple(inputs), attrs=attrs)]

    def _dtype(self, node: Node, ctx: Rewriter) -> np.dtype:
        if self.dtype != "like:0":
            return np.dtype(self.dtype)
        known = ctx.type(node.inputs[0]) if node.inputs and node.inputs[0] else None
        return known.dtype if known is not None else np.dtype(np.float32)

    def downgrade(self, node: Node, ctx: Rewriter) -> list[Node]:
        inputs = list(node.inputs)
        if self.index >= len(inputs) or not inputs[self.index]:
            return [node]
        value = ctx.value(inputs[self.index])
        if value is None:
            raise OpError(f"{where(node, ctx.opset)}: input #{self.index} must be a constant "
                          f"to become the attribute {self.attr!r} of versions before "
                          f"{self.since}; export at opset >= {self.since} instead")
        attrs = dict(node.attrs)
        if self.kind in ("ints", "floats"):
            attrs[self.attr] = ints(value) if self.kind == "ints" else \
                [float(v) for v in np.asarray(value).ravel()]
        else:
            scalar = np.asarray(value).ravel()
            if scalar.size != 1:
                raise OpError(f"{where(node, ctx.opset)}: input #{self.index} must be one value "
                              f"to become attribute {self.attr!r}")
            attrs[self.attr] = float(scalar[0]) if self.kind == "float" else int(scalar[0])
        inputs[self.index] = ""
        while inputs and not inputs[-1]:
            inputs.pop()
        return [node.replace(inputs=tuple(inputs), attrs=attrs)]


@dataclass(frozen=True)
class RemovedAttr:
    """Before version ``since`` the op had attribute ``attr``; import accepts only the values
    in ``allowed`` (those that mean what the newer form does) and drops it."""

    since: int
    attr: str
    allowed: tuple

    def upgrade(self, node: Node, ctx: Rewriter) -> list[Node]:
        attrs = dict(node.attrs)
        if self.attr in attrs:
            value = attrs.pop(self.attr)
            if value not in self.allowed:
                raise OpAttributeError(f"{where(node, ctx.opset)}: attribute {self.attr}="
                                       f"{value!r} is not supported (only {list(self.allowed)})")
        return [node.replace(attrs=attrs)]

    def downgrade(self, node: Node, ctx: Rewriter) -> list[Node]:
        return [node]


@dataclass(frozen=True)
class Rewrite:
    """A change of meaning that needs code: ``upgrade`` / ``downgrade`` return the nodes that
    replace ``node`` (None: nothing to do in that direction)."""

    since: int
    upgrade_fn: Callable[[Node, Rewriter], list[Node]] | None = None
    downgrade_fn: Callable[[Node, Rewriter], list[Node]] | None = None

    def upgrade(self, node: Node, ctx: Rewriter) -> list[Node]:
        return self.upgrade_fn(node, ctx) if self.upgrade_fn else [node]

    def downgrade(self, node: Node, ctx: Rewriter) -> list[Node]:
        return self.downgrade_fn(node, ctx) if self.downgrade_fn else [node]


Step = AttrToInput | RemovedAttr | Rewrite

# -- named rewrites ------------------------------------------------------------------------------


def softmax_upgrade(node: Node, ctx: Rewriter) -> list[Node]:
    """Before 13, Softmax(axis=a) flattened the input to 2-D at ``a`` (default 1) and
    normalised whole rows; since 13 it normalises along one axis (default -1)."""
    attrs = dict(node.attrs)
    axis = int(attrs.pop("axis", 1))
    x = node.inputs[0]
    known = ctx.type(x)
    if known is not None and axis % max(known.rank, 1) == known.rank - 1:
        return [node.replace(attrs={**attrs, "axis": -1})]
    flat, out = ctx.fresh(f"{node.name}_flat"), ctx.fresh(f"{node.name}_rows")
    shape = ctx.fresh(f"{node.name}_shape")
    return [Node("Flatten", (x,), (flat,), {"axis": axis}, f"{node.name}/flatten"),
            node.replace(inputs=(flat,), outputs=(out,), attrs={**attrs, "axis": -1}),
            Node("Shape", (x,), (shape,), {}, f"{node.name}/shape"),
            Node("Reshape", (out, shape), node.outputs, {}, f"{node.name}/reshape")]


def resize_10(node: Node, ctx: Rewriter) -> list[Node]:
    """Resize 10 took the scales as input 1 with its own coordinate rules: not translated."""
    raise OpError(f"{where(node, ctx.opset)}: Resize before version 11 (scales as input 1) is "
                  f"not supported; convert the model to opset >= 11, or export at opset >= 11")


def resize_required_inputs(node: Node, ctx: Rewriter) -> list[Node]:
    """Before 13 Resize's roi and scales were required inputs: absent ones become empty."""
    inputs = list(node.inputs) + [""] * (3 - len(node.inputs))
    for index in (1, 2):
        if not inputs[index]:
            inputs[index] = ctx.constant(np.zeros(0, np.float32), f"{node.name}_empty{index}")
    return [node.replace(inputs=tuple(inputs))]


def upsample_to_resize(node: Node, ctx: Rewriter) -> list[Node]:
    """Upsample (versions 7 to 10; deprecated by Resize) is Resize with asymmetric coordinates
    (source position = output position / scale): 'nearest' takes the floor of it, as
    onnxruntime does for Upsample's scales of at least one, 'linear' interpolates. Version 7
    gives the scales as an attribute, later versions as input 1."""
    mode = node.attrs.get("mode", "nearest")
    mode = {"bilinear": "linear", "trilinear": "linear"}.get(mode, mode)
    if mode not in ("nearest", "linear"):
        raise OpAttributeError(f"{where(node, ctx.opset)}: mode={mode!r} is not one of "
                               f"'nearest', 'linear'")
    if "scales" in node.attrs:
        scales = ctx.constant(np.asarray(node.attrs["scales"], np.float32),
                              f"{node.name}_scales")
    else:
        scales = node.inputs[1]
    attrs = {"mode": mode, "coordinate_transformation_mode": "asymmetric"}
    if mode == "nearest":
        attrs["nearest_mode"] = "floor"
    return [Node("Resize", (node.inputs[0], "", scales), node.outputs, attrs, node.name)]


def group_norm_18(node: Node, ctx: Rewriter) -> list[Node]:
    """GroupNormalization 18 scaled each group, 21 each channel: not translated."""
    raise OpError(f"{where(node, ctx.opset)}: GroupNormalization before version 21 (a scale "
                  f"and bias per group) is not supported; use opset >= 21")


def bit_shift_downgrade(node: Node, ctx: Rewriter) -> list[Node]:
    """Before 28 BitShift took unsigned integers only."""
    known = ctx.type(node.inputs[0])
    if known is None or known.dtype.kind != "u":
        raise OpError(f"{where(node, ctx.opset)}: BitShift of "
                      f"{'unknown' if known is None else known.dtype.name} values needs "
                      f"opset >= 28 (older versions shift unsigned integers only)")
    return [node]


def softmax_downgrade(node: Node, ctx: Rewriter) -> list[Node]:
    """Before 13 only the last axis is one flattened row: another axis is swapped there."""
    known = ctx.type(node.inputs[0])
    if known is None:
        raise OpError(f"{where(node, ctx.opset)}: the input's rank must be known to write "
                      f"{node.op} before version 13")
    rank = max(known.rank, 1)
    axis = int(node.attrs.get("axis", -1)) % rank
    last = node.replace(attrs={**node.attrs, "axis": rank - 1})
    if axis == rank - 1:
        return [last]
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]  # a swap is its own inverse
    moved, out = ctx.fresh(f"{node.name}_moved"), ctx.fresh(f"{node.name}_rows")
    return [Node("Transpose", node.inputs[:1], (moved,), {"perm": perm}, f"{node.name}/in"),
            last.replace(inputs=(moved,), outputs=(out,)),
            Node("Transpose", (out,), node.outputs, {"perm": perm}, f"{node.name}/out")]


def batch_norm_upgrade(node: Node, ctx: Rewriter) -> list[Node]:
    """Before 14 the mode came from the outputs: Y alone is inference; with the running
    statistics (and optional saved batch statistics) it is training."""
    outputs = list(node.outputs)
    saved = [name for name in outputs[3:] if name]
    if any(ctx.used(name) for name in saved):
        raise OpError(f"{where(node, ctx.opset)}: the saved_mean/saved_var outputs of "
                      f"versions before 14 are not supported")
    training = any(outputs[1:3])
    return [node.replace(outputs=tuple(outputs[:3] if training else outputs[:1]),
                         attrs={**node.attrs, "training_mode": int(training)})]


def batch_norm_downgrade(node: Node, ctx: Rewriter) -> list[Node]:
    attrs = dict(node.attrs)
    training = int(attrs.pop("training_mode", 0))
    outputs = node.outputs if training else node.outputs[:1]
    return [node.replace(attrs=attrs, outputs=outputs)]


def dropout_mask_upgrade(node: Node, ctx: Rewriter) -> list[Node]:
    """Before 10 Dropout's mask had the data's type, since 10 it is bool."""
    if len(node.outputs) > 1 and node.outputs[1]:
        if ctx.used(node.outputs[1]):
            raise OpError(f"{where(node, ctx.opset)}: the mask output of Dropout before "
                          f"version 10 (typed like the data) is used; it is not supported")
        return [node.replace(outputs=node.outputs[:1])]
    return [node]


def legacy_broadcast_upgrade(node: Node, ctx: Rewriter) -> list[Node]:
    """Before 7, binary ops broadcast only with ``broadcast=1``, aligning B with A's axes from
    ``axis`` on (suffix alignment without it); numpy-style broadcasting aligns trailing axes,
    so B gets trailing 1s."""
    attrs = dict(node.attrs)
    broadcast, axis = attrs.pop("broadcast", 0), attrs.pop("axis", None)
    node = node.replace(attrs=attrs)
    if not broadcast or axis is None:
        return [node]
    a, b = ctx.type(node.inputs[0]), ctx.type(node.inputs[1])
    if a is None or b is None:
        raise OpError(f"{where(node, ctx.opset)}: legacy broadcasting (axis={axis}) needs the "
                      f"ranks of both inputs")
    trailing = a.rank - int(axis) % max(a.rank, 1) - b.rank
    if trailing <= 0:
        return [node]
    axes = ctx.constant(np.arange(b.rank, b.rank + trailing, dtype=np.int64),
                        f"{node.name}_axes")
    aligned = ctx.fresh(f"{node.name}_aligned")
    return [Node("Unsqueeze", (node.inputs[1], axes), (aligned,), {}, f"{node.name}/align"),
            node.replace(inputs=(node.inputs[0], aligned))]


def prelu_channels_upgrade(node: Node, ctx: Rewriter) -> list[Node]:
    """Before 7, a 1-D slope of C values applied per channel (axis 1); numpy-style
    broadcasting needs it shaped (C, 1, ..., 1)."""
    x, slope = ctx.type(node.inputs[0]), ctx.type(node.inputs[1])
    if x is None or slope is None:
        raise OpError(f"{where(node, ctx.opset)}: PRelu before version 7 needs the ranks of "
                      f"X and slope")
    if slope.rank != 1 or slope.shape[0] == 1 or x.rank <= 2:
        return [node]
    axes = ctx.constant(np.arange(1, x.rank - 1, dtype=np.int64), f"{node.name}_axes")
    aligned = ctx.fresh(f"{node.name}_slope")
    return [Node("Unsqueeze", (node.inputs[1], axes), (aligned,), {}, f"{node.name}/align"),
            node.replace(inputs=(node.inputs[0], aligned))]


def split_downgrade(node: Node, ctx: Rewriter) -> list[Node]:
    """Versions before 18 have no ``num_outputs``: equal parts were the default, and other
    sizes must be spelled out as the ``split`` input."""
    attrs = dict(node.attrs)
    parts = attrs.pop("num_outputs", None)
    if parts is None:
        return [node.replace(attrs=attrs)]
    known = ctx.type(node.inputs[0])
    if known is None or None in known.shape:
        raise OpError(f"{where(node, ctx.opset)}: num_outputs needs a static input shape to "
                      f"be written as split sizes")
    axis = int(attrs.get("axis", 0)) % known.rank
    sizes = split_sizes(known.shape[axis], None, parts, len(node.outputs))
    if len(set(sizes)) == 1:
        return [node.replace(attrs=attrs)]
    split = ctx.constant(np.asarray(sizes, np.int64), f"{node.name}_split")
    return [node.replace(inputs=(node.inputs[0], split), attrs=attrs)]


def pad_axes_downgrade(node: Node, ctx: Rewriter) -> list[Node]:
    """Before 18 Pad had no ``axes`` input: spell the pads out for every axis."""
    if len(node.inputs) < 4 or not node.inputs[3]:
        return [node]
    known, pads, axes = ctx.type(node.inputs[0]), ctx.value(node.inputs[1]), \
        ctx.value(node.inputs[3])
    if known is None or pads is None or axes is None:
        raise OpError(f"{where(node, ctx.opset)}: the axes input needs a known rank and "
                      f"constant pads and axes to be written for versions before 18")
    widths = pad_widths(known.shape, pads, axes)
    full = ctx.constant(np.asarray([b for b, _ in widths] + [e for _, e in widths], np.int64),
                        f"{node.name}_pads")
    inputs = (node.inputs[0], full) + tuple(node.inputs[2:3])
    return [node.replace(inputs=tuple(n for n in inputs))]


def pad_wrap_downgrade(node: Node, ctx: Rewriter) -> list[Node]:
    if node.attrs.get("mode") == "wrap":
        raise OpError(f"{where(node, ctx.opset)}: mode 'wrap' appears in Pad version 19; "
                      f"export at opset >= 19")
    return [node]


def shape_slice_downgrade(node: Node, ctx: Rewriter) -> list[Node]:
    """Before 15 Shape has no start/end: slice the full shape."""
    attrs = dict(node.attrs)
    start, end = attrs.pop("start", 0) or 0, attrs.pop("end", None)
    if not start and end is None:
        return [node.replace(attrs=attrs)]
    full = ctx.fresh(f"{node.name}_full")
    bounds = [ctx.constant(np.asarray([v], np.int64), f"{node.name}_{k}")
              for k, v in (("start", start), ("end", (1 << 62) if end is None else end))]
    return [node.replace(outputs=(full,), attrs=attrs),
            Node("Slice", (full, *bounds), node.outputs, {}, f"{node.name}/slice")]


def gemm_bias_downgrade(node: Node, ctx: Rewriter) -> list[Node]:
    """Before 11 Gemm's C was required: a 0-d zero adds nothing."""
    if len(node.inputs) > 2 and node.inputs[2]:
        return [node]
    known = ctx.type(node.inputs[0])
    dtype = known.dtype if known is not None else np.dtype(np.float32)
    zero = ctx.constant(np.zeros((), dtype), f"{node.name}_c")
    return [node.replace(inputs=tuple(node.inputs[:2]) + (zero,))]


def dropout_to_onnx(node: Node, ctx: Rewriter) -> list[Node]:
    """portable's canonical Dropout carries the mode as an attribute (see portable/ops/nn.py):
    training_mode=1 becomes a constant ``true`` third input; 0 is ONNX's default."""
    attrs = dict(node.attrs)
    if not attrs.pop("training_mode", 0):
        return [node.replace(attrs=attrs)]
    inputs = list(node.inputs[:2]) + [""] * (2 - len(node.inputs[:2]))
    inputs.append(ctx.constant(np.asarray(True), f"{node.name}_training_mode"))
    return [node.replace(inputs=tuple(inputs), attrs=attrs)]
