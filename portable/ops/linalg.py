"""Linear algebra ops: MatMul, Gemm, Einsum, Trilu, Det and the private portable.Inverse,
portable.Syevd (symmetric eigendecomposition) and portable.Gelqf (LQ factorisation)."""
from __future__ import annotations

import string
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from portable.ir.graph import TensorType
from portable.ops.registry import Attr, declare
from portable.ops.rules import broadcast_shapes, require_float, same_dtype


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


# -- Einsum -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EinsumSpec:
    """An Einsum equation with every ellipsis spelled out as spare letters: one label string
    per operand, the output's, and each label's size after broadcasting."""

    inputs: tuple[str, ...]
    output: str
    sizes: dict[str, int]


def _spell_term(term: str, rank: int, ellipsis: str) -> str:
    """``term`` with its ellipsis as the trailing labels of ``ellipsis`` (right-aligned, as
    broadcasting aligns shapes); raises ValueError when the rank does not fit."""
    labels = term.replace("...", "")
    if term.count("...") > 1 or "." in labels:
        raise ValueError(f"term {term!r} has a malformed ellipsis")
    if "..." not in term:
        if len(labels) != rank:
            raise ValueError(f"term {term!r} has {len(labels)} labels for rank {rank}")
        return term
    extra = rank - len(labels)
    if extra < 0:
        raise ValueError(f"term {term!r} has more labels than rank {rank}")
    return term.replace("...", ellipsis[len(ellipsis) - extra:])


def parse_einsum(equation: str, shapes: Sequence[tuple[int, ...]]) -> EinsumSpec:
    """Parse ``equation`` for operands of ``shapes`` (NumPy's rules: implicit output is the
    ellipsis then the labels used once, sorted; size-1 axes broadcast; ellipsis axes missing
    from an explicit output are summed, as ``np.einsum(..., optimize=True)`` does).

    Raises ValueError naming the problem.
    """
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"{len(terms)} terms for {len(shapes)} operands")
    bad = (set(lhs) - set(string.ascii_letters + ",.")) | \
        (set(rhs) - set(string.ascii_letters + "."))
    if bad:
        raise ValueError(f"unexpected characters {sorted(bad)}: labels are letters")
    rank = max([len(s) - len(t.replace("...", "")) for t, s in zip(terms, shapes)
                if "..." in t] + [0])
    spare = [c for c in string.ascii_letters if c not in eq][:rank]
    if len(spare) < rank:
        raise ValueError("too many labels")
    ellipsis = "".join(spare)
    spelled = tuple(_spell_term(t, len(s), ellipsis) for t, s in zip(terms, shapes))
    sizes: dict[str, int] = {}
    for term, shape in zip(spelled, shapes):
        for label, dim in zip(term, shape):
            old = sizes.setdefault(label, dim)
            if old != dim and 1 not in (old, dim):
                raise ValueError(f"label {label!r} has sizes {old} and {dim}")
            sizes[label] = dim if old == 1 else old
    if arrow:
        output = _spell_term(rhs, rank + len(rhs.replace("...", "")), ellipsis) \
            if "..." in rhs else rhs
        unknown = set(output) - set(sizes)
        if len(set(output)) != len(output) or unknown:
            raise ValueError(f"output {rhs!r} repeats a label or uses one no operand has")
    else:
        counts = Counter(lhs.replace("...", "").replace(",", ""))
        output = ellipsis + "".join(sorted(c for c, n in counts.items() if n == 1))
    return EinsumSpec(spelled, output, sizes)


def _einsum_infer(ctx):
    shapes = [ctx.shape(i) for i in range(len(ctx))]
    if not shapes:
        ctx.fail("Einsum needs at least one operand")
    try:
        spec = parse_einsum(ctx.attrs["equation"], shapes)
    except ValueError as exc:
        ctx.fail(f"equation {ctx.attrs['equation']!r}: {exc}")
    dtype = same_dtype(ctx, range(len(ctx)))
    return [TensorType([spec.sizes[label] for label in spec.output], dtype)]


