"""``mx.np``: MXNet 1.9's NumPy-compatible interface (what Dive into Deep Learning's MXNet
edition uses), on portable's NDArray engine, op table and autograd.

``mx.np.ndarray`` is an ``nd.NDArray`` with NumPy semantics; the functions here follow MXNet
NumPy's defaults (float32 unless told otherwise) and dtype rules. ``mx.npx.set_np()`` makes
Gluon hand out these arrays.

Example:
    >>> import portable as mx
    >>> from portable import np, npx, autograd
    >>> x = np.arange(4.0); x.attach_grad()
    >>> with autograd.record():
    ...     y = 2 * np.dot(x, x)
    >>> y.backward(); x.grad.tolist()
    [0.0, 4.0, 8.0, 12.0]
"""
from __future__ import annotations

import numpy as _onp

from portable.numpy import indexing as _indexing  # noqa: F401 - installs x[...]
from portable.numpy import linalg, random
from portable.numpy.creation import (arange, array, asarray, empty, empty_like, eye, full,
                                     full_like, identity, linspace, ones, ones_like, zeros,
                                     zeros_like)
from portable.numpy.manipulation import (argsort, broadcast_to, concatenate, diag, dot,
                                         expand_dims, flip, hstack, inner, matmul, moveaxis,
                                         outer, ravel, repeat, reshape, sort, split, squeeze,
                                         stack, swapaxes, tensordot, tile, transpose, tril,
                                         triu, unique, vdot, vstack)
from portable.numpy.math import (abs, absolute, add, all, amax, amin, any, arccos, arcsin,
                                 arctan, argmax, argmin, around, ceil, clip, cos, cosh, cumsum,
                                 divide, equal, exp, expm1, floor, greater, greater_equal,
                                 isfinite, isinf, isnan, less, less_equal, log, log1p, log2,
                                 log10, logical_not, max, maximum, mean, min, minimum, mod,
                                 multiply, negative, nonzero, not_equal, power, prod, reciprocal,
                                 remainder, round, sign, sin, sinh, sqrt, square, std, subtract,
                                 sum, tan, tanh, true_divide, var, where)
from portable.numpy.multiarray import ndarray

# NumPy's constants and dtype names (MXNet NumPy hands out NumPy's own).
pi, e, inf, nan, newaxis = _onp.pi, _onp.e, _onp.inf, _onp.nan, None
float16, float32, float64 = _onp.float16, _onp.float32, _onp.float64
int8, int32, int64, uint8 = _onp.int8, _onp.int32, _onp.int64, _onp.uint8
bool_, dtype, finfo, iinfo = _onp.bool_, _onp.dtype, _onp.finfo, _onp.iinfo
PZERO, NZERO = 0.0, -0.0


def shape(a: ndarray) -> tuple:
    """The shape of ``a``."""
    return a.shape


def size(a: ndarray) -> int:
    return a.size


def ndim(a: ndarray) -> int:
    return a.ndim


def copy(a: ndarray) -> ndarray:
    """A copy of ``a`` (a new array over new storage)."""
    return array(a)
