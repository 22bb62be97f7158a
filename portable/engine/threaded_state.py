"""The records the threaded engine keeps: its vars with their request queues, its ops, the
ready queue of each device's worker pool, the per-thread state of its workers; and the rules by
which a var grants the requests of ops (``request``, ``grant_next``, ``release``).

Every field here is read and written under the engine's lock (``ThreadedEngine._lock``), and
every function runs with it held.
"""
from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Hashable, Iterable

from portable.engine.base import Engine, OpFailure, Var, _var_ids
from portable.errors import EngineError

_WAITING, _READY, _RUNNING = "waiting", "ready", "running"
_USER, _SYNC, _DELETE = 0, 1, 2  # op kinds; only _USER ops run on workers
_DEFERRED = object()  # an asynchronous op started; its on_complete will finish it


class ThreadedVar(Var):
    """A Var with the dependency-queue state the threaded engine keeps for it."""

    __slots__ = ("_queue", "_active_reads", "_writing")

    def __init__(self, name: str, owner: Engine) -> None:
        # Var.__init__'s fields set here, without the call: a var is made per array.
        self.name = name
        self.id = next(_var_ids)
        self._owner = owner
        self._failure = None
        self._deleted = False
        # Ungranted (op, is_write) requests in push order; None until the first one waits (most
        # arrays' vars never queue anything, and a deque is a large object to make per array).
        self._queue: deque[tuple[_Op, bool]] | None = None
        self._active_reads = 0
        self._writing = False


_GRANTED: frozenset = frozenset()  # the ``waiting`` of an op none of whose requests waits


class _Op:
    """A pushed op. Only what every op needs is set here: one is made per imperative op."""

    __slots__ = ("fn", "name", "reads", "dep_reads", "writes", "device", "priority", "kind",
                 "seq", "waiting", "state", "asynchronous")

    def __init__(self, fn: Callable | None, name: str, reads: tuple[Var, ...],
                 dep_reads: tuple[Var, ...], writes: tuple[Var, ...], device: Hashable,
                 priority: int, kind: int, asynchronous: bool = False) -> None:
        self.fn = fn
        self.name = name
        self.reads = reads          # declared reads: decide whether a failure is inherited
        self.dep_reads = dep_reads  # reads that are not also writes: read requests
        self.writes = writes
        self.device = device
        self.priority = priority
        self.kind = kind
        self.asynchronous = asynchronous  # push_async: finished by on_complete, not by fn
        self.waiting: set[Var] | frozenset = _GRANTED  # vars whose request waits (_submit)
        self.state = _WAITING
        # seq: set by _submit


class _VarOp(_Op):
    """An internal op on one var (``wait_for_var``'s, ``delete_var``'s): never runs a fn."""

    __slots__ = ("failure", "done", "cond")

    def __init__(self, name: str, var: Var, kind: int,
                 cond: threading.Condition | None = None) -> None:
        super().__init__(None, name, (), (), (var,), None, 0, kind)
        self.failure: OpFailure | None = None  # _SYNC: the var's state when it completed
        self.done = False
        self.cond = cond  # notified when done (a waiter's)


class _DeviceQueue:
    __slots__ = ("heap", "cond", "threads")

    def __init__(self, lock: threading.Lock) -> None:
        self.heap: list[tuple[int, int, _Op]] = []  # (-priority, seq, op)
        self.cond = threading.Condition(lock)
        self.threads: list[threading.Thread] = []


class _WorkerState(threading.local):
    """Per-thread engine state, with class defaults so that reading it on a thread that never
    set it costs an attribute lookup, not an AttributeError caught inside getattr."""

    in_op = False      # running one of this engine's ops (a worker, or an inline op)
    queue = None       # the device queue a worker serves


def _env_int(var: str, default: int) -> int:
    raw = os.environ.get(var, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise EngineError(f"{var}={raw!r} is not an integer") from None
    if value < 1:
        raise EngineError(f"{var}={raw!r} must be at least 1")
    return value


def _positive(value: int, what: str) -> int:
    if not isinstance(value, int) or value < 1:
        raise EngineError(f"ThreadedEngine: {what} must be a positive int, got {value!r}")
    return value


def _pool_key(device: Hashable) -> Hashable:
    """All CPU devices share one worker pool: they are the same cores."""
    if device is None:
        return "cpu"
    kind = getattr(device, "device_type", None)
    if kind == "cpu" or (kind is None and str(device).lower().startswith("cpu")):
        return "cpu"
    return device


def request(op: _Op) -> bool:
    """Queue the requests of a new op on its vars, granting at once those nothing precedes.

    Returns:
        Whether any request waits (the op is not ready yet).
    """
    waiting = None  # (a set only for an op that waits: most imperative ops do not)
    for v in op.dep_reads:
        if v._writing or v._queue:
            queue = v._queue
            if queue is None:
                queue = v._queue = deque()
            queue.append((op, False))
            if waiting is None:
                waiting = op.waiting = set()
            waiting.add(v)
        else:
            v._active_reads += 1
    for v in op.writes:
        if v._writing or v._active_reads or v._queue:
            queue = v._queue
            if queue is None:
                queue = v._queue = deque()
            queue.append((op, True))
            if waiting is None:
                waiting = op.waiting = set()
            waiting.add(v)
        else:
            v._writing = True
    return waiting is not None


def grant_next(v: ThreadedVar, ready: list[_Op]) -> None:
    """Grant the requests at the head of ``v``'s queue that may now proceed; ops whose last
    request this grants go to ``ready``."""
    queue = v._queue
    while queue:
        op, is_write = queue[0]
        if is_write:
            if v._writing or v._active_reads:
                return
            queue.popleft()
            v._writing = True
            op.waiting.discard(v)
            if not op.waiting:
                ready.append(op)
            return
        if v._writing:
            return
        queue.popleft()
        v._active_reads += 1
        op.waiting.discard(v)
        if not op.waiting:
            ready.append(op)


def release(reads: Iterable[Var], writes: Iterable[Var], ready: list[_Op],
            failure: OpFailure | None = None) -> None:
    """Release an op's grants (a read grant per var of ``reads``, a write grant per var of
    ``writes``), storing ``failure`` (its outcome) on the vars it writes; ops whose last request
    this grants go to ``ready``."""
    for v in reads:
        v._active_reads -= 1
        if not v._active_reads and v._queue:
            grant_next(v, ready)
    for v in writes:
        # (Set before the caller schedules ``ready``: a wait granted here reads it.)
        v._failure = failure
        v._writing = False
        if v._queue:
            grant_next(v, ready)
