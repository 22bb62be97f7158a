"""Atomic writes: the target is replaced whole or not at all, streamed writes leave nothing
behind on failure, and the file gets the mode a plain open() would give it."""
from __future__ import annotations

import os

import numpy as np
import pytest

from portable.io.atomic import atomic_path, atomic_write_bytes, atomic_writer


def _leftovers(folder) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.endswith(".tmp"))


def test_a_streamed_write_replaces_the_target_piece_by_piece(tmp_path) -> None:
    target = tmp_path / "sub" / "model.bin"
    atomic_write_bytes(target, b"old")
    pieces = [b"header", np.arange(5, dtype=np.uint8), b"tail"]
    with atomic_writer(target) as handle:
        for piece in pieces:
            handle.write(piece)
        assert target.read_bytes() == b"old"  # not replaced before the block ends
    assert target.read_bytes() == b"header" + bytes(range(5)) + b"tail"
    assert _leftovers(target.parent) == []


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path) -> None:
    target = tmp_path / "model.bin"
    atomic_write_bytes(target, b"saved before")
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic_writer(target) as handle:
            handle.write(b"half a model")
            raise RuntimeError("disk full")
    assert target.read_bytes() == b"saved before"
    assert _leftovers(tmp_path) == []


def test_a_library_writes_through_the_temporary_name(tmp_path) -> None:
    target = tmp_path / "array.npy"
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and not target.exists()
        with open(tmp, "wb") as handle:
            np.save(handle, np.arange(3))
    np.testing.assert_array_equal(np.load(target), np.arange(3))
    with pytest.raises(ValueError):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"garbage")
            raise ValueError("the library failed")
    np.testing.assert_array_equal(np.load(target), np.arange(3))
    assert _leftovers(tmp_path) == []


def test_the_file_gets_the_mode_of_a_plain_open(tmp_path) -> None:
    umask = os.umask(0o022)
    try:
        atomic_write_bytes(tmp_path / "a", b"x")
        with open(tmp_path / "b", "wb") as handle:
            handle.write(b"x")
    finally:
        os.umask(umask)
    assert (tmp_path / "a").stat().st_mode == (tmp_path / "b").stat().st_mode