def _einsum_grad(g, dys):
    """dX_k = Einsum(dY, the other operands) over the labels of X_k that the output or another
    operand has. Then: a label X_k repeats (a diagonal) is spread back by an identity tensor,
    labels only X_k has come back by Expand, and broadcast size-1 axes are summed."""
    spec = parse_einsum(g.attrs["equation"], [g.shape(x) for x in g.inputs])
    # Operands with their broadcast size-1 axes dropped, so every label has one size.
    operands = []
    for x, term in zip(g.inputs, spec.inputs):
        shape = g.shape(x)
        keep = [k for k, label in enumerate(term) if shape[k] == spec.sizes[label]]
        if len(keep) < len(term):
            x = _reshape(g, x, [shape[k] for k in keep])
        operands.append((x, "".join(term[k] for k in keep), keep))
    spare = iter(c for c in string.ascii_letters
                 if c not in spec.sizes and c not in g.attrs["equation"])
    grads = []
    for k, (x, own, keep) in enumerate(operands):
        if g.dtype(x).kind != "f":
            grads.append(None)
            continue
        others = operands[:k] + operands[k + 1:]
        reached = set(spec.output).union(*(t for _, t, _ in others))
        target = "".join(label for label in dict.fromkeys(own) if label in reached)
        equation = ",".join([spec.output] + [t for _, t, _ in others]) + "->" + target
        grad = g.emit("Einsum", dys[0], *(h for h, _, _ in others), equation=equation)
        if len(set(own)) < len(own):
            grad, present = _spread_diagonals(g, grad, target, own, spec.sizes, spare)
        else:
            present = [label in target for label in own]
        shape = g.shape(g.inputs[k])
        kept = dict(zip(keep, present))
        full = [shape[p] if kept.get(p) else 1 for p in range(len(shape))]
        if len(g.shape(grad)) != len(shape):
            grad = _reshape(g, grad, full)
        if tuple(full) != shape:
            grad = g.emit("Expand", grad, g.const(np.asarray(shape, np.int64)))
        grads.append(grad)
    return grads


def _spread_diagonals(g, grad, target, own, sizes, spare):
    """``grad`` (labels ``target``) onto the axes of a term that repeats labels: each repeat
    becomes a fresh label tied to the first by an identity (delta) tensor. Returns the result
    and, per axis of ``own``, whether it is present in it (else it is a size-1 axis)."""
    copies: dict[str, list[str]] = {}
    renamed = []
    for label in own:
        name = next(spare) if label in copies else label
        copies.setdefault(label, []).append(name)
        renamed.append(name)
    deltas, terms = [], [target]
    for label, names in copies.items():
        if len(names) > 1:
            n = sizes[label]
            delta = np.zeros((n,) * len(names), g.dtype(grad))
            delta[(np.arange(n),) * len(names)] = 1
            deltas.append(g.const(delta))
            terms.append("".join(names))
    present = [label in target or len(copies[label]) > 1 for label in own]
    out = "".join(name for name, keep in zip(renamed, present) if keep)
    return g.emit("Einsum", grad, *deltas, equation=",".join(terms) + "->" + out), present


declare("Einsum", inputs=("Inputs*",), outputs=("Output",), infer=_einsum_infer,
        onnx_since=28, attrs={"equation": Attr("string")}, grad=_einsum_grad)

# -- Trilu -----------------------------------------------------------------------------------


def trilu_mask(rows: int, cols: int, k: int, upper: bool) -> np.ndarray:
    """Which elements of a (rows, cols) matrix Trilu keeps: on or above diagonal ``k``
    (``upper``), else on or below it."""
    return (np.triu if upper else np.tril)(np.ones((rows, cols), bool), k)


def _trilu_infer(ctx):
    shape = ctx.shape(0)
    if len(shape) < 2:
        ctx.fail(f"Trilu needs an input of rank >= 2 (a stack of matrices), got shape {shape}")
    if ctx.has(1) and len(ctx.shape(1)) != 0:
        ctx.fail(f"k must be a scalar, got shape {ctx.shape(1)}")
    return [TensorType(shape, ctx.dtype(0))]


