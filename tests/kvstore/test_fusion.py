"""Bucket planning (fusion of small tensors, slicing of large ones) and the priority code used by
the negotiation: pure functions, checked against what the plan must cover."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from portable.kvstore.negotiation import PHANTOM, priority_code
from portable.kvstore.fusion import FusionBuffers, pack, plan_buckets, unpack


def _coverage(plan):
    covered = {}
    for bucket in plan:
        offset = 0
        for seg in bucket.segments:
            assert seg.offset == offset  # pieces are packed back to back
            offset += seg.size
            covered.setdefault(seg.slot, []).append((seg.start, seg.stop))
        assert offset == bucket.numel
    return covered


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5000), st.sampled_from(["float32", "float64"])),
                min_size=1, max_size=12), st.sampled_from([0, 64, 1000, 4096, 1 << 20]))
def test_every_element_is_in_exactly_one_bucket(requests, bucket_bytes):
    items = [(slot, numel, dtype) for slot, (numel, dtype) in enumerate(requests)]
    plan = plan_buckets(items, bucket_bytes)
    covered = _coverage(plan)
    for slot, numel, dtype in items:
        ranges = sorted(covered[slot])
        assert ranges[0][0] == 0 and ranges[-1][1] == numel
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # no gap, no overlap
    finishing = [slot for bucket in plan for slot in bucket.finishes]
    assert sorted(finishing) == sorted(slot for slot, _, _ in items)  # each finishes once ...
    for bucket in plan:  # ... in the bucket that carries its last element
        assert all(any(s.slot == slot and s.stop == items[slot][1] for s in bucket.segments)
                   for slot in bucket.finishes)
        assert len({np.dtype(items[s.slot][2]) for s in bucket.segments}) == 1
        if bucket_bytes > 0 and len(bucket.segments) > 1:
            assert bucket.nbytes <= bucket_bytes  # fused buckets respect the size
    if bucket_bytes > 0:
        _assert_bounded_wait(items, plan, bucket_bytes)


def _assert_bounded_wait(items, plan, bucket_bytes):
    """A packed piece goes after pieces of later requests only while less than one bucket of
    them went first (the one that crossed the bound included)."""
    order = {slot: i for i, (slot, _, _) in enumerate(items)}
    for position, bucket in enumerate(plan):
        if bucket.in_place:
            continue
        first = min(order[s.slot] for s in bucket.segments)
        ahead = [b for b in plan[:position] if order[b.segments[0].slot] > first
                 and b.dtype == bucket.dtype]
        assert sum(b.nbytes for b in ahead[:-1]) < bucket_bytes


def test_large_tensors_are_sliced_in_place_and_small_ones_wait_one_bucket_at_most():
    plan = plan_buckets([(0, 10, "float32"), (1, 100, "float32"), (2, 5, "float32")], 80)
    assert [[(s.slot, s.start, s.stop) for s in b.segments] for b in plan] == [
        [(1, 0, 20)], [(0, 0, 10)], [(1, 20, 40)], [(1, 40, 60)], [(1, 60, 80)],
        [(1, 80, 100)], [(2, 0, 5)]]
    assert all(b.in_place for b in plan)


def test_small_tensors_between_large_ones_are_fused_across_them():
    """ResNet's layout: a convolution weight, then two batch-norm vectors, repeated. The
    vectors are fused over several convolutions instead of travelling two by two."""
    items = []
    for layer in range(6):
        items += [(3 * layer, 64, "float32"), (3 * layer + 1, 4, "float32"),
                  (3 * layer + 2, 4, "float32")]
    plan = plan_buckets(items, 1 << 10, fuse_bytes=128)  # 256-byte weights go in place
    fused = [[s.slot for s in b.segments] for b in plan if not b.in_place]
    assert fused == [[1, 2, 4, 5, 7, 8, 10, 11], [13, 14, 16, 17]]
    assert len(plan) == 6 + 2


def test_tensors_over_the_fusion_threshold_go_in_place_alone():
    """Packing costs two copies: tensors over ``fuse_bytes`` are reduced in their own memory,
    and smaller ones are still packed together, across it."""
    items = [(0, 8, "float32"), (1, 64, "float32"), (2, 8, "float32"), (3, 8, "float32")]
    plan = plan_buckets(items, 1 << 10, fuse_bytes=128)
    assert [[s.slot for s in b.segments] for b in plan] == [[1], [0, 2, 3]]
    assert plan[0].in_place and not plan[1].in_place
    assert _coverage(plan) == {0: [(0, 8)], 1: [(0, 64)], 2: [(0, 8)], 3: [(0, 8)]}


def test_zero_bucket_size_means_one_call_per_tensor():
    plan = plan_buckets([(0, 3, "float32"), (1, 10 ** 6, "float32")], 0)
    assert [(b.segments[0].slot, b.numel) for b in plan] == [(0, 3), (1, 10 ** 6)]


def test_pack_and_unpack_round_trip():
    flats = {"a": np.arange(4, dtype=np.float32), "b": np.arange(10, 16, dtype=np.float32)}
    (bucket,) = plan_buckets([("a", 4, "float32"), ("b", 6, "float32")], 1 << 10)
    buffer = FusionBuffers().get("float32", bucket.numel)
    pack(bucket, flats, buffer)
    np.testing.assert_array_equal(buffer, np.r_[np.arange(4), np.arange(10, 16)])
    buffer *= 2
    unpack(bucket, flats, buffer)
    np.testing.assert_array_equal(flats["b"], np.arange(10, 16) * 2)


def test_priority_code_orders_the_most_urgent_first_and_stays_below_phantom():
    priorities = [5, 0, -1, -160, 2 ** 40, -2 ** 40]
    codes = [priority_code(p) for p in priorities]
    assert all(0 < c < PHANTOM for c in codes)
    assert sorted(priorities, key=priority_code) == sorted(priorities, reverse=True)


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_fusion_buffers_reuse_and_grow(dtype):
    buffers = FusionBuffers()
    small = buffers.get(dtype, 10)
    assert small.dtype == np.dtype(dtype) and small.size == 10
    assert buffers.get(dtype, 5).base is small.base
    assert buffers.get(dtype, 100).size == 100
