"""How many threads each rank of a launched job gets, and how mpiexec places the ranks.

A NumPy process starts one BLAS thread per core it sees, and the engine a pool of up to two
workers. N ranks on one machine then run N times that many threads on the same cores, and the
BLAS threads spin while they wait for each other: two LeNet ranks on two cores trained several
times slower than with one thread each. So, as torchrun does, the launcher gives every rank its
share of the cores:

* ``threads = max(1, cores // ranks per node)``, where ``cores`` is what this process may run on
  (``os.sched_getaffinity``, capped by a cgroup CPU quota) and, with a hostfile, the ranks per
  node are the ranks spread evenly over its hosts (the hosts are assumed to be like this one);
* that count goes into every thread variable the user did not set (:data:`THREAD_VARS`, and
  the engine's :data:`ENGINE_VAR` capped at its default of 2). A user-set ``OMP_NUM_THREADS``
  is kept, and is also the count for the variables left unset: the user chose it per rank;
* Open MPI on one machine binds each rank to cores of its own when there are at least as many
  physical cores as ranks (``--bind-to core``, with ``--map-by slot:PE=k`` to give a rank k
  cores), and binds nothing when oversubscribed, by the ranks or by a user's thread count
  (``--bind-to core`` would refuse to start, or squeeze a rank's threads onto one core; the OS
  moving threads about is the lesser harm). A user's own ``--bind-to``/``--map-by`` wins; with
  a hostfile MPI's defaults apply.

Example:
    >>> plan = plan_threads(2, {}, cores=8, physical=8)
    >>> plan.threads, plan.env["OMP_NUM_THREADS"], plan.env["PORTABLE_CPU_WORKERS"]
    (4, '4', '2')
    >>> plan.mpi_args
    ['--bind-to', 'core', '--map-by', 'slot:PE=4']
    >>> plan.note
    'portable launch: 2 ranks on 8 cores: 4 threads each (set OMP_NUM_THREADS to override)'
    >>> plan_threads(3, {"OMP_NUM_THREADS": "2"}, cores=2, physical=2).env["MKL_NUM_THREADS"]
    '2'
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

#: Read by OpenMP runtimes, OpenBLAS (NumPy's wheels) and MKL; OpenBLAS and MKL fall back to
#: OMP_NUM_THREADS, so OMP_NUM_THREADS is the one a user sets.
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: The threaded engine's CPU worker pool (portable.engine.threaded; default min(2, cores)).
ENGINE_VAR = "PORTABLE_CPU_WORKERS"
ENGINE_DEFAULT_MAX = 2
#: mpiexec options that place ranks: when the user passes one, the launcher adds none.
PLACEMENT_OPTIONS = ("--bind-to", "-bind-to", "--map-by", "-map-by", "--cpu-set", "--cpus-per-rank",
                     "--rankfile", "-rf")


@dataclass(frozen=True)
class ThreadPlan:
    """What the launcher sets for a job.

    Attributes:
        ranks: ranks per node. cores: the cores this node's ranks share.
        threads: threads per rank (None: a user value the launcher could not read as a count).
        env: variables to export to every rank (the user's own thread settings included, so
            ranks on other hosts get them too).
        mpi_args: mpiexec placement options.
        note: the one line the launcher prints.
    """

    ranks: int
    cores: int
    threads: int | None
    env: dict[str, str] = field(default_factory=dict)
    mpi_args: list[str] = field(default_factory=list)
    note: str = ""


def usable_cores() -> int:
    """Cores this process may run on: its affinity mask, capped by a cgroup CPU quota (a
    container limited to 2 CPUs of 64 still sees 64 in its mask)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    cores = cores or os.cpu_count() or 1
    quota = _cgroup_quota()
    return max(1, min(cores, quota)) if quota else cores


def _cgroup_quota() -> int | None:
    """CPUs allowed by the cgroup CPU quota (v2 ``cpu.max``, v1 ``cfs_quota_us``); None: none."""
    try:
        text = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if len(text) == 2 and text[0] != "max":
            return math.ceil(int(text[0]) / int(text[1]))
    except (OSError, ValueError, ZeroDivisionError):
        pass
    try:
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        if quota > 0 and period > 0:
            return math.ceil(quota / period)
    except (OSError, ValueError):
        pass
    return None


