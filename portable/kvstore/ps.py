"""The parameter-server protocol of ``dist_async``: MPI point-to-point messages between workers
and dedicated server ranks (MXNet's ps-lite roles, on MPI).

A message is a JSON header (tag ``TAG_PS_HEADER``), followed for ``init``, ``push``,
``set_states``, ``elastic`` and ``assign`` by one NumPy payload from the same sender (tag
``TAG_PS_DATA``; MPI keeps the order of messages between two ranks). ``pull``, ``get_states``,
``optimizer``, ``elastic_config`` and ``assign`` are answered on ``TAG_PS_REPLY``; ``elastic``
exchanges on ``TAG_ELASTIC_REPLY``. A ``PSClient`` counts the bytes it moves
(:mod:`portable.kvstore.traffic`).

Placement: an array of at least ``PORTABLE_KV_BIGARRAY`` elements (default 1,000,000, MXNet's
``MXNET_KVSTORE_BIGARRAY_BOUND``) is cut into one contiguous part per server; a smaller one lives
whole on the server ``crc32(key) % servers``. Every worker computes the same placement.

Server loop: poll for a header from any worker, apply it (``push`` runs the optimizer on the
part at once: no barrier between workers), answer it; a ``pull`` or ``push`` of a key not yet
initialised waits for the ``init``; the loop ends when every worker sent ``stop``. EASGD's
elastic exchanges (``elastic_config``, ``elastic``, ``assign``) are answered by the rules of
:mod:`portable.kvstore.elastic`, on their own reply tag.

Example:
    >>> placement("w", 10, [3, 4])
    [Part(server=4, start=0, stop=10)]
"""
from __future__ import annotations

import json
import sys
import time
import zlib
from typing import Any, NamedTuple

import numpy as np

from portable.errors import PortableError
from portable.kvstore import elastic
from portable.kvstore.comm import (TAG_ELASTIC_REPLY, TAG_PS_DATA, TAG_PS_HEADER, TAG_PS_REPLY,
                                   env_int, from_bytes_array, recv_bytes, to_bytes_array)
from portable.kvstore.traffic import Traffic

PS_DEVICE = "kvstore:ps"
# operations whose header is followed by a payload
_WITH_PAYLOAD = ("init", "push", "set_states", elastic.OP_EXCHANGE, elastic.OP_ASSIGN)


class Part(NamedTuple):
    """Elements ``[start, stop)`` of a key's flat array, held by server rank ``server`` (a
    server names the part by its key and ``start``)."""

    server: int
    start: int
    stop: int


def placement(key: Any, numel: int, servers: list[int], big: int | None = None) -> list[Part]:
    """Where the parts of a key live, in element order."""
    big = env_int("PORTABLE_KV_BIGARRAY", 1_000_000, 1) if big is None else big
    if numel >= big and len(servers) > 1:
        bounds = np.linspace(0, numel, len(servers) + 1).astype(np.int64)
        return [Part(s, int(a), int(b)) for s, a, b in zip(servers, bounds[:-1], bounds[1:])]
    home = servers[zlib.crc32(json.dumps(key).encode()) % len(servers)]
    return [Part(home, 0, int(numel))]


