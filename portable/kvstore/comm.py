"""The MPI side of the distributed kvstores: one communicator per process, messages as NumPy
buffers plus JSON headers, and a watchdog that turns a dead or stalled rank into a clear error.

``mpi4py`` is imported only inside :func:`import_mpi` (``import portable`` stays light), and only
its buffer methods (``Send``/``Recv``/``Allreduce`` ...) are used: the lower-case ones pickle.

Roles: the last ``PORTABLE_KV_SERVERS`` ranks of ``COMM_WORLD`` are parameter servers (used by
``dist_async``), the others are workers. The workers' communicator is made with
``Create_group``, which is collective over the workers only, so a server never blocks on it.
Watchdog queries and parameter-server messages travel on ``COMM_WORLD`` with the reserved tags
below.

Watchdog: every blocking wait of a store (a barrier, a request that every rank must push, a reply
from a server) is registered with ``since`` = when this rank became ready. A thread checks the
waits every 0.1 s; one older than ``PORTABLE_KV_TIMEOUT`` seconds makes it ask every other rank
what it is doing (ranks answer from their own watchdog thread), print a report naming the key
and the ranks that have not arrived, and ``Abort`` the job, so no rank hangs silently.

Example:
    >>> comm = get_communicator()          # doctest: +SKIP (needs mpi4py)
    >>> comm.rank, comm.num_workers        # doctest: +SKIP
    (0, 1)
"""
from __future__ import annotations

import atexit
import itertools
import json
import os
import sys
import threading
import time
import zlib
from contextlib import contextmanager
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np

from portable.errors import MissingDependencyError, PortableError

# tags reserved on COMM_WORLD (watchdog queries and the parameter-server protocol). Elastic
# replies have their own tag, apart from TAG_PS_REPLY, so that a worker's pulls and questions
# to a server never take an elastic reply still on its way, or the other way round.
TAG_QUERY, TAG_REPLY, TAG_FINISHED = 31001, 31002, 31003
TAG_PS_HEADER, TAG_PS_DATA, TAG_PS_REPLY, TAG_ELASTIC_REPLY = 31011, 31012, 31013, 31014
TIMEOUT_EXIT_CODE = 3
# How long MPI_Abort may take to end this process before it ends itself.
ABORT_GRACE_SECONDS = 5.0
DEFAULT_TIMEOUT_S = 300.0


# Open MPI waits by spinning; told to yield, a spinning rank lets the other threads of its
# process (engine workers, the program) have the core. The stores wait inside MPI calls, which
# release the interpreter lock once and wake the moment the request completes: a Python loop
# of Test and sleep hands the lock back and forth at every turn, and on a busy rank each
# hand-back waits up to the interpreter's switch interval (5 ms).
YIELD_WHEN_IDLE = ("OMPI_MCA_mpi_yield_when_idle", "1")


def import_mpi() -> Any:
    """``mpi4py.MPI``, or a clear error naming the extra to install. Asks Open MPI to yield
    while it waits (unless the environment says otherwise), when MPI is not started yet."""
    os.environ.setdefault(*YIELD_WHEN_IDLE)
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise MissingDependencyError(
            f"the distributed kvstores need mpi4py and an MPI library ({exc}); install them "
            f"with pip install 'portable[mpi]'") from exc
    return MPI


def env_float(name: str, default: float, allow_zero: bool = False) -> float:
    """A positive (or, with ``allow_zero``, non-negative) float from the environment."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise PortableError(f"{name}={raw!r} is not a number") from None
    if value < 0 or (value == 0 and not allow_zero):
        kind = "non-negative" if allow_zero else "positive"
        raise PortableError(f"{name}={raw!r} must be {kind}")
    return value


def env_int(name: str, default: int, minimum: int = 0) -> int:
    """An integer from the environment, at least ``minimum``."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise PortableError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise PortableError(f"{name}={raw!r} must be at least {minimum}")
    return value