def physical_cores() -> int:
    """Physical cores under this process's affinity mask (hyperthreads of one core count once);
    the logical count where the topology is not readable (not Linux)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    cores = set()
    for cpu in cpus:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add((topology.joinpath("physical_package_id").read_text().strip(),
                       topology.joinpath("core_id").read_text().strip()))
        except OSError:
            return len(cpus) or os.cpu_count() or 1
    return len(cores) or os.cpu_count() or 1


def hostfile_hosts(hostfile: str) -> int:
    """Hosts named in an MPI hostfile (lines that are not blank or ``#`` comments)."""
    try:
        lines = Path(hostfile).read_text().splitlines()
    except OSError:
        return 1  # mpiexec will report the unreadable file itself
    return max(1, sum(1 for line in lines if line.split("#", 1)[0].strip()))


def _user_threads(value: str) -> int | None:
    """The count in a user's OMP_NUM_THREADS (``4``, or a nested list ``4,2``: its first)."""
    try:
        count = int(value.split(",")[0].strip())
    except ValueError:
        return None
    return count if count > 0 else None


def plan_threads(ranks: int, environ: Mapping[str, str], hostfile: str | None = None,
                 openmpi: bool = True, mpi_args: Sequence[str] = (),
                 cores: int | None = None, physical: int | None = None) -> ThreadPlan:
    """The thread counts and placement of ``ranks`` ranks (workers and servers together).

    Args:
        ranks: all ranks of the job.
        environ: the variables the ranks will see (the launcher's environment plus ``--env``):
            the ones set there are the user's and are kept.
        hostfile: the job's hostfile (ranks spread over its hosts; no binding options).
        openmpi: whether mpiexec is Open MPI's (the only one given binding options).
        mpi_args: the user's own mpiexec options.
        cores / physical: this node's usable and physical cores (detected when None).

    Returns:
        A :class:`ThreadPlan`.
    """
    cores = cores or usable_cores()
    physical = min(physical or physical_cores(), cores)
    per_node = ranks if hostfile is None else math.ceil(ranks / hostfile_hosts(hostfile))
    where = (f"{per_node} rank{'s' * (per_node != 1)}"
             + (" per node" if hostfile is not None else "") + f" on {cores} cores")
    user = {name: environ[name] for name in (*THREAD_VARS, ENGINE_VAR)
            if environ.get(name, "").strip()}
    if "OMP_NUM_THREADS" in user:
        threads = _user_threads(user["OMP_NUM_THREADS"])
        note = (f"portable launch: {where}: OMP_NUM_THREADS={user['OMP_NUM_THREADS']} kept"
                + (f" ({threads} thread{'s' * (threads != 1)} each)" if threads else ""))
    else:
        threads = max(1, cores // per_node)
        note = (f"portable launch: {where}: {threads} thread{'s' * (threads != 1)} each "
                "(set OMP_NUM_THREADS to override)")
    env = dict(user)
    if threads is not None:
        for name in THREAD_VARS:
            env.setdefault(name, str(threads))
        env.setdefault(ENGINE_VAR, str(min(threads, ENGINE_DEFAULT_MAX)))
    placement = _placement(per_node, threads, cores, physical, hostfile, openmpi, mpi_args)
    return ThreadPlan(per_node, cores, threads, env, placement, note)


def _placement(ranks: int, threads: int | None, cores: int, physical: int,
               hostfile: str | None, openmpi: bool, mpi_args: Sequence[str]) -> list[str]:
    """Open MPI binding options for ``ranks`` ranks of ``threads`` threads on this node."""
    if not openmpi or hostfile is not None:
        return []
    if any(arg.split("=")[0] in PLACEMENT_OPTIONS for arg in mpi_args):
        return []
    per_rank = physical // ranks  # physical cores each rank would be bound to
    if not per_rank or threads is None or threads > per_rank * max(1, cores // physical):
        # Oversubscribed, by the ranks or by the user's thread count: binding would stack a
        # rank's threads on too few cores (OpenBLAS would even quietly use fewer threads).
        return ["--bind-to", "none"]
    return ["--bind-to", "core"] + (["--map-by", f"slot:PE={per_rank}"] if per_rank > 1 else [])
