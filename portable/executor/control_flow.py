"""Running subgraphs: the backend-neutral kernels of If, Loop and Scan, and the body runner
that other ops holding a graph (SequenceMap) build on.

A body is compiled once per signature of its input types (``run_body`` / ``BodyRunner``:
``portable.executor.segments.compile_graph``, so a body holding dynamic ops is planned in
segments too) and the plans are cached with the body Graph, per device, least recently used
dropped. A body's inputs are bound by position: the node's trailing inputs feed the body's
captured inputs (``portable/ir/graph.py``).

Results of a body run are views into its plan's arena, which the next run overwrites, so every
value that outlives a run is copied: into the output buffer the planner gave the node (where it
could place it), else into an array made here (``portable.backend.output_array``; the kernel
returns it, as ``dynamic_outputs`` kernels do).

Loop and Scan: a carried value lives in two buffers used in turn for the whole loop (``_Pair``:
a body may hand one carried input back as another carried output): the first is the node's
planned output buffer when the planner placed it (its slot is the loop state), the other is made
at the first iteration and reused while the shape stays; each iteration feeds one to the body
and copies the body's new value into the other (no allocation per iteration while shapes are
fixed).
Scan outputs of a Loop are collected per iteration and joined at the end (their count is known
only then); a Scan's outputs are written slice by slice into their final buffers.

Only array operations every backend has are used (indexing views, ``copy_into``, ``empty``,
``to_numpy`` for the scalar trip count and condition), so the NumPy, CuPy and OpenCL backends
register these same functions.

Example (SequenceMap's kernel, running its body once per element):
    >>> runner = body_runner(attrs["body"], ctx.backend)          # doctest: +SKIP
    >>> outs = runner.run([element, *captured])   # arena views: copy what you keep (+SKIP)
    >>> kept = [copy_value(ctx.backend, v) for v in outs]          # doctest: +SKIP
"""
from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any, Sequence

import numpy as np

from portable.backend import output_array, returned_outputs
from portable.errors import ShapeError
from portable.ir.graph import Graph, TensorType
from portable.ir.types import type_of_value

# Plans kept per body and device (one per input-type signature seen).
PLANS_KEPT = 8


class BodyRunner:
    """A subgraph bound to one backend: plans per input-type signature, run by position.

    Args:
        body: the subgraph (its inputs in the order ``run`` is given values).
        backend: the backend whose device runs it.
    """

    def __init__(self, body: Graph, backend: Any) -> None:
        self.body = body
        self.backend = backend
        self._plans: OrderedDict[tuple, Any] = OrderedDict()

    def plan(self, types: Sequence[Any]) -> Any:
        """The compiled body for inputs of ``types`` (made on first use, then cached)."""
        from portable.executor.segments import compile_graph

        key = tuple(types)
        plan = self._plans.get(key)
        if plan is None:
            plan = compile_graph(self.body, self.backend.device,
                                 dict(zip(self.body.input_names, types)))
            self._plans[key] = plan
            while len(self._plans) > PLANS_KEPT:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return plan

    def output_types(self, types: Sequence[Any]) -> list[Any]:
        """The body's output types for inputs of ``types`` (without running it)."""
        plan = self.plan(types)
        return [plan.type_of(name) for name in self.body.outputs]

    def run(self, values: Sequence[Any]) -> list[Any]:
        """Run the body on ``values`` (one per body input, captured ones last). The results
        may be views into the plan's arena: valid until the next run."""
        if len(values) != len(self.body.inputs):
            raise ShapeError(f"graph {self.body.name!r} takes {len(self.body.inputs)} inputs, "
                             f"{len(values)} were given")
        plan = self.plan([type_of_value(v) for v in values])
        return plan.run(dict(zip(self.body.input_names, values)))


# body Graph -> {id(backend): BodyRunner}; an entry lives as long as its body.
_runners: "weakref.WeakKeyDictionary[Graph, dict[int, BodyRunner]]" = \
    weakref.WeakKeyDictionary()


def body_runner(body: Graph, backend: Any) -> BodyRunner:
    """The cached runner of ``body`` on ``backend``."""
    per_backend = _runners.setdefault(body, {})
    runner = per_backend.get(id(backend))
    if runner is None or runner.backend is not backend:
        runner = per_backend[id(backend)] = BodyRunner(body, backend)
    return runner


