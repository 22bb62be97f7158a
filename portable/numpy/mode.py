"""MXNet's NumPy mode switches: ``npx.set_np()`` turns on NumPy shapes (0-d arrays, zero-size
axes) and NumPy arrays (Gluon blocks, parameters and data loaders hand out ``mx.np.ndarray``).

The flags hold for the whole process (a data loader's worker threads see them too) and
default to off.

Example:
    >>> from portable.numpy import mode
    >>> previous = mode.set_np(); mode.is_np_array()
    True
    >>> mode.reset_np()
"""
from __future__ import annotations

from types import SimpleNamespace

_state = SimpleNamespace(array=False, shape=False)


def is_np_array() -> bool:
    """True while NumPy arrays are on (``npx.set_np()``)."""
    return _state.array


def is_np_shape() -> bool:
    """True while NumPy shape semantics are on."""
    return _state.shape


def set_np_shape(active: bool) -> bool:
    """Turn NumPy shape semantics on or off; returns the previous setting."""
    previous = is_np_shape()
    _state.shape = bool(active)
    return previous


def set_np_array(active: bool) -> bool:
    """Turn NumPy arrays on or off; returns the previous setting."""
    previous = is_np_array()
    _state.array = bool(active)
    return previous


def set_np(shape: bool = True, array: bool = True, dtype: bool = False) -> None:
    """MXNet's ``npx.set_np``: NumPy shapes and arrays on (``array`` needs ``shape``).

    Args:
        shape: NumPy shape semantics.
        array: NumPy arrays in Gluon.
        dtype: NumPy's default float64; portable keeps MXNet's float32 default, so only
            False is accepted.
    """
    if array and not shape:
        raise ValueError("set_np: NumPy arrays (array=True) need NumPy shapes (shape=True)")
    if dtype:
        raise ValueError("set_np: dtype=True (float64 by default) is not supported; arrays "
                         "default to float32 as in MXNet's default mode")
    set_np_shape(shape)
    set_np_array(array)


def reset_np() -> None:
    """Back to MXNet 1.x's legacy semantics (``npx.reset_np``)."""
    set_np(shape=False, array=False)
