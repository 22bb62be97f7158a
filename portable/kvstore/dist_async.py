"""``dist_async``: parameter servers on dedicated ranks apply the optimizer as gradients arrive
(MXNet's ``dist_async``), with optional allreduce groups of workers (the MXNET-MPI hybrid).

Workers are cut into groups of ``group_size`` consecutive ranks. Inside a group gradients are
summed by the same fused allreduce as ``dist_sync`` (over a sub-communicator); the group's first
rank then pushes the sum to the servers and pulls the new weights, which it broadcasts to its
group. Nothing waits for the other groups. ``group_size=1`` is the pure parameter server,
one group holding every worker is pure allreduce (with no server ranks the group applies the
optimizer itself). Pulls carry the Trainer's priorities (first layers first, P3).

The last ``PORTABLE_KV_SERVERS`` ranks are servers (``portable launch --servers K`` sets it and
starts ``python -m portable.kvstore.server`` there). The servers' optimizer is rebuilt from the
worker optimizer's JSON ``config()``; each push carries the current ``rescale_grad`` (set by
``Trainer.step``) and the key's ``lr_mult``/``wd_mult``.

``create("dist_async", algorithm=...)`` picks another algorithm on the same roles
(:mod:`portable.kvstore.async_algorithms`): ``easgd`` (elastic averaging with the servers
holding the centre) or ``local_sgd`` (periodic model averaging).

Example (``portable launch -n 2 --servers 1 -- python script.py``):
    >>> kv = pt.kv.create("dist_async")                       # doctest: +SKIP
    >>> trainer = gluon.Trainer(params, "sgd", kvstore=kv)      # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.errors import PortableError, SerializationError
from portable.io.atomic import read_bytes
from portable.io.tensors import tensors_from_bytes, tensors_to_bytes
from portable.kvstore.base import KVStore, _pairs
from portable.kvstore.comm import WorkerCollectives, get_communicator
from portable.kvstore.groups import group_size_from, split_groups
from portable.kvstore.ps import PSClient, serve_and_exit
from portable.kvstore.traffic import Traffic

_STATES_FORMAT = "portable.ps-optimizer-states"


class DistAsyncKVStore(WorkerCollectives, KVStore):
    """Asynchronous parameter-server store, with allreduce groups.

    Args:
        name: the store type.
        group_size: workers per allreduce group (default ``PORTABLE_KV_GROUP_SIZE`` or 1).
        bucket_size_mb: fusion bucket size of the group allreduce.
    """

    default_update_on_kvstore = True

    def __init__(self, name: str = "dist_async", group_size: int | None = None,
                 bucket_size_mb: float | None = None) -> None:
        super().__init__(name)
        comm = self._comm = get_communicator()
        serve_and_exit(comm)  # a script started on a server rank serves, then ends (MXNet)
        group_size = group_size_from(name, group_size)
        if comm.num_servers == 0 and group_size < comm.num_workers:
            raise PortableError(
                f"kvstore {name}: no server ranks (PORTABLE_KV_SERVERS=0) and group size "
                f"{group_size} < {comm.num_workers} workers; launch with --servers K, or set "
                f"the group size to the number of workers for pure allreduce")
        self._main = comm.workers.Dup()
        self._group_size = group_size
        self._traffic = Traffic()
        group = split_groups(comm, group_size, name, bucket_size_mb, self._traffic)
        self._is_leader, self._group = group.is_leader, group.queue
        self._ps = (PSClient(comm, name, self._traffic) if comm.num_servers and self._is_leader
                    else None)
        self._closed = False
        comm.watchdog.exit_hooks.append(self.close)

    @property
    def group_size(self) -> int:
        """Workers per allreduce group."""
        return self._group_size

    @property
    def traffic(self) -> dict:
        """Bytes this worker sent to and received from the servers and its group
        (:mod:`portable.kvstore.traffic`)."""
        return self._traffic.snapshot()

    # -- set-up ------------------------------------------------------------------------------
    def _broadcast_init(self, key: Any, value: Any) -> Any:
        self._comm.watchdog.api_call("init")
        if self._group is not None:
            self._group.register(key, value.shape, value.dtype)
        if self._comm.num_servers == 0:  # pure allreduce: one group, rank 0's value
            if self._group is not None:
                self._group.broadcast(key, value)
            return value
        if self._ps is not None:
            self._ps.register(key, value.size)
            if self.rank == 0:
                self._ps.init(key, value.asnumpy().reshape(-1))
        return value

    def set_optimizer(self, optimizer: Any) -> None:
        """Apply ``optimizer`` on the servers (worker 0 sends its configuration to them)."""
        super().set_optimizer(optimizer)
        if self._comm.num_servers and self.rank == 0:
            for server in self._comm.server_ranks:
                self._ps.ask(server, {"op": "optimizer", "config": optimizer.config()})
        self.barrier()  # no worker pushes before every server has the optimizer

    # -- push / pull ---------------------------------------------------------------------------
    def push(self, key: Any, value: Any, priority: int = 0) -> None:
        """Send each key's gradient (summed over devices and the group) to the servers."""
        for k, values in _pairs(key, value, "push"):
            self._check_key(k, "push")
            merged = self._reduce(k, values)
            if any(merged is v for v in values):
                merged = merged.copy()
            self._push_merged(k, merged, priority)

    def pull(self, key: Any, out: Any = None, priority: int = 0,
             ignore_sparse: bool = True) -> None:
        """Copy the servers' current weights of each key into ``out``."""
        if out is None:
            raise PortableError(f"kvstore {self.type}: pull needs out= arrays to copy into")
        for k, outs in _pairs(key, out, "pull"):
            self._check_key(k, "pull")
            self._pull_into(k, outs, priority)

    def pushpull(self, key: Any, value: Any, out: Any = None, priority: int = 0) -> None:
        """``push`` the gradients then ``pull`` the weights (into ``value`` if ``out`` is None)."""
        outs_by_key = dict(_pairs(key, value if out is None else out, "pushpull"))
        for k, values in _pairs(key, value, "pushpull"):
            self._check_key(k, "pushpull")
            self._push_merged(k, self._reduce(k, values), priority)
            self._pull_into(k, outs_by_key[k], priority)

    def _push_merged(self, key: Any, merged: Any, priority: int) -> None:
        self._comm.watchdog.api_call("push")
        if self._updater is None:
            raise PortableError(f"kvstore {self.type}: push needs an optimizer on the store "
                                f"(set_optimizer, or Trainer with update_on_kvstore=True)")
        if self._group is not None:
            self._group.allreduce(key, merged, priority)
        if self._comm.num_servers == 0:
            self._apply(key, merged)  # pure allreduce: every member applies the same update
        elif self._ps is not None:
            optimizer = self.optimizer
            extra = {"rescale_grad": optimizer.rescale_grad,
                     "lr_mult": optimizer._multiplier(key, optimizer.lr_mult, "lr_mult"),
                     "wd_mult": optimizer._multiplier(key, optimizer.wd_mult, "wd_mult")}
            self._ps.push(key, merged, priority, extra)

    def _pull_into(self, key: Any, outs: list, priority: int) -> None:
        self._comm.watchdog.api_call("pull")
        target = outs[0]
        if self._comm.num_servers == 0:
            self._store[key].copyto(target)
        else:
            if self._ps is not None:
                self._ps.pull(key, target, priority)
            if self._group is not None:
                self._group.broadcast(key, target, priority)
        for other in outs[1:]:
            target.copyto(other)

    # -- end of data, states -------------------------------------------------------------------
    def join(self) -> int:
        """Call when this worker has no more batches; returns once every worker called it.

        Inside a group the joined worker adds zeros to the others' sums (its group's first rank
        must not join before the others: it talks to the servers for them).

        Returns:
            0 (the servers hold the authoritative weights: pull them).
        """
        self._comm.watchdog.api_call("join")
        if self._group is not None:
            self._group.join()
        if self._ps is not None:
            from portable.engine import get_engine

            get_engine().wait_all()  # this worker's pushes have left
        self.barrier()
        return 0

    def save_optimizer_states(self, fname: str, dump_optimizer: bool = False) -> None:
        """Worker 0 collects every server's optimizer states into one file."""
        self._require_updater("save_optimizer_states")
        if self._comm.num_servers == 0:
            if self.rank == 0:
                self._updater.save(fname, dump_optimizer)
        elif self.rank == 0:
            from portable.io.atomic import atomic_write_bytes

            blobs = {f"server{i}": self._ps.ask(server, {"op": "get_states"})
                     for i, server in enumerate(self._comm.server_ranks)}
            atomic_write_bytes(fname, tensors_to_bytes(blobs, {"format": _STATES_FORMAT}))
        self.barrier()

    def load_optimizer_states(self, fname: str) -> None:
        """Worker 0 sends each server its part of a file written by ``save_optimizer_states``."""
        self._require_updater("load_optimizer_states")
        if self._comm.num_servers == 0:
            self._updater.load(fname)
        elif self.rank == 0:
            tensors, meta = tensors_from_bytes(read_bytes(fname, "optimizer states"),
                                               str(fname))
            if meta.get("format") != _STATES_FORMAT or len(tensors) != self._comm.num_servers:
                raise SerializationError(f"{fname}: not the optimizer states of "
                                         f"{self._comm.num_servers} parameter server(s)")
            for i, server in enumerate(self._comm.server_ranks):
                blob = np.ascontiguousarray(tensors[f"server{i}"], np.uint8)
                self._ps.send(server, {"op": "set_states"}, blob)
        self.barrier()

    def close(self) -> None:
        """Finish pending communication, then tell the servers this worker is done."""
        if self._closed:
            return
        self._closed = True
        if self._group is not None:
            with self._comm.watchdog.waiting(f"{self.type} close (pending requests)"):
                self._group.close()
        if self._ps is not None:
            from portable.engine import get_engine

            try:
                get_engine().wait_all()
            except Exception:  # noqa: BLE001 - reported where the program waited; stop anyway
                pass
        if self._comm.num_servers:
            client = self._ps or PSClient(self._comm, self.type)
            for server in self._comm.server_ranks:
                client.send(server, {"op": "stop"})
