"""How the collective queue reduces a run of agreed allreduce keys: plan the run into buckets
(cached: training agrees on the same runs at every step), fill each bucket (a slice of a range
of keys lying back to back, in place, or small tensors packed), start its sum, and, as each
sum lands, copy it back and complete each request whose last bucket it was.

Several buckets are in flight at once (``IN_FLIGHT``; the reducer's non-blocking collectives,
:mod:`portable.kvstore.reducers`): their collectives progress together, so a rank that reaches
one late holds up only that one. Blocking on each bucket in turn cost a wait for the slowest
rank per bucket: at 16 ranks on 2 cores, where each rank waits for the others to be scheduled,
that was most of the step. Which buckets are in flight is a function of the plan alone, so
every rank starts and finishes them in the same order. (A reducer whose sums are made at once,
the two-level and compressed ones, has one in flight: its ``start`` returns a finished sum.)

Example (inside the queue's round):
    >>> runs = RunReducer(keys, reducer, 2 << 20, 128 << 10, complete, stats)  # doctest: +SKIP
    >>> runs.reduce([Slot(0, ALLREDUCE), Slot(1, ALLREDUCE)], heads, touching)  # doctest: +SKIP
"""
from __future__ import annotations

from collections import deque
from typing import Any, Callable, NamedTuple

import numpy as np

from portable.kvstore.fusion import Bucket, FusionBuffers, plan_buckets
from portable.kvstore.negotiation import slot_ranges
from portable.kvstore.reducers import Piece
from portable.kvstore.requests import Request, joined_view
from portable.kvstore.slots import KeyEntry, Slot, SlotRange

# Buckets whose sums are in flight at once, and the packing buffers they may hold (bytes; a
# packed bucket is always allowed one): in-place buckets cost no memory of their own.
IN_FLIGHT = 8
STAGING_BYTES = 16 << 20


class _Flight(NamedTuple):
    """A bucket whose sum was started."""

    bucket: Bucket
    buffer: np.ndarray      # what is summed: the tensor's own memory, a packing buffer, zeros
    handle: Any             # what to Wait() on
    staging: Any            # the packing buffer to hand back once landed (None: in place)


