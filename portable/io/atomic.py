"""Atomic file writes: write to a temporary file beside the target, fsync, then rename, so a
crash at any moment leaves either the old file or the new one, never a torn one; and the
matching read, whose failure names the file and what it should have held."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp creates the file 0600; give it the mode a plain open() would have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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
