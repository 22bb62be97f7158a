"""Imperative op invocation: type rule now, kernel later on the dependency engine.

``invoke`` runs an op's type rule synchronously (so a shape error is raised at the call that
caused it, naming the op), allocates the outputs, and pushes the kernel to the engine with the
inputs' vars as reads and the outputs' vars as writes. It returns at once; reading an output
waits for it. View ops (Reshape, Flatten, ...) return an array sharing its input's storage and
engine var, as MXNet's reshape does. While autograd records, each call is put on the tape
(``portable.tape``).
"""
from __future__ import annotations

import functools
import math
from typing import Any, Sequence

import numpy as np

from portable import profiler, random, tape
from portable.backend import Backend, KernelContext, bound_kernel, needs_context
from portable.engine import get_engine
from portable.engine.base import INLINE, INLINE_ELEMENTS
from portable.errors import BackendError, PortableError, ShapeError
from portable.ir.graph import Node, TensorType
from portable.ndarray.ndarray import NDArray, array, kept_device
from portable.ops import registry

# (op, attrs, input types) -> (output types, resolved attrs), for calls whose rule read no value
_infer_cache: dict[Any, tuple[list, dict]] = {}
_rng_var = None
_kernel_nodes: dict[str, Node] = {}  # the Node a kernel sees in its context, per op


class _LazyValues:
    """Input values for a type rule, read (waiting for the engine) only when a rule asks."""

    def __init__(self, inputs: Sequence[Any]) -> None:
        self._inputs = inputs
        self.read = False

    def __len__(self) -> int:
        return len(self._inputs)

    def __getitem__(self, index: int) -> Any:
        array = self._inputs[index]
        if array is None:
            return None
        self.read = True
        host = array._host_value
        return host if host is not None else array.asnumpy()


def _freeze_key(attrs: dict) -> Any:
    try:
        key = tuple(sorted(attrs.items()))
        hash(key)
        return key
    except TypeError:  # array-valued attributes: not cached
        return None


def infer_outputs(op_name: str, op: registry.OpDef, inputs: Sequence[Any],
                  attrs: dict, num_outputs: int | None = None
                  ) -> tuple[list[TensorType | None], dict, int]:
    """Output types, resolved attributes and the default number of returned outputs of an
    imperative call (cached when the type rule read no input value).

    The op's ``runtime_attrs`` (a learning rate that changes every step) key the cache by
    name only, so per-call values neither miss the cache nor fill it; the values of this
    call are laid over the cached resolved attributes.
    """
    per_call = None
    if op.runtime_attrs and attrs:
        per_call = {k: v for k, v in attrs.items() if k in op.runtime_attrs}
        fixed = {k: v for k, v in attrs.items() if k not in per_call}
        attr_key = _freeze_key(fixed)
        attr_key = None if attr_key is None else (attr_key, tuple(sorted(per_call)))
    else:
        attr_key = _freeze_key(attrs) if attrs else ()
    key = None if attr_key is None else (
        op_name, attr_key, num_outputs,
        tuple([None if x is None else (x._data.shape, x._data.dtype) for x in inputs]))
    if key is not None:
        hit = _infer_cache.get(key)
        if hit is not None:
            if per_call:
                return hit[0], {**hit[1], **per_call}, hit[2]
            return hit
    types = tuple(None if x is None else TensorType(x.shape, x.dtype) for x in inputs)
    names = tuple(f"in{i}" if x is not None else "" for i, x in enumerate(inputs))
    count = op.attribute_output_count(attrs)
    if count is None and num_outputs is not None and op.outputs[-1].endswith("*"):
        count = num_outputs  # a variadic op told how many (Split by an input's sizes)
    outputs = tuple(f"out{i}" for i in range(len(op.outputs) if count is None else count))
    node = Node(op_name, names, outputs, attrs, name=op_name)
    op.check_arity(node)
    values = _LazyValues(inputs)
    ctx = registry.InferContext(node, op, types, values)
    try:
        out_types = list(op.infer(ctx))
    except PortableError:
        raise
    except Exception as exc:
        raise ShapeError(f"op {op_name}: type inference failed on inputs {list(types)}: "
                         f"{type(exc).__name__}: {exc}") from exc
    result = (out_types, ctx.attrs, default_output_count(op, out_types))
    if key is not None and not values.read and len(_infer_cache) < 65536:
        _infer_cache[key] = result
    return result


