"""Stores whose workers train their own replicas and communicate them every ``tau`` steps: the
shared part of EASGD (:mod:`portable.kvstore.easgd`) and local SGD
(:mod:`portable.kvstore.local_sgd`).

Workers are cut into allreduce groups (:mod:`portable.kvstore.groups`). Each group trains one
replica synchronously: a push sums the gradient over the group (``dist_sync``'s fused
allreduce) and every member applies the optimizer to its copy of the replica, which the
store holds (``update_on_kvstore``: ``gluon.Trainer`` pushes gradients and pulls weights, so
``pull`` gives this worker's replica). Every ``tau``-th push of a key, counted per key, the
store calls :meth:`ReplicaKVStore._communicate` for it: what the algorithm does with the
replicas there is its own.

``init`` makes every worker start from rank 0's value. ``save_optimizer_states`` /
``load_optimizer_states`` (what ``Trainer.save_states`` / ``load_states`` call) are collective
and hold everything a resumed run needs to continue exactly: each group's replica, optimizer
states and step counters, plus what the algorithm adds (EASGD: the centre and pending
answers); ``checkpoint_bytes`` / ``restore_checkpoint`` are the same as bytes, and what
``fit`` checkpoints (asking every rank, through ``Trainer.get_states``), so a resumed ``fit``
continues exactly too, its parameters file holding the centre. ``get_optimizer_states`` /
``set_optimizer_states`` stay this worker's optimizer states alone.

Every worker must take the same number of steps (EASGD in asynchronous mode excepted, between
groups): shard the data evenly (``distributed.shard(..., even=True)``).

Example (a subclass, under ``portable launch``):
    >>> kv = pt.kv.create("dist_async", algorithm="local_sgd", tau=4)   # doctest: +SKIP
    >>> trainer = gluon.Trainer(params, "sgd", kvstore=kv)              # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.engine import get_engine
from portable.errors import PortableError, SerializationError
from portable.io.atomic import atomic_write_bytes, read_bytes
from portable.io.tensors import tensors_from_bytes, tensors_to_bytes
from portable.kvstore.base import KVStore, _pairs
from portable.kvstore.comm import WorkerCollectives, check_same_key, get_communicator
from portable.kvstore.groups import group_size_from, split_groups
from portable.kvstore.ps import PSClient, serve_and_exit
from portable.kvstore.traffic import Traffic

CHECKPOINT_FORMAT = "portable.replica-checkpoint"


class ReplicaKVStore(WorkerCollectives, KVStore):
    """Groups that train replicas and communicate every ``tau`` steps (a base class).

    Args:
        name: the store type.
        tau: pushes of a key between two communications of it.
        group_size: workers per allreduce group (default ``PORTABLE_KV_GROUP_SIZE`` or 1).
        bucket_size_mb: fusion bucket size of the group allreduce.
    """

    default_update_on_kvstore = True
    algorithm = "replicas"  # (subclasses name themselves; checked when a checkpoint loads)

    def __init__(self, name: str, tau: int = 1, group_size: int | None = None,
                 bucket_size_mb: float | None = None) -> None:
        super().__init__(name)
        if isinstance(tau, bool) or not isinstance(tau, int) or tau < 1:
            raise PortableError(f"kvstore {name} ({self.algorithm}): tau must be a positive "
                                f"integer (steps between communications), got {tau!r}")
        comm = self._comm = get_communicator()
        serve_and_exit(comm)
        self._tau = tau
        self._traffic = Traffic()
        self._main = comm.workers.Dup()
        self._groups = split_groups(comm, group_size_from(name, group_size), name,
                                    bucket_size_mb, self._traffic)
        self._steps: dict[Any, int] = {}  # pushes of each key so far
        self._closed = False
        comm.watchdog.exit_hooks.append(self.close)

    # -- identity ----------------------------------------------------------------------------
    @property
    def tau(self) -> int:
        """Pushes of a key between two communications of it."""
        return self._tau

    @property
    def group_size(self) -> int:
        """Workers per allreduce group."""
        return self._groups.size

    @property
    def group(self) -> int:
        """This worker's group."""
        return self._groups.index

    @property
    def num_groups(self) -> int:
        """How many groups (replicas) train."""
        return self._groups.count

    @property
    def gradient_workers(self) -> int:
        """How many workers' gradients one push sums (this worker's group): set the
        optimizer's ``rescale_grad`` to its inverse to train on the group's mean gradient."""
        return self._groups.queue.comm.Get_size() if self._groups.queue is not None else 1

    @property
    def traffic(self) -> dict:
        """Bytes this worker moved (:mod:`portable.kvstore.traffic`)."""
        return self._traffic.snapshot()

    def steps(self, key: Any) -> int:
        """How many times ``key`` was pushed (the counter ``tau`` applies to)."""
        self._check_key(key, "steps")
        return self._steps[key]

    def is_capable(self, capability: str) -> bool:
        """``optimizer``, and ``replica_states``: ``load_optimizer_states`` also restores the
        replicas (pull them into the parameters afterwards; ``Trainer.load_states`` does)."""
        return capability in ("optimizer", "replica_states")

    # -- hooks of the algorithms ---------------------------------------------------------------
    def _register(self, key: Any, value: Any) -> None:
        """Called by ``init`` on every worker, in the same order (before the value is sent)."""

    def _after_init(self, key: Any, value: Any) -> None:
        """Called by ``init`` once every worker holds rank 0's value."""

    def _communicate(self, key: Any, round_: int, priority: int) -> None:
        """Every ``tau``-th push of ``key``: exchange or average its replica."""
        raise NotImplementedError

    def pull_center(self, key: Any, out: Any = None, priority: int = 0) -> None:
        """Copy the value that stands for the trained model into ``out`` (see subclasses)."""
        raise NotImplementedError

    # -- set-up ------------------------------------------------------------------------------
    def _broadcast_init(self, key: Any, value: Any) -> Any:
        self._comm.watchdog.api_call("init")
        check_same_key(self, key, value)
        if self._groups.queue is not None:
            self._groups.queue.register(key, value.shape, value.dtype)
        self._register(key, value)
        host = np.ascontiguousarray(value.asnumpy())
        with self._comm.watchdog.waiting(f"{self.type} init (broadcast from rank 0)", key):
            self._main.Bcast(host, root=0)
        self._traffic.add(*((host.nbytes, 0) if self.rank == 0 else (0, host.nbytes)))
        value[:] = host
        self._steps[key] = 0
        self._after_init(key, value)
        return value

    # -- training ------------------------------------------------------------------------------
    def push(self, key: Any, value: Any, priority: int = 0) -> None:
        """Sum each key's gradient over devices and the group, and update the replica."""
        for k, values in _pairs(key, value, "push"):
            self._check_key(k, "push")
            merged = self._reduce(k, values)
            if any(merged is v for v in values):
                merged = merged.copy()  # the group allreduce works in place
            self._step(k, merged, priority)

    def pushpull(self, key: Any, value: Any, out: Any = None, priority: int = 0) -> None:
        """``push`` the gradients, then ``pull`` the replicas (into ``value`` if ``out`` is
        None). The gradients are summed over the group in place, as ``dist_sync`` does."""
        outs_by_key = dict(_pairs(key, value if out is None else out, "pushpull"))
        for k, values in _pairs(key, value, "pushpull"):
            self._check_key(k, "pushpull")
            self._step(k, self._reduce(k, values), priority)
            self.pull(k, out=outs_by_key[k], priority=priority)

    def _step(self, key: Any, merged: Any, priority: int) -> None:
        self._comm.watchdog.api_call("push")
        if self._updater is None:
            raise PortableError(f"kvstore {self.type} ({self.algorithm}): push needs an "
                                f"optimizer on the store (set_optimizer, or Trainer with "
                                f"update_on_kvstore=True)")
        if self._groups.queue is not None:
            self._groups.queue.allreduce(key, merged, priority)
        self._apply(key, merged)
        self._steps[key] += 1
        if self._steps[key] % self._tau == 0:
            self._communicate(key, self._steps[key] // self._tau, priority)

    # -- end of data ---------------------------------------------------------------------------
    def join(self) -> int:
        """Call when this worker has no more batches; returns once every worker called it.

        Returns:
            0 (replicas differ between groups: export ``pull_center``, not a worker's).
        """
        self._comm.watchdog.api_call("join")
        if self._groups.queue is not None:
            self._groups.queue.join()
        get_engine().wait_all()
        self.barrier()
        return 0

    def close(self) -> None:
        """Finish pending communication, then tell the servers (if any) this worker is done."""
        if self._closed:
            return
        self._closed = True
        try:
            get_engine().wait_all()
        except Exception:  # noqa: BLE001 - reported where the program waited; stop anyway
            pass
        self._close_algorithm()
        if self._groups.queue is not None:
            with self._comm.watchdog.waiting(f"{self.type} close (pending requests)"):
                self._groups.queue.close()
        if self._comm.num_servers:
            client = PSClient(self._comm, self.type, self._traffic)
            for server in self._comm.server_ranks:
                client.send(server, {"op": "stop"})

    def _close_algorithm(self) -> None:
        """Finish the algorithm's own communication (before the group queue closes)."""

    # -- checkpoints ---------------------------------------------------------------------------
    def save_optimizer_states(self, fname: str, dump_optimizer: bool = False) -> None:
        """Write every group's replica, optimizer states and step counters, and what the
        algorithm adds, into one file (collective: every worker calls it; rank 0 writes).

        Args:
            fname: the file (safetensors with JSON metadata, written atomically).
            dump_optimizer: accepted for the interface; the configuration is always saved.
        """
        data = self.checkpoint_bytes()
        if self.rank == 0:
            atomic_write_bytes(fname, data)
        self.barrier()

    def load_optimizer_states(self, fname: str) -> None:
        """Restore a file written by ``save_optimizer_states`` (collective: rank 0 reads it and
        sends it to every worker; no shared disk needed). Then pull the replicas into the
        parameters (``Trainer.load_states`` does).

        Raises:
            SerializationError: the file is unreadable, damaged, or was saved by another
                algorithm, number of workers or groups, or for other keys (names the file).
        """
        self._require_updater("load_optimizer_states")
        data, error = None, f"{fname}: rank 0 could not read the replica checkpoint"
        if self.rank == 0:
            try:
                data = read_bytes(fname, "replica checkpoint")
            except SerializationError as exc:
                error = str(exc)
        data = self.broadcast_bytes(data)
        if not data:
            raise SerializationError(error)
        self.restore_checkpoint(data, str(fname))

    def checkpoint_bytes(self) -> bytes | None:
        """The whole training state as one tensor file's bytes, on rank 0 (None elsewhere):
        each group's replica, optimizer states (with their configuration) and step counters,
        and what the algorithm adds. Collective: every worker calls it."""
        self._require_updater("checkpoint_bytes")
        get_engine().wait_all()
        self._prepare_checkpoint()
        keys = list(self._store)
        mine = b""
        if self._groups.is_leader:  # (a group's members hold the same replica and states)
            tensors = {f"weight/{i}": self._store[k].asnumpy() for i, k in enumerate(keys)}
            tensors["states"] = np.frombuffer(self._updater.get_states(True), np.uint8)
            tensors.update(self._group_tensors(keys))
            mine = tensors_to_bytes(tensors, {"steps": [self._steps[k] for k in keys]})
        blobs = self._gather_bytes(mine)
        extra = self._shared_tensors(keys)  # (every worker: some algorithms communicate)
        if self.rank != 0:
            return None
        leaders = range(0, self.num_workers, self.group_size)
        tensors = {f"group{g}": np.frombuffer(blobs[leader], np.uint8)
                   for g, leader in enumerate(leaders)}
        tensors.update(extra)
        meta = {"format": CHECKPOINT_FORMAT, **self._checkpoint_config(),
                "keys": [[k, list(self._store[k].shape), str(self._store[k].dtype)]
                         for k in keys]}
        return tensors_to_bytes(tensors, meta)

    def restore_checkpoint(self, data: bytes, source: str = "<replica checkpoint>") -> None:
        """Restore ``checkpoint_bytes``' bytes (every worker calls it with the same bytes;
        each takes its group's part). Everything is checked before anything is changed.

        Raises:
            SerializationError: naming ``source`` and what does not fit this store.
        """
        self._require_updater("restore_checkpoint")
        tensors, meta = tensors_from_bytes(data, source)
        keys = self._check_checkpoint(tensors, meta, source)
        where = f"{source} (group {self.group})"
        part, group_meta = tensors_from_bytes(tensors[f"group{self.group}"].tobytes(), where)
        steps = group_meta.get("steps") if isinstance(group_meta, dict) else None
        if not isinstance(steps, list) or len(steps) != len(keys) or not all(
                isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps):
            raise SerializationError(f"{where}: key 'steps' is not one count per key")
        for i, k in enumerate(keys):
            weight, stored = part.get(f"weight/{i}"), self._store[k]
            if weight is None or tuple(weight.shape) != stored.shape:
                raise SerializationError(f"{where}: the replica of key {k!r} is missing or "
                                         f"not of shape {list(stored.shape)}")
        if "states" not in part:
            raise SerializationError(f"{where}: no optimizer states")
        self._check_algorithm(keys, part, tensors, where)
        get_engine().wait_all()
        self._discard_pending()
        self._updater.set_states(part["states"].tobytes(), where)
        for i, k in enumerate(keys):
            stored = self._store[k]
            stored[:] = part[f"weight/{i}"].astype(stored.dtype, copy=False)
            self._steps[k] = steps[i]
        self._restore_algorithm(keys, part, tensors)
        get_engine().wait_all()
        self.barrier()

    def _check_checkpoint(self, tensors: dict, meta: dict, source: str) -> list:
        found = meta.get("format") if isinstance(meta, dict) else None
        if found != CHECKPOINT_FORMAT:
            raise SerializationError(f"{source}: not a replica checkpoint (format "
                                     f"{found!r:.60}, expected {CHECKPOINT_FORMAT!r})")
        mine = self._checkpoint_config()
        differ = {k: (meta.get(k), v) for k, v in mine.items() if meta.get(k) != v}
        if differ:
            described = ", ".join(f"{k} {saved!r} (this store: {now!r})"
                                  for k, (saved, now) in differ.items())
            raise SerializationError(f"{source}: saved with {described}; resume with the "
                                     f"same algorithm, workers and groups")
        keys = list(self._store)
        expected = [[k, list(self._store[k].shape), str(self._store[k].dtype)] for k in keys]
        if meta.get("keys") != expected:
            raise SerializationError(f"{source}: saved for keys {str(meta.get('keys'))[:200]}, "
                                     f"this store holds {str(expected)[:200]}")
        if f"group{self.group}" not in tensors:
            raise SerializationError(f"{source}: group {self.group} is missing")
        return keys

    def _checkpoint_config(self) -> dict:
        """What a checkpoint must agree on to be loaded (subclasses add their settings)."""
        return {"algorithm": self.algorithm, "workers": self.num_workers,
                "group_size": self.group_size, "groups": self.num_groups, "tau": self._tau}

    def _prepare_checkpoint(self) -> None:
        """Before a save, with the engine drained (EASGD receives pending answers)."""

    def _group_tensors(self, keys: list) -> dict:
        """Tensors of this group's part of a checkpoint, besides replicas and states."""
        return {}

    def _shared_tensors(self, keys: list) -> dict:
        """Tensors of the whole checkpoint (called on every worker; rank 0's are written)."""
        return {}

    def _discard_pending(self) -> None:
        """Before a load, with the engine drained: drop in-flight algorithm state."""

    def _check_algorithm(self, keys: list, part: dict, tensors: dict, where: str) -> None:
        """Check the algorithm's tensors of a checkpoint (before anything is restored)."""

    def _restore_algorithm(self, keys: list, part: dict, tensors: dict) -> None:
        """After a load restored replicas, states and counters (EASGD: centre, answers)."""

    def _gather_bytes(self, data: bytes) -> list[bytes] | None:
        """Every worker's ``data`` on rank 0 (None elsewhere); collective over the workers."""
        size = np.array([len(data)], np.int64)
        sizes = np.empty(self.num_workers, np.int64) if self.rank == 0 else None
        mine = np.frombuffer(data, np.uint8) if data else np.empty(0, np.uint8)
        with self._comm.watchdog.waiting(f"{self.type} checkpoint (gather to rank 0)"):
            self._main.Gather(size, sizes, root=0)
            if self.rank != 0:
                self._main.Gatherv(mine, None, root=0)
                self._traffic.add(sent=mine.nbytes)
                return None
            bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
            buffer = np.empty(int(bounds[-1]), np.uint8)
            self._main.Gatherv(mine, [buffer, (sizes.tolist(), bounds[:-1].tolist()),
                                      self._comm.MPI.BYTE], root=0)
        self._traffic.add(received=buffer.nbytes - mine.nbytes)
        return [buffer[a:b].tobytes() for a, b in zip(bounds[:-1], bounds[1:])]