class PSClient:
    """The worker side: engine ops that send to and receive from the servers.

    Args:
        comm: the process's :class:`~portable.kvstore.comm.Communicator`.
        name: the store name (op names, errors).
        traffic: counts the bytes sent and received (default: its own).
    """

    def __init__(self, comm: Any, name: str, traffic: Traffic | None = None) -> None:
        self._comm = comm
        self._world = comm.world
        self._name = name
        self._parts: dict[Any, list[Part]] = {}
        self.traffic = traffic if traffic is not None else Traffic()

    def register(self, key: Any, numel: int) -> None:
        self._parts[key] = placement(key, numel, self._comm.server_ranks)

    def parts(self, key: Any) -> list[Part]:
        """Where the parts of a registered key live."""
        return self._parts[key]

    # -- synchronous calls (set-up, states) --------------------------------------------------
    def send(self, server: int, header: dict, payload: np.ndarray | None = None) -> None:
        """Send one message (and wait until the buffers may be reused)."""
        encoded = to_bytes_array(header)
        requests = [self._world.Isend(encoded, dest=server, tag=TAG_PS_HEADER)]
        if payload is not None:
            requests.append(self._world.Isend(payload, dest=server, tag=TAG_PS_DATA))
        self._comm.MPI.Request.Waitall(requests)
        self.traffic.add(sent=encoded.nbytes + (0 if payload is None else payload.nbytes))

    def ask(self, server: int, header: dict, payload: np.ndarray | None = None) -> np.ndarray:
        """Send one message and return the server's byte answer."""
        with self._comm.watchdog.waiting(f"{self._name} {header['op']} at server {server}",
                                         header.get("key")):
            self.send(server, header, payload)
            while not self._world.Iprobe(source=server, tag=TAG_PS_REPLY):
                time.sleep(1e-4)
            answer = recv_bytes(self._world, server, TAG_PS_REPLY)
        self.traffic.add(received=answer.nbytes)
        return answer

    def init(self, key: Any, flat: np.ndarray) -> None:
        for server, start, stop in self._parts[key]:
            self.send(server, {"op": "init", "key": key, "part": start, "size": stop - start,
                               "dtype": str(flat.dtype)}, np.ascontiguousarray(flat[start:stop]))

    # -- engine ops ------------------------------------------------------------------------
    def push(self, key: Any, array: Any, priority: int, extra: dict) -> None:
        """Send ``array`` to the servers as a gradient of ``key`` (an engine op reading it)."""
        from portable.engine import get_engine

        parts, backend = self._parts[key], array.device.backend

        def run() -> None:
            flat = np.ascontiguousarray(backend.to_numpy(array._data)).reshape(-1)
            with self._comm.watchdog.waiting(f"{self._name} push to the servers", key):
                for server, start, stop in parts:
                    header = {"op": "push", "key": key, "part": start, **extra}
                    self.send(server, header, flat[start:stop])

        get_engine().push(run, reads=[array._var], device=PS_DEVICE, priority=priority,
                          name=f"kv.{self._name}.push[{key}]")

    def pull(self, key: Any, array: Any, priority: int, after: tuple[int, int] | None = None
             ) -> None:
        """Overwrite ``array`` with the servers' value of ``key`` (an engine op writing it);
        with ``after`` (group, exchanges), once the EASGD centre holds that many of the
        group's exchanges of it."""
        from portable.engine import get_engine

        parts, backend = self._parts[key], array.device.backend
        shape, dtype = array.shape, array.dtype

        def run() -> None:
            flat = np.empty(int(np.prod(shape, dtype=np.int64)), dtype)
            with self._comm.watchdog.waiting(f"{self._name} pull from the servers", key):
                receives = [self._world.Irecv(flat[start:stop], source=server, tag=TAG_PS_REPLY)
                            for server, start, stop in parts]
                for server, start, _ in parts:
                    header = {"op": "pull", "key": key, "part": start}
                    if after is not None:
                        header["after"] = list(after)
                    self.send(server, header)
                self._comm.MPI.Request.Waitall(receives)
            self.traffic.add(received=flat.nbytes)
            backend.copy_into(array._data, backend.from_numpy(flat.reshape(shape)))

        get_engine().push(run, writes=[array._var], device=PS_DEVICE, priority=priority,
                          name=f"kv.{self._name}.pull[{key}]")


