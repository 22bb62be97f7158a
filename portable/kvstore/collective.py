"""Collective requests pushed to the engine and carried out, fused and prioritised, in rounds
that every rank runs in the same order (Horovod's design on MPI, with MXNet's engine as the
front end).

A request (allreduce or broadcast of one key's array) becomes one asynchronous engine op
(``push_async``) that writes the array. It starts as soon as the array's producer (e.g. the
backward op of that layer) finished, in the thread that finished it (the ``INLINE`` device: a
host array needs no worker, so no thread hop), and marks the data ready; the op completes once
the array is reduced. Every later reader of the array is thereby ordered after the
communication by the engine's variables, and no thread blocks per key. A group of keys declared
in advance (:meth:`CollectiveQueue.declare_group`) is one request of its own key, its arrays
read as one flat array (:mod:`portable.kvstore.gather`).

Each slot's head is kept on a :class:`~portable.kvstore.negotiation.Board` as requests arrive,
become ready and complete, so a round builds its vector without walking every queue.

Who runs a round: the queue's background thread, woken by a ready request; or, when that
thread sleeps and the request was made ready by an engine worker with nothing else queued
(``Engine.idle_worker``: typically the worker that finished backward, whose next ops all wait
for the reduced gradients), that worker, which saves two thread hand-offs per round. A lock
keeps one round at a time.

Stages of one round:

1. **negotiate**: one tiny ``Allreduce(MIN)`` of every rank's vector
   (:mod:`portable.kvstore.negotiation`): which (key, kind) slots (:mod:`portable.kvstore.slots`)
   are ready, with what priority, and which keys lie back to back in one buffer on every rank;
2. **plan**: the agreed slots, sorted by (priority, slot), are fused into buckets and large
   tensors sliced (:mod:`portable.kvstore.fusion`), runs of touching keys in place;
3. **reduce** each bucket with the reducer (flat ``Allreduce``, two-level, or compressed), then
   complete its requests, which releases the ops that wait for them.

Once two negotiations in a row agreed on the same small set (a training loop's gradients), the
next round skips stage 1 and guesses that set: one collective carries the data and a verdict
(:mod:`portable.kvstore.speculation`); a wrong guess is dropped and negotiated.

Invariants: the agreed set, the plan, the guess and the collective calls are functions of
agreed results only, so every rank calls the same collectives in the same order whatever the
timing; a rank takes part in a round only when it has a ready request or joined, so an idle
rank costs nothing; requests of the same slot complete in push order.

Example (one process; under ``mpiexec`` every rank runs the same code):
    >>> q = CollectiveQueue(comm, watchdog, FlatReducer(comm), "dist_sync")   # doctest: +SKIP
    >>> q.register("w", (2,), "float32"); q.allreduce("w", grad, priority=0)  # doctest: +SKIP
"""
from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from typing import Any

import numpy as np

from portable.engine import INLINE, get_engine
from portable.errors import PortableError
from portable.kvstore.comm import Wait, import_mpi
from portable.kvstore.fusion import DEFAULT_BUCKET_MB, DEFAULT_FUSE_KB
from portable.kvstore.gather import Gather, group_of
from portable.kvstore.negotiation import Board, read
from portable.kvstore.requests import Countdown, Request, completing, finish, span_of
from portable.kvstore.runs import RunReducer
from portable.kvstore.slots import ALLREDUCE, BROADCAST, KeyEntry, Slot, op_label
from portable.kvstore.speculation import Guess

# Every queue of the process. A worker blocks in a round only while no other queue has a
# request pending: a request of another queue, made ready later by an op queued behind the
# blocked worker, could be what a peer rank waits for before it joins this round.
_QUEUES: "weakref.WeakSet[CollectiveQueue]" = weakref.WeakSet()


