"""MXNet's binary NDArray list format: the files ``mx.nd.save``, ``Block.save_parameters``,
``Module.save_checkpoint`` and the model-zoo ``.params`` files are made of (MXNet 1.x,
``src/ndarray/ndarray.cc``), read and written with NumPy only.

Layout (every integer little-endian)::

    uint64 0x112 (list magic), uint64 0 (reserved)
    uint64 count, then count arrays, each:
        uint32 magic        0xF993fac9 (V2), 0xF993faca (V3: NumPy shape semantics),
                            0xF993fac8 (V1) or, in the oldest files, the ndim itself
        V2/V3:  int32 storage type (0 dense, 1 row_sparse, 2 csr)
                [sparse: storage shape]
        shape   int32 ndim + int64 dims (V1-V3); uint32 dims after the ndim magic (oldest)
                (ndim 0 means "no array" outside V3, and nothing more follows)
        int32 device type, int32 device id   (ignored: arrays load onto the host)
        int32 dtype flag    (mshadow: 0 float32, 1 float64, 2 float16, 3 uint8, 4 int32,
                            5 int8, 6 int64, 7 bool, 8 int16, 9 uint16, 10 uint32,
                            11 uint64, 12 bfloat16)
        [sparse: per aux array: int32 dtype flag, shape]
        raw data (C order), [sparse: raw aux data]
    uint64 name count (0, or count), then per name: uint64 length, UTF-8 bytes

Sparse arrays are returned dense (row_sparse rows or csr entries scattered into zeros). Every
count, dimension and length is checked against the bytes left in the file before anything is
allocated, so a truncated or hostile file raises SerializationError naming the file and array.

Example:
    >>> write("x.nd", {"w": np.ones((2, 3), np.float32)})      # doctest: +SKIP
    >>> read("x.nd")[0][0], read("x.nd")[0][1].shape             # doctest: +SKIP
    ('w', (2, 3))
"""
from __future__ import annotations

import io
import os
import struct
from collections.abc import Iterable, Mapping
from typing import Any, BinaryIO, Union

import numpy as np

from portable.errors import MissingDependencyError, SerializationError
from portable.io.atomic import atomic_writer

LIST_MAGIC = 0x112
V1_MAGIC, V2_MAGIC, V3_MAGIC = 0xF993FAC8, 0xF993FAC9, 0xF993FACA
DENSE, ROW_SPARSE, CSR = 0, 1, 2
CPU_DEVICE_TYPE = 1
# MXNet's TShape has no fixed limit; 32 is far above any real array and keeps a hostile
# ndim from costing anything.
MAX_NDIM = 32
MAX_NAME_BYTES = 1 << 16
# A sparse array is returned dense: its dense size is not bounded by the file's, so by this.
MAX_DENSIFIED_BYTES = 1 << 32

DTYPE_FLAGS: dict[int, np.dtype] = {
    0: np.dtype("<f4"), 1: np.dtype("<f8"), 2: np.dtype("<f2"), 3: np.dtype("u1"),
    4: np.dtype("<i4"), 5: np.dtype("i1"), 6: np.dtype("<i8"), 7: np.dtype("?"),
    8: np.dtype("<i2"), 9: np.dtype("<u2"), 10: np.dtype("<u4"), 11: np.dtype("<u8"),
}
BFLOAT16_FLAG = 12
_STORAGE_NAMES = {DENSE: "default", ROW_SPARSE: "row_sparse", CSR: "csr"}

NamedArrays = Union[Mapping[str, Any], Iterable[Any]]


def _bfloat16() -> np.dtype:
    try:
        import ml_dtypes
    except ImportError:
        raise MissingDependencyError("bfloat16 arrays need the ml_dtypes package: "
                                     "pip install ml_dtypes") from None
    return np.dtype(ml_dtypes.bfloat16)


def dtype_of_flag(flag: int) -> np.dtype | None:
    """The NumPy dtype of an mshadow dtype flag (None for an unknown flag)."""
    if flag == BFLOAT16_FLAG:
        return _bfloat16()
    return DTYPE_FLAGS.get(flag)


