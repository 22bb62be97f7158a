"""Run rank scripts under mpiexec on loopback, with a hard timeout (helper of the MPI tests).

Every MPI test skips with the reason when mpi4py or mpiexec is absent; a job that outlives its
timeout is killed (its whole process group) and the test fails with its output.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent / "mpi_scripts"
REPO = Path(__file__).resolve().parents[2]


def _missing() -> str | None:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py is not installed (pip install 'portable[mpi]')"
    from portable.distributed.launch import find_mpiexec
    from portable.errors import MissingDependencyError

    try:
        find_mpiexec()
    except MissingDependencyError as exc:
        return str(exc)
    return None


MISSING = _missing()
needs_mpi = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))


@dataclass
class Job:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def run_ranks(workers: int, args: list[str], env: dict | None = None, servers: int = 0,
              timeout: float = 120.0, mpi_args: tuple = ()) -> Job:
    """``mpiexec -n workers python args...`` (plus server ranks) from the repository root."""
    from portable.distributed.launch import build_command

    child_env = dict(os.environ)
    child_env.update({"PYTHONPATH": str(REPO), "PORTABLE_CPU_WORKERS": "1",
                      "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                      "PORTABLE_KV_TIMEOUT": "60"})
    child_env.update(env or {})
    if servers:
        child_env["PORTABLE_KV_SERVERS"] = str(servers)
    exported = {k: child_env[k] for k in ("PYTHONPATH", "PORTABLE_KV_TIMEOUT",
                                          *(env or {}))}
    cmd = build_command([sys.executable, *args], workers, servers, env=exported,
                        mpi_args=mpi_args)
    started = time.monotonic()
    process = subprocess.Popen(cmd, cwd=REPO, env=child_env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"MPI job {' '.join(args)} did not finish within {timeout} s (hang)\n"
                    f"stdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}")
    return Job(process.returncode, out, err.replace("\x00", ""), time.monotonic() - started)


def run_python(args: list[str], timeout: float = 120.0) -> Job:
    """One plain process (a single-rank MPI world, or a reference run without MPI)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), PORTABLE_CPU_WORKERS="1")
    started = time.monotonic()
    done = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)
    return Job(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def check(job: Job) -> Job:
    assert job.returncode == 0, (f"exit code {job.returncode}\nstdout:\n{job.stdout[-3000:]}\n"
                                 f"stderr:\n{job.stderr[-5000:]}")
    return job
