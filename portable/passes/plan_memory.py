"""Memory planning: a storage slot, byte offset and size for every value a graph computes.

One linear scan over the steps (the nodes that run, in order), in four stages; each is a single
pass, so planning is linear in the number of nodes:

1. Reference counts. Count how many steps read each value (inputs an op declares as
   ``ignored_inputs`` do not count: Shape reads only a shape). Graph outputs and the values
   in ``keep`` get a count that never reaches zero: they stay valid after the last step.
2. In-place pairs declared by ops, and views. Scanning the steps in order, an output may take
   over the storage of an input that its op pairs with it (``OpDef.inplace``) when this step is
   that storage's last reader, the types match and the storage is not kept. A view op's
   output (``OpDef.view``) always aliases its input's storage. A state update (a value in
   ``state_updates``) may be written in place into its state input's own buffer the same way.
   Concat without a copy (``portable.passes.concat_slices``): a Concat's inputs may be
   computed straight into their slices of its output's storage, each at a byte offset in it,
   when they lie there one after another (batch 1, channels); its step then has nothing left
   to do (``MemoryPlan.concats``).
   Every storage gets its lifetime (the steps from its producer to its last reader), and the
   liveness lower bound follows: the most bytes alive at one step of this order, which no
   placement can beat.
3. Co-share (``portable.passes.co_share``): a size-keyed free list (best fit; neighbouring
   free blocks coalesce). The arena starts as one free block of the lower bound's size and
   grows at its top when nothing fits. In step order, each step's outputs are placed; within
   a free block the new storage goes next to the neighbour that outlives it, so that blocks
   freed together coalesce. With ``parallel=True`` a block is reused only when that creates
   no false dependency: the step that released it must already precede the new writer
   through the graph (it lies on the writer's chain, or produced one of its inputs). Without
   it, the plan runs on one stream in step order, where the order already is a dependency.
4. Release at last use: after a step's outputs are placed, the storages it read for the last
   time go back to the free list.

Invariants: a storage is alive from its first writer to its last reader (to the last step when
pinned); two storages alive at the same step never overlap; an output shares an input's storage
only as a view or through an in-place pair, at that storage's last read (at the input's own
offset in it), or as a Concat's input in its slice; the arena is never below the lower
bound. Placement (``portable.passes.memory_placement``) turns storages into
offsets: in serial mode, when the free list ends more than 1% above the lower bound, an offline
greedy-by-size placement is tried too and the smaller arena wins.

Views alias, so a view's offset is its input's. Graph inputs and constants are never planned,
nor are string tensors: an object array holds references to Python str, which cannot live in a
byte arena, so each gets its own host array from the executor (``CompiledGraph``) and no
storage here (a view of one aliases it, as a view of a graph input does).
Byte figures count every computed value (intermediates and outputs): ``naive`` gives each its
own block, ``inplace`` only applies stage 2, ``coshare`` only stages 3 and 4, ``both`` all.

Example:
    >>> plan = plan_memory(graph)              # doctest: +SKIP
    >>> plan.offsets["conv1_output"], plan.arena_bytes, plan.lower_bound_bytes  # doctest: +SKIP
"""
from __future__ import annotations

import gc
import math
from typing import Collection, Iterable, Mapping, NamedTuple

from portable.dtypes import STRING
from portable.errors import GraphError
from portable.ir.graph import Graph, Node, TensorType
from portable.ops import registry
from portable.passes.co_share import co_share
from portable.passes.concat_slices import ConcatSlices, concat_slices
from portable.passes.infer import TypeInfo, infer_types
from portable.passes.memory_placement import (ALIGNMENT, Layout, MemoryPlan,
                                              StorageTable, aligned_bytes, iterated_greedy,
                                              sequential_layout, value_placement,
                                              workspace_needs)

__all__ = ["ALIGNMENT", "STRATEGIES", "MemoryPlan", "plan_memory", "running_steps"]

STRATEGIES = ("naive", "inplace", "coshare", "both")
_PINNED = 1 << 60  # a reference count that never drops to zero
# the offline placement runs only when the free list ends further than this above the bound
_GOOD_ENOUGH = 1.01