def _common_device(op_name: str, inputs: Sequence[Any]):
    first = None
    for x in inputs:  # a plain loop: this runs on every imperative op
        if x is not None:
            if first is None:
                first = x._device
            elif x._device is not first and x._device != first:
                break
    else:
        if first is not None:
            return first
    devices = {x.device for x in inputs if x is not None}
    if len(devices) > 1:
        raise BackendError(f"op {op_name}: inputs live on different devices "
                           f"{sorted(map(str, devices))}; move them with as_in_context()")
    if not devices:
        from portable.device import cpu

        return cpu()
    return devices.pop()


def rng_var():
    """The engine var that serialises every use of the random generator (reproducibility)."""
    global _rng_var
    if _rng_var is None or _rng_var._owner is not get_engine():
        _rng_var = get_engine().new_var("random")
    return _rng_var


def invoke(op_name: str, inputs: Sequence[Any], attrs: dict | None = None,
           num_outputs: int | None = None, out: Any = None) -> Any:
    """Apply ``op_name`` to NDArrays ``inputs``; returns an NDArray or a tuple of them.

    Args:
        op_name: qualified op name.
        inputs: NDArrays (None for absent optional inputs).
        attrs: node attributes.
        num_outputs: how many outputs to return (default: the op's required outputs).
        out: an existing NDArray to write the output into, or a tuple of them (None for an
            output to allocate), one per output: ``out=(weight, mom)`` runs an optimizer
            update in place. A tuple returns that many outputs at least.
    """
    if out is None:
        attr_key = _freeze_key(attrs) if attrs else ()
        if attr_key is not None:
            key = (op_name, attr_key, num_outputs,
                   tuple([None if x is None else (x._data.shape, x._data.dtype)
                          for x in inputs]))
            call = plain_calls.get(key)
            if call is None:
                call = _plain_call(key, op_name, inputs, attrs or {}, num_outputs)
                if len(plain_calls) < 65536:  # (a bound: shapes that change every call)
                    plain_calls[key] = call
            if call:
                return run_plain(call, op_name, inputs)
    op = registry.ops.get(op_name) or registry.get(op_name)
    attrs = attrs or {}
    extra: set[int] = set()  # outputs the caller did not ask for but the op must produce
    training = False
    if op.training_mode is not None:  # BatchNormalization, Dropout: follow autograd's mode
        training = tape.is_training()
        names = tuple(f"in{i}" if x is not None else "" for i, x in enumerate(inputs))
        node = op.training_mode(Node(op_name, names, ("out0",), attrs), training)
        op_name, attrs = node.op, dict(node.attrs)
        inputs = [inputs[int(n[2:])] if n else None for n in node.inputs]
        op = registry.get(op_name)
        extra = {i for i, name in enumerate(node.outputs) if name}  # e.g. Dropout's mask
    if training:
        extra |= {o for o, _ in op.mutates}
    out_types, resolved, default_count = infer_outputs(op_name, op, inputs, attrs, num_outputs)
    count = num_outputs if num_outputs is not None else default_count
    if isinstance(out, (tuple, list)):
        given, count = tuple(out), max(count, len(out))
    else:
        given = () if out is None else (out,)
    device = _common_device(op_name, inputs)
    backend = device.backend

    if op.view and out is None:
        source = inputs[0]
        shape = out_types[0].shape
        result = NDArray(backend.xp.reshape(source._data, shape), device, var=source._var)
        outputs = [result]
    else:
        produced = max([count] + [i + 1 for i in extra])
        outputs = []
        for i in range(produced):
            t = out_types[i] if i < len(out_types) else None
            target = given[i] if i < len(given) else None
            if target is not None:
                if t is None or target.shape != t.shape or target.dtype != t.dtype:
                    raise ShapeError(f"op {op_name}: out= has {target.dtype}"
                                     f"{list(target.shape)} for output {i}, the result is {t!r}")
                outputs.append(target)
            elif t is None or (i >= count and i not in extra):
                outputs.append(None)
            else:
                outputs.append(NDArray(backend.empty(t.shape, t.dtype), device))
        _push_kernel(op_name, op, backend, device, inputs, outputs, resolved, len(out_types))
        if training:
            for out_index, in_index in op.mutates:  # running statistics: write the new state
                state, new = inputs[in_index], outputs[out_index]
                if state is not None and new is not None:
                    new.copyto(state)

    if tape.is_recording():
        tape.record_op(op_name, op, resolved, inputs, outputs)
    return outputs[0] if count == 1 else tuple(outputs[:count])


