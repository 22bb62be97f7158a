"""A graph compiled for one device and one set of input types: a flat list of kernel calls whose
every intermediate lives in one preallocated arena.

Stages of ``CompiledGraph.__init__``: optionally optimise the graph (``portable.passes.pipeline``);
infer types and the values known while planning; drop the nodes whose outputs are all known
(they were evaluated while planning, so constants fold for free); plan memory
(``portable.passes.plan_memory``: in-place reuse, co-sharing, views aliasing their input) and
ask each kernel for the scratch bytes it needs; with a memory budget, check the plan, the
constants and the inputs against it; only then copy the constants the kernels read and
allocate one arena and the workspace; give every planned value a typed view into the arena at
its offset. A budget is also held against the declared inputs before anything else, and caps
what constant folding may compute (``portable.passes.fold_constants.bounded_pipeline``), so a
refused plan has allocated nothing of its size. ``run`` then only calls kernels, bound on its
first call to the buffers they read and write (``portable.executor.bound_steps``), which write
into those views (destination-passing style), so the memory a run touches is the plan's.

Graph inputs are the caller's arrays and are never placed in the arena. Graph outputs (and the
values in ``keep``) stay valid after ``execute``; every other value is valid from the step that
computes it to its last reader, so segments ``execute(env, 0, k)`` then ``execute(env, k)`` see
what they need, in order.

A kernel may declare the scratch it needs with a ``workspace`` attribute, a function
``(input_types, output_types, attrs) -> bytes`` (or ``{buffer name: bytes}``). The plan counts
it, and each named buffer is allocated once, at the largest size any step asks for, and handed
to kernels as ``ctx.workspace[name]`` (a byte array; plain bytes are named ``"scratch"``).
Kernels share a name's buffer across steps (``backends/xp/kernels/im2col.scratch`` carves
arrays out of it).

Example:
    >>> plan = CompiledGraph(graph, cpu())  # doctest: +SKIP
    >>> y, = plan.run({"x": x})            # doctest: +SKIP
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

import numpy as np

from portable import profiler, random
from portable.backend import KernelContext, bound_kernel
from portable.device import Device
from portable.dtypes import is_string
from portable.executor.bound_steps import BoundSteps, Unbindable, step_failure
from portable.errors import (BackendError, BindError, MemoryBudgetError, MissingKernelError,
                             PortableError, ShapeError)
from portable.ir.graph import Graph, Node, TensorType
from portable.ops import registry
from portable.passes.fold_constants import bounded_pipeline, widened_per_use
from portable.passes.infer import TypeInfo, infer_types
from portable.passes.plan_memory import MemoryPlan, plan_memory


@dataclass(frozen=True)
class Step:
    """One kernel call: the node, its kernel (None for a view), resolved attributes."""

    node: Node
    kernel: Any
    attrs: dict
    view: bool
    index: int  # position of the node in the graph
    # whether the step uses every thread of the host math library (True), one (False), or
    # leaves them as they are (None)
    threads: bool | None = None


def _already_in_place(ctx: KernelContext, inputs: list, outputs: list, attrs: dict) -> None:
    """The kernel of a Concat whose inputs the memory plan put in their slices of its output:
    they were written there by the steps that computed them."""


def _declared(rule: Any, node: Node, info: TypeInfo, attrs: dict) -> Any:
    """What a kernel's plan-time rule (``workspace`` or ``held``) answers for ``node``."""
    return rule([info.types.get(name) if name else None for name in node.inputs],
                [info.types.get(name) if name else None for name in node.outputs], attrs)


def workspace_bytes(kernel: Any, node: Node, info: TypeInfo, attrs: dict) -> dict[str, int]:
    """Scratch bytes a kernel declares for one call, by buffer name (empty when none)."""
    rule = getattr(kernel, "workspace", None)
    if rule is None:
        return {}
    need = _declared(rule, node, info, attrs)
    if not isinstance(need, Mapping):
        need = {"scratch": need} if need else {}
    return {key: int(nbytes) for key, nbytes in need.items()}


def _running_kernels(graph: Graph, info: TypeInfo, backend: Any):
    """(index, node, kernel, attrs) of each node a plan runs a kernel for: not evaluated
    while planning, not a view."""
    for index, node in enumerate(graph.nodes):
        if all(not out or out in info.values for out in node.outputs):
            continue
        op = registry.get(node.op, node=node)
        if not op.view:
            yield index, node, backend.kernel(node.op), op.resolve_attrs(node)


