"""Memory placement: where each storage lives in the one arena, and the plan as data.

The planner's scan (``portable.passes.plan_memory``) groups the values a graph computes into
storages (slots), each with an aligned size and a lifetime: the positions, among the steps
that run, of its first writer and its last reader. Placement gives every planned storage a
byte offset in one arena such that storages alive at the same step never overlap, and then
every value the offset of its storage (views and in-place outputs share their input's).

Here:

- ``FreeList``: the free blocks of an arena that grows at its top, found by size (best fit).
  The scan's stage 3 (co-share, in ``plan_memory``) places storages online with it, choosing
  which blocks may be reused and when storages are released.
- ``sequential_layout``: every storage its own block, one after another (the ``naive`` and
  ``inplace`` strategies).
- ``iterated_greedy``: offline greedy by size (Pisarchyk and Lee 2020; XLA's heap simulator):
  the largest storages first, each in the best-fitting gap among the storages alive at the
  same time, the liveness lower bound acting as a ceiling; after a round, the first storage
  that ended above the bound moves to the front of the order. It stops at the bound, after a
  few rounds, or when its work exceeds a budget linear in the number of storages.

Alignment: every storage's size is rounded up to the alignment, and every layout only adds
sizes (the free list's floor is a sum of sizes too), so every offset is a multiple of it.

Example:
    >>> table = StorageTable(size=[64, 128], start=[0, 1], end=[1, 2], planned=[True, True])
    >>> sequential_layout(table, [0, 1])
    Layout(offsets=[0, 64], arena_bytes=192)
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, NamedTuple, Sequence

from portable.errors import ShapeError
from portable.ir.graph import Node, TensorType

ALIGNMENT = 64
# offline placement examines at most this many (storage, neighbour) pairs per storage in all
# its rounds together, so that planning stays linear however long the lifetimes are
_WORK_PER_STORAGE = 128
_BUCKET_STEPS = 32  # steps per bucket of the offline placement's time index
_ROUNDS = 32  # rounds of the iterated greedy at most


@dataclass
class MemoryPlan:
    """The result of planning: data, not behaviour.

    Attributes:
        strategy: one of ``STRATEGIES``.
        steps: indices (into ``graph.nodes``) of the nodes that run, in order.
        offsets: byte offset in the arena of every planned value (views share their input's).
        storage: storage slot of every planned value (in-place outputs and views share one).
        storage_offsets, storage_sizes: per slot, offset and aligned size in the arena.
        lifetimes: per slot, ``(first step, last step)`` positions in ``steps``.
        aliases: values that live in a graph input's or constant's buffer (views of them, and
            state updates written in place), mapped to that input.
        arena_bytes: the arena holding every planned value.
        naive_bytes: every computed value in its own block (views excepted).
        lower_bound_bytes: the most bytes alive at one step (in-place outputs counted in
            their input's storage).
        timeline: bytes alive at each step under this plan's sharing of storages.
        workspace: per step, the kernel scratch bytes it needs; ``workspace_keys`` the largest
            need per scratch buffer (kernels share one buffer per key), ``workspace_bytes``
            their total.
        categories: category of planned values given one (the others are ``activations``).
        concats: indices (into ``graph.nodes``) of the Concats whose inputs were computed in
            their slices of the output: their steps have nothing left to do.
    """

    strategy: str
    steps: list[int]
    offsets: dict[str, int]
    storage: dict[str, int]
    storage_offsets: list[int]
    storage_sizes: list[int]
    lifetimes: list[tuple[int, int]]
    aliases: dict[str, str]
    arena_bytes: int
    naive_bytes: int
    lower_bound_bytes: int
    timeline: list[int]
    workspace: list[int] = field(default_factory=list)
    workspace_keys: dict[str, int] = field(default_factory=dict)
    categories: dict[str, str] = field(default_factory=dict)
    concats: frozenset[int] = frozenset()

    @property
    def workspace_bytes(self) -> int:
        return sum(self.workspace_keys.values())

    def placement(self, value: str) -> tuple[int, int, int]:
        """``(storage slot, byte offset, bytes)`` of a planned value (its slot's size: values
        sharing a slot in place or as views have the same bytes; a Concat's input computed in
        its slice lies inside its output's slot)."""
        slot = self.storage[value]
        return slot, self.offsets[value], self.storage_sizes[slot]

    def peak_step(self) -> int:
        """The position in ``steps`` where the most bytes are alive."""
        return max(range(len(self.timeline)), key=self.timeline.__getitem__, default=0)

    def bytes_by_category(self, at_step: int | None = None) -> dict[str, int]:
        """Planned bytes per category: alive at ``at_step`` (the peak when None)."""
        step = self.peak_step() if at_step is None else at_step
        seen: dict[int, str] = {}
        for value, slot in self.storage.items():
            seen.setdefault(slot, self.categories.get(value, "activations"))
        totals: dict[str, int] = {}
        for slot, category in seen.items():
            first, last = self.lifetimes[slot]
            if first <= step <= last:
                totals[category] = totals.get(category, 0) + self.storage_sizes[slot]
        return totals

    def summary(self) -> dict:
        """The headline figures as plain data (JSON-ready)."""
        return {"strategy": self.strategy, "arena_bytes": self.arena_bytes,
                "naive_bytes": self.naive_bytes, "lower_bound_bytes": self.lower_bound_bytes,
                "workspace_bytes": self.workspace_bytes, "steps": len(self.steps),
                "storages": len(self.storage_sizes)}


@dataclass
class StorageTable:
    """The storages the planner's scan found (one slot each) and the slot of every value.

    Per-slot lists, indexed by slot:
        size: aligned bytes.
        start, end: lifetime, as positions in the steps (a state input's own buffer, which is
            never written by a step, starts at 0 and ends at -1 unless a step reads it).
        planned: whether it lives in the arena (a state input's own buffer does not).
        first_value: the value it was created for.

    Attributes:
        storage: every value's slot (views and in-place outputs share their input's).
        within: byte offset of a value inside its slot, where not 0 (a Concat's input in its
            slice of the output, and views and in-place outputs of such a value).
        concats: positions (in the steps) of the Concats whose inputs all lie in their slices.
        aliases: values living in a graph input's or constant's buffer, mapped to that input.
        naive_bytes: every computed value in its own block (views excepted).
    """

    size: list[int] = field(default_factory=list)
    start: list[int] = field(default_factory=list)
    end: list[int] = field(default_factory=list)
    planned: list[bool] = field(default_factory=list)
    first_value: list[str] = field(default_factory=list)
    storage: dict[str, int] = field(default_factory=dict)
    within: dict[str, int] = field(default_factory=dict)
    concats: frozenset[int] = frozenset()
    aliases: dict[str, str] = field(default_factory=dict)
    naive_bytes: int = 0

    def add(self, value: str, nbytes: int, start: int, end: int, planned: bool) -> int:
        """A new slot created for ``value``; returns its index."""
        self.size.append(nbytes)
        self.start.append(start)
        self.end.append(end)
        self.planned.append(planned)
        self.first_value.append(value)
        return len(self.size) - 1


class Layout(NamedTuple):
    """Where the storages lie: per slot its byte offset, and the bytes the arena needs."""

    offsets: list[int]
    arena_bytes: int


def aligned_bytes(node: Node, out: str, type_: TensorType | None, alignment: int) -> int:
    """The aligned bytes of output ``out`` of ``node``, whose inferred type is ``type_``.

    Raises:
        ShapeError: the output has no inferred type, or not a static one.
    """
    try:  # the fast path first: this runs for every output of every graph planned
        return -(-math.prod(type_.shape) * type_.dtype.itemsize // alignment) * alignment
    except (AttributeError, TypeError):  # no type, or an unknown dimension: say which
        if type_ is None:
            raise ShapeError(f"node {node.name!r} (op {node.op}): output {out!r} has no "
                             f"inferred type, so it cannot be planned")
        if not type_.is_static:
            raise ShapeError(f"node {node.name!r} (op {node.op}): output {out!r} has type "
                             f"{type_!r}; planning needs static shapes")
        raise


def sequential_layout(table: StorageTable, slots: Sequence[int]) -> Layout:
    """Every storage in ``slots`` its own block, one after another in that order."""
    offsets, arena = [0] * len(table.size), 0
    for slot in slots:
        offsets[slot] = arena
        arena += table.size[slot]
    return Layout(offsets, arena)


# -- the free list of the online placement (stage 3 of the scan) ---------------------------


class FreeList:
    """The free blocks of an arena that grows at its top, found by size (best fit).

    The arena spans ``[0, top)``. It starts ``floor`` bytes large, as one free block (the plan
    reaches the lower bound anyway), and grows at its top when no block fits. Blocks are kept
    sorted by ``(size, offset)`` for best fit, and indexed by their start and end offsets to
    find free neighbours.

    With ``coalesce`` (serial mode) a released block merges with its free neighbours, and one
    that reaches the top above the floor gives its bytes back to the top. Without it
    (parallel mode) blocks stay as released, each remembering the step that released it, so
    that a reuse can be checked for a false dependency.

    Example:
        >>> free = FreeList(floor=256, coalesce=True)
        >>> free.best_fit(64)
        (256, 0)
        >>> free.take(0)
        256
        >>> free.release(64, 192, step=0)  # keep 64 bytes at 0, give the rest back
        >>> free.best_fit(100), free.top
        ((192, 64), 256)
        >>> free.grow(512), free.top  # nothing fits: the block ending at the top grows
        (64, 576)
    """

    def __init__(self, floor: int, coalesce: bool) -> None:
        self.floor = floor
        self.top = floor
        self.coalesce = coalesce
        self.blocks: list[tuple[int, int]] = []  # (size, offset), sorted
        self._size_at: dict[int, int] = {}  # start offset -> size
        self._start_at_end: dict[int, int] = {}  # end offset -> start offset
        self._released_by: dict[int, int] = {}  # start offset -> releasing step (parallel)
        if floor:
            self._add(offset=0, size=floor)

    def best_fit(self, need: int, accept: Callable[[int], bool] | None = None
                 ) -> tuple[int, int] | None:
        """The smallest free block of at least ``need`` bytes, the lowest among equals, as
        ``(size, offset)``: skipping blocks whose releasing step (-1: never released)
        ``accept`` rejects. None when no block fits."""
        blocks = self.blocks
        i = bisect.bisect_left(blocks, (need, -1))
        if accept is not None:
            while i < len(blocks) and not accept(self._released_by.get(blocks[i][1], -1)):
                i += 1
        return blocks[i] if i < len(blocks) else None

    def take(self, offset: int) -> int:
        """Remove the free block at ``offset`` from the list; returns its size."""
        size = self._size_at.pop(offset)
        del self._start_at_end[offset + size]
        del self.blocks[bisect.bisect_left(self.blocks, (size, offset))]
        self._released_by.pop(offset, None)
        return size

    def grow(self, need: int) -> int:
        """``need`` bytes at the top of the arena, when no block fits; returns their offset.
        In serial mode a free block that ends at the top is extended rather than left."""
        if self.coalesce and self.top in self._start_at_end:
            offset = self._start_at_end[self.top]
            self.take(offset)
        else:
            offset = self.top
        self.top = offset + need
        return offset

    def release(self, offset: int, size: int, step: int) -> None:
        """Give ``size`` bytes at ``offset`` back, released by ``step``."""
        if self.coalesce:
            if offset + size in self._size_at:
                size += self.take(offset + size)
            if offset in self._start_at_end:
                below = self._start_at_end[offset]
                size += self.take(below)
                offset = below
            if offset + size == self.top:
                if offset >= self.floor:
                    self.top = offset
                    return
                # the arena never shrinks below its floor: there the block stays a block
                self.top, size = self.floor, self.floor - offset
        else:
            self._released_by[offset] = step
        self._add(offset, size)

    def _add(self, offset: int, size: int) -> None:
        self._size_at[offset] = size
        self._start_at_end[offset + size] = offset
        bisect.insort(self.blocks, (size, offset))


# -- offline greedy-by-size placement --------------------------------------------------------


class _GreedyRound(NamedTuple):
    """One round of greedy by size: the layout (None when the work exceeded the budget), the
    first storage placed above the ceiling (None when all fit) and the work done."""

    layout: Layout | None
    first_over: int | None
    work: int


def _greedy_by_size(table: StorageTable, order: Sequence[int], steps: int, ceiling: int,
                    budget: int) -> _GreedyRound:
    """Place storages in ``order``, each at the best-fitting gap among the placed storages
    alive at the same time (the space up to ``ceiling`` counts as a gap). Storages are found
    through buckets of ``_BUCKET_STEPS`` steps, so that a storage meets only those near it in
    time."""
    size, start, end = table.size, table.start, table.end
    buckets: list[list[int]] = [[] for _ in range(steps // _BUCKET_STEPS + 1)]
    seen = [-1] * len(size)  # the storage being placed when a neighbour was last collected
    offsets = [0] * len(size)
    arena = work = 0
    first_over = None
    for slot in order:
        s, e, need = start[slot], end[slot], size[slot]
        near = []
        for b in range(s // _BUCKET_STEPS, e // _BUCKET_STEPS + 1):
            bucket = buckets[b]
            work += len(bucket)
            for q in bucket:
                if seen[q] != slot and start[q] <= e and s <= end[q]:
                    seen[q] = slot
                    near.append((offsets[q], offsets[q] + size[q]))
        if work > budget:
            return _GreedyRound(None, None, work)
        near.sort()
        near.append((max(ceiling, arena), 0))  # the space up to the ceiling is a gap too
        best_gap = best_at = -1
        prev = 0
        for lo, hi in near:
            gap = lo - prev
            if gap >= need and (best_gap < 0 or gap < best_gap):
                best_gap, best_at = gap, prev
            if hi > prev:
                prev = hi
        offsets[slot] = best_at if best_at >= 0 else prev
        arena = max(arena, offsets[slot] + need)
        if first_over is None and offsets[slot] + need > ceiling:
            first_over = slot
        for b in range(s // _BUCKET_STEPS, e // _BUCKET_STEPS + 1):
            buckets[b].append(slot)
    return _GreedyRound(Layout(offsets, arena), first_over, work)


def iterated_greedy(table: StorageTable, slots: Sequence[int], steps: int, ceiling: int,
                    best: Layout) -> Layout:
    """Greedy by size, repeated: after each round the first storage that did not fit under
    ``ceiling`` (the lower bound) moves to the front of the order. Stops when all fit, after
    ``_ROUNDS`` rounds or when the work exceeds ``_WORK_PER_STORAGE`` per storage.

    Args:
        table: the storages, with their sizes and lifetimes.
        slots: the planned storages.
        steps: how many steps run.
        ceiling: the bytes the arena should not exceed (the lower bound).
        best: the layout to beat (the online free list's).

    Returns:
        The smallest layout found (``best`` unless a round beat it).
    """
    size, start = table.size, table.start
    budget = _WORK_PER_STORAGE * len(slots)
    order = sorted(slots, key=lambda q: (-size[q], start[q]))
    for _ in range(_ROUNDS):
        layout, first_over, work = _greedy_by_size(table, order, steps, ceiling, budget)
        budget -= work
        if layout is None:
            break
        if layout.arena_bytes < best.arena_bytes:
            best = layout
        if first_over is None or budget <= 0:
            break
        order.remove(first_over)
        order.insert(0, first_over)
    return best


# -- from storages to values ------------------------------------------------------------------


def value_placement(table: StorageTable, layout: Layout) -> tuple[dict[str, int], dict[str, int]]:
    """Every value held in a planned storage (aliases of inputs and constants excepted) mapped
    to its byte offset, and to its storage slot."""
    offsets: dict[str, int] = {}
    slots: dict[str, int] = {}
    planned, aliases, within = table.planned, table.aliases, table.within
    for name, slot in table.storage.items():
        if planned[slot] and name not in aliases:
            offsets[name] = layout.offsets[slot] + within.get(name, 0)
            slots[name] = slot
    return offsets, slots


def workspace_needs(step_index: Sequence[int],
                    workspace: Mapping[int, int | Mapping[str, int]]
                    ) -> tuple[list[int], dict[str, int]]:
    """Kernel scratch: per step the bytes it needs, and per scratch buffer name the largest
    need (kernels share one buffer per name; plain bytes are named ``scratch``)."""
    per_step: list[int] = []
    keys: dict[str, int] = {}
    for index in step_index:
        need = workspace.get(index, 0)
        need = need if isinstance(need, Mapping) else ({"scratch": need} if need else {})
        per_step.append(int(sum(need.values())))
        for key, nbytes in need.items():
            keys[key] = max(keys.get(key, 0), int(nbytes))
    return per_step, keys
