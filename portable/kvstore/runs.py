"""How the collective queue reduces a run of agreed allreduce keys: plan the run into buckets
(cached: training agrees on the same runs at every step), fill each bucket (a slice of a range
of keys lying back to back, in place, or small tensors packed), reduce it, copy it back, and
complete each request as soon as its last bucket is done.

Example (inside the queue's round):
    >>> runs = RunReducer(keys, reducer, 2 << 20, 128 << 10, complete, stats)  # doctest: +SKIP
    >>> runs.reduce([0, 2, 4], heads, touching)                                # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from portable.kvstore.fusion import FusionBuffers, plan_buckets
from portable.kvstore.negotiation import pieces
from portable.kvstore.requests import Request, joined_view


class RunReducer:
    """Plans and reduces runs of agreed allreduce slots for one queue.

    Args:
        keys: the queue's registered keys (index -> key, shape, numel, dtype); shared.
        reducer: sums a bucket (``FlatReducer``, two-level, or compressed).
        bucket_bytes: fusion bucket size (0: one call per tensor, no slicing).
        fuse_bytes: the largest tensor packed with others.
        complete: retires reduced requests and completes their engine ops.
        stats: the queue's counters (``buckets``, ``bytes``).
    """

    def __init__(self, keys: list, reducer: Any, bucket_bytes: float, fuse_bytes: float,
                 complete: Callable[[list[Request]], None], stats: dict) -> None:
        self._keys = keys
        self.reducer = reducer
        self.bucket_bytes = bucket_bytes
        self.fuse_bytes = fuse_bytes
        self._done = complete
        self._stats = stats
        self._buffers = FusionBuffers()
        self.scratch = FusionBuffers()  # zeros a rank stands in with
        self._plans: dict[tuple, list] = {}

    def plan(self, run: tuple) -> list:
        """The buckets of a run of agreed pieces: slots, or tuples of slots whose data lie
        back to back on every rank (cached: training agrees on the same runs at every step)."""
        plan = self._plans.get(run)
        if plan is None:
            items = [(p, self._numel(p), self._keys[(p[0] if isinstance(p, tuple) else p) // 2][3])
                     for p in run]
            plan = plan_buckets(items, self.bucket_bytes, self.fuse_bytes)
            if len(self._plans) >= 256:
                self._plans.clear()
            self._plans[run] = plan
        return plan

    def _numel(self, piece: Any) -> int:
        if isinstance(piece, tuple):
            return sum(self._keys[s // 2][2] for s in piece)
        return self._keys[piece // 2][2]

    def _host(self, piece: Any, heads: dict) -> np.ndarray | None:
        """This rank's data of a piece (None: it stands in with zeros)."""
        if not isinstance(piece, tuple):
            head = heads.get(piece)
            return None if head is None else head.host
        first = heads.get(piece[0])
        if first is None:
            return None
        return joined_view(first.host, first.span, self._numel(piece))

    def reduce(self, slots: list[int], heads: dict, touching: np.ndarray) -> None:
        """Reduce the agreed allreduce ``slots`` (``heads``: this rank's request per slot;
        missing: it stands in with zeros), completing requests as their buckets finish."""
        if not slots:
            return
        compressing = self.reducer.compressor is not None
        allreduce = self.reducer.allreduce
        joining = not compressing and self.bucket_bytes > 0  # (bucket 0: a call per tensor)
        plan = self.plan(pieces(slots, touching) if joining else tuple(slots))
        reduced: list[Request] = []
        views: dict = {}

        def host_of(piece: Any) -> np.ndarray | None:
            if piece not in views:
                views[piece] = self._host(piece, heads)
            return views[piece]

        for bucket in plan:
            segments = bucket.segments
            if bucket.in_place:
                seg = segments[0]
                host = host_of(seg.slot)
                if host is not None:
                    buffer = host[seg.start:seg.stop]
                else:
                    buffer = self.scratch.get(bucket.dtype, bucket.numel)
                    buffer[:] = 0
            else:
                buffer = self._buffers.get(bucket.dtype, bucket.numel)
                for seg in segments:
                    host = host_of(seg.slot)
                    target = buffer[seg.offset:seg.offset + seg.stop - seg.start]
                    if host is not None:
                        target[:] = host[seg.start:seg.stop]
                    else:
                        target[:] = 0
            # phantom pieces (None) keep no compression residual
            residuals = [(seg.slot if seg.slot in heads else None, self._keys[seg.slot // 2][2],
                          seg.start, seg.offset, seg.size)
                         for seg in segments] if compressing else []
            allreduce(buffer, residuals)
            if not bucket.in_place:
                for seg in segments:
                    host = host_of(seg.slot)
                    if host is not None:
                        host[seg.start:seg.stop] = buffer[seg.offset:seg.offset + seg.stop
                                                          - seg.start]
            urgent = False
            for piece in bucket.finishes:
                for slot in piece if isinstance(piece, tuple) else (piece,):
                    head = heads.get(slot)
                    if head is not None:
                        reduced.append(head)
                        # the last request of its engine op: complete it now, so the first
                        # layers wait for no later ones (a group's members complete together)
                        urgent = urgent or head.then.count == 1
            if urgent:
                self._done(reduced)
                reduced = []
        self._done(reduced)
        self._stats["buckets"] += len(plan)
        self._stats["bytes"] += sum(bucket.nbytes for bucket in plan)
