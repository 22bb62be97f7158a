"""``portable launch`` shares the cores out: the thread count and binding each rank gets (the
plan, no MPI needed), what two real ranks see (their variables, OpenBLAS's own thread count
and their CPU masks), that a user's OMP_NUM_THREADS is kept, and that only rank 0 of a
launched ``portable train`` draws a progress bar."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from portable.distributed.threads import THREAD_VARS, plan_threads, usable_cores
from portable.fit import _draws_progress
from tests.kvstore.mpi import REPO, needs_mpi

NOTE = "portable launch: 2 ranks on 2 cores: 1 thread each (set OMP_NUM_THREADS to override)"


def test_two_ranks_on_two_cores_get_one_thread_and_a_core_each():
    plan = plan_threads(2, {}, cores=2, physical=2)
    assert plan.threads == 1
    assert plan.env == {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                        "MKL_NUM_THREADS": "1", "PORTABLE_CPU_WORKERS": "1"}
    assert plan.mpi_args == ["--bind-to", "core"]
    assert plan.note == NOTE


def test_spare_cores_are_shared_out_and_bound_in_blocks():
    plan = plan_threads(2, {}, cores=16, physical=8)  # 8 cores with 2 hyperthreads each
    assert plan.threads == 8 and plan.env["PORTABLE_CPU_WORKERS"] == "2"  # the engine's cap
    assert plan.mpi_args == ["--bind-to", "core", "--map-by", "slot:PE=4"]


def test_oversubscribed_ranks_are_not_bound():
    plan = plan_threads(3, {}, cores=2, physical=2)
    assert plan.threads == 1 and plan.mpi_args == ["--bind-to", "none"]
    assert plan.note.startswith("portable launch: 3 ranks on 2 cores: 1 thread each")


def test_a_user_omp_num_threads_is_kept_and_sets_the_others():
    plan = plan_threads(2, {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "3"}, cores=2,
                        physical=2)
    assert plan.env == {"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2",
                        "MKL_NUM_THREADS": "3", "PORTABLE_CPU_WORKERS": "2"}
    assert plan.note == ("portable launch: 2 ranks on 2 cores: OMP_NUM_THREADS=2 kept "
                         "(2 threads each)")
    assert plan.mpi_args == ["--bind-to", "none"]  # 2 threads would not fit on 1 core each
    assert plan_threads(2, {"OMP_NUM_THREADS": "2"}, cores=8, physical=8).mpi_args == [
        "--bind-to", "core", "--map-by", "slot:PE=4"]


def test_an_unreadable_user_value_is_kept_alone():
    plan = plan_threads(2, {"OMP_NUM_THREADS": "dynamic"}, cores=4, physical=4)
    assert plan.threads is None and plan.env == {"OMP_NUM_THREADS": "dynamic"}
    assert plan.mpi_args == ["--bind-to", "none"]
    assert plan.note.endswith("OMP_NUM_THREADS=dynamic kept")


@pytest.mark.parametrize("mpi_args", [["--bind-to", "socket"], ["--map-by=ppr:1:package"]])
def test_a_user_placement_wins(mpi_args):
    assert plan_threads(2, {}, cores=2, physical=2, mpi_args=mpi_args).mpi_args == []


def test_no_binding_options_for_hydra_or_a_hostfile(tmp_path):
    assert plan_threads(2, {}, cores=2, physical=2, openmpi=False).mpi_args == []
    hosts = tmp_path / "hosts"
    hosts.write_text("# two machines\nnode1 slots=4\n\nnode2 slots=4  # spare\n")
    plan = plan_threads(8, {}, hostfile=str(hosts), cores=8, physical=8)
    assert plan.ranks == 4 and plan.threads == 2 and plan.mpi_args == []
    assert plan.note.startswith("portable launch: 4 ranks per node on 8 cores: 2 threads each")


class _Trainer:
    def __init__(self, rank: int) -> None:
        self.rank = rank


@pytest.mark.parametrize("store_rank, env_rank, draws", [
    (0, None, True), (1, None, False), (0, "0", True), (0, "1", False), (1, "0", False)])
def test_only_rank_zero_draws_the_bar(monkeypatch, store_rank, env_rank, draws):
    for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    if env_rank is not None:
        monkeypatch.setenv("PMI_RANK", env_rank)
    assert _draws_progress(_Trainer(store_rank)) is draws


# --- two real ranks ------------------------------------------------------------------------

REPORT = """
import json, os
import numpy
from threadpoolctl import threadpool_info
blas = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
print(json.dumps({"rank": int(os.environ["OMPI_COMM_WORLD_RANK"]), "blas_threads": blas,
                  "cpus": sorted(os.sched_getaffinity(0)),
                  "env": {k: os.environ.get(k) for k in %r}}), flush=True)
