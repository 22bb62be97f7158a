"""Stages 3 and 4 of memory planning (``portable.passes.plan_memory``): co-share and release.

In step order, each step's new storages are placed in a size-keyed free list (best fit;
neighbouring free blocks coalesce), in an arena that starts as one free block of the liveness
lower bound's size and grows at its top when nothing fits; then the storages the step read
for the last time go back to the list. Within a free block a new storage goes next to the
neighbour that outlives it, so that blocks freed together coalesce. With ``parallel=True`` a
block is reused only when that adds no false dependency between steps (``_FalseDependencyGuard``).
"""
from __future__ import annotations

from portable.ir.graph import Node
from portable.passes.memory_placement import FreeList, Layout, StorageTable

__all__ = ["co_share"]

_NEVER = 1 << 62  # the last step of the arena's edges: they outlive every storage




def _chains(nodes: list[Node]) -> list[int]:
    """Partition the steps into chains: a step continues the chain of the first producer of
    its inputs that no other step has continued yet. Steps on one chain are ordered by
    dependency, so reusing memory along a chain adds no dependency."""
    producer: dict[str, int] = {}
    chain: list[int] = []
    continued: set[int] = set()
    for step, node in enumerate(nodes):
        chosen = -1
        for name in node.inputs:
            p = producer.get(name)
            if p is not None and p not in continued:
                continued.add(p)
                chosen = chain[p]
                break
        chain.append(chosen if chosen >= 0 else step)
        for out in node.outputs:
            if out:
                producer[out] = step
    return chain


class _FalseDependencyGuard:
    """Parallel mode: a step may reuse a block released by another step only when it already
    depends on that step: both lie on one chain, or the releaser produced one of its inputs."""

    def __init__(self, nodes: list[Node]) -> None:
        self._nodes = nodes
        self._chain = _chains(nodes)
        self._producer: dict[str, int] = {}  # value -> step that produced it, so far

    def may_reuse(self, releaser: int, step: int) -> bool:
        if releaser < 0 or self._chain[releaser] == self._chain[step]:
            return True
        return any(self._producer.get(name) == releaser for name in self._nodes[step].inputs)

    def ran(self, step: int) -> None:
        for out in self._nodes[step].outputs:
            if out:
                self._producer[out] = step


class _CoShare:
    """Stages 3 and 4 as the steps go by: the free list, the live storages by their start and
    end offsets (to see how long a free block's neighbours live), and the offsets so far."""

    def __init__(self, table: StorageTable, floor: int,
                 guard: _FalseDependencyGuard | None) -> None:
        self._size, self._end = table.size, table.end
        self._free = FreeList(floor, coalesce=guard is None)
        self._guard = guard
        self._live_at: dict[int, int] = {}  # start offset -> live slot
        self._live_to: dict[int, int] = {}  # end offset -> live slot
        self.offsets = [0] * len(table.size)
        self.arena_bytes = 0

    def place(self, slot: int, step: int) -> None:
        """Stage 3: a block for ``slot``, written first at ``step``."""
        need = self._size[slot]
        if not need:
            return  # an empty tensor needs no bytes (offset 0)
        guard = self._guard
        accept = None if guard is None else (lambda releaser: guard.may_reuse(releaser, step))
        block = self._free.best_fit(need, accept)
        offset = self._free.grow(need) if block is None else self._split(block, slot, step)
        self.offsets[slot] = offset
        self.arena_bytes = max(self.arena_bytes, offset + need)
        self._live_at[offset] = slot
        self._live_to[offset + need] = slot

    def release(self, slot: int, step: int) -> None:
        """Stage 4: ``step`` read ``slot`` for the last time."""
        offset, need = self.offsets[slot], self._size[slot]
        if need:
            del self._live_at[offset], self._live_to[offset + need]
            self._free.release(offset, need, step)

    def _split(self, block: tuple[int, int], slot: int, step: int) -> int:
        """Take the free ``block`` for ``slot`` and return the rest; returns the offset. The
        storage goes at the end whose neighbour outlives it (the arena's edges live forever),
        so that the rest is freed together with the other neighbour and coalesces."""
        size, offset = block
        need, end, free = self._size[slot], self._end[slot], self._free
        free.take(offset)
        left = (self._end[self._live_to[offset]] if offset in self._live_to else
                _NEVER if offset == 0 else -1)
        right = (self._end[self._live_at[offset + size]] if offset + size in self._live_at else
                 _NEVER if offset + size == free.top else -1)
        if right >= end and (left < end or right > left):
            if size > need:
                free.release(offset, size - need, step)
            return offset + size - need
        if size > need:
            free.release(offset + need, size - need, step)
        return offset


def co_share(table: StorageTable, slots: list[int], nodes: list[Node], floor: int, *,
              parallel: bool) -> Layout:
    """Stages 3 and 4 in step order, in an arena that starts ``floor`` bytes large (the lower
    bound: what it must reach anyway)."""
    starting: dict[int, list[int]] = {}
    ending: dict[int, list[int]] = {}
    for slot in slots:
        starting.setdefault(table.start[slot], []).append(slot)
        ending.setdefault(table.end[slot], []).append(slot)
    guard = _FalseDependencyGuard(nodes) if parallel else None
    arena = _CoShare(table, floor, guard)
    size = table.size
    for step in range(len(nodes)):
        placing = starting.get(step, ())
        if len(placing) > 1:
            placing = sorted(placing, key=lambda q: -size[q])  # largest first: best fit
        for slot in placing:
            arena.place(slot, step)
        if guard is not None:
            guard.ran(step)
        for slot in ending.get(step, ()):
            arena.release(slot, step)
    return Layout(arena.offsets, arena.arena_bytes)
