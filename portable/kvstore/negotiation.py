"""The negotiation vector of the collective queue: what one rank says in a round, and what the
``Allreduce(MIN)`` of every rank's vector agrees on.

Layout (int32): a header of three numbers, a code per (key, kind) slot, then a flag per key.

* header: ``1`` if this rank joined (the MIN says whether every rank did); ``1`` if it has no
  real request (the MIN says whether any rank still has one); how many keys it registered (the
  MIN is how many slots every rank knows: the next vector's size).
* slot code: ``0`` not ready here, ``PHANTOM`` (joined, nothing to send: it contributes zeros)
  or ``1 + code(priority)`` (ready). A slot is agreed when its MIN is neither 0 nor PHANTOM;
  the MIN also carries the most urgent priority.
* key flag: ``1`` if this rank's ready data of the key and of the next key lie back to back in
  one buffer (or it has neither and stands in with zeros). The MIN says whether they do on
  every rank: such runs of keys travel as one range, sliced in place (:func:`pieces`).

Example:
    >>> codes = [priority_code(p) for p in (5, 0, -5)]
    >>> codes == sorted(codes)   # more urgent first under MIN
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

ALLREDUCE, BROADCAST = 0, 1
PHANTOM = np.iinfo(np.int32).max
_PRIORITY_ZERO = 1 << 29
HEADER = 3  # [all ranks joined, no rank has a real request, registered keys]


def priority_code(priority: int) -> int:
    """1 + a non-negative code that is smaller for a higher priority (MIN picks the most urgent)."""
    return 1 + _PRIORITY_ZERO - max(-_PRIORITY_ZERO + 1, min(_PRIORITY_ZERO - 1, int(priority)))


def vector_of(keys: int, pending: dict, joined: bool, real: bool, registered: int,
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
    slots = 2 * keys
    vector = np.zeros(HEADER + slots + keys, np.int32)
    vector[0] = 1 if joined else 0
    vector[1] = 0 if real else 1
    vector[2] = registered
    for slot in range(slots):
        queue = pending.get(slot)
        head = queue[0] if queue else None
        if head is not None:
            vector[HEADER + slot] = priority_code(head.priority) if head.ready_at is not None else 0
        elif joined and not (slot % 2 == BROADCAST and is_root):
            vector[HEADER + slot] = PHANTOM
    if joinable:
        for key in range(keys - 1):
            vector[HEADER + slots + key] = _touches(pending, 2 * key, 2 * key + 2, joined)
    return vector


def _touches(pending: dict, slot: int, after: int, joined: bool) -> int:
    first, second = pending.get(slot), pending.get(after)
    if not first and not second:
        return 1 if joined else 0
    if not first or not second:
        return 0
    a, b = first[0].span, second[0].span
    return int(a is not None and b is not None and a[0] is b[0] and a[2] == b[1]
               and first[0].host.dtype == second[0].host.dtype)


@dataclass
class Agreement:
    """What the MIN of every rank's vector says."""

    all_joined: bool
    nobody_real: bool
    keys: int                        # keys every rank registered
    agreed: list[tuple[int, int]]    # (priority code, slot), most urgent first
    touching: np.ndarray             # per key: back to back with the next on every rank


def read(vector: np.ndarray) -> Agreement:
    slots = 2 * (len(vector) - HEADER) // 3
    codes = vector[HEADER:HEADER + slots]
    agreed = sorted((int(codes[s]), int(s))
                    for s in np.flatnonzero((codes > 0) & (codes < PHANTOM)))
    return Agreement(vector[0] == 1, vector[1] == 1, int(vector[2]), agreed,
                     vector[HEADER + slots:])


def pieces(slots: list[int], touching: np.ndarray) -> tuple:
    """Join runs of consecutive keys that every rank has back to back in one buffer: one
    range (a tuple of slots), sliced into buckets in place, instead of tensors packed or sent
    one by one."""
    out: list[Any] = []
    group = [slots[0]]
    for slot in slots[1:]:
        if slot == group[-1] + 2 and touching[group[-1] // 2]:
            group.append(slot)
            continue
        out.append(group[0] if len(group) == 1 else tuple(group))
        group = [slot]
    out.append(group[0] if len(group) == 1 else tuple(group))
    return tuple(out)
