"""``dist_sync``: synchronous data parallelism over MPI (MXNet's ``dist_sync`` KVStore, carried
out as Horovod-style fused, prioritised allreduce).

Every worker holds a full replica. ``pushpull`` sums each key over the workers in place (an
engine op pair per key, see :mod:`portable.kvstore.collective`), so the communication of the
last layers' gradients starts while backward still computes the first layers'; with an
optimizer on the store every worker applies the same update to its replica. ``init`` makes
every worker start from rank 0's value. Values are *summed* (MXNet's contract): to train as one
process would on the combined batch, pass the global batch size to ``Trainer.step``.

Environment: ``PORTABLE_KV_BUCKET_MB`` (fusion bucket; default 2 on one machine, 25 across
machines), ``PORTABLE_KV_CYCLE_MS``
(negotiation cycle, default 0.5), ``PORTABLE_KV_TIMEOUT`` (seconds before a missing rank stops
the job, default 300).

Example (run under ``portable launch -n 2 -- python script.py``):
    >>> kv = pt.kv.create("dist_sync")                          # doctest: +SKIP
    >>> kv.init(0, pt.nd.zeros((2,)))                           # doctest: +SKIP
    >>> g = pt.nd.ones((2,)); kv.pushpull(0, g); g.asnumpy()    # doctest: +SKIP
    array([2., 2.], dtype=float32)
"""
from __future__ import annotations

from typing import Any

from portable.errors import PortableError, SerializationError
from portable.io.atomic import read_bytes
from portable.kvstore.base import KVStore, _pairs
from portable.kvstore.collective import CollectiveQueue
from portable.kvstore.comm import (WorkerCollectives, bucket_mb, check_same, check_same_key,
                                   env_float, get_communicator)
from portable.kvstore.compression import create_compressor
from portable.kvstore.fusion import DEFAULT_FUSE_KB
from portable.kvstore.reducers import FlatReducer