def bucket_mb(comm: Any) -> float:
    """The fusion bucket size for collectives over ``comm`` (collective over it):
    ``PORTABLE_KV_BUCKET_MB``, else 2 MB when every rank shares this machine's memory and
    25 MB when the ranks span machines (see :mod:`portable.kvstore.fusion`)."""
    from portable.kvstore.fusion import DEFAULT_BUCKET_MB, NODE_LOCAL_BUCKET_MB

    MPI = import_mpi()
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    one_machine = node.Get_size() == comm.Get_size()
    node.Free()
    default = NODE_LOCAL_BUCKET_MB if one_machine else DEFAULT_BUCKET_MB
    return env_float("PORTABLE_KV_BUCKET_MB", default, allow_zero=True)


def kv_timeout() -> float:
    """Seconds a rank waits for the others before the job is stopped (``PORTABLE_KV_TIMEOUT``)."""
    return env_float("PORTABLE_KV_TIMEOUT", DEFAULT_TIMEOUT_S)


# -- JSON headers and byte payloads over buffer calls --------------------------------------
def to_bytes_array(obj: Any) -> np.ndarray:
    """JSON-encode ``obj`` into a uint8 array (what goes on the wire instead of a pickle)."""
    return np.frombuffer(json.dumps(obj).encode(), dtype=np.uint8)


def from_bytes_array(buffer: Any) -> Any:
    return json.loads(bytes(buffer).decode())


def recv_bytes(comm: Any, source: int, tag: int) -> np.ndarray:
    """Receive a message of unknown length (after it is known to be there)."""
    MPI = import_mpi()
    status = MPI.Status()
    comm.Probe(source=source, tag=tag, status=status)
    buffer = np.empty(status.Get_count(MPI.BYTE), dtype=np.uint8)
    comm.Recv([buffer, MPI.BYTE], source=status.Get_source(), tag=tag)
    return buffer


class Communicator:
    """The MPI world of this process, as the kvstores see it (one per process).

    Attributes:
        rank / size: this process in ``COMM_WORLD``.
        num_servers / num_workers: the split of the world into parameter servers and workers.
        is_server: whether this rank is a parameter server.
        workers: the workers' communicator (None on a server).
        worker_rank: this worker's rank among the workers.
        timeout: seconds before a wait is reported and the job aborted.
    """

    def __init__(self) -> None:
        MPI = import_mpi()
        self.MPI = MPI
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:  # the stores call MPI from 2-4 threads
            raise PortableError(
                f"the MPI library gave thread level {MPI.Query_thread()}, the distributed "
                f"kvstores need MPI_THREAD_MULTIPLE ({MPI.THREAD_MULTIPLE}); do not lower "
                f"mpi4py.rc.thread_level, or use an MPI built with thread support")
        self.world = MPI.COMM_WORLD
        self.rank, self.size = self.world.Get_rank(), self.world.Get_size()
        self.num_servers = env_int("PORTABLE_KV_SERVERS", 0)
        if self.num_servers >= self.size:
            raise PortableError(f"PORTABLE_KV_SERVERS={self.num_servers} leaves no worker among "
                                f"{self.size} ranks")
        self.num_workers = self.size - self.num_servers
        self.is_server = self.rank >= self.num_workers
        self.server_ranks = list(range(self.num_workers, self.size))
        self.workers = None
        self.worker_rank = -1
        if not self.is_server:
            group = self.world.Get_group().Range_incl([(0, self.num_workers - 1, 1)])
            self.workers = self.world.Create_group(group)  # collective over workers only
            group.Free()
            self.worker_rank = self.workers.Get_rank()
        self.timeout = kv_timeout()
        self.watchdog = Watchdog(self)
        _install_abort_on_uncaught_exception(self)
        atexit.register(self.close)

    @property
    def role(self) -> str:
        return "server" if self.is_server else "worker"

    def abort(self, code: int = TIMEOUT_EXIT_CODE) -> None:
        """End the whole job (every rank) now."""
        sys.stderr.flush()
        sys.stdout.flush()
        # MPI_Abort need not return, and need not end this process either: with Open MPI's
        # --enable-recovery, two ranks aborting at once once left both waiting in it and the
        # job running. The process ends itself shortly after, whatever MPI does.
        fallback = threading.Timer(ABORT_GRACE_SECONDS, os._exit, (code,))
        fallback.daemon = True
        fallback.start()
        self.world.Abort(code)
        os._exit(code)

    def close(self) -> None:
        """Run the stores' exit hooks, tell the other ranks this one finished, stop the watchdog.
        Registered with ``atexit`` (before mpi4py's own finalisation)."""
        for hook in list(self.watchdog.exit_hooks):
            hook()
        self.watchdog.notify_finished()
        self.watchdog.stop()