class Server:
    """The server loop (run on the last ``PORTABLE_KV_SERVERS`` ranks).

    Args:
        comm: the process's Communicator (``comm.is_server`` must be true).
    """

    def __init__(self, comm: Any) -> None:
        self._comm = comm
        self._world = comm.world
        self._weights: dict[str, Any] = {}
        self._backlog: dict[str, list] = {}  # messages for keys not initialised yet
        self._updater: Any = None
        self._elastic: elastic.ElasticRounds | None = None  # set by an elastic_config
        self._waiting_pulls: list[tuple[int, str, dict]] = []  # (source, part, header)
        self._stopped: set[int] = set()
        self.pushes = 0

    def run(self) -> None:
        """Serve until every worker sent ``stop`` (or finished its program)."""
        MPI = self._comm.MPI
        status = MPI.Status()
        pause, idle_since = 2e-5, time.monotonic()
        workers = set(range(self._comm.num_workers))
        while not workers <= (self._stopped | self._comm.watchdog.finished_ranks()):
            if not self._world.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_PS_HEADER, status=status):
                if not self._weights and time.monotonic() - idle_since > self._comm.timeout:
                    sys.stderr.write(f"portable kvstore: server rank {self._comm.rank}: no "
                                     f"worker used the parameter servers for "
                                     f"{self._comm.timeout:g} s; stopping\n")
                    return
                time.sleep(pause)
                pause = min(pause * 1.5, 1e-3)
                continue
            pause = 2e-5
            source = status.Get_source()
            header = from_bytes_array(recv_bytes(self._world, source, TAG_PS_HEADER))
            payload = None
            if header["op"] in _WITH_PAYLOAD:
                payload = recv_bytes(self._world, source, TAG_PS_DATA)
            self._handle(source, header, payload)

    def _handle(self, source: int, header: dict, payload: np.ndarray | None) -> None:
        op = header["op"]
        if op == "stop":
            self._stopped.add(source)
            return
        if op == "optimizer":
            from portable.optim import from_config, get_updater

            self._updater = get_updater(from_config(header["config"]))
            self._reply(source, to_bytes_array({"ok": True}))
            return
        if op == elastic.OP_CONFIG:
            self._elastic = elastic.ElasticRounds(header["alpha"], header["groups"],
                                                  header["sync"])
            self._reply(source, to_bytes_array({"ok": True}))
            return
        if op == "get_states":
            blob = b"" if self._updater is None else self._updater.get_states(True)
            self._reply(source, np.frombuffer(blob, np.uint8) if blob else
                        np.empty(0, np.uint8))
            return
        if op == "set_states":
            if self._updater is None:
                raise PortableError(f"server rank {self._comm.rank}: optimizer states sent "
                                    f"before the optimizer")
            self._updater.set_states(payload.tobytes(), f"<states from rank {source}>")
            return
        # a string index: the optimizer reads a tuple as a list of indices
        index = json.dumps([header["key"], int(header["part"])])
        if op == "init":
            self._init(index, header, payload)
            return
        if index not in self._weights:  # this worker is ahead of the one that initialises
            self._backlog.setdefault(index, []).append((source, header, payload))
            return
        if op == "push":
            self._push(index, header, payload)
        elif op == "pull":
            if self._pull_ready(index, header):
                self._reply(source, self._weights[index].asnumpy())
            else:
                self._waiting_pulls.append((source, index, header))
        elif op == elastic.OP_EXCHANGE:
            self._exchange(source, index, header, payload)
            self._answer_waiting_pulls()
        elif op == elastic.OP_ASSIGN:
            weight = self._weights[index]
            values = payload.view(weight.dtype)
            if values.size != weight.size:
                raise PortableError(f"server rank {self._comm.rank}: assign to key/part "
                                    f"{index}: {values.size} values, it holds {weight.size}")
            weight[:] = values.reshape(weight.shape)
            self._reply(source, to_bytes_array({"ok": True}))
        else:
            raise PortableError(f"server rank {self._comm.rank}: unknown message {op!r} "
                                f"from rank {source}")

    def _init(self, index: str, header: dict, payload: np.ndarray) -> None:
        from portable.ndarray import array

        if index not in self._weights:
            values = payload.view(np.dtype(header["dtype"]))
            if values.size != int(header["size"]):
                raise PortableError(f"server rank {self._comm.rank}: init of key/part {index}: "
                                    f"{values.size} values, expected "
                                    f"{header['size']}")
            self._weights[index] = array(values, dtype=values.dtype)
        for message in self._backlog.pop(index, []):
            self._handle(*message)

    def _push(self, index: str, header: dict, payload: np.ndarray) -> None:
        from portable.ndarray import array

        weight = self._weights[index]
        grad = array(payload.view(weight.dtype), dtype=weight.dtype)
        if self._updater is None:
            raise PortableError(f"kvstore dist_async: key/part {index} was pushed but no "
                                f"optimizer is on the store (call set_optimizer, or use "
                                f"Trainer(update_on_kvstore=True))")
        optimizer = self._updater.optimizer
        optimizer.rescale_grad = float(header.get("rescale_grad", 1.0))
        optimizer.lr_mult[index] = float(header.get("lr_mult", 1.0))
        optimizer.wd_mult[index] = float(header.get("wd_mult", 1.0))
        self._updater(index, grad, weight)
        self.pushes += 1

    def _exchange(self, source: int, index: str, header: dict, payload: np.ndarray) -> None:
        """One group's elastic exchange: answer it (now, or when its round is complete) and
        move the centre (:mod:`portable.kvstore.elastic`)."""
        if self._elastic is None:
            raise PortableError(f"server rank {self._comm.rank}: an elastic exchange of "
                                f"key/part {index} from rank {source} before the EASGD "
                                f"configuration (create the store with algorithm='easgd')")
        weight = self._weights[index]
        centre, replies = self._elastic.offer(source, index, int(header["round"]),
                                              int(header["group"]), payload.view(weight.dtype),
                                              lambda: weight.asnumpy().reshape(-1))
        if centre is not None:
            weight[:] = centre.reshape(weight.shape)
        for dest, difference in replies:
            self._world.Send(np.ascontiguousarray(difference), dest=dest,
                             tag=TAG_ELASTIC_REPLY)

    def _pull_ready(self, index: str, header: dict) -> bool:
        """Whether a pull may be answered: one of the EASGD centre that names a group and its
        exchanges so far (``"after"``: [group, count]) waits until the centre holds them. The
        group's leader sends the exchanges, so another member's pull may arrive first."""
        after = header.get("after")
        return (after is None or self._elastic is None
                or self._elastic.applied(int(after[0]), index) >= int(after[1]))

    def _answer_waiting_pulls(self) -> None:
        """Answer the waiting pulls that the exchanges now held let through, in order."""
        still = []
        for source, index, header in self._waiting_pulls:
            if self._pull_ready(index, header):
                self._reply(source, self._weights[index].asnumpy())
            else:
                still.append((source, index, header))
        self._waiting_pulls = still

    def _reply(self, dest: int, data: np.ndarray) -> None:
        self._world.Send(np.ascontiguousarray(data), dest=dest, tag=TAG_PS_REPLY)


def serve_and_exit(comm: Any) -> None:
    """On a server rank, serve until every worker is done, then end the process (a script that
    creates a parameter-server store on a server rank becomes a server there, as MXNet's did);
    on a worker, return at once."""
    if comm.is_server:
        Server(comm).run()
        comm.close()
        sys.exit(0)


def run_server() -> int:
    """Run this rank as a parameter server (``python -m portable.kvstore.server``)."""
    from portable.kvstore.comm import get_communicator

    comm = get_communicator()
    if not comm.is_server:
        raise PortableError(f"rank {comm.rank} is a worker (PORTABLE_KV_SERVERS="
                            f"{comm.num_servers}, world size {comm.size}): not a server")
    Server(comm).run()
    return 0
