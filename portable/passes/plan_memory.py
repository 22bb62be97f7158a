"""Memory planning: a storage slot, byte offset and size for every value a graph computes.

Stages (each one pass over the steps, so planning is linear in the number of nodes):

1. Reference counts. Count how many steps read each value (inputs an op declares as
   ``ignored_inputs`` do not count: Shape reads only a shape). Graph outputs and the values
   in ``keep`` get a count that never reaches zero: they stay valid after the last step.
2. In-place pairs declared by ops, and views. Scanning the steps in order, an output may take
   over the storage of an input that its op pairs with it (``OpDef.inplace``) when this step is
   that storage's last reader, the types match and the storage is not kept. A view op's
   output (``OpDef.view``) always aliases its input's storage. A state update (a value in
   ``state_updates``) may be written in place into its state input's own buffer the same way.
   Every storage gets its lifetime (the steps from its producer to its last reader), and the
   liveness lower bound follows: the most bytes alive at one step of this order, which no
   placement can beat.
3. Co-share: a size-keyed free list (best fit; neighbouring free blocks coalesce). The
   arena starts as one free block of the lower bound's size and grows at its top when nothing
   fits. In step order, each step's outputs are placed, then the storages it read for the last
   time are released to the free list (release at last use). Within a free block the new
   storage goes next to the neighbour that outlives it, so that blocks freed together
   coalesce. With ``parallel=True`` a block is reused only when that creates no false
   dependency: the step that released it must already precede the new writer through the
   graph (it lies on the writer's chain, or produced one of its inputs). Without it, the plan
   runs on one stream in step order, where the order already is a dependency.
4. In serial mode every storage's lifetime is known in full beforehand, so when the free list
   ends more than 1% above the lower bound an offline placement is tried: greedy by size
   (Pisarchyk and Lee 2020; XLA's heap simulator: the largest storages first, each in the
   best-fitting gap among the storages alive at the same time, the lower bound acting as a
   ceiling), iterated: after a round, the first storage that ended above the bound moves to
   the front of the order. It stops at the bound, after a few rounds, or when its work
   exceeds a budget linear in the number of storages; the smaller placement wins.

Views alias, so a view's offset is its input's. Graph inputs and constants are never planned.
Byte figures count every computed value (intermediates and outputs): ``naive`` gives each its
own block, ``inplace`` only applies stage 2, ``coshare`` only stage 3/4, ``both`` all.

Example:
    >>> plan = plan_memory(graph)              # doctest: +SKIP
    >>> plan.offsets["conv1_output"], plan.arena_bytes, plan.lower_bound_bytes  # doctest: +SKIP
"""
from __future__ import annotations

import bisect
import gc
import math
from dataclasses import dataclass, field
from typing import Collection, Iterable, Mapping

from portable.errors import GraphError, ShapeError
from portable.ir.graph import Graph, Node
from portable.ops import registry
from portable.passes.infer import TypeInfo, infer_types

STRATEGIES = ("naive", "inplace", "coshare", "both")
ALIGNMENT = 64
_PINNED = 1 << 60  # a reference count that never drops to zero
# offline placement examines at most this many (storage, neighbour) pairs per storage in all
# its rounds together, so that planning stays linear however long the lifetimes are
_WORK_PER_STORAGE = 128
# the offline placement runs only when the free list ends further than this above the bound
_GOOD_ENOUGH = 1.01


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

    @property
    def workspace_bytes(self) -> int:
        return sum(self.workspace_keys.values())

    def placement(self, value: str) -> tuple[int, int, int]:
        """``(storage slot, byte offset, bytes)`` of a planned value (its slot's size: values
        sharing a slot in place or as views have the same bytes)."""
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


