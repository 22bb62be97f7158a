"""Tensor files and training checkpoints: round trips, and refusal of damaged files."""
from __future__ import annotations

import json

import numpy as np
import pytest

from portable.checkpoint import CheckpointManager
from portable.errors import SerializationError
from portable.io.tensors import load_tensors, save_tensors, tensors_to_bytes


def test_tensor_file_round_trip(tmp_path):
    tensors = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([7], np.int64),
               "empty": np.zeros((0, 4), np.float32)}
    save_tensors(tmp_path / "t.safetensors", tensors, {"epoch": 3, "nested": {"x": [1, 2]}})
    loaded, meta = load_tensors(tmp_path / "t.safetensors")
    assert meta == {"epoch": 3, "nested": {"x": [1, 2]}}
    for key, value in tensors.items():
        assert loaded[key].dtype == value.dtype and np.array_equal(loaded[key], value)


@pytest.mark.parametrize("damage,match", [
    (lambda b: b[:-7], "truncated|not a readable"),
    (lambda b: b[:5], "truncated"),
    (lambda b: b[:-4] + bytes([b[-4] ^ 0x40]) + b[-3:], "corrupted"),
    (lambda b: b[:9] + b"#" + b[10:], "not a readable"),
])
def test_damaged_tensor_files_are_refused_naming_the_file(tmp_path, damage, match):
    path = tmp_path / "w.safetensors"
    save_tensors(path, {"w": np.linspace(0, 1, 32, dtype=np.float32)})
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(SerializationError, match=match) as info:
        load_tensors(path)
    assert "w.safetensors" in str(info.value)


def test_foreign_safetensors_file_is_refused(tmp_path):
    from safetensors.numpy import save_file

    save_file({"w": np.zeros(2, np.float32)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(SerializationError, match="not one written by portable"):
        load_tensors(tmp_path / "other.safetensors")


def _save(mgr, epoch, value):
    return mgr.save({"w": np.full(3, value, np.float32)}, tensors_to_bytes({}, {}),
                    {"epoch": epoch, "step": epoch * 10, "metrics": {"acc": value}})


def test_manager_keeps_the_newest_and_loads_the_latest(tmp_path):
    mgr = CheckpointManager(tmp_path, keep=2)
    for epoch in range(1, 5):
        _save(mgr, epoch, float(epoch))
    assert [p.name for p in mgr.manifests()] == ["ckpt-e0003-s00000030.json",
                                                 "ckpt-e0004-s00000040.json"]
    assert len(list(tmp_path.glob("*.safetensors"))) == 4
    latest = mgr.latest()
    assert latest.epoch == 4 and latest.step == 40 and latest.refused == []
    assert latest.params["w"].tolist() == [4.0] * 3
    assert latest.manifest["metrics"] == {"acc": 4.0}


@pytest.mark.parametrize("how", ["truncate", "flip", "delete", "manifest"])
def test_a_damaged_newest_checkpoint_is_refused_and_the_previous_used(tmp_path, how):
    mgr = CheckpointManager(tmp_path)
    _save(mgr, 1, 1.0)
    newest = _save(mgr, 2, 2.0)
    params = tmp_path / json.loads(newest.read_text())["files"]["params"]["path"]
    if how == "truncate":
        params.write_bytes(params.read_bytes()[:-9])
    elif how == "flip":
        data = bytearray(params.read_bytes())
        data[-2] ^= 1
        params.write_bytes(bytes(data))
    elif how == "delete":
        params.unlink()
    else:
        newest.write_text(newest.read_text()[:40])
    with pytest.raises(SerializationError) as info:
        mgr.load(newest)
    assert newest.name[:-5] in str(info.value)
    latest = mgr.latest()
    assert latest.epoch == 1 and latest.params["w"].tolist() == [1.0] * 3
    assert len(latest.refused) == 1


def test_no_usable_checkpoint_is_an_error_and_an_empty_dir_is_none(tmp_path):
    mgr = CheckpointManager(tmp_path)
    assert mgr.latest() is None
    path = _save(mgr, 1, 1.0)
    path.write_text("{}")
    with pytest.raises(SerializationError, match="no usable checkpoint"):
        mgr.latest()


def test_leftover_temporary_files_and_orphan_tensor_files_are_ignored(tmp_path):
    mgr = CheckpointManager(tmp_path)
    _save(mgr, 1, 1.0)
    # what a kill between writes leaves: a temp file and tensor files without a manifest
    (tmp_path / ".ckpt-e0002-s00000020.json.abc.tmp").write_text("{")
    (tmp_path / "ckpt-e0002-s00000020.params.safetensors").write_bytes(b"partial")
    assert mgr.latest().epoch == 1
