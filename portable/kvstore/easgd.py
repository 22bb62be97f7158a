"""``dist_async`` with ``algorithm="easgd"``: MPI Elastic SGD (MXNET-MPI, arXiv 1801.03855) inside
the parameter server: allreduce groups train replicas, the servers hold the centre variable.

Roles: the last ``PORTABLE_KV_SERVERS`` ranks are parameter servers holding the centre ``c`` of
every key; the workers are cut into groups of ``group_size`` (:mod:`portable.kvstore.groups`).
Inside a group, training is synchronous: each push sums the gradient over the group and every
member applies the optimizer to its copy of the group's replica ``x_g``
(:mod:`portable.kvstore.replica`). Between groups nothing is synchronous.

Every ``tau``-th push of a key (counted per key; the gradient step comes first), the group's
leader exchanges the key with the servers (:mod:`portable.kvstore.elastic`,
:mod:`portable.kvstore.elastic_client`): it sends ``x_g``; the server answers
``d_g = alpha * (x_g - c)`` and moves the centre ``c <- c + d_g``; the group applies
``x_g <- x_g - d_g``. So the worker side is ``x_g <- x_g - alpha (x_g - c)`` and the centre gains
``alpha * sum_g (x_g - c)`` over the groups' exchanges as they arrive. When the answer is
applied:

* ``sync=False`` (default, the paper's asynchronous lazy update): the group does not wait.
  The answer to exchange ``r`` of a key is applied at the key's exchange ``r + 1``, just before
  the replica is sent again (or never, if training ends first: the centre has it already).
  The server answers each exchange at once, in arrival order.
* ``sync=True``: the server answers round ``r`` of a key once every group sent it, all from the
  same centre (``c <- c + alpha * sum_g (x_g - c)``, summed in group order), and the group
  applies the answer before its next step: EASGD's synchronous equations, deterministic (for
  tests, and with ``tau=1`` the paper's equivalence case). Every group must take as many
  steps.

After the exchange the leader broadcasts the replica to its group, so members stay identical.
``pull`` gives this worker's replica (what it trains), ``pull_center`` the centre: the model to
evaluate, export and checkpoint. ``save_optimizer_states`` adds the centre and every pending
answer to the replicas' checkpoint, so a resumed run continues exactly.

``alpha`` defaults to ``0.9 / groups`` (Zhang et al.'s moving rate ``beta = groups * alpha =
0.9``; the centre is stable for ``beta < 2``).

Example (``portable launch -n 4 --servers 1 -- python train.py``):
    >>> kv = pt.kv.create("dist_async", algorithm="easgd", tau=4, group_size=2)   # doctest: +SKIP
    >>> trainer = gluon.Trainer(net.collect_params(), "sgd", kvstore=kv)          # doctest: +SKIP
    >>> ...  # train; then evaluate (and export) the centre:
    >>> trainer.pull_center()                                                     # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.errors import PortableError, SerializationError
from portable.kvstore import elastic
from portable.kvstore.base import _pairs
from portable.kvstore.elastic_client import ElasticClient
from portable.kvstore.ps import PSClient
from portable.kvstore.replica import ReplicaKVStore
from portable.ndarray import empty


class ElasticKVStore(ReplicaKVStore):
    """EASGD between allreduce groups, with the centre on the parameter servers.

    Args:
        name: the store type (``dist_async``).
        alpha: the elastic coefficient, in (0, 1] (default ``0.9 / groups``).
        tau: pushes of a key between two exchanges of it.
        group_size: workers per allreduce group (default ``PORTABLE_KV_GROUP_SIZE`` or 1).
        sync: synchronous rounds (see the module docstring).
        bucket_size_mb: fusion bucket size of the group allreduce.
    """

    algorithm = "easgd"

    def __init__(self, name: str = "dist_async", alpha: float | None = None, tau: int = 1,
                 group_size: int | None = None, sync: bool = False,
                 bucket_size_mb: float | None = None) -> None:
        super().__init__(name, tau, group_size, bucket_size_mb)
        comm = self._comm
        if comm.num_servers == 0:
            raise PortableError(f"kvstore {name} (easgd): the centre variable lives on "
                                f"parameter servers, but there are none (PORTABLE_KV_SERVERS=0); "
                                f"launch with --servers 1 (portable launch -n N --servers 1)")
        if alpha is None:
            alpha = 0.9 / self.num_groups
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or \
                not 0.0 < float(alpha) <= 1.0:
            raise PortableError(f"kvstore {name} (easgd): alpha must be a number in (0, 1], "
                                f"got {alpha!r}")
        self._alpha, self._sync = float(alpha), bool(sync)
        # this group's exchanges of each key in this process (every member counts them)
        self._exchanged: dict[Any, int] = {}
        self._ps = PSClient(comm, name, self._traffic)  # (any worker may pull the centre)
        self._client = (ElasticClient(self._ps, comm, name, self.group)
                        if self._groups.is_leader else None)
        if self.rank == 0:
            for server in comm.server_ranks:
                self._ps.ask(server, {"op": elastic.OP_CONFIG, "alpha": self._alpha,
                                      "groups": self.num_groups, "sync": self._sync})
        self.barrier()  # no exchange before every server knows the rules

    @property
    def alpha(self) -> float:
        """The elastic coefficient."""
        return self._alpha

    @property
    def sync(self) -> bool:
        """Whether exchanges run in synchronous rounds."""
        return self._sync

    # -- hooks -------------------------------------------------------------------------------
    def _register(self, key: Any, value: Any) -> None:
        self._ps.register(key, value.size)

    def _after_init(self, key: Any, value: Any) -> None:
        if self.rank == 0:  # the centre starts where every replica does
            self._ps.init(key, np.ascontiguousarray(value.asnumpy()).reshape(-1))

    def _communicate(self, key: Any, round_: int, priority: int) -> None:
        self._exchanged[key] = self._exchanged.get(key, 0) + 1
        replica = self._store[key]
        if self._client is not None:
            if self._sync:
                self._client.send(key, replica, round_, priority)
                self._client.settle(key, replica, priority)
            else:  # the previous answer first: what is sent has had its elastic pull
                self._client.settle(key, replica, priority)
                self._client.send(key, replica, round_, priority)
        if self._groups.queue is not None:
            self._groups.queue.broadcast(key, replica, priority)

    def pull_center(self, key: Any, out: Any = None, priority: int = 0) -> None:
        """Copy the servers' centre of each key into ``out`` (an NDArray or a list per key).

        Any worker may call it, alone. It sees every exchange this worker's group sent before
        (and those of other groups that reached the servers first).
        """
        if out is None:
            raise PortableError(f"kvstore {self.type}: pull_center needs out= arrays")
        for k, outs in _pairs(key, out, "pull_center"):
            self._check_key(k, "pull_center")
            self._comm.watchdog.api_call("pull_center")
            self._store[k].wait_to_read()  # this group's exchanges of k have left
            target = outs[0]
            # (the leader sends them: the servers answer once the centre holds them)
            self._ps.pull(k, target, priority, after=(self.group, self._exchanged.get(k, 0)))
            for other in outs[1:]:
                target.copyto(other)

    def _close_algorithm(self) -> None:
        if self._client is not None:  # no receive left posted when MPI finalises
            with self._comm.watchdog.waiting(f"{self.type} close (elastic answers)"):
                self._client.discard_all()

    # -- checkpoints -------------------------------------------------------------------------
    def _checkpoint_config(self) -> dict:
        return {**super()._checkpoint_config(), "alpha": self._alpha, "sync": self._sync}

    def _prepare_checkpoint(self) -> None:
        if self._client is not None:
            self._client.receive_all()

    def _group_tensors(self, keys: list) -> dict:
        pending = self._client.pending() if self._client is not None else {}
        return {f"pending/{i}": pending[k] for i, k in enumerate(keys) if k in pending}

    def _shared_tensors(self, keys: list) -> dict:
        if self.rank != 0:
            return {}
        centres = {}
        for i, k in enumerate(keys):
            stored = self._store[k]
            centres[i] = empty(stored.shape, dtype=stored.dtype)
            self._ps.pull(k, centres[i], 0)
        return {f"centre/{i}": array.asnumpy() for i, array in centres.items()}

    def _discard_pending(self) -> None:
        if self._client is not None:
            self._client.discard_all()

    def _check_algorithm(self, keys: list, part: dict, tensors: dict, where: str) -> None:
        for i, k in enumerate(keys):
            size = self._store[k].size
            centre = tensors.get(f"centre/{i}")
            if centre is None or centre.size != size:
                raise SerializationError(f"{where}: the centre of key {k!r} is missing or not "
                                         f"of {size} values")
            pending = part.get(f"pending/{i}")
            if pending is not None and pending.size != size:
                raise SerializationError(f"{where}: the pending answer of key {k!r} holds "
                                         f"{pending.size} values, not {size}")

    def _restore_algorithm(self, keys: list, part: dict, tensors: dict) -> None:
        for i, k in enumerate(keys):
            if self._client is not None:
                self._client.restore(k, part.get(f"pending/{i}"))
            if self.rank == 0:  # (asked, not sent: answered before the workers go on)
                flat = np.ascontiguousarray(
                    tensors[f"centre/{i}"].astype(self._store[k].dtype)).reshape(-1)
                for server, start, stop in self._ps.parts(k):
                    self._ps.ask(server, {"op": elastic.OP_ASSIGN, "key": k, "part": start},
                                 flat[start:stop])