class _PlainCall:
    """Everything an imperative call of one signature (op, attributes, input shapes and
    dtypes) resolves to but its arrays, for the calls that need nothing else: no ``out=``, no
    training mode, no view, a type rule that read no input value."""

    __slots__ = ("op", "attrs", "count", "alloc", "single", "pad", "inline", "types", "kernels",
                 "node", "last", "arity", "random")

    def __init__(self, op_name, op, attrs, count, alloc, declared, inline, types) -> None:
        self.op, self.attrs, self.count, self.alloc = op, attrs, count, alloc
        # The common call: one output, allocated (its shape and dtype), else None.
        self.single = alloc[0] if count == 1 and alloc[0] is not None else None
        self.pad = max(0, declared - count)  # outputs the kernel writes that nobody asked for
        self.inline = inline
        self.random = op.random  # (draws from the one generator: see rng_var)
        self.types = types      # (input types, output types) for the kernel's plan-time part
        # 1 or 2 when every input is present (the unary and binary calls, whose read lists
        # are built without a loop), else 0
        in_types = types[0]
        self.arity = len(in_types) if len(in_types) in (1, 2) and None not in in_types else 0
        # backend -> (kernel prepared for this signature, its idle contexts or None, new)
        self.kernels = {}
        self.node = _kernel_node(op_name)
        # (device, backend, kernel, contexts, new) of the last call: a run of calls on one
        # device (the usual case) finds them by the device's identity (see
        # ndarray.kept_device); ``new()`` allocates the single output (None: not one).
        self.last = (None,)

    def on(self, op_name: str, device) -> tuple:
        """``(device, backend, kernel, contexts, new)`` for a call on ``device``; the kernel
        is prepared for this signature on the device's backend's first call."""
        backend = device.backend
        bound = self.kernels.get(backend)
        if bound is None:
            kernel = bound_kernel(backend.kernel(op_name), backend, self.types[0],
                                  self.types[1], self.attrs)
            new = None if self.single is None else _allocator(backend, *self.single)
            # A context-free bound kernel (an elementwise op bound to its namespace function)
            # reads nothing from a context: its calls take none (None here).
            free = _free_contexts(backend) if needs_context(kernel) else None
            bound = self.kernels[backend] = (kernel, free, new)
        last = self.last = (device, backend) + bound
        return last


def _allocator(backend, shape: tuple, dtype: Any) -> Any:
    """A call that allocates one ``shape``/``dtype`` array on ``backend``: its namespace's
    ``empty`` itself where the backend allocates with it (a C call, not two Python ones)."""
    if type(backend).empty is Backend.empty:
        return functools.partial(backend.xp.empty, shape, dtype)
    return functools.partial(backend.empty, shape, dtype)


# (op, attrs, num_outputs, input shapes and dtypes) -> _PlainCall, or False for calls that
# take the general path. The operators (``x + y``) look their calls up here themselves and
# call run_plain: a tiny op costs about as much as the calls around it.
plain_calls: dict[Any, Any] = {}


