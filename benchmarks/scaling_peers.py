"""The hand-written peers and the diagnostics of ``benchmarks/scaling_sim.py``.

* :func:`sleep_until`: the emulated compute (a sleep to a deadline, optionally polling MPI);
  :func:`busy`: CPU work at a step's start (``--peer-host-ms``);
* :class:`FlatPeer` / :class:`TwoLevelPeer`: hand-written non-blocking loops (``Iallreduce``
  per bucket; ``Ireduce`` + leaders' ``Iallreduce`` + ``Ibcast``), waited at the end of the step;
* :class:`ThreadPeer` with :func:`blocking_reducers`: a thread making one blocking call per
  bucket, the stores' own design with nothing else (no negotiation, engine or per-key work);
* :class:`Breakdown`: the store's CPU per part (``--breakdown``); :func:`fit_loopback`: alpha
  and beta of this machine's loopback for the ring formula; :func:`plot`: ``--plot``.

Every peer has ``start(view)`` (a bucket is ready), ``progress() -> bool`` (still in flight) and
``finish()`` (wait for everything started).
"""
from __future__ import annotations

import queue
import statistics
import threading
import time

import numpy as np


def sleep_until(deadline: float, progress=None, poll_s: float = 0.0) -> None:
    """Sleep to ``deadline`` (perf_counter seconds), calling ``progress()`` every ``poll_s``
    while it returns True (requests still in flight)."""
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            return
        if progress is not None and poll_s > 0 and progress():
            time.sleep(min(poll_s, left))
        else:
            progress = None
            time.sleep(left)


