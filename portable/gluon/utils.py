"""Small helpers shared by the Gluon modules: nested argument structures and device lists.

A block's inputs and outputs may be nested lists and tuples of arrays (an RNN returns
``(output, [h, c])``). ``flatten`` turns such a structure into a flat list of leaves plus a
format, and ``regroup`` rebuilds the structure from leaves; the format is hashable, so it can be
part of a cache key.

Example:
    >>> leaves, fmt = flatten((1, [2, None]))
    >>> leaves, regroup(leaves, fmt)
    ([1, 2], (1, [2, None]))
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from portable.device import Device, as_device

LEAF = 0
ABSENT = -1


def flatten(value: Any, is_leaf: Callable[[Any], bool] | None = None) -> tuple[list, Any]:
    """Flatten nested lists/tuples into ``(leaves, fmt)``; None becomes no leaf.

    Args:
        value: a leaf, None, or a (nested) list or tuple of them.
        is_leaf: which values are leaves (default: anything that is not a list, tuple or None).

    Returns:
        The leaves in order and a hashable format for :func:`regroup`.
    """
    leaves: list = []
    return leaves, _walk(value, leaves, is_leaf)


# (module-level recursion: a nested recursive closure would be a reference cycle holding the
# leaves, so every call would leave its arrays to the cyclic garbage collector)
def _walk(item: Any, leaves: list, is_leaf: Callable[[Any], bool] | None) -> Any:
    if item is None:
        return ABSENT
    if isinstance(item, (list, tuple)):
        return ("L" if isinstance(item, list) else "T",
                tuple(_walk(i, leaves, is_leaf) for i in item))
    if is_leaf is not None and not is_leaf(item):
        raise TypeError(f"expected an array (or a list/tuple of arrays, or None), got "
                        f"{type(item).__name__}")
    leaves.append(item)
    return LEAF


def regroup(leaves: Sequence[Any], fmt: Any) -> Any:
    """Rebuild the structure described by ``fmt`` (from :func:`flatten`) from ``leaves``."""
    taken = iter(leaves)
    result = _build(fmt, taken)
    if next(taken, _END) is not _END:
        used = len(leaves) - 1 - sum(1 for _ in taken)
        raise ValueError(f"regroup: the format takes {used} leaves, got {len(leaves)}")
    return result


_END = object()


def _build(spec: Any, taken: Any) -> Any:
    if spec == ABSENT:
        return None
    if spec == LEAF:
        leaf = next(taken, _END)
        if leaf is _END:
            raise ValueError("regroup: the format takes more leaves than were given")
        return leaf
    kind, children = spec
    items = [_build(c, taken) for c in children]
    return items if kind == "L" else tuple(items)


def as_device_list(device: Any = None) -> list[Device]:
    """A device, a list of devices, or None (the CPU) as a list of Devices."""
    if device is None:
        return [as_device(None)]
    if isinstance(device, (list, tuple)):
        if not device:
            raise ValueError("the list of devices is empty")
        return [as_device(d) for d in device]
    return [as_device(device)]


def split_data(data: Any, num_slice: int, batch_axis: int = 0, even_split: bool = True) -> list:
    """Split an NDArray into ``num_slice`` slices along ``batch_axis`` (MXNet 1.x helper).

    Example:
        >>> import portable as pt
        >>> [s.shape for s in split_data(pt.nd.zeros((4, 2)), 2)]
        [(2, 2), (2, 2)]
    """
    size = data.shape[batch_axis]
    if even_split and size % num_slice:
        raise ValueError(f"data with shape {data.shape} cannot be split evenly into "
                         f"{num_slice} slices along axis {batch_axis}; use even_split=False")
    if num_slice == 1:
        return [data]
    step = size // num_slice
    bounds = [i * step for i in range(num_slice)] + [size]
    index: list[Any] = [slice(None)] * data.ndim
    slices = []
    for start, stop in zip(bounds[:-1], bounds[1:]):
        index[batch_axis] = slice(start, stop)
        slices.append(data[tuple(index)])
    return slices


def split_and_load(data: Any, device_list: Any, batch_axis: int = 0,
                   even_split: bool = True) -> list:
    """Split ``data`` along ``batch_axis`` and load each slice onto one device."""
    from portable.ndarray import NDArray, array

    devices = as_device_list(device_list)
    if not isinstance(data, NDArray):
        data = array(data, device=devices[0])
    if len(devices) == 1:
        return [data.as_in_context(devices[0])]
    slices = split_data(data, len(devices), batch_axis, even_split)
    return [s.as_in_context(d) for s, d in zip(slices, devices)]


def clip_global_norm(arrays: Sequence[Any], max_norm: float, check_isfinite: bool = True) -> Any:
    """Scale ``arrays`` in place so that their joint 2-norm is at most ``max_norm`` (MXNet 1.x
    ``gluon.utils.clip_global_norm``; the usual guard against exploding RNN gradients).

    Args:
        arrays: the NDArrays (usually gradients) to rescale together.
        max_norm: the largest joint norm left.
        check_isfinite: return the norm as a float and warn if it is NaN or infinite;
            otherwise return it as a shape (1,) NDArray without waiting for it.

    Returns:
        The joint norm before clipping.

    Example:
        >>> grads = [p.grad() for p in net.collect_params().values()]   # doctest: +SKIP
        >>> clip_global_norm(grads, 5.0)                                 # doctest: +SKIP
    """
    import warnings

    import numpy as np

    from portable import ndarray as nd

    if not arrays:
        raise ValueError("clip_global_norm needs at least one array")
    squares = [nd.dot(a.reshape((-1,)), a.reshape((-1,))).reshape((1,)) for a in arrays]
    total = squares[0]
    for square in squares[1:]:
        total = total + square
    total = nd.sqrt(total)
    if check_isfinite and not np.isfinite(total.asscalar()):
        warnings.warn("nan or inf is detected. Clipping results will be undefined.",
                      UserWarning, stacklevel=2)
    scale = nd.minimum(max_norm / (total + 1e-8), nd.ones((1,)))
    for array in arrays:
        array *= scale
    return total.asscalar() if check_isfinite else total
