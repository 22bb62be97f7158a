"""Linear algebra ops: MatMul, Gemm, Einsum."""
from __future__ import annotations

import numpy as np

from portable.ir.graph import TensorType
from portable.ops.registry import Attr, declare
from portable.ops.rules import broadcast_shapes, same_dtype


def _matmul_infer(ctx):
    a, b = ctx.shape(0), ctx.shape(1)
    dtype = same_dtype(ctx, (0, 1))
    if not a or not b:
        ctx.fail("MatMul inputs must have rank >= 1")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        ctx.fail(f"inner dimensions differ: {a} @ {b}")
    batch = broadcast_shapes(ctx, [a2[:-2], b2[:-2]])
    out = list(batch) + ([a2[-2]] if len(a) > 1 else []) + ([b2[-1]] if len(b) > 1 else [])
    return [TensorType(out, dtype)]


def _swap_last(g, x):
    rank = len(g.shape(x))
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    return g.emit("Transpose", x, perm=perm)


def _matmul_grad(g, dys):
    a, b = g.inputs
    dy = dys[0]
    a_shape, b_shape = g.shape(a), g.shape(b)
    # Promote 1-D operands to matrices so one formula covers every case, then undo.
    a2 = g.emit("Reshape", a, g.const(np.asarray((1,) + a_shape, np.int64))) \
        if len(a_shape) == 1 else a
    b2 = g.emit("Reshape", b, g.const(np.asarray(b_shape + (1,), np.int64))) \
        if len(b_shape) == 1 else b
    out_shape = list(g.shape(dy))
    if len(a_shape) == 1:
        out_shape.insert(len(out_shape) - (0 if len(b_shape) == 1 else 1), 1)
    if len(b_shape) == 1:
        out_shape.append(1)
    dy2 = g.emit("Reshape", dy, g.const(np.asarray(out_shape, np.int64)))
    da = g.sum_to(g.emit("MatMul", dy2, _swap_last(g, b2)), a2)
    db = g.sum_to(g.emit("MatMul", _swap_last(g, a2), dy2), b2)
    return [g.sum_to(da, a) if a2 is a else _reshape(g, da, a_shape),
            g.sum_to(db, b) if b2 is b else _reshape(g, db, b_shape)]


def _reshape(g, x, shape):
    return g.emit("Reshape", x, g.const(np.asarray(shape, np.int64)))


declare("MatMul", inputs=("A", "B"), outputs=("Y",), infer=_matmul_infer, onnx_since=13,
        grad=_matmul_grad)


def _gemm_infer(ctx):
    a, b = ctx.shape(0), ctx.shape(1)
    if len(a) != 2 or len(b) != 2:
        ctx.fail("Gemm takes 2-D A and B")
    m, k = a[::-1] if ctx.attrs["transA"] else a
    k2, n = b[::-1] if ctx.attrs["transB"] else b
    if k != k2:
        ctx.fail(f"inner dimensions differ: A{a} (transA={ctx.attrs['transA']}) and "
                 f"B{b} (transB={ctx.attrs['transB']})")
    if ctx.has(2):
        c = ctx.shape(2)
        if broadcast_shapes(ctx, [c, (m, n)]) != (m, n):
            ctx.fail(f"C{c} does not broadcast to ({m}, {n})")
    return [TensorType((m, n), same_dtype(ctx, (0, 1, 2)))]


def _gemm_grad(g, dys):
    a, b = g.inputs[:2]
    c = g.inputs[2] if len(g.inputs) > 2 else None
    alpha, beta = g.attrs["alpha"], g.attrs["beta"]
    ta, tb = g.attrs["transA"], g.attrs["transB"]
    dy = dys[0]
    if alpha != 1.0:
        dy = g.emit("Mul", dy, g.scalar(alpha, dy))
    # Y = op(A) op(B): d op(A) = dY op(B)^T, d op(B) = op(A)^T dY
    if ta:
        da = g.emit("Gemm", b, dy, transA=tb, transB=1)
    else:
        da = g.emit("Gemm", dy, b, transA=0, transB=0 if tb else 1)
    if tb:
        db = g.emit("Gemm", dy, a, transA=1, transB=ta)
    else:
        db = g.emit("Gemm", a, dy, transA=0 if ta else 1, transB=0)
    dc = None
    if c is not None:
        dc = dys[0] if beta == 1.0 else g.emit("Mul", dys[0], g.scalar(beta, dys[0]))
        dc = g.sum_to(dc, c)
    return [da, db, dc]


declare("Gemm", inputs=("A", "B", "C?"), outputs=("Y",), infer=_gemm_infer, onnx_since=13,
        attrs={"alpha": Attr("float", 1.0), "beta": Attr("float", 1.0),
               "transA": Attr("int", 0), "transB": Attr("int", 0)},
        grad=_gemm_grad)
