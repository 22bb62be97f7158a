"""``portable launch``: the mpiexec command line for each MPI flavour (no MPI needed), and one
real 2-rank run through the CLI."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from portable.distributed.launch import build_command, find_mpiexec
from portable.errors import MissingDependencyError, PortableError
from tests.kvstore.mpi import REPO, needs_mpi


def test_open_mpi_flags_as_root_on_loopback():
    cmd = build_command(["python", "t.py", "--x"], 2, mpiexec="mpiexec", flavor="openmpi",
                        as_root=True, env={"PORTABLE_KV_TIMEOUT": "9"})
    assert cmd == ["mpiexec", "--allow-run-as-root", "--oversubscribe", "--mca",
                   "mpi_yield_when_idle", "1", "-x", "PORTABLE_KV_TIMEOUT", "-n", "2", "python",
                   "t.py", "--x"]


def test_open_mpi_with_a_hostfile_and_server_ranks():
    cmd = build_command(["python", "t.py"], 4, servers=2, hostfile="hosts", mpiexec="mpiexec",
                        flavor="openmpi", as_root=False)
    assert cmd[:9] == ["mpiexec", "--hostfile", "hosts", "--mca", "mpi_yield_when_idle", "1",
                       "-x", "PORTABLE_KV_SERVERS", "-n"]
    assert "--oversubscribe" not in cmd and "--allow-run-as-root" not in cmd
    assert cmd[cmd.index(":"):] == [":", "-n", "2", sys.executable, "-m",
                                    "portable.kvstore.server"]


def test_hydra_exports_with_genv():
    cmd = build_command(["python", "t.py"], 2, servers=1, hostfile="h", mpiexec="mpiexec",
                        flavor="mpich", as_root=True)
    assert cmd[:6] == ["mpiexec", "-f", "h", "-genv", "PORTABLE_KV_SERVERS", "1"]


@pytest.mark.parametrize("args, message", [((["python"], 0), "at least 1"),
                                           (([], 2), "no program given")])
def test_bad_launch_arguments(args, message):
    with pytest.raises(PortableError, match=message):
        build_command(*args, mpiexec="mpiexec", flavor="openmpi", as_root=False)


def test_missing_mpiexec_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.delenv("PORTABLE_MPIEXEC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    with pytest.raises(MissingDependencyError, match=r"portable\[mpi\]"):
        find_mpiexec()


def test_dry_run_prints_the_command():
    out = subprocess.run([sys.executable, "-m", "portable.cli.main", "launch", "-n", "3",
                          "--kv-timeout", "7", "--dry-run", "--", "portable", "train"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    assert " -x PORTABLE_KV_TIMEOUT " in line and " -n 3 " in line
    assert "portable launch: 3 ranks on " in out.stderr  # the threads each rank gets
    assert line.endswith(f"{sys.executable} -m portable.cli.main train")


@needs_mpi
def test_launch_runs_two_ranks_that_sum_their_ranks():
    script = ("import portable as pt\nkv = pt.kv.create('dist_sync')\n"
              "kv.init(0, pt.nd.zeros((1,)))\ng = pt.nd.ones((1,)) * kv.rank\n"
              "kv.pushpull(0, g)\nprint('sum', kv.rank, g.asnumpy()[0])\n")
    out = subprocess.run([sys.executable, "-m", "portable.cli.main", "launch", "-n", "2",
                          "--timeout", "90", "--", sys.executable, "-c", script],
                         cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    assert sorted(line for line in out.stdout.splitlines() if line.startswith("sum")) == [
        "sum 0 1.0", "sum 1 1.0"]
