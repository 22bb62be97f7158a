"""The IDX file format of MNIST and Fashion-MNIST: read (raw or gzip) and write.

An IDX file is: two zero bytes, a type byte, the number of dimensions, each dimension as a
big-endian uint32, then the data in big-endian order.

Example:
    >>> import numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "x-idx3-ubyte.gz")
    >>> write_idx(path, np.arange(8, dtype=np.uint8).reshape(2, 2, 2))
    >>> read_idx(path).shape
    (2, 2, 2)
"""
from __future__ import annotations

import gzip
import math
import os
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np

from portable.errors import SerializationError
from portable.io.files import open_regular

# IDX type byte -> big-endian dtype
IDX_TYPES = {0x08: np.dtype("u1"), 0x09: np.dtype("i1"), 0x0B: np.dtype(">i2"),
             0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}
# The most data bytes read from one IDX file: MNIST's largest file holds 47 MB.
MAX_BYTES = 1 << 30


def read_idx(path: str | os.PathLike, limit: int = MAX_BYTES) -> np.ndarray:
    """Read an IDX file (gzip-compressed or raw, detected from its first bytes).

    The header is read first and the data's size, counted with Python ints, checked against
    ``limit`` before the data is read; a gzip stream is inflated no further than the header
    says (a small archive cannot expand into memory past that).

    Returns:
        The array in native byte order.

    Raises:
        SerializationError: naming the file when it is not a well-formed IDX file, or declares
            more than ``limit`` bytes of data.
    """
    path = Path(path)
    try:
        with open_regular(path, "IDX file") as (raw, _):
            gzipped = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            handle = gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw
            array = _read_body(handle, path, limit)
    except (OSError, EOFError, zlib.error) as exc:
        raise SerializationError(f"{path}: cannot read IDX file: {exc}") from None
    return array.astype(array.dtype.newbyteorder("="))


def _read_body(handle: BinaryIO, path: Path, limit: int) -> np.ndarray:
    head = handle.read(4)
    if len(head) < 4 or head[0] != 0 or head[1] != 0:
        raise SerializationError(f"{path}: not an IDX file (bad magic number)")
    dtype = IDX_TYPES.get(head[2])
    if dtype is None:
        raise SerializationError(f"{path}: unknown IDX data type 0x{head[2]:02x}")
    dims = handle.read(4 * head[3])
    if len(dims) < 4 * head[3]:
        raise SerializationError(f"{path}: truncated IDX header")
    shape = tuple(int.from_bytes(dims[i:i + 4], "big") for i in range(0, len(dims), 4))
    expected = math.prod(shape) * dtype.itemsize
    if expected > limit:
        raise SerializationError(f"{path}: IDX shape {list(shape)} declares {expected} data "
                                 f"bytes, more than the {limit}-byte limit")
    data = handle.read(expected + 1)  # one byte more shows trailing data
    if len(data) != expected:
        raise SerializationError(f"{path}: IDX shape {list(shape)} needs {expected} data bytes, "
                                 f"the file has {'more' if len(data) > expected else len(data)}")
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def write_idx(path: str | os.PathLike, array: np.ndarray, compress: bool | None = None) -> None:
    """Write ``array`` as an IDX file (gzip when ``compress`` or the name ends in ``.gz``)."""
    from portable.io.atomic import atomic_write_bytes

    array = np.asarray(array)
    codes = {dt.newbyteorder("=").str: code for code, dt in IDX_TYPES.items()}
    code = codes.get(array.dtype.newbyteorder("=").str)
    if code is None:
        raise SerializationError(f"{path}: IDX cannot store dtype {array.dtype}")
    dims = b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    body = bytes([0, 0, code, array.ndim]) + dims
    body += np.ascontiguousarray(array.astype(IDX_TYPES[code])).tobytes()
    if compress or (compress is None and str(path).endswith(".gz")):
        body = gzip.compress(body, mtime=0)
    atomic_write_bytes(path, body)
