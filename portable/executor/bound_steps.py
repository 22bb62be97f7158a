"""A compiled plan's steps bound once to the arrays they read and write, so that a whole run
(``CompiledGraph.run``) is one loop of kernel calls.

``CompiledGraph.execute`` looks every input and output of every step up by name in an
environment, builds two lists and checks the profiler, per step, because its callers may
swap arrays in that environment (a hybridized block's second buffer set, the outputs it
writes directly). ``run`` builds its own environment, so almost everything a step touches is
fixed for the plan's life: the constants, the arena's views, and the views (Reshape, Flatten)
of them. Stages of ``BoundSteps.__init__``, in step order, mirroring ``CompiledGraph.bind``
and ``_execute``:

1. the fixed values: constants, then the planned buffers over them;
2. the fed values: the graph inputs not folded into constants, values computed in place
   inside a fed state input (an alias of it), and views of fed values (made per run);
3. each kernel step's input and output lists, built once: fixed arrays in place, a fed value
   a slot filled at the start of each run and emptied at its end (the plan never holds a
   caller's array between runs).

A run then checks and places the fed arrays, and calls each step's bound kernel with its
lists. Kernels must treat the lists they are handed as read-only (none assigns into them; the
fused elementwise kernel copies its list before it swaps an input). While the profiler
records, ``CompiledGraph.run`` takes the general path, which times each step.
"""
from __future__ import annotations

import time
from typing import Any, Mapping

from portable.backend import KernelContext
from portable.errors import BindError, PortableError, ShapeError
from portable import random


class Unbindable(Exception):
    """A name a step reads is neither fixed nor fed: the general path runs (and reports)."""


