"""ThreadedEngine: per-variable dependency queues feeding per-device worker pools.

Stages of one op (all bookkeeping under one engine lock; only ``fn`` runs outside it):

1. ``push`` appends the op to the queue of every var it uses (a read request per var it only
   reads, a write request per var it writes) and counts the requests not yet granted.
2. A var grants requests from the head of its queue, in push order: any number of consecutive
   reads while no write is active, or one write once no read or write is active (MXNet's
   ThreadedVar). A granted request stays active until its op finishes.
3. When all of an op's requests are granted it is *ready* and goes to its device's priority
   queue; a worker of that device pops the highest priority (oldest first among equals).
4. When ``fn`` returns (or raises) the op's outcome is stored on the vars it writes, its grants
   are released, and the vars grant their next requests. An op pushed with ``push_async`` gets
   there when the ``on_complete`` given to its ``fn`` is called, from whichever thread.

Invariants: a var's requests are granted in push order and a write excludes everything else,
so every var sees its readers and writers exactly as sequential execution in push order would;
an op only ever waits for ops pushed before it, so the waits cannot form a cycle and the engine
always drains as long as every ``fn`` returns.

Internal ops (the no-op write that ``wait_for_var`` waits on, and the op of ``delete_var``)
never reach a worker: they complete in the thread that grants their last request. User ops on
the :data:`~portable.engine.base.INLINE` device do not either: the thread that made them ready
starts them as soon as it has released the engine lock (``_run_inline``). An INLINE op whose
vars are all free when it is pushed (every small imperative op) takes a shorter road with the
same grants (``_run_now``): they are taken in one lock round, ``fn`` runs in the pushing thread,
and they are released in a second round, with no request queued and no ``_Op`` made.

The records (vars, ops, device queues) live in ``threaded_state``.
"""
from __future__ import annotations

import heapq
import os
import threading
from collections.abc import Callable, Hashable, Iterable
from threading import get_ident

from portable.engine.base import INLINE, Engine, OpFailure, PendingOp, Var, raise_failure
from portable.engine.threaded_state import (_DEFERRED, _DELETE, _READY, _RUNNING, _SYNC, _USER,
                                            ThreadedVar, _DeviceQueue, _env_int, _Op,
                                            _pool_key, _positive, _VarOp, _WorkerState,
                                            release, request)
from portable.errors import EngineError

_SEQUENCES = (list, tuple)  # the reads and writes _run_now takes (it iterates them twice)