def kernel_workspace(graph: Graph, info: TypeInfo,
                     backend: Any) -> tuple[dict[int, dict[str, int]], dict[str, int]]:
    """The scratch each running node's kernel declares (by node index), and the size of each
    named buffer: the largest any step asks for (without building a plan)."""
    predicted: dict[int, dict[str, int]] = {}
    sizes: dict[str, int] = {}
    for index, node, kernel, attrs in _running_kernels(graph, info, backend):
        need = workspace_bytes(kernel, node, info, attrs)
        if need:
            predicted[index] = need
            for key, nbytes in need.items():
                sizes[key] = max(sizes.get(key, 0), nbytes)
    return predicted, sizes


def kernel_held(graph: Graph, info: TypeInfo, backend: Any) -> int:
    """Bytes the running nodes' kernels keep for as long as the plan lives, beside the
    weights and the shared scratch: what each declares with a ``held`` rule (``held(input
    types, output types, attrs) -> bytes``; e.g. a Conv weight kept reordered for its loop)."""
    return sum(int(_declared(kernel.held, node, info, attrs))
               for _, node, kernel, attrs in _running_kernels(graph, info, backend)
               if getattr(kernel, "held", None) is not None)


def _read_only(array: Any) -> Any:
    """A read-only view of a NumPy array (the caller's own array keeps its flags); another
    backend's array as it is."""
    if isinstance(array, np.ndarray) and array.flags.writeable:
        array = array.view()
        array.setflags(write=False)
    return array


def _type_bytes(type_: TensorType) -> int:
    """Bytes of a value of a static type (0 while a dim is unknown)."""
    return type_.nbytes if type_.is_static else 0