class RunReducer:
    """Plans and reduces runs of agreed allreduce slots for one queue.

    Args:
        keys: the queue's registered keys, by index; shared with the queue (it appends).
        reducer: sums a bucket (``FlatReducer``, two-level, or compressed).
        bucket_bytes: fusion bucket size (0: one call per tensor, no slicing).
        fuse_bytes: the largest tensor packed with others.
        complete: retires reduced requests and completes their engine ops.
        stats: the queue's counters (``buckets``, ``bytes``).
    """

    def __init__(self, keys: list[KeyEntry], reducer: Any, bucket_bytes: float,
                 fuse_bytes: float, complete: Callable[[list[Request]], None],
                 stats: dict) -> None:
        self._keys = keys
        self.reducer = reducer
        self.bucket_bytes = bucket_bytes
        self.fuse_bytes = fuse_bytes
        self._done = complete
        self._stats = stats
        self._staging: list[np.ndarray] = []  # free packing buffers (bytes)
        self.scratch = FusionBuffers()  # what a rank broadcasts from when it stands in
        self._plans: dict[tuple[SlotRange, ...], list] = {}

    def plan(self, ranges: tuple[SlotRange, ...]) -> list:
        """The buckets of a run of agreed slot ranges (cached: training agrees on the same
        runs at every step). A bucket's segments and ``finishes`` name each range by its place
        in ``ranges``."""
        plan = self._plans.get(ranges)
        if plan is None:
            items = [(place, self._numel(slot_range), self._keys[slot_range.first.index].dtype)
                     for place, slot_range in enumerate(ranges)]
            plan = plan_buckets(items, self.bucket_bytes, self.fuse_bytes)
            if len(self._plans) >= 256:
                self._plans.clear()
            self._plans[ranges] = plan
        return plan

    def _numel(self, slot_range: SlotRange) -> int:
        if slot_range.length == 1:
            return self._keys[slot_range.first.index].numel
        return sum(self._keys[index].numel for index in slot_range.indices)

    def _host(self, slot_range: SlotRange, heads: dict[Slot, Request]) -> np.ndarray | None:
        """This rank's data of a slot range (None: it stands in with zeros)."""
        first = heads.get(slot_range.first)
        if first is None:
            return None
        if slot_range.length == 1:
            return first.host
        return joined_view(first.host, first.span, self._numel(slot_range))

    def reduce(self, slots: list[Slot], heads: dict[Slot, Request],
               touching: np.ndarray) -> None:
        """Reduce the agreed allreduce ``slots`` (``heads``: this rank's request per slot;
        missing: it stands in with zeros), completing requests as their buckets finish."""
        if not slots:
            return
        compressing = self.reducer.compressor is not None
        joining = not compressing and self.bucket_bytes > 0  # (bucket 0: a call per tensor)
        ranges = (slot_ranges(slots, touching) if joining
                  else tuple(SlotRange(slot) for slot in slots))
        plan = self.plan(ranges)
        # this rank's data of each range, by its place in ``ranges``: a segment's ``slot``
        hosts = [self._host(slot_range, heads) for slot_range in ranges]
        reduced: list[Request] = []
        flights: deque[_Flight] = deque()
        staged = 0  # packing bytes in flight
        for bucket in plan:
            packed = not bucket.in_place
            while flights and (len(flights) >= IN_FLIGHT or (
                    packed and staged + bucket.nbytes > STAGING_BYTES)):
                staged -= self._land(flights.popleft(), hosts, ranges, heads, reduced)
            buffer, staging = self._fill(bucket, hosts)
            pieces = self._pieces(bucket.segments, ranges, heads) if compressing else []
            flights.append(_Flight(bucket, buffer, self.reducer.start(buffer, pieces), staging))
            staged += bucket.nbytes if packed else 0
        while flights:
            self._land(flights.popleft(), hosts, ranges, heads, reduced)
        self._done(reduced)
        self._stats["buckets"] += len(plan)
        self._stats["bytes"] += sum(bucket.nbytes for bucket in plan)

    def _fill(self, bucket: Bucket, hosts: list) -> tuple[np.ndarray, Any]:
        """What to sum for ``bucket``, and the packing buffer it took (None: in place)."""
        segments = bucket.segments
        if bucket.in_place:
            seg = segments[0]
            host = hosts[seg.slot]
            if host is None:  # (a rank standing in: its zeros are summed, the sum dropped)
                return np.zeros(bucket.numel, bucket.dtype), None
            return host[seg.start:seg.stop], None
        staging = self._take_staging(bucket.nbytes)
        buffer = staging[:bucket.nbytes].view(bucket.dtype)
        for seg in segments:
            host = hosts[seg.slot]
            target = buffer[seg.offset:seg.offset + seg.size]
            if host is not None:
                target[:] = host[seg.start:seg.stop]
            else:
                target[:] = 0
        return buffer, staging

    def _take_staging(self, nbytes: int) -> np.ndarray:
        for i, free in enumerate(self._staging):
            if free.nbytes >= nbytes:
                return self._staging.pop(i)
        return np.empty(max(nbytes, int(self.bucket_bytes)), np.uint8)

    def _land(self, flight: _Flight, hosts: list, ranges: tuple[SlotRange, ...],
              heads: dict[Slot, Request], reduced: list[Request]) -> int:
        """Wait for a bucket's sum, copy it back, and complete the requests it finished.
        Returns the packing bytes it gave back."""
        bucket, buffer = flight.bucket, flight.buffer
        flight.handle.Wait()
        if flight.staging is not None:
            for seg in bucket.segments:
                host = hosts[seg.slot]
                if host is not None:
                    host[seg.start:seg.stop] = buffer[seg.offset:seg.offset + seg.size]
            self._staging.append(flight.staging)
        urgent = False
        for place in bucket.finishes:
            for slot in ranges[place].slots:
                head = heads.get(slot)
                if head is not None:
                    reduced.append(head)
                    # the last request of its engine op: complete it now, so the first
                    # layers wait for no later ones (a group's members complete together)
                    urgent = urgent or head.then.count == 1
        if urgent:
            self._done(list(reduced))
            reduced.clear()
        return 0 if flight.staging is None else bucket.nbytes

    def _pieces(self, segments: list, ranges: tuple[SlotRange, ...],
                heads: dict[Slot, Request]) -> list[Piece]:
        """What a compressor needs of a bucket's segments (compressing never joins keys into
        ranges: each range is one slot, whose residual it keeps; a phantom keeps none)."""
        pieces = []
        for seg in segments:
            slot = ranges[seg.slot].first
            pieces.append(Piece(slot if slot in heads else None, self._numel(ranges[seg.slot]),
                                seg.start, seg.offset, seg.size))
        return pieces
