"""``nd.linalg``: MXNet 1.x's batched linear algebra on the last two axes, composed from the op
table's ops (MatMul, Transpose, Trilu, Gather ...) so that autograd differentiates every one.

Functions: ``gemm``, ``gemm2``, ``trmm``, ``syrk``, ``sumlogdiag``, ``extractdiag``,
``makediag``, ``extracttrian``, ``maketrian``, and, written as column-by-column recurrences of
the same ops, ``potrf`` (Cholesky), ``potri`` and ``trsm`` (for the small matrices MXNet scripts
factorise; the loops are unrolled per column). ``inverse``, ``det`` and ``slogdet`` run on the
op table's ``portable.Inverse`` and ``Det`` (LU with partial pivoting), whose gradient rules
autograd uses; ``syevd`` and ``gelqf`` on ``portable.Syevd`` and ``portable.Gelqf`` (eigen- and
LQ decompositions, with MXNet's signs and gradients).

Example:
    >>> import portable as mx
    >>> a = mx.nd.array([[4.0, 2.0], [2.0, 3.0]])
    >>> mx.nd.linalg.potrf(a).asnumpy().astype(float).round(3).tolist()
    [[2.0, 0.0], [1.0, 1.414]]
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.errors import OpError, ShapeError
from portable.ndarray.invoke import invoke
from portable.ndarray.ndarray import NDArray, array


def _ints(values: Any, like: NDArray) -> NDArray:
    return array(np.asarray(values, np.int64).reshape(-1), device=like.device, dtype=np.int64)


def _scalar(value: float, like: NDArray) -> NDArray:
    return array(np.asarray(value, like.dtype), device=like.device, dtype=like.dtype)


def _matrices(a: NDArray, name: str, square: bool = False) -> tuple[int, int]:
    if a.ndim < 2:
        raise ShapeError(f"linalg.{name}: needs a matrix or a batch of them, got shape {a.shape}")
    rows, cols = a.shape[-2:]
    if square and rows != cols:
        raise ShapeError(f"linalg.{name}: needs square matrices, got shape {a.shape}")
    return rows, cols


def _t(a: NDArray) -> NDArray:
    perm = list(range(a.ndim))
    perm[-2:] = perm[-1], perm[-2]
    return invoke("Transpose", [a], {"perm": perm})


def _check_axis(axis: int, name: str) -> None:
    if axis != -2:
        raise OpError(f"linalg.{name}: only axis=-2 (rows on the second-to-last axis) is "
                      f"supported, got axis={axis}")


def _scaled(x: NDArray, alpha: float) -> NDArray:
    return x if alpha == 1.0 else invoke("Mul", [x, _scalar(alpha, x)])


def gemm2(A: NDArray, B: NDArray, transpose_a: bool = False,  # noqa: N803 - MXNet's names
          transpose_b: bool = False, alpha: float = 1.0, axis: int = -2) -> NDArray:
    """``alpha * op(A) @ op(B)`` per matrix of the batch (op: transpose when asked).

    Example:
        >>> import portable as mx
        >>> gemm2(mx.nd.ones((2, 3)), mx.nd.ones((2, 3)), transpose_b=True).shape
        (2, 2)
    """
    _check_axis(axis, "gemm2")
    _matrices(A, "gemm2"), _matrices(B, "gemm2")
    a = _t(A) if transpose_a else A
    b = _t(B) if transpose_b else B
    return _scaled(invoke("MatMul", [a, b]), alpha)


def gemm(A: NDArray, B: NDArray, C: NDArray, transpose_a: bool = False,  # noqa: N803
         transpose_b: bool = False, alpha: float = 1.0, beta: float = 1.0,
         axis: int = -2) -> NDArray:
    """``alpha * op(A) @ op(B) + beta * C`` per matrix of the batch."""
    _check_axis(axis, "gemm")
    return invoke("Add", [gemm2(A, B, transpose_a, transpose_b, alpha), _scaled(C, beta)])


def _triangle(A: NDArray, lower: bool, k: int = 0) -> NDArray:
    return invoke("Trilu", [A, array(np.asarray(k, np.int64), device=A.device,
                                     dtype=np.int64)], {"upper": int(not lower)})


def trmm(A: NDArray, B: NDArray, transpose: bool = False, rightside: bool = False,  # noqa: N803
         lower: bool = True, alpha: float = 1.0) -> NDArray:
    """``alpha * op(A) @ B`` (``B @ op(A)`` with ``rightside``) for triangular ``A`` (only its
    ``lower`` or upper triangle is read)."""
    _matrices(A, "trmm", square=True)
    a = _triangle(A, lower)
    a = _t(a) if transpose else a
    return _scaled(invoke("MatMul", [B, a] if rightside else [a, B]), alpha)


def syrk(A: NDArray, transpose: bool = False, alpha: float = 1.0) -> NDArray:  # noqa: N803
    """``alpha * A @ A.T`` (``A.T @ A`` with ``transpose``)."""
    _matrices(A, "syrk")
    pair = [_t(A), A] if transpose else [A, _t(A)]
    return _scaled(invoke("MatMul", pair), alpha)


# -- diagonals and triangles as index maps --------------------------------------------------------
# Each is one Gather over the flattened matrices (or, to build matrices, over the packed values
# with a zero appended), so each has Gather's gradient.


def _flat_gather(x: NDArray, index: np.ndarray, shape: tuple) -> NDArray:
    flat = invoke("Reshape", [x, _ints(list(x.shape[:-2]) + [-1], x)])
    out = invoke("Gather", [flat, _ints(index, x)], {"axis": flat.ndim - 1})
    return invoke("Reshape", [out, _ints(list(flat.shape[:-1]) + list(shape), out)])


def _diag_positions(rows: int, cols: int, offset: int) -> np.ndarray:
    i = np.arange(rows)[:, None]
    j = np.arange(cols)[None, :]
    return np.flatnonzero((j - i) == offset)


def _trian_positions(n: int, offset: int, lower: bool) -> np.ndarray:
    """Flat positions of a triangle in MXNet's packing order: a lower triangle row by row, an
    upper one column by column."""
    if offset > 0 or (offset == 0 and not lower):
        mask = np.triu(np.ones((n, n), bool), offset)
        rows, cols = np.nonzero(mask.T)
        return cols * n + rows
    return np.flatnonzero(np.tril(np.ones((n, n), bool), offset))


def extractdiag(A: NDArray, offset: int = 0) -> NDArray:  # noqa: N803
    """The ``offset`` diagonal of each matrix: shape (..., length)."""
    rows, cols = _matrices(A, "extractdiag")
    index = _diag_positions(rows, cols, offset)
    if not len(index):
        raise ShapeError(f"linalg.extractdiag: offset {offset} is outside matrices of shape "
                         f"{(rows, cols)}")
    return _flat_gather(A, index, (len(index),))


def _scatter(values: NDArray, n: int, positions: np.ndarray, name: str) -> NDArray:
    """(..., k) values placed at ``positions`` of (n*n) matrices, zeros elsewhere."""
    k = values.shape[-1]
    zero = invoke("Mul", [invoke("Slice", [values, _ints(0, values), _ints(1, values),
                                           _ints(-1, values)]), _scalar(0, values)])
    padded = invoke("Concat", [values, zero], {"axis": -1})
    index = np.full(n * n, k, np.int64)
    index[positions] = np.arange(k)
    out = invoke("Gather", [padded, _ints(index, values)], {"axis": values.ndim - 1})
    return invoke("Reshape", [out, _ints(list(values.shape[:-1]) + [n, n], out)])


def makediag(A: NDArray, offset: int = 0) -> NDArray:  # noqa: N803
    """Square matrices with the vectors of ``A`` (..., k) on their ``offset`` diagonal."""
    if A.ndim < 1:
        raise ShapeError("linalg.makediag: needs at least one axis")
    n = A.shape[-1] + abs(offset)
    return _scatter(A, n, _diag_positions(n, n, offset), "makediag")


def extracttrian(A: NDArray, offset: int = 0, lower: bool = True) -> NDArray:  # noqa: N803
    """The ``lower`` (or upper) triangle of each square matrix from diagonal ``offset``, packed
    row by row into a vector."""
    n, _ = _matrices(A, "extracttrian", square=True)
    if abs(offset) >= n:
        raise ShapeError(f"linalg.extracttrian: offset {offset} is outside {n}x{n} matrices")
    index = _trian_positions(n, offset, lower)
    return _flat_gather(A, index, (len(index),))


def maketrian(A: NDArray, offset: int = 0, lower: bool = True) -> NDArray:  # noqa: N803
    """Triangular matrices from vectors packed as ``extracttrian`` packs them."""
    length = A.shape[-1]
    m = int(round((np.sqrt(8 * length + 1) - 1) / 2))
    if m * (m + 1) // 2 != length:
        raise ShapeError(f"linalg.maketrian: {length} values are not a triangle's count")
    n = m + abs(offset)
    return _scatter(A, n, _trian_positions(n, offset, lower), "maketrian")


def sumlogdiag(A: NDArray) -> NDArray:  # noqa: N803
    """``sum(log(diag(A)))`` per matrix of the batch."""
    _matrices(A, "sumlogdiag", square=True)
    logs = invoke("Log", [extractdiag(A)])
    out = invoke("ReduceSum", [logs, _ints(-1, logs)], {"keepdims": 0})
    # MXNet 1.x has no 0-d arrays: one matrix gives shape (1,)
    return out if out.ndim else invoke("Reshape", [out, _ints([1], out)])


# -- factorisations and solves as unrolled recurrences ----------------------------------------
# Each step is a few ops on one column (or row), so autograd differentiates through the whole
# recurrence; the cost grows with n ops per matrix size, which suits the small matrices (kernel
# covariances, transforms) these are used for.


def _part(x: NDArray, start: int, stop: int, axis: int) -> NDArray:
    return invoke("Slice", [x, _ints(start, x), _ints(stop, x), _ints(axis, x)])


def _column_mask(n: int, first: int, like: NDArray) -> NDArray:
    mask = (np.arange(n) >= first).astype(like.dtype).reshape(n, 1)
    return array(mask, device=like.device, dtype=like.dtype)


def potrf(A: NDArray) -> NDArray:  # noqa: N803
    """The lower Cholesky factor ``L`` (``A = L @ L.T``) of each symmetric positive definite
    matrix; only ``A``'s lower triangle is read."""
    n, _ = _matrices(A, "potrf", square=True)
    columns: list[NDArray] = []
    for j in range(n):
        v = _part(A, j, j + 1, -1)                       # (..., n, 1)
        if columns:
            done = invoke("Concat", columns, {"axis": -1})  # (..., n, j)
            v = invoke("Sub", [v, invoke("MatMul", [done, _t(_part(done, j, j + 1, -2))])])
        pivot = invoke("Sqrt", [_part(v, j, j + 1, -2)])
        columns.append(invoke("Mul", [invoke("Div", [v, pivot]), _column_mask(n, j, v)]))
    return invoke("Concat", columns, {"axis": -1})


