"""The run reducer keeps several buckets' sums in flight (``portable.kvstore.runs``): checked in
one process with a reducer whose sums land only when waited on (as a non-blocking collective's
do), standing in for ``ranks`` equal ranks. Packed buckets in flight at once must not share a
packing buffer, a rank standing in with zeros must send zeros, no more than ``IN_FLIGHT``
sums nor ``STAGING_BYTES`` of packing may be outstanding, and every request completes once
its last bucket landed."""
from __future__ import annotations

import numpy as np
import pytest

from portable.kvstore import runs
from portable.kvstore.requests import Countdown, Request
from portable.kvstore.runs import RunReducer
from portable.kvstore.slots import ALLREDUCE, KeyEntry, Slot


class DeferredSum:
    """Sums land when waited on: each ``Wait()`` multiplies what its bucket held *when it
    started* by ``ranks`` and writes it back (a buffer reused before then sums the wrong
    values)."""

    compressor = None

    def __init__(self, ranks: int) -> None:
        self.ranks = ranks
        self.outstanding = 0
        self.most_outstanding = 0
        self.started: list[np.ndarray] = []

    def start(self, buffer, pieces):
        sent = buffer.copy()
        self.started.append(sent)
        self.outstanding += 1
        self.most_outstanding = max(self.most_outstanding, self.outstanding)
        reducer = self

        class Handle:
            def Wait(self):  # noqa: N802
                assert np.array_equal(buffer, sent), "a buffer in flight was overwritten"
                buffer[:] = sent * reducer.ranks
                reducer.outstanding -= 1
        return Handle()


def _requests(sizes, missing=()):
    keys, heads, completed = [], {}, []
    for index, numel in enumerate(sizes):
        keys.append(KeyEntry(index, (numel,), numel, np.dtype(np.float32)))
        if index in missing:
            continue
        request = Request(Slot(index, ALLREDUCE), index, 0)
        request.host = np.arange(numel, dtype=np.float32) + index
        request.then = Countdown(1, lambda index=index: completed.append(index))
        heads[request.slot] = request
    return keys, heads, completed


def _reduce(sizes, bucket_bytes, fuse_bytes, missing=(), ranks=3):
    keys, heads, completed = _requests(sizes, missing)
    reducer = DeferredSum(ranks)

    def done(requests):
        for request in requests:
            request.then()

    stats = {"buckets": 0, "bytes": 0}
    runner = RunReducer(keys, reducer, bucket_bytes, fuse_bytes, done, stats)
    slots = [Slot(index, ALLREDUCE) for index in range(len(sizes))]
    runner.reduce(slots, heads, np.zeros(len(sizes), bool))
    return heads, completed, reducer, stats


def test_packed_and_sliced_buckets_in_flight_sum_their_own_values():
    # forty small keys packed 25 to a 100-element bucket, and large keys sliced in place
    sizes = [4] * 40 + [1000, 3, 250] + [5] * 30
    heads, completed, reducer, stats = _reduce(sizes, bucket_bytes=400, fuse_bytes=64)
    for slot, request in heads.items():
        want = (np.arange(sizes[slot.index], dtype=np.float32) + slot.index) * 3
        np.testing.assert_array_equal(request.host, want, err_msg=f"key {slot.index}")
    assert sorted(completed) == list(range(len(sizes)))
    assert stats["buckets"] > runs.IN_FLIGHT  # the window filled and moved on
    assert 1 < reducer.most_outstanding <= runs.IN_FLIGHT


def test_a_rank_standing_in_sends_zeros_and_keeps_the_others_sums():
    sizes = [4] * 10 + [1000] + [4] * 10
    missing = {3, 10, 15}
    heads, completed, reducer, _ = _reduce(sizes, 400, 64, missing=missing)
    assert not any(index in missing for index in completed)
    for slot, request in heads.items():
        want = (np.arange(sizes[slot.index], dtype=np.float32) + slot.index) * 3
        np.testing.assert_array_equal(request.host, want)
    # what was sent for the missing keys: zeros (its slices in place, its pieces packed)
    sent = np.concatenate(reducer.started)
    present = sum(float((np.arange(s) + i).sum()) for i, s in enumerate(sizes) if i not in missing)
    assert sent.size == sum(sizes) and sent.sum() == pytest.approx(present)


def test_packing_in_flight_stays_within_its_budget(monkeypatch):
    monkeypatch.setattr(runs, "STAGING_BYTES", 800)  # two packed 100-element buckets
    sizes = [4] * 100
    reducer_seen = []

    original = DeferredSum.start

    def watched(self, buffer, pieces):
        reducer_seen.append(self.outstanding)
        return original(self, buffer, pieces)

    monkeypatch.setattr(DeferredSum, "start", watched)
    heads, completed, reducer, stats = _reduce(sizes, 400, 64)
    assert stats["buckets"] == 4 and sorted(completed) == list(range(100))
    assert max(reducer_seen) <= 1  # a third packed bucket waits for the first to land
    for slot, request in heads.items():
        np.testing.assert_array_equal(request.host, (np.arange(4) + slot.index) * 3)
