"""Opening files that someone else may have written: the one place where a path read from a
file is resolved, and where every loader opens what it reads.

Three rules hold for every file a loader opens through here:

- **Inside its folder.** A path named *inside* a file (an ONNX tensor's external-data
  ``location``, a checkpoint manifest's ``path``) is resolved with symbolic links followed, and
  must land inside the real path of the folder it is relative to: absolute paths, ``..``, a NUL
  byte and links (to files or folders) that lead elsewhere are refused.
- **Regular files only.** A named pipe, socket, device (``/dev/zero``) or folder is refused
  before a byte is read, and the open itself never blocks (a FIFO with no writer would hang a
  plain ``open``).
- **Size before reading.** The size is taken from the open file (``fstat``) and checked against
  the caller's limit before anything is allocated; a read that returns another size (the file
  changed under us) is refused too.

Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with open(os.path.join(folder, "w.bin"), "wb") as handle:
    ...     _ = handle.write(b"abc")
    >>> read_bytes(resolve_inside(folder, "w.bin", "external data"), "external data", limit=16)
    b'abc'
    >>> resolve_inside(folder, "../etc/passwd", "external data")
    Traceback (most recent call last):
    ...
    portable.errors.SerializationError: external data '../etc/passwd' must name a file inside ...
"""
from __future__ import annotations

import mmap
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

from portable.errors import SerializationError

# JSON files (manifests, symbol files) are small; one this large is not one portable wrote.
MAX_TEXT_BYTES = 64 << 20

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


def resolve_inside(base: str | os.PathLike, relative: str, what: str) -> str:
    """The real path of ``relative`` (a path read from a file) under the folder ``base``.

    Args:
        base: the folder the path is relative to (the model's or the manifest's folder).
        relative: the path as the file wrote it.
        what: what the path names, for messages (``"tensor 'w': external data location"``).

    Raises:
        SerializationError: ``relative`` is not a string, empty, holds a NUL byte, is
            absolute, or resolves (after following every link) outside ``base``.
    """
    if not isinstance(relative, str) or not relative or "\x00" in relative:
        raise SerializationError(f"{what} {relative!r} is not a relative file name")
    if os.path.isabs(relative) or relative.startswith(("/", "\\")) \
            or os.path.splitdrive(relative)[0]:
        raise SerializationError(f"{what} {relative!r} must name a file inside {base}, "
                                 f"not an absolute path")
    root = os.path.realpath(base)
    target = os.path.realpath(os.path.join(root, relative))
    if os.path.commonpath([root, target]) != root or target == root:
        raise SerializationError(f"{what} {relative!r} must name a file inside {base}; it "
                                 f"resolves to {target}")
    return target


@contextmanager
def open_regular(path: str | os.PathLike, what: str) -> Iterator[tuple[BinaryIO, int]]:
    """Open ``path`` for reading if it is a regular file; yields the handle and its size.

    The open does not block (``O_NONBLOCK``: a named pipe with no writer would otherwise hang
    here), and the kind is checked on the opened file, so a link swapped between a check and
    the open cannot slip a pipe or device in.

    Raises:
        SerializationError: the file cannot be opened, or is not a regular file.
    """
    source = os.fspath(path)
    if "\x00" in source:
        raise SerializationError(f"cannot read {what} {source!r}: the path holds a NUL byte")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(source, flags)
    except OSError as exc:
        raise SerializationError(f"cannot read {what} {source}: "
                                 f"{exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a file")
            raise SerializationError(f"cannot read {what} {source}: it is {kind}, not a "
                                     f"regular file")
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle, info.st_size


def check_size(size: int, limit: int, source: str, what: str) -> None:
    """Refuse a file of ``size`` bytes when it exceeds ``limit``, before it is read."""
    if size > limit:
        raise SerializationError(f"{what} {source} is {size} bytes, more than the "
                                 f"{limit}-byte limit for it")


def read_bytes(path: str | os.PathLike, what: str, limit: int) -> bytes:
    """The whole of a regular file of at most ``limit`` bytes.

    Raises:
        SerializationError: unreadable, not a regular file, larger than ``limit``, or its
            size changed while it was read.
    """
    source = os.fspath(path)
    with open_regular(source, what) as (handle, size):
        check_size(size, limit, source, what)
        try:
            data = handle.read(size + 1)  # one more byte shows a file that grew
        except OSError as exc:
            raise SerializationError(f"cannot read {what} {source}: {exc}") from None
    if len(data) != size:
        raise SerializationError(f"{what} {source} changed while it was read ({size} bytes "
                                 f"when opened, {len(data)} read)")
    return data


def read_text(path: str | os.PathLike, what: str, limit: int = MAX_TEXT_BYTES) -> str:
    """A UTF-8 text file of at most ``limit`` bytes (``read_bytes``, then decoded)."""
    source = os.fspath(path)
    data = read_bytes(source, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SerializationError(f"{what} {source} is not UTF-8 text: {exc}") from None


def map_bytes(path: str | os.PathLike, what: str) -> memoryview:
    """A regular file's bytes, memory-mapped read-only: pages are read when first touched, so
    the file's size costs address space, not memory (an empty file gives empty bytes: mmap
    refuses length 0)."""
    source = os.fspath(path)
    with open_regular(source, what) as (handle, size):
        if size == 0:
            return memoryview(b"")
        try:
            return memoryview(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ))
        except (OSError, ValueError) as exc:
            raise SerializationError(f"cannot map {what} {source}: {exc}") from None