class ThreadedEngine(Engine):
    """Dependency engine with per-variable queues and worker threads per device.

    Args:
        cpu_workers: Worker threads of the CPU pool (ops with ``device`` None or a CPU device).
            Default: env ``PORTABLE_CPU_WORKERS``, else ``min(2, os.cpu_count())``.
        device_workers: Worker threads for every other device key (one stream each, as MXNet).
        max_pending: Back-pressure bound: ``push`` blocks while this many pushed ops have not
            finished. Pushes from inside a running op bypass it, so an op that pushes cannot
            deadlock. Default: env ``PORTABLE_ENGINE_MAX_PENDING``, else 4096.

    Workers are daemon threads started on the first op for their device; nothing starts at
    construction.

    Example:
        >>> eng = ThreadedEngine(cpu_workers=2)
        >>> x, y = eng.new_var("x"), eng.new_var("y")
        >>> out = {}
        >>> eng.push(lambda: out.update(x=3), writes=[x], name="make_x")
        >>> eng.push(lambda: out.update(y=out["x"] * 2), reads=[x], writes=[y], name="double")
        >>> eng.wait_for_var(y); out["y"]
        6
        >>> eng.shutdown()
    """

    def __init__(self, cpu_workers: int | None = None, device_workers: int = 1,
                 max_pending: int | None = None) -> None:
        if cpu_workers is None:
            cpu_workers = _env_int("PORTABLE_CPU_WORKERS", min(2, os.cpu_count() or 1))
        if max_pending is None:
            max_pending = _env_int("PORTABLE_ENGINE_MAX_PENDING", 4096)
        self._cpu_workers = _positive(cpu_workers, "cpu_workers")
        self._device_workers = _positive(device_workers, "device_workers")
        self._max_pending = _positive(max_pending, "max_pending")
        self._lock = threading.Lock()
        self._not_full = threading.Condition(self._lock)  # back-pressure waiters
        self._idle = threading.Condition(self._lock)      # wait_all / shutdown waiters
        self._queues: dict[Hashable, _DeviceQueue] = {}
        # Unfinished ops by seq, i.e. in push order (the name only of an op _run_now runs)
        self._live: dict[int, _Op | str] = {}
        self._seq = 0
        self._num_pending = 0            # unfinished user ops (what back-pressure bounds)
        self._push_waiters = 0
        self._idle_waiters = 0           # threads in wait_all or shutdown
        self._failures: list[tuple[int, OpFailure]] = []  # (seq, failure) since last wait_all
        self._local = _WorkerState()
        self._inline: list[_Op] = []          # ready INLINE ops not started yet
        # Threads inside _run_inline (nested calls leave the ops to the outer loop). A set of
        # thread ids, not a thread-local flag: it is read and written on every inline op, and
        # each thread only adds and removes its own id.
        self._inlining: set[int] = set()
        self._stopped = False

    # -- public API ----------------------------------------------------------------------

    def new_var(self, name: str = "") -> Var:
        """Create a variable with its own dependency queue; see :meth:`Engine.new_var`."""
        return ThreadedVar(name, self)

    def push(self, fn: Callable[[], object], reads: Iterable[Var] = (),
             writes: Iterable[Var] = (), device: Hashable = None, priority: int = 0,
             name: str = "op") -> None:
        """Queue ``fn`` behind the earlier ops on its vars; see :meth:`Engine.push`.

        Blocks while ``max_pending`` ops are unfinished, unless called from inside an op.
        """
        if ((device is INLINE or (device.__class__ is str and device == INLINE))
                and self._run_now(fn, reads, writes, name)):
            return
        reads_t, dep_reads, writes_t = self._normalize(fn, reads, writes, name)
        self._push(_Op(fn, name, reads_t, dep_reads, writes_t, device, priority, _USER))

    def push_async(self, fn: Callable[[Callable[..., None]], object], reads: Iterable[Var] = (),
                   writes: Iterable[Var] = (), device: Hashable = None, priority: int = 0,
                   name: str = "op") -> None:
        """Queue ``fn(on_complete)``; the op holds its vars until ``on_complete`` is called
        (from any thread), not until ``fn`` returns; see :meth:`Engine.push_async`."""
        reads_t, dep_reads, writes_t = self._normalize(fn, reads, writes, name)
        self._push(_Op(fn, name, reads_t, dep_reads, writes_t, device, priority, _USER, True))

    def _push(self, op: _Op) -> None:
        ops = None
        with self._lock:
            if self._stopped:
                self._refuse_if_stopped("push")
            if self._num_pending >= self._max_pending and not self._local.in_op:
                self._push_waiters += 1
                try:
                    while self._num_pending >= self._max_pending and not self._stopped:
                        self._not_full.wait()
                finally:
                    self._push_waiters -= 1
                self._refuse_if_stopped("push")
            # Checked under the lock: a var deleted concurrently must not get a request
            # queued behind its delete op, which would never be granted.
            for v in op.reads:
                if v._deleted:
                    self._refuse_deleted(op.reads, op.name)
            for v in op.writes:
                if v._deleted:
                    self._refuse_deleted(op.writes, op.name)
            self._num_pending += 1
            self._submit(op)
            if self._inline:  # (taken now: saves a lock round)
                thread = get_ident()
                if thread not in self._inlining:
                    ops, self._inline = self._inline, []
        if ops:
            self._run_inline(ops, thread)

    def _run_now(self, fn: Callable[[], object], reads: Iterable[Var], writes: Iterable[Var],
                 name: str) -> bool:
        """Run an INLINE op whose vars are all free here and now, with no request queued and
        no _Op made: every small imperative op (``x + y``) comes here. It takes and releases
        its grants under the lock as any op does, so while ``fn`` runs (outside the lock) other
        threads see its vars busy and queue behind them; it counts as pending (``wait_all``
        and back-pressure see it) and ``pending()`` lists it as running. An op that ``fn``
        pushes runs as it would from a worker's op (at once if its vars are free: those of
        this op are not).

        Returns:
            False, having changed nothing, where the op needs the general path: a var that is
            busy (or foreign, or deleted: the general path raises), reads or writes that are
            not a list or tuple, back-pressure, a stopped engine, ready inline ops not yet
            started, or a call from inside ``_run_inline``'s loop (which starts what its ops
            push after them, in order).
        """
        if not (reads.__class__ in _SEQUENCES and writes.__class__ in _SEQUENCES
                and callable(fn)):
            return False
        lock = self._lock
        # acquire/release, not ``with``: half the cost, on every small op (try/finally is free)
        lock.acquire()
        try:
            if (self._stopped or self._inline
                    or (self._inlining and get_ident() in self._inlining)
                    or (self._num_pending >= self._max_pending and not self._local.in_op)):
                return False
            for v in reads:  # (a read waits only for a writer: active or queued)
                if (v.__class__ is not ThreadedVar or v._owner is not self or v._writing
                        or v._queue or v._deleted):
                    return False
            for v in writes:
                if (v.__class__ is not ThreadedVar or v._owner is not self or v._writing
                        or v._active_reads or v._queue or v._deleted):
                    return False
            # A var both read and written gets both grants (checked above on the state before
            # either), and ``release`` returns both.
            for v in reads:
                v._active_reads += 1
            for v in writes:
                v._writing = True
            self._seq = seq = self._seq + 1
            self._live[seq] = name  # (a name, not an _Op: pending() lists it as running)
            self._num_pending += 1
        finally:
            lock.release()
        failure = None
        for v in reads:  # (granted: their last writers finished)
            if v._failure is not None:
                failure = v._failure.passed_on(name)
                break
        else:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - the contract defers every error
                failure = OpFailure(name, exc)
        ops = None
        lock.acquire()
        try:
            ready: list[_Op] = []
            release(reads, writes, ready, failure)
            self._finish(seq, failure, ready)
            if self._inline:  # (readied here, or pushed by fn: never keep the shared list)
                ops, self._inline = self._inline, []
        finally:
            lock.release()
        if ops:
            self._run_inline(ops, get_ident())
        return True

    def wait_for_var(self, var: Var) -> None:
        """Block until all ops pushed so far that use ``var`` finished; see the base class.

        Implemented as MXNet does: push a no-op request on the var and wait for it. The request
        is a write so that it also waits for earlier readers.

        Raises:
            EngineError: If the var is in error state, deleted, or if called from inside a
                running op (which could wait on itself).
        """
        var = self._check_var(var)
        self._refuse_in_op("wait_for_var")
        op = _VarOp(f"wait_for_var({var.name!r})", var, _SYNC, threading.Condition(self._lock))
        with self._lock:
            self._refuse_if_stopped("wait_for_var")
            if var._deleted:
                raise EngineError(f"wait_for_var: {var!r} was deleted")
            self._submit(op)
        self._run_inline()  # completing at once may have readied inline ops behind it
        with self._lock:
            while not op.done:
                self._refuse_if_stopped("wait_for_var")
                op.cond.wait()
        if op.failure is not None:
            raise_failure(op.failure, var)

    def wait_all(self) -> None:
        """Block until every pushed op finished; see :meth:`Engine.wait_all`.

        Raises:
            EngineError: If an op failed since the last ``wait_all``, if called from inside a
                running op, or if the engine was shut down with ops unfinished.
        """
        self._refuse_in_op("wait_all")
        with self._lock:
            self._wait_idle()
            if self._num_pending:
                raise EngineError(f"wait_all: the engine was shut down with "
                                  f"{self._num_pending} op(s) unfinished")
            failures, self._failures = self._failures, []
        if failures:
            failures.sort(key=lambda entry: entry[0])  # report the earliest pushed first
            raise_failure(failures[0][1], others=len(failures) - 1)

    def delete_var(self, var: Var) -> None:
        """Free ``var`` after the ops already pushed on it; later pushes on it are refused."""
        var = self._check_var(var)
        with self._lock:
            self._refuse_if_stopped("delete_var")
            if var._deleted:
                raise EngineError(f"delete_var: {var!r} was already deleted")
            var._deleted = True
            self._submit(_VarOp(f"delete_var({var.name!r})", var, _DELETE))
        self._run_inline()

    def idle_worker(self) -> bool:
        """True on a worker whose pool has no ready op waiting; see :meth:`Engine.idle_worker`."""
        queue = self._local.queue
        if queue is None:
            return False
        with self._lock:
            return not queue.heap and not self._inline

    def pending(self) -> list[PendingOp]:
        """Every unfinished op (including waits and deletes), oldest first, with the vars
        whose earlier users it still waits for."""
        with self._lock:
            return [PendingOp(op, (), _RUNNING, INLINE) if op.__class__ is str  # (_run_now's)
                    else PendingOp(op.name,
                                   tuple(v for v in op.dep_reads + op.writes if v in op.waiting),
                                   op.state, op.device, op.priority)
                    for op in self._live.values()]

    def shutdown(self, wait: bool = True) -> None:
        """Stop the workers; later calls to push, wait_for_var and delete_var raise.

        Args:
            wait: First wait (without raising op failures) until every pushed op finished.
                With False, ops not yet started are dropped and waiters get EngineError.
        """
        in_op = self._local.in_op
        with self._lock:
            if wait and not in_op:
                self._wait_idle()
            self._stopped = True
            for queue in self._queues.values():
                queue.cond.notify_all()
            for op in self._live.values():
                if op.__class__ is _VarOp and op.kind == _SYNC:
                    op.cond.notify_all()
            self._not_full.notify_all()
            self._idle.notify_all()
            threads = [t for q in self._queues.values() for t in q.threads]
        if wait:
            current = threading.current_thread()
            for thread in threads:
                if thread is not current:
                    thread.join()

    # -- bookkeeping (every method below runs with self._lock held) ------------------------

    def _wait_idle(self) -> None:
        """Wait until no user op is unfinished or the engine stops (with the lock held)."""
        self._idle_waiters += 1
        try:
            while self._num_pending and not self._stopped:
                self._idle.wait()
        finally:
            self._idle_waiters -= 1

    def _submit(self, op: _Op) -> None:
        """Queue the requests of a new op; grant at once those nothing precedes."""
        self._seq = seq = self._seq + 1
        op.seq = seq
        self._live[seq] = op
        if request(op):
            return
        if op.kind == _USER and op.device == INLINE:  # (ready at push)
            op.state = _RUNNING
            self._inline.append(op)
        else:
            self._schedule([op])

    def _schedule(self, ready: list[_Op]) -> None:
        """Hand ready user ops to their device; complete ready inline ops right here."""
        while ready:
            op = ready.pop()
            if op.kind == _USER and op.device == INLINE:
                op.state = _RUNNING
                self._inline.append(op)  # started by _run_inline once the lock is released
                continue
            if op.kind == _USER:
                op.state = _READY
                queue = self._queues.get(_pool_key(op.device)) or self._start_pool(op.device)
                heapq.heappush(queue.heap, (-op.priority, op.seq, op))
                queue.cond.notify()
                continue
            var = op.writes[0]
            if op.kind == _SYNC:
                op.failure = var._failure  # (and ``release`` puts it back)
            release((), op.writes, ready, op.failure)  # _DELETE: drop what it holds
            del self._live[op.seq]
            op.done = True
            if op.cond is not None:
                op.cond.notify_all()

    def _complete(self, op: _Op, failure: OpFailure | None) -> None:
        """Record a finished user op's outcome and release its vars."""
        ready: list[_Op] = []
        release(op.dep_reads, op.writes, ready, failure)
        op.fn = None  # drop the closure (and the arrays it holds) now
        self._finish(op.seq, failure, ready)

    def _finish(self, seq: int, failure: OpFailure | None, ready: list[_Op]) -> None:
        """Forget the finished user op ``seq`` (its grants released), wake whoever waits for
        fewer pending ops, and schedule the ops its release made ready."""
        if failure is not None and failure.hops == 0:
            self._failures.append((seq, failure))  # raised by this op, not inherited
        del self._live[seq]
        self._num_pending -= 1
        if self._push_waiters and self._num_pending < self._max_pending:
            self._not_full.notify()
        if not self._num_pending and self._idle_waiters:
            self._idle.notify_all()
        if ready:
            self._schedule(ready)

    def _start_pool(self, device: Hashable) -> _DeviceQueue:
        key = _pool_key(device)
        queue = self._queues[key] = _DeviceQueue(self._lock)
        count = self._cpu_workers if key == "cpu" else self._device_workers
        for i in range(count):
            thread = threading.Thread(target=self._work, args=(queue,), daemon=True,
                                      name=f"portable-engine-{key}-{i}")
            queue.threads.append(thread)
            thread.start()
        return queue

    def _refuse_if_stopped(self, what: str) -> None:
        if self._stopped:
            raise EngineError(f"{what}: the engine was shut down")

    def _refuse_in_op(self, what: str) -> None:
        if self._local.in_op:
            raise EngineError(f"{what} called from inside a running engine op could wait on "
                              f"that op itself; declare the dependency with reads/writes")

    # -- workers -------------------------------------------------------------------------

    def _work(self, queue: _DeviceQueue) -> None:
        """Worker loop: pop the best ready op, run it, record its outcome, repeat."""
        self._local.in_op = True
        self._local.queue = queue
        op: _Op | None = None
        failure: OpFailure | None = None
        while True:
            if op is not None:
                with self._lock:
                    self._complete(op, failure)
                op = None
                self._run_inline()
            with self._lock:
                while not queue.heap and not self._stopped:
                    queue.cond.wait()
                if self._stopped:
                    return
                op = heapq.heappop(queue.heap)[2]
                op.state = _RUNNING
            failure = self._execute(op)
            if failure is _DEFERRED:
                op = None  # its on_complete finishes it

    def _run_inline(self, ops: list | None = None, thread: int | None = None) -> None:
        """Start the INLINE ops that became ready, in this thread, outside the lock. Every
        thread that may ready ops calls this after releasing the lock, so none is left behind;
        a nested call (an inline op completing at once) leaves them to the outer loop.

        Args:
            ops: Ops already taken off the list (by ``_push``, with ``thread``: this thread's
                id, which it found outside ``_inlining``); None: take them here.
        """
        if ops is None:
            thread = get_ident()
            if not self._inline or thread in self._inlining:
                return
            with self._lock:
                ops, self._inline = self._inline, []
        inlining = self._inlining
        inlining.add(thread)
        try:
            while ops:
                # The ops of one batch were ready together, so none waits for another: run
                # them all, then record them and take the next batch under one lock.
                if len(ops) == 1:  # (the common case: the op just pushed)
                    op = ops[0]
                    outcomes = ((op, self._execute(op)),)
                else:
                    outcomes = [(op, self._execute(op)) for op in ops]
                with self._lock:
                    for op, failure in outcomes:
                        if failure is not _DEFERRED:
                            self._complete(op, failure)
                    # Taken only when not empty: an empty list kept here would be the engine's
                    # own, which other threads append to once the lock is released, so this
                    # loop and theirs would both run what they add.
                    ops = None
                    if self._inline:
                        ops, self._inline = self._inline, []
        finally:
            inlining.discard(thread)

    def _execute(self, op: _Op) -> OpFailure | None:
        """Run one op outside the lock; never raises, so a worker never dies. An asynchronous
        op that started returns ``_DEFERRED``: its ``on_complete`` completes it."""
        for v in op.reads:
            # Safe without the lock: the op holds a grant on v, so its last writer finished.
            if v._failure is not None:
                return v._failure.passed_on(op.name)  # skip: its inputs hold no valid data
        if op.asynchronous:
            return self._start_async(op)
        try:
            op.fn()
        except BaseException as exc:  # noqa: BLE001 - the contract defers every error
            return OpFailure(op.name, exc)
        return None

    def _start_async(self, op: _Op) -> object:
        called = []

        def on_complete(error: BaseException | None = None) -> None:
            with self._lock:
                if called:
                    raise EngineError(f"on_complete of op {op.name!r} was called twice")
                called.append(True)
                self._complete(op, None if error is None else OpFailure(op.name, error))
            self._run_inline()

        try:
            op.fn(on_complete)
        except BaseException as exc:  # noqa: BLE001 - the contract defers every error
            with self._lock:
                if called:  # it completed, then raised: the op's outcome is already recorded
                    return _DEFERRED
                called.append(True)
            return OpFailure(op.name, exc)
        return _DEFERRED
