"""A training process killed with SIGKILL mid-epoch resumes to parameters bit-identical to an
uninterrupted run, even when its newest checkpoint was damaged and must be refused."""
from __future__ import annotations

import json
import signal
import subprocess
import time

import numpy as np
import pytest

from portable.checkpoint import CheckpointManager
from tests.train import _cli

ARGS = ["train", "--model", "mlp", "--epochs", "3", "--checkpoint-steps", "20", "--keep", "20",
        "--seed", "3", "--no-progress", "--json"]


def _params(path):
    from safetensors.numpy import load_file

    return load_file(str(path))


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")
def test_sigkill_then_resume_matches_an_uninterrupted_run(tmp_path):
    full, _ = _cli.run(*ARGS, "--out", tmp_path / "full")

    out = tmp_path / "killed"
    manager = CheckpointManager(out / "checkpoints")
    proc = subprocess.Popen(_cli.command(*ARGS, "--out", out), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=_cli.ROOT, env=_cli.env())
    try:
        deadline = time.monotonic() + 180
        while len(manager.manifests()) < 2 and proc.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint appeared in time"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (out / "model.params.safetensors").exists()

    manifests = manager.manifests()
    newest = manifests[-1]
    params_file = out / "checkpoints" / json.loads(newest.read_text())["files"]["params"]["path"]
    params_file.write_bytes(params_file.read_bytes()[:-100])  # a torn write of the newest

    resumed, proc = _cli.run(*ARGS, "--out", out, "--resume")
    assert resumed["resumed_from"] == str(manifests[-2])
    assert len(resumed["refused_checkpoints"]) == 1
    assert "truncated" in resumed["refused_checkpoints"][0]
    assert "refusing checkpoint" in proc.stderr

    expected, got = _params(tmp_path / "full" / "model.params.safetensors"), _params(
        out / "model.params.safetensors")
    assert sorted(expected) == sorted(got)
    for name in expected:
        assert np.array_equal(expected[name], got[name]), name  # bit for bit
    assert resumed["test_accuracy"] == full["test_accuracy"]
    assert resumed["epochs"] == full["epochs"] == 3 and resumed["steps"] == full["steps"]
    history = [json.loads((tmp_path / d / "history.json").read_text())
               for d in ("full", "killed")]
    for a, b in zip(*history):
        assert {k: v for k, v in a.items() if k != "seconds"} == \
               {k: v for k, v in b.items() if k != "seconds"}