def busy(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU (``--peer-host-ms``: the host work a framework
    does at the start of a step)."""
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        pass


class FlatPeer:
    """Hand-written flat allreduce: one ``Iallreduce`` per bucket, all waited at the end."""

    def __init__(self, comm, MPI) -> None:
        self.comm, self.MPI, self.requests = comm, MPI, []

    def start(self, view: np.ndarray) -> None:
        self.requests.append(self.comm.Iallreduce(self.MPI.IN_PLACE, view, op=self.MPI.SUM))

    def progress(self) -> bool:
        if self.requests and self.MPI.Request.Testall(self.requests):
            self.requests = []
        return bool(self.requests)

    def finish(self) -> None:
        self.MPI.Request.Waitall(self.requests)
        self.requests = []


class TwoLevelPeer:
    """Hand-written two-level allreduce: per bucket ``Ireduce`` to the node's first rank,
    ``Iallreduce`` among node leaders, ``Ibcast`` in the node. A stage of a bucket starts once
    its previous stage finished and the same stage of every earlier bucket started (collectives
    on one communicator must be called in the same order on every rank)."""

    def __init__(self, node, leaders, MPI) -> None:
        # (the broadcasts get a communicator of their own: on the reductions' one, a rank
        # could start a later bucket's Ireduce before an earlier one's Ibcast, another rank
        # the other way round, and the calls would not match)
        self.node, self.bcast, self.leaders, self.MPI = node, node.Dup(), leaders, MPI
        self.leader = node.Get_rank() == 0
        self.views: list[np.ndarray] = []
        self.stage: list[int] = []       # next stage to start, per bucket
        self.request: list = []          # its request in flight (None: nothing in flight)
        self.started = [0, 0, 0]         # buckets that started each stage

    def start(self, view: np.ndarray) -> None:
        self.views.append(view)
        self.stage.append(0)
        self.request.append(None)
        self.progress()

    def _launch(self, b: int, stage: int):
        MPI, view = self.MPI, self.views[b]
        if stage == 0:
            if self.leader:
                return self.node.Ireduce(MPI.IN_PLACE, view, op=MPI.SUM, root=0)
            return self.node.Ireduce(view, None, op=MPI.SUM, root=0)
        if stage == 1:
            return self.leaders.Iallreduce(MPI.IN_PLACE, view, op=MPI.SUM) if self.leader \
                else None
        return self.bcast.Ibcast(view, root=0)

    def progress(self) -> bool:
        moved = True
        while moved:
            moved = False
            for stage in range(3):
                b = self.started[stage]
                if b >= len(self.views) or self.stage[b] != stage:
                    continue
                req = self.request[b]
                if req is not None and not req.Test():
                    continue
                self.request[b] = self._launch(b, stage)
                self.stage[b] = stage + 1
                self.started[stage] += 1
                moved = True
        return any(r is not None and not r.Test() for r in self.request) or \
            self.started[2] < len(self.views)

    def finish(self) -> None:
        while self.progress():
            pending = [r for r in self.request if r is not None]
            if pending:
                self.MPI.Request.Waitany(pending)
        self.views, self.stage, self.request, self.started = [], [], [], [0, 0, 0]


class ThreadPeer:
    """The store's own design with nothing else: a thread that runs one blocking collective
    call per bucket (``reduce``) as soon as the program hands it over, in hand-over order; no
    negotiation, no engine, no per-key bookkeeping."""

    def __init__(self, reduce) -> None:
        self.reduce = reduce
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.done = threading.Event()
        threading.Thread(target=self._run, daemon=True, name="thread-peer").start()

    def _run(self) -> None:
        while True:
            view = self.queue.get()
            if view is None:
                self.done.set()
            else:
                self.reduce(view)

    def start(self, view: np.ndarray) -> None:
        self.queue.put(view)

    def progress(self) -> bool:
        return False  # (the thread needs no polling)

    def finish(self) -> None:
        self.queue.put(None)
        self.done.wait()
        self.done.clear()


def blocking_reducers(comm, node, leaders, MPI) -> tuple:
    """Flat (``Allreduce``) and two-level (``Reduce``, leaders' ``Allreduce``, ``Bcast``)
    blocking reductions of one bucket, as the stores' reducers call them."""
    leader = node.Get_rank() == 0

    def flat(view: np.ndarray) -> None:
        comm.Allreduce(MPI.IN_PLACE, view, op=MPI.SUM)

    def two_level(view: np.ndarray) -> None:
        if leader:
            node.Reduce(MPI.IN_PLACE, view, op=MPI.SUM, root=0)
            leaders.Allreduce(MPI.IN_PLACE, view, op=MPI.SUM)
        else:
            node.Reduce(view, None, op=MPI.SUM, root=0)
        node.Bcast(view, root=0)

    return flat, two_level


class Breakdown:
    """``--breakdown``: this rank's CPU seconds (``thread_time`` of the calling thread) and calls
    in the store's parts, by wrapping their methods in this process (diagnostics only: the
    store's behaviour is unchanged). Parts are nested by name (``round.process`` is inside
    ``round``); one missing after a refactor is left out."""

    PARTS = (("portable.kvstore.collective", "CollectiveQueue", "_round", "round"),
             ("portable.kvstore.negotiation", "Board", "vector", "round.vector"),
             ("portable.kvstore.collective", "CollectiveQueue", "_process", "round.process"),
             ("portable.kvstore.collective", "CollectiveQueue", "_complete",
              "round.process.complete"),
             ("portable.kvstore.runs", "RunReducer", "reduce", "round.process.reduce"),
             ("portable.kvstore.reducers", "FlatReducer", "start",
              "round.process.reduce.start"),
             ("portable.kvstore.hierarchical", "TwoLevelReducer", "start",
              "round.process.reduce.start"),
             ("portable.kvstore.runs", "RunReducer", "_land", "round.process.reduce.land"),
             ("portable.kvstore.reducers", "FlatReducer", "allreduce", "round.blocking_mpi"),
             ("portable.kvstore.hierarchical", "TwoLevelReducer", "allreduce",
              "round.blocking_mpi"))
    # every rank reports every part (a part one rank never entered is a zero), so that the
    # ranks sum arrays of one length
    LABELS = tuple(sorted({label for *_, label in PARTS} | {"push"}))

    def __init__(self) -> None:
        import importlib

        self._parts: dict[str, list] = {}  # part -> [CPU seconds, calls]
        self._lock = threading.Lock()
        self._active = threading.local()  # the parts each thread is inside
        for module, cls, method, label in self.PARTS:
            try:
                owner = importlib.import_module(module)
                self._wrap(owner if cls is None else getattr(owner, cls), method, label)
            except (ImportError, AttributeError):
                continue

    def _wrap(self, owner, method: str, label: str) -> None:
        inner = getattr(owner, method)

        active = self._active

        def timed(*args, **kwargs):
            labels = active.__dict__.setdefault("labels", set())
            if label in labels:  # (the two-level reducer calls a flat one: count it once)
                return inner(*args, **kwargs)
            labels.add(label)
            start = time.thread_time()
            try:
                return inner(*args, **kwargs)
            finally:
                labels.discard(label)
                self.add(label, time.thread_time() - start)

        setattr(owner, method, timed)

    def add(self, part: str, seconds: float, calls: int = 1) -> None:
        with self._lock:
            got = self._parts.setdefault(part, [0.0, 0])
            got[0] += seconds
            got[1] += calls

    def snapshot(self) -> dict[str, tuple[float, int]]:
        with self._lock:
            return {part: (got[0], got[1]) for part, got in self._parts.items()}


def fit_loopback(comm, MPI, bucket_numel: int, repeats: int = 7) -> dict:
    """alpha and beta of the ring formula fitted to raw Allreduce calls on this machine."""
    p = comm.Get_size()
    times = {}
    for numel in (2, bucket_numel):
        buf = np.zeros(numel, np.float32)
        samples = []
        for _ in range(repeats):
            comm.Barrier()
            start = time.perf_counter()
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
            took = np.array([time.perf_counter() - start])
            comm.Allreduce(MPI.IN_PLACE, took, op=MPI.MAX)
            samples.append(float(took[0]))
        times[numel] = statistics.median(samples)
    alpha = times[2] / (2 * (p - 1))
    nbytes = bucket_numel * 4
    beta = max(1e-15, (times[bucket_numel] - times[2]) / (2 * (p - 1) / p * nbytes))
    return {"alpha_us": round(alpha * 1e6, 2), "gbps": round(8 / beta / 1e9, 3)}


def plot(results: list[dict], path: str) -> None:
    """``--plot``: the scaling efficiency of the stores and the loops against the ranks."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for mode in ("flat", "hier"):
        rows = [c for r in results for c in r.get("configs", []) if c["mode"] == mode]
        ranks = [c["ranks"] for c in rows]
        ax.plot(ranks, [c["efficiency"] for c in rows], "o-", label=f"store {mode}")
        ax.plot(ranks, [c["peer"]["efficiency"] for c in rows], "s--", label=f"mpi4py {mode}")
        ax.plot(ranks, [c["thread_peer"]["efficiency"] for c in rows], "^:",
                label=f"mpi4py thread {mode}")
    ax.set_xlabel("emulated ranks")
    ax.set_ylabel("scaling efficiency")
    ax.set_ylim(0, 1.05)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
