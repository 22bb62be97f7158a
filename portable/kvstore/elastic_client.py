"""The worker side of EASGD's elastic exchange: engine ops that send a group's replica of a key
to the parameter servers and apply the elastic difference they answer with
(:mod:`portable.kvstore.elastic` is the servers' side).

An exchange is two engine ops on the replica's variable, each declared as writing it (so that
nothing reads or changes the replica while it travels):

* ``send`` (device ``kvstore:elastic-send``): posts the receives of the answer, then sends the
  replica's parts (header + data, :mod:`portable.kvstore.ps`' message format);
* ``settle`` (device ``kvstore:elastic-recv``): waits for the answer ``d`` (registered with the
  watchdog: a dead or stalled server is reported by rank) and applies ``x <- x - d``.

The two devices are separate threads on purpose: in synchronous mode an answer waits for
every group's exchange of the key, so a thread blocked in ``settle`` must never hold up the
sends of other keys (which other groups' answers may need first).

Between ``send`` and ``settle`` an answer is *pending*: the store decides when it is settled
(at once in synchronous mode, at the key's next exchange in asynchronous mode), and a
checkpoint saves a pending answer (:meth:`ElasticClient.receive_all`, :meth:`pending`).

Example (inside the store, on a group's leader):
    >>> client.send(key, replica, round_=3, priority=0)   # doctest: +SKIP
    >>> client.settle(key, replica, priority=0)           # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from portable.engine import get_engine
from portable.kvstore import elastic
from portable.kvstore.comm import TAG_ELASTIC_REPLY
from portable.kvstore.ps import PSClient

SEND_DEVICE = "kvstore:elastic-send"
RECV_DEVICE = "kvstore:elastic-recv"


class _Answer(NamedTuple):
    """An answer on its way (``requests`` not yet complete) or received (``requests`` empty)."""

    requests: list
    parts: list[np.ndarray]  # one flat buffer per part, in part order


class ElasticClient:
    """Exchanges a group's replicas with the servers' centres.

    Args:
        ps: the worker's parameter-server client (placement, message format, traffic).
        comm: the process's Communicator.
        name: the store name (op names, errors).
        group: this worker's group index (servers check every round has each group once).
    """

    def __init__(self, ps: PSClient, comm: Any, name: str, group: int) -> None:
        self._ps = ps
        self._comm = comm
        self._name = name
        self._group = group
        self._answers: dict[Any, _Answer] = {}  # key -> its pending answer

    # -- engine ops --------------------------------------------------------------------------
    def send(self, key: Any, replica: Any, round_: int, priority: int) -> None:
        """Push the op that sends ``replica`` (an NDArray) as exchange ``round_`` of ``key``."""
        parts, backend = self._ps.parts(key), replica.device.backend
        world = self._comm.world

        def run() -> None:
            flat = np.ascontiguousarray(backend.to_numpy(replica._data)).reshape(-1)
            buffers = [np.empty(stop - start, flat.dtype) for _, start, stop in parts]
            # receives first: a large answer then never waits for this rank to post one
            requests = [world.Irecv(buffer, source=server, tag=TAG_ELASTIC_REPLY)
                        for buffer, (server, _, _) in zip(buffers, parts)]
            with self._comm.watchdog.waiting(f"{self._name} elastic exchange (send to the "
                                             f"servers)", key):
                for server, start, stop in parts:
                    header = {"op": elastic.OP_EXCHANGE, "key": key, "part": start,
                              "group": self._group, "round": round_}
                    self._ps.send(server, header, flat[start:stop])
            self._answers[key] = _Answer(requests, buffers)

        get_engine().push(run, writes=[replica._var], device=SEND_DEVICE, priority=priority,
                          name=f"kv.{self._name}.elastic_send[{key}]")

    def settle(self, key: Any, replica: Any, priority: int) -> None:
        """Push the op that waits for ``key``'s pending answer (if any) and applies it."""
        backend, shape = replica.device.backend, replica.shape

        def run() -> None:
            difference = self._take(key)
            if difference is None:
                return
            flat = np.asarray(backend.to_numpy(replica._data)).reshape(-1)
            updated = flat - difference.astype(flat.dtype, copy=False)
            backend.copy_into(replica._data, backend.from_numpy(updated.reshape(shape)))

        get_engine().push(run, writes=[replica._var], device=RECV_DEVICE, priority=priority,
                          name=f"kv.{self._name}.elastic_settle[{key}]")

    # -- pending answers (checkpoints) -------------------------------------------------------
    def receive_all(self) -> None:
        """Wait until every pending answer has arrived (keeping it pending). Call after the
        engine drained, so that every pushed send has posted its receives."""
        for key, answer in list(self._answers.items()):
            self._wait(key, answer)
            self._answers[key] = _Answer([], answer.parts)

    def pending(self) -> dict[Any, np.ndarray]:
        """The received, not yet applied answer of each key (after :meth:`receive_all`)."""
        return {key: np.concatenate(answer.parts) for key, answer in self._answers.items()
                if not answer.requests}

    def restore(self, key: Any, difference: np.ndarray | None) -> None:
        """Make ``difference`` the pending answer of ``key`` (None: none), as a checkpoint
        saved it. Every earlier answer must have been received (:meth:`receive_all`)."""
        self._answers.pop(key, None)
        if difference is not None:
            self._answers[key] = _Answer([], [np.ascontiguousarray(difference).reshape(-1)])

    def discard_all(self) -> None:
        """Receive and drop every pending answer (before loading a checkpoint)."""
        self.receive_all()
        self._answers.clear()

    def _take(self, key: Any) -> np.ndarray | None:
        answer = self._answers.pop(key, None)
        if answer is None:
            return None
        self._wait(key, answer)
        return np.concatenate(answer.parts) if len(answer.parts) > 1 else answer.parts[0]

    def _wait(self, key: Any, answer: _Answer) -> None:
        if not answer.requests:
            return
        servers = sorted({server for server, _, _ in self._ps.parts(key)})
        with self._comm.watchdog.waiting(f"{self._name} elastic answer from server rank(s) "
                                         f"{', '.join(map(str, servers))}", key):
            self._comm.MPI.Request.Waitall(answer.requests)
        self._ps.traffic.add(received=sum(part.nbytes for part in answer.parts))