class CollectiveQueue:
    """Fused, prioritised collectives over ``comm``, driven by engine ops.

    Args:
        comm: an MPI communicator used only by this queue's thread.
        watchdog: the process's :class:`~portable.kvstore.comm.Watchdog`.
        reducer: how a bucket is summed (``FlatReducer``, ``TwoLevelReducer`` ...).
        name: the store name, in op names and errors.
        bucket_mb: fusion bucket size in MB (0: one call per tensor, no slicing).
        fuse_kb: the largest tensor packed with others, in KB (larger ones go in place).
        cycle_ms: how long a round waits for more requests to become ready when the previous
            round agreed on nothing.
    """

    def __init__(self, comm: Any, watchdog: Any, reducer: Any, name: str,
                 bucket_mb: float = DEFAULT_BUCKET_MB, cycle_ms: float = 0.5,
                 fuse_kb: float = DEFAULT_FUSE_KB) -> None:
        self.MPI = import_mpi()
        self.comm = comm
        self.reducer = reducer
        self.name = name
        self.bucket_bytes = float(bucket_mb) * (1 << 20)
        self.fuse_bytes = float(fuse_kb) * (1 << 10)
        self.cycle_s = float(cycle_ms) / 1000.0
        self._watchdog = watchdog
        self._cond = threading.Condition()
        self._keys: list[KeyEntry] = []  # by registered index
        self._index: dict[Any, int] = {}
        self._gathers: dict[tuple, Gather] = {}  # group key -> its keys' layout
        self._pending: dict[Slot, deque[Request]] = {}
        self._board = Board()       # each slot's head, as the negotiation vector needs it
        self._ready = 0             # pending requests whose data is ready
        self._real = 0              # pending requests (ready or not)
        self._agreed_keys = 0       # keys every rank registered (from the last round)
        self._idle = False          # the thread waits for a first ready request
        self._joined = False
        self._join_done: threading.Event | None = None
        self._join_root = 0
        self._completed = 0         # real requests completed since the last join
        self._last_round = time.monotonic()
        self._failure: BaseException | None = None
        self._stopped = False
        self._guess = Guess(self.bucket_bytes)
        self._round_lock = threading.Lock()  # one round at a time, by whichever thread
        self.stats = {"requests": 0, "rounds": 0, "speculated": 0, "missed": 0,
                      "worker_rounds": 0, "buckets": 0, "bytes": 0, "busy_s": 0.0}
        self._runs = RunReducer(self._keys, reducer, self.bucket_bytes, self.fuse_bytes,
                                self._complete, self.stats)
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name=f"portable-kv-{name}")
        self._thread.start()
        watchdog.sources.append(self)
        _QUEUES.add(self)

    # -- keys --------------------------------------------------------------------------------
    def register(self, key: Any, shape: tuple, dtype: Any) -> int:
        """Give ``key`` the next slot index (every rank registers keys in the same order)."""
        with self._cond:
            if key in self._index:
                return self._index[key]
            self._index[key] = len(self._keys)
            shape = tuple(int(s) for s in shape)
            self._keys.append(KeyEntry(key, shape, int(np.prod(shape, dtype=np.int64)),
                                       np.dtype(dtype)))
            self._board.grow(len(self._keys))
            return self._index[key]

    def declare_group(self, keys: list) -> None:
        """Register a group key for ``keys`` (registered keys of one dtype): their
        ``allreduce_group`` then travels as one request. Every rank declares the same groups
        at the same point of its key registrations (the caller checks that they agree). A
        group of one key is worth declaring too: group keys are numbered in declaration
        order, so groups declared in memory order are neighbours that travel as one range."""
        entries = [self._keys[self._index[key]] for key in keys]
        if not entries or len({entry.dtype for entry in entries}) != 1:
            return
        group = ("group",) + tuple(keys)
        if group not in self._gathers:
            gather = Gather(tuple(keys), entries)
            self.register(group, (gather.numel,), gather.dtype)
            gather.slot = Slot(self._index[group], ALLREDUCE)
            gather.op_label = op_label(self.name, ALLREDUCE, gather.keys)
            self._gathers[group] = gather

    # -- requests (called by the program's thread) -----------------------------------------
    def allreduce(self, key: Any, array: Any, priority: int = 0) -> None:
        """Sum ``array`` over the ranks, in place, as an engine op (returns at once)."""
        self.allreduce_group([(key, array)], priority)

    def allreduce_group(self, pairs: list[tuple[Any, Any]], priority: int = 0) -> None:
        """Sum several keys' arrays over the ranks, in place, as one group (Horovod's grouped
        allreduce): one engine op that starts once every array is ready and finishes once
        every one is reduced, so they travel in the fewest buckets at the lowest cost per key.
        The keys of a group declared with :meth:`declare_group` travel as one request of the
        group's own key (:mod:`portable.kvstore.gather`) when they are host arrays; others as
        one request per key.
        """
        gather = self._gathers.get(("group", *[key for key, _ in pairs])) if self._gathers \
            else None
        arrays = [array for _, array in pairs]
        # (a training loop pushes the same arrays at every step: they are checked once)
        if gather is not None and not gather.same_arrays(arrays):
            if group_of(pairs) is None:
                gather = None
            else:
                gather.check(arrays, self.name)
                gather.remember(arrays)
        if gather is None:
            self._submit(ALLREDUCE, pairs, priority)
            return
        self._check_running()
        request = Request(gather.slot, gather.label, priority)
        self._push_op(ALLREDUCE, [request], arrays, priority, gather)

    def broadcast(self, key: Any, array: Any, priority: int = 0) -> None:
        """Overwrite ``array`` with rank 0's, in place, as an engine op. (Always rank 0: a rank
        that joined cannot be the source, and the negotiation knows that rank 0 is.)"""
        self._submit(BROADCAST, [(key, array)], priority)

    def _submit(self, kind: int, pairs: list[tuple[Any, Any]], priority: int) -> None:
        requests = [self._request(kind, key, array, priority) for key, array in pairs]
        self._check_running()
        arrays = [array for _, array in pairs]
        if len(pairs) > 1 and not all(isinstance(a._data, np.ndarray) for a in arrays):
            for request, array in zip(requests, arrays):  # device arrays travel one by one
                self._push_op(kind, [request], [array], priority)
            return
        self._push_op(kind, requests, arrays, priority)

    def _check_running(self) -> None:
        if self._failure is not None:
            raise PortableError(f"kvstore {self.name}: communication stopped after an error: "
                                f"{self._failure}") from self._failure
        if self._stopped:
            raise PortableError(f"kvstore {self.name}: the store was closed")

    def _request(self, kind: int, key: Any, array: Any, priority: int) -> Request:
        index = self._index.get(key)
        if index is None:
            raise PortableError(f"kvstore {self.name}: key {key!r} was not initialised")
        entry = self._keys[index]
        if tuple(array.shape) != entry.shape or array.dtype != entry.dtype:
            raise PortableError(f"kvstore {self.name}: key {key!r} was initialised as "
                                f"{entry.dtype}{list(entry.shape)}, got "
                                f"{array.dtype}{list(array.shape)}")
        return Request(Slot(index, kind), key, priority)

    def _push_op(self, kind: int, requests: list[Request], arrays: list, priority: int,
                 gather: Gather | None = None) -> None:
        """One asynchronous engine op that writes the arrays: later readers are ordered after
        the communication, and no thread blocks per key. Host arrays are reduced in their own
        memory and their op starts in the thread that finished their last producer (the
        ``INLINE`` device: no hop to a worker); a device array's op runs on its device and
        travels through a host copy, copied back by an op on that device. With ``gather``
        the arrays are the one request's data, as one flat array."""
        with self._cond:
            for request in requests:
                queue = self._pending.get(request.slot)
                if queue is None:
                    queue = self._pending[request.slot] = deque()
                queue.append(request)
                if len(queue) == 1:
                    self._board.set_head(request.slot, request)
            self._real += len(requests)
            self.stats["requests"] += len(requests)
        engine = get_engine()
        label = (gather.op_label if gather is not None else
                 op_label(self.name, kind, [request.key for request in requests]))
        array = arrays[0]
        on_device = not isinstance(array._data, np.ndarray)  # (then it is alone, see _submit)

        def start(on_complete: Any) -> None:
            # Runs once the arrays' producers finished: hand the data to the background
            # thread, which completes the op after reducing every array; or, in an engine
            # worker with nothing else to do, run the round right here (no thread hop).
            hosts = [a._data if type(a._data) is np.ndarray
                     else np.asarray(a.device.backend.to_numpy(a._data)) for a in arrays]
            free = engine.idle_worker() and not any(
                queue._real for queue in list(_QUEUES) if queue is not self)
            error = lambda: next(  # noqa: E731
                (r.error for r in requests if r.error is not None), None)
            if gather is not None:
                flat, span, unpack = gather.flat(hosts)
                flats, spans = [flat], [span]

                def done() -> None:  # (a packed copy: the sum goes back into the arrays)
                    failed = error()
                    if failed is None and unpack is not None:
                        completing(unpack, on_complete)
                    else:
                        on_complete(failed)
            else:
                if on_device or not all(h.flags.c_contiguous for h in hosts):
                    hosts = [np.ascontiguousarray(h) for h in hosts]
                    done = lambda: engine.push(  # noqa: E731
                        lambda: completing(copy_back, on_complete), device=array.device,
                        priority=priority, name=label + ".copy_back")
                else:
                    done = lambda: on_complete(error())  # noqa: E731
                flats = [host.reshape(-1) for host in hosts]
                spans = [None if on_device else span_of(flat) for flat in flats]
            countdown = Countdown(len(requests), done)
            with self._cond:
                failure = self._failure  # the thread stopped: nothing would reduce them
                if failure is None:
                    now = time.monotonic()
                    for request, flat, span in zip(requests, flats, spans):
                        request.host = flat
                        request.then = countdown
                        request.ready_at = now
                        request.span = span
                        if self._pending[request.slot][0] is request:
                            self._board.set_head(request.slot, request)
                    self._ready += len(requests)
                    here = free and self._idle
                    if self._idle and not here:  # (a thread in its cycle wakes by itself)
                        self._cond.notify()
            if failure is not None:
                on_complete(failure)
            elif here:
                self._round_here()

        def copy_back() -> None:
            (request,) = requests
            if request.error is not None:
                raise request.error
            backend = array.device.backend
            backend.copy_into(array._data, backend.from_numpy(request.host.reshape(array.shape)))

        variables = [a._var for a in arrays]
        engine.push_async(start, reads=variables, writes=variables,
                          device=array.device if on_device else INLINE, priority=priority,
                          name=label)

    def join(self) -> int:
        """Contribute zeros to the other ranks' requests until every rank joined (blocks).

        Returns:
            The rank that completed the most requests since the previous join (the one whose
            replica saw every step: the others may copy its state).
        """
        done = threading.Event()
        with self._cond:
            self._join_done = done
            self._joined = True
            self._cond.notify_all()
        while not done.wait(0.05):
            if self._failure is not None:
                raise PortableError(f"kvstore {self.name}: join failed: {self._failure}")
        return self._join_root

    def drain(self) -> None:
        """Block until every request pushed so far completed."""
        with self._cond:
            while self._real and self._failure is None:
                self._cond.wait(0.05)

    def close(self) -> None:
        """Finish the pushed requests and stop the thread."""
        self.drain()
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(timeout=5.0)
        if self in self._watchdog.sources:
            self._watchdog.sources.remove(self)

    # -- watchdog source -----------------------------------------------------------------
    def oldest_wait(self) -> Wait | None:
        """The request pushed longest ago that has not completed (a watchdog source)."""
        with self._cond:
            if self._joined:
                return Wait(f"{self.name} join (the other ranks have not all joined)", None,
                            self._last_round)
            oldest = None
            for queue in self._pending.values():
                head = queue[0] if queue else None
                if head is not None and head.ready_at is not None and (
                        oldest is None or head.ready_at < oldest.ready_at):
                    oldest = head
        if oldest is None:
            return None
        return Wait(f"{self.name} {oldest.slot.kind_name} (every rank must push it)",
                    oldest.key, oldest.ready_at)

    def status(self) -> dict:
        """This queue's pending requests (a watchdog source: sent to other ranks as JSON)."""
        now = time.monotonic()
        with self._cond:
            pending = [{"key": r.key if isinstance(r.key, (int, str)) else str(r.key),
                        "kind": r.slot.kind_name, "ready": r.ready_at is not None,
                        "seconds": None if r.ready_at is None else round(now - r.ready_at, 2)}
                       for q in self._pending.values() for r in q]
            return {"store": self.name, "joined": self._joined, "pending": pending}

    # -- rounds ----------------------------------------------------------------------------
    def _loop(self) -> None:
        """The queue's thread: a round whenever a request is ready or the rank joined."""
        try:
            while True:
                with self._cond:
                    waited = not (self._ready or self._joined)
                    self._idle = True
                    while not self._stopped and not (self._ready or self._joined):
                        self._cond.wait()
                    self._idle = False
                    # Back to back rounds, one per cycle at most (Horovod's cycle time): what
                    # becomes ready meanwhile joins the round, in fewer and larger buckets, and
                    # a program thread that is still pushing keeps the interpreter instead of
                    # handing it over at every request. A thread that was idle goes at once:
                    # nothing was left from the last round.
                    rest = self._last_round + self.cycle_s - time.monotonic()
                    if rest > 0 and not waited and not self._stopped:
                        self._cond.wait(rest)
                    if self._stopped:
                        return
                self._round(block=True)
        except BaseException as exc:  # noqa: BLE001 - fail every waiter instead of hanging
            self._fail(exc)

    def _round_here(self) -> None:
        """One round in this thread (an idle engine worker that made a request ready while
        the queue's thread slept): the worker would only wait for the reduced data anyway,
        and the round costs no hand-off to a thread that must first win the interpreter.
        What is left afterwards goes to the queue's thread."""
        try:
            ran = self._round(block=False, here=True)
        except BaseException as exc:  # noqa: BLE001 - fail every waiter instead of hanging
            self._fail(exc)
            return
        with self._cond:
            if (self._ready or not ran) and self._idle:
                self._cond.notify()

    def _round(self, block: bool, here: bool = False) -> bool:
        """Negotiate and reduce once, or speculate (:mod:`portable.kvstore.speculation`).
        Returns False when another thread holds the round (``block=False`` only)."""
        if not self._round_lock.acquire(blocking=block):
            return False
        try:
            with self._cond:
                if self._stopped or not (self._ready or self._joined):
                    return True  # (another thread's round took them)
                self.stats["worker_rounds"] += here
                if self._guess.slots is not None:
                    heads = self._guess.heads(self._pending, self._joined)
                    vector = None
                else:
                    vector = self._board.vector(self._agreed_keys, self._joined,
                                                self._real > 0, len(self._keys),
                                                self.comm.Get_rank() == 0,
                                                self.reducer.compressor is None)
            if vector is None:
                self._speculate(heads)
                return True
            self.comm.Allreduce(self.MPI.IN_PLACE, vector, op=self.MPI.MIN)
            self._last_round = time.monotonic()
            self.stats["rounds"] += 1
            self._process(vector)
            return True
        finally:
            self._round_lock.release()

    def _speculate(self, heads: list[Request | None] | None) -> None:
        """A round that guesses the last agreement: one collective with the data and the
        verdict; a wrong guess costs that call and a negotiated round after it."""
        buffer = self._guess.pack(heads, self._keys)
        self.reducer.allreduce(buffer, [])
        self._last_round = time.monotonic()
        self.stats["rounds"] += 1
        if heads is None or not self._guess.held(buffer, self.comm.Get_size()):
            self.stats["missed"] += 1
            self._guess.drop()
            return
        self.stats["speculated"] += 1
        self.stats["bytes"] += buffer.nbytes
        self._guess.unpack(buffer, heads, self._keys)
        self._complete([head for head in heads if head is not None])

    def _process(self, vector: np.ndarray) -> None:
        """Reduce and broadcast what a negotiation agreed on, most urgent first."""
        agreement = read(vector)
        self._agreed_keys = agreement.keys
        if agreement.all_joined and agreement.nobody_real:
            self._finish_join()
            return
        agreed, touching = agreement.agreed, agreement.touching
        self._guess.observe(tuple(sorted(agreed)), self._keys,
                            self.reducer.compressor is not None)
        if not agreed:
            return
        started = time.perf_counter()
        with self._cond:
            heads = {s: self._pending[s][0] for s in agreed
                     if self._pending.get(s) and self._pending[s][0].ready_at is not None}
        run: list[Slot] = []
        for slot in agreed:
            if slot.kind == ALLREDUCE:
                run.append(slot)
                continue
            self._runs.reduce(run, heads, touching)
            run = []
            self._broadcast(slot, heads.get(slot))
        self._runs.reduce(run, heads, touching)
        self.stats["busy_s"] += time.perf_counter() - started

    def _broadcast(self, slot: Slot, head: Request | None) -> None:
        entry = self._keys[slot.index]
        buffer = head.host if head is not None else self._runs.scratch.get(entry.dtype,
                                                                           entry.numel)
        self.reducer.broadcast(buffer, 0)
        self._complete([head] if head is not None else [])

    def _complete(self, heads: list[Request]) -> None:
        """Retire reduced requests (the heads of their slots) and complete their engine ops."""
        if not heads:
            return
        with self._cond:
            for head in heads:
                queue = self._pending[head.slot]
                queue.popleft()
                self._board.set_head(head.slot, queue[0] if queue else None)
            self._ready -= len(heads)
            self._real -= len(heads)
            self._completed += len(heads)
            if not self._real:
                self._cond.notify_all()  # drain()
        finish(heads, self._cond)

    def _finish_join(self) -> None:
        """Every rank joined and nothing is left: agree on the most advanced rank and return."""
        counts = np.zeros(self.comm.Get_size(), np.int64)
        self.comm.Allgather(np.array([self._completed], np.int64), counts)
        self._join_root = int(np.argmax(counts))
        with self._cond:
            self._joined = False
            self._completed = 0
            done, self._join_done = self._join_done, None
        if done is not None:
            done.set()

    def _fail(self, exc: BaseException) -> None:
        error = PortableError(f"kvstore {self.name}: communication failed on rank "
                              f"{self.comm.Get_rank()}: {type(exc).__name__}: {exc}")
        error.__cause__ = exc
        with self._cond:
            self._failure = error
            requests = [r for q in self._pending.values() for r in q]
            self._pending.clear()
            self._board.clear()
            self._real = self._ready = 0
            self._cond.notify_all()
        finish(requests, self._cond, error)
