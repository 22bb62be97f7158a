"""Shared type rules and helpers used by op declarations (ONNX broadcasting, axis handling)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from portable.ir.graph import TensorType
from portable.ops.registry import DtypeContext, InferContext
from portable.shapes import broadcast_shape


def broadcast_shapes(ctx: InferContext, shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """Multidirectional (NumPy-style) broadcasting as ONNX defines it; a mismatch fails naming
    the node and the shapes."""
    result = broadcast_shape(shapes)
    if result is None:
        ctx.fail(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} do not broadcast")
    return result


def same_dtype(ctx: InferContext, indices: Sequence[int]) -> np.dtype:
    dtypes = {ctx.dtype(i) for i in indices if ctx.has(i)}
    if len(dtypes) > 1:
        ctx.fail(f"inputs must share one dtype, got {sorted(d.name for d in dtypes)}")
    return dtypes.pop()


def same_as_input(ctx: InferContext) -> list[TensorType]:
    """Every output has input 0's type."""
    return [ctx.type(0)] * len(ctx.op.outputs)


def broadcast_elementwise(ctx: InferContext) -> list[TensorType]:
    """Output shape is the broadcast of all inputs, dtype is the inputs' common dtype."""
    present = [i for i in range(len(ctx)) if ctx.has(i)]
    shape = broadcast_shapes(ctx, [ctx.shape(i) for i in present])
    return [TensorType(shape, same_dtype(ctx, present))]


def broadcast_to_bool(ctx: InferContext) -> list[TensorType]:
    """Comparison ops: broadcast shape, boolean result."""
    shape = broadcast_shapes(ctx, [ctx.shape(0), ctx.shape(1)])
    same_dtype(ctx, (0, 1))
    return [TensorType(shape, np.bool_)]


def normalize_axis(ctx: InferContext, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        ctx.fail(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def normalize_axes(ctx: InferContext, axes: Sequence[int], rank: int) -> tuple[int, ...]:
    result = tuple(normalize_axis(ctx, int(a), rank) for a in axes)
    if len(set(result)) != len(result):
        ctx.fail(f"axes {tuple(axes)} repeat an axis")
    return result


def require_float(ctx: InferContext, index: int = 0) -> None:
    # bfloat16 (ml_dtypes, NumPy kind "V") computes like the other floats; ONNX allows it in
    # the float ops. float8/float4 are storage types (Cast, QuantizeLinear...), not accepted here.
    if ctx.dtype(index).kind != "f" and ctx.dtype(index).name != "bfloat16":
        ctx.fail(f"input {ctx.op.input_name(index)!r} must be floating point, "
                 f"got {ctx.dtype(index).name}")


def dtypes_of(*outputs: Any, inputs: Sequence[int] | None = None):
    """A dtype rule (``OpDef.dtype_rule``) for an op whose outputs do not all take the data's
    dtype (the default rule).

    Args:
        *outputs: one per output: ``"data"`` (the one dtype of the shared inputs), an input
            index (that input's dtype) or a dtype (fixed: ``np.int64``, ``np.bool_``).
        inputs: the inputs that share one dtype (default: the data inputs, all but those in
            ``nondiff_inputs``, ``ignored_inputs`` or ``shape_inputs``).

    Returns:
        The rule.

    Example:
        >>> rule = dtypes_of("data", np.int64)  # MaxPool: values, then int64 indices
    """
    specs = [s if isinstance(s, (str, int)) else np.dtype(s) for s in outputs]

    def rule(ctx: DtypeContext) -> list[np.dtype | None]:
        shared = ctx.data_inputs() if inputs is None else inputs
        data = ctx.unify(shared, [o for o, s in enumerate(specs)
                                  if isinstance(s, str) and o < len(ctx.outputs)])
        return [data if isinstance(s, str) else ctx.dtype(s) if isinstance(s, int) else s
                for s in specs[:len(ctx.outputs)]]
    return rule