""" % ((*THREAD_VARS, "PORTABLE_CPU_WORKERS"),)


def _launch(args: list[str], **env: str) -> subprocess.CompletedProcess:
    """``portable launch ARGS`` from an environment with no thread settings but ``env``."""
    clean = {k: v for k, v in os.environ.items()
             if k not in (*THREAD_VARS, "PORTABLE_CPU_WORKERS")}
    clean.update(PYTHONPATH=str(REPO), PORTABLE_KV_TIMEOUT="60", **env)
    out = subprocess.run([sys.executable, "-m", "portable.cli.main", "launch", "--timeout", "150",
                          *args], cwd=REPO, env=clean, capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _reports(out: subprocess.CompletedProcess) -> list[dict]:
    found = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return sorted(found, key=lambda report: report["rank"])


def _needs_open_mpi():
    from portable.distributed.launch import find_mpiexec, mpi_flavor

    if mpi_flavor(find_mpiexec()) != "openmpi":
        pytest.skip("the rank reports read OMPI_COMM_WORLD_RANK")


@needs_mpi
def test_each_launched_rank_gets_its_share_of_the_cores():
    pytest.importorskip("threadpoolctl")
    _needs_open_mpi()
    out = _launch(["-n", "2", "--", sys.executable, "-c", REPORT])
    cores = usable_cores()
    threads = max(1, cores // 2)
    notes = [line for line in out.stderr.splitlines() if line.startswith("portable launch:")]
    assert notes == [f"portable launch: 2 ranks on {cores} cores: {threads} "
                     f"thread{'s' * (threads != 1)} each (set OMP_NUM_THREADS to override)"]
    reports = _reports(out)
    assert [r["rank"] for r in reports] == [0, 1]
    for report in reports:
        assert report["env"] == {"OMP_NUM_THREADS": str(threads),
                                 "OPENBLAS_NUM_THREADS": str(threads),
                                 "MKL_NUM_THREADS": str(threads),
                                 "PORTABLE_CPU_WORKERS": str(min(threads, 2))}
        assert report["blas_threads"] and set(report["blas_threads"]) == {threads}
    if len(os.sched_getaffinity(0)) == cores and cores >= 2:  # bound: disjoint CPU sets
        assert not set(reports[0]["cpus"]) & set(reports[1]["cpus"]), reports


@needs_mpi
def test_a_user_set_omp_num_threads_reaches_the_ranks():
    pytest.importorskip("threadpoolctl")
    _needs_open_mpi()
    out = _launch(["-n", "2", "--", sys.executable, "-c", REPORT], OMP_NUM_THREADS="2")
    assert "OMP_NUM_THREADS=2 kept (2 threads each)" in out.stderr
    for report in _reports(out):
        assert report["env"]["OMP_NUM_THREADS"] == "2"
        assert report["env"]["OPENBLAS_NUM_THREADS"] == "2"
        # OpenBLAS uses no more threads than the CPUs it may run on; the launcher does not
        # bind 2 threads to 1 core, so on 2 or more cores both run
        assert set(report["blas_threads"]) == {min(2, len(os.sched_getaffinity(0)))}


WRAP = """
import os, runpy, sys
rank = os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ["PMI_RANK"]
sys.stderr = open(os.path.join(sys.argv[1], "stderr." + rank), "w")
sys.argv = ["portable", "train", "--model", "mlp", "--epochs", "1", "--kvstore", "dist_sync",
            "--out", os.path.join(sys.argv[1], "run")]
runpy.run_module("portable.cli.main", run_name="__main__")
"""


@needs_mpi
def test_only_rank_zero_of_a_launched_training_draws_a_progress_bar(tmp_path):
    _launch(["-n", "2", "--", sys.executable, "-c", WRAP, str(tmp_path)])
    first, second = ((tmp_path / f"stderr.{rank}").read_text() for rank in (0, 1))
    assert "batch/s" in first  # tqdm's bar
    assert "batch/s" not in second
    assert "epoch 1/1: train_loss=" in second  # the other ranks still log
