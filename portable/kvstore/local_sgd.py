"""``dist_async`` with ``algorithm="local_sgd"``: local SGD (periodic model averaging), the
baseline the MXNET-MPI paper compares Elastic SGD with.

Every group trains its own replica (:mod:`portable.kvstore.replica`; with the default group
size of 1, every worker does, on its own shard, with no communication at all). Every ``tau``-th
push of a key (counted per key; the gradient step comes first), every worker replaces its
replica of the key with the average over all workers:

    x_i <- (1 / workers) * sum_j x_j

(one allreduce of the parameters over every worker, then a division). Optimizer states
(momentum, Adam's moments) stay each worker's own; they are not averaged. No parameter server
is needed (server ranks, if any, only wait for the workers to finish).

``pull_center`` gives the average of the replicas at any time (collective: every worker must
call it); right after an averaging step it equals every replica.

Example (``portable launch -n 4 -- python train.py``):
    >>> kv = pt.kv.create("dist_async", algorithm="local_sgd", tau=8)   # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any

from portable.errors import PortableError
from portable.kvstore.base import _pairs
from portable.kvstore.collective import CollectiveQueue
from portable.kvstore.comm import bucket_mb
from portable.kvstore.reducers import FlatReducer
from portable.kvstore.replica import ReplicaKVStore


class LocalSGDKVStore(ReplicaKVStore):
    """Replicas averaged over every worker every ``tau`` steps.

    Args:
        name: the store type (``dist_async``).
        tau: pushes of a key between two averages of it.
        group_size: workers per allreduce group (default ``PORTABLE_KV_GROUP_SIZE`` or 1).
        bucket_size_mb: fusion bucket size of the group allreduce and of the average.
    """

    algorithm = "local_sgd"

    def __init__(self, name: str = "dist_async", tau: int = 1, group_size: int | None = None,
                 bucket_size_mb: float | None = None) -> None:
        super().__init__(name, tau, group_size, bucket_size_mb)
        self._average: CollectiveQueue | None = None
        if self.num_groups > 1:  # (one group: the replicas are equal already)
            every = self._comm.workers.Dup()
            size = bucket_mb(every) if bucket_size_mb is None else bucket_size_mb
            self._average = CollectiveQueue(every, self._comm.watchdog,
                                            FlatReducer(every, traffic=self._traffic),
                                            f"{name}.average", bucket_mb=size)

    def _register(self, key: Any, value: Any) -> None:
        if self._average is not None:
            self._average.register(key, value.shape, value.dtype)

    def _communicate(self, key: Any, round_: int, priority: int) -> None:
        self._average_in_place(key, self._store[key], priority)

    def _average_in_place(self, key: Any, array: Any, priority: int) -> None:
        """Replace ``array`` (this worker's value of ``key``) by the workers' average: engine
        ops, ordered after whatever wrote it."""
        if self._average is not None:
            self._average.allreduce(key, array, priority)
            array /= self.num_workers

    def pull_center(self, key: Any, out: Any = None, priority: int = 0) -> None:
        """Copy the average of the workers' replicas of each key into ``out`` (collective:
        every worker calls it with the same keys)."""
        if out is None:
            raise PortableError(f"kvstore {self.type}: pull_center needs out= arrays")
        for k, outs in _pairs(key, out, "pull_center"):
            self._check_key(k, "pull_center")
            self._comm.watchdog.api_call("pull_center")
            average = self._store[k].copy()
            self._average_in_place(k, average, priority)
            for target in outs:
                average.copyto(target)

    def _close_algorithm(self) -> None:
        if self._average is not None:
            with self._comm.watchdog.waiting(f"{self.type} close (pending averages)"):
                self._average.close()
