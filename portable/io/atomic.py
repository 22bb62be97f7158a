"""Atomic file writes: write to a temporary file beside the target, fsync, then rename, so a
crash at any moment leaves either the old file or the new one, never a torn one (streamed with
``atomic_writer``, or by a library given ``atomic_path``'s name); and the matching read, whose
failure names the file and what it should have held.

A temporary file is named ``.<target>.<host>-<pid>.<random>.tmp``: a process killed mid-write
leaves it behind, and ``remove_stale_temporaries`` (run when a folder is opened for writing
again) deletes those whose writer, on this host, is no longer alive.
"""
from __future__ import annotations

import os
import re
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


# .<target>.<host>-<pid>.<random>.tmp, as atomic_path names its temporary files
_TEMPORARY = re.compile(r"^\..+\.(?P<host>[A-Za-z0-9_.-]+)-(?P<pid>[0-9]+)\.[^.]+\.tmp$")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname()) or "host"


def _writer_tag() -> str:
    return f"{_host()}-{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def remove_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Delete the temporary files in ``folder`` left by writers on this host that were killed
    mid-write; a live writer's, another host's and any other file are kept.

    Returns:
        The files removed.

    Example:
        >>> remove_stale_temporaries("runs/lenet/checkpoints")    # doctest: +SKIP
        []
    """
    folder = Path(folder)
    removed: list[Path] = []
    if not folder.is_dir():
        return removed
    host = _host()
    for entry in folder.iterdir():
        match = _TEMPORARY.match(entry.name)
        if (match is None or match["host"] != host or not entry.is_file()
                or entry.is_symlink() or _alive(int(match["pid"]))):
            continue
        try:
            entry.unlink()
            removed.append(entry)
        except FileNotFoundError:  # removed meanwhile
            continue
    return removed


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
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.{_writer_tag()}.", suffix=".tmp",
                                dir=path.parent)
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