_communicator: Communicator | None = None
_communicator_lock = threading.Lock()


def get_communicator() -> Communicator:
    """This process's :class:`Communicator` (created on first use: collective over workers)."""
    global _communicator
    with _communicator_lock:
        if _communicator is None:
            _communicator = Communicator()
        return _communicator


def _install_abort_on_uncaught_exception(comm: Communicator) -> None:
    """An uncaught exception on one rank aborts the job (as ``python -m mpi4py`` does) instead of
    leaving the other ranks waiting in a collective until their timeout."""
    previous = sys.excepthook

    def hook(kind: type, value: BaseException, tb: Any) -> None:
        previous(kind, value, tb)
        if not issubclass(kind, (KeyboardInterrupt, SystemExit)) and comm.size > 1:
            sys.stderr.write(f"portable kvstore: rank {comm.rank} ({comm.role}) stopped on an "
                             f"uncaught {kind.__name__}; aborting the job\n")
            comm.abort(1)

    sys.excepthook = hook


class Wait(NamedTuple):
    """A blocking wait of this rank, as the watchdog checks and reports it."""

    what: str     # the operation (shown to the user)
    key: Any      # the key it waits for, or None
    since: float  # time.monotonic() when this rank became ready to go on


class Watchdog:
    """Answers other ranks' status queries and aborts the job when a wait outlives the timeout.

    Stores register waits with :meth:`waiting` (a context manager) or a *source*: an object with
    ``oldest_wait() -> Wait | None`` and ``status() -> dict`` that the watchdog
    polls (the collective queue reports its oldest request that other ranks have not pushed).
    """

    POLL_S = 0.1

    def __init__(self, comm: Communicator) -> None:
        self._comm = comm
        self._lock = threading.Lock()
        self._waits: dict[int, Wait] = {}
        self._tokens = itertools.count()
        self.sources: list[Any] = []
        self.exit_hooks: list[Callable[[], None]] = []
        self._finished: dict[int, float] = {}
        self._last_call: tuple[str, float] | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="portable-kv-watchdog")
        self._thread.start()

    # -- what this rank is doing -----------------------------------------------------------
    @contextmanager
    def waiting(self, what: str, key: Any = None, since: float | None = None) -> Iterator[None]:
        """Register a wait for its duration (``what`` names the operation, ``key`` the key)."""
        token = next(self._tokens)
        with self._lock:
            self._waits[token] = Wait(what, key, time.monotonic() if since is None else since)
        try:
            yield
        finally:
            with self._lock:
                self._waits.pop(token, None)

    def api_call(self, name: str) -> None:
        """Record the last kvstore call made by the program (shown to other ranks)."""
        self._last_call = (name, time.monotonic())

    def status(self) -> dict:
        """What this rank is doing, as JSON for another rank's report."""
        now = time.monotonic()
        with self._lock:
            waits = list(self._waits.values())
        waits += [w for w in (s.oldest_wait() for s in list(self.sources)) if w is not None]
        last_call = None
        if self._last_call is not None:
            name, at = self._last_call
            last_call = [name, round(now - at, 2)]
        return {"rank": self._comm.rank, "role": self._comm.role,
                "waits": [{"what": w.what, "key": _jsonable(w.key),
                           "seconds": round(now - w.since, 2)} for w in waits],
                "stores": [s.status() for s in list(self.sources)],
                "last_call": last_call}

    # -- the thread ------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stopped.wait(self.POLL_S):
                self._serve()
                expired = self._expired()
                if expired is not None:
                    self._fail(expired)
                    return
        except Exception as exc:  # noqa: BLE001 - the watchdog must never take the rank down
            sys.stderr.write(f"portable kvstore: watchdog of rank {self._comm.rank} stopped: "
                             f"{type(exc).__name__}: {exc}\n")

    def _expired(self) -> Wait | None:
        """The oldest wait past the timeout, if any."""
        now, limit = time.monotonic(), self._comm.timeout
        with self._lock:
            candidates = list(self._waits.values())
        candidates += [w for w in (s.oldest_wait() for s in list(self.sources)) if w is not None]
        late = [w for w in candidates if now - w.since > limit]
        return min(late, key=lambda w: w.since) if late else None

    def _serve(self) -> None:
        """Answer pending status queries; note ranks that said they finished."""
        MPI, world = self._comm.MPI, self._comm.world
        status = MPI.Status()
        while world.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_QUERY, status=status):
            source = status.Get_source()
            recv_bytes(world, source, TAG_QUERY)
            world.Send(to_bytes_array(self.status()), dest=source, tag=TAG_REPLY)
        while world.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_FINISHED, status=status):
            source = status.Get_source()
            recv_bytes(world, source, TAG_FINISHED)
            self._finished[source] = time.monotonic()

    def _fail(self, wait: Wait) -> None:
        report = self.report(wait.what, wait.key, wait.since)
        sys.stderr.write(report + "\n")
        self._comm.abort(TIMEOUT_EXIT_CODE)

    def report(self, what: str, key: Any, since: float) -> str:
        """Ask every other rank for its status and describe why this rank is still waiting."""
        comm = self._comm
        waited = time.monotonic() - since
        lines = [f"portable kvstore: rank {comm.rank} ({comm.role}) timed out after "
                 f"{waited:.1f} s waiting in {what}"
                 + ("" if key is None else f" for key {key!r}")
                 + f" (PORTABLE_KV_TIMEOUT={comm.timeout:g} s)."]
        answers = self._query_all(min(3.0, max(0.5, comm.timeout / 4)))
        now = time.monotonic()
        for rank in range(comm.size):
            if rank == comm.rank:
                continue
            answer = answers.get(rank)
            if rank in self._finished:
                lines.append(f"  rank {rank}: finished its program "
                             f"{now - self._finished[rank]:.1f} s ago (uneven number of batches? "
                             f"call kv.join() when a rank runs out of data)")
            elif answer is None:
                lines.append(f"  rank {rank}: did not answer (dead, or stalled while holding "
                             f"the Python interpreter lock)")
            else:
                lines.append(f"  rank {rank}: " + _describe(answer, key))
        return "\n".join(lines)

    def _query_all(self, grace: float) -> dict[int, dict]:
        comm = self._comm
        MPI, world = comm.MPI, comm.world
        peers = [r for r in range(comm.size) if r != comm.rank and r not in self._finished]
        query = to_bytes_array({"query": comm.rank})
        sends = [world.Isend(query, dest=r, tag=TAG_QUERY) for r in peers]
        answers: dict[int, dict] = {}
        deadline = time.monotonic() + grace
        status = MPI.Status()
        while len(answers) < len(peers) and time.monotonic() < deadline:
            self._serve()  # others may be diagnosing at the same time
            if world.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_REPLY, status=status):
                source = status.Get_source()
                answers[source] = from_bytes_array(recv_bytes(world, source, TAG_REPLY))
            else:
                time.sleep(0.01)
        del sends  # abandoned: the job is about to be aborted
        return answers

    def notify_finished(self) -> None:
        """Tell every other rank that this one reached the end of its program."""
        comm = self._comm
        if self._stopped.is_set() or comm.size == 1:
            return
        message = to_bytes_array({"finished": comm.rank})
        requests = [comm.world.Isend(message, dest=r, tag=TAG_FINISHED)
                    for r in range(comm.size) if r != comm.rank]
        deadline = time.monotonic() + 1.0
        while requests and time.monotonic() < deadline:
            requests = [r for r in requests if not r.Test()]
            time.sleep(0.001)

    def finished_ranks(self) -> set[int]:
        return set(self._finished)

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)


