"""Smoke test of ``benchmarks/scaling_sim.py``: 4 emulated ranks, a tiny profile, a few steps.

Checks only that the JSON line is complete and sane (the sums are right, efficiencies and
hidden fractions lie in range, the 256-rank estimate states its assumptions); the speed figures
themselves belong to the benchmark, not to a timed unit test.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.kvstore.mpi import REPO, needs_mpi

pytestmark = needs_mpi
SCRIPT = REPO / "benchmarks" / "scaling_sim.py"


def _sane(figures: dict) -> None:
    assert 0 < figures["efficiency"] <= 1.2, figures
    assert 0 <= figures["hidden_fraction"] <= 1, figures
    assert figures["step_ms"] > 0 and figures["comm_ms"] > 0, figures
    assert figures["sums_correct"] is True, figures


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    png = tmp_path_factory.mktemp("scaling") / "efficiency.png"
    try:
        done = subprocess.run(
            [sys.executable, str(SCRIPT), "--ranks", "4", "--scale", "0.02", "--rounds", "1",
             "--steps", "2", "--node-size", "2", "--timeout", "90", "--plot", str(png),
             "--peer-host-ms", "0.2"],
            cwd=REPO, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"scaling_sim did not finish in {exc.timeout} s:\n{exc.stderr}")
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, done.stdout  # one JSON line
    return json.loads(lines[0]), png


def test_every_config_has_sane_figures_for_store_and_peer(report):
    data, _ = report
    (result,) = data["results"]
    assert result["ranks"] == 4
    modes = {c["mode"]: c for c in result["configs"]}
    assert set(modes) == {"flat", "hier"}
    for config in modes.values():
        assert config["ranks"] == 4
        _sane(config)
        _sane(config["peer"])
        _sane(config["thread_peer"])
        _sane(config["engine_peer"])
        assert config["store_over_peer"]["median"] > 0
        assert config["store_over_engine_peer"]["median"] > 0
        assert config["buckets_per_step"] > 0  # the store did reduce, in fused buckets
        assert config["host_ms_per_step"] > 0  # its program thread pushed every step
    assert modes["hier"]["nodes"] == 2  # --node-size 2: two emulated nodes


def test_profile_and_scale_are_reported(report):
    data, _ = report
    profile = data["profile"]
    assert profile["tensors"] == 161 and profile["params"] == 25557032  # ResNet-50
    assert profile["scale"] == profile["size_scale"] == 0.02
    assert data["peer_host_ms"] == 0.2  # the loops' host work per step, as asked
    assert profile["one_rank_step_ms"] == pytest.approx(0.02 * profile[
        "one_rank_step_ms_unscaled"], rel=1e-3)


def test_256_rank_estimate_states_its_assumptions(report):
    data, png = report
    model = data["model"]
    assert model["ranks"] == 256
    assert {"allreduce", "network", "overlap", "profile"} <= set(model["assumptions"])
    for estimate in model["estimates"].values():
        for figures in estimate.values():
            assert 0 < figures["efficiency"] <= 1
            assert 0 <= figures["hidden_fraction"] <= 1
    assert png.stat().st_size > 0
