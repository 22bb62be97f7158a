"""MXNet 1.x functions that have no ONNX op of their own, composed from the declared ops (so
each gets their kernels and gradients): ``expand_dims``, ``take``, ``pick``, ``slice_axis``,
``broadcast_to``, ``one_hot``, ``batch_dot``, ``topk``, ``Activation``, the ``broadcast_*`` and
``elemwise_*`` arithmetic, and (from ``mxnet_layers``) the legacy layer functions and the
top-level ``random_*``/``sample_*`` samplers. Indices may be float, as MXNet's are; ``take`` and
``pick`` clip them into range (MXNet's default ``mode='clip'``).

Example:
    >>> import portable as mx
    >>> a = mx.nd.array([[1, 5, 3], [4, 2, 6]])
    >>> mx.nd.pick(a, mx.nd.array([1, 2]), axis=1).asnumpy().tolist()
    [5.0, 6.0]
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.dtypes import to_onnx
from portable.errors import OpError
from portable.ndarray.invoke import invoke
from portable.ndarray.mxnet_layers import LAYERS
from portable.ndarray.ndarray import NDArray, array
from portable.ndarray.random import LEGACY_FUNCTIONS as RANDOM_FUNCTIONS


def _ints(values: Any, like: NDArray) -> NDArray:
    """Host integers (axes, shapes, bounds) as an int64 NDArray on ``like``'s device."""
    return array(np.asarray(values, np.int64).reshape(-1), device=like.device, dtype=np.int64)


def _clipped_indices(indices: NDArray, size: int) -> NDArray:
    """MXNet's ``mode='clip'`` indices, as int64 (MXNet passes them as floats)."""
    index = invoke("Cast", [indices], {"to": to_onnx(np.int64)})
    low, high = _ints(0, index), _ints(size - 1, index)
    return invoke("Clip", [index, invoke("Reshape", [low, _ints([], index)]),
                           invoke("Reshape", [high, _ints([], index)])])


def _axis(axis: int, ndim: int, what: str) -> int:
    if not -ndim <= axis < ndim:
        raise OpError(f"{what}: axis {axis} is out of range for {ndim} dimensions")
    return axis % ndim


def expand_dims(data: NDArray, axis: int) -> NDArray:
    """A new axis of size 1 at ``axis``."""
    return invoke("Unsqueeze", [data, _ints(axis, data)])


def take(a: NDArray, indices: NDArray, axis: int = 0, mode: str = "clip") -> NDArray:
    """The slices of ``a`` at ``indices`` along ``axis`` (``mode='clip'`` or ``'wrap'``)."""
    axis = _axis(axis, a.ndim, "take")
    size = a.shape[axis]
    if mode == "wrap":
        index = invoke("Cast", [indices], {"to": to_onnx(np.int64)})
        index = invoke("Mod", [index, _ints(size, index)])
    elif mode == "clip":
        index = _clipped_indices(indices, size)
    else:
        raise OpError(f"take: mode must be 'clip' or 'wrap', got {mode!r}")
    return invoke("Gather", [a, index], {"axis": axis})


def pick(data: NDArray, index: NDArray, axis: int = -1, keepdims: bool = False) -> NDArray:
    """``data``'s element at ``index`` along ``axis`` for every position of the other axes."""
    axis = _axis(axis, data.ndim, "pick")
    index = _clipped_indices(index, data.shape[axis])
    picked = invoke("GatherElements", [data, expand_dims(index, axis)], {"axis": axis})
    return picked if keepdims else invoke("Squeeze", [picked, _ints(axis, picked)])


def slice_axis(data: NDArray, axis: int, begin: int, end: int | None) -> NDArray:
    """Elements ``begin:end`` of ``axis`` (``end`` None: to the end)."""
    axis = _axis(axis, data.ndim, "slice_axis")
    end = data.shape[axis] if end is None else end
    return invoke("Slice", [data, _ints(begin, data), _ints(end, data), _ints(axis, data)])