def trsm(A: NDArray, B: NDArray, transpose: bool = False, rightside: bool = False,  # noqa: N803
         lower: bool = True, alpha: float = 1.0) -> NDArray:
    """``X`` solving ``op(A) @ X = alpha * B`` (``X @ op(A) = alpha * B`` with ``rightside``)
    for triangular ``A`` (its ``lower`` or upper triangle)."""
    n, _ = _matrices(A, "trsm", square=True)
    _matrices(B, "trsm")
    tri = _triangle(A, lower)
    op_a = _t(tri) if transpose else tri
    if rightside:  # X op(A) = B  <=>  op(A).T X.T = B.T
        return _t(_solve_triangular(_t(op_a), _t(_scaled(B, alpha)), lower == transpose, n))
    return _solve_triangular(op_a, _scaled(B, alpha), lower != transpose, n)


def _solve_triangular(T: NDArray, B: NDArray, lower: bool, n: int) -> NDArray:  # noqa: N803
    """Forward (``lower``) or back substitution, one row of ``X`` per step."""
    rows: dict[int, NDArray] = {}
    order = range(n) if lower else range(n - 1, -1, -1)
    for i in order:
        t_row = _part(T, i, i + 1, -2)                   # (..., 1, n)
        b = _part(B, i, i + 1, -2)                       # (..., 1, k)
        known = sorted(rows)
        if known:
            lo, hi = (0, i) if lower else (i + 1, n)
            solved = invoke("Concat", [rows[k] for k in range(lo, hi)], {"axis": -2})
            b = invoke("Sub", [b, invoke("MatMul", [_part(t_row, lo, hi, -1), solved])])
        rows[i] = invoke("Div", [b, _part(t_row, i, i + 1, -1)])
    return invoke("Concat", [rows[i] for i in range(n)], {"axis": -2})