class CompiledGraph:
    """A graph bound to a device: types inferred, memory planned, kernels chosen.

    Args:
        graph: the graph to run.
        device: where it runs.
        input_types: concrete types for the graph inputs (defaults: the declared ones).
        constant_inputs: input values fixed at compile time (folded like initializers).
        optimize: graph optimisation level, ``none`` (run the graph as given), ``basic`` or
            ``all`` (see ``portable.passes.pipeline``). Node indices of ``step_of_node`` refer
            to the optimised graph, ``self.graph``.
        plan: memory strategy, ``naive``, ``inplace``, ``coshare`` or ``both``.
        keep: values besides the graph outputs that must stay valid after ``execute``.
        state_updates: ``state input -> updated value``: updates that may be written in place
            into the state input's own (fed) array.
        memory_budget: bytes the plan may hold (arena + workspace + constants + inputs);
            a plan that needs more raises MemoryBudgetError before anything is allocated.
    """

    def __init__(self, graph: Graph, device: Device,
                 input_types: Mapping[str, TensorType] | None = None,
                 constant_inputs: Mapping[str, np.ndarray] | None = None, *,
                 optimize: str = "none", plan: str = "both", keep: Iterable[str] = (),
                 state_updates: Mapping[str, str] | None = None,
                 memory_budget: int | None = None) -> None:
        if memory_budget is not None:  # the inputs alone may be over it: say so before work
            self._check_inputs(graph, input_types or {}, constant_inputs or {}, memory_budget)
        problem = getattr(device.backend, "dtype_problem", None)

        def holds(dtype: np.dtype) -> bool:
            return problem is None or problem(dtype) is None

        if optimize != "none":
            from portable.passes.pipeline import PIPELINE, optimize as run_pipeline

            # With a budget, folding never computes a value the budget could not hold; weights
            # stay as stored where the device holds their dtype.
            passes = bounded_pipeline(PIPELINE, memory_budget, holds=holds)
            graph = run_pipeline(graph, optimize, input_types=input_types,
                                 protected=tuple(keep) + tuple((state_updates or {}).values()),
                                 passes=passes)
        self.graph = graph
        self.device = device
        self.backend = device.backend
        # (weights widened per use stay as stored: never evaluated while planning)
        self.info: TypeInfo = infer_types(graph, input_types, constant_inputs,
                                          skip=widened_per_use(graph, holds))
        for name, _ in graph.inputs:
            if not self.info.types[name].is_static:
                raise BindError(f"graph {graph.name!r}: input {name!r} has shape "
                                f"{self.info.types[name]!r}; give a concrete shape to run it")
        known = self.info.values
        # Only the constants a running step (or the caller) reads are kept: a folded chain's
        # intermediates are dropped. They are copied (below) only after the budget check: a
        # ConstantOfShape's value is one element seen through zero strides until then.
        running = [(index, node) for index, node in enumerate(graph.nodes)
                   if not all(not out or out in known for out in node.outputs)]
        read = {name for _, node in running for name in node.inputs if name}
        read |= set(graph.outputs) | set(keep)
        kept = {name: value for name, value in known.items() if name in read and
                (name not in graph.input_names or name in (constant_inputs or {}))}
        self.state_updates = dict(state_updates or {})
        self.steps: list[Step] = []
        for index, node in running:  # the others were fully evaluated while planning
            op = registry.get(node.op, node=node)
            attrs = op.resolve_attrs(node)
            if op.view:
                self.steps.append(Step(node, None, attrs, True, index))
                continue
            types = self.info.types
            try:  # a kernel's plan-time part runs here, once
                call = bound_kernel(self.backend.kernel(node.op), self.backend,
                                    [types.get(name) if name else None for name in node.inputs],
                                    [types.get(name) if name else None for name in node.outputs],
                                    attrs)
            except PortableError:
                raise
            except Exception as exc:
                raise ShapeError(f"node {node.name!r} (op {node.op}): its kernel on device "
                                 f"{device} could not be prepared: {type(exc).__name__}: "
                                 f"{exc}") from exc
            threads = self.backend.step_threads(
                node.op, [types.get(name) if name else None for name in node.inputs],
                [types.get(name) if name else None for name in node.outputs], attrs)
            self.steps.append(Step(node, call, attrs, False, index, threads))
        self._check_strings(graph, kept)
        self._check_element_types(graph, kept)
        scratch, sizes = kernel_workspace(graph, self.info, self.backend)
        self.plan: MemoryPlan = plan_memory(graph, self.info, strategy=plan, keep=keep,
                                            state_updates=self.state_updates,
                                            workspace=scratch)
        if self.plan.concats:  # (their inputs were computed in their slices of the output)
            self.steps = [replace(step, kernel=_already_in_place, threads=None)
                          if step.index in self.plan.concats else step for step in self.steps]
        self._switches_threads = any(step.threads is not None for step in self.steps)
        self.workspace_bytes = sum(sizes.values())
        self.held_bytes = kernel_held(graph, self.info, self.backend)
        # Counted as the kernels will hold them: a broadcast view's nbytes is its full shape's.
        self._constant_bytes = sum(int(value.nbytes) for value in kept.values())
        self._input_bytes = sum(_type_bytes(self.info.types[name]) for name, _ in graph.inputs
                                if name not in kept)
        if memory_budget is not None:
            self._check_budget(memory_budget)
        # Aligned, C-ordered copies are made only where needed (a weight memory-mapped at an
        # odd offset of its file, a constant-filled value that kernels read dense). The plan
        # holds them as read-only views: no step may write a constant, and a kernel may keep
        # what it derives from one (a reordered weight) for as long as it is handed the same
        # read-only array.
        self.constants = {name: _read_only(self.backend.from_numpy(
            np.require(value, requirements="CA"))) for name, value in kept.items()}
        self.arena = self.backend.arena(self.plan.arena_bytes)
        self.workspace = {key: self.backend.arena(nbytes) for key, nbytes in sizes.items()}
        self.buffers: dict[str, Any] = {}
        for name, offset in self.plan.offsets.items():
            type_ = self.info.types[name]
            self.buffers[name] = self.backend.view(self.arena, offset, type_.shape, type_.dtype)
        # String tensors hold references to Python str, not bytes: the planner leaves them out
        # of the arena, and each computed one gets its own host object array here, once, so
        # that kernels still write into a preallocated output (_check_strings has refused
        # backends whose arrays are not host arrays).
        for step in self.steps:
            for name in ([] if step.view else step.node.outputs):
                if name and name not in self.buffers and is_string(self.info.types[name].dtype):
                    self.buffers[name] = np.empty(self.info.types[name].shape, dtype=object)
        # values computed in place inside a state input's array (views are made at run time)
        views = {step.node.outputs[0] for step in self.steps if step.view}
        self._in_state = {value: state for value, state in self.plan.aliases.items()
                          if value not in views}
        self._bound: BoundSteps | bool | None = None  # made by the first run()
        self._calls: tuple | None = None  # (steps, their calls): made by the first execute()

    def _check_strings(self, graph: Graph, kept: Mapping[str, Any]) -> None:
        """Refuse a string tensor that a run would hold on a backend without host arrays
        (OpenCL, CUDA): a fed input, a kept constant or a computed value. Strings folded while
        planning never reach the device."""
        if getattr(self.backend, "string_tensors", False):
            return
        held = [name for name, _ in graph.inputs] + list(kept)
        held += [name for step in self.steps for name in step.node.outputs if name]
        for name in held:
            type_ = self.info.types.get(name)
            if type_ is not None and is_string(type_.dtype):
                raise MissingKernelError(
                    f"graph {graph.name!r}: tensor {name!r} is a string tensor ({type_!r}); "
                    f"backend {self.backend.name} (device {self.device}) holds no string "
                    f"tensors: run string ops on the cpu device")

    def _check_element_types(self, graph: Graph, kept: Mapping[str, Any]) -> None:
        """Refuse, before anything is allocated, a tensor whose element type the backend
        cannot hold (OpenCL has no bfloat16, float8 or 4- and 2-bit types), naming it."""
        problem = getattr(self.backend, "dtype_problem", None)
        if problem is None:
            return
        held = [name for name, _ in graph.inputs] + list(kept)
        held += [name for step in self.steps for name in step.node.outputs if name]
        for name in held:
            type_ = self.info.types.get(name)
            why = None if type_ is None else problem(type_.dtype)
            if why is not None:
                raise BackendError(f"graph {graph.name!r}: tensor {name!r} ({type_!r}): {why}")

    @property
    def constant_bytes(self) -> int:
        """Bytes of the constants the plan keeps (weights and folded values), as held once
        copied for the kernels (a constant-filled value counts dense)."""
        return self._constant_bytes

    @property
    def input_bytes(self) -> int:
        """Bytes of the inputs a run is fed."""
        return self._input_bytes

    @staticmethod
    def _check_inputs(graph: Graph, input_types: Mapping[str, TensorType],
                      constant_inputs: Mapping[str, Any], budget: int) -> None:
        """Refuse inputs whose declared bytes alone exceed the budget, before optimising."""
        from portable.sizes import format_bytes as fmt

        sizes = {name: _type_bytes(input_types.get(name, type_)) for name, type_ in graph.inputs
                 if name not in constant_inputs}
        if sum(sizes.values()) > budget:
            name = max(sizes, key=sizes.get)
            raise MemoryBudgetError(
                f"graph {graph.name!r}: its inputs need {fmt(sum(sizes.values()))} (the largest, "
                f"{name!r}, {input_types.get(name, dict(graph.inputs)[name])!r}: "
                f"{fmt(sizes[name])}), more than the memory budget {fmt(budget)}")

    def _check_budget(self, budget: int) -> None:
        from portable.sizes import format_bytes as fmt

        plan = self.plan.arena_bytes + self.workspace_bytes
        total = plan + self.constant_bytes + self.held_bytes + self.input_bytes
        if total > budget:
            held = f" + kernel copies {fmt(self.held_bytes)}" if self.held_bytes else ""
            raise MemoryBudgetError(
                f"graph {self.graph.name!r} needs {fmt(total)} (plan {fmt(plan)} + weights "
                f"{fmt(self.constant_bytes)}{held} + inputs {fmt(self.input_bytes)}), more "
                f"than the memory budget {fmt(budget)}")

    def type_of(self, name: str) -> TensorType:
        return self.info.types[name]

    def step_of_node(self, node_index: int) -> int:
        """The first step that runs node ``node_index`` or a later one (for running segments)."""
        return next((i for i, step in enumerate(self.steps) if step.index >= node_index),
                    len(self.steps))

    def bind(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """An environment holding constants, the fed inputs and the plan's buffers."""
        env: dict[str, Any] = dict(self.constants)
        for name, _ in self.graph.inputs:
            if name in env:
                continue
            if name not in feeds:
                raise BindError(f"graph {self.graph.name!r}: input {name!r} was not given")
            array = feeds[name]
            if tuple(array.shape) != self.info.types[name].shape:
                raise BindError(f"graph {self.graph.name!r}: input {name!r} has shape "
                                f"{tuple(array.shape)}, the plan was compiled for "
                                f"{self.info.types[name].shape}")
            env[name] = array
        env.update(self.buffers)
        for value, state in self._in_state.items():
            env[value] = env[state]
        return env

    def execute(self, env: dict[str, Any], start: int = 0, stop: int | None = None) -> None:
        """Run steps ``start:stop`` in ``env``."""
        backend = self.backend
        ctx = KernelContext(backend.xp, random.generator(), backend)
        ctx.workspace.update(self.workspace)  # a kernel that needs more replaces its copy
        allowed = backend.threads_allowed() if self._switches_threads else 0
        try:
            if profiler.op_started():
                self._execute(env, ctx, self.steps[start:stop], allowed)
            else:
                self._execute_quiet(env, ctx, self._step_calls()[start:stop], allowed)
        finally:
            if allowed:
                backend.use_threads(allowed)

    def _execute(self, env: dict[str, Any], ctx: KernelContext, steps: list[Step],
                 allowed: int) -> None:
        for step in steps:  # (timing each kernel for the profiler)
            node = step.node
            if step.view:
                out_type = self.info.types[node.outputs[0]]
                env[node.outputs[0]] = self.backend.xp.reshape(env[node.inputs[0]],
                                                               out_type.shape)
                continue
            ctx.node = node
            if allowed and step.threads is not None:
                self.backend.use_threads(allowed if step.threads else 1)
            inputs = [env[name] if name else None for name in node.inputs]
            outputs = [env[name] if name else None for name in node.outputs]
            started = profiler.op_started()
            try:
                step.kernel(ctx, inputs, outputs, step.attrs)
            except PortableError:
                raise
            except Exception as exc:
                raise step_failure(node, self.device, inputs, exc) from exc
            if started:
                profiler.op_finished(node.op, started)

    def _step_calls(self) -> list[tuple]:
        """Per step, what ``_execute_quiet`` reads: made once (for the steps list it sees)."""
        calls = self._calls
        if calls is None or calls[0] is not self.steps:
            types = self.info.types
            calls = self._calls = (self.steps, [
                (step.kernel, step.node.inputs, step.node.outputs, step.attrs, step.node,
                 step.threads, types[step.node.outputs[0]].shape if step.view else None)
                for step in self.steps])
        return calls[1]

    def _execute_quiet(self, env: dict[str, Any], ctx: KernelContext, calls: list[tuple],
                       allowed: int) -> None:
        """``_execute`` while the profiler is off: each step's names and view shape come from
        a tuple made once, not from the Step and the type table on every call."""
        reshape = self.backend.xp.reshape
        use_threads = self.backend.use_threads
        for kernel, names_in, names_out, attrs, node, threads, shape in calls:
            if kernel is None:  # a view
                env[names_out[0]] = reshape(env[names_in[0]], shape)
                continue
            ctx.node = node
            if allowed and threads is not None:
                use_threads(allowed if threads else 1)
            inputs = [env[name] if name else None for name in names_in]
            try:
                kernel(ctx, inputs, [env[name] if name else None for name in names_out], attrs)
            except PortableError:
                raise
            except Exception as exc:
                raise step_failure(node, self.device, inputs, exc) from exc

    def run(self, feeds: Mapping[str, Any], timings: list | None = None) -> list[Any]:
        """Run the whole plan on device arrays ``feeds`` (by input name); returns the outputs.
        With ``timings`` (a list), each kernel step's node and seconds are appended to it.

        Returned arrays are views into the plan's arena: the next run overwrites them.
        """
        if not profiler.op_started():  # (while recording, the general path times each step)
            if self._bound is None:
                try:
                    self._bound = BoundSteps(self)
                except Unbindable:
                    self._bound = False
            if self._bound:
                return self._bound.run(feeds, timings)
        env = self.bind(feeds)
        if timings is None:
            self.execute(env)
        else:
            for index, step in enumerate(self.steps):
                start = time.perf_counter()
                self.execute(env, index, index + 1)
                if step.kernel is not None:
                    timings.append((step.node, time.perf_counter() - start))
        return [env[name] for name in self.graph.outputs]