def broadcast_to(data: NDArray, shape: Any) -> NDArray:
    """``data`` broadcast to ``shape`` (0 keeps that dimension, as MXNet's does)."""
    shape = [int(s) for s in shape]
    if len(shape) != data.ndim:
        raise OpError(f"broadcast_to: shape {tuple(shape)} has {len(shape)} dimensions, the "
                      f"data {data.ndim} ({data.shape})")
    shape = [have if want == 0 else want for want, have in zip(shape, data.shape)]
    return invoke("Expand", [data, _ints(shape, data)])


def Embedding(data: NDArray, weight: NDArray, input_dim: int | None = None,  # noqa: N802
              output_dim: int | None = None, dtype: Any = "float32",
              sparse_grad: bool = False) -> NDArray:
    """MXNet's ``Embedding``: rows of ``weight`` (input_dim, output_dim) at the (clipped)
    indices ``data``."""
    return take(weight, data, axis=0)


def one_hot(indices: NDArray, depth: int, on_value: float = 1.0, off_value: float = 0.0,
            dtype: Any = "float32") -> NDArray:
    """A new last axis of size ``depth``: ``on_value`` at each index, ``off_value`` elsewhere."""
    values = array(np.asarray([off_value, on_value], np.dtype(dtype)), device=indices.device,
                   dtype=np.dtype(dtype))
    return invoke("OneHot", [indices, _ints(depth, indices), values], {"axis": -1})


def batch_dot(lhs: NDArray, rhs: NDArray, transpose_a: bool = False,
              transpose_b: bool = False) -> NDArray:
    """Matrix products of the batches of 3-d ``lhs`` and ``rhs`` (optionally transposed)."""
    def last_two_swapped(x: NDArray) -> NDArray:
        perm = list(range(x.ndim))
        perm[-2:] = perm[-1], perm[-2]
        return invoke("Transpose", [x], {"perm": perm})

    lhs = last_two_swapped(lhs) if transpose_a else lhs
    rhs = last_two_swapped(rhs) if transpose_b else rhs
    return invoke("MatMul", [lhs, rhs])


def topk(data: NDArray, axis: int = -1, k: int = 1, ret_typ: str = "indices",
         is_ascend: bool = False, dtype: Any = "float32") -> Any:
    """The ``k`` largest (or smallest) along ``axis``: ``ret_typ`` ``indices`` (as ``dtype``),
    ``value``, ``both`` ([values, indices]) or ``mask`` (1 where an element is among them)."""
    axis = _axis(axis, data.ndim, "topk")
    values, indices = invoke("TopK", [data, _ints(k, data)],
                             {"axis": axis, "largest": int(not is_ascend), "sorted": 1},
                             num_outputs=2)
    as_dtype = invoke("Cast", [indices], {"to": to_onnx(np.dtype(dtype))})
    if ret_typ == "indices":
        return as_dtype
    if ret_typ == "value":
        return values
    if ret_typ == "both":
        return [values, as_dtype]
    if ret_typ == "mask":
        zeros = array(np.zeros(data.shape, data.dtype), device=data.device, dtype=data.dtype)
        ones = array(np.ones(values.shape, data.dtype), device=data.device, dtype=data.dtype)
        return invoke("ScatterElements", [zeros, indices, ones], {"axis": axis})
    raise OpError(f"topk: ret_typ must be indices, value, both or mask, got {ret_typ!r}")


_ACTIVATIONS = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "softrelu": "Softplus"}


def Activation(data: NDArray, act_type: str) -> NDArray:  # noqa: N802 - MXNet's name
    """MXNet's ``Activation``: ``relu``, ``sigmoid``, ``tanh``, ``softrelu`` or ``softsign``."""
    if act_type == "softsign":  # x / (1 + |x|)
        one = array(np.ones((), data.dtype), device=data.device, dtype=data.dtype)
        return invoke("Div", [data, invoke("Add", [invoke("Abs", [data]), one])])
    if act_type not in _ACTIVATIONS:
        raise OpError(f"Activation: act_type must be one of "
                      f"{sorted([*_ACTIVATIONS, 'softsign'])}, got {act_type!r}")
    return invoke(_ACTIVATIONS[act_type], [data])


