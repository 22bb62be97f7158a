"""Allreduce groups of workers: the MPI side of the MXNET-MPI hybrid (synchronous inside a group,
asynchronous between groups), shared by ``dist_async`` and the replica stores (EASGD, local SGD).

Workers are cut into groups of ``group_size`` consecutive worker ranks (the last group may be
smaller). Inside a group, values are summed by the same fused, prioritised allreduce as
``dist_sync`` (a :class:`~portable.kvstore.collective.CollectiveQueue` over a
sub-communicator); the group's first rank, its *leader*, is the one that talks to the
parameter servers for the group.

Example (under ``mpiexec -n 4``):
    >>> group = split_groups(comm, 2, "dist_async", None, Traffic())   # doctest: +SKIP
    >>> group.index, group.count, group.is_leader                        # doctest: +SKIP
    (0, 2, True)
"""
from __future__ import annotations

from typing import Any, NamedTuple

from portable.errors import PortableError
from portable.kvstore.collective import CollectiveQueue
from portable.kvstore.comm import bucket_mb, env_int
from portable.kvstore.reducers import FlatReducer
from portable.kvstore.traffic import Traffic


class WorkerGroup(NamedTuple):
    """This worker's allreduce group.

    Attributes:
        size: the configured group size (the last group may hold fewer workers).
        index: which group this worker belongs to (0 for the group of worker 0).
        count: how many groups there are.
        is_leader: whether this worker is its group's first rank.
        queue: the group's collective queue (None for a group of one).
    """

    size: int
    index: int
    count: int
    is_leader: bool
    queue: CollectiveQueue | None


def group_size_from(name: str, group_size: int | None) -> int:
    """The group size asked for (default ``PORTABLE_KV_GROUP_SIZE`` or 1), checked."""
    if group_size is None:
        return env_int("PORTABLE_KV_GROUP_SIZE", 1, 1)
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise PortableError(f"kvstore {name}: group_size must be a positive integer, got "
                            f"{group_size!r}")
    return group_size


def split_groups(comm: Any, group_size: int, name: str, bucket_size_mb: float | None,
                 traffic: Traffic) -> WorkerGroup:
    """Cut the workers of ``comm`` (a :class:`~portable.kvstore.comm.Communicator`) into groups
    (collective over the workers).

    Args:
        comm: the process's communicator (a worker's).
        group_size: workers per group.
        name: the store name (queue and op names, errors).
        bucket_size_mb: fusion bucket of the group allreduce (None: ``bucket_mb`` default).
        traffic: counts the bytes the group's collectives move.

    Returns:
        This worker's :class:`WorkerGroup`.
    """
    workers, rank = comm.workers, comm.worker_rank
    group = workers.Split(rank // group_size, rank)
    queue = None
    if group.Get_size() > 1:
        if bucket_size_mb is None:
            bucket_size_mb = bucket_mb(group)
        queue = CollectiveQueue(group, comm.watchdog, FlatReducer(group, traffic=traffic),
                                f"{name}.group", bucket_mb=bucket_size_mb)
    count = -(-comm.num_workers // group_size)
    return WorkerGroup(group_size, rank // group_size, count, group.Get_rank() == 0, queue)