class DistSyncKVStore(WorkerCollectives, KVStore):
    """Synchronous allreduce store over the MPI workers.

    Args:
        name: the store type (``dist_sync``, ``dist_sync_device`` ...).
        bucket_size_mb: fusion bucket size (default ``PORTABLE_KV_BUCKET_MB``, else 2 when
            every worker is on this machine and 25 otherwise; 0: one collective per tensor,
            no slicing).
        cycle_ms: negotiation cycle (default ``PORTABLE_KV_CYCLE_MS`` or 0.5).
        fuse_kb: the largest tensor packed into a bucket with others (default
            ``PORTABLE_KV_FUSE_KB`` or 128); larger ones are reduced in place, with no copy.
    """

    default_update_on_kvstore = False

    def __init__(self, name: str = "dist_sync", bucket_size_mb: float | None = None,
                 cycle_ms: float | None = None, fuse_kb: float | None = None) -> None:
        super().__init__(name)
        self._comm = get_communicator()
        if self._comm.is_server:
            raise PortableError(f"kvstore {name}: rank {self._comm.rank} is a parameter server "
                                f"(PORTABLE_KV_SERVERS={self._comm.num_servers}); only workers "
                                f"create stores")
        workers = self._comm.workers
        self._main = workers.Dup()  # collectives of the program's thread (checks, barrier)
        data = workers.Dup()        # collectives of the store's background thread
        if bucket_size_mb is None:
            bucket_size_mb = bucket_mb(workers)
        if cycle_ms is None:
            cycle_ms = env_float("PORTABLE_KV_CYCLE_MS", 0.5)
        if fuse_kb is None:
            fuse_kb = env_float("PORTABLE_KV_FUSE_KB", DEFAULT_FUSE_KB, allow_zero=True)
        self._queue = CollectiveQueue(data, self._comm.watchdog, self._make_reducer(data), name,
                                      bucket_mb=bucket_size_mb, cycle_ms=cycle_ms,
                                      fuse_kb=fuse_kb)
        self._single = self.num_workers == 1
        self._groups_declared = 0
        self._comm.watchdog.exit_hooks.append(self.close)
        self._closed = False

    def _make_reducer(self, comm: Any) -> Any:
        """How a bucket is summed over ``comm`` (the hierarchical store overrides this)."""
        return FlatReducer(comm)

    @property
    def stats(self) -> dict:
        """Communication counters: ``requests`` (one per key pushed, or per declared group),
        ``rounds`` (of which ``speculated`` guessed right and
        ``missed`` guessed wrong; ``worker_rounds`` ran in an engine worker), ``buckets``,
        ``bytes`` reduced, ``busy_s`` (seconds reducing what negotiations agreed on)."""
        return dict(self._queue.stats)

    @property
    def traffic(self) -> dict:
        """Bytes reduced and broadcast by this rank (:mod:`portable.kvstore.traffic`)."""
        return self._queue.reducer.traffic.snapshot()

    # -- pipeline hooks ------------------------------------------------------------------------
    def _broadcast_init(self, key: Any, value: Any) -> Any:
        self._comm.watchdog.api_call("init")
        if self._single:
            return value
        self._queue.register(key, value.shape, value.dtype)
        check_same_key(self, key, value)
        self._queue.broadcast(key, value, priority=0)
        return value

    def _global_reduce(self, key: Any, merged: Any, priority: int) -> Any:
        self._comm.watchdog.api_call("push")
        if not self._single:  # one worker: the same script runs with no communication
            self._queue.allreduce(key, merged, priority)
        return merged

    @property
    def wants_contiguous_gradients(self) -> bool:
        """Neighbouring keys that lie back to back on every rank are reduced as one range,
        sliced into buckets in place: no packing copy, and fewer, larger calls."""
        return not self._single

    @property
    def group_bytes(self) -> int:
        """One fusion bucket: gradients that fit in it would travel together anyway, so
        overlapping them key by key with backward would only add collective rounds."""
        return 0 if self._single else int(self._queue.bucket_bytes)

    def declare_group(self, keys: list) -> None:
        """Tell the store that ``keys`` (initialised keys of one dtype) will be pushed together,
        in this order, by one ``pushpull`` call at every step: the call then travels as one
        request instead of one per key (declare single keys too: groups declared in the
        order their gradients lie in memory travel as one range). Collective: every worker declares the same groups in
        the same order, after the same ``init`` calls (``gluon.Trainer`` declares its gradient
        groups so); a PortableError names the workers that differ. A group pushed without
        being declared travels key by key, with the same sums.
        """
        self._comm.watchdog.api_call("declare_group")
        if self._single:
            return
        for key in keys:
            self._check_key(key, "declare_group")
        check_same(self, "declare_group", keys[0] if keys else None, ["group", list(keys)],
                   f"group #{self._groups_declared}", "declared another group")
        self._groups_declared += 1
        self._queue.declare_group(list(keys))

    def _global_reduce_group(self, items: list[tuple[Any, Any]], priority: int) -> list:
        """The keys of one ``pushpull`` call are reduced as one group: a single engine op that
        starts when all are ready, so the list costs one negotiation instead of one per key
        (``Trainer`` pushes key by key, to overlap each with the rest of backward)."""
        if self._single or len(items) <= 1:
            return super()._global_reduce_group(items, priority)
        self._comm.watchdog.api_call("push")
        self._queue.allreduce_group(items, priority)
        return [merged for _, merged in items]

    def push(self, key: Any, value: Any, priority: int = 0) -> None:
        """Sum each key's values over devices and workers into the store (the pushed arrays
        are left unchanged)."""
        for k, values in _pairs(key, value, "push"):
            self._check_key(k, "push")
            merged = self._reduce(k, values)
            if any(merged is v for v in values):
                merged = merged.copy()  # the allreduce works in place
            self._apply(k, self._global_reduce(k, merged, priority))

    def set_gradient_compression(self, compression_params: dict) -> None:
        """Compress gradients before they travel: ``{"type": "fp16"}`` or ``{"type": "2bit",
        "threshold": 0.5}`` (with error feedback). Call it on every worker before pushing."""
        self._queue.reducer.compressor = create_compressor(compression_params)
        self._compression = dict(compression_params or {})

    # -- uneven data, checkpoints --------------------------------------------------------------
    def join(self) -> int:
        """Call when this worker has no more batches: it takes part in the other workers'
        reductions with zeros until every worker joined, then returns.

        Returns:
            The rank that completed the most reductions (its replica saw every step); see
            :func:`portable.distributed.join` to copy its parameters to every worker.
        """
        self._comm.watchdog.api_call("join")
        return self._queue.join()

    def save_optimizer_states(self, fname: str, dump_optimizer: bool = False) -> None:
        """Rank 0 writes the (identical) optimizer states; every worker waits for the file."""
        self._require_updater("save_optimizer_states")
        if self.rank == 0:
            self._updater.save(fname, dump_optimizer)
        self.barrier()

    def load_optimizer_states(self, fname: str) -> None:
        """Rank 0 reads the states file and sends it to every worker (no shared disk needed)."""
        self._require_updater("load_optimizer_states")
        data, error = None, f"{fname}: rank 0 could not read the optimizer states"
        if self.rank == 0:
            try:
                data = read_bytes(fname, "optimizer states")
            except SerializationError as exc:
                error = str(exc)
        data = self.broadcast_bytes(data)  # empty on every rank when rank 0 failed
        if not data:
            raise SerializationError(error)
        self.set_optimizer_states(data, str(fname))

    def close(self) -> None:
        """Finish pending communication and stop the store's thread (also run at exit)."""
        if self._closed:
            return
        self._closed = True
        with self._comm.watchdog.waiting(f"{self.type} close (pending requests)"):
            self._queue.close()

    # -- helpers -------------------------------------------------------------------------------
