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
import os
from pathlib import Path

import numpy as np

from portable.errors import SerializationError

# IDX type byte -> big-endian dtype
IDX_TYPES = {0x08: np.dtype("u1"), 0x09: np.dtype("i1"), 0x0B: np.dtype(">i2"),
             0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


def _open(path: Path):
    with open(path, "rb") as probe:
        gzipped = probe.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gzipped else open(path, "rb")


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (gzip-compressed or raw, detected from its first bytes).

    Returns:
        The array in native byte order.

    Raises:
        SerializationError: naming the file when it is not a well-formed IDX file.
    """
    path = Path(path)
    try:
        with _open(path) as handle:
            data = handle.read()
    except (OSError, EOFError) as exc:
        raise SerializationError(f"{path}: cannot read IDX file: {exc}") from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise SerializationError(f"{path}: not an IDX file (bad magic number)")
    dtype = IDX_TYPES.get(data[2])
    if dtype is None:
        raise SerializationError(f"{path}: unknown IDX data type 0x{data[2]:02x}")
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise SerializationError(f"{path}: truncated IDX header")
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) - header != expected:
        raise SerializationError(f"{path}: IDX shape {list(shape)} needs {expected} data bytes, "
                                 f"the file has {len(data) - header}")
    array = np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)
    return array.astype(dtype.newbyteorder("="))


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