class BoundSteps:
    """The steps of ``plan`` (a CompiledGraph) bound to its fixed arrays."""

    def __init__(self, plan: Any) -> None:
        self.plan = plan
        xp = plan.backend.xp
        fixed: dict[str, Any] = dict(plan.constants)
        fed_inputs = [(name, plan.info.types[name].shape) for name, _ in plan.graph.inputs
                      if name not in fixed]
        fixed.update(plan.buffers)
        fed = {name for name, _ in fed_inputs if name not in plan.buffers}
        derived: list[tuple[str, str, Any]] = []  # (value, source, view shape or None)
        for value, state in plan._in_state.items():
            if state in fed:
                derived.append((value, state, None))
                fed.add(value)
                fixed.pop(value, None)
            elif state in fixed:
                fixed[value] = fixed[state]
            else:
                raise Unbindable(state)
        slots: list[tuple[list, int, str]] = []
        steps: list[tuple] = []

        def resolve(names, into: list) -> list:
            for name in names:
                if not name:
                    into.append(None)
                elif name in fed:
                    slots.append((into, len(into), name))
                    into.append(None)
                elif name in fixed:
                    into.append(fixed[name])
                else:
                    raise Unbindable(name)
            return into

        for step in plan.steps:
            node = step.node
            if step.view:
                source, out = node.inputs[0], node.outputs[0]
                shape = plan.info.types[out].shape
                if source in fed:
                    derived.append((out, source, shape))
                    fed.add(out)
                    fixed.pop(out, None)
                elif source in fixed:  # a view of a fixed array is fixed too
                    fixed[out] = xp.reshape(fixed[source], shape)
                    fed.discard(out)
                else:
                    raise Unbindable(source)
                continue
            steps.append((step.kernel, resolve(node.inputs, []), resolve(node.outputs, []),
                          step.attrs, node, step.threads))
        self.fed_inputs = fed_inputs
        self.derived = derived
        self.slots = slots
        self.steps = steps
        self.outputs = [(name in fed, fixed.get(name), name) for name in plan.graph.outputs]
        if any(not live and value is None for live, value, _ in self.outputs):
            raise Unbindable("an output")
        # The outputs when every one is a planned buffer (the common case), the same arrays
        # at every run; None when one is a fed value or a view of one.
        self.fixed_outputs = (None if any(live for live, _, _ in self.outputs)
                              else [value for _, value, _ in self.outputs])
        # One kernel context for every run: a run already owns the steps' argument lists
        # (one run of a plan at a time), and making a context is a few tenths of a
        # microsecond of a batch-1 run. Its generator and workspace are renewed per run
        # (the workspace is emptied when a run ends, as a context per run was dropped).
        self.ctx: KernelContext | None = None

    def run(self, feeds: Mapping[str, Any], timings: list | None = None) -> list[Any]:
        """The plan run on ``feeds``; with ``timings`` (a list), each kernel step's node and
        seconds are appended to it (views cost nothing at run time and are not listed)."""
        plan = self.plan
        values: dict[str, Any] = {}
        for name, shape in self.fed_inputs:
            try:
                array = feeds[name]
            except KeyError:
                raise BindError(f"graph {plan.graph.name!r}: input {name!r} was not "
                                f"given") from None
            if array.shape != shape and tuple(array.shape) != shape:
                raise BindError(f"graph {plan.graph.name!r}: input {name!r} has shape "
                                f"{tuple(array.shape)}, the plan was compiled for {shape}")
            values[name] = array
        if self.derived:
            reshape = plan.backend.xp.reshape
            for value, source, shape in self.derived:
                values[value] = (values[source] if shape is None
                                 else reshape(values[source], shape))
        slots = self.slots
        for into, index, name in slots:
            into[index] = values[name]
        backend = plan.backend
        ctx = self.ctx
        if ctx is None:
            ctx = self.ctx = KernelContext(backend.xp, random.generator(), backend)
        else:
            ctx.rng = random.generator()  # (portable.random.seed replaces the generator)
        ctx.workspace.update(plan.workspace)  # a kernel that needs more replaces its copy
        allowed = backend.threads_allowed() if plan._switches_threads else 0
        try:
            if timings is None:
                with backend.deferred():  # (one wait for the device, at the end)
                    self._loop(ctx, allowed)
            else:  # (each step waited: its time is its kernels')
                self._timed_loop(ctx, allowed, timings)
        finally:
            if allowed:
                backend.use_threads(allowed)
            for into, index, _ in slots:  # the caller's arrays are not held past the run
                into[index] = None
            ctx.workspace.clear()  # (scratch a kernel took is not held past the run)
        if self.fixed_outputs is not None:
            return list(self.fixed_outputs)
        return [values[name] if live else value for live, value, name in self.outputs]

    def _loop(self, ctx: KernelContext, allowed: int) -> None:
        node = inputs = None
        try:
            if allowed:
                use_threads = self.plan.backend.use_threads
                for kernel, inputs, outputs, attrs, node, threads in self.steps:
                    ctx.node = node
                    if threads is not None:
                        use_threads(allowed if threads else 1)
                    kernel(ctx, inputs, outputs, attrs)
            else:
                for kernel, inputs, outputs, attrs, node, _ in self.steps:
                    ctx.node = node
                    kernel(ctx, inputs, outputs, attrs)
        except PortableError:
            raise
        except Exception as exc:
            if node is None:
                raise
            raise step_failure(node, self.plan.device, inputs, exc) from exc


    def _timed_loop(self, ctx: KernelContext, allowed: int, timings: list) -> None:
        """``_loop`` with each kernel call timed (for profiles; errors as ``_loop``'s)."""
        clock = time.perf_counter
        use_threads = self.plan.backend.use_threads
        for kernel, inputs, outputs, attrs, node, threads in self.steps:
            ctx.node = node
            if allowed and threads is not None:
                use_threads(allowed if threads else 1)
            start = clock()
            try:
                kernel(ctx, inputs, outputs, attrs)
            except PortableError:
                raise
            except Exception as exc:
                raise step_failure(node, self.plan.device, inputs, exc) from exc
            timings.append((node, clock() - start))


def step_failure(node: Any, device: Any, inputs: list, exc: Exception) -> ShapeError:
    """The error a plan raises when a kernel fails: the node, op, device and input shapes."""
    shapes = ", ".join(str(tuple(a.shape)) if a is not None else "-" for a in inputs or ())
    return ShapeError(f"node {node.name!r} (op {node.op}) failed on device {device} with "
                      f"input shapes [{shapes}]: {type(exc).__name__}: {exc}")