def _plain_call(key: Any, op_name: str, inputs: Sequence[Any], attrs: dict,
                num_outputs: int | None) -> Any:
    """The _PlainCall of a new signature ``key`` (as ``infer_outputs`` keys its cache), or
    False when the call needs the general path."""
    op = registry.ops.get(op_name) or registry.get(op_name)
    if op.training_mode is not None or op.view or op.runtime_attrs or op.mutates:
        return False
    out_types, resolved, default_count = infer_outputs(op_name, op, inputs, attrs, num_outputs)
    if key not in _infer_cache:
        return False  # the type rule read input values: every call infers again
    count = num_outputs if num_outputs is not None else default_count
    alloc = [None if (i >= len(out_types) or out_types[i] is None)
             else (out_types[i].shape, out_types[i].dtype) for i in range(count)]
    inline = op.fusion != "opaque" and all(
        a is None or math.prod(a[0]) <= INLINE_ELEMENTS for a in alloc)
    in_types = [None if x is None else TensorType(x.shape, x.dtype) for x in inputs]
    return _PlainCall(op_name, op, resolved, count, alloc, len(out_types), inline,
                      (in_types, out_types))


def run_plain(call: _PlainCall, op_name: str, inputs: Sequence[Any]) -> Any:
    """Run a call of a known signature: allocate its outputs and push its kernel, with what
    the signature fixed (types, attributes, prepared kernel, inline or not) taken as given.
    Every small imperative op runs this, so the unary and binary calls with one output are
    spelled out without loops or helper calls."""
    arity = call.arity
    if arity == 2:
        a, b = inputs
        device = a._device
        if b._device is not device:  # (arrays keep one Device instance per device)
            device = _common_device(op_name, inputs)  # raises, naming the devices
        reads, in_data = [a._var, b._var], [a._data, b._data]
    elif arity == 1:
        a = inputs[0]
        device = a._device
        reads, in_data = [a._var], [a._data]
    else:
        device = None
        for x in inputs:
            if x is not None:
                if device is None:
                    device = x._device
                elif x._device is not device:
                    device = _common_device(op_name, inputs)
                    break
        if device is None:  # (no inputs: the default device)
            device = kept_device(_common_device(op_name, inputs))
        reads = [x._var for x in inputs if x is not None]
        in_data = [None if x is None else x._data for x in inputs]
    last = call.last
    if last[0] is not device:
        last = call.on(op_name, device)
    engine = get_engine()
    new = last[4]
    if new is not None:  # (the single-output call)
        data = new()
        var = engine.new_var("ndarray")
        result = NDArray(data, device, var)
        out_data, writes = [data], [var]
    else:
        backend = last[1]
        outputs, out_data, writes = [], [], []
        for alloc in call.alloc:
            if alloc is None:
                outputs.append(None)
                out_data.append(None)
            else:
                data = backend.empty(alloc[0], alloc[1])
                var = engine.new_var("ndarray")
                outputs.append(NDArray(data, device, var))
                out_data.append(data)
                writes.append(var)
        result = outputs[0] if call.count == 1 else tuple(outputs)
    if call.pad:
        out_data += [None] * call.pad
    if call.random:  # (one generator: its draws follow push order)
        reads.append(rng_var())
        writes.append(rng_var())
    if last[3] is None:  # (a context-free kernel: _launch's first case, without its call)
        engine.push(functools.partial(_run_context_free, op_name, last[2], in_data, out_data,
                                      call.attrs),
                    reads, writes, INLINE if call.inline else device, 0, op_name)
    else:
        _launch(engine, op_name, call.node, last[2], last[1], last[3],
                INLINE if call.inline else device, in_data, out_data, call.attrs, reads, writes)
    if tape.is_recording():
        tape.record_op(op_name, call.op, call.attrs, inputs,
                       [result] if new is not None else outputs)
    return result


def default_output_count(op: registry.OpDef, out_types: list) -> int:
    required = [o for o in op.outputs if not o.endswith(("?", "*"))]
    if any(o.endswith("*") for o in op.outputs):
        return len(out_types)
    if required:
        return len(required)
    return len([t for t in out_types if t is not None]) or 1


