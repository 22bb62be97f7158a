"""``mx.np.linalg``: ``norm`` composed from declared ops, ``inv``, ``det`` and ``slogdet`` on the
op table's ``portable.Inverse`` and ``Det``, ``eigh`` and ``eigvalsh`` on ``portable.Syevd``
(all differentiable); ``svd``, ``pinv`` and ``solve`` are worked out on the host with NumPy (no
declared op computes them yet, so they are not differentiable: calling one on an array that
autograd records raises).

Example:
    >>> import portable as mx
    >>> float(mx.np.linalg.norm(mx.np.array([3.0, 4.0])))
    5.0
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.errors import NotDifferentiableError, ShapeError
from portable.ndarray.invoke import invoke
from portable.ndarray.ndarray import array as nd_array
from portable.numpy import math as _math
from portable.numpy.multiarray import fresh, ndarray, to_array
from portable.tape import is_recording, needs_grad


def norm(x: Any, ord: Any = None, axis: Any = None,  # noqa: A002 - NumPy's name
         keepdims: bool = False) -> ndarray:
    """The Frobenius or 2-norm (``ord`` None, 'fro' or 2 for vectors), 1-norm or inf-norm of
    vectors, over ``axis`` (all elements by default)."""
    x = to_array(x)
    if ord in (None, "fro") or (ord == 2 and (axis is None and x.ndim == 1
                                              or isinstance(axis, int))):
        return _math.sqrt(_math.sum(_math.square(x), axis=axis, keepdims=keepdims))
    if ord == 1 and (x.ndim == 1 or isinstance(axis, int)):
        return _math.sum(_math.abs(x), axis=axis, keepdims=keepdims)
    if ord in (np.inf, "inf") and (x.ndim == 1 or isinstance(axis, int)):
        return _math.max(_math.abs(x), axis=axis, keepdims=keepdims)
    raise NotImplementedError(f"linalg.norm: ord={ord!r} with axis={axis!r} on shape "
                              f"{x.shape} is not supported (use None, 'fro', 1, 2 or inf)")


def _host(name: str, *arrays: Any) -> list[np.ndarray]:
    arrays = [to_array(a) for a in arrays]
    if is_recording() and any(needs_grad(a) for a in arrays):
        raise NotDifferentiableError(f"linalg.{name} is computed on the host and has no "
                                     f"gradient; call it outside autograd.record()")
    return [a.asnumpy() for a in arrays]


def _back(value: Any, like: Any) -> ndarray:
    value = np.asarray(value)
    dtype = value.dtype if value.dtype.kind != "f" else to_array(like).dtype
    return fresh(nd_array(value.astype(dtype), device=to_array(like).device, dtype=dtype))


def _square(a: Any, name: str) -> Any:
    a = to_array(a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"linalg.{name}: needs square matrices (..., M, M), got shape "
                         f"{a.shape}")
    return a


def inv(a: Any) -> ndarray:
    """The inverse of the square matrices in ``a`` (..., M, M); a singular one raises.

    Example:
        >>> import portable as mx
        >>> mx.np.linalg.inv(mx.np.array([[2.0, 0.0], [0.0, 4.0]])).tolist()
        [[0.5, 0.0], [0.0, 0.25]]
    """
    return fresh(invoke("portable.Inverse", [_square(a, "inv")]))


def pinv(a: Any, rcond: float = 1e-15) -> ndarray:
    return _back(np.linalg.pinv(_host("pinv", a)[0], rcond), a)


def det(a: Any) -> ndarray:
    """The determinants of the square matrices in ``a`` (..., M, M): shape (...).

    Example:
        >>> import portable as mx
        >>> float(mx.np.linalg.det(mx.np.array([[2.0, 3.0], [1.0, 4.0]])))
        5.0
    """
    return fresh(invoke("Det", [_square(a, "det")]))


def slogdet(a: Any) -> tuple:
    """``(sign, logabsdet)`` of the determinants of the square matrices in ``a``, computed
    as ``sign(det)`` and ``log(abs(det))``: exact for the well-conditioned, moderately sized
    matrices this is used on, but a determinant beyond the dtype's range overflows (NumPy's
    slogdet sums the LU factors' logs instead). ``logabsdet``'s gradient is ``inv(a).T``."""
    value = invoke("Det", [_square(a, "slogdet")])
    return fresh(invoke("Sign", [value])), fresh(invoke("Log", [invoke("Abs", [value])]))


def solve(a: Any, b: Any) -> ndarray:
    return _back(np.linalg.solve(*_host("solve", a, b)), a)


def svd(a: Any) -> tuple:
    """``ut, s, v`` with ``a = ut @ diag(s) @ v`` (MXNet NumPy returns NumPy's triple)."""
    u, s, vt = np.linalg.svd(_host("svd", a)[0], full_matrices=False)
    return _back(u, a), _back(s, a), _back(vt, a)


def _syevd(a: Any, uplo: str, name: str) -> tuple:
    """``portable.Syevd`` on the triangle ``uplo`` of the square matrices in ``a``: the upper
    triangle of ``a`` is the lower one of its transpose."""
    a = _square(a, name)
    if uplo not in ("L", "U"):
        raise ValueError(f"linalg.{name}: UPLO must be 'L' or 'U', got {uplo!r}")
    if uplo == "U":
        a = invoke("Transpose", [a], {"perm": list(range(a.ndim - 2)) + [a.ndim - 1, a.ndim - 2]})
    return invoke("portable.Syevd", [a], num_outputs=2)


def eigh(a: Any, UPLO: str = "L") -> tuple:  # noqa: N803 - NumPy's name
    """``(w, v)``: the eigenvalues (ascending) and eigenvectors (the columns of ``v``) of the
    symmetric matrices in ``a``, read from the ``UPLO`` triangle. As in MXNet, each eigenvector
    is signed so that its largest-magnitude entry is positive (NumPy leaves the sign to LAPACK);
    differentiable for distinct eigenvalues. Integer input is worked out on the host.

    Example:
        >>> import portable as mx
        >>> w, v = mx.np.linalg.eigh(mx.np.array([[2.0, 1.0], [1.0, 2.0]]))
        >>> w.tolist()
        [1.0, 3.0]
    """
    if to_array(a).dtype.kind != "f":
        w, v = np.linalg.eigh(_host("eigh", a)[0], UPLO)
        return _back(w, a), _back(v, a)
    u, w = _syevd(a, UPLO, "eigh")
    return fresh(w), fresh(invoke("Transpose", [u], {"perm": list(range(u.ndim - 2))
                                                     + [u.ndim - 1, u.ndim - 2]}))


def eigvalsh(a: Any, UPLO: str = "L") -> ndarray:  # noqa: N803
    """The eigenvalues (ascending) of the symmetric matrices in ``a`` (the ``UPLO`` triangle);
    differentiable for distinct eigenvalues."""
    if to_array(a).dtype.kind != "f":
        return _back(np.linalg.eigvalsh(_host("eigvalsh", a)[0], UPLO), a)
    return fresh(_syevd(a, UPLO, "eigvalsh")[1])