def flag_of_dtype(dtype: Any) -> int:
    """The mshadow dtype flag of a NumPy dtype (SerializationError if MXNet has none)."""
    dtype = np.dtype(dtype)
    for flag, known in DTYPE_FLAGS.items():
        if known == dtype.newbyteorder("<") or known == dtype:
            return flag
    if dtype.name == "bfloat16":
        return BFLOAT16_FLAG
    raise SerializationError(f"dtype {dtype} has no MXNet dtype flag; MXNet files hold "
                             f"{sorted(str(d) for d in DTYPE_FLAGS.values())} and bfloat16")


# -- reading ------------------------------------------------------------------------------------

class _Reader:
    """Bounded reads from a stream of known size; every failure names the source and item."""

    def __init__(self, stream: BinaryIO, size: int, source: str) -> None:
        self.stream, self.size, self.source, self.pos = stream, size, source, 0
        self.item = "the header"

    @property
    def left(self) -> int:
        return self.size - self.pos

    def fail(self, problem: str) -> SerializationError:
        return SerializationError(f"MXNet NDArray file {self.source}: {self.item}: {problem}")

    def take(self, count: int) -> bytes:
        if count > self.left:
            raise self.fail(f"truncated: needs {count} bytes at offset {self.pos}, "
                            f"{self.left} left")
        data = self.stream.read(count)
        if len(data) != count:
            raise self.fail(f"truncated: short read at offset {self.pos}")
        self.pos += count
        return data

    def unpack(self, fmt: str) -> int:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def shape(self, dim_format: str, ndim: int | None = None) -> tuple[int, ...] | None:
        """A shape (int32 ndim unless given, then dims); None for ndim -1 (unknown, V3)."""
        if ndim is None:
            ndim = self.unpack("<i")
            if ndim == -1:
                return None
        if not 0 <= ndim <= MAX_NDIM:
            raise self.fail(f"ndim {ndim} is outside 0..{MAX_NDIM}")
        size = struct.calcsize(dim_format)
        dims = struct.unpack(f"<{ndim}{dim_format}", self.take(ndim * size))
        if any(d < 0 for d in dims):
            if any(d < -1 for d in dims):
                raise self.fail(f"shape {dims} has a negative dimension")
            return None  # -1: an unknown dimension (NumPy shape semantics)
        return tuple(int(d) for d in dims)

    def array(self, shape: tuple[int, ...], dtype: np.dtype, what: str) -> np.ndarray:
        count = 1
        for dim in shape:
            count *= dim  # Python ints: no wrap-around on hostile dims
        nbytes = count * dtype.itemsize
        if nbytes > self.left:
            raise self.fail(f"{what} of shape {shape} and dtype {dtype} needs {nbytes} bytes, "
                            f"only {self.left} are left (truncated or corrupted)")
        out = np.empty(shape, dtype)
        if nbytes:
            got = self.stream.readinto(out.reshape(-1).view(np.uint8))
            if got != nbytes:
                raise self.fail(f"truncated: short read of {what} at offset {self.pos}")
        self.pos += nbytes
        return out

    def dtype(self, what: str) -> np.dtype:
        flag = self.unpack("<i")
        dtype = dtype_of_flag(flag)
        if dtype is None:
            raise self.fail(f"unknown dtype flag {flag} for {what}")
        return dtype


def _read_array(reader: _Reader) -> np.ndarray:
    magic = reader.unpack("<I")
    stype, sshape, np_semantics = DENSE, None, magic == V3_MAGIC
    if magic in (V2_MAGIC, V3_MAGIC):
        stype = reader.unpack("<i")
        if stype not in _STORAGE_NAMES:
            raise reader.fail(f"unknown storage type {stype}")
        if stype != DENSE:
            sshape = reader.shape("q")
            if sshape is None:
                raise reader.fail("sparse array with an unknown storage shape")
        shape = reader.shape("q")
    elif magic == V1_MAGIC:
        shape = reader.shape("q")
    else:  # the oldest files: the magic is the ndim, dims are uint32
        if magic > MAX_NDIM:
            raise reader.fail(f"bad array magic 0x{magic:08x} (not an NDArray record)")
        shape = reader.shape("I", magic)
    if shape is None or (not np_semantics and len(shape) == 0):
        # MXNet loads an empty NDArray handle here (and so cannot read back the 0-d arrays
        # it writes); portable has no such value.
        raise reader.fail("holds no array (an empty NDArray handle, or a 0-d array saved "
                          "outside NumPy shape semantics, which MXNet 1.x cannot load either)")
    reader.take(8)  # device type and id: arrays load onto the host
    dtype = reader.dtype("the data")
    if stype == DENSE:
        return reader.array(shape, dtype, "the data")
    aux = []
    for i in range(2 if stype == CSR else 1):
        aux_dtype = reader.dtype(f"aux array {i}")
        aux_shape = reader.shape("q")
        if aux_shape is None or len(aux_shape) != 1:
            raise reader.fail(f"aux array {i} has shape {aux_shape}, not one dimension")
        aux.append((aux_dtype, aux_shape))
    values = reader.array(sshape, dtype, "the sparse values")
    indices = [reader.array(s, t, f"aux array {i}") for i, (t, s) in enumerate(aux)]
    return _densify(reader, stype, shape, values, indices)