def _describe(answer: dict, key: Any) -> str:
    """One line about another rank's answer, relative to the key this rank waits for."""
    parts = []
    waits = answer.get("waits") or []
    if waits:
        parts.append("waiting in " + "; ".join(
            f"{w['what']}" + ("" if w.get("key") is None else f" for key {w['key']!r}")
            + f" ({w['seconds']} s)" for w in waits))
    else:
        parts.append("alive, not waiting in any kvstore operation")
    pending = [p for s in answer.get("stores", []) for p in s.get("pending", [])]
    if key is not None and not any(p.get("key") == _jsonable(key) for p in pending):
        parts.append(f"has not pushed key {key!r}")
    last = answer.get("last_call")
    if last:
        parts.append(f"last kvstore call {last[0]!r} {last[1]} s ago")
    return "; ".join(parts)


def _jsonable(key: Any) -> Any:
    return key if key is None or isinstance(key, (int, str)) else str(key)


class WorkerCollectives:
    """What every distributed store does on the program's thread over ``self._main`` (a
    communicator of the workers that only this thread uses): identity, barrier, broadcasts.
    Each wait is registered with the watchdog."""

    _main: Any
    _comm: Communicator
    type: str

    @property
    def rank(self) -> int:
        """This worker's rank among the workers."""
        return self._main.Get_rank()

    @property
    def num_workers(self) -> int:
        """How many workers share the store (server ranks excluded)."""
        return self._main.Get_size()

    def barrier(self) -> None:
        """Wait until every worker reaches this call (stopped by the watchdog on timeout)."""
        self._comm.watchdog.api_call("barrier")
        with self._comm.watchdog.waiting(f"{self.type} barrier"):
            self._main.Barrier()

    def broadcast_arrays(self, arrays: list, root: int = 0) -> None:
        """Overwrite ``arrays`` (NDArrays of the same shapes on every worker) with ``root``'s."""
        self._comm.watchdog.api_call("broadcast_arrays")
        for array in arrays:
            host = np.ascontiguousarray(array.asnumpy())
            with self._comm.watchdog.waiting(f"{self.type} broadcast from rank {root}"):
                self._main.Bcast(host, root=root)
            array[:] = host

    def broadcast_bytes(self, data: bytes | None, root: int = 0) -> bytes:
        """``root``'s bytes on every worker (the others pass None)."""
        self._comm.watchdog.api_call("broadcast_bytes")
        mine = self.rank == root and data is not None
        size = np.array([len(data) if mine else 0], np.int64)
        with self._comm.watchdog.waiting(f"{self.type} broadcast from rank {root}"):
            self._main.Bcast(size, root=root)
            buffer = (np.frombuffer(data, np.uint8).copy() if mine and data
                      else np.empty(int(size[0]), np.uint8))
            self._main.Bcast(buffer, root=root)
        return buffer.tobytes()


def check_same_key(store: Any, key: Any, value: Any) -> None:
    """Every worker of ``store`` (a collective store: ``_comm``, ``_main``) must initialise the
    same keys, shapes and dtypes in the same order; a PortableError names the ranks that differ."""
    check_same(store, "init", key, [key, list(value.shape), str(value.dtype)],
               f"key #{len(store._store)}", "initialised another key, shape or dtype")


def check_same(store: Any, what: str, key: Any, described: Any, item: str, other: str) -> None:
    """Every worker of ``store`` described ``item`` alike (a JSON-able ``described``, compared
    by checksum); a PortableError names the ranks that differ from rank 0 (``other``: what
    they did, e.g. "initialised another key")."""
    described = json.dumps(described)
    mine = np.array([zlib.crc32(described.encode())], np.int64)
    every = np.empty(store.num_workers, np.int64)
    with store._comm.watchdog.waiting(f"{store.type} {what}", key):
        store._main.Allgather(mine, every)
    differ = [r for r in range(store.num_workers) if every[r] != every[0]]
    if differ:
        raise PortableError(f"kvstore {store.type}: workers disagree on {item}: rank(s) "
                            f"{differ} {other} than rank 0 (this rank, {store.rank}: "
                            f"{described})")