def copy_value(backend: Any, value: Any) -> Any:
    """An owned copy of a run-time value: an array, a sequence (list) or None."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [copy_value(backend, item) for item in value]
    made = backend.empty(tuple(value.shape), value.dtype)
    backend.copy_into(made, value)
    return made


def store(backend: Any, given: Any, value: Any) -> Any:
    """``value`` kept past the body's next run: copied into ``given`` (a planned buffer) when
    there is one, else into a new array (or list)."""
    if given is None:
        return copy_value(backend, value)
    if tuple(given.shape) != tuple(value.shape):
        raise ShapeError(f"a value of shape {tuple(value.shape)} was computed for an output "
                         f"planned as {tuple(given.shape)}")
    backend.copy_into(given, value)
    return given


class _Pair:
    """The storage of one loop-carried value: two buffers used in turn (a body may return one
    carried input as another carried output, so writing into the buffer it reads could
    clobber it). The first is the node's planned output buffer when there is one: the loop
    state then ends in the output's own slot (one final copy at most)."""

    def __init__(self, backend: Any, given: Any) -> None:
        self.backend = backend
        self.given = given
        self.buffers: list[Any] = [given, None]

    def keep(self, value: Any, step: int, what: str) -> Any:
        """Copy ``value`` (a body result, valid until the next run) into this step's buffer."""
        if value is None or isinstance(value, (list, tuple)):
            return copy_value(self.backend, value)  # a sequence or optional: owned copy
        slot = step % 2
        buffer = self.buffers[slot]
        if self.given is not None and (tuple(self.given.shape) != tuple(value.shape) or
                                       self.given.dtype != value.dtype):
            raise ShapeError(f"{what} became {tuple(value.shape)} {value.dtype}; it was "
                             f"planned as {tuple(self.given.shape)} {self.given.dtype}")
        if buffer is None or tuple(buffer.shape) != tuple(value.shape) or \
                buffer.dtype != value.dtype:
            buffer = self.buffers[slot] = self.backend.empty(tuple(value.shape), value.dtype)
        self.backend.copy_into(buffer, value)
        return buffer

    def final(self, value: Any, steps: int) -> Any:
        """The output: ``value`` in the planned buffer, or an owned array."""
        if self.given is not None:
            if value is not self.given:
                self.backend.copy_into(self.given, value)
            return self.given
        return value if steps else copy_value(self.backend, value)


def _scalar(backend: Any, value: Any) -> Any:
    return np.asarray(backend.to_numpy(value)).reshape(-1)[0]


# -- If -------------------------------------------------------------------------------------------


def run_if(ctx: Any, inputs: list, outputs: list, attrs: dict) -> list:
    """If: run the branch ``cond`` selects on the captured values."""
    branch = attrs["then_branch"] if bool(_scalar(ctx.backend, inputs[0])) else \
        attrs["else_branch"]
    results = body_runner(branch, ctx.backend).run(list(inputs[1:]))
    made = [store(ctx.backend, given, value) for given, value in zip(outputs, results)]
    return returned_outputs(outputs, made)


# -- Loop -----------------------------------------------------------------------------------------