def _densify(reader: _Reader, stype: int, shape: tuple[int, ...], values: np.ndarray,
             aux: list[np.ndarray]) -> np.ndarray:
    """The dense array of a row_sparse (aux: row ids) or csr (aux: indptr, column ids) one."""
    if any(a.dtype.kind not in "iu" for a in aux):
        raise reader.fail("sparse index arrays must hold integers")
    nbytes = values.dtype.itemsize
    for dim in shape:
        nbytes *= dim
    if nbytes > MAX_DENSIFIED_BYTES:
        raise reader.fail(f"the {_STORAGE_NAMES[stype]} array of shape {shape} would take "
                          f"{nbytes} bytes dense (portable loads sparse arrays dense; at most "
                          f"{MAX_DENSIFIED_BYTES})")
    dense = np.zeros(shape, values.dtype)
    if stype == ROW_SPARSE:
        rows = aux[0].astype(np.int64)
        if (len(shape) == 0 or values.shape != (len(rows),) + shape[1:]
                or (rows.size and (rows.min() < 0 or rows.max() >= shape[0]))):
            raise reader.fail(f"row_sparse values {values.shape} and row ids {rows.shape} do "
                              f"not fit shape {shape}")
        dense[rows] = values
        return dense
    indptr, cols = (a.astype(np.int64) for a in aux)
    if (len(shape) != 2 or indptr.shape != (shape[0] + 1,) or values.shape != cols.shape
            or (indptr.size and (indptr[0] != 0 or indptr[-1] != cols.size
                                 or np.any(np.diff(indptr) < 0)))
            or (cols.size and (cols.min() < 0 or cols.max() >= shape[1]))):
        raise reader.fail(f"csr values {values.shape}, indptr {indptr.shape} and column ids "
                          f"{cols.shape} do not describe a matrix of shape {shape}")
    rows = np.repeat(np.arange(shape[0]), np.diff(indptr))
    dense[rows, cols] = values
    return dense


def _read_stream(stream: BinaryIO, size: int, source: str) -> list[tuple[str | None, np.ndarray]]:
    reader = _Reader(stream, size, source)
    header = reader.unpack("<Q") if reader.left >= 8 else None
    if header != LIST_MAGIC:
        raise reader.fail("not an MXNet NDArray file (its first 8 bytes are not the list "
                          "magic 0x112)")
    reader.take(8)  # reserved
    count = reader.unpack("<Q")
    if count > reader.left // 4:  # every array takes 4 bytes at least
        raise reader.fail(f"declares {count} arrays, more than its {reader.left} bytes can hold")
    arrays = []
    for index in range(count):
        reader.item = f"array {index}"
        arrays.append(_read_array(reader))
    reader.item = "the names"
    name_count = reader.unpack("<Q")
    if name_count not in (0, count):
        raise reader.fail(f"{name_count} names for {count} arrays")
    names: list[str | None] = []
    for index in range(name_count):
        reader.item = f"name {index}"
        length = reader.unpack("<Q")
        if length > min(reader.left, MAX_NAME_BYTES):
            raise reader.fail(f"name length {length} exceeds the {reader.left} bytes left")
        try:
            names.append(reader.take(length).decode("utf-8"))
        except UnicodeDecodeError:
            raise reader.fail("the name is not UTF-8") from None
    if not names:
        names = [None] * count
    return list(zip(names, arrays))


