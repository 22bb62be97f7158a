"""Tensor fusion (Horovod) and slicing (P3): which pieces of which tensors travel together.

Stages of :func:`plan_buckets`, given the requests every rank agreed to reduce now, in the order
they must go (highest priority first):

1. a tensor larger than the bucket is cut into bucket-sized slices, each its own single-piece
   bucket (reduced in place in the tensor's memory: no copy), so that a huge tensor cannot hold
   back a more urgent one and the slices can be pipelined;
2. a tensor larger than ``fuse_bytes`` but not than the bucket is its own in-place bucket:
   packing costs two copies of it, which for such a tensor cost more than the one collective
   call saved (on one machine a 1 MB copy takes about as long as reducing it);
3. smaller tensors of the same dtype are packed, in order, into one bucket until the next one
   would overflow it; one collective call then reduces the whole bucket. Larger pieces that
   come later in the order may go ahead of an open bucket, but only up to one bucket's worth
   of bytes: then the bucket goes, full or not. (Flushing it at every large tensor would
   leave ResNet's batch-norm parameters, which sit between its convolutions, in tiny buckets
   of two: one collective call each.)
4. a bucket holding a single piece is marked in-place (no packing copy).

Invariants: every element of every request is in exactly one bucket; the plan depends only on
the agreed requests (order, sizes, dtypes) and the bucket size, so every rank computes the same
plan and the collective calls match; a packed piece waits behind less than one bucket's worth of
later, larger pieces.

Example:
    >>> plan = plan_buckets([(0, 10, "float32"), (1, 10, "float32"), (2, 100, "float32")], 80)
    >>> [[(s.slot, s.start, s.stop) for s in b.segments] for b in plan][:3]
    [[(2, 0, 20)], [(0, 0, 10), (1, 0, 10)], [(2, 20, 40)]]
    >>> len(plan)
    6
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

# Bucket sizes, measured with benchmarks/allreduce.py (ResNet-50's gradients): between ranks of
# one machine, 1-2 MB messages reduce fastest (they stay in cache; past a few MB each call is
# slower per byte, and a 100 MB one three times slower); across machines, PyTorch DDP's 25 MB
# amortises the network's latency.
DEFAULT_BUCKET_MB = 25.0
NODE_LOCAL_BUCKET_MB = 2.0
DEFAULT_FUSE_KB = 128.0


@dataclass(frozen=True)
class Segment:
    """Elements ``[start, stop)`` of request ``slot``, at element ``offset`` of its bucket."""

    slot: Any
    start: int
    stop: int
    offset: int

    @property
    def size(self) -> int:
        return self.stop - self.start


@dataclass
class Bucket:
    """Pieces reduced by one collective call (all of one dtype)."""

    dtype: np.dtype
    segments: list[Segment] = field(default_factory=list)
    numel: int = 0
    finishes: list[Any] = field(default_factory=list)  # slots whose last piece is here

    @property
    def in_place(self) -> bool:
        """A single piece is reduced in its tensor's own memory (no packing)."""
        return len(self.segments) == 1

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def add(self, slot: Any, start: int, stop: int, last: bool = True) -> None:
        self.segments.append(Segment(slot, start, stop, self.numel))
        self.numel += stop - start
        if last:
            self.finishes.append(slot)


def plan_buckets(requests: Sequence[tuple[Any, int, Any]], bucket_bytes: float,
                 fuse_bytes: float = float("inf")) -> list[Bucket]:
    """Group agreed requests into buckets.

    Args:
        requests: ``(slot, numel, dtype)`` in the order they must be reduced.
        bucket_bytes: the bucket size; 0 or less: no fusion and no slicing (one call per
            tensor).
        fuse_bytes: the largest tensor that is packed with others (larger ones are reduced in
            place, alone or in slices).

    Returns:
        The buckets, in the order their collectives must be called.
    """
    plan: list[Bucket] = []
    open_buckets: dict[np.dtype, Bucket] = {}
    overtaken: dict[np.dtype, int] = {}  # bytes planned ahead of each open bucket's pieces
    for slot, numel, dtype in requests:
        dtype = np.dtype(dtype)
        numel = int(numel)
        if bucket_bytes <= 0:
            single = Bucket(dtype)
            single.add(slot, 0, numel)
            plan.append(single)
            continue
        capacity = max(1, int(bucket_bytes // dtype.itemsize))
        if numel > capacity or numel * dtype.itemsize > fuse_bytes:
            for start in range(0, numel, capacity):
                piece = Bucket(dtype)
                stop = min(start + capacity, numel)
                piece.add(slot, start, stop, last=stop == numel)
                plan.append(piece)
                for kind in list(open_buckets):  # small pieces wait behind one bucket at most
                    overtaken[kind] += piece.nbytes
                    if overtaken[kind] >= bucket_bytes:
                        plan.append(open_buckets.pop(kind))
            continue
        current = open_buckets.get(dtype)
        if current is not None and current.numel + numel > capacity:
            plan.append(open_buckets.pop(dtype))
            current = None
        if current is None:
            current = open_buckets[dtype] = Bucket(dtype)
            overtaken[dtype] = 0
        current.add(slot, 0, numel)
    plan.extend(open_buckets.values())
    return plan


class FusionBuffers:
    """One reusable packing buffer per dtype, grown on demand (owned by one thread)."""

    def __init__(self) -> None:
        self._buffers: dict[np.dtype, np.ndarray] = {}

    def get(self, dtype: Any, numel: int) -> np.ndarray:
        dtype = np.dtype(dtype)
        buffer = self._buffers.get(dtype)
        if buffer is None or buffer.size < numel:
            buffer = self._buffers[dtype] = np.empty(max(numel, 1), dtype)
        return buffer[:numel]


def pack(bucket: Bucket, flats: dict, out: np.ndarray) -> None:
    """Copy each piece of ``bucket`` from its flat tensor (``flats[slot]``) into ``out``."""
    for seg in bucket.segments:
        out[seg.offset:seg.offset + seg.size] = flats[seg.slot][seg.start:seg.stop]


def unpack(bucket: Bucket, flats: dict, buffer: np.ndarray) -> None:
    """Copy each reduced piece back from ``buffer`` into its flat tensor."""
    for seg in bucket.segments:
        flats[seg.slot][seg.start:seg.stop] = buffer[seg.offset:seg.offset + seg.size]
