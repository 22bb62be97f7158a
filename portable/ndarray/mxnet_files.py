"""``mx.nd.save`` / ``mx.nd.load`` / ``mx.nd.load_frombuffer``: NDArrays in MXNet's binary
NDArray list format (:mod:`portable.io.mxnet_ndarray_format`), with MXNet 1.9.1's argument rules.

Example:
    >>> import portable as mx
    >>> mx.nd.save("arrays.nd", {"x": mx.nd.ones((2, 3))})          # doctest: +SKIP
    >>> mx.nd.load("arrays.nd")["x"].shape                             # doctest: +SKIP
    (2, 3)
"""
from __future__ import annotations

import os
from typing import Any

from portable.errors import PortableError
from portable.io import mxnet_ndarray_format as fmt
from portable.ndarray.ndarray import NDArray, array


class SaveTypeError(PortableError, TypeError):
    """``nd.save``/``nd.load`` got an argument of a type MXNet refuses with TypeError."""


class SaveValueError(PortableError, ValueError):
    """``nd.save`` got data that is neither an NDArray, a list nor a dict (MXNet's ValueError)."""


_WRONG_ITEMS = "save only accept dict str->NDArray or list of NDArray"


def _is_numpy_ndarray(value: Any) -> bool:
    # mx.np arrays have a save function of their own, as in MXNet
    return type(value).__module__.startswith("portable.numpy")


def save(fname: str, data: Any) -> None:
    """Save an NDArray, a list of NDArrays or a dict str -> NDArray to ``fname`` (atomically),
    byte for byte as MXNet 1.9.1 does; ``load`` gives back a list or dict (an empty dict loads
    as an empty list, as in MXNet).

    Args:
        fname: the target file.
        data: NDArray, list of NDArray, or dict of str -> NDArray (a tuple is refused, as in
            MXNet).

    Raises:
        SaveTypeError: a list or dict holds something else (or a dict key is not a str).
        SaveValueError: ``data`` is of another type.

    Example:
        >>> save("x.nd", [mx.nd.zeros((2, 3)), mx.nd.ones((1, 4))])      # doctest: +SKIP
    """
    if isinstance(data, NDArray):
        data = [data]
    if isinstance(data, dict):
        if (any(not isinstance(k, str) for k in data)
                or any(not isinstance(v, NDArray) for v in data.values())):
            raise SaveTypeError(_WRONG_ITEMS)
        values, names = list(data.values()), list(data)
    elif isinstance(data, list):
        if any(not isinstance(v, NDArray) for v in data):
            raise SaveTypeError(_WRONG_ITEMS)
        values, names = data, [None] * len(data)
    else:
        raise SaveValueError("data needs to either be a NDArray, dict of str, NDArray pairs "
                             "or a list of NDarrays.")
    if any(_is_numpy_ndarray(v) for v in values):
        raise SaveTypeError("cannot save mxnet.numpy.ndarray using mxnet.ndarray.save; "
                            "use mxnet.numpy.save instead.")
    if not isinstance(fname, (str, os.PathLike)):
        raise SaveTypeError(f"fname required to be a string, got {type(fname).__name__}")
    fmt.write(fname, [(name, value.asnumpy()) for name, value in zip(names, values)])


def _as_ndarrays(pairs: list[tuple[str | None, Any]]) -> list[NDArray] | dict[str, NDArray]:
    if pairs and pairs[0][0] is not None:
        return {name: array(value, dtype=value.dtype) for name, value in pairs}
    return [array(value, dtype=value.dtype) for _, value in pairs]


def load(fname: str) -> list[NDArray] | dict[str, NDArray]:
    """The arrays of an MXNet NDArray file: a dict if it names them, else a list, each an
    NDArray on the CPU with the stored dtype (sparse arrays come back dense).

    Raises:
        SaveTypeError: ``fname`` is not a string.
        SerializationError: the file is unreadable, truncated or not such a file.

    Example:
        >>> load("x.nd")                                                  # doctest: +SKIP
        [<NDArray 2x3 @cpu(0)>, <NDArray 1x4 @cpu(0)>]
    """
    if not isinstance(fname, (str, os.PathLike)):
        raise SaveTypeError("fname required to be a string")
    return _as_ndarrays(fmt.read(fname))


def load_frombuffer(buf: bytes | str) -> list[NDArray] | dict[str, NDArray]:
    """:func:`load` from the file's contents.

    Example:
        >>> load_frombuffer(open("x.nd", "rb").read())                    # doctest: +SKIP
        [<NDArray 2x3 @cpu(0)>, <NDArray 1x4 @cpu(0)>]
    """
    if isinstance(buf, str):
        buf = buf.encode("latin-1")  # a str holding the raw bytes, as Python 2 scripts pass
    if not isinstance(buf, (bytes, bytearray, memoryview)):
        raise SaveTypeError("buf required to be a string or bytes")
    return _as_ndarrays(fmt.read_buffer(buf))
