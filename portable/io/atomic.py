"""Atomic file writes: write to a temporary file beside the target, fsync, then rename, so a
crash at any moment leaves either the old file or the new one, never a torn one (streamed with
``atomic_writer``, or by a library given ``atomic_path``'s name); and the matching read, whose
failure names the file and what it should have held."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside ``path`` for a writer that takes a file name (a library's
    ``save_file``); when the block ends without error the file is synced and renamed over
    ``path``, otherwise removed, and ``path`` is left as it was.

    Example:
        >>> with atomic_path("model.safetensors") as tmp:          # doctest: +SKIP
        ...     safetensors.numpy.save_file(tensors, tmp)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        # mkstemp creates the file 0600; give it the mode a plain open() would have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if tmp.exists():
            tmp.unlink()
        raise


@contextmanager
def atomic_writer(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file to stream into that replaces ``path`` as :func:`atomic_path` does:
    a large file is written piece by piece, never held whole in memory.

    Example:
        >>> with atomic_writer("model.portable") as handle:        # doctest: +SKIP
        ...     handle.write(header); handle.write(weights)
    """
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        yield handle


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_writer(path) as handle:
        handle.write(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def read_bytes(path: str | os.PathLike, what: str) -> bytes:
    """The bytes of ``path``; a SerializationError naming the file and ``what`` (e.g.
    "optimizer states") when it cannot be read."""
    from portable.errors import SerializationError

    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SerializationError(f"{path}: cannot read {what}: {exc.strerror}") from None
