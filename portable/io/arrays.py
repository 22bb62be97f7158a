"""Reading ``.npy`` and ``.npz`` files within a byte limit: every size a file declares is checked
before anything of that size is allocated or decompressed.

``np.load`` trusts the file it reads: an ``.npy`` header may declare terabytes (numpy even
reads a version-2 header of the length the file states before checking it), and an ``.npz``
member inflates to whatever its deflate stream holds (600 MiB of zeros fit in a 600 KiB
archive). This reader counts first:

- **Open.** Through ``portable.io.files.open_regular``: regular files only, and the open never
  blocks (a named pipe is refused, not waited on).
- **.npy.** Read the magic and the header length; refuse a header longer than numpy's own
  limit before reading it; parse it with ``numpy.lib.format.read_array_header_1_0/2_0``;
  refuse object dtypes (that would mean unpickling); count the array's bytes with Python ints
  (no int64 overflow) and check them against the limit; check that the file holds exactly that
  many bytes; only then allocate the array and read into it.
- **.npz.** Every read ``zipfile`` makes of the archive goes through a guard that refuses reads
  over ``MAX_READ_BYTES`` (so a central directory cannot be larger than that, nor be parsed
  into more Python objects than it implies). Before any member is decompressed: only stored or
  deflated members of ``.npy`` arrays (deflate decompression is bounded per read; bzip2 and
  LZMA are not, and numpy never writes them), unique names, and the zip's declared sizes
  within the limit. Then per member: its npy header (as above), which must agree with the
  zip's declared size, the running total of array bytes against the limit, and exactly the
  declared bytes read, in chunks, into the preallocated array: a member whose deflate stream
  holds more than the zip declares cannot inflate past it.

Nothing is ever unpickled. Errors are ``SerializationError`` naming the file (and member) for
a malformed file and ``MemoryBudgetError`` for one over the limit.

Example:
    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "x.npz")
    >>> np.savez(path, x=np.arange(3))
    >>> read_arrays(path, limit=1 << 20)["x"]
    array([0, 1, 2])
"""
from __future__ import annotations

import io
import os
import struct
import tokenize
import zipfile
import zlib
from typing import BinaryIO

import numpy as np
from numpy.lib import format as npy_format

from portable.errors import MemoryBudgetError, SerializationError
from portable.io.files import open_regular
from portable.sizes import format_bytes

# A limit for callers that were given none: generous for inputs, and still refusing a file
# that declares more than a phone (or a CI runner) could hold.
DEFAULT_LIMIT = 1 << 30
# numpy's own bound on a header (np.load refuses longer ones unless allow_pickle).
MAX_HEADER_BYTES = 10000
# The largest single read zipfile may make of an archive: bounds its central directory (about
# 10 bytes of Python objects per directory byte once parsed; 10000 members take ~0.8 MiB) and
# the chunks members are read in.
MAX_READ_BYTES = 1 << 20
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a local file header, or an empty archive
_HEADER_READERS = {(1, 0): (npy_format.read_array_header_1_0, "<H"),
                   (2, 0): (npy_format.read_array_header_2_0, "<I")}
_COMPRESSIONS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}
# What zipfile and numpy's header parser raise for a malformed archive or header (numpy
# tokenizes a header that does not parse, as Python 2 once wrote them).
_MALFORMED = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, TypeError,
              SyntaxError, RecursionError, OverflowError, RuntimeError, NotImplementedError,
              KeyError, struct.error, tokenize.TokenError)


def array_nbytes(shape: tuple, dtype: np.dtype) -> int:
    """Bytes of an array of ``shape`` and ``dtype``, counted with Python ints (exact for any
    shape a file may declare, where numpy's int64 product would wrap)."""
    count = 1
    for dim in shape:
        count *= int(dim)
    return count * np.dtype(dtype).itemsize