def _trilu_grad(g, dys):
    # the same mask passes the gradient through; k is an integer, with no gradient
    return [g.emit("Trilu", dys[0], *g.inputs[1:], upper=g.attrs["upper"])] + \
        [None] * (len(g.inputs) - 1)


declare("Trilu", inputs=("input", "k?"), outputs=("output",), infer=_trilu_infer,
        attrs={"upper": Attr("int", 1)}, onnx_since=14, grad=_trilu_grad, nondiff_inputs=(1,))


# -- Det and Inverse: batched over the leading axes of (..., M, M) --------------------------------


def _square_stack(ctx) -> tuple[int, ...]:
    """The shape of a stack of square matrices (rank >= 2, the last two axes equal)."""
    shape = ctx.shape(0)
    require_float(ctx, 0)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        ctx.fail(f"{ctx.op.short_name} needs square matrices (..., M, M), got shape {shape}")
    return shape


def _det_infer(ctx):
    return [TensorType(_square_stack(ctx)[:-2], ctx.dtype(0))]


def _inverse_infer(ctx):
    return [TensorType(_square_stack(ctx), ctx.dtype(0))]


def _det_grad(g, dys):
    # d det(A) = det(A) * inv(A)^T, scaled per matrix by the head gradient
    a = g.inputs[0]
    scale = g.emit("Mul", dys[0], g.outputs[0])
    scale = g.emit("Unsqueeze", scale, g.const(np.asarray([-2, -1], np.int64)))
    return [g.emit("Mul", scale, _swap_last(g, g.emit("portable.Inverse", a)))]


def _inverse_grad(g, dys):
    # Y = inv(A): dA = -Y^T @ dY @ Y^T
    yt = _swap_last(g, g.outputs[0])
    return [g.emit("Neg", g.emit("MatMul", g.emit("MatMul", yt, dys[0]), yt))]


declare("Det", inputs=("X",), outputs=("Y",), infer=_det_infer, onnx_since=22, grad=_det_grad)
declare("Inverse", domain="portable", inputs=("X",), outputs=("Y",), infer=_inverse_infer,
        grad=_inverse_grad,
        doc="The inverse of each square matrix of a stack (..., M, M). ONNX has no such op "
            "and no short decomposition into ONNX ops, so it is not exported.")


# -- Syevd and Gelqf: MXNet's eigen- and LQ decompositions, batched over the leading axes ----------


def _syevd_infer(ctx):
    shape = _square_stack(ctx)
    return [TensorType(shape, ctx.dtype(0)), TensorType(shape[:-1], ctx.dtype(0))]


def _gelqf_infer(ctx):
    shape = ctx.shape(0)
    require_float(ctx, 0)
    if len(shape) < 2 or shape[-2] > shape[-1]:
        ctx.fail(f"Gelqf needs matrices (..., M, N) with M <= N (full row rank), got shape "
                 f"{shape}")
    m = shape[-2]
    return [TensorType(shape, ctx.dtype(0)), TensorType(shape[:-1] + (m,), ctx.dtype(0))]


def _unsqueeze(g, x, axis: int):
    return g.emit("Unsqueeze", x, g.const(np.asarray([axis], np.int64)))


# The smallest eigengap Syevd's gradient divides by, as MXNet clamps it (la_op-inl.h); float16
# (which MXNet lacks) takes its smallest normal number, as 1e-30 would round to zero.
_EIGENGAP_FLOOR = {np.dtype(np.float64): 1e-100, np.dtype(np.float32): 1e-30}