def potri(A: NDArray) -> NDArray:  # noqa: N803
    """``inv(L @ L.T)`` from the lower Cholesky factor ``A = L`` (as ``potrf`` returns it)."""
    n, _ = _matrices(A, "potri", square=True)
    eye = array(np.broadcast_to(np.eye(n, dtype=A.dtype), A.shape).copy(), device=A.device,
                dtype=A.dtype)
    l_inv = trsm(A, eye)                                  # inv(L)
    return invoke("MatMul", [_t(l_inv), l_inv])


# -- inverse and determinants on the Det and portable.Inverse ops ---------------------------------


def _at_least_1d(x: NDArray) -> NDArray:
    # MXNet 1.x has no 0-d arrays: one matrix's determinant has shape (1,)
    return x if x.ndim else invoke("Reshape", [x, _ints([1], x)])


def inverse(A: NDArray) -> NDArray:  # noqa: N803
    """The inverse of each square matrix of ``A`` (..., n, n); a singular matrix raises (on
    the CPU; other devices give inf or nan).

    Example:
        >>> import portable as mx
        >>> mx.nd.linalg.inverse(mx.nd.array([[2.0, 0.0], [0.0, 4.0]])).asnumpy().tolist()
        [[0.5, 0.0], [0.0, 0.25]]
    """
    _matrices(A, "inverse", square=True)
    return invoke("portable.Inverse", [A])


