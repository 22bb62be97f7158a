"""Runs own their checkpoint folders: a new run refuses another run's folder (naming it, the
run and what to do), ``--fresh`` starts afresh leaving none of the old checkpoints, ``--resume``
continues under the same run id, and a resume never loads another run's checkpoint."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

from portable.checkpoint import CheckpointManager
from portable.cli.main import main
from portable.errors import PortableError, SerializationError
from portable.io.tensors import tensors_to_bytes

TRAIN = ["train", "--model", "mlp", "--no-progress", "--json", "--batch-size", "128"]
RUN_ID = re.compile(r"^[0-9a-f]{32}$")  # uuid4 hex


def _train(capsys, out, *args):
    """``portable train`` in this process: (exit code, JSON summary or None, stderr)."""
    code = main([*TRAIN, "--out", str(out), *map(str, args)])
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    return code, (json.loads(lines[-1]) if code == 0 else None), captured.err


def _manifests(folder):
    return sorted(p for p in (folder / "checkpoints").glob("ckpt-*.json"))


def _run_ids(folder):
    return {json.loads(p.read_text())["run_id"] for p in _manifests(folder)}


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted((folder / "checkpoints").iterdir())}


def test_a_new_run_into_another_runs_folder_is_refused(tmp_path, capsys):
    code, first, _ = _train(capsys, tmp_path, "--epochs", "1")
    assert code == 0 and RUN_ID.match(first["run_id"])
    before = _snapshot(tmp_path)

    code, _, err = _train(capsys, tmp_path, "--epochs", "2", "--seed", "5")
    assert code == 2
    assert str(tmp_path / "checkpoints") in err and first["run_id"] in err
    assert "--resume" in err and "--fresh" in err and "--out" in err
    assert "Traceback" not in err
    assert _snapshot(tmp_path) == before  # nothing written, nothing removed


def test_fresh_removes_the_old_runs_checkpoints_and_nothing_else(tmp_path, capsys):
    code, first, _ = _train(capsys, tmp_path, "--epochs", "3", "--keep", "5")
    assert code == 0 and len(_manifests(tmp_path)) == 3
    folder = tmp_path / "checkpoints"
    keep = ["notes.txt", "ckpt-e0009-s00000009.json.bak", "other-e0009-s00000009.json"]
    for name in keep:
        (folder / name).write_text("not a checkpoint of this run")
    (folder / "ckpt-e0009-s00000009.params.safetensors").write_bytes(b"orphan")

    code, second, _ = _train(capsys, tmp_path, "--epochs", "1", "--fresh")
    assert code == 0 and RUN_ID.match(second["run_id"])
    assert second["run_id"] != first["run_id"] and second["resumed_from"] is None
    steps = second["steps"]  # one epoch
    stem = f"ckpt-e0001-s{steps:08d}"
    expected = {f"{stem}.json", f"{stem}.params.safetensors", f"{stem}.states.safetensors",
                *keep}
    assert {p.name for p in folder.iterdir()} == expected
    assert _run_ids(tmp_path) == {second["run_id"]}


def test_resume_continues_the_same_run(tmp_path, capsys):
    code, first, _ = _train(capsys, tmp_path, "--epochs", "1", "--seed", "2")
    assert code == 0
    code, resumed, _ = _train(capsys, tmp_path, "--epochs", "2", "--seed", "2", "--resume")
    assert code == 0
    assert resumed["run_id"] == first["run_id"]
    assert resumed["resumed_from"] == first["paths"]["checkpoint"]
    assert resumed["epochs"] == 2 and resumed["steps"] == 2 * first["steps"]
    assert _run_ids(tmp_path) == {first["run_id"]}


def test_resume_and_fresh_together_are_refused_while_parsing(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main([*TRAIN, "--out", str(tmp_path), "--resume", "--fresh"])
    assert info.value.code == 2
    assert "not allowed with" in capsys.readouterr().err


def test_resume_never_falls_back_to_another_runs_checkpoint(tmp_path, capsys):
    """The finding's folder: run B's epoch-1 checkpoint copied over run A's, A's epoch 2
    left. Resume continues A (the newest); when A's checkpoint is damaged it must not fall
    back to B's."""
    a, b = tmp_path / "a", tmp_path / "b"
    code, run_a, _ = _train(capsys, a, "--epochs", "2", "--seed", "1")
    assert code == 0
    code, run_b, _ = _train(capsys, b, "--epochs", "1", "--seed", "7")
    assert code == 0
    for path in (b / "checkpoints").iterdir():
        shutil.copy(path, a / "checkpoints" / path.name)
    assert _run_ids(a) == {run_a["run_id"], run_b["run_id"]}
    newest = _manifests(a)[-1]
    params = a / "checkpoints" / json.loads(newest.read_text())["files"]["params"]["path"]
    params.write_bytes(params.read_bytes()[:-64])  # A's only remaining checkpoint is torn

    code, _, err = _train(capsys, a, "--epochs", "3", "--resume")
    assert code == 2
    assert f"no usable checkpoint of run {run_a['run_id']}" in err
    assert run_b["run_id"] in err and "truncated" in err
    assert json.loads((a / "summary.json").read_text())["run_id"] == run_a["run_id"]


