"""How the collective queue names what it reduces: registered keys, their slots, and ranges of
slots that travel as one.

Every rank registers keys in the same order, so a key's index is the same on every rank. A key
has one slot per kind of request (``ALLREDUCE``, ``BROADCAST``); requests of one slot complete in
push order. A slot travels between ranks only as its ``position`` in the negotiation vector
(:mod:`portable.kvstore.negotiation`), ``2 * index + kind``; slots sort as their positions do,
so that every rank orders agreed slots alike.

Example:
    >>> slot = Slot(3, BROADCAST)
    >>> slot.position, Slot.at(7) == slot, slot.kind_name
    (7, True, 'broadcast')
    >>> SlotRange(Slot(1, ALLREDUCE), 2).slots
    [Slot(index=1, kind=0), Slot(index=2, kind=0)]
"""
from __future__ import annotations

from typing import Any, Iterable, NamedTuple

import numpy as np

ALLREDUCE, BROADCAST = 0, 1
KIND_NAMES = ("allreduce", "broadcast")
KINDS = len(KIND_NAMES)


class KeyEntry(NamedTuple):
    """A key registered with the queue: what each of its requests is checked against."""

    key: Any
    shape: tuple[int, ...]
    numel: int
    dtype: np.dtype


class Slot(NamedTuple):
    """The requests of one kind (``ALLREDUCE`` or ``BROADCAST``) of the key at ``index``."""

    index: int
    kind: int

    @property
    def position(self) -> int:
        """This slot's place among the slot codes of the negotiation vector."""
        return KINDS * self.index + self.kind

    @classmethod
    def at(cls, position: int) -> Slot:
        """The slot at ``position`` of the negotiation vector."""
        return slots_at((int(position),))[0]

    @property
    def kind_name(self) -> str:
        """``allreduce`` or ``broadcast`` (in op names and status reports)."""
        return KIND_NAMES[self.kind]


class SlotRange(NamedTuple):
    """``length`` slots of one kind from ``first``, of consecutive keys: reduced as one range
    of elements when their data lie back to back in one buffer on every rank (then sliced into
    buckets in place, with no packing copy); a range of one slot otherwise."""

    first: Slot
    length: int = 1

    @property
    def slots(self) -> list[Slot]:
        """The slots of the range, in key order."""
        if self.length == 1:
            return [self.first]
        start = self.first.position
        return slots_at(range(start, start + KINDS * self.length, KINDS))

    @property
    def indices(self) -> range:
        """The registered indices of the range's keys."""
        return range(self.first.index, self.first.index + self.length)


# Every slot made so far, by position. A negotiated round reads one slot per agreed request
# (a hundred or more for a large model) and the queue's thread is on every rank's critical
# path, so each slot is made once and then shared. The table is only ever replaced by a longer
# one, so a thread that took the old one still reads correct slots from it.
_by_position: tuple[Slot, ...] = ()


def slots_at(positions: Iterable[int]) -> list[Slot]:
    """The slots at ``positions`` of the negotiation vector, in that order.

    Example:
        >>> slots_at([3, 0])
        [Slot(index=1, kind=1), Slot(index=0, kind=0)]
    """
    global _by_position
    table, positions = _by_position, list(positions)
    needed = max(positions, default=-1) + 1
    if needed > len(table):
        more = range(len(table), max(needed, 2 * len(table)))
        table = _by_position = table + tuple(Slot(*divmod(p, KINDS)) for p in more)
    return [table[p] for p in positions]


def op_label(store: str, kind: int, keys: Any) -> str:
    """The engine op name of a request of ``kind`` over ``keys`` (profiles, errors)."""
    return (f"kv.{store}.{KIND_NAMES[kind]}[{keys[0]}]" if len(keys) == 1 else
            f"kv.{store}.{KIND_NAMES[kind]}[{keys[0]}..{keys[-1]}]")
