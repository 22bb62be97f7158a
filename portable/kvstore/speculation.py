"""Speculative rounds of the collective queue: one collective instead of two when a training
loop agrees on the same keys round after round.

A negotiated round costs two collectives: the negotiation, then the data. Between them every
rank's thread must run Python again, and on a rank whose program thread holds the interpreter
that wait is paid by every other rank, spinning in the data call. Once two negotiated rounds
in a row agreed on the same set of keys, the next round *guesses* that set: each rank sends
the guessed keys' data with two numbers behind it, in the data's own dtype,

* ``1`` if it has every guessed key ready (or stands in with zeros after a ``join``), and
* how many of them it has for real,

and the sum is the verdict, the same on every rank: the guess held when the first number
equals the number of ranks and the second is positive. Then the data are the sums. Otherwise
they are dropped (each rank sent a copy, so nothing was overwritten) and the next round
negotiates as usual.

A guess is armed only for a set that is small (one bucket at most, and ``SPECULATE_MAX_BYTES``),
of allreduces only, of one dtype that counts exactly, and uncompressed. Every condition is a
function of agreed results, so every rank arms, keeps and drops the guess in step.

Example:
    >>> f32 = np.dtype("float32")
    >>> keys = [KeyEntry("w", (2,), 2, f32), KeyEntry("b", (1,), 1, f32)]
    >>> agreed = (Slot(0, ALLREDUCE), Slot(1, ALLREDUCE))
    >>> guess = Guess(limit_bytes=1 << 20)
    >>> guess.observe(agreed, keys, compressing=False); guess.slots is None  # seen once
    True
    >>> guess.observe(agreed, keys, compressing=False); guess.slots == agreed  # seen twice
    True
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.kvstore.fusion import FusionBuffers
from portable.kvstore.requests import Request
from portable.kvstore.slots import ALLREDUCE, KeyEntry, Slot

SPECULATE_MAX_BYTES = 1 << 20


class Guess:
    """The set of slots the next round guesses, and the packing of a speculative round.

    Args:
        limit_bytes: the largest set guessed (a failed guess costs sending it once for nothing).
    """

    def __init__(self, limit_bytes: float) -> None:
        self.limit_bytes = min(float(limit_bytes), SPECULATE_MAX_BYTES)
        self.slots: tuple[Slot, ...] | None = None  # armed guess
        self._last: tuple[Slot, ...] | None = None  # the previous negotiated agreement
        self._buffers = FusionBuffers()

    def observe(self, slots: tuple[Slot, ...], keys: list[KeyEntry], compressing: bool) -> None:
        """Record the slots a negotiated round agreed on (sorted); arm a guess when they
        repeat the previous agreement and qualify."""
        repeated = slots == self._last
        self._last = slots
        self.slots = slots if repeated and not compressing and self._fits(slots, keys) else None

    def drop(self) -> None:
        """The guess failed: negotiate until an agreement repeats again."""
        self.slots = None
        self._last = None

    def _fits(self, slots: tuple[Slot, ...], keys: list[KeyEntry]) -> bool:
        if not slots or any(slot.kind != ALLREDUCE for slot in slots):
            return False
        dtypes = {keys[slot.index].dtype for slot in slots}
        if len(dtypes) != 1:
            return False
        dtype = dtypes.pop()
        if dtype.kind != "f" and not (dtype.kind == "i" and dtype.itemsize >= 4):
            return False  # (the verdict is counted in the data's dtype)
        return sum(keys[slot.index].numel for slot in slots) * dtype.itemsize <= self.limit_bytes

    # -- one speculative round -------------------------------------------------------------
    def heads(self, pending: dict[Slot, Any], joined: bool) -> list[Request | None] | None:
        """This rank's request per guessed slot (None: it stands in with zeros), or None when
        it cannot take part (a guessed key is not ready here). Called with the queue's lock."""
        heads: list[Request | None] = []
        for slot in self.slots or ():
            queue = pending.get(slot)
            head = queue[0] if queue else None
            if head is not None and head.ready_at is not None:
                heads.append(head)
            elif head is None and joined:
                heads.append(None)
            else:
                return None
        return heads

    def pack(self, heads: list[Request | None] | None, keys: list[KeyEntry]) -> np.ndarray:
        """The buffer this rank sends: the guessed keys' data, then the two verdict numbers."""
        slots = self.slots or ()
        dtype = keys[slots[0].index].dtype
        sizes = [keys[slot.index].numel for slot in slots]
        buffer = self._buffers.get(dtype, sum(sizes) + 2)
        if heads is None:
            buffer[-2:] = 0  # (the data are dropped by every rank)
            return buffer
        at = 0
        for head, size in zip(heads, sizes):
            buffer[at:at + size] = 0 if head is None else head.host
            at += size
        buffer[-2] = 1
        buffer[-1] = sum(head is not None for head in heads)
        return buffer

    @staticmethod
    def held(buffer: np.ndarray, ranks: int) -> bool:
        """The verdict of the summed buffer (the same on every rank)."""
        return int(buffer[-2]) == ranks and int(buffer[-1]) > 0

    def unpack(self, buffer: np.ndarray, heads: list[Request | None],
               keys: list[KeyEntry]) -> None:
        """Copy the sums back into this rank's requests."""
        at = 0
        for slot, head in zip(self.slots or (), heads):
            size = keys[slot.index].numel
            if head is not None:
                head.host[:] = buffer[at:at + size]
            at += size
