"""The negotiation vector of the collective queue: what one rank says in a round, and what the
``Allreduce(MIN)`` of every rank's vector agrees on.

Layout (int32): a header of three numbers, a code per (key, kind) slot (at its
:attr:`~portable.kvstore.slots.Slot.position`), then a flag per key.

* header: ``1`` if this rank joined (the MIN says whether every rank did); ``1`` if it has no
  real request (the MIN says whether any rank still has one); how many keys it registered (the
  MIN is how many slots every rank knows: the next vector's size).
* slot code: ``0`` not ready here, ``PHANTOM`` (joined, nothing to send: it contributes zeros)
  or ``1 + code(priority)`` (ready). A slot is agreed when its MIN is neither 0 nor PHANTOM;
  the MIN also carries the most urgent priority.
* key flag: ``1`` if this rank's ready data of the key and of the next key lie back to back in
  one buffer (or it has neither and stands in with zeros). The MIN says whether they do on
  every rank: such runs of keys travel as one range, sliced in place (:func:`slot_ranges`).

Example:
    >>> codes = [priority_code(p) for p in (5, 0, -5)]
    >>> codes == sorted(codes)   # more urgent first under MIN
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from portable.kvstore.slots import ALLREDUCE, BROADCAST, KINDS, Slot, SlotRange, slots_at

PHANTOM = np.iinfo(np.int32).max
_PRIORITY_ZERO = 1 << 29
HEADER = 3  # [all ranks joined, no rank has a real request, registered keys]


def priority_code(priority: int) -> int:
    """1 + a non-negative code that is smaller for a higher priority (MIN picks the most urgent)."""
    return 1 + _PRIORITY_ZERO - max(-_PRIORITY_ZERO + 1, min(_PRIORITY_ZERO - 1, int(priority)))


def vector_of(keys: int, pending: dict[Slot, Any], joined: bool, real: bool, registered: int,
              is_root: bool, joinable: bool) -> np.ndarray:
    """This rank's vector over the first ``keys`` keys (every rank knows them).

    Args:
        pending: slot -> queue of requests (the head is next; ``ready_at`` None: not ready).
        joined: the rank joined: it stands in with zeros for the slots it has nothing for.
        real: the rank has a request pending (ready or not).
        registered: how many keys this rank registered.
        is_root: rank 0, the source of broadcasts (it cannot stand in for one).
        joinable: runs of keys may be joined (no compression: it keeps residuals per key).
    """
    slots = KINDS * keys
    vector = np.zeros(HEADER + slots + keys, np.int32)
    vector[0] = 1 if joined else 0
    vector[1] = 0 if real else 1
    vector[2] = registered
    codes = vector[HEADER:HEADER + slots]  # (a view: indexed by Slot.position)
    if joined:  # it stands in with zeros where it has no request, except as broadcast source
        codes[:] = PHANTOM
        if is_root:
            codes[BROADCAST::KINDS] = 0
    allreduces: dict[int, Any] = {}  # key index -> its allreduce queue, when not empty
    for slot, queue in pending.items():
        index = slot.index
        if not queue or index >= keys:  # (a key not every rank registered yet waits)
            continue
        head = queue[0]
        # (Slot.position, inlined: this loop runs in every negotiated round)
        codes[KINDS * index + slot.kind] = (priority_code(head.priority)
                                            if head.ready_at is not None else 0)
        if slot.kind == ALLREDUCE:
            allreduces[index] = queue
    if joinable:
        touching = vector[HEADER + slots:]
        for index in range(keys - 1):
            touching[index] = _touches(allreduces.get(index), allreduces.get(index + 1), joined)
    return vector


def _touches(first: Any, second: Any, joined: bool) -> int:
    """Whether the heads of two neighbouring keys' allreduce queues lie back to back in one
    buffer (a rank that has neither stands in with zeros, which lie anywhere)."""
    if not first and not second:
        return 1 if joined else 0
    if not first or not second:
        return 0
    head, next_head = first[0], second[0]
    a, b = head.span, next_head.span
    return int(a is not None and b is not None and a.root is b.root and a.stop == b.start
               and head.host.dtype == next_head.host.dtype)


@dataclass
class Agreement:
    """What the MIN of every rank's vector says."""

    all_joined: bool
    nobody_real: bool
    keys: int                        # keys every rank registered
    agreed: list[Slot]               # most urgent first (then in slot order)
    touching: np.ndarray             # per key: back to back with the next on every rank


def read(vector: np.ndarray) -> Agreement:
    """What a negotiation agreed on, from the MIN of every rank's vector."""
    slots = KINDS * (len(vector) - HEADER) // (KINDS + 1)
    codes = vector[HEADER:HEADER + slots]
    positions = np.flatnonzero((codes > 0) & (codes < PHANTOM))
    agreed = sorted(zip(codes[positions].tolist(), positions.tolist()))
    return Agreement(vector[0] == 1, vector[1] == 1, int(vector[2]),
                     slots_at(position for _, position in agreed), vector[HEADER + slots:])


def slot_ranges(slots: list[Slot], touching: np.ndarray) -> tuple[SlotRange, ...]:
    """Join runs of consecutive keys that every rank has back to back in one buffer: one
    range, sliced into buckets in place, instead of tensors packed or sent one by one."""
    out: list[SlotRange] = []
    first = last = slots[0]
    for slot in slots[1:]:
        if (slot.kind == last.kind and slot.index == last.index + 1
                and touching[last.index]):
            last = slot
            continue
        out.append(SlotRange(first, last.index - first.index + 1))
        first = last = slot
    out.append(SlotRange(first, last.index - first.index + 1))
    return tuple(out)
