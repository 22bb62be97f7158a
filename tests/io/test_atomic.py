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


def test_temporaries_of_killed_writers_are_removed_and_live_ones_kept(tmp_path):
    """A write killed mid-way leaves ``.<target>.<host>-<pid>.<random>.tmp``; opening the folder
    again removes it when that process is gone, and keeps a live writer's, another host's and
    every other file."""
    import os
    import subprocess
    import sys

    from portable.io.atomic import _host, remove_stale_temporaries
    from portable.checkpoint import CheckpointManager

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    host = _host()
    stale = tmp_path / f".ckpt.json.{host}-{gone.pid}.abc123.tmp"
    live = tmp_path / f".ckpt.json.{host}-{os.getpid()}.def456.tmp"
    elsewhere = tmp_path / f".ckpt.json.otherhost-{gone.pid}.ghi789.tmp"
    mine = tmp_path / "notes.tmp"
    for path in (stale, live, elsewhere, mine):
        path.write_bytes(b"partial")
    assert remove_stale_temporaries(tmp_path) == [stale]
    assert not stale.exists() and live.exists() and elsewhere.exists() and mine.exists()
    stale.write_bytes(b"partial")
    CheckpointManager(tmp_path)  # a run that resumes here cleans up the same way
    assert not stale.exists() and live.exists()


def test_the_temporary_name_is_the_one_cleanup_recognises(tmp_path):
    from portable.io.atomic import _TEMPORARY, atomic_path

    with atomic_path(tmp_path / "w.safetensors") as tmp:
        assert _TEMPORARY.match(tmp.name), tmp.name
        tmp.write_bytes(b"x")
    assert (tmp_path / "w.safetensors").read_bytes() == b"x"
