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
  one buffer (or it has neither and stands in with zeros; the last key's flag is 0). The MIN says whether they do on
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


class Board:
    """What this rank has for each slot, kept up to date as requests arrive, become ready and
    complete, so that a round's vector is a few array operations instead of a walk over every
    queue (the queue's thread is on every rank's critical path, once per round). Python lists:
    an update is a few list stores, on the path of every request.

    Per slot: ``-1`` no request, ``0`` a request not ready yet, else ``1 + code(priority)`` of
    the ready head. Per key, of its allreduce head: where its data lie (owning buffer, first
    and last byte; ``-1``: not ready, or no host buffer of its own) and their dtype, for the
    back-to-back flags.

    Example:
        >>> board = Board()
        >>> board.grow(2)
        >>> board.state
        [-1, -1, -1, -1]
    """

    def __init__(self) -> None:
        self.state: list[int] = []
        self.span: list[tuple[int, int, int, int]] = []  # (root id, start, stop, dtype num)

    def grow(self, keys: int) -> None:
        """Make room for ``keys`` registered keys (new slots have no request)."""
        more = keys - len(self.span)
        if more > 0:
            self.state.extend([-1] * (KINDS * more))
            self.span.extend([_NO_SPAN] * more)

    def set_head(self, slot: Slot, head: Any) -> None:
        """``head`` (a request or None) is now the first request of ``slot``'s queue."""
        index, kind = slot
        if head is None or head.ready_at is None:
            self.state[KINDS * index + kind] = -1 if head is None else 0
            if kind == ALLREDUCE:
                self.span[index] = _NO_SPAN
            return
        self.state[KINDS * index + kind] = priority_code(head.priority)
        if kind == ALLREDUCE:
            span = head.span
            self.span[index] = (_NO_SPAN if span is None else
                                (id(span.root), span.start, span.stop, head.host.dtype.num))

    def clear(self) -> None:
        """Every queue emptied (the store failed)."""
        self.state[:] = [-1] * len(self.state)
        self.span[:] = [_NO_SPAN] * len(self.span)

    def vector(self, keys: int, joined: bool, real: bool, registered: int, is_root: bool,
               joinable: bool) -> np.ndarray:
        """This rank's vector over the first ``keys`` keys (every rank knows them).

        Args:
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
        state = np.array(self.state[:slots], np.int32)
        codes = vector[HEADER:HEADER + slots]
        if joined:  # zeros stand in where it has no request, except as broadcast source
            np.copyto(codes, np.where(state < 0, PHANTOM, state))
            if is_root:
                broadcasts = codes[BROADCAST::KINDS]
                broadcasts[broadcasts == PHANTOM] = 0
        else:
            np.maximum(state, 0, out=codes)
        if joinable and keys > 1:
            has = state[ALLREDUCE::KINDS] >= 0
            spans = np.array(self.span[:keys], np.int64).reshape(keys, 4)
            root, start, stop, dtype = spans.T
            first, second = has[:-1], has[1:]
            back_to_back = (first & second & (root[:-1] >= 0) & (root[:-1] == root[1:])
                            & (stop[:-1] == start[1:]) & (dtype[:-1] == dtype[1:]))
            vector[HEADER + slots:HEADER + slots + keys - 1] = (
                back_to_back | (~first & ~second & joined))
        return vector


_NO_SPAN = (-1, -1, -1, -1)


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