def _save(manager, epoch, value):
    return manager.save({"w": np.full(2, value, np.float32)}, tensors_to_bytes({}, {}),
                        {"epoch": epoch, "step": 10 * epoch})


def test_latest_keeps_to_one_run(tmp_path):
    a = CheckpointManager(tmp_path, keep=5, run_id="run-a")
    for epoch in (1, 2, 3):
        _save(a, epoch, float(epoch))
    b = CheckpointManager(tmp_path, keep=5, run_id="run-b")
    _save(b, 4, 40.0)
    # the newest valid manifest decides the run: B's, and it loads
    found = CheckpointManager(tmp_path).latest()
    assert found.run_id == "run-b" and found.epoch == 4
    # a manager of run A sees only A's
    assert CheckpointManager(tmp_path, run_id="run-a").latest().epoch == 3
    # B's damaged: no fall back to A's epoch 3
    (tmp_path / "ckpt-e0004-s00000040.states.safetensors").unlink()
    with pytest.raises(SerializationError, match="no usable checkpoint of run run-b") as info:
        CheckpointManager(tmp_path).resume()
    assert "run-a" in str(info.value)


def _make_legacy(manifest):
    data = json.loads(manifest.read_text())
    del data["run_id"]
    data["version"] = 1
    manifest.write_text(json.dumps(data))


def test_legacy_checkpoints_resume_under_a_new_run_id_and_are_pruned(tmp_path):
    old = CheckpointManager(tmp_path, keep=5)
    legacy = [_save(old, epoch, float(epoch)) for epoch in (1, 2)]
    for manifest in legacy:
        _make_legacy(manifest)
    with pytest.raises(SerializationError, match="a run from before run ids"):
        CheckpointManager(tmp_path).start()

    manager = CheckpointManager(tmp_path, keep=2)
    found = manager.resume()
    assert found.run_id is None and found.epoch == 2
    assert found.params["w"].tolist() == [2.0, 2.0]
    assert RUN_ID.match(manager.run_id)
    _save(manager, 3, 3.0)  # keep=2: the legacy epoch 1 goes, epoch 2 stays
    assert [p.name for p in manager.manifests()] == ["ckpt-e0002-s00000020.json",
                                                     "ckpt-e0003-s00000030.json"]
    assert not (tmp_path / "ckpt-e0001-s00000010.params.safetensors").exists()
    again = CheckpointManager(tmp_path)
    assert again.resume().epoch == 3 and again.run_id == manager.run_id


def test_fit_refuses_resume_with_fresh_and_flags_without_a_folder(tmp_path):
    from portable.fit import fit

    with pytest.raises(PortableError, match="pass one of them"):
        fit(None, [], checkpoint_dir=tmp_path, resume=True, fresh=True)
    with pytest.raises(PortableError, match="needs checkpoint_dir"):
        fit(None, [], fresh=True)


def test_stale_temporaries_of_killed_writes_are_removed_on_start(tmp_path, capsys):
    folder = tmp_path / "checkpoints"
    folder.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    host = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname()) or "host"
    stale = folder / f".ckpt-e0001-s00000001.json.{host}-{dead.stdout.strip()}.x1y2.tmp"
    stale.write_text("{")
    code, _, _ = _train(capsys, tmp_path, "--epochs", "1")
    assert code == 0 and not stale.exists()
    assert os.listdir(folder) and all(not n.endswith(".tmp") for n in os.listdir(folder))