def read(path: str | os.PathLike) -> list[tuple[str | None, np.ndarray]]:
    """The arrays of an MXNet NDArray file, in file order, as (name, array) pairs.

    Args:
        path: a file written by ``mx.nd.save`` (or a Gluon / Module ``.params`` file).

    Returns:
        (name, writable host array of the stored dtype); every name is None when the file
        holds an unnamed list.

    Raises:
        SerializationError: the file cannot be read, or is not, or not wholly, such a file.

    Example:
        >>> [(n, a.shape) for n, a in read("net.params")]           # doctest: +SKIP
        [('0.weight', (4, 3)), ('0.bias', (4,))]
    """
    try:
        with open(path, "rb") as stream:
            return _read_stream(stream, os.fstat(stream.fileno()).st_size, os.fspath(path))
    except OSError as exc:
        raise SerializationError(f"MXNet NDArray file {os.fspath(path)}: cannot read it: "
                                 f"{exc.strerror or exc}") from None


def read_buffer(buf: bytes, source: str = "<buffer>") -> list[tuple[str | None, np.ndarray]]:
    """:func:`read` of the file's bytes (``mx.nd.load_frombuffer``); ``source`` names it in
    errors.

    Example:
        >>> read_buffer(encode([np.zeros(2, np.float32)]))[0][1]
        array([0., 0.], dtype=float32)
    """
    view = memoryview(buf).cast("B")
    return _read_stream(io.BytesIO(view), view.nbytes, source)


def is_mxnet_ndarray_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` starts with the NDArray list magic (False if it cannot be read)."""
    try:
        with open(path, "rb") as stream:
            head = stream.read(8)
    except OSError:
        return False
    return len(head) == 8 and struct.unpack("<Q", head)[0] == LIST_MAGIC


# -- writing ------------------------------------------------------------------------------------

def _pairs(named_arrays: NamedArrays) -> list[tuple[str | None, np.ndarray]]:
    items = named_arrays.items() if isinstance(named_arrays, Mapping) else named_arrays
    pairs = []
    for item in items:
        name, value = item if isinstance(item, tuple) and len(item) == 2 else (None, item)
        pairs.append((name, np.asarray(value)))
    named = [name is not None for name, _ in pairs]
    if any(named) and not all(named):
        raise SerializationError("MXNet NDArray files name every array or none: got "
                                 f"{sum(named)} named of {len(pairs)}")
    return pairs


def _chunks(named_arrays: NamedArrays) -> Iterable[bytes | memoryview]:
    pairs = _pairs(named_arrays)
    yield struct.pack("<QQQ", LIST_MAGIC, 0, len(pairs))
    for index, (name, array) in enumerate(pairs):
        flag = flag_of_dtype(array.dtype)
        if array.ndim > MAX_NDIM:
            raise SerializationError(f"array {index} ({name}) has {array.ndim} dimensions; "
                                     f"at most {MAX_NDIM} are written")
        # as MXNet 1.x writes a dense array: V2, default storage, shape, cpu(0), dtype flag
        yield struct.pack(f"<Iii{array.ndim}qiii", V2_MAGIC, DENSE, array.ndim, *array.shape,
                          CPU_DEVICE_TYPE, 0, flag)
        data = np.ascontiguousarray(array, array.dtype.newbyteorder("<"))
        yield memoryview(data.reshape(-1).view(np.uint8))
    names = [name for name, _ in pairs if name is not None]
    yield struct.pack("<Q", len(names))
    for name in names:
        encoded = str(name).encode("utf-8")
        yield struct.pack("<Q", len(encoded)) + encoded


def encode(named_arrays: NamedArrays) -> bytes:
    """The bytes :func:`write` writes.

    Example:
        >>> encode([])[:8] == LIST_MAGIC.to_bytes(8, "little")
        True
    """
    return b"".join(bytes(chunk) for chunk in _chunks(named_arrays))


def write(path: str | os.PathLike, named_arrays: NamedArrays) -> None:
    """Write arrays as MXNet 1.9.1's ``mx.nd.save`` does, byte for byte, atomically.

    Args:
        path: the target file.
        named_arrays: a dict name -> array (a named file), or a sequence of arrays or of
            (name, array) pairs (names all None: an unnamed list, as ``nd.save`` of a list).

    Example:
        >>> write("x.nd", {"w": np.ones(3, np.float32)})             # doctest: +SKIP
    """
    chunks = list(_chunks(named_arrays))  # any refusal happens before the file is touched
    with atomic_writer(path) as handle:
        for chunk in chunks:
            handle.write(chunk)