def _push_kernel(op_name, op, backend, device, inputs, outputs, attrs, declared_outputs):
    """Push the kernel of a call that took the general path (see ``run_plain`` for the
    others)."""
    out_data = [None if o is None else o._data for o in outputs]
    out_data += [None] * max(0, declared_outputs - len(outputs))
    reads = [x._var for x in inputs if x is not None]
    writes = [o._var for o in outputs if o is not None]
    if op.random:
        reads.append(rng_var())
        writes.append(rng_var())
    # A small elementwise or reduction op is cheaper to run than to hand to a worker: it runs
    # in the thread that makes it ready (at once, here, when its inputs are), keeping the
    # engine's order and deferred errors (the engine's INLINE device).
    if op.fusion != "opaque" and _small(out_data):
        device = INLINE
    # An input that is also the output (out=x) is listed in both: an in-place update; the
    # engine removes duplicates.
    _launch(get_engine(), op_name, _kernel_node(op_name), backend.kernel(op_name), backend,
            _free_contexts(backend), device, [None if x is None else x._data for x in inputs],
            out_data, attrs, reads, writes)


def _launch(engine, op_name, node, kernel, backend, free, device, in_data, out_data, attrs,
            reads, writes) -> None:
    """Push one kernel call on its arrays' vars; ``free``: its backend's idle contexts, or
    None for a kernel that takes no context (it is given None)."""
    if free is None:
        engine.push(functools.partial(_run_context_free, op_name, kernel, in_data, out_data,
                                      attrs), reads, writes, device, 0, op_name)
        return

    def run() -> None:
        try:
            ctx = free.pop()  # (atomic: another thread may take the last one first)
        except IndexError:
            ctx = KernelContext(backend.xp, None, backend)
        ctx.rng, ctx.node = random.generator(), node
        if ctx.workspace:  # (a kernel filled it: the next call starts empty)
            ctx.workspace = {}
        started = profiler.op_started()
        kernel(ctx, in_data, out_data, attrs)
        if started:
            profiler.op_finished(op_name, started)
        free.append(ctx)  # (not after a failure: a kernel may have kept it)

    engine.push(run, reads, writes, device, 0, op_name)


def _run_context_free(op_name, kernel, in_data, out_data, attrs) -> None:
    """The body of a pushed op whose kernel takes no context. Pushed as a partial, not a
    closure: it is made per imperative op, and a closure would turn the caller's variables it
    holds into cells, made on every call of the caller."""
    started = profiler.op_started()
    kernel(None, in_data, out_data, attrs)
    if started:
        profiler.op_finished(op_name, started)


def _kernel_node(op_name: str) -> Node:
    """The Node a kernel sees in its context (for its error messages), one per op."""
    node = _kernel_nodes.get(op_name)
    if node is None:
        node = _kernel_nodes[op_name] = Node(op_name, (), (), {}, name=op_name)
    return node


def _small(outputs: list) -> bool:
    return all(a is None or a.size <= INLINE_ELEMENTS for a in outputs)


# backend -> its idle kernel contexts. Making a context per op cost more than a tiny kernel. A
# context in use is off the list (list.pop and append are atomic), so no two running kernels,
# in one thread (a custom op's forward invoking ops) or in several, ever share one.
_contexts: dict[Any, list] = {}


def _free_contexts(backend) -> list:
    """The list of ``backend``'s idle kernel contexts."""
    free = _contexts.get(backend)
    if free is None:
        free = _contexts.setdefault(backend, [])
    return free


def constant_like(value: Any, like: Any) -> Any:
    """A host constant as an NDArray on ``like``'s device, with ``like``'s dtype for floats."""
    value = np.asarray(value)
    if value.dtype.kind == "f" or (value.dtype.kind in "iub" and like.dtype.kind == "f"):
        value = value.astype(like.dtype)
    return array(value, device=like.device, dtype=value.dtype)
