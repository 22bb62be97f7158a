"""Sequence and optional ops: SequenceEmpty, SequenceConstruct, SequenceAt, SequenceInsert,
SequenceErase, SequenceLength, SplitToSequence, ConcatFromSequence, Optional,
OptionalHasElement, OptionalGetElement, and SequenceMap, which runs a graph per element
(Identity, in elementwise.py, passes any type through).

Values: a sequence is a Python list of backend arrays, an optional is None or its value
(``portable.ir.types``). Every op here is ``dynamic_outputs``: the values it makes are never
planned; its kernel returns them (``portable/backend.py``). A tensor where a sequence (or an
optional) is expected fails naming the node, while types are inferred.

The ONNX semantics (position and split rules) are written once here as plain functions, and
the kernels (``backends/xp/kernels/sequence.py``) call them. None of these ops is
differentiable: portable's gradients flow through tensors only.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.dtypes import from_onnx
from portable.ir.graph import TensorType
from portable.ir.types import OptionalType, SequenceType, join, merge_elem
from portable.ops.registry import Attr, declare

POSITION_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
_INT64 = np.dtype(np.int64)
_BOOL = np.dtype(np.bool_)


# -- semantics shared with the kernels ----------------------------------------------------------


def position_index(position: int, length: int, *, insert: bool = False) -> int:
    """A sequence position as a list index: negative positions count from the back; SequenceAt
    and SequenceErase accept ``-length .. length-1``, SequenceInsert ``-length .. length``.

    Raises:
        IndexError: the position is out of range (the message gives the range).
    """
    high = length if insert else length - 1
    if not -length <= position <= high:
        raise IndexError(f"position {position} is out of range [{-length}, {high}] for a "
                         f"sequence of {length} tensors")
    return position + length if position < 0 else position


def split_sizes(dim: int, split: np.ndarray | None) -> list[int]:
    """The sizes of SplitToSequence's pieces along an axis of size ``dim``: ``split`` absent:
    pieces of 1; a scalar: pieces of that size, the last one smaller when it does not divide;
    a 1-D tensor: those sizes, which must sum to ``dim``.

    Raises:
        ValueError: naming the split and the dim.
    """
    if split is None:
        return [1] * dim
    split = np.asarray(split)
    if split.ndim == 0:
        size = int(split)
        if size <= 0:
            raise ValueError(f"split {size} must be positive")
        return [size] * (dim // size) + ([dim % size] if dim % size else [])
    sizes = [int(s) for s in split.reshape(-1).tolist()]
    if split.ndim != 1 or any(s < 0 for s in sizes) or sum(sizes) != dim:
        raise ValueError(f"split {sizes} must be non-negative sizes summing to {dim}")
    return sizes


# -- type rules ---------------------------------------------------------------------------------


def _sequence(ctx, index: int) -> SequenceType:
    """Input ``index``'s SequenceType; a tensor or optional there fails naming the node."""
    type_ = ctx.type(index)
    if not isinstance(type_, SequenceType):
        ctx.fail(f"input {ctx.op.input_name(index)!r} (#{index}) must be a sequence, got "
                 f"{type_!r}")
    return type_


def _tensor(ctx, index: int) -> TensorType:
    type_ = ctx.type(index)
    if not isinstance(type_, TensorType):
        ctx.fail(f"input {ctx.op.input_name(index)!r} (#{index}) must be a tensor, got "
                 f"{type_!r}")
    return type_


def _position(ctx, index: int) -> int | None:
    """The position input's value when known while planning (None: absent or run-time); its
    type must be an int32 / int64 scalar."""
    if not ctx.has(index):
        return None
    type_ = _tensor(ctx, index)
    if type_.dtype not in POSITION_DTYPES or type_.rank > 1 or (
            type_.rank == 1 and type_.shape[0] not in (1, None)):
        ctx.fail(f"position must be an int32 or int64 scalar, got {type_!r}")
    return int(np.asarray(ctx.values[index]).reshape(-1)[0]) if ctx.known(index) else None


def _elem(ctx, seq: SequenceType, what: str) -> TensorType:
    if seq.elem is None:
        ctx.fail(f"{what}: the rank of the elements of {ctx.node.inputs[0]!r} ({seq!r}) is "
                 f"not known while planning (it is empty, or its elements differ in rank)")
    return seq.elem


def _check_position(ctx, seq: SequenceType, position: int | None, insert: bool) -> None:
    if position is not None and seq.length is not None:
        try:
            position_index(position, seq.length, insert=insert)
        except IndexError as exc:
            ctx.fail(str(exc))


def _empty_infer(ctx):
    return [SequenceType(dtype=from_onnx(ctx.attrs["dtype"]), length=0)]


def _construct_infer(ctx):
    types = [_tensor(ctx, i) for i in range(len(ctx))]
    if not types:
        ctx.fail("SequenceConstruct takes at least one tensor")
    if len({t.dtype for t in types}) > 1:
        ctx.fail(f"the tensors must share one dtype, got {[t.dtype.name for t in types]}")
    elem = types[0]
    for type_ in types[1:]:
        elem = merge_elem(elem, type_)
    return [SequenceType(elem, types[0].dtype, len(types))]