class _Options(NamedTuple):
    """``plan_memory``'s keyword arguments, defaults filled in."""

    strategy: str
    keep: tuple[str, ...]
    state_updates: dict[str, str]
    categories: Mapping[str, str]
    workspace: Mapping[int, int | Mapping[str, int]]
    alignment: int
    parallel: bool


class _ScanRules(NamedTuple):
    """What the scan may share: values pinned past the last step, state inputs whose update
    may overwrite them, whether op-declared in-place pairs apply, whether Concat inputs may
    be computed in their slices, and the alignment."""

    pinned: set[str]
    state_updates: Mapping[str, str]
    inplace: bool
    alignment: int
    concat_slices: bool = False


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
    options = _Options(strategy, tuple(keep), dict(state_updates or {}), categories or {},
                       workspace or {}, alignment, parallel)
    # The planner allocates many small objects and no cycles: pausing the cyclic collector
    # saves a third of its time on large graphs.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _plan(graph, info, options)
    finally:
        if collecting:
            gc.enable()


def running_steps(graph: Graph, known: Collection[str]) -> list[int]:
    """Indices of the nodes that run: those with an output not known while planning."""
    steps = []
    for i, node in enumerate(graph.nodes):
        for out in node.outputs:
            if out and out not in known:
                steps.append(i)
                break
    return steps


def _plan(graph: Graph, info: TypeInfo, options: _Options) -> MemoryPlan:
    """The four stages, the placement and the plan as data (the collector paused)."""
    step_index = running_steps(graph, info.values.keys())
    nodes = [graph.nodes[i] for i in step_index]
    pinned = set(graph.outputs) | set(options.keep)
    missing = [name for name in pinned if name not in info.types]
    if missing:
        raise GraphError(f"graph {graph.name!r}: cannot keep {missing[:3]}: no such value")
    # (not in parallel mode: the slot is placed where its first writer may reuse a block,
    # and the Concat's other inputs, on other branches, need not depend on its releaser)
    inplace = options.strategy in ("inplace", "both")
    rules = _ScanRules(pinned, options.state_updates, inplace, options.alignment,
                       inplace and not options.parallel)
    table = _scan(nodes, info.types, rules)
    timeline = _liveness(table, len(nodes))
    bound = max(timeline, default=0)
    layout = _lay_out(table, nodes, bound, options)
    if options.strategy in ("naive", "coshare"):
        # the lower bound counts in-place outputs in their input's storage: the best any
        # strategy reaches for this order
        with_inplace = _scan(nodes, info.types, rules._replace(inplace=True))
        bound = max(_liveness(with_inplace, len(nodes)), default=0)
    value_offsets, value_storage = value_placement(table, layout)
    per_step, keys = workspace_needs(step_index, options.workspace)
    return MemoryPlan(
        strategy=options.strategy, steps=step_index, offsets=value_offsets,
        storage=value_storage, storage_offsets=layout.offsets, storage_sizes=table.size,
        lifetimes=list(zip(table.start, table.end)), aliases=table.aliases,
        arena_bytes=layout.arena_bytes, naive_bytes=table.naive_bytes,
        lower_bound_bytes=bound, timeline=timeline, workspace=per_step, workspace_keys=keys,
        categories={k: v for k, v in options.categories.items() if k in value_storage},
        concats=frozenset(step_index[position] for position in table.concats))


def _lay_out(table: StorageTable, nodes: list[Node], bound: int, options: _Options) -> Layout:
    """Offsets for the planned storages: one block each, or stages 3 and 4 (with the offline
    placement as a second try in serial mode)."""
    slots = [s for s in range(len(table.size)) if table.planned[s]]
    if options.strategy in ("naive", "inplace"):
        return sequential_layout(table, slots)
    online = co_share(table, slots, nodes, bound, parallel=options.parallel)
    if options.parallel or online.arena_bytes <= _GOOD_ENOUGH * bound:
        return online
    return iterated_greedy(table, slots, len(nodes), bound, online)


# -- stages 1 and 2: reference counts, in-place pairs, views, lifetimes ----------------------