def _syevd_grad(g, dys):
    """(U, L) = syevd(A), A = U^T diag(L) U: dA = U^T Y U with Y symmetric, Y_ii = dL_i and,
    for i > j, Y_ij = Y_ji = (X_ij - X_ji) / (2 max(L_i - L_j, eps)), X = dU U^T (MXNet's
    SyevdBackHelper). That is the gradient over symmetric A, symmetrised: the forward reads only
    the lower triangle, but A is meant to be symmetric. Written as Y = Z * S + diag(dL), with
    Z = (X - X^T) / (2 max(|L_i - L_j|, eps)) antisymmetric and S the sign of i - j."""
    u, lam = g.outputs
    du, dl = dys
    if du is None and dl is None:
        return [None]
    n = g.shape(u)[-1]
    dtype = g.dtype(u)
    ut = _swap_last(g, u)
    parts = []
    if du is not None:
        x = g.emit("MatMul", du, ut)
        gap = g.emit("Abs", g.emit("Sub", _unsqueeze(g, lam, -1), _unsqueeze(g, lam, -2)))
        eps = _EIGENGAP_FLOOR.get(np.dtype(dtype), float(np.finfo(dtype).tiny))
        denom = g.emit("Mul", g.emit("Max", gap, g.scalar(eps, gap)), g.scalar(2.0, gap))
        z = g.emit("Div", g.emit("Sub", x, _swap_last(g, x)), denom)
        side = np.sign(np.arange(n)[:, None] - np.arange(n)[None, :]).astype(dtype)
        parts.append(g.emit("Mul", z, g.const(side)))
    if dl is not None:
        parts.append(g.emit("Mul", _unsqueeze(g, dl, -1), g.const(np.eye(n, dtype=dtype))))
    y = parts[0] if len(parts) == 1 else g.emit("Add", *parts)
    return [g.emit("MatMul", g.emit("MatMul", ut, y), u)]


def _gelqf_grad(g, dys):
    """(Q, L) = gelqf(A), A = L Q: dA = L^-T (dQ + copyltu(M) Q), M = L^T dL - dQ Q^T, where
    copyltu(M) mirrors M's lower triangle onto its upper one (MXNet's gelqf_backward)."""
    q, low = g.outputs
    dq, dl = dys
    if dq is None and dl is None:
        return [None]
    terms = []
    if dl is not None:
        terms.append(g.emit("MatMul", _swap_last(g, low), dl))
    if dq is not None:
        dqqt = g.emit("MatMul", dq, _swap_last(g, q))
        terms.append(g.emit("Sub", terms.pop(), dqqt) if terms else g.emit("Neg", dqqt))
    m = terms[0]
    below = g.emit("Trilu", m, g.const(np.asarray(-1, np.int64)), upper=0)
    mirrored = g.emit("Add", g.emit("Trilu", m, g.const(np.asarray(0, np.int64)), upper=0),
                      _swap_last(g, below))
    inner = g.emit("MatMul", mirrored, q)
    if dq is not None:
        inner = g.emit("Add", dq, inner)
    l_inv_t = _swap_last(g, g.emit("portable.Inverse", low))
    return [g.emit("MatMul", l_inv_t, inner)]


declare("Syevd", domain="portable", inputs=("A",), outputs=("U", "L"), infer=_syevd_infer,
        grad=_syevd_grad,
        doc="MXNet's linalg.syevd: for each symmetric matrix of a stack (..., M, M) (only the "
            "lower triangle is read), U (..., M, M) whose rows are orthonormal eigenvectors and "
            "L (..., M) the eigenvalues, ascending, with A = U^T diag(L) U. Each row of U has "
            "its largest-magnitude entry positive (the first such on ties), as MXNet makes "
            "it. The gradient is MXNet's: symmetric, and defined for distinct eigenvalues. Not "
            "exported: ONNX has no eigendecomposition.")
declare("Gelqf", domain="portable", inputs=("A",), outputs=("Q", "L"), infer=_gelqf_infer,
        grad=_gelqf_grad,
        doc="MXNet's linalg.gelqf: the LQ factorisation A = L Q of each matrix of a stack "
            "(..., M, N), M <= N, full row rank: Q (..., M, N) with orthonormal rows and L "
            "(..., M, M) lower triangular, with LAPACK's signs (gelqf + orglq: Householder "
            "reflections, so the diagonal of L has either sign). Not exported: ONNX has no "
            "such factorisation.")