def run_loop(ctx: Any, inputs: list, outputs: list, attrs: dict) -> list:
    """Loop: iterate the body while ``i < M`` and the condition holds."""
    backend = ctx.backend
    body: Graph = attrs["body"]
    captures = len(body.captures)
    carried = len(inputs) - 2 - captures
    scans = len(outputs) - carried
    trips = None if inputs[0] is None else int(_scalar(backend, inputs[0]))
    cond = True if inputs[1] is None else bool(_scalar(backend, inputs[1]))
    outer = list(inputs[2 + carried:])
    runner = body_runner(body, backend)
    state = list(inputs[2:2 + carried])  # the initial values, read (never written) by the body
    pairs = [_Pair(backend, given) for given in outputs[:carried]]
    collected: list[list[Any]] = [[] for _ in range(scans)]
    step = 0
    while (trips is None or step < trips) and cond:
        counter = backend.from_numpy(np.asarray(step, np.int64))
        flag = backend.from_numpy(np.asarray(cond, np.bool_))
        results = runner.run([counter, flag] + state + outer)
        cond = bool(_scalar(backend, results[0]))
        state = [pair.keep(value, step, f"carried value {index}")
                 for index, (pair, value) in enumerate(zip(pairs, results[1:1 + carried]))]
        for index, value in enumerate(results[1 + carried:]):
            collected[index].append(copy_value(backend, value))
        step += 1
    made = [pair.final(value, step) for pair, value in zip(pairs, state)]
    empty_types = None
    for index, items in enumerate(collected):
        if items:
            shape, dtype = (len(items),) + tuple(items[0].shape), items[0].dtype
        else:  # no iteration ran: the body's types tell the slices' shape
            if empty_types is None:
                types = [TensorType((), "int64"), TensorType((), "bool")] + \
                    [type_of_value(v) for v in state + outer]
                empty_types = runner.output_types(types)[1 + carried:]
            type_ = empty_types[index]
            shape, dtype = (0,) + tuple(d or 0 for d in type_.shape), type_.dtype
        for item in items[1:]:
            if tuple(item.shape) != shape[1:]:
                raise ShapeError(f"scan output {index} has shape {tuple(items[0].shape)} at "
                                 f"the first iteration and {tuple(item.shape)} later; the "
                                 f"iterations of a scan output must agree")
        joined = output_array(ctx, outputs, carried + index, shape, dtype)
        for position, item in enumerate(items):
            backend.copy_into(joined[position, ...], item)
        made.append(joined)
    return returned_outputs(outputs, made)


# -- Scan -----------------------------------------------------------------------------------------


def _along(axis: int, index: int) -> tuple:
    """The key of slice ``index`` along ``axis``; the Ellipsis keeps a 0-d result a view."""
    return (slice(None),) * axis + (index, Ellipsis)


def run_scan(ctx: Any, inputs: list, outputs: list, attrs: dict) -> list:
    """Scan: run the body on each slice of the scan inputs along their axes, carrying
    states; scan outputs are written slice by slice into their buffers."""
    from portable.ops.control_flow import scan_layout

    backend = ctx.backend
    lay = scan_layout(attrs, len(inputs), len(outputs))
    n, m = lay["states"], lay["scan_inputs"]
    runner = body_runner(attrs["body"], backend)
    scanned = inputs[n:n + m]
    outer = list(inputs[n + m:])
    axes = [axis % x.ndim for axis, x in zip(lay["in_axes"], scanned)]
    length = int(scanned[0].shape[axes[0]])
    slices = []  # one contiguous buffer per scan input, refilled every step
    for x, axis in zip(scanned, axes):
        slices.append(backend.empty(tuple(x.shape[:axis]) + tuple(x.shape[axis + 1:]),
                                    x.dtype))
    state = list(inputs[:n])
    pairs = [_Pair(backend, given) for given in outputs[:n]]
    scan_out: list[Any] = list(outputs[n:])
    for step in range(length):
        for j, (x, axis) in enumerate(zip(scanned, axes)):
            at = length - 1 - step if lay["in_directions"][j] else step
            backend.copy_into(slices[j], x[_along(axis, at)])
        results = runner.run(state + slices + outer)
        state = [pair.keep(value, step, f"state {index}")
                 for index, (pair, value) in enumerate(zip(pairs, results[:n]))]
        for k, value in enumerate(results[n:]):
            rank = len(value.shape) + 1
            axis = lay["out_axes"][k] % rank
            if scan_out[k] is None:
                shape = tuple(value.shape[:axis]) + (length,) + tuple(value.shape[axis:])
                scan_out[k] = output_array(ctx, outputs, n + k, shape, value.dtype)
            at = length - 1 - step if lay["out_directions"][k] else step
            backend.copy_into(scan_out[k][_along(axis, at)], value)
    made = [pair.final(value, length) for pair, value in zip(pairs, state)]
    for k in range(len(scan_out)):
        if scan_out[k] is None:  # no step ran: empty outputs of the body's slice types
            types = [type_of_value(v) for v in state + slices + outer]
            type_ = runner.output_types(types)[n + k]
            axis = lay["out_axes"][k] % (type_.rank + 1)
            dims = tuple(d or 0 for d in type_.shape)
            scan_out[k] = output_array(ctx, outputs, n + k, dims[:axis] + (0,) + dims[axis:],
                                       type_.dtype)
        made.append(scan_out[k])
    return returned_outputs(outputs, made)


KERNELS = {"If": run_if, "Loop": run_loop, "Scan": run_scan}