class _Facets:
    """The op facets the scan needs, looked up once per op name."""

    __slots__ = ("inplace", "view", "ignored")

    def __init__(self, op: registry.OpDef) -> None:
        self.inplace = op.inplace
        self.view = op.view
        self.ignored = frozenset(op.ignored_inputs)


def _scan(nodes: list[Node], types: Mapping[str, TensorType], rules: _ScanRules
          ) -> StorageTable:
    """Stages 1 and 2: the storages, their lifetimes and every value's storage."""
    facets: dict[str, _Facets] = {}
    for node in nodes:
        if node.op not in facets:
            facets[node.op] = _Facets(registry.get(node.op, node=node))
    reads = _reference_counts(nodes, facets, rules.pinned)
    writers = (_state_writers(nodes, facets, rules.state_updates, reads)
               if rules.state_updates else {})
    slices = ConcatSlices({}, frozenset())
    if rules.concat_slices:
        slices = concat_slices(
            nodes, types, views={op for op, f in facets.items() if f.view},
            excluded={*rules.state_updates, *rules.state_updates.values(), *writers},
            alignment=rules.alignment)
    table = _StorageScan(types, facets, reads, writers, rules, slices.spots).run(nodes)
    table.concats = slices.steps
    return table


def _reference_counts(nodes: list[Node], facets: Mapping[str, _Facets],
                      pinned: Iterable[str]) -> dict[str, int]:
    """Stage 1: how many steps read each value; pinned values never reach zero."""
    reads: dict[str, int] = {}
    for node in nodes:
        ignored = facets[node.op].ignored
        if ignored:
            for index, name in enumerate(node.inputs):
                if name and index not in ignored:
                    reads[name] = reads.get(name, 0) + 1
        else:
            for name in node.inputs:
                if name:
                    reads[name] = reads.get(name, 0) + 1
    for name in pinned:
        reads[name] = reads.get(name, 0) + _PINNED
    return reads


def _state_writers(nodes: list[Node], facets: Mapping[str, _Facets],
                   state_updates: Mapping[str, str], reads: Mapping[str, int]) -> dict[str, str]:
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


