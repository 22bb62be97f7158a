"""CachedOp: a hybridized block compiled once per input signature and run as one engine op.

Stages, on the first call with a new signature (input structure, shapes and dtypes, training
mode, which inputs need gradients, device):

1. trace: call the block's ``hybrid_forward`` with ``F = portable.sym`` on variables named
   ``data`` (``data0, data1...`` for several inputs) and the parameters' ``var()``s, and
   lower the resulting Symbol to a Graph with concrete shapes;
2. plan (``portable.executor.training_plan.build_plan``, shared with the Symbol executor):
   apply the
   training-mode rewrite (state updates become extra outputs), append the gradient graph for
   the inputs and parameters that need one, and compile it with ``CompiledGraph``;
3. run: every call pushes the forward segment as ONE engine op (reads: the input and
   parameter vars; writes: the output vars, the updated state vars and the plan's buffer var).
   Under ``autograd.record()`` it puts ONE tape entry whose gradient pushes the backward
   segment as one more engine op.

Invariants: the buffers of a plan (one set of intermediate values) belong to one forward and
its backward at a time. A call takes a free buffer set from the plan's pool (making a new one
when all are held), a tape entry holds its set until the entry is dropped, and the set's engine
var orders every op that touches it. Outputs and gradients are fresh NDArrays: when their value
is computed by a kernel of the plan, the kernel writes straight into them (no copy).
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Sequence

import numpy as np

from portable import autograd
from portable.device import Device
from portable.engine import get_engine
from portable.errors import PortableError, ShapeError
from portable.executor.compiled import CompiledGraph
from portable.executor.training_plan import TrainingPlan, build_plan, written_values
from portable.gluon.utils import flatten, regroup
from portable.ir.graph import Graph
from portable.ops import registry


class _BufferSet:
    """One set of intermediate buffers of a plan, with the engine var that orders its users."""

    __slots__ = ("var", "buffers", "placeholders", "env")

    def __init__(self, compiled: CompiledGraph, primary: bool, heads: Sequence[str],
                 label: str) -> None:
        backend = compiled.backend
        self.var = get_engine().new_var(label)
        # The plan's own arena serves the first set; later sets get an arena of their own,
        # laid out by the same memory plan.
        self.buffers = None
        if not primary:
            arena = backend.arena(compiled.plan.arena_bytes)
            self.buffers = {name: backend.view(arena, offset, compiled.type_of(name).shape,
                                               compiled.type_of(name).dtype)
                            for name, offset in compiled.plan.offsets.items()}
        # bind() wants every graph input; head gradients are swapped in by the backward.
        self.placeholders = {h: backend.empty(compiled.type_of(h).shape, compiled.type_of(h).dtype)
                             for h in heads}
        self.env: dict | None = None

    def bind(self, compiled: CompiledGraph, feeds: dict) -> dict:
        env = compiled.bind(feeds)
        if self.buffers is not None:
            for name, buffer in self.buffers.items():
                if env.get(name) is compiled.buffers.get(name):  # not an input or a state
                    env[name] = buffer
        return env


class _TapeOp:
    """What autograd's tape asks of an op (``grad`` and ``nondiff_inputs``), for the backward
    of one hybridized call. Dropping it returns its buffer set to the pool."""

    nondiff_inputs: tuple[int, ...] = ()

    def __init__(self, call: "CompiledCall", buffers: _BufferSet, arrays: list) -> None:
        self.call, self.buffers, self.arrays = call, buffers, arrays
        weakref.finalize(self, call.release, buffers)

    def grad(self, ctx: Any, dys: Sequence[Any]) -> list:
        return self.call.backward(self.buffers, self.arrays, dys)


class CompiledCall:
    """A traced and compiled signature of a block: runs forward (and backward) on NDArrays."""

    def __init__(self, label: str, plan: TrainingPlan, sources: list[tuple[str, Any]],
                 out_fmt: Any, device: Device) -> None:
        self.label, self.plan, self.sources, self.out_fmt = label, plan, sources, out_fmt
        self.device = device
        compiled = plan.compiled
        self.names = list(compiled.graph.input_names)
        self.input_names = [n for n in self.names if n not in plan.head_grads.values()]
        self.out_types = [compiled.type_of(h) for h in plan.heads]
        self.wrt = [i for i, n in enumerate(self.input_names) if n in plan.grads]
        self.grad_types = [compiled.type_of(self.input_names[i]) for i in self.wrt]
        self.states = [(self.input_names.index(s), v) for s, v in plan.updates.items()]
        forward_written = written_values(compiled, 0, plan.split)
        backward_written = written_values(compiled, plan.split, None)
        seen: set[str] = set()
        self.direct_outputs = []
        for name in plan.heads:  # a repeated output is copied from its first occurrence
            self.direct_outputs.append(name in forward_written and name not in seen)
            seen.add(name)
        grad_names = [plan.grads[self.input_names[i]] for i in self.wrt]
        self.direct_grads = [n in backward_written and n not in grad_names[:k]
                             for k, n in enumerate(grad_names)]
        self.random = any(registry.get(s.node.op).random for s in compiled.steps)
        self._free: list[_BufferSet] = []
        self._count = 0
        self._lock = threading.Lock()
        self._var = None

    @property
    def var(self) -> Any:
        """Every run of the plan shares its kernel scratch buffer: runs are serialised on
        this engine var (made anew if the engine was replaced)."""
        if self._var is None or self._var._owner is not get_engine():
            self._var = get_engine().new_var(f"{self.label}:plan")
        return self._var

    # -- buffer pool -----------------------------------------------------------------------
    def acquire(self) -> _BufferSet:
        with self._lock:
            while self._free:
                buffers = self._free.pop()
                if buffers.var._owner is get_engine():  # the engine may have been replaced
                    return buffers
            self._count += 1
            primary = self._count == 1
        return _BufferSet(self.plan.compiled, primary, list(self.plan.head_grads.values()),
                          f"{self.label}:buffers")

    def release(self, buffers: _BufferSet) -> None:
        with self._lock:
            self._free.append(buffers)

    # -- running ---------------------------------------------------------------------------
    def arrays_for(self, leaves: Sequence[Any]) -> list:
        """The NDArray bound to each graph input: a call's leaf or a parameter's data."""
        return [leaves[src] if kind == "leaf" else src.data(self.device)
                for kind, src in self.sources]

    def forward(self, leaves: Sequence[Any], recording: bool) -> Any:
        from portable.ndarray.invoke import rng_var
        from portable.ndarray.ndarray import NDArray

        compiled, plan = self.plan.compiled, self.plan
        backend, device = compiled.backend, self.device
        arrays = self.arrays_for(leaves)
        outputs = [NDArray(backend.empty(t.shape, t.dtype), device) for t in self.out_types]
        buffers = self.acquire()
        feeds = {name: a._data for name, a in zip(self.input_names, arrays)}
        feeds.update(buffers.placeholders)
        outs = list(zip(plan.heads, [o._data for o in outputs], self.direct_outputs))
        states = [(arrays[i]._data, value) for i, value in self.states]
        split = plan.split

        def run() -> None:
            env = buffers.bind(compiled, feeds)
            for name, target, direct in outs:
                if direct:
                    env[name] = target
            compiled.execute(env, 0, split)
            for name, target, direct in outs:
                if env[name] is not target:
                    backend.copy_into(target, env[name])
            for target, value in states:
                if env[value] is not target:  # unless the plan updated it in place
                    backend.copy_into(target, env[value])
            buffers.env = env

        reads = list(dict.fromkeys(a._var for a in arrays))
        writes = [o._var for o in outputs] + [arrays[i]._var for i, _ in self.states]
        writes += [buffers.var, self.var]
        if self.random:
            reads.append(rng_var())
            writes.append(rng_var())
        get_engine().push(run, reads=reads, writes=list(dict.fromkeys(writes)), device=device,
                          name=f"{self.label}:forward")
        if recording and self.wrt:
            op = _TapeOp(self, buffers, arrays)
            autograd.record_op(f"{self.label}", op, {}, [arrays[i] for i in self.wrt], outputs)
        else:
            self.release(buffers)
        return regroup(outputs, self.out_fmt)

    def backward(self, buffers: _BufferSet, arrays: list, dys: Sequence[Any]) -> list:
        from portable.ndarray.ndarray import NDArray

        if autograd.is_recording():
            raise PortableError(f"{self.label}: differentiating a hybridized block twice "
                                f"(create_graph=True) is not supported; call hybridize(False)")
        compiled, plan = self.plan.compiled, self.plan
        backend = compiled.backend
        heads = []
        for name, dy, type_ in zip(plan.heads, dys, self.out_types):
            head = plan.head_grads.get(name)
            if head is None or dy is None:
                continue
            if dy.shape != type_.shape or dy.dtype != type_.dtype:
                raise ShapeError(f"{self.label}: the head gradient of output {name!r} is "
                                 f"{dy.dtype}{list(dy.shape)}, the output is {type_!r}")
            heads.append((head, dy))
        grads = [NDArray(backend.empty(t.shape, t.dtype), self.device) for t in self.grad_types]
        targets = [(plan.grads[self.input_names[i]], g._data, direct)
                   for i, g, direct in zip(self.wrt, grads, self.direct_grads)]
        head_data = [(head, dy._data) for head, dy in heads]
        split = plan.split

        def run() -> None:
            env = buffers.env
            for head, data in head_data:
                env[head] = data
            for name, target, direct in targets:
                if direct:
                    env[name] = target
            compiled.execute(env, split)
            for name, target, _ in targets:
                if env[name] is not target:
                    backend.copy_into(target, env[name])

        reads = list(dict.fromkeys([dy._var for _, dy in heads] + [a._var for a in arrays]))
        reads.append(buffers.var)
        writes = [g._var for g in grads] + [buffers.var, self.var]
        get_engine().push(run, reads=reads, writes=writes, device=self.device,
                          name=f"{self.label}:backward")
        return grads


def _is_array(value: Any) -> bool:
    from portable.ndarray.ndarray import NDArray

    return isinstance(value, NDArray)


def split_symbols(value: Any) -> Any:
    """Multi-output Symbols in a returned structure become lists of one-output Symbols."""
    from portable.symbol import Symbol

    if isinstance(value, Symbol) and len(value) > 1:
        return list(value)
    if isinstance(value, (list, tuple)):
        items = [split_symbols(v) for v in value]
        return items if isinstance(value, list) else tuple(items)
    return value


class CachedOp:
    """The hybridized form of a HybridBlock: one CompiledCall per input signature.

    Args:
        block: the HybridBlock.
        flags: ``hybridize`` keyword flags (``static_alloc``, ``static_shape``; plans are
            always static per signature, so they are accepted and recorded).

    Attributes:
        num_traces: how many times ``hybrid_forward`` was traced (one per new signature).
    """

    def __init__(self, block: Any, flags: dict | None = None) -> None:
        self.block = block
        self.flags = dict(flags or {})
        self.calls: dict[Any, CompiledCall] = {}
        self.num_traces = 0
        self.last_fmt: Any = None
        self._params: dict | None = None

    def params(self) -> dict:
        if self._params is None:
            self._params = dict(self.block.collect_params().items())
        return self._params

    def __call__(self, *args: Any) -> Any:
        leaves, fmt = flatten(args, _is_array)
        if not leaves:
            raise PortableError(f"block {self.block.name!r}: a hybridized call needs at least "
                                f"one NDArray input")
        device = leaves[0].device
        training, recording = autograd.is_training(), autograd.is_recording()
        grad_key = None
        if recording:
            grad_key = (tuple(autograd.needs_grad(x) and x.dtype.kind == "f" for x in leaves),
                        tuple(p.grad_req for p in self.params().values()))
        key = (fmt, tuple((x.shape, x.dtype) for x in leaves), training, grad_key, device)
        call = self.calls.get(key)
        if call is None:
            call = self.calls[key] = self._compile(leaves, fmt, device, training, grad_key)
        return call.forward(leaves, recording)

    def trace(self, leaves: Sequence[Any], fmt: Any) -> tuple[Graph, list, Any]:
        """Trace the block on ``leaves`` (anything with ``shape`` and ``dtype``).

        Returns:
            The inference graph, the source of each graph input (``("leaf", index)`` or
            ``("param", Parameter)``) and the output structure.
        """
        from portable import symbol as sym

        names = self.block._input_names(len(leaves))
        args = regroup([sym.var(n) for n in names], fmt)
        out = split_symbols(self.block._symbolic_forward(*args))
        outs, out_fmt = flatten(out, lambda v: isinstance(v, sym.Symbol))
        self.num_traces += 1
        self.last_fmt = fmt
        params = self.params()
        shapes = {n: tuple(x.shape) for n, x in zip(names, leaves)}
        dtypes = {n: np.dtype(x.dtype) for n, x in zip(names, leaves)}
        for name, param in params.items():
            if param.shape is not None:
                shapes[name], dtypes[name] = param.shape, param.dtype
        graph = sym.Group(outs).to_graph(shapes, dtypes, name=self.block.name)
        sources: list[tuple[str, Any]] = []
        for name in graph.input_names:
            if name in names:
                sources.append(("leaf", names.index(name)))
            elif name in params:
                sources.append(("param", params[name]))
            else:
                raise PortableError(f"block {self.block.name!r}: hybrid_forward uses a "
                                    f"variable {name!r} that is neither an input nor a "
                                    f"parameter of the block")
        return graph, sources, out_fmt

    def _compile(self, leaves: Sequence[Any], fmt: Any, device: Device, training: bool,
                 grad_key: Any) -> CompiledCall:
        graph, sources, out_fmt = self.trace(leaves, fmt)
        wrt = []
        if grad_key is not None:
            leaf_needs = grad_key[0]
            for name, (kind, src) in zip(graph.input_names, sources):
                if kind == "leaf":
                    needed = leaf_needs[src]
                else:
                    needed = src.grad_req != "null" and src.dtype.kind == "f"
                if needed:
                    wrt.append(name)
        aux = set(_aux_names(graph))
        wrt = [n for n in wrt if n not in aux]
        plan = build_plan(graph, device, training, wrt)
        return CompiledCall(self.block.name, plan, sources, out_fmt, device)


def _aux_names(graph: Graph) -> list[str]:
    """Inputs that an op mutates (running statistics): never differentiated."""
    names = []
    for node in graph.nodes:
        for _, index in registry.get(node.op).mutates:
            if index < len(node.inputs) and node.inputs[index]:
                names.append(node.inputs[index])
    return names
