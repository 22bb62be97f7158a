"""``mx.npx``: MXNet 1.9's operators beyond NumPy for ``mx.np`` arrays (activations, layers,
``pick``, ``one_hot`` ...) and the NumPy-mode switches (``set_np``, ``reset_np``, ``use_np``).

The layer functions are ``nd``'s (one implementation each), taking and giving
``mx.np.ndarray``.

Example:
    >>> import portable as mx
    >>> from portable import np, npx
    >>> npx.set_np()
    >>> npx.relu(np.array([-1.0, 2.0])).tolist()
    [0.0, 2.0]
    >>> npx.reset_np()
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as _onp

from portable import ndarray as _nd
from portable import context as _context
from portable.device import cpu
from portable.dtypes import to_onnx
from portable.errors import ShapeError
from portable.ndarray import mxnet_files as _files
from portable.ndarray.invoke import invoke
from portable.ndarray.ndarray import NDArray, array as _nd_array, waitall
from portable.numpy.mode import (is_np_array, is_np_shape, reset_np, set_np, set_np_array,
                                 set_np_shape)
from portable.numpy.manipulation import reshape as np_reshape
from portable.numpy.multiarray import as_np, fresh, ndarray, to_array

__all__ = ["activation", "batch_dot", "batch_flatten", "batch_norm", "convolution", "cpu",
           "dropout", "embedding", "fully_connected", "gpu", "is_np_array", "is_np_shape",
           "leaky_relu", "load", "log_softmax", "num_gpus", "one_hot", "pick", "pooling",
           "relu", "reset_np", "reshape", "save", "sequence_mask", "set_np", "sigmoid",
           "softmax", "topk", "use_np", "use_np_array", "use_np_shape", "waitall"]


def use_np(func: Any) -> Any:
    """Run a function (or every method of a class, e.g. a Gluon Block) with NumPy mode on,
    restoring the previous mode afterwards (MXNet's ``@npx.use_np``)."""
    if isinstance(func, type):
        for name, member in list(vars(func).items()):
            if callable(member) and not isinstance(member, type):
                setattr(func, name, use_np(member))
        return func

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        shape, array = set_np_shape(True), set_np_array(True)
        try:
            return func(*args, **kwargs)
        finally:
            set_np_shape(shape), set_np_array(array)
    return wrapper


use_np_array = use_np_shape = use_np


def _result(result: Any, inputs: tuple) -> Any:
    """An ``nd`` function's result as ``ndarray``: new arrays in place, an input passed
    through (Dropout at inference) as a converted view."""
    if isinstance(result, (list, tuple)):
        return type(result)(_result(r, inputs) for r in result)
    if any(result is x for x in inputs):
        return as_np(result)
    return fresh(result)


def _layer(name: str) -> Callable[..., Any]:
    def function(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("name", None)
        kwargs.pop("out", None)
        return _result(getattr(_nd, name)(*args, **kwargs), args + tuple(kwargs.values()))
    function.__name__ = name
    function.__doc__ = f"MXNet's ``{name}`` on ``mx.np`` arrays (``nd.{name}``)."
    return function


fully_connected = _layer("FullyConnected")
convolution = _layer("Convolution")
deconvolution = _layer("Deconvolution")
pooling = _layer("Pooling")
batch_norm = _layer("BatchNorm")
embedding = _layer("Embedding")
dropout = _layer("Dropout")
activation = _layer("Activation")
leaky_relu = _layer("LeakyReLU")
layer_norm = _layer("LayerNorm")
one_hot = _layer("one_hot")
pick = _layer("pick")
topk = _layer("topk")
batch_dot = _layer("batch_dot")


def relu(data: Any, **kwargs: Any) -> ndarray:
    """``max(data, 0)``."""
    return fresh(invoke("Relu", [to_array(data)]))


def sigmoid(data: Any, **kwargs: Any) -> ndarray:
    """``1 / (1 + exp(-data))``."""
    return fresh(invoke("Sigmoid", [to_array(data)]))


def _tempered(data: Any, temperature: float | None) -> NDArray:
    data = to_array(data)
    if temperature is None or temperature == 1.0:
        return data
    return invoke("Div", [data, _nd_array(_onp.asarray(temperature, data.dtype),
                                          device=data.device, dtype=data.dtype)])


def softmax(data: Any, length: Any = None, axis: int = -1, temperature: float | None = None,
            use_length: bool = False, dtype: Any = None, **kwargs: Any) -> ndarray:
    """Softmax along ``axis`` (of ``data / temperature``)."""
    if use_length:
        raise NotImplementedError("npx.softmax: use_length=True is not supported")
    return fresh(invoke("Softmax", [_tempered(data, temperature)], {"axis": axis}))


def log_softmax(data: Any, axis: int = -1, temperature: float | None = None,
                use_length: bool = False, dtype: Any = None, **kwargs: Any) -> ndarray:
    """Log-softmax along ``axis``."""
    return fresh(invoke("LogSoftmax", [_tempered(data, temperature)], {"axis": axis}))


def batch_flatten(data: Any, **kwargs: Any) -> ndarray:
    """``data`` as 2-d (batch, rest)."""
    return fresh(invoke("Flatten", [to_array(data)], {"axis": 1}))


def sequence_mask(data: Any, sequence_length: Any = None, use_sequence_length: bool = False,
                  value: float = 0.0, axis: int = 0, **kwargs: Any) -> ndarray:
    """``data`` with the steps past each sequence's length set to ``value`` (time on
    ``axis`` 0 or 1, the batch on the other)."""
    data = to_array(data)
    if not use_sequence_length or sequence_length is None:
        return as_np(data)
    if axis not in (0, 1):
        raise ShapeError(f"sequence_mask: axis must be 0 or 1, got {axis}")
    lengths = to_array(sequence_length)
    steps, batch = data.shape[axis], data.shape[1 - axis]
    shape = [1] * data.ndim
    shape[axis] = steps
    position = _nd_array(_onp.arange(steps, dtype=_onp.float32).reshape(shape),
                         device=data.device)
    shape = [1] * data.ndim
    shape[1 - axis] = batch
    limit = invoke("Reshape", [invoke("Cast", [lengths], {"to": to_onnx(_onp.float32)}),
                               _nd_array(_onp.asarray(shape, _onp.int64), device=data.device,
                                         dtype=_onp.int64)])
    fill = _nd_array(_onp.asarray(value, data.dtype), device=data.device, dtype=data.dtype)
    return fresh(invoke("Where", [invoke("Less", [position, limit]), data, fill]))


def _reshape_target(shape: tuple, codes: tuple, reverse: bool) -> list[int]:
    """MXNet's reshape codes: -1 inferred, -2 copy the rest... see ``npx.reshape``."""
    if reverse:
        return _reshape_target(shape[::-1], codes[::-1], False)[::-1]
    out: list[int] = []
    i, j = 0, 0
    while j < len(codes):
        code = codes[j]
        if code >= 0 or code == -1:
            out.append(code)
            i += 1
        elif code == -2:
            out.append(shape[i])
            i += 1
        elif code == -3:
            if shape[i] != 1:
                raise ShapeError(f"npx.reshape: -3 skips an axis of size 1, axis {i} of "
                                 f"{shape} has size {shape[i]}")
            i += 1
        elif code == -4:
            out.extend(shape[i:])
            i = len(shape)
        elif code == -5:
            out.append(shape[i] * shape[i + 1])
            i += 2
        elif code == -6:
            first, second = codes[j + 1], codes[j + 2]
            first = shape[i] // second if first == -1 else first
            second = shape[i] // first if second == -1 else second
            out.extend([first, second])
            i += 1
            j += 2
        else:
            raise ShapeError(f"npx.reshape: unknown code {code} in {codes}")
        j += 1
    return out


def reshape(a: Any, newshape: Any, reverse: bool = False, order: str = "C") -> ndarray:
    """``a`` reshaped with MXNet's codes: -1 inferred, -2 this axis as is, -3 drop this
    axis of size 1, -4 all remaining axes, -5 merge two axes, -6 split one axis in two."""
    a = to_array(a)
    codes = (newshape,) if isinstance(newshape, int) else tuple(newshape)
    return np_reshape(a, _reshape_target(a.shape, codes, reverse))


def gpu(device_id: int = 0) -> Any:
    """The GPU with id ``device_id`` (``mx.gpu``)."""
    return _context.gpu(device_id)


def num_gpus() -> int:
    """How many GPUs this process can use."""
    context = _context
    return context.num_gpus() if hasattr(context, "num_gpus") else 0


def save(file: str, arr: Any) -> None:
    """Save an array, a list or a dict of arrays in MXNet's NDArray file format."""
    _files.save(file, arr)


def load(file: str) -> Any:
    """Load arrays saved by ``npx.save`` (or ``nd.save``), as ``mx.np`` arrays."""
    return as_np(_files.load(file))