class _StorageScan:
    """Stage 2: one walk over the steps giving every output a storage (its own, its input's
    in place, or its input's as a view) and every storage its lifetime.

    ``_refs`` holds, per slot, the reads still to come: a step may take over a storage in
    place only when its own reads are the last ones. A value with a spot (an input of a
    Concat computed in its slice, or the Concat's output) lives in the storage of the
    outermost Concat's output, made when the first of them is written. A state input's own
    buffer is a storage too, unplanned, so that its update can be written into it in place.
    """

    def __init__(self, types: Mapping[str, TensorType], facets: Mapping[str, _Facets],
                 reads: Mapping[str, int], writers: Mapping[str, str],
                 rules: _ScanRules, spots: Mapping[str, tuple[str, int]]) -> None:
        self._types = types
        self._facets = facets
        self._reads = reads
        self._writers = writers
        self._inplace = rules.inplace
        self._alignment = rules.alignment
        self._spots = spots
        self._spot_slots: dict[str, int] = {}  # outermost Concat output -> its slot
        self._table = StorageTable()
        self._refs: list[int] = []
        for state in rules.state_updates:
            self._table.storage[state] = self._table.add(state, 0, 0, -1, False)
            self._refs.append(reads.get(state, 0))

    def run(self, nodes: list[Node]) -> StorageTable:
        table = self._table
        for step, node in enumerate(nodes):
            facets = self._facets[node.op]
            self._write_outputs(step, node, facets)
            self._read_inputs(step, node, facets)
        last = len(nodes) - 1
        for slot, count in enumerate(self._refs):
            if count > 0:  # read after the last step (pinned): alive to the end
                table.end[slot] = max(last, table.start[slot])
        return table

    def _write_outputs(self, step: int, node: Node, facets: _Facets) -> None:
        table, reads, refs = self._table, self._reads, self._refs
        storage, planned, inputs = table.storage, table.planned, node.inputs
        claimed: list[int] = []  # slots this step's outputs took: two outputs never share one
        for k, name in enumerate(node.outputs):
            if not name:
                continue
            if k == 0 and facets.view and inputs and inputs[0]:
                self._view(name, inputs[0])
                continue
            type_ = self._types.get(name)
            if type_ is not None and type_.dtype == STRING:
                continue  # not planned: it holds references, not bytes (see the docstring)
            nbytes = aligned_bytes(node, name, type_, self._alignment)
            table.naive_bytes += nbytes
            slot = None
            if name in self._spots:
                slot = self._spot_slot(name, step)
            elif self._inplace and facets.inplace:
                slot = self._inplace_slot(node, facets, k, claimed)
            if slot is None:
                slot = table.add(name, nbytes, step, step, True)
                refs.append(0)
            elif not planned[slot]:
                table.aliases[name] = table.first_value[slot]
            claimed.append(slot)
            storage[name] = slot
            refs[slot] += reads.get(name, 0)

    def _spot_slot(self, name: str, step: int) -> int:
        """The slot holding ``name`` in its Concat's output (made at the first write into
        it, as large as the outermost output), with ``name``'s offset in it noted."""
        table = self._table
        top, offset = self._spots[name]
        slot = self._spot_slots.get(top)
        if slot is None:
            type_, alignment = self._types[top], self._alignment  # (static: see concat_slices)
            nbytes = -(-math.prod(type_.shape) * type_.dtype.itemsize // alignment) * alignment
            slot = self._spot_slots[top] = table.add(top, nbytes, step, step, True)
            self._refs.append(0)
        if offset:
            table.within[name] = offset
        return slot

    def _view(self, name: str, source: str) -> None:
        """A view's output shares its source's storage; a view of a graph input or constant
        (or of a state input's buffer) is an alias of it."""
        table = self._table
        slot = table.storage.get(source)
        if slot is None or not table.planned[slot]:
            table.aliases[name] = table.aliases.get(source, source)
            if slot is None:
                return
        table.storage[name] = slot
        if source in table.within:
            table.within[name] = table.within[source]
        self._refs[slot] += self._reads.get(name, 0)

    def _read_inputs(self, step: int, node: Node, facets: _Facets) -> None:
        storage, refs, end = self._table.storage, self._refs, self._table.end
        ignored = facets.ignored
        for index, name in enumerate(node.inputs):
            if name and (not ignored or index not in ignored):
                slot = storage.get(name)
                if slot is not None:
                    refs[slot] -= 1
                    end[slot] = step

    def _inplace_slot(self, node: Node, facets: _Facets, k: int,
                      claimed: list[int]) -> int | None:
        """A storage that output ``k`` may take over in place, or None."""
        table, name = self._table, node.outputs[k]
        type_ = self._types.get(name)
        for in_index, out_index in facets.inplace:
            if out_index != k or in_index >= len(node.inputs) or not node.inputs[in_index]:
                continue
            source = node.inputs[in_index]
            slot = table.storage.get(source)
            if slot is None or slot in claimed:
                continue
            if not table.planned[slot] and self._writers.get(name) != table.first_value[slot]:
                continue  # only the state's own update (and its chain) may overwrite it
            source_type = self._types.get(source)
            if source_type is not type_ and source_type != type_:
                continue
            if self._refs[slot] == self._own_reads(node, facets, slot, source):
                if source in table.within:  # (the output takes exactly the input's bytes)
                    table.within[name] = table.within[source]
                return slot
        return None

    def _own_reads(self, node: Node, facets: _Facets, slot: int, source: str) -> int:
        """How many of ``node``'s counted inputs read ``slot``, all through ``source``; -1
        when another value of the same storage is read too (then it may not be taken over)."""
        storage, own = self._table.storage, 0
        for i, other in enumerate(node.inputs):
            if other and i not in facets.ignored and storage.get(other) == slot:
                if other != source:
                    return -1
                own += 1
        return own


def _liveness(table: StorageTable, steps: int) -> list[int]:
    """Bytes alive at each step: the planned storages whose lifetime covers it."""
    delta = [0] * (steps + 1)
    for s, a, b, p in zip(table.size, table.start, table.end, table.planned):
        if p and b >= a:
            delta[a] += s
            delta[b + 1] -= s
    alive, total = [], 0
    for d in delta[:steps]:
        total += d
        alive.append(total)
    return alive