def _compare(op_name: str, negate: bool = False):
    """MXNet's ``broadcast_equal`` etc.: 0 or 1 in the inputs' dtype, not booleans."""
    def compare(lhs: NDArray, rhs: NDArray) -> NDArray:
        result = invoke(op_name, [lhs, rhs])
        if negate:
            result = invoke("Not", [result])
        return invoke("Cast", [result], {"to": to_onnx(lhs.dtype)})
    compare.__name__ = op_name
    return compare


def _logical(op_name: str):
    def logical(lhs: NDArray, rhs: NDArray) -> NDArray:
        zero = array(np.zeros((), lhs.dtype), device=lhs.device, dtype=lhs.dtype)
        a, b = (invoke("Not", [invoke("Equal", [x, zero])]) for x in (lhs, rhs))
        return invoke("Cast", [invoke(op_name, [a, b])], {"to": to_onnx(lhs.dtype)})
    return logical


def _binary(op_name: str):
    def binary(lhs: NDArray, rhs: NDArray, out: NDArray | None = None) -> NDArray:
        return invoke(op_name, [lhs, rhs], out=out)
    binary.__name__ = op_name
    return binary


def broadcast_axis(data: NDArray, axis: Any = (), size: Any = ()) -> NDArray:
    """``data`` broadcast along its size-1 ``axis`` (int or tuple) to ``size``."""
    axes = [axis] if isinstance(axis, int) else list(axis)
    sizes = [size] if isinstance(size, int) else list(size)
    shape = list(data.shape)
    for a, n in zip(axes, sizes):
        shape[_axis(a, data.ndim, "broadcast_axis")] = int(n)
    return invoke("Expand", [data, _ints(shape, data)])


def broadcast_like(lhs: NDArray, rhs: NDArray) -> NDArray:
    """``lhs`` broadcast to ``rhs``'s shape."""
    return invoke("Expand", [lhs, _ints(rhs.shape, lhs)])


def add_n(*args: NDArray) -> NDArray:
    """The elementwise sum of the arrays."""
    return invoke("Sum", list(args))


def stack(*data: Any, axis: int = 0, num_args: int | None = None) -> NDArray:
    """MXNet's ``stack(*data, axis=0)``: the arrays joined along a new ``axis`` (a single list
    of arrays is accepted too)."""
    arrays = list(data[0]) if len(data) == 1 and isinstance(data[0], (list, tuple)) \
        else list(data)
    if not arrays:
        raise OpError("stack: no arrays given")
    axis = _axis(axis, arrays[0].ndim + 1, "stack")
    return invoke("Concat", [expand_dims(a, axis) for a in arrays], {"axis": axis})


_ARITHMETIC = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div"}
BROADCAST = {
    **{f"broadcast_{k}": _binary(v) for k, v in _ARITHMETIC.items()},
    **{f"elemwise_{k}": _binary(v) for k, v in _ARITHMETIC.items()},
    "broadcast_plus": _binary("Add"), "broadcast_minus": _binary("Sub"),
    "broadcast_maximum": _binary("Max"), "broadcast_minimum": _binary("Min"),
    "broadcast_power": _binary("Pow"),
    "broadcast_equal": _compare("Equal"), "broadcast_not_equal": _compare("Equal", True),
    "broadcast_greater": _compare("Greater"), "broadcast_greater_equal": _compare("Less", True),
    "broadcast_lesser": _compare("Less"), "broadcast_lesser_equal": _compare("Greater", True),
    "broadcast_logical_and": _logical("And"), "broadcast_logical_or": _logical("Or"),
    "broadcast_logical_xor": _logical("Xor"),
    "broadcast_axis": broadcast_axis, "broadcast_axes": broadcast_axis,
    "broadcast_like": broadcast_like, "add_n": add_n, "stack": stack, "Embedding": Embedding,
    "ElementWiseSum": add_n,
}

FUNCTIONS = {"expand_dims": expand_dims, "take": take, "pick": pick, "slice_axis": slice_axis,
             "broadcast_to": broadcast_to, "one_hot": one_hot, "batch_dot": batch_dot,
             "topk": topk, "Activation": Activation, **BROADCAST,
             **LAYERS, **RANDOM_FUNCTIONS}
METHODS = ("expand_dims", "take", "pick", "slice_axis", "broadcast_to", "one_hot", "topk")