def _align(nbytes: int, alignment: int) -> int:
    return -(-nbytes // alignment) * alignment


def _aligned_bytes(node: Node, out: str, type_, alignment: int) -> int:
    if type_ is None:
        raise ShapeError(f"node {node.name!r} (op {node.op}): output {out!r} has no inferred "
                         f"type, so it cannot be planned")
    if not type_.is_static:
        raise ShapeError(f"node {node.name!r} (op {node.op}): output {out!r} has type "
                         f"{type_!r}; planning needs static shapes")
    return _align(math.prod(type_.shape) * type_.dtype.itemsize, alignment)


class _Facets:
    """The op facets the scan needs, looked up once per op name."""

    __slots__ = ("inplace", "view", "ignored")

    def __init__(self, op: registry.OpDef) -> None:
        self.inplace = op.inplace
        self.view = op.view
        self.ignored = frozenset(op.ignored_inputs)


def running_steps(graph: Graph, known: Collection[str]) -> list[int]:
    """Indices of the nodes that run: those with an output not known while planning."""
    steps = []
    for i, node in enumerate(graph.nodes):
        for out in node.outputs:
            if out and out not in known:
                steps.append(i)
                break
    return steps


# -- stages 1 and 2: reference counts, in-place pairs, views, lifetimes ----------------------


@dataclass
class _Storages:
    """Storages found by the scan: per slot its aligned size, lifetime (step positions) and
    whether it is planned (a state input's own buffer is not); and every value's slot."""

    size: list[int] = field(default_factory=list)
    start: list[int] = field(default_factory=list)
    end: list[int] = field(default_factory=list)
    planned: list[bool] = field(default_factory=list)
    first_value: list[str] = field(default_factory=list)
    storage: dict[str, int] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    naive_bytes: int = 0


def _scan(nodes: list[Node], types: Mapping, pinned: set[str], state_updates: Mapping[str, str],
          inplace: bool, alignment: int) -> _Storages:
    """Stages 1 and 2 in one walk over the steps (written with locals: it is the hot loop)."""
    facets: dict[str, _Facets] = {}
    reads: dict[str, int] = {}
    for node in nodes:
        f = facets.get(node.op)
        if f is None:
            f = facets[node.op] = _Facets(registry.get(node.op, node=node))
        if f.ignored:
            for index, name in enumerate(node.inputs):
                if name and index not in f.ignored:
                    reads[name] = reads.get(name, 0) + 1
        else:
            for name in node.inputs:
                if name:
                    reads[name] = reads.get(name, 0) + 1
    for name in pinned:
        reads[name] = reads.get(name, 0) + _PINNED
    writers = _state_writers(nodes, facets, state_updates, reads) if state_updates else {}
    out = _Storages()
    size, start, end, planned = out.size, out.start, out.end, out.planned
    first_value, storage, aliases = out.first_value, out.storage, out.aliases
    refs: list[int] = []
    # a state input's own buffer may receive its update in place: it is a storage, unplanned
    for state in state_updates:
        storage[state] = len(size)
        size.append(0), start.append(0), end.append(-1), planned.append(False)
        first_value.append(state), refs.append(reads.get(state, 0))
    naive = 0
    for step, node in enumerate(nodes):
        f = facets[node.op]
        inputs = node.inputs
        claimed = None
        for k, name in enumerate(node.outputs):
            if not name:
                continue
            if k == 0 and f.view and inputs and inputs[0]:
                source = inputs[0]
                slot = storage.get(source)
                if slot is None or not planned[slot]:
                    aliases[name] = aliases.get(source, source)
                    if slot is None:
                        continue
                storage[name] = slot
                refs[slot] += reads.get(name, 0)
                continue
            type_ = types.get(name)
            try:
                nbytes = -(-math.prod(type_.shape) * type_.dtype.itemsize // alignment) * alignment
            except (AttributeError, TypeError):  # no type, or an unknown dimension
                nbytes = _aligned_bytes(node, name, type_, alignment)
            naive += nbytes
            slot = None
            if inplace and f.inplace:
                slot = _inplace_slot(node, f, k, name, type_, types, out, refs, claimed,
                                     writers)
            if slot is None:
                slot = len(size)
                size.append(nbytes), start.append(step), end.append(step)
                planned.append(True), first_value.append(name), refs.append(0)
            elif not planned[slot]:
                aliases[name] = first_value[slot]
            if claimed is None:
                claimed = [slot]
            else:
                claimed.append(slot)
            storage[name] = slot
            refs[slot] += reads.get(name, 0)
        ignored = f.ignored
        for index, name in enumerate(inputs):
            if name and (not ignored or index not in ignored):
                slot = storage.get(name)
                if slot is not None:
                    refs[slot] -= 1
                    end[slot] = step
    last = len(nodes) - 1
    for slot, count in enumerate(refs):
        if count > 0:
            end[slot] = max(last, start[slot])
    out.naive_bytes = naive
    return out


def _state_writers(nodes, facets, state_updates, reads) -> dict[str, str]:
    """The values that may be written into a state input's buffer: walking back from the
    state's update through in-place pairs and values read once, to the state itself
    (``m_new = Add(Mul(m, 0.9), g)``: both the product and ``m_new`` may live in ``m``)."""
    producer = {out: node for node in nodes for out in node.outputs if out}
    writers: dict[str, str] = {}
    for state, value in state_updates.items():
        chain, current = [], value
        while current in producer and len(chain) < len(nodes):
            node = producer[current]
            chain.append(current)
            k = node.outputs.index(current)
            sources = [node.inputs[i] for i, o in facets[node.op].inplace
                       if o == k and i < len(node.inputs) and node.inputs[i]]
            if state in sources:
                writers.update((v, state) for v in chain)
                break
            current = next((v for v in sources if reads.get(v) == 1), None)
    return writers


def _inplace_slot(node, f, k, name, type_, types, found: _Storages, refs, claimed, writers):
    """A storage that output ``k`` (value ``name``) may take over in place, or None."""
    storage = found.storage
    for in_index, out_index in f.inplace:
        if out_index != k or in_index >= len(node.inputs) or not node.inputs[in_index]:
            continue
        source = node.inputs[in_index]
        slot = storage.get(source)
        if slot is None or (claimed and slot in claimed):
            continue
        if not found.planned[slot] and writers.get(name) != found.first_value[slot]:
            continue  # only the state's own update (and its chain) may overwrite it
        source_type = types.get(source)
        if source_type is not type_ and source_type != type_:
            continue
        # this step must be the storage's last reader, reading it through one value only
        own = 0
        for i, other in enumerate(node.inputs):
            if other and i not in f.ignored and storage.get(other) == slot:
                if other != source:
                    own = -1
                    break
                own += 1
        if refs[slot] == own:
            return slot
    return None


def _timeline(size: list[int], start: list[int], end: list[int], planned: list[bool],
              steps: int) -> list[int]:
    delta = [0] * (steps + 1)
    for s, a, b, p in zip(size, start, end, planned):
        if p and b >= a:
            delta[a] += s
            delta[b + 1] -= s
    alive, total = [], 0
    for d in delta[:steps]:
        total += d
        alive.append(total)
    return alive


# -- stage 3: the size-keyed free list ------------------------------------------------------


def _colors(nodes: list[Node]) -> list[int]:
    """Partition the steps into chains: a step continues the chain of the first producer of
    its inputs that no other step has continued yet. Steps on one chain are ordered by
    dependency, so reusing memory along a chain adds no dependency."""
    producer: dict[str, int] = {}
    color: list[int] = []
    continued: set[int] = set()
    for step, node in enumerate(nodes):
        chosen = -1
        for name in node.inputs:
            p = producer.get(name)
            if p is not None and p not in continued:
                continued.add(p)
                chosen = color[p]
                break
        color.append(chosen if chosen >= 0 else step)
        for out in node.outputs:
            if out:
                producer[out] = step
    return color


def _free_list(size, start, end, order, steps, floor=0, nodes=None, parallel=False):
    """Online placement in step order, in an arena that starts ``floor`` bytes large (the
    lower bound: what it must reach anyway) and grows at its top; returns (offsets, the
    bytes used)."""
    by_start: dict[int, list[int]] = {}
    by_end: dict[int, list[int]] = {}
    for slot in order:
        by_start.setdefault(start[slot], []).append(slot)
        by_end.setdefault(end[slot], []).append(slot)
    free: list[tuple[int, int]] = []  # (size, offset), sorted
    free_at: dict[int, int] = {}  # offset -> size
    free_end: dict[int, int] = {}  # end offset -> offset
    released_by: dict[int, int] = {}  # offset -> releasing step (parallel mode only)
    live_lo: dict[int, int] = {}  # offset -> slot
    live_hi: dict[int, int] = {}  # end offset -> slot
    offsets = [0] * len(size)
    top = floor
    arena = 0
    never = 1 << 62
    colors = _colors(nodes) if parallel else None
    producers: dict[str, int] = {}
    if floor:
        free_at[0] = floor
        free_end[floor] = 0
        free.append((floor, 0))

    def take(offset: int) -> int:
        s = free_at.pop(offset)
        del free_end[offset + s]
        del free[bisect.bisect_left(free, (s, offset))]
        return s

    def give(offset: int, s: int, releaser: int) -> None:
        nonlocal top
        if not parallel:
            if offset + s in free_at:
                s += take(offset + s)
            if offset in free_end:
                below = free_end[offset]
                s += take(below)
                offset = below
            if offset + s == top:
                if offset >= floor:
                    top = offset
                    return
                top, s = floor, floor - offset  # below the floor the block stays a block
        else:
            released_by[offset] = releaser
        free_at[offset] = s
        free_end[offset + s] = offset
        bisect.insort(free, (s, offset))

    def usable(offset: int, step: int) -> bool:
        releaser = released_by.get(offset, -1)
        if releaser < 0 or colors[releaser] == colors[step]:
            return True
        return any(producers.get(name) == releaser for name in nodes[step].inputs)

    for step in range(steps):
        starting = by_start.get(step, ())
        if len(starting) > 1:
            starting = sorted(starting, key=lambda q: -size[q])
        for slot in starting:
            need = size[slot]
            if not need:
                continue  # an empty tensor needs no bytes (offset 0)
            i = bisect.bisect_left(free, (need, -1))
            if parallel:
                while i < len(free) and not usable(free[i][1], step):
                    i += 1
            if i < len(free):
                s, o = free[i]
                take(o)
                released_by.pop(o, None)
                left = end[live_hi[o]] if o in live_hi else (never if o == 0 else -1)
                right = (end[live_lo[o + s]] if o + s in live_lo else
                         never if o + s == top else -1)
                e = end[slot]
                if right >= e and (left < e or right > left):
                    offsets[slot] = o + s - need
                    if s > need:
                        give(o, s - need, step)
                else:
                    offsets[slot] = o
                    if s > need:
                        give(o + need, s - need, step)
            elif top in free_end and not parallel:  # grow the free block below the top
                offsets[slot] = free_end[top]
                take(offsets[slot])
                top = offsets[slot] + need
            else:
                offsets[slot] = top
                top += need
            arena = max(arena, offsets[slot] + need)
            live_lo[offsets[slot]] = slot
            live_hi[offsets[slot] + need] = slot
        if parallel:
            for out in nodes[step].outputs:
                if out:
                    producers[out] = step
        for slot in by_end.get(step, ()):
            o, need = offsets[slot], size[slot]
            if need:
                del live_lo[o], live_hi[o + need]
                give(o, need, step)
    return offsets, arena


# -- stage 4: offline greedy-by-size placement --------------------------------------------


def _greedy_by_size(size, start, end, order, steps, ceiling, budget):
    """Place storages in ``order``, each at the best-fitting gap among the placed storages
    alive at the same time (the space up to ``ceiling`` counts as a gap). Returns offsets,
    arena bytes, the first storage placed above ``ceiling`` (or None) and the work done; the
    offsets are None when the work exceeded ``budget``."""
    width = 32  # steps per bucket of the time index
    buckets: list[list[int]] = [[] for _ in range(steps // width + 1)]
    seen = [-1] * len(size)
    offsets = [0] * len(size)
    arena = work = 0
    first_over = None
    for slot in order:
        s, e, need = start[slot], end[slot], size[slot]
        near = []
        for b in range(s // width, e // width + 1):
            bucket = buckets[b]
            work += len(bucket)
            for q in bucket:
                if seen[q] != slot and start[q] <= e and s <= end[q]:
                    seen[q] = slot
                    near.append((offsets[q], offsets[q] + size[q]))
        if work > budget:
            return None, None, None, work
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
        for b in range(s // width, e // width + 1):
            buckets[b].append(slot)
    return offsets, arena, first_over, work


def _iterated_greedy(size, start, end, slots, steps, bound, best, budget, rounds=32):
    """Greedy by size, repeated: after each round the first storage that did not fit under
    the lower bound moves to the front of the order (an iterated greedy). Returns the best
    (offsets, arena), starting from ``best``."""
    order = sorted(slots, key=lambda q: (-size[q], start[q]))
    for _ in range(rounds):
        offsets, arena, first_over, work = _greedy_by_size(size, start, end, order, steps,
                                                           bound, budget)
        budget -= work
        if offsets is None:
            break
        if arena < best[1]:
            best = (offsets, arena)
        if first_over is None or budget <= 0:
            break
        order.remove(first_over)
        order.insert(0, first_over)
    return best


# -- the planner ---------------------------------------------------------------------------


def plan_memory(graph: Graph, info: TypeInfo | None = None, *, strategy: str = "both",
                keep: Iterable[str] = (), state_updates: Mapping[str, str] | None = None,
                categories: Mapping[str, str] | None = None,
                workspace: Mapping[int, int | Mapping[str, int]] | None = None,
                alignment: int = ALIGNMENT,
                parallel: bool = False) -> MemoryPlan:
    """Plan where every value ``graph`` computes lives in one arena.

    Args:
        graph: the graph; its nodes run in their order.
        info: its type analysis (computed when None); values known while planning are
            constants and are not planned, nor are nodes whose outputs are all known.
        strategy: ``naive``, ``inplace``, ``coshare`` or ``both``.
        keep: values that must stay valid after the last step besides the graph outputs.
        state_updates: ``state input -> updated value``; the update may overwrite its state
            input's buffer in place (when its op pairs them and nothing reads the old value
            later). Such values are reported in ``aliases``, not planned.
        categories: category of computed values (default ``activations``).
        workspace: kernel scratch per node index: bytes, or bytes per scratch buffer name
            (``{"columns": ..., "padded": ...}``; plain bytes are named ``scratch``).
        alignment: every storage starts at a multiple of this many bytes.
        parallel: only reuse memory where that adds no dependency between steps.

    Returns:
        A MemoryPlan.

    Example:
        >>> plan = plan_memory(graph, strategy="both")   # doctest: +SKIP
        >>> plan.arena_bytes <= plan.naive_bytes           # doctest: +SKIP
        True
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown memory strategy {strategy!r}; use one of {STRATEGIES}")
    info = info if info is not None else infer_types(graph)
    # The planner allocates many small objects and no cycles: pausing the cyclic collector
    # saves a third of its time on large graphs.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _plan(graph, info, strategy, keep, state_updates, categories, workspace,
                     alignment, parallel)
    finally:
        if collecting:
            gc.enable()


def _plan(graph, info, strategy, keep, state_updates, categories, workspace, alignment,
          parallel) -> MemoryPlan:
    known = info.values.keys()
    step_index = running_steps(graph, known)
    nodes = [graph.nodes[i] for i in step_index]
    pinned = set(graph.outputs) | set(keep)
    missing = [name for name in pinned if name not in info.types]
    if missing:
        raise GraphError(f"graph {graph.name!r}: cannot keep {missing[:3]}: no such value")
    updates = dict(state_updates or {})
    scan = _scan(nodes, info.types, pinned, updates, strategy in ("inplace", "both"), alignment)
    size, start, end, planned = scan.size, scan.start, scan.end, scan.planned
    steps = len(nodes)
    slots = [s for s in range(len(size)) if planned[s]]
    timeline = _timeline(size, start, end, planned, steps)
    bound = max(timeline, default=0)
    if strategy in ("naive", "inplace"):
        offsets, arena = [0] * len(size), 0
        for slot in slots:
            offsets[slot] = arena
            arena += size[slot]
    else:
        offsets, arena = _free_list(size, start, end, slots, steps, bound, nodes, parallel)
        if not parallel and arena > _GOOD_ENOUGH * bound:
            budget = _WORK_PER_STORAGE * len(slots)
            offsets, arena = _iterated_greedy(size, start, end, slots, steps, bound,
                                              (offsets, arena), budget)
    if strategy in ("naive", "coshare"):
        # the lower bound counts in-place outputs in their input's storage: the best any
        # strategy reaches for this order
        bound = _inplace_bound(nodes, info, pinned, updates, alignment)
    value_offsets, value_storage = {}, {}
    aliases = scan.aliases
    for name, slot in scan.storage.items():
        if planned[slot] and name not in aliases:
            value_offsets[name] = offsets[slot]
            value_storage[name] = slot
    per_step, keys = [], {}
    for index in step_index:
        need = (workspace or {}).get(index, 0)
        need = need if isinstance(need, Mapping) else ({"scratch": need} if need else {})
        per_step.append(int(sum(need.values())))
        for key, nbytes in need.items():
            keys[key] = max(keys.get(key, 0), int(nbytes))
    return MemoryPlan(
        strategy=strategy, steps=step_index, offsets=value_offsets, storage=value_storage,
        storage_offsets=offsets, storage_sizes=size, lifetimes=list(zip(start, end)),
        aliases=aliases, arena_bytes=arena, naive_bytes=scan.naive_bytes,
        lower_bound_bytes=bound, timeline=timeline,
        workspace=per_step, workspace_keys=keys,
        categories={k: v for k, v in (categories or {}).items() if k in value_storage})


def _inplace_bound(nodes, info, pinned, updates, alignment) -> int:
    scan = _scan(nodes, info.types, pinned, updates, True, alignment)
    return max(_timeline(scan.size, scan.start, scan.end, scan.planned, len(nodes)),
               default=0)