def check_limit(nbytes: int, limit: int, what: str) -> None:
    """Refuse ``nbytes`` over ``limit`` (MemoryBudgetError naming ``what``), before they are
    allocated."""
    if nbytes > limit:
        raise MemoryBudgetError(f"{what} needs {format_bytes(nbytes)} ({nbytes} bytes), more "
                                f"than the limit of {format_bytes(limit)}")


def read_arrays(path: str | os.PathLike, limit: int = DEFAULT_LIMIT,
                what: str = "arrays") -> np.ndarray | dict[str, np.ndarray]:
    """The array of an ``.npy`` file or the arrays of an ``.npz`` (a dict by name, in the
    archive's order), told apart by their first bytes as ``np.load`` does.

    Args:
        path: the file.
        limit: the most bytes the arrays may take together.
        what: what the file holds, for messages (``"inputs"``).

    Raises:
        SerializationError: not a regular file, neither format, or malformed (names the file
            and the member).
        MemoryBudgetError: the arrays would take more than ``limit`` bytes.
    """
    source = os.fspath(path)
    with open_regular(source, what) as (handle, size):
        head = _read_exactly(handle, len(npy_format.MAGIC_PREFIX), f"{what} {source}",
                             allow_short=True)
        handle.seek(0)
        if head.startswith(_ZIP_MAGIC):
            return _read_npz(handle, source, limit, what)
        if head == npy_format.MAGIC_PREFIX:
            return _read_npy(handle, size, source, limit, what)
    raise SerializationError(f"cannot read {what} {source}: neither an .npy array nor an .npz "
                             f"archive (it starts with {head!r})")


def read_npy(path: str | os.PathLike, limit: int = DEFAULT_LIMIT,
             what: str = "array") -> np.ndarray:
    """The array of an ``.npy`` file, read within ``limit`` bytes (see ``read_arrays``)."""
    source = os.fspath(path)
    with open_regular(source, what) as (handle, size):
        return _read_npy(handle, size, source, limit, what)


