"""Smoke run of ``benchmarks/convergence.py --quick``: one epoch of ``dist_sync``, EASGD tau 16
with 2 groups of 2 workers and EASGD tau 16 with 4 groups of 1 (4 workers, + 1 server rank for
EASGD). Checks the JSON's shape and what holds by the algorithms' construction, not by tuning:

* every run processes the same samples, and starts from the same model (seed 0);
* ``dist_sync`` allreduces every gradient at every step: its bytes lie between the exact count
  (B each way per allreduce) and about twice that (a wrongly guessed round sends again);
* EASGD tau 16 sends each group's replica to the server once every 16 steps: its traffic
  between the groups and the server is far below ``dist_sync``'s for the same samples, and with
  groups of one worker (no group allreduce) so is its whole traffic. With groups of 2 the
  group's own allreduce of the gradients, every step, already moves as many bytes per worker
  as ``dist_sync``'s: its total is not below ``dist_sync``'s, and the test says so.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.kvstore.mpi import MISSING, REPO, needs_mpi

SCRIPT = REPO / "benchmarks" / "convergence.py"
WORKERS = 4


def _run_quick() -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    try:
        done = subprocess.run([sys.executable, str(SCRIPT), "--quick"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=170)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"convergence.py --quick did not finish in 170 s\n{exc.stdout}\n{exc.stderr}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and len(lines) == 1, (done.stdout[-3000:], done.stderr[-5000:])
    return json.loads(lines[0])


@pytest.fixture(scope="module")
def report() -> dict:
    if MISSING is not None:
        pytest.skip(str(MISSING))
    return _run_quick()


@needs_mpi
def test_the_report_has_a_sane_curve_per_configuration(report):
    assert report["benchmark"] == "convergence" and report["quick"] is True
    configs = report["configs"]
    assert set(configs) == {"dist_sync", "dist_sync_hier", "easgd_tau16", "easgd_g1_tau16"}
    samples_per_epoch = None
    for name, result in configs.items():
        assert "error" not in result, (name, result.get("error"))
        curve = result["curve"]
        assert len(curve) >= 3
        for point in curve:
            assert set(point) >= {"samples", "bytes", "bytes_between_groups", "accuracy"}
            assert 0.0 <= point["accuracy"] <= 1.0
            assert 0 <= point["bytes_between_groups"] <= point["bytes"]
        # counters only grow; the first point is the untrained model, the last every sample
        for earlier, later in zip(curve, curve[1:]):
            assert later["samples"] >= earlier["samples"]
            assert later["bytes"] >= earlier["bytes"]
        assert curve[0]["samples"] == 0
        samples_per_epoch = samples_per_epoch or curve[-1]["samples"]
        assert curve[-1]["samples"] == samples_per_epoch  # every run saw the same samples
        assert result["final_accuracy"] == curve[-1]["accuracy"]
        assert result["to_target"] is None or result["to_target"]["samples"] > 0
    batch = report["batch_per_worker"]
    assert samples_per_epoch == WORKERS * batch * (1438 // WORKERS // batch)
    # the same initial model everywhere (seed 0; rank 0's weights are the store's)
    assert len({r["curve"][0]["accuracy"] for r in configs.values()}) == 1
    assert configs["dist_sync"]["final_accuracy"] > 0.5  # it learns (chance: 0.1)
    # With nodes of 2, only the leaders' allreduce crosses between the nodes. Per reduction of
    # B bytes (the gradients, as many bytes as the weights, W): each of the 2 leaders sends
    # and receives B there (4B between the nodes), every rank reduces into its node and is
    # broadcast from it (8B inside), where dist_sync's 4 ranks each send and receive B (8B in
    # all); at least one reduction a step (a speculative round whose guess failed is sent
    # again, and the initial broadcast of the weights adds 4W inside).
    weights = 4 * configs["dist_sync"]["parameters"]  # float32
    steps = configs["dist_sync"]["steps_per_worker"]
    hier = configs["dist_sync_hier"]["curve"][-1]
    flat = configs["dist_sync"]["curve"][-1]
    assert 4 * weights * steps <= hier["bytes_between_groups"] < hier["bytes"] / 2
    assert 8 * weights * steps <= flat["bytes"]