def _at_infer(ctx):
    seq = _sequence(ctx, 0)
    position = _position(ctx, 1)
    if seq.length == 0:
        ctx.fail("the sequence is empty")
    _check_position(ctx, seq, position, insert=False)
    return [_elem(ctx, seq, "SequenceAt's output")]


def _insert_infer(ctx):
    seq, tensor = _sequence(ctx, 0), _tensor(ctx, 1)
    if seq.dtype is not None and tensor.dtype != seq.dtype:
        ctx.fail(f"the tensor is {tensor.dtype.name}; the sequence holds {seq.dtype.name}")
    _check_position(ctx, seq, _position(ctx, 2), insert=True)
    added = SequenceType(tensor, length=1)
    result = join(seq, added)
    length = None if seq.length is None else seq.length + 1
    return [SequenceType(result.elem if result is not None else None, tensor.dtype, length)]


def _erase_infer(ctx):
    seq = _sequence(ctx, 0)
    if seq.length == 0:
        ctx.fail("cannot erase from an empty sequence")
    _check_position(ctx, seq, _position(ctx, 1), insert=False)
    length = None if seq.length is None else seq.length - 1
    return [SequenceType(seq.elem, seq.dtype, length)]


def _length_infer(ctx):
    _sequence(ctx, 0)
    return [TensorType((), _INT64)]


def _split_infer(ctx):
    x = _tensor(ctx, 0)
    if x.rank == 0:
        ctx.fail("the input must have rank >= 1")
    if not -x.rank <= ctx.attrs["axis"] < x.rank:
        ctx.fail(f"axis {ctx.attrs['axis']} is out of range for rank {x.rank}")
    axis = ctx.attrs["axis"] % x.rank
    dim = x.shape[axis]
    if ctx.has(1):
        split = _tensor(ctx, 1)
        if split.dtype not in POSITION_DTYPES or split.rank > 1:
            ctx.fail(f"split must be an int32 or int64 scalar or 1-D tensor, got {split!r}")
        if not ctx.known(1) or dim is None:
            return [SequenceType(TensorType(x.shape[:axis] + (None,) + x.shape[axis + 1:],
                                            x.dtype))]
        try:
            sizes = split_sizes(dim, ctx.value(1))
        except ValueError as exc:
            ctx.fail(str(exc))
        elem = None
        for i, size in enumerate(sizes):
            piece = TensorType(x.shape[:axis] + (size,) + x.shape[axis + 1:], x.dtype)
            elem = piece if i == 0 else merge_elem(elem, piece)
        return [SequenceType(elem, x.dtype, len(sizes))]
    kept = (1,) if ctx.attrs["keepdims"] else ()
    return [SequenceType(TensorType(x.shape[:axis] + kept + x.shape[axis + 1:], x.dtype),
                         x.dtype, dim)]


def _concat_infer(ctx):
    seq = _sequence(ctx, 0)
    if seq.length == 0:
        ctx.fail("cannot concatenate an empty sequence")
    elem = _elem(ctx, seq, "ConcatFromSequence's output")
    new_axis = bool(ctx.attrs["new_axis"])
    rank = elem.rank + new_axis
    axis = ctx.attrs["axis"]
    if not -rank <= axis < rank or rank == 0:
        ctx.fail(f"axis {axis} is out of range for {'new_axis=1 and ' if new_axis else ''}"
                 f"elements of rank {elem.rank}")
    axis %= rank
    shape = list(elem.shape)
    if new_axis:
        shape.insert(axis, seq.length)
    else:
        shape[axis] = None if shape[axis] is None or seq.length is None \
            else shape[axis] * seq.length
    return [TensorType(shape, elem.dtype)]


def _optional_infer(ctx):
    if ctx.has(0):
        type_ = ctx.type(0)
        if isinstance(type_, OptionalType):
            ctx.fail(f"the input must be a tensor or a sequence, got {type_!r}")
        return [OptionalType(type_)]
    declared = ctx.attrs["type"]
    if declared is None:
        ctx.fail("an Optional without an input needs the 'type' attribute")
    if not isinstance(declared, (TensorType, SequenceType)):
        ctx.fail(f"attribute 'type' must be a tensor or sequence type, got {declared!r}")
    return [OptionalType(declared)]


def _has_element_infer(ctx):
    return [TensorType((), _BOOL)]


def _has_element_fold(ctx):
    """Known from the input's type unless it is an optional: an absent input holds nothing,
    a tensor or sequence always holds itself."""
    if ctx.has(0) and isinstance(ctx.type(0), OptionalType):
        return [None]
    return [np.array(ctx.has(0), dtype=_BOOL)]


def _length_fold(ctx):
    length = _sequence(ctx, 0).length
    return [None if length is None else np.array(length, dtype=_INT64)]


def _get_element_infer(ctx):
    type_ = ctx.type(0)
    return [type_.elem if isinstance(type_, OptionalType) else type_]


