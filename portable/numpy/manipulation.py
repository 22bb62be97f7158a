"""Shape and layout functions of ``mx.np`` (reshape, transpose, concatenate, split, sort,
products ...), each composed from declared ops so that autograd and every backend see them.

Example:
    >>> import portable as mx
    >>> x = mx.np.arange(6).reshape(2, 3)
    >>> mx.np.concatenate([x, x], axis=1).shape, mx.np.dot(x, x.T).shape
    ((2, 6), (2, 2))
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from portable.dtypes import to_onnx
from portable.errors import ShapeError
from portable.ndarray.invoke import invoke
from portable.ndarray.ndarray import NDArray, array as nd_array
from portable.numpy.indexing import getitem
from portable.numpy.multiarray import cast, fresh, ndarray, operands, promote, to_array


def _ints(values: Any, like: NDArray) -> NDArray:
    return nd_array(np.asarray(values, np.int64).reshape(-1), device=like.device,
                    dtype=np.int64)


def _axis(axis: int, ndim: int, what: str) -> int:
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{what}: axis {axis} is out of bounds for an array of dimension "
                         f"{ndim}")
    return axis % ndim


def _reshape_raw(a: NDArray, shape: Sequence[int]) -> NDArray:
    shape = tuple(int(s) for s in shape)
    if shape == a.shape:
        return a
    return invoke("Reshape", [a, _ints(list(shape), a)], {"allowzero": 1} if 0 in shape else {})


def reshape(a: Any, newshape: Any, order: str = "C") -> ndarray:
    """``a`` with a new shape (one dimension may be -1), sharing its data."""
    a = to_array(a)
    shape = (newshape,) if isinstance(newshape, (int, np.integer)) else tuple(newshape)
    try:  # NumPy's rule for -1 and the size check, on a zero-byte probe
        shape = np.broadcast_to(np.zeros((), np.int8), a.shape).reshape(shape).shape
    except ValueError:
        raise ShapeError(f"reshape: cannot reshape an array of shape {a.shape} into shape "
                         f"{tuple(shape)}") from None
    return fresh(_reshape_raw(a, shape))


def _reshape_method(self: ndarray, *shape: Any, **kwargs: Any) -> ndarray:
    if "shape" in kwargs or "newshape" in kwargs:
        shape = kwargs.get("shape", kwargs.get("newshape"))
    elif len(shape) == 1:
        shape = shape[0]
    return reshape(self, shape)


def ravel(a: Any, order: str = "C") -> ndarray:
    return reshape(a, (-1,))


def transpose(a: Any, axes: Any = None) -> ndarray:
    """``a`` with its axes permuted (reversed by default)."""
    a = to_array(a)
    return fresh(invoke("Transpose", [a], {} if axes is None else {"perm": list(axes)}))


def _transpose_method(self: ndarray, *axes: Any) -> ndarray:
    if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
        axes = axes[0]
    return transpose(self, axes or None)


def swapaxes(a: Any, axis1: int, axis2: int) -> ndarray:
    a = to_array(a)
    perm = list(range(a.ndim))
    i, j = _axis(axis1, a.ndim, "swapaxes"), _axis(axis2, a.ndim, "swapaxes")
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(a, perm)


def moveaxis(a: Any, source: int, destination: int) -> ndarray:
    a = to_array(a)
    perm = [i for i in range(a.ndim) if i != _axis(source, a.ndim, "moveaxis")]
    perm.insert(_axis(destination, a.ndim, "moveaxis"), source % a.ndim)
    return transpose(a, perm)


def expand_dims(a: Any, axis: int) -> ndarray:
    a = to_array(a)
    return fresh(invoke("Unsqueeze", [a, _ints(axis, a)]))


def squeeze(a: Any, axis: Any = None) -> ndarray:
    """``a`` without its axes of size 1 (or only those in ``axis``)."""
    a = to_array(a)
    if axis is None:
        axis = [i for i, s in enumerate(a.shape) if s == 1]
    axes = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    for i in axes:
        if a.shape[_axis(i, a.ndim, "squeeze")] != 1:
            raise ShapeError(f"squeeze: axis {i} of shape {a.shape} does not have size 1")
    return fresh(_reshape_raw(a, [s for i, s in enumerate(a.shape)
                                  if i not in {x % a.ndim for x in axes}]))


def flip(m: Any, axis: Any = None) -> ndarray:
    """``m`` with the order of elements along ``axis`` (all axes by default) reversed."""
    m = to_array(m)
    axes = range(m.ndim) if axis is None else [axis] if isinstance(axis, int) else axis
    key = [slice(None)] * m.ndim
    for a in axes:
        key[_axis(a, m.ndim, "flip")] = slice(None, None, -1)
    return getitem(m, tuple(key)) if m.ndim else fresh(m)


def broadcast_to(array: Any, shape: Any) -> ndarray:
    a = to_array(array)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return fresh(invoke("Expand", [_reshape_raw(a, (1,) * (len(shape) - a.ndim) + a.shape),
                                   _ints(list(shape), a)]))


def tile(A: Any, reps: Any) -> ndarray:  # noqa: N803 - NumPy's name
    """``A`` repeated ``reps`` times along each axis."""
    a = to_array(A)
    reps = (reps,) if isinstance(reps, int) else tuple(reps)
    ndim = max(a.ndim, len(reps))
    a = _reshape_raw(a, (1,) * (ndim - a.ndim) + a.shape)
    reps = (1,) * (ndim - len(reps)) + reps
    return fresh(invoke("Tile", [a, _ints(list(reps), a)]))


def repeat(a: Any, repeats: int, axis: int | None = None) -> ndarray:
    """Each element repeated ``repeats`` times along ``axis`` (the flattened array by default)."""
    a = to_array(a)
    if axis is None:
        a, axis = _reshape_raw(a, (-1,) if a.size else (0,)), 0
    axis = _axis(axis, a.ndim, "repeat")
    index = np.repeat(np.arange(a.shape[axis]), repeats)
    return fresh(invoke("Gather", [a, nd_array(index, device=a.device, dtype=np.int64)],
                        {"axis": axis}))


def concatenate(seq: Sequence[Any], axis: int | None = 0, out: Any = None) -> ndarray:
    """The arrays joined along ``axis`` (flattened first when ``axis`` is None)."""
    arrays = [to_array(a) for a in seq]
    if not arrays:
        raise ShapeError("concatenate: need at least one array")
    if axis is None:
        arrays, axis = [_reshape_raw(a, (a.size,)) for a in arrays], 0
    dtype = arrays[0].dtype
    for a in arrays[1:]:
        dtype = promote(dtype, a.dtype)
    return fresh(invoke("Concat", [cast(a, dtype) for a in arrays], {"axis": axis}))


def stack(arrays: Sequence[Any], axis: int = 0, out: Any = None) -> ndarray:
    """The arrays joined along a new axis."""
    arrays = [to_array(a) for a in arrays]
    axis = _axis(axis, arrays[0].ndim + 1, "stack")
    return concatenate([invoke("Unsqueeze", [a, _ints(axis, a)]) for a in arrays], axis)


def vstack(arrays: Sequence[Any], out: Any = None) -> ndarray:
    arrays = [to_array(a) for a in arrays]
    return concatenate([_reshape_raw(a, (1, a.size)) if a.ndim < 2 else a for a in arrays], 0)


def hstack(arrays: Sequence[Any]) -> ndarray:
    arrays = [to_array(a) for a in arrays]
    return concatenate(arrays, 0 if arrays[0].ndim <= 1 else 1)


def split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list:
    """``ary`` cut along ``axis`` into equal sections, or at the given indices."""
    a = to_array(ary)
    axis = _axis(axis, a.ndim, "split")
    size = a.shape[axis]
    if isinstance(indices_or_sections, (int, np.integer)):
        sections = int(indices_or_sections)
        if sections < 1 or size % sections:
            raise ShapeError(f"split: array split does not result in an equal division "
                             f"(axis {axis} of shape {a.shape} into {sections})")
        bounds = list(range(0, size + 1, size // sections))
    else:
        bounds = [0] + [min(int(i), size) for i in indices_or_sections] + [size]
    key = [slice(None)] * a.ndim
    parts = []
    for start, stop in zip(bounds[:-1], bounds[1:]):
        key[axis] = slice(start, max(start, stop))
        parts.append(getitem(a, tuple(key)))
    return parts


def matmul(a: Any, b: Any, out: Any = None) -> ndarray:
    """The matrix product, batched over leading axes (NumPy's ``matmul``)."""
    return fresh(invoke("MatMul", list(operands(a, b)), out=out))


def tensordot(a: Any, b: Any, axes: Any = 2) -> ndarray:
    """Sums of products over ``axes`` of ``a`` and ``b`` (NumPy's ``tensordot``)."""
    a, b = operands(a, b)
    if isinstance(axes, (int, np.integer)):
        axes_a, axes_b = list(range(a.ndim - axes, a.ndim)), list(range(axes))
    else:
        axes_a, axes_b = axes
        axes_a = [axes_a] if isinstance(axes_a, int) else list(axes_a)
        axes_b = [axes_b] if isinstance(axes_b, int) else list(axes_b)
    axes_a = [_axis(i, a.ndim, "tensordot") for i in axes_a]
    axes_b = [_axis(i, b.ndim, "tensordot") for i in axes_b]
    free_a = [i for i in range(a.ndim) if i not in axes_a]
    free_b = [i for i in range(b.ndim) if i not in axes_b]
    inner = int(np.prod([a.shape[i] for i in axes_a], dtype=np.int64))
    left = _reshape_raw(invoke("Transpose", [a], {"perm": free_a + axes_a}), (-1, inner)) \
        if a.ndim else a
    right = _reshape_raw(invoke("Transpose", [b], {"perm": axes_b + free_b}), (inner, -1)) \
        if b.ndim else b
    product = invoke("MatMul", [left, right])
    shape = [a.shape[i] for i in free_a] + [b.shape[i] for i in free_b]
    return fresh(_reshape_raw(product, shape))


def dot(a: Any, b: Any, out: Any = None) -> ndarray:
    """NumPy's ``dot``: products of scalars, inner product of vectors, matrix product, and
    the sum over ``a``'s last and ``b``'s second-to-last axis otherwise."""
    a, b = operands(a, b)
    if a.ndim == 0 or b.ndim == 0:
        return fresh(invoke("Mul", [a, b]))
    if b.ndim <= 2:
        return fresh(invoke("MatMul", [a, b]))
    return tensordot(a, b, ([a.ndim - 1], [b.ndim - 2]))


def outer(a: Any, b: Any) -> ndarray:
    a, b = operands(a, b)
    return fresh(invoke("Mul", [_reshape_raw(a, (a.size, 1)), _reshape_raw(b, (1, b.size))]))


def inner(a: Any, b: Any) -> ndarray:
    a, b = operands(a, b)
    return tensordot(a, b, ([a.ndim - 1], [b.ndim - 1]))


def vdot(a: Any, b: Any) -> ndarray:
    a, b = operands(a, b)
    return dot(_reshape_raw(a, (a.size,)), _reshape_raw(b, (b.size,)))


def _sorted(a: Any, axis: int | None, output: int) -> ndarray:
    a = to_array(a)
    if axis is None:
        a, axis = _reshape_raw(a, (a.size,)), 0
    axis = _axis(axis, a.ndim, "sort")
    result = invoke("TopK", [a, _ints(a.shape[axis], a)],
                    {"axis": axis, "largest": 0, "sorted": 1}, num_outputs=2)
    return fresh(result[output])


def sort(a: Any, axis: int | None = -1, kind: Any = None, order: Any = None) -> ndarray:
    """``a`` sorted ascending along ``axis``."""
    return _sorted(a, axis, 0)


def argsort(a: Any, axis: int | None = -1, kind: Any = None, order: Any = None) -> ndarray:
    """The int64 indices that sort ``a`` along ``axis``."""
    return _sorted(a, axis, 1)


def unique(ar: Any, return_index: bool = False, return_inverse: bool = False,
           return_counts: bool = False, axis: int | None = None) -> Any:
    """The sorted unique elements (worked out on the host; not differentiable)."""
    a = to_array(ar)
    found = np.unique(a.asnumpy(), return_index, return_inverse, return_counts, axis)
    if not isinstance(found, tuple):
        return fresh(nd_array(found, device=a.device, dtype=found.dtype))
    values, *extra = found
    return (fresh(nd_array(values, device=a.device, dtype=values.dtype)),
            *(fresh(nd_array(e, device=a.device, dtype=np.int64)) for e in extra))


def diag(v: Any, k: int = 0) -> ndarray:
    """The ``k``-th diagonal of a 2-d array, or a 2-d array with a 1-d one on it (a Gather, so
    differentiable)."""
    v = to_array(v)
    if v.ndim == 1:
        n = v.shape[0] + abs(k)
        index = np.full((n, n), v.shape[0], np.int64)  # points at an appended zero
        rows = np.arange(v.shape[0]) + max(-k, 0)
        index[rows, rows + k] = np.arange(v.shape[0])
        padded = invoke("Concat", [v, nd_array(np.zeros(1, v.dtype), device=v.device,
                                               dtype=v.dtype)], {"axis": 0})
        flat = invoke("Gather", [padded, _ints(index, v)], {"axis": 0})
        return fresh(_reshape_raw(flat, (n, n)))
    if v.ndim != 2:
        raise ShapeError(f"diag: input must be 1- or 2-d, got shape {v.shape}")
    rows = np.arange(max(0, -k), min(v.shape[0], v.shape[1] - k))
    positions = rows * v.shape[1] + rows + k
    return fresh(invoke("Gather", [_reshape_raw(v, (v.size,)), _ints(positions, v)],
                        {"axis": 0}))


def _trilu(m: Any, k: int, upper: int) -> ndarray:
    m = to_array(m)
    return fresh(invoke("Trilu", [m, nd_array(np.asarray(k, np.int64), device=m.device,
                                               dtype=np.int64)], {"upper": upper}))


def tril(m: Any, k: int = 0) -> ndarray:
    """``m`` with the elements above the ``k``-th diagonal zeroed."""
    return _trilu(m, k, 0)


def triu(m: Any, k: int = 0) -> ndarray:
    """``m`` with the elements below the ``k``-th diagonal zeroed."""
    return _trilu(m, k, 1)


def _astype(self: ndarray, dtype: Any, order: str = "K", casting: str = "unsafe",
            subok: bool = True, copy: bool = True) -> ndarray:
    if not copy and np.dtype(dtype) == self.dtype:
        return self
    return fresh(invoke("Cast", [self], {"to": to_onnx(np.dtype(dtype))}))


def _install_methods() -> None:
    ndarray.reshape = _reshape_method
    ndarray.transpose = _transpose_method
    ndarray.astype = _astype
    ndarray.flatten = lambda self, order="C": reshape(self, (-1,))
    ndarray.ravel = ravel
    for name in ("squeeze", "expand_dims", "swapaxes", "flip", "repeat", "tile", "dot",
                 "sort", "argsort", "broadcast_to"):
        setattr(ndarray, name, globals()[name])
    ndarray.split = split


_install_methods()