def read_npz(path: str | os.PathLike, limit: int = DEFAULT_LIMIT,
             what: str = "arrays") -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` archive by name, read within ``limit`` bytes in all."""
    source = os.fspath(path)
    with open_regular(source, what) as (handle, _):
        return _read_npz(handle, source, limit, what)


# -- .npy --------------------------------------------------------------------------------------


def _read_npy(handle: BinaryIO, size: int, source: str, limit: int, what: str) -> np.ndarray:
    label = f"{what} {source}"
    shape, fortran, dtype, header_bytes = _read_header(handle, label)
    nbytes = array_nbytes(shape, dtype)
    check_limit(nbytes, limit, f"{label} ({_describe(shape, dtype)})")
    if size - header_bytes != nbytes:
        raise SerializationError(f"cannot read {label}: its header declares "
                                 f"{_describe(shape, dtype)} ({nbytes} bytes of data) but "
                                 f"{size - header_bytes} bytes follow it")
    array = _empty(shape, fortran, dtype, label)
    _fill(array, handle, nbytes, label)
    return array.T if fortran else array


def _read_header(stream: BinaryIO, label: str) -> tuple[tuple, bool, np.dtype, int]:
    """``(shape, fortran_order, dtype, bytes up to the data)`` of the npy header ``stream``
    starts with; the header's length is checked before the header is read."""
    try:
        version = npy_format.read_magic(stream)
    except ValueError as exc:  # the wrong magic, or too short for one
        raise SerializationError(f"cannot read {label}: not an .npy array ({exc})") from None
    except _MALFORMED as exc:  # a damaged archive member
        raise SerializationError(f"cannot read {label}: {_first_line(exc)}") from None
    if version not in _HEADER_READERS:
        raise SerializationError(f"cannot read {label}: .npy format version "
                                 f"{version[0]}.{version[1]} is not supported (1.0 and 2.0 "
                                 f"are; 3.0 holds UTF-8 field names)")
    parse, length_format = _HEADER_READERS[version]
    length_field = _read_exactly(stream, struct.calcsize(length_format), label, "header")
    (length,) = struct.unpack(length_format, length_field)
    if length > MAX_HEADER_BYTES:
        raise SerializationError(f"cannot read {label}: its header claims {length} bytes, more "
                                 f"than the {MAX_HEADER_BYTES} numpy allows")
    header = _read_exactly(stream, length, label, "header")
    try:
        shape, fortran, dtype = parse(io.BytesIO(length_field + header))
    except (*_MALFORMED, MemoryError) as exc:  # Python's parser says MemoryError for a header
        # nested too deep ('[[[[...'): the header is at most MAX_HEADER_BYTES, so it is that
        raise SerializationError(f"cannot read {label}: malformed .npy header: "
                                 f"{_first_line(exc)}") from None
    if dtype.hasobject:
        raise SerializationError(f"cannot read {label}: dtype {dtype} holds Python objects, "
                                 f"which only unpickling could read (never done here)")
    if dtype.subdtype is not None or np.empty(0, dtype).dtype != dtype:
        # A sub-array dtype would add dims; an unsized string ('S0') is allocated as 'S1':
        # either way the array would not be the size counted here. numpy writes neither.
        raise SerializationError(f"cannot read {label}: dtype {dtype!r} is not one numpy "
                                 f"stores an array in")
    if any(dim < 0 for dim in shape) or len(shape) > 64:
        raise SerializationError(f"cannot read {label}: shape {shape} is not an array shape")
    return shape, fortran, dtype, len(npy_format.MAGIC_PREFIX) + 2 + len(length_field) + length


def _empty(shape: tuple, fortran: bool, dtype: np.dtype, label: str) -> np.ndarray:
    """The array to read into, C-ordered in the file's byte order (a Fortran-ordered array is
    stored transposed, as numpy stores it)."""
    try:
        return np.empty(shape[::-1] if fortran else shape, dtype)
    except (ValueError, OverflowError) as exc:  # more elements than an index can count
        raise SerializationError(f"cannot read {label}: shape {shape} cannot be allocated: "
                                 f"{exc}") from None


def _fill(array: np.ndarray, stream: BinaryIO, nbytes: int, label: str) -> None:
    """Read exactly ``nbytes`` from ``stream`` into ``array``'s memory, ``MAX_READ_BYTES`` at
    a time (never more than declared, so a stream holding more cannot grow the result)."""
    if nbytes == 0:
        return
    memory = array.reshape(-1).view(np.uint8)
    done = 0
    while done < nbytes:
        try:
            chunk = stream.read(min(MAX_READ_BYTES, nbytes - done))
        except _MALFORMED as exc:
            raise SerializationError(f"cannot read {label}: {_first_line(exc)}") from None
        if not chunk:
            raise SerializationError(f"cannot read {label}: the data ends after {done} of "
                                     f"{nbytes} bytes")
        memory[done:done + len(chunk)] = np.frombuffer(chunk, np.uint8)
        done += len(chunk)


# -- .npz --------------------------------------------------------------------------------------


class _GuardedReads:
    """The archive as zipfile sees it: any single read over ``MAX_READ_BYTES`` is refused.

    zipfile reads the whole central directory in one read of the size the archive declares;
    this bounds it (and so the ZipInfo objects parsed from it) whatever the archive claims.
    """

    def __init__(self, handle: BinaryIO, size: int, label: str) -> None:
        self._handle, self._size, self._label = handle, size, label

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            n = max(self._size - self._handle.tell(), 0)
        if n > MAX_READ_BYTES:
            raise SerializationError(f"cannot read {self._label}: the archive asks for a read "
                                     f"of {n} bytes (its central directory), more than the "
                                     f"{MAX_READ_BYTES} allowed")
        return self._handle.read(n)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._handle.seek(offset, whence)

    def tell(self) -> int:
        return self._handle.tell()

    def seekable(self) -> bool:
        return True


def _read_npz(handle: BinaryIO, source: str, limit: int, what: str) -> dict[str, np.ndarray]:
    label = f"{what} {source}"
    size = handle.seek(0, os.SEEK_END)
    handle.seek(0)
    try:
        archive = zipfile.ZipFile(_GuardedReads(handle, size, label))
    except _MALFORMED as exc:
        raise SerializationError(f"cannot read {label}: not a readable .npz archive: "
                                 f"{_first_line(exc)}") from None
    with archive:
        members = archive.infolist()
        _check_members(members, label, limit)
        arrays: dict[str, np.ndarray] = {}
        total = 0
        for info in members:
            array, total = _read_member(archive, info, f"{label}: member {info.filename!r}",
                                        limit, total)
            arrays[info.filename[:-len(".npy")]] = array
    return arrays


def _check_members(members: list[zipfile.ZipInfo], label: str, limit: int) -> None:
    """What can be told from the central directory alone, before anything is decompressed."""
    names = [info.filename for info in members]
    if len(set(names)) != len(names):
        twice = sorted({name for name in names if names.count(name) > 1})
        raise SerializationError(f"cannot read {label}: members {twice} appear more than once")
    for info in members:
        member = f"{label}: member {info.filename!r}"
        if not info.filename.endswith(".npy") or info.is_dir():
            raise SerializationError(f"cannot read {member}: not an .npy array (an .npz holds "
                                     f".npy members only)")
        if info.compress_type not in _COMPRESSIONS:
            raise SerializationError(f"cannot read {member}: compression method "
                                     f"{info.compress_type} is not stored or deflated (the "
                                     f"only ones numpy writes)")
        if info.flag_bits & 0x1:
            raise SerializationError(f"cannot read {member}: it is encrypted")
    # Each member's declared size is its header (at most 10 + MAX_HEADER_BYTES) and its data.
    declared = sum(info.file_size for info in members)
    if sum(max(info.file_size - 10 - MAX_HEADER_BYTES, 0) for info in members) > limit:
        raise MemoryBudgetError(f"{label}: its members declare {format_bytes(declared)} "
                                f"({declared} bytes) uncompressed, more than the limit of "
                                f"{format_bytes(limit)}; nothing was decompressed")


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, label: str, limit: int,
                 before: int) -> tuple[np.ndarray, int]:
    """One member's array, and the bytes of the arrays read so far (``before`` bytes were read
    before this member) held against ``limit``."""
    try:
        stream = archive.open(info)
    except _MALFORMED as exc:
        raise SerializationError(f"cannot read {label}: {_first_line(exc)}") from None
    with stream:
        shape, fortran, dtype, header_bytes = _read_header(stream, label)
        nbytes = array_nbytes(shape, dtype)
        what = f"{label} ({_describe(shape, dtype)})" + (
            f" with the {format_bytes(before)} of members before it" if before else "")
        check_limit(before + nbytes, limit, what)
        if info.file_size != header_bytes + nbytes:
            raise SerializationError(f"cannot read {label}: the zip declares {info.file_size} "
                                     f"bytes but its .npy header declares "
                                     f"{header_bytes + nbytes} ({_describe(shape, dtype)})")
        array = _empty(shape, fortran, dtype, label)
        _fill(array, stream, nbytes, label)
    return (array.T if fortran else array), before + nbytes


# -- helpers -----------------------------------------------------------------------------------


def _read_exactly(stream: BinaryIO, n: int, label: str, part: str = "",
                  allow_short: bool = False) -> bytes:
    try:
        data = stream.read(n)
    except _MALFORMED as exc:
        raise SerializationError(f"cannot read {label}: {_first_line(exc)}") from None
    if len(data) != n and not allow_short:
        raise SerializationError(f"cannot read {label}: its {part} ends after {len(data)} of "
                                 f"{n} bytes")
    return data


def _describe(shape: tuple, dtype: np.dtype) -> str:
    return f"{dtype}[{', '.join(str(d) for d in shape)}]"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