def sequence_map_layout(node_inputs: int, body: Any) -> tuple[int, int]:
    """``(mapped, captured)``: SequenceMap's node inputs are the ONNX ones (the sequence and
    the additional inputs), then the values its body reads from the enclosing scope
    (``portable/ir/graph.py``), which feed the body's last inputs."""
    captured = len(body.captures)
    return node_inputs - captured, captured


def _map_infer(ctx):
    from portable.ops.control_flow import body_types  # (control_flow imports this family)

    body = ctx.attrs["body"]
    mapped, _ = sequence_map_layout(len(ctx), body)
    _sequence(ctx, 0)
    if len(body.outputs) != len(ctx.node.outputs):
        ctx.fail(f"the body has {len(body.outputs)} outputs, the node {len(ctx.node.outputs)}")
    types, length = [], None
    for i in range(len(ctx)):
        type_ = ctx.type(i)
        if i < mapped and isinstance(type_, SequenceType):
            if type_.length is not None:
                if length is not None and type_.length != length:
                    ctx.fail(f"the sequences have different lengths ({length} and "
                             f"{type_.length})")
                length = type_.length
            type_ = _elem(ctx, type_, f"input #{i}'s elements")
        types.append(type_)
    _, outs = body_types(ctx, "body", types)
    for j, type_ in enumerate(outs):
        if type_ is not None and not isinstance(type_, TensorType):
            ctx.fail(f"body output {j} is {type_!r}; SequenceMap collects tensors")
    return [SequenceType(type_, None if type_ is None else type_.dtype, length)
            for type_ in outs]


def _map_dtypes(ctx):
    from portable.ops.control_flow import _body_dtypes  # (the If and Loop rules' helper)

    return _body_dtypes(ctx, "body", ctx.inputs)


def _dtype_of_input(index: int):
    """A dtype rule: the output's dtype is input ``index``'s (a sequence's or optional's is its
    elements')."""
    return lambda ctx: [ctx.dtype(index)]


def _fixed(dtype: Any):
    return lambda ctx: [np.dtype(dtype)]


_SEQ = dict(dynamic_outputs=True)

declare("SequenceEmpty", inputs=(), outputs=("output",), infer=_empty_infer, onnx_since=11,
        attrs={"dtype": Attr("int", 1)},
        dtype_rule=lambda ctx: [from_onnx(ctx.attrs["dtype"])], **_SEQ)
declare("SequenceConstruct", inputs=("inputs*",), outputs=("output_sequence",),
        infer=_construct_infer, onnx_since=11,
        dtype_rule=lambda ctx: [ctx.unify(range(len(ctx.inputs)))], **_SEQ)
declare("SequenceAt", inputs=("input_sequence", "position"), outputs=("tensor",),
        infer=_at_infer, onnx_since=11, nondiff_inputs=(1,), dtype_rule=_dtype_of_input(0),
        **_SEQ)
declare("SequenceInsert", inputs=("input_sequence", "tensor", "position?"),
        outputs=("output_sequence",), infer=_insert_infer, onnx_since=11, nondiff_inputs=(2,),
        dtype_rule=lambda ctx: [ctx.unify([0, 1])], **_SEQ)
declare("SequenceErase", inputs=("input_sequence", "position?"), outputs=("output_sequence",),
        infer=_erase_infer, onnx_since=11, nondiff_inputs=(1,),
        dtype_rule=_dtype_of_input(0), **_SEQ)
declare("SequenceLength", inputs=("input_sequence",), outputs=("length",),
        infer=_length_infer, onnx_since=11, fold=_length_fold, dtype_rule=_fixed(np.int64),
        **_SEQ)
declare("SplitToSequence", inputs=("input", "split?"), outputs=("output_sequence",),
        infer=_split_infer, onnx_since=24, nondiff_inputs=(1,),
        attrs={"axis": Attr("int", 0), "keepdims": Attr("int", 1)},
        dtype_rule=_dtype_of_input(0), **_SEQ)
declare("ConcatFromSequence", inputs=("input_sequence",), outputs=("concat_result",),
        infer=_concat_infer, onnx_since=11,
        attrs={"axis": Attr("int"), "new_axis": Attr("int", 0)},
        dtype_rule=_dtype_of_input(0), **_SEQ)
declare("Optional", inputs=("input?",), outputs=("output",), infer=_optional_infer,
        onnx_since=28, attrs={"type": Attr("type", None)},
        dtype_rule=lambda ctx: [ctx.dtype(0) if ctx.has(0) else
                                getattr(ctx.attrs["type"], "dtype", None)], **_SEQ)
declare("OptionalHasElement", inputs=("input?",), outputs=("output",),
        infer=_has_element_infer, onnx_since=28, fold=_has_element_fold,
        dtype_rule=_fixed(np.bool_), **_SEQ)
declare("OptionalGetElement", inputs=("input",), outputs=("output",),
        infer=_get_element_infer, onnx_since=28, dtype_rule=_dtype_of_input(0), **_SEQ)
declare("SequenceMap", inputs=("input_sequence", "additional_inputs*"),
        outputs=("out_sequence*",), infer=_map_infer, onnx_since=17,
        attrs={"body": Attr("graph")}, dtype_rule=_map_dtypes, **_SEQ)