def det(A: NDArray) -> NDArray:  # noqa: N803
    """The determinant of each square matrix of ``A`` (..., n, n): shape (...), or (1,) for
    one matrix.

    Example:
        >>> import portable as mx
        >>> mx.nd.linalg.det(mx.nd.array([[2.0, 3.0], [1.0, 4.0]])).asnumpy().tolist()
        [5.0]
    """
    _matrices(A, "det", square=True)
    return _at_least_1d(invoke("Det", [A]))


def slogdet(A: NDArray) -> tuple[NDArray, NDArray]:  # noqa: N803
    """``(sign, logabsdet)``: the sign of each determinant and the log of its magnitude, in
    MXNet's order and shapes ((...), or (1,) for one matrix); a singular matrix gives sign 0
    and -inf.

    Both come from ``det`` (``sign(det)``, ``log(abs(det))``), not from the LU factors' logs:
    exact for the well-conditioned, moderately sized matrices this is called on, but a
    determinant beyond the dtype's range (very large n) overflows to inf or underflows to 0.
    Only ``logabsdet`` carries a gradient (``inv(A).T``), as in MXNet.

    Example:
        >>> import portable as mx
        >>> sign, logabsdet = mx.nd.linalg.slogdet(mx.nd.array([[1.0, 2.0], [4.0, 3.0]]))
        >>> sign.asnumpy().tolist(), logabsdet.asnumpy().astype(float).round(4).tolist()
        ([-1.0], [1.6094])
    """
    _matrices(A, "slogdet", square=True)
    value = det(A)
    return invoke("Sign", [value]), invoke("Log", [invoke("Abs", [value])])


# -- eigen- and LQ decompositions on the portable.Syevd and portable.Gelqf ops --------------------


def syevd(A: NDArray) -> tuple[NDArray, NDArray]:  # noqa: N803
    """``(U, L)``: the eigendecomposition ``A = U.T @ diag(L) @ U`` of each symmetric matrix of
    ``A`` (..., n, n) (only its lower triangle is read): the rows of ``U`` are orthonormal
    eigenvectors, ``L`` (..., n) the eigenvalues in ascending order. As in MXNet, each row of
    ``U`` is signed so that its largest-magnitude entry (the first, on ties) is positive, and
    the gradient (the one over symmetric matrices) needs distinct eigenvalues. CPU only: the
    OpenCL backend refuses it.

    Example:
        >>> import portable as mx
        >>> U, L = mx.nd.linalg.syevd(mx.nd.array([[1.0, 2.0], [2.0, 4.0]]))
        >>> U.asnumpy().astype(float).round(4).tolist(), L.asnumpy().astype(float).round(4).tolist()
        ([[0.8944, -0.4472], [0.4472, 0.8944]], [0.0, 5.0])
    """
    _matrices(A, "syevd", square=True)
    return invoke("portable.Syevd", [A], num_outputs=2)


def gelqf(A: NDArray) -> tuple[NDArray, NDArray]:  # noqa: N803
    """``(Q, L)``: the LQ factorisation ``A = L @ Q`` of each matrix of ``A`` (..., m, n),
    ``m <= n``, of full rank: ``Q`` (..., m, n) with orthonormal rows, ``L`` (..., m, m) lower
    triangular, with LAPACK's signs (Householder reflections: the diagonal of ``L`` has either
    sign), as in MXNet. CPU only: the OpenCL backend refuses it.

    Example:
        >>> import portable as mx
        >>> Q, L = mx.nd.linalg.gelqf(mx.nd.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
        >>> L.asnumpy().astype(float).round(4).tolist()
        [[-3.7417, 0.0], [-8.5524, 1.964]]
    """
    rows, cols = _matrices(A, "gelqf")
    if rows > cols:
        raise ShapeError(f"linalg.gelqf: needs matrices with no more rows than columns "
                         f"(m <= n), got shape {A.shape}")
    return invoke("portable.Gelqf", [A], num_outputs=2)
